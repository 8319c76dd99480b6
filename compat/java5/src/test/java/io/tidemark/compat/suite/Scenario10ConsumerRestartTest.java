package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.store.OffsetStore;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 10.5 (scenario 5 with the 5.x client): a consumer shut down mid-stream and a new
 * instance in the same group resumes from the committed offsets: nothing lost, and duplicates
 * limited to what was in flight.
 *
 * <p>Same bound as compat/java's Scenario05: consumer A runs with one consume thread and
 * consumeMessageBatchMaxSize 1; its shutdown stops the consume pool, sends every queue's
 * in-memory offset (oneway UPDATE_CONSUMER_OFFSET) and then UNREGISTER_CLIENT, so at most
 * threads × batch = 1 consumed message can be missing from those final commits. The test allows
 * 2 × that (timing slack). The broker's offsets are read back with QUERY_CONSUMER_OFFSET
 * directly (the 4.9 suite uses the admin's GET_CONSUME_STATS), so no rocketmq-tools is needed.
 */
@Tag("tidemark")
class Scenario10ConsumerRestartTest extends SuiteBase {

    private static final int FIRST_BATCH = 200;
    private static final int CONSUME_BEFORE_SHUTDOWN = 100;
    private static final int SECOND_BATCH = 50;
    private static final int THREADS = 1;
    private static final int BATCH = 1;
    private static final int ALLOWED_DUPLICATES = 2 * THREADS * BATCH;

    @Test
    void restartedConsumerResumesFromCommittedOffsets() throws Exception {
        String topic = Names.topic("s10_5");
        String group = Names.group("s10_5");
        DefaultMQProducer producer = clients.producer();
        Msgs.sendAll(producer, topic, "t", "m", FIRST_BATCH);

        Set<String> consumedByA = ConcurrentHashMap.newKeySet();
        AtomicInteger entered = new AtomicInteger();
        AtomicInteger returned = new AtomicInteger();
        MessageListenerConcurrently slow = (msgs, ctx) -> {
            entered.incrementAndGet();
            for (MessageExt m : msgs) {
                consumedByA.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            // slow enough that A is stopped mid-stream; parkNanos (not sleep) so the interrupt
            // from the pool's shutdownNow cannot turn this into a failed consumption (send-back)
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(5));
            returned.incrementAndGet();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        DefaultMQPushConsumer a = clients.push(group, topic, "*", slow, c -> {
            c.setConsumeThreadMin(THREADS);
            c.setConsumeThreadMax(THREADS);
            c.setConsumeMessageBatchMaxSize(BATCH);
        });
        Wait.until(CONSUME_BEFORE_SHUTDOWN + " messages consumed by A", Duration.ofSeconds(30),
            () -> consumedByA.size() >= CONSUME_BEFORE_SHUTDOWN, () -> "A consumed " + consumedByA.size() + serverLog());
        int inflight = entered.get() - returned.get();
        a.shutdown();
        int consumedA = consumedByA.size();
        assertTrue(consumedA < FIRST_BATCH,
            "A was meant to stop mid-stream but consumed all " + consumedA + "; the test needs a slower listener");

        // A's final commits are oneway frames on A's (now closed) connection; wait until the
        // broker holds what A's offset store sent, less the allowed in-flight slack.
        OffsetStore store = a.getDefaultMQPushConsumerImpl().getOffsetStore();
        List<MessageQueue> queues = new ArrayList<>(producer.fetchPublishMessageQueues(topic));
        Map<Integer, Long> sentByA = new TreeMap<>();
        for (MessageQueue mq : queues) {
            sentByA.put(mq.getQueueId(), Math.max(0, store.readOffset(mq, ReadOffsetType.READ_FROM_MEMORY)));
        }
        long wanted = sentByA.values().stream().mapToLong(Long::longValue).sum() - ALLOWED_DUPLICATES;
        Map<Integer, Long> atBroker = new TreeMap<>();
        Wait.until("the broker to apply A's final offset commits", Duration.ofSeconds(10), () -> {
            try {
                for (MessageQueue mq : queues) {
                    atBroker.put(mq.getQueueId(),
                        Clients.brokerConsumerOffset(producer, tidemark.brokerAddr(), group, mq));
                }
            } catch (Exception e) {
                throw new AssertionError("QUERY_CONSUMER_OFFSET failed: " + e + serverLog(), e);
            }
            return atBroker.values().stream().mapToLong(v -> Math.max(0, v)).sum() >= wanted;
        }, () -> "A's offset store holds " + sentByA + ", the broker " + atBroker + serverLog());

        Msgs.sendAll(producer, topic, "t", "n", SECOND_BATCH);
        List<String> all = new ArrayList<>(Msgs.bodies("m", FIRST_BATCH));
        all.addAll(Msgs.bodies("n", SECOND_BATCH));
        Set<String> expectedForB = new TreeSet<>(all);
        expectedForB.removeAll(consumedByA);

        Received b = new Received();
        clients.push(group, topic, "*", b.listener("B"));
        b.awaitAll(expectedForB, Duration.ofSeconds(30));
        b.awaitQuiet(Duration.ofSeconds(2), Duration.ofSeconds(20));

        Set<String> redone = new TreeSet<>(b.bodies());
        redone.retainAll(consumedByA);
        int duplicates = redone.size() + b.duplicates().size();
        System.out.println("scenario10.5 duplicates=" + duplicates + " inflight=" + inflight + " consumedByA="
            + consumedA + " bound=" + ALLOWED_DUPLICATES + " offsetsA=" + sentByA + " offsetsBroker=" + atBroker);

        Set<String> union = new TreeSet<>(consumedByA);
        union.addAll(b.bodies());
        assertEquals(new TreeSet<>(all), union, "no message may be lost across the consumer restart");
        assertTrue(duplicates <= ALLOWED_DUPLICATES,
            "B re-consumed " + duplicates + " messages A had already consumed (allowed " + ALLOWED_DUPLICATES
                + "): " + Received.describe(redone) + "; the broker must keep A's final oneway commits");
        assertEquals(0, b.duplicates().size(), "B itself got duplicates: " + b.duplicates());
    }
}
