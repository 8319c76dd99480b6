package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 7: keyed messages sent to fixed queues with a MessageQueueSelector arrive at a
 * MessageListenerOrderly in send order, per key and per queue. Orderly consumption in clustering
 * mode only starts once the broker grants the queue locks (LOCK_BATCH_MQ).
 */
@Tag("tidemark")
class Scenario07OrderlyTest extends SuiteBase {

    private static final int KEYS = 6;
    private static final int PER_KEY = 30;

    @Test
    void orderlyListenerSeesEachQueueInOrder() throws Exception {
        String topic = Names.topic("s07");
        DefaultMQProducer producer = clients.producer();
        MessageQueueSelector byKey = (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size());

        Map<Integer, Integer> queueOfKey = new TreeMap<>();
        for (int seq = 0; seq < PER_KEY; seq++) {
            for (int key = 0; key < KEYS; key++) {
                Message m = Msgs.message(topic, "k" + key, "k" + key + "-" + seq);
                m.putUserProperty("seq", Integer.toString(seq));
                SendResult r = producer.send(m, byKey, key);
                assertEquals(SendStatus.SEND_OK, r.getSendStatus(), "send k" + key + "-" + seq);
                Integer prev = queueOfKey.putIfAbsent(key, r.getMessageQueue().getQueueId());
                assertTrue(prev == null || prev == r.getMessageQueue().getQueueId(),
                    "selector put key " + key + " on two queues: " + prev + " and " + r.getMessageQueue());
            }
        }

        Map<Integer, List<MessageExt>> perQueue = new ConcurrentHashMap<>();
        AtomicInteger count = new AtomicInteger();
        MessageListenerOrderly listener = (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                perQueue.computeIfAbsent(m.getQueueId(), q -> java.util.Collections.synchronizedList(new ArrayList<>()))
                    .add(m);
                count.incrementAndGet();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        };
        clients.push(Names.group("s07"), topic, "*", listener);
        int total = KEYS * PER_KEY;
        Wait.until(total + " orderly deliveries", Duration.ofSeconds(40), () -> count.get() >= total,
            () -> "got " + count.get() + " (orderly consumers need LOCK_BATCH_MQ to return the queues in lockOKMQSet)"
                + serverLog());
        Wait.sleep(1000);

        assertEquals(total, count.get(), "deliveries (a single orderly consumer must not see duplicates)");
        Map<String, List<Integer>> seqsByKey = new TreeMap<>();
        for (Map.Entry<Integer, List<MessageExt>> e : perQueue.entrySet()) {
            long prevOffset = -1;
            synchronized (e.getValue()) {
                for (MessageExt m : e.getValue()) {
                    assertTrue(m.getQueueOffset() > prevOffset, "queue " + e.getKey() + " delivered offset "
                        + m.getQueueOffset() + " after " + prevOffset);
                    prevOffset = m.getQueueOffset();
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    String key = body.substring(0, body.indexOf('-'));
                    assertEquals(queueOfKey.get(Integer.parseInt(key.substring(1))), e.getKey(),
                        body + " arrived from the wrong queue");
                    seqsByKey.computeIfAbsent(key, k -> new ArrayList<>()).add(Integer.parseInt(m.getUserProperty("seq")));
                }
            }
        }
        List<Integer> inOrder = new ArrayList<>();
        for (int i = 0; i < PER_KEY; i++) {
            inOrder.add(i);
        }
        for (int key = 0; key < KEYS; key++) {
            assertEquals(inOrder, seqsByKey.get("k" + key), "sequence numbers of key k" + key + " in arrival order");
        }
    }
}
