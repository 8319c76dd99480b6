package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.admin.ConsumeStats;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 9: examineConsumeStats reports, per queue, the broker (max) offset, the group's
 * committed offset and their difference, matching what the test sent and consumed. The expected
 * numbers come from the send results (queue id + queue offset of every message), so they are
 * independent of the broker's own bookkeeping.
 */
@Tag("tidemark")
class Scenario09ConsumeStatsTest extends SuiteBase {

    private static final int CONSUMED = 60;
    private static final int PENDING = 40;

    @Test
    void consumeStatsMatchWhatWasSentAndConsumed() throws Exception {
        String topic = Names.topic("s09");
        String group = Names.group("s09");
        DefaultMQProducer producer = clients.producer();

        Map<Integer, Long> expectedConsumer = new TreeMap<>();
        for (SendResult r : Msgs.sendAll(producer, topic, "t", "a", CONSUMED)) {
            expectedConsumer.merge(r.getMessageQueue().getQueueId(), r.getQueueOffset() + 1, Math::max);
        }
        Received received = new Received();
        DefaultMQPushConsumer c = clients.push(group, topic, "*", received.listener("c"));
        received.awaitAll(Msgs.bodies("a", CONSUMED), Duration.ofSeconds(30));
        // shutdown persists every queue's offset (oneway), so no waiting for the 5 s persist
        c.shutdown();

        List<SendResult> pending = Msgs.sendAll(producer, topic, "t", "b", PENDING);
        Map<Integer, Long> expectedBroker = new TreeMap<>(expectedConsumer);
        for (SendResult r : pending) {
            expectedBroker.merge(r.getMessageQueue().getQueueId(), r.getQueueOffset() + 1, Math::max);
        }
        for (Integer q : expectedBroker.keySet()) {
            expectedConsumer.putIfAbsent(q, 0L);
        }

        DefaultMQAdminExt admin = clients.admin();
        @SuppressWarnings("unchecked")
        Map<Integer, OffsetWrapper>[] stats = new Map[1];
        ConsumeStats[] raw = new ConsumeStats[1];
        // the final commits are oneway: poll briefly instead of assuming they were applied already
        Wait.until("consume stats to show the committed offsets", Duration.ofSeconds(15), () -> {
            raw[0] = Stats.examine(admin, group, topic, Duration.ofSeconds(10));
            stats[0] = Stats.byQueue(raw[0], topic);
            return Stats.consumerOffsets(stats[0]).equals(expectedConsumer)
                && Stats.brokerOffsets(stats[0]).equals(expectedBroker);
        }, () -> "expected consumer=" + expectedConsumer + " broker=" + expectedBroker + ", got "
            + Stats.describe(stats[0]) + serverLog());
        System.out.println("scenario9 stats=" + Stats.describe(stats[0]) + " diffTotal=" + raw[0].computeTotalDiff());

        assertEquals(expectedBroker, Stats.brokerOffsets(stats[0]), "brokerOffset per queue");
        assertEquals(expectedConsumer, Stats.consumerOffsets(stats[0]), "consumerOffset per queue");
        assertEquals(PENDING, raw[0].computeTotalDiff(), "total diff (brokerOffset - consumerOffset) for " + topic);
        assertEquals(stats[0].size(), raw[0].getOffsetTable().size(),
            "examineConsumeStats(group, topic) must only report " + topic + ": " + raw[0].getOffsetTable().keySet());

        // without a topic the broker reports every topic the group has offsets for (including
        // %RETRY%<group>, which is empty); the lag stays the same
        ConsumeStats everything = Stats.examine(admin, group, null, Duration.ofSeconds(10));
        assertEquals(Stats.consumerOffsets(stats[0]), Stats.consumerOffsets(Stats.byQueue(everything, topic)),
            "examineConsumeStats(group) must report the same offsets for " + topic);
        assertEquals(PENDING, everything.computeTotalDiff(),
            "total diff over all of the group's topics: " + everything.getOffsetTable());
    }
}
