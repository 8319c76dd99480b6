package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.time.Duration;
import java.util.Map;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.admin.ConsumeStats;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.common.admin.TopicOffset;
import org.apache.rocketmq.common.admin.TopicStatsTable;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 15: what failures leave behind is visible to the admin tools. With
 * {@code maxReconsumeTimes = 1}, "once" fails once and then succeeds, "dead" fails twice: both
 * pass through {@code %RETRY%<group>} once (2 messages there), "dead" ends in {@code %DLQ%<group>}.
 * {@code examineConsumeStats(group)} must then list the retry topic's queue(s) with those 2
 * messages (broker offset) and the group's commit over them, and {@code examineTopicStats} on the
 * DLQ must show its one message.
 */
@Tag("tidemark")
@DevArgs({"--message-delay-level", DevArgs.SHORT_DELAY_LEVELS})
class Scenario15RetryDepthVisibleTest extends SuiteBase {

    @Test
    void retryAndDeadLetterDepthShowInAdminStats() throws Exception {
        String topic = Names.topic("s15");
        String group = Names.group("s15");
        String retry = MixAll.getRetryTopic(group);
        String dlq = MixAll.getDLQTopic(group);
        DefaultMQProducer producer = clients.producer();
        DefaultMQAdminExt admin = clients.admin();
        clients.primeRetryTopic(admin, group, topic);
        Msgs.sendOk(producer, Msgs.message(topic, "t", "once"));
        Msgs.sendOk(producer, Msgs.message(topic, "t", "dead"));

        Attempts attempts = new Attempts();
        MessageListenerConcurrently listener = (msgs, ctx) -> {
            attempts.record(msgs);
            boolean fail = msgs.stream()
                .anyMatch(m -> Msgs.bodyOf(m).equals("dead") || m.getReconsumeTimes() == 0);
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        DefaultMQPushConsumer consumer = clients.push(group, topic, "*", listener, c -> c.setMaxReconsumeTimes(1));
        Clients.awaitOwnsRetryQueue(consumer, SuiteBase::serverLog);
        attempts.awaitCount("once", 2, Duration.ofSeconds(40), SuiteBase::serverLog);
        attempts.awaitCount("dead", 2, Duration.ofSeconds(40), SuiteBase::serverLog);

        ConsumeStats[] cs = new ConsumeStats[1];
        // The client persists its offsets every 5 s, first 10 s after it started, one oneway update
        // per queue: ask for that persist on every look instead of waiting for the timer (the same
        // requests), and wait until the retry topic's commit and the topic's have both arrived.
        Wait.until("examineConsumeStats(" + group + ") to show " + retry + " and " + topic + " consumed",
            Duration.ofSeconds(30), () -> {
            consumer.getDefaultMQPushConsumerImpl().persistConsumerOffset();
            cs[0] = Stats.examine(admin, group, null, Duration.ofSeconds(10));
            Map<Integer, OffsetWrapper> r = Stats.byQueue(cs[0], retry);
            Map<Integer, OffsetWrapper> t = Stats.byQueue(cs[0], topic);
            return sum(Stats.brokerOffsets(r)) == 2 && sum(Stats.consumerOffsets(r)) == 2
                && sum(Stats.brokerOffsets(t)) == 2 && sum(Stats.consumerOffsets(t)) == 2
                && cs[0].computeTotalDiff() == 0;
        }, () -> "last " + cs[0].getOffsetTable() + serverLog());
        Map<Integer, OffsetWrapper> retryQueues = Stats.byQueue(cs[0], retry);
        Map<Integer, OffsetWrapper> topicQueues = Stats.byQueue(cs[0], topic);

        TopicStatsTable[] dlqStats = new TopicStatsTable[1];
        Wait.until(dlq + " stats", Duration.ofSeconds(20), () -> {
            try {
                dlqStats[0] = admin.examineTopicStats(dlq);
            } catch (Exception e) {
                return false;
            }
            return dlqStats[0].getOffsetTable().values().stream().mapToLong(TopicOffset::getMaxOffset).sum() >= 1;
        }, () -> "last " + Stats.describeTopic(dlqStats[0]) + serverLog());
        long dlqDepth = dlqStats[0].getOffsetTable().values().stream()
            .mapToLong(o -> o.getMaxOffset() - o.getMinOffset()).sum();
        System.out.println("scenario15 " + retry + "=" + Stats.describe(retryQueues) + " " + topic + "="
            + Stats.describe(topicQueues) + " " + dlq + " depth=" + dlqDepth + " " + Stats.describeTopic(dlqStats[0]));

        assertFalse(retryQueues.isEmpty(), "examineConsumeStats(group) must list " + retry + ": "
            + cs[0].getOffsetTable());
        assertEquals(2, sum(Stats.brokerOffsets(retryQueues)), retry + " broker offsets (2 messages retried once): "
            + Stats.describe(retryQueues));
        assertEquals(2, sum(Stats.brokerOffsets(topicQueues)), topic + " broker offsets: " + Stats.describe(topicQueues));
        assertEquals(0, cs[0].computeTotalDiff(), "nothing left to consume: " + cs[0].getOffsetTable());
        assertEquals(1, dlqDepth, dlq + " depth: " + Stats.describeTopic(dlqStats[0]));
        assertEquals(2, attempts.count("once"), "deliveries of once:" + attempts.describe());
        assertEquals(2, attempts.count("dead"), "deliveries of dead (maxReconsumeTimes=1):" + attempts.describe());
    }

    private static long sum(Map<Integer, Long> m) {
        return m.values().stream().mapToLong(Long::longValue).sum();
    }
}
