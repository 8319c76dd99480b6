package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 10.1 (scenario 1 with the 5.x client): sync, async and oneway sends all land, and a
 * push consumer reads every one back exactly once, with its tag.
 */
@Tag("tidemark")
class Scenario10SendModesTest extends SuiteBase {

    private static final int PER_MODE = 20;

    @Test
    void syncAsyncAndOnewaySendsAreAllConsumedBack() throws Exception {
        String topic = Names.topic("s10_1");
        DefaultMQProducer producer = clients.producer();

        // sync first: it also makes the broker auto-create the topic from TBW102
        for (int i = 0; i < PER_MODE; i++) {
            SendResult r = Msgs.sendOk(producer, Msgs.message(topic, "sync", "sync-" + i));
            assertNotNull(r.getMsgId(), "sync send result has no msgId");
            assertNotNull(r.getOffsetMsgId(), "sync send result has no offsetMsgId (from the broker's msgId header)");
            assertEquals(topic, r.getMessageQueue().getTopic());
        }

        CountDownLatch done = new CountDownLatch(PER_MODE);
        ConcurrentLinkedQueue<String> asyncErrors = new ConcurrentLinkedQueue<>();
        for (int i = 0; i < PER_MODE; i++) {
            String body = "async-" + i;
            producer.send(Msgs.message(topic, "async", body), new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    if (r.getSendStatus() != SendStatus.SEND_OK) {
                        asyncErrors.add(body + ": " + r);
                    }
                    done.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    asyncErrors.add(body + ": " + e);
                    done.countDown();
                }
            });
        }
        assertTrue(done.await(30, TimeUnit.SECONDS),
            "async send callbacks missing: " + done.getCount() + " of " + PER_MODE + serverLog());
        assertTrue(asyncErrors.isEmpty(), "async sends failed: " + asyncErrors + serverLog());

        for (int i = 0; i < PER_MODE; i++) {
            producer.sendOneway(Msgs.message(topic, "oneway", "oneway-" + i));
        }

        List<String> expected = new ArrayList<>();
        expected.addAll(Msgs.bodies("sync", PER_MODE));
        expected.addAll(Msgs.bodies("async", PER_MODE));
        expected.addAll(Msgs.bodies("oneway", PER_MODE));

        Received received = new Received();
        clients.push(Names.group("s10_1"), topic, "*", received.listener("c"));
        received.awaitAll(expected, Duration.ofSeconds(30));
        received.awaitQuiet(Duration.ofSeconds(2), Duration.ofSeconds(20));

        assertEquals(new TreeSet<>(expected), received.bodies(), "the consumer must see exactly the sent bodies");
        assertTrue(received.duplicates().isEmpty(),
            "a single consumer must see each message once; duplicates: " + received.duplicates());
        for (Received.Delivery d : received.deliveries()) {
            String mode = d.body().substring(0, d.body().indexOf('-'));
            assertEquals(mode, d.tags(), "tag of " + d.body());
        }
    }
}
