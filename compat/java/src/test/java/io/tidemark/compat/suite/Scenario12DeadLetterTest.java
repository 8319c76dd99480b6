package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.admin.TopicOffset;
import org.apache.rocketmq.common.admin.TopicStatsTable;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.route.QueueData;
import org.apache.rocketmq.common.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 12: with {@code maxReconsumeTimes = 2} a message that always fails is delivered three
 * times (reconsumeTimes 0, 1, 2; the retries 3 s and 4 s after the failures, levels 3 and 4), and
 * the third send-back (reconsumeTimes 2 ≥ 2) puts it into {@code %DLQ%<group>} (1 queue) instead
 * of retrying it again. The DLQ's perm is checked last: older 4.x brokers created it write-only (2;
 * apache/rocketmq#3327 still reports that for 4.9.1); 4.9.7, the reference, creates it read-write
 * (6, {@code PERM_WRITE | PERM_READ} in {@code SendMessageProcessor}, apache/rocketmq#2437), so
 * dead letters can be read back with the admin tools. Tidemark does not serve
 * viewMessage/queryMessage, so the DLQ is checked through GET_TOPIC_STATS_INFO (examineTopicStats).
 */
@Tag("tidemark")
@DevArgs({"--message-delay-level", DevArgs.SHORT_DELAY_LEVELS})
class Scenario12DeadLetterTest extends SuiteBase {

    private static final int MAX_RECONSUME = 2;
    /** Level 3 + reconsumeTimes with {@link DevArgs#SHORT_DELAY_LEVELS}: 3 s, then 4 s. */
    private static final long[] RETRY_MS = {3_000, 4_000};
    /** Sanity cap per retry; see Scenario11RetryTest.UPPER_MS. */
    private static final long UPPER_MS = 20_000;
    /** A wrongful 4th delivery would be level 5 = 5 s after the third failure; watch for longer. */
    private static final long NO_FOURTH_MS = 8_000;

    @Test
    void alwaysFailingMessageEndsInTheDeadLetterQueue() throws Exception {
        String topic = Names.topic("s12");
        String group = Names.group("s12");
        String dlq = MixAll.getDLQTopic(group);
        DefaultMQProducer producer = clients.producer();
        DefaultMQAdminExt admin = clients.admin();
        clients.primeRetryTopic(admin, group, topic);
        Msgs.sendOk(producer, Msgs.message(topic, "t", "d-0"));

        Attempts attempts = new Attempts();
        MessageListenerConcurrently listener = (msgs, ctx) -> {
            attempts.record(msgs);
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        };
        DefaultMQPushConsumer consumer =
            clients.push(group, topic, "*", listener, c -> c.setMaxReconsumeTimes(MAX_RECONSUME));
        Clients.awaitOwnsRetryQueue(consumer, SuiteBase::serverLog);
        attempts.awaitCount("d-0", MAX_RECONSUME + 1, Duration.ofSeconds(60), SuiteBase::serverLog);
        long thirdAt = attempts.of("d-0").get(MAX_RECONSUME).atMillis();

        // the last send-back goes to the DLQ; the broker registers the new topic with the name server
        TopicStatsTable[] stats = new TopicStatsTable[1];
        Wait.until(dlq + " to hold the message", Duration.ofSeconds(20), () -> {
            try {
                stats[0] = admin.examineTopicStats(dlq);
            } catch (Exception e) {
                return false; // no route yet
            }
            return stats[0].getOffsetTable().values().stream().mapToLong(TopicOffset::getMaxOffset).sum() >= 1;
        }, () -> "last stats " + Stats.describeTopic(stats[0]) + serverLog());

        long wait = thirdAt + NO_FOURTH_MS - System.currentTimeMillis();
        if (wait > 0) {
            Wait.sleep(wait);
        }
        List<Attempts.Attempt> a = attempts.of("d-0");
        StringBuilder delays = new StringBuilder();
        for (int i = 1; i < a.size(); i++) {
            delays.append(i == 1 ? "" : ", ").append(a.get(i).atMillis() - a.get(i - 1).atMillis()).append(" ms");
        }
        System.out.println("scenario12 retries after " + delays + "; " + dlq + " stats " + Stats.describeTopic(stats[0]));

        assertEquals(MAX_RECONSUME + 1, a.size(), "deliveries with maxReconsumeTimes=" + MAX_RECONSUME
            + " (a 4th means the last send-back was retried instead of dead-lettered): " + a + serverLog());
        for (int i = 0; i < a.size(); i++) {
            assertEquals(i, a.get(i).reconsumeTimes(), "reconsumeTimes of delivery " + (i + 1) + ": " + a);
            assertEquals(topic, a.get(i).topic(), "topic of delivery " + (i + 1));
        }
        for (int i = 0; i < RETRY_MS.length; i++) {
            long d = a.get(i + 1).atMillis() - a.get(i).atMillis();
            assertTrue(d >= RETRY_MS[i], "retry " + (i + 1) + " came " + d + " ms after the failure, before its level ("
                + RETRY_MS[i] + " ms) was due" + serverLog());
            assertTrue(d < UPPER_MS, "retry " + (i + 1) + " came only " + d + " ms after the failure" + serverLog());
        }

        Map<MessageQueue, TopicOffset> dlqQueues = stats[0].getOffsetTable();
        assertEquals(1, dlqQueues.size(), dlq + " queues: " + Stats.describeTopic(stats[0]));
        MessageQueue q = dlqQueues.keySet().iterator().next();
        assertEquals(0, q.getQueueId(), dlq + " queue id");
        assertEquals(0, dlqQueues.get(q).getMinOffset(), dlq + " min offset");
        assertEquals(1, dlqQueues.get(q).getMaxOffset(), dlq + " max offset (exactly the one dead message)");

        TopicRouteData route = admin.examineTopicRouteInfo(dlq);
        assertEquals(1, route.getQueueDatas().size(), dlq + " route: " + route);
        QueueData qd = route.getQueueDatas().get(0);
        assertEquals(1, qd.getWriteQueueNums(), dlq + " write queues: " + qd);
        assertEquals(1, qd.getReadQueueNums(), dlq + " read queues: " + qd);
        assertEquals(6, qd.getPerm(), dlq + " perm: RocketMQ 4.9.7 creates the DLQ with PERM_WRITE | PERM_READ"
            + " (older 4.x used PERM_WRITE = 2): " + qd);
    }
}
