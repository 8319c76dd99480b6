package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 14: producer-side delay levels. Messages sent with {@code setDelayTimeLevel(1..3)} are
 * parked in SCHEDULE_TOPIC_XXXX and reach the consumer no earlier than 1 s / 2 s / 3 s after the
 * send. A level-3 message still pending when the broker is stopped gracefully (SIGTERM right after
 * the send) is delivered after the restart, exactly once: the schedule progress must be persisted
 * at shutdown, and the pending message neither lost nor replayed.
 *
 * <p>The consumer stays up across the restart (it reconnects by itself), so a duplicate cannot come
 * from consumer offsets; only a scheduled message delivered twice would show up twice. The 4.9
 * client does not fail a long-poll PULL_MESSAGE whose connection closed; it times out after 30 s
 * ({@code CONSUMER_TIMEOUT_MILLIS_WHEN_SUSPEND}) and the pull is retried 3 s later, so the pending
 * message typically arrives ~33 s after the send, whatever the broker does.
 */
@Tag("tidemark")
@DevArgs({"--message-delay-level", DevArgs.SHORT_DELAY_LEVELS})
class Scenario14DelayLevelTest extends SuiteBase {

    /**
     * Sanity cap on each delay beyond its level. The lower bound is exact: the due time is the
     * broker's store time + the level, and the send starts before the store. Above it there is the
     * broker's schedule scan (Apache: 100 ms), the consumer's long poll, and load.
     */
    private static final long SLACK_MS = 15_000;
    /** How long the restarted broker is watched for a second delivery of the pending message. */
    private static final long QUIET_MS = 5_000;

    @Test
    void delayedMessagesWaitForTheirLevelAndSurviveARestart() throws Exception {
        String topic = Names.topic("s14");
        String group = Names.group("s14");
        DefaultMQProducer producer = clients.producer();
        Msgs.warmUp(producer, topic);

        Attempts attempts = new Attempts();
        MessageListenerConcurrently listener = (msgs, ctx) -> {
            attempts.record(msgs);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        DefaultMQPushConsumer consumer = clients.push(group, topic, "*", listener);
        // make sure the consumer is pulling before timing anything
        Msgs.sendOk(producer, Msgs.message(topic, "t", "probe"));
        attempts.awaitCount("probe", 1, Duration.ofSeconds(30), SuiteBase::serverLog);

        Map<Integer, Long> sentAt = new TreeMap<>();
        for (int level = 1; level <= 3; level++) {
            Message m = Msgs.message(topic, "t", "L" + level);
            m.setDelayTimeLevel(level);
            sentAt.put(level, System.currentTimeMillis());
            Msgs.sendOk(producer, m);
        }
        for (int level = 1; level <= 3; level++) {
            attempts.awaitCount("L" + level, 1, Duration.ofSeconds(30), SuiteBase::serverLog);
        }
        for (int level = 1; level <= 3; level++) {
            List<Attempts.Attempt> a = attempts.of("L" + level);
            long delay = a.get(0).atMillis() - sentAt.get(level);
            System.out.println("scenario14 level " + level + " delivered " + delay + " ms after send");
            assertEquals(1, a.size(), "deliveries of L" + level + ": " + a);
            assertEquals(topic, a.get(0).topic(), "a delayed message is delivered to its real topic");
            assertEquals(0, a.get(0).reconsumeTimes(), "reconsumeTimes of L" + level);
            assertTrue(delay >= level * 1000L, "L" + level + " delivered " + delay + " ms after send, before its "
                + level + " s level was due" + serverLog());
            assertTrue(delay < level * 1000L + SLACK_MS, "L" + level + " delivered only " + delay + " ms after send"
                + serverLog());
        }

        // ---- pending across a graceful restart ----
        Message pending = Msgs.message(topic, "t", "R3");
        pending.setDelayTimeLevel(3);
        long pendingSentAt = System.currentTimeMillis();
        SendResult r = Msgs.sendOk(producer, pending);
        tidemark.stop();
        long stoppedAt = System.currentTimeMillis();
        int beforeRestart = attempts.count("R3");
        tidemark.restart();
        long restartedAt = System.currentTimeMillis();
        attempts.awaitCount("R3", 1, Duration.ofSeconds(60),
            () -> " (sent " + r + "; consumer " + consumer.getDefaultMQPushConsumerImpl().getServiceState() + ")"
                + serverLog());
        Attempts.Attempt got = attempts.of("R3").get(0);
        Wait.sleep(QUIET_MS);
        List<Attempts.Attempt> a = attempts.of("R3");
        System.out.println("scenario14 pending level 3: stop took " + (stoppedAt - pendingSentAt) + " ms, ready again "
            + (restartedAt - pendingSentAt) + " ms after send, delivered " + (got.atMillis() - pendingSentAt)
            + " ms after send (" + a.size() + " deliveries)");

        assertEquals(0, beforeRestart, "R3 was delivered before the broker had stopped (stop took "
            + (stoppedAt - pendingSentAt) + " ms): the test did not exercise a pending message");
        assertEquals(1, a.size(), "R3, pending over a graceful restart, must be delivered exactly once: " + a
            + serverLog());
        assertEquals(topic, got.topic(), "topic of R3");
        assertTrue(got.atMillis() - pendingSentAt >= 3_000, "R3 delivered before its level was due" + serverLog());
    }
}
