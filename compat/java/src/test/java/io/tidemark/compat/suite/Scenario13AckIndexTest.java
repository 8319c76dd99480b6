package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 13: a batch listener acknowledges part of a batch. With {@code ackIndex = 1} and
 * CONSUME_SUCCESS the client treats messages 0..1 as consumed and sends 2..3 back (one
 * CONSUMER_SEND_MSG_BACK each); only those two come back, with reconsumeTimes 1, after level 3.
 * The four messages go to one queue and the consumer starts afterwards, so its first pull returns
 * all four and they form one batch of {@code consumeMessageBatchMaxSize = 4}.
 */
@Tag("tidemark")
@DevArgs({"--message-delay-level", DevArgs.SHORT_DELAY_LEVELS})
class Scenario13AckIndexTest extends SuiteBase {

    private static final int BATCH = 4;
    private static final int ACK_INDEX = 1;
    private static final long LEVEL3_MS = 3_000;
    /** Sanity cap; see Scenario11RetryTest.UPPER_MS. */
    private static final long UPPER_MS = 20_000;

    @Test
    void onlyMessagesAfterTheAckIndexAreRetried() throws Exception {
        String topic = Names.topic("s13");
        String group = Names.group("s13");
        DefaultMQProducer producer = clients.producer();
        clients.primeRetryTopic(clients.admin(), group, topic);
        MessageQueueSelector first = (mqs, msg, arg) -> mqs.get(0);
        List<String> bodies = Msgs.bodies("b", BATCH);
        for (String b : bodies) {
            SendResult r = producer.send(Msgs.message(topic, "t", b), first, null);
            assertEquals(SendStatus.SEND_OK, r.getSendStatus(), "send " + b);
            assertEquals(0, r.getMessageQueue().getQueueId(), "queue of " + b);
        }

        Attempts attempts = new Attempts();
        AtomicBoolean firstCall = new AtomicBoolean(true);
        MessageListenerConcurrently listener = (msgs, ctx) -> {
            attempts.record(msgs);
            if (firstCall.getAndSet(false)) {
                ctx.setAckIndex(ACK_INDEX);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        DefaultMQPushConsumer consumer =
            clients.push(group, topic, "*", listener, c -> c.setConsumeMessageBatchMaxSize(BATCH));
        Clients.awaitOwnsRetryQueue(consumer, SuiteBase::serverLog);
        for (int i = ACK_INDEX + 1; i < BATCH; i++) {
            attempts.awaitCount(bodies.get(i), 2, Duration.ofSeconds(40), SuiteBase::serverLog);
        }
        // b-0 / b-1 would have come back together with the others; give stragglers a moment
        Wait.sleep(3_000);
        List<Attempts.Attempt> all = attempts.all();
        System.out.println("scenario13 deliveries:" + attempts.describe());

        List<Attempts.Attempt> firstBatch = all.subList(0, Math.min(BATCH, all.size()));
        assertEquals(bodies, firstBatch.stream().map(Attempts.Attempt::body).toList(),
            "the first listener call must get the four messages as one batch, in queue order: " + all);
        assertTrue(firstBatch.stream().allMatch(x -> x.batchSize() == BATCH && x.reconsumeTimes() == 0),
            "first batch: " + firstBatch);
        for (int i = 0; i < BATCH; i++) {
            String b = bodies.get(i);
            List<Attempts.Attempt> a = attempts.of(b);
            if (i <= ACK_INDEX) {
                assertEquals(1, a.size(), b + " was acknowledged (index <= ackIndex) and must not come back: " + a
                    + serverLog());
            } else {
                assertEquals(2, a.size(), b + " (index > ackIndex) must come back exactly once: " + a + serverLog());
                Attempts.Attempt again = a.get(1);
                long delay = again.atMillis() - a.get(0).atMillis();
                System.out.println("scenario13 " + b + " redelivered after " + delay + " ms");
                assertEquals(1, again.reconsumeTimes(), "reconsumeTimes of redelivered " + b);
                assertEquals(topic, again.topic(), "topic of redelivered " + b);
                assertTrue(delay >= LEVEL3_MS, b + " came back after " + delay + " ms, before level 3 was due"
                    + serverLog());
                assertTrue(delay < UPPER_MS, b + " came back only after " + delay + " ms" + serverLog());
            }
        }
    }
}
