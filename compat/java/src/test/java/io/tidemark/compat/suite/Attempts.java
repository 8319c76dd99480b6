package io.tidemark.compat.suite;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.function.Supplier;
import java.util.stream.Collectors;

import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Every delivery of every message (bodies are unique within a test) as the listener saw it, with
 * its wall-clock arrival time. Wall clock, not nanoTime: the broker computes a delayed message's due
 * time from its store timestamp ({@code System.currentTimeMillis()} there), so lower bounds on
 * delays are only exact against the same clock. Warm-up messages are not recorded.
 */
final class Attempts {

    record Attempt(String body, String topic, int reconsumeTimes, long atMillis, int queueId, long queueOffset,
        String msgId, String retryTopic, int batchIndex, int batchSize) {
        @Override
        public String toString() {
            return body + "[topic=" + topic + " q" + queueId + "@" + queueOffset + " reconsume=" + reconsumeTimes
                + " batch " + batchIndex + "/" + batchSize + " at=" + atMillis + "]";
        }
    }

    private final ConcurrentLinkedQueue<Attempt> all = new ConcurrentLinkedQueue<>();

    /** Records one listener call; {@code msgs} is the batch in the order the client handed it over. */
    void record(List<MessageExt> msgs) {
        long now = System.currentTimeMillis();
        for (int i = 0; i < msgs.size(); i++) {
            MessageExt m = msgs.get(i);
            if (Msgs.WARMUP_TAG.equals(m.getTags())) {
                continue;
            }
            all.add(new Attempt(new String(m.getBody(), StandardCharsets.UTF_8), m.getTopic(), m.getReconsumeTimes(),
                now, m.getQueueId(), m.getQueueOffset(), m.getMsgId(),
                m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC), i, msgs.size()));
        }
    }

    /** Deliveries of {@code body}, in arrival order. */
    List<Attempt> of(String body) {
        return all.stream().filter(a -> a.body().equals(body)).toList();
    }

    int count(String body) {
        return of(body).size();
    }

    List<Attempt> all() {
        return List.copyOf(all);
    }

    void awaitCount(String body, int n, Duration timeout, Supplier<String> detail) {
        Wait.until(n + " deliveries of " + body, timeout, () -> count(body) >= n,
            () -> "got " + of(body) + detail.get());
    }

    String describe() {
        return all.stream().map(Attempt::toString).collect(Collectors.joining("\n  ", "\n  ", ""));
    }
}
