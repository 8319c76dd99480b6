package io.tidemark.compat.suite;

import java.time.Duration;
import java.util.Map;
import java.util.TreeMap;

import org.apache.rocketmq.common.admin.ConsumeStats;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.common.admin.TopicStatsTable;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * examineConsumeStats helpers. The admin call first asks the name server for the route of
 * {@code %RETRY%<group>} and then sends GET_CONSUME_STATS to each broker in it.
 */
final class Stats {
    private Stats() {
    }

    /** Retries (route not registered yet, broker restarting) until {@code timeout}. */
    static ConsumeStats examine(DefaultMQAdminExt admin, String group, String topic, Duration timeout) {
        return Wait.retrying("examineConsumeStats(" + group + ", " + topic + ")", timeout,
            () -> topic == null ? admin.examineConsumeStats(group) : admin.examineConsumeStats(group, topic));
    }

    /** The entries of {@code topic}, by queue id. */
    static Map<Integer, OffsetWrapper> byQueue(ConsumeStats cs, String topic) {
        Map<Integer, OffsetWrapper> m = new TreeMap<>();
        for (Map.Entry<MessageQueue, OffsetWrapper> e : cs.getOffsetTable().entrySet()) {
            if (e.getKey().getTopic().equals(topic)) {
                m.put(e.getKey().getQueueId(), e.getValue());
            }
        }
        return m;
    }

    static Map<Integer, Long> consumerOffsets(Map<Integer, OffsetWrapper> m) {
        Map<Integer, Long> r = new TreeMap<>();
        m.forEach((q, w) -> r.put(q, w.getConsumerOffset()));
        return r;
    }

    static Map<Integer, Long> brokerOffsets(Map<Integer, OffsetWrapper> m) {
        Map<Integer, Long> r = new TreeMap<>();
        m.forEach((q, w) -> r.put(q, w.getBrokerOffset()));
        return r;
    }

    /** examineTopicStats output as {@code { q0: min=.. max=.. } } (TopicOffset has no toString). */
    static String describeTopic(TopicStatsTable t) {
        if (t == null) {
            return "none";
        }
        StringBuilder sb = new StringBuilder("{");
        new TreeMap<>(t.getOffsetTable()).forEach((mq, o) -> sb.append(" q").append(mq.getQueueId()).append(": min=")
            .append(o.getMinOffset()).append(" max=").append(o.getMaxOffset()));
        return sb.append(" }").toString();
    }

    static String describe(Map<Integer, OffsetWrapper> m) {
        StringBuilder sb = new StringBuilder("{");
        m.forEach((q, w) -> sb.append(" q").append(q).append(": broker=").append(w.getBrokerOffset())
            .append(" consumer=").append(w.getConsumerOffset()).append(" lastTs=").append(w.getLastTimestamp()));
        return sb.append(" }").toString();
    }
}
