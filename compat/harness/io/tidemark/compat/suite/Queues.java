package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collections;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Supplier;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageQueue;

/** A topic's queues as a producer and a group's push consumers see them (the same API in 4.9 and 5.x). */
final class Queues {
    private Queues() {
    }

    /** The queue ids {@code producer} publishes {@code topic} to; fails unless there are {@code atLeast}. */
    static Set<Integer> ids(DefaultMQProducer producer, String topic, int atLeast) throws Exception {
        Set<Integer> ids = new TreeSet<>();
        for (MessageQueue mq : producer.fetchPublishMessageQueues(topic)) {
            ids.add(mq.getQueueId());
        }
        assertTrue(ids.size() >= atLeast, "need at least " + atLeast + " queues, topic has " + ids);
        return ids;
    }

    /** Queues of {@code topic} this push consumer currently owns (its rebalance result). */
    static Set<Integer> owned(DefaultMQPushConsumer consumer, String topic) {
        Set<Integer> owned = new TreeSet<>();
        for (MessageQueue mq : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable()
            .keySet()) {
            if (mq.getTopic().equals(topic)) {
                owned.add(mq.getQueueId());
            }
        }
        return owned;
    }

    /**
     * Until {@code first} and {@code second} own disjoint, non-empty parts of {@code all} that make
     * up all of it, and have for {@code stableFor} (zero: as soon as they do).
     */
    static void awaitSplit(DefaultMQPushConsumer first, DefaultMQPushConsumer second, String topic,
        Set<Integer> all, Duration stableFor, Supplier<String> serverLog) {
        long[] splitSince = {0};
        Wait.until("the two consumers to split " + all + " between them", Duration.ofSeconds(45), () -> {
            Set<Integer> mine = owned(first, topic);
            Set<Integer> theirs = owned(second, topic);
            Set<Integer> union = new TreeSet<>(mine);
            union.addAll(theirs);
            boolean split = !mine.isEmpty() && !theirs.isEmpty() && Collections.disjoint(mine, theirs)
                && union.equals(all);
            if (!split) {
                splitSince[0] = 0;
                return false;
            }
            if (splitSince[0] == 0) {
                splitSince[0] = System.nanoTime();
            }
            return System.nanoTime() - splitSince[0] >= stableFor.toNanos();
        }, () -> "first owns " + owned(first, topic) + ", second owns " + owned(second, topic)
            + " (needs GET_CONSUMER_LIST_BY_GROUP to list both client ids)" + serverLog.get());
    }
}
