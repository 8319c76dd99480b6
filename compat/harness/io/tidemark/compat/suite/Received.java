package io.tidemark.compat.suite;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Thread-safe record of every delivery, keyed by message body (bodies are unique within a test).
 * Messages tagged {@link Msgs#WARMUP_TAG} (sent only to make the broker auto-create a topic) are
 * not recorded.
 */
final class Received {

    record Delivery(String consumer, String body, String tags, int queueId, long queueOffset, String msgId) {
    }

    private final ConcurrentLinkedQueue<Delivery> all = new ConcurrentLinkedQueue<>();
    private final Map<String, AtomicInteger> counts = new ConcurrentHashMap<>();
    private final AtomicLong lastArrivalNanos = new AtomicLong(System.nanoTime());

    /** A concurrent listener that records under {@code consumer} and always acknowledges. */
    MessageListenerConcurrently listener(String consumer) {
        return (msgs, ctx) -> {
            record(consumer, msgs);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
    }

    void record(String consumer, List<MessageExt> msgs) {
        for (MessageExt m : msgs) {
            if (Msgs.WARMUP_TAG.equals(m.getTags())) {
                continue;
            }
            String body = new String(m.getBody(), StandardCharsets.UTF_8);
            all.add(new Delivery(consumer, body, m.getTags(), m.getQueueId(), m.getQueueOffset(), m.getMsgId()));
            counts.computeIfAbsent(body, k -> new AtomicInteger()).incrementAndGet();
            lastArrivalNanos.set(System.nanoTime());
        }
    }

    int distinct() {
        return counts.size();
    }

    int total() {
        return all.size();
    }

    Set<String> bodies() {
        return new TreeSet<>(counts.keySet());
    }

    Set<String> bodiesOf(String consumer) {
        return all.stream().filter(d -> d.consumer().equals(consumer)).map(Delivery::body)
            .collect(Collectors.toCollection(TreeSet::new));
    }

    long countOf(String consumer) {
        return all.stream().filter(d -> d.consumer().equals(consumer)).count();
    }

    List<Delivery> deliveries() {
        return new ArrayList<>(all);
    }

    /** Bodies delivered more than once, with their delivery counts. */
    Map<String, Integer> duplicates() {
        Map<String, Integer> d = new TreeMap<>();
        counts.forEach((b, c) -> {
            if (c.get() > 1) {
                d.put(b, c.get());
            }
        });
        return d;
    }

    void awaitDistinct(int n, Duration timeout) {
        Wait.until(n + " distinct messages", timeout, () -> distinct() >= n,
            () -> "got " + distinct() + " distinct (" + total() + " deliveries)");
    }

    void awaitAll(Collection<String> expected, Duration timeout) {
        Wait.until(expected.size() + " expected messages", timeout, () -> counts.keySet().containsAll(expected),
            () -> "missing " + describe(missing(expected)));
    }

    /** Waits until nothing new arrived for {@code quiet}, so late duplicates get counted too. */
    void awaitQuiet(Duration quiet, Duration timeout) {
        Wait.until("deliveries to stop", timeout,
            () -> System.nanoTime() - lastArrivalNanos.get() >= quiet.toNanos());
    }

    Set<String> missing(Collection<String> expected) {
        Set<String> m = new TreeSet<>(expected);
        m.removeAll(counts.keySet());
        return m;
    }

    static String describe(Collection<String> bodies) {
        if (bodies.size() <= 20) {
            return bodies.size() + " " + bodies;
        }
        return bodies.size() + " (first 20: " + bodies.stream().limit(20).toList() + ")";
    }
}
