package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Field;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.function.Predicate;

import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PopStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.consumer.RebalanceImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Scenario 12 (RocketMQ 5 POP consumption with the 5.x remoting client): an operator switches a
 * group to POP with SET_MESSAGE_REQUEST_MODE; push consumers that let the broker assign queues
 * ({@code clientRebalance=false}, QUERY_ASSIGNMENT) then pop, acknowledge each message, and put
 * failed ones back with CHANGE_MESSAGE_INVISIBLETIME. Orderly POP is driven through the client's
 * own {@code MQClientAPIImpl} (the remoting push consumer never pops in order).
 *
 * <p>Where the reference differs on purpose: past the group's retry maximum Tidemark's broker
 * moves a popped message to the group's dead-letter topic; Apache RocketMQ's broker keeps
 * reviving it and leaves the decision to the client (the remoting push client drops it only after
 * hours).
 */
@Tag("tidemark")
class Scenario12PopConsumptionTest extends SuiteBase {

    private MQClientAPIImpl api(DefaultMQProducer producer) {
        return producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
    }

    private void createGroup(DefaultMQProducer producer, String group, int retryMaxTimes) throws Exception {
        SubscriptionGroupConfig config = new SubscriptionGroupConfig();
        config.setGroupName(group);
        config.setRetryMaxTimes(retryMaxTimes);
        api(producer).createSubscriptionGroup(tidemark.brokerAddr(), config, 5000);
    }

    private void switchTo(DefaultMQProducer producer, String topic, String group, MessageRequestMode mode)
        throws Exception {
        api(producer).setMessageRequestMode(tidemark.brokerAddr(), topic, group, mode, -1, 5000);
    }

    /** The client's back-off table for failed POP messages, cut from 10 s, 30 s, … to 1 s each. */
    private static void shortenPopBackoff(DefaultMQPushConsumer consumer) throws Exception {
        Field field = consumer.getDefaultMQPushConsumerImpl().getClass().getDeclaredField("popDelayLevel");
        field.setAccessible(true);
        Arrays.fill((int[]) field.get(consumer.getDefaultMQPushConsumerImpl()), 1);
    }

    private DefaultMQPushConsumer popConsumer(String group, String topic, MessageListenerConcurrently listener,
        Consumer<DefaultMQPushConsumer> customize) throws Exception {
        return clients.push(group, topic, "*", listener, c -> {
            c.setClientRebalance(false);
            customize.accept(c);
        });
    }

    private static void waitFor(Predicate<Void> done, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!done.test(null) && System.currentTimeMillis() < deadline) {
            TimeUnit.MILLISECONDS.sleep(50);
        }
    }

    @Test
    @Timeout(value = 240, unit = TimeUnit.SECONDS)
    void tenThousandMessagesArePoppedByTwoConsumersEachOnce() throws Exception {
        String topic = Names.topic("s12pop");
        String group = Names.group("s12pop");
        DefaultMQProducer producer = clients.producer();
        Msgs.warmUp(producer, topic);
        createGroup(producer, group, 16);
        switchTo(producer, topic, group, MessageRequestMode.POP);
        int count = 10_000;
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            batch.add(Msgs.message(topic, "pop", "p-" + i));
            if (batch.size() == 100) {
                producer.send(batch);
                batch.clear();
            }
        }
        Map<String, Integer> deliveries = new ConcurrentHashMap<>();
        Map<String, Boolean> popped = new ConcurrentHashMap<>();
        MessageListenerConcurrently listener = (msgs, context) -> {
            for (MessageExt m : msgs) {
                String body = Msgs.bodyOf(m);
                if (body.startsWith("p-")) {
                    deliveries.merge(body, 1, Integer::sum);
                    popped.put(body, m.getProperty(MessageConst.PROPERTY_POP_CK) != null);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        long started = System.currentTimeMillis();
        popConsumer(group, topic, listener, c -> c.setConsumeThreadMin(4));
        popConsumer(group, topic, listener, c -> c.setConsumeThreadMin(4));
        waitFor(v -> deliveries.size() >= count, 180_000);
        long tookMs = System.currentTimeMillis() - started;
        TimeUnit.SECONDS.sleep(3);
        assertEquals(count, deliveries.size(), "messages never delivered" + serverLog());
        long duplicates = deliveries.values().stream().filter(n -> n > 1).count();
        assertEquals(0, duplicates, "messages delivered more than once");
        assertTrue(popped.values().stream().allMatch(b -> b), "every message came by POP (with a POP_CK receipt)");
        System.out.println("scenario12 pop messages=" + count + " consumers=2 tookMs=" + tookMs
            + " perSecond=" + (count * 1000L / Math.max(1, tookMs)));
    }

    @Test
    @Timeout(value = 180, unit = TimeUnit.SECONDS)
    void reconsumeLaterComesBackCountedAndPastTheMaximumGoesToTheDeadLetterTopic() throws Exception {
        String topic = Names.topic("s12retry");
        String group = Names.group("s12retry");
        DefaultMQProducer producer = clients.producer();
        Msgs.warmUp(producer, topic);
        createGroup(producer, group, 2);
        switchTo(producer, topic, group, MessageRequestMode.POP);
        Map<String, List<Integer>> counts = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = popConsumer(group, topic, (msgs, context) -> {
            for (MessageExt m : msgs) {
                String body = Msgs.bodyOf(m);
                if (body.equals("warmup") || body.startsWith("warmup-")) {
                    continue;
                }
                List<Integer> seen = counts.computeIfAbsent(body, b -> new CopyOnWriteArrayList<>());
                seen.add(m.getReconsumeTimes());
                if (body.equals("always-fails") || seen.size() < 3) {
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        }, c -> c.setConsumeMessageBatchMaxSize(1));
        shortenPopBackoff(consumer);
        Msgs.sendOk(producer, Msgs.message(topic, "r", "third-time-lucky"));
        Msgs.sendOk(producer, Msgs.message(topic, "r", "always-fails"));

        waitFor(v -> counts.getOrDefault("third-time-lucky", List.of()).size() >= 3, 60_000);
        TimeUnit.SECONDS.sleep(4);
        assertEquals(List.of(0, 1, 2), counts.get("third-time-lucky"),
            "retried with its reconsume count, then acknowledged once" + serverLog());
        if (againstApacheReference()) {
            // Its revive service is slower (checkpoints are merged a few seconds late).
            waitFor(v -> counts.getOrDefault("always-fails", List.of()).size() >= 4, 40_000);
            List<Integer> failing = counts.getOrDefault("always-fails", List.of());
            assertTrue(failing.size() >= 4, "Apache keeps reviving it: " + failing);
        } else {
            List<Integer> failing = counts.getOrDefault("always-fails", List.of());
            assertEquals(List.of(0, 1, 2), failing, "three deliveries (retry maximum 2), then no more" + serverLog());
            List<MessageExt> dead = new CopyOnWriteArrayList<>();
            clients.push(Names.group("s12dlq"), "%DLQ%" + group, "*", (MessageListenerConcurrently) (msgs, context) -> {
                dead.addAll(msgs);
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            waitFor(v -> !dead.isEmpty(), 30_000);
            assertEquals(1, dead.size(), "one message dead-lettered" + serverLog());
            assertEquals("always-fails", Msgs.bodyOf(dead.get(0)));
            assertEquals(3, dead.get(0).getReconsumeTimes());
            assertEquals(topic, dead.get(0).getProperty(MessageConst.PROPERTY_RETRY_TOPIC));
        }
    }

    @Test
    void anOperatorSwitchesAGroupFromPullToPop() throws Exception {
        String topic = Names.topic("s12switch");
        String group = Names.group("s12switch");
        DefaultMQProducer producer = clients.producer();
        Msgs.warmUp(producer, topic);
        createGroup(producer, group, 16);
        Map<String, List<Boolean>> seen = new ConcurrentHashMap<>();
        DefaultMQPushConsumer consumer = popConsumer(group, topic, (msgs, context) -> {
            for (MessageExt m : msgs) {
                seen.computeIfAbsent(Msgs.bodyOf(m), b -> new CopyOnWriteArrayList<>())
                    .add(m.getProperty(MessageConst.PROPERTY_POP_CK) != null);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        }, c -> { });
        Msgs.sendAll(producer, topic, "s", "pull", 20);
        waitFor(v -> Msgs.bodies("pull", 20).stream().allMatch(seen::containsKey), 60_000);
        for (String body : Msgs.bodies("pull", 20)) {
            assertEquals(List.of(false), seen.get(body), body + " pulled once, not popped" + serverLog());
        }
        switchTo(producer, topic, group, MessageRequestMode.POP);
        // The consumer asks for its assignment every second here: once an answer in POP mode
        // has reached it, its rebalance holds POP process queues for the topic and none for
        // pulling (the pull ones are dropped), so what is sent from then on is popped.
        RebalanceImpl rebalance = consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl();
        Wait.until("the consumer to switch " + topic + " to POP", Duration.ofSeconds(30),
            () -> rebalance.getPopProcessQueueTable().keySet().stream().anyMatch(q -> q.getTopic().equals(topic))
                && rebalance.getProcessQueueTable().keySet().stream().noneMatch(q -> q.getTopic().equals(topic)),
            () -> "pop queues " + rebalance.getPopProcessQueueTable().keySet()
                + ", pull queues " + rebalance.getProcessQueueTable().keySet() + serverLog());
        Msgs.sendAll(producer, topic, "s", "pop", 20);
        waitFor(v -> Msgs.bodies("pop", 20).stream().allMatch(seen::containsKey), 60_000);
        TimeUnit.SECONDS.sleep(2);
        for (String body : Msgs.bodies("pop", 20)) {
            assertEquals(List.of(true), seen.get(body), body + " popped once" + serverLog());
        }
        for (String body : Msgs.bodies("pull", 20)) {
            assertEquals(1, seen.get(body).size(), body + " not consumed again after the switch");
        }
    }

    private PopResult pop(MQClientAPIImpl api, String topic, String group, int queueId, int max, long invisibleMs)
        throws Exception {
        PopMessageRequestHeader header = new PopMessageRequestHeader();
        header.setConsumerGroup(group);
        header.setTopic(topic);
        header.setQueueId(queueId);
        header.setMaxMsgNums(max);
        header.setInvisibleTime(invisibleMs);
        header.setPollTime(0);
        header.setBornTime(System.currentTimeMillis());
        header.setInitMode(0);
        header.setExpType("TAG");
        header.setExp("*");
        header.setOrder(true);
        header.setBrokerName("broker-a");
        CompletableFuture<PopResult> result = new CompletableFuture<>();
        api.popMessageAsync("broker-a", tidemark.brokerAddr(), header, 5000, new PopCallback() {
            @Override
            public void onSuccess(PopResult popResult) {
                result.complete(popResult);
            }

            @Override
            public void onException(Throwable e) {
                result.completeExceptionally(e);
            }
        });
        return result.get(10, TimeUnit.SECONDS);
    }

    private void ack(MQClientAPIImpl api, String topic, String group, MessageExt m) throws Exception {
        AckMessageRequestHeader header = new AckMessageRequestHeader();
        header.setConsumerGroup(group);
        header.setTopic(topic);
        header.setQueueId(m.getQueueId());
        header.setExtraInfo(m.getProperty(MessageConst.PROPERTY_POP_CK));
        header.setOffset(m.getQueueOffset());
        CompletableFuture<AckResult> result = new CompletableFuture<>();
        api.ackMessageAsync(tidemark.brokerAddr(), 5000, new AckCallback() {
            @Override
            public void onSuccess(AckResult ackResult) {
                result.complete(ackResult);
            }

            @Override
            public void onException(Throwable e) {
                result.completeExceptionally(e);
            }
        }, header);
        assertNotNull(result.get(10, TimeUnit.SECONDS));
    }

    private static List<String> bodiesOf(PopResult result) {
        List<String> out = new ArrayList<>();
        if (result.getMsgFoundList() != null) {
            for (MessageExt m : result.getMsgFoundList()) {
                out.add(Msgs.bodyOf(m));
            }
        }
        return out;
    }

    @Test
    void orderlyPopHandsAQueueOutInOrderOneBatchAtATime() throws Exception {
        String topic = Names.topic("s12order");
        String group = Names.group("s12order");
        DefaultMQProducer producer = clients.producer();
        createGroup(producer, group, 16);
        MessageQueue queue = null;
        for (int i = 0; i < 4; i++) {
            var sent = producer.send(Msgs.message(topic, "o", "o" + i), (mqs, msg, arg) -> mqs.get(0), null);
            queue = sent.getMessageQueue();
        }
        MQClientAPIImpl api = api(producer);
        int queueId = queue.getQueueId();
        PopResult first = pop(api, topic, group, queueId, 2, 2000);
        assertEquals(List.of("o0", "o1"), bodiesOf(first), "in order" + serverLog());
        PopResult blocked = pop(api, topic, group, queueId, 2, 2000);
        assertEquals(List.of(), bodiesOf(blocked), "the queue is blocked while the batch is invisible");
        assertTrue(blocked.getPopStatus() != PopStatus.FOUND);
        ack(api, topic, group, first.getMsgFoundList().get(0));
        TimeUnit.MILLISECONDS.sleep(2300);
        PopResult second = pop(api, topic, group, queueId, 2, 2000);
        assertEquals(List.of("o1", "o2"), bodiesOf(second), "o1 again (not acknowledged), then o2");
        assertEquals(1, second.getMsgFoundList().get(0).getReconsumeTimes(), "o1's second delivery is counted");
        assertEquals(0, second.getMsgFoundList().get(1).getReconsumeTimes());
        for (MessageExt m : second.getMsgFoundList()) {
            ack(api, topic, group, m);
        }
        PopResult third = pop(api, topic, group, queueId, 2, 2000);
        assertEquals(List.of("o3"), bodiesOf(third));
    }
}
