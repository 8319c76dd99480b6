package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 11: RECONSUME_LATER once. The client sends the message back (CONSUMER_SEND_MSG_BACK,
 * delayLevel 0 = "broker decides"), the broker schedules it at level 3 + reconsumeTimes = 3 (3 s
 * with the short levels) into {@code %RETRY%<group>}, and the consumer (subscribed to the retry
 * topic automatically) gets it again with reconsumeTimes 1, renamed back to the real topic through
 * the RETRY_TOPIC property the broker set.
 */
@Tag("tidemark")
@DevArgs({"--message-delay-level", DevArgs.SHORT_DELAY_LEVELS})
class Scenario11RetryTest extends SuiteBase {

    /** Level 3 with {@link DevArgs#SHORT_DELAY_LEVELS}. */
    private static final long LEVEL3_MS = 3_000;
    /**
     * Only a sanity cap. The lower bound is exact (the due time is the retry message's store time
     * + 3 s, and it is stored after the first delivery), but how soon after the due time it shows
     * up depends on the broker's schedule scan (Apache: every 100 ms), the consumer's long poll on
     * the retry queue and machine load, none of which this scenario is about.
     */
    private static final long UPPER_MS = 20_000;

    @Test
    void reconsumeLaterComesBackOnceAfterLevelThree() throws Exception {
        String topic = Names.topic("s11");
        String group = Names.group("s11");
        DefaultMQProducer producer = clients.producer();
        clients.primeRetryTopic(clients.admin(), group, topic);
        SendResult sent = Msgs.sendOk(producer, Msgs.message(topic, "t", "r-0"));

        Attempts attempts = new Attempts();
        MessageListenerConcurrently listener = (msgs, ctx) -> {
            attempts.record(msgs);
            // fail only the first delivery
            return msgs.stream().allMatch(m -> m.getReconsumeTimes() > 0)
                ? ConsumeConcurrentlyStatus.CONSUME_SUCCESS : ConsumeConcurrentlyStatus.RECONSUME_LATER;
        };
        DefaultMQPushConsumer consumer = clients.push(group, topic, "*", listener);
        Clients.awaitOwnsRetryQueue(consumer, SuiteBase::serverLog);
        attempts.awaitCount("r-0", 2, Duration.ofSeconds(40), SuiteBase::serverLog);
        // a third delivery would mean the successful second one was not acknowledged
        Wait.sleep(3_000);

        List<Attempts.Attempt> a = attempts.of("r-0");
        assertEquals(2, a.size(), "deliveries of r-0 (RECONSUME_LATER once, then CONSUME_SUCCESS): " + a);
        Attempts.Attempt first = a.get(0);
        Attempts.Attempt second = a.get(1);
        long delay = second.atMillis() - first.atMillis();
        System.out.println("scenario11 redelivered after " + delay + " ms (" + first + " -> " + second + ")");

        assertEquals(0, first.reconsumeTimes(), "reconsumeTimes of the first delivery");
        assertEquals(topic, first.topic(), "topic of the first delivery");
        assertEquals(1, second.reconsumeTimes(), "reconsumeTimes of the redelivery" + serverLog());
        assertEquals(topic, second.topic(),
            "the client renames a retry message back to its RETRY_TOPIC property" + serverLog());
        assertEquals(topic, second.retryTopic(), "RETRY_TOPIC property the broker sets on the retry message");
        assertEquals(sent.getMsgId(), second.msgId(),
            "msgId (UNIQ_KEY) of the redelivery: the broker keeps the original's properties");
        assertTrue(delay >= LEVEL3_MS, "redelivered " + delay + " ms after the first delivery, before level 3 ("
            + LEVEL3_MS + " ms) was due" + serverLog());
        assertTrue(delay < UPPER_MS, "redelivered only " + delay + " ms after the first delivery" + serverLog());
    }
}
