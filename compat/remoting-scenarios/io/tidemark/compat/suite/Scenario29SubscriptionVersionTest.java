package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Field;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.locks.Lock;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 29, in both remoting suites: a consumer whose rebalance heartbeat never went out.
 *
 * <p>A Java push consumer raises its subscription version whenever its queues change and sends a
 * heartbeat at once, but only if no other heartbeat of its client holds the client's heartbeat
 * lock; otherwise the broker learns the version with the next periodic heartbeat, 30 s later.
 * Until then the broker refuses its pulls (SUBSCRIPTION_NOT_LATEST) and its queues starve: the
 * cause of two flaky CI runs. Here the test holds that lock while a second consumer leaves, so
 * the first one's rebalance heartbeat is skipped for sure. Tidemark asks the consumer for its
 * subscriptions (GET_CONSUMER_RUNNING_INFO) when it refuses such a pull, so every message is
 * consumed while the lock is still held; Apache's broker waits for the heartbeat (printed, not
 * asserted, in the reference run).
 */
@Tag("tidemark")
class Scenario29SubscriptionVersionTest extends SuiteBase {

    private static final int COUNT = 40;

    @Test
    void aSkippedRebalanceHeartbeatDoesNotStarveTheQueues() throws Exception {
        String topic = Names.topic("s29");
        String group = Names.group("s29");
        DefaultMQProducer producer = clients.producer();
        Msgs.warmUp(producer, topic);
        Set<Integer> allQueues = Queues.ids(producer, topic, 2);

        Received received = new Received();
        DefaultMQPushConsumer first = clients.push(group, topic, "*", received.listener("first"));
        Wait.until("the first consumer to own every queue", Duration.ofSeconds(30),
            () -> Clients.ownedQueues(first, topic).equals(allQueues));

        DefaultMQPushConsumer second = clients.push(group, topic, "*", received.listener("second"));
        Queues.awaitSplit(first, second, topic, allQueues, Duration.ZERO, SuiteBase::serverLog);

        // The broker keeps the group's newest version, whichever member sent it: the first
        // consumer's rebalance must come last, so the second one leaves while the lock is held.
        Lock heartbeat = heartbeatLock(first);
        heartbeat.lock();
        try {
            long before = subVersion(first, topic);
            second.shutdown();
            Wait.until("the first consumer to own every queue again", Duration.ofSeconds(30),
                () -> Clients.ownedQueues(first, topic).equals(allQueues) && subVersion(first, topic) > before,
                () -> "first owns " + Clients.ownedQueues(first, topic) + serverLog());

            long started = System.nanoTime();
            Msgs.sendAll(producer, topic, "t", "m", COUNT);
            List<String> expected = Msgs.bodies("m", COUNT);
            if (againstApacheReference()) {
                // Apache waits for the heartbeat the test holds back: print what it served meanwhile.
                long deadline = System.nanoTime() + Duration.ofSeconds(15).toNanos();
                while (System.nanoTime() < deadline && !received.bodies().containsAll(expected)) {
                    Thread.sleep(200);
                }
                System.out.println("scenario29 against Apache: " + received.bodies().size() + " of " + COUNT
                    + " messages consumed in 15 s with the first consumer's heartbeat held");
                return;
            }
            received.awaitAll(expected, Duration.ofSeconds(20));
            long tookMs = (System.nanoTime() - started) / 1_000_000;
            System.out.println("scenario29 against Tidemark: " + COUNT + " messages consumed in " + tookMs
                + " ms with the first consumer's heartbeat held");
            assertEquals(new TreeSet<>(expected), received.bodies(), "all messages");
        } finally {
            heartbeat.unlock();
        }
    }

    /** The lock a client's heartbeats take ({@code MQClientInstance.lockHeartbeat}). */
    private static Lock heartbeatLock(DefaultMQPushConsumer consumer) throws Exception {
        MQClientInstance instance = consumer.getDefaultMQPushConsumerImpl().getmQClientFactory();
        Field field = MQClientInstance.class.getDeclaredField("lockHeartbeat");
        field.setAccessible(true);
        return (Lock) field.get(instance);
    }

    private static long subVersion(DefaultMQPushConsumer consumer, String topic) {
        return consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getSubscriptionInner().get(topic)
            .getSubVersion();
    }
}
