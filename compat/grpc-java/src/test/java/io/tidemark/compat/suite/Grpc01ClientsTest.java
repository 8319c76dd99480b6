package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * RocketMQ 5's gRPC client for Java (rocketmq-client-java) against Tidemark's MessagingService:
 * a producer (normal, async, FIFO, delay), a SimpleConsumer (receive, ack, change of invisibility,
 * redelivery with its attempt counted), PushConsumers (retries with attempt counts, then the
 * dead-letter topic; FIFO in order per message group), and both directions across protocols.
 */
@Tag("tidemark")
class Grpc01ClientsTest extends SuiteBase {

    /** Plaintext, as the Python client dials. */
    private ClientConfiguration config() {
        return clients.grpcConfig(tidemark.grpcAddr(), false);
    }

    /** TLS, the Java client's default (it trusts any certificate; Tidemark's is self-signed). */
    private ClientConfiguration tlsConfig() {
        return clients.grpcConfig(tidemark.grpcAddr(), true);
    }

    private static void waitFor(BooleanSupplier done, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!done.getAsBoolean() && System.currentTimeMillis() < deadline) {
            TimeUnit.MILLISECONDS.sleep(50);
        }
    }

    private static String body(MessageView view) {
        ByteBuffer buffer = view.getBody().duplicate();
        byte[] bytes = new byte[buffer.remaining()];
        buffer.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    private Message message(String topic, String body) {
        return clients.provider.newMessageBuilder()
            .setTopic(topic)
            .setTag("grpc")
            .setKeys("key-" + body)
            .addProperty("color", "blue")
            .setBody(body.getBytes(StandardCharsets.UTF_8))
            .build();
    }

    private void createGroup(DefaultMQProducer remoting, String group, int retryMaxTimes, boolean orderly)
        throws Exception {
        SubscriptionGroupConfig config = new SubscriptionGroupConfig();
        config.setGroupName(group);
        config.setRetryMaxTimes(retryMaxTimes);
        config.setConsumeMessageOrderly(orderly);
        remoting.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl()
            .createSubscriptionGroup(tidemark.brokerAddr(), config, 5000);
    }

    @Test
    @Timeout(value = 120, unit = TimeUnit.SECONDS)
    void aProducerAndASimpleConsumer() throws Exception {
        String topic = Names.topic("g1simple");
        String group = Names.group("g1simple");
        Producer producer = clients.grpcProducer(tlsConfig(), topic);
        List<String> sent = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            SendReceipt receipt = producer.send(message(topic, "sync-" + i));
            assertTrue(receipt.getMessageId() != null);
            sent.add("sync-" + i);
        }
        List<CompletableFuture<SendReceipt>> pending = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            pending.add(producer.sendAsync(message(topic, "async-" + i)));
            sent.add("async-" + i);
        }
        for (CompletableFuture<SendReceipt> future : pending) {
            future.get(10, TimeUnit.SECONDS);
        }
        long dueAt = System.currentTimeMillis() + 2_000;
        producer.send(clients.provider.newMessageBuilder().setTopic(topic).setTag("grpc")
            .setDeliveryTimestamp(dueAt).setBody("delayed".getBytes(StandardCharsets.UTF_8)).build());
        sent.add("delayed");

        SimpleConsumer consumer = clients.simpleConsumer(tlsConfig(), group, topic, Duration.ofSeconds(3));
        Map<String, List<Integer>> attempts = new ConcurrentHashMap<>();
        Map<String, Long> arrivedAt = new ConcurrentHashMap<>();
        MessageView held = null;
        long deadline = System.currentTimeMillis() + 60_000;
        while (attempts.size() < sent.size() && System.currentTimeMillis() < deadline) {
            for (MessageView view : consumer.receive(16, Duration.ofSeconds(15))) {
                String body = body(view);
                attempts.computeIfAbsent(body, b -> new CopyOnWriteArrayList<>()).add(view.getDeliveryAttempt());
                arrivedAt.putIfAbsent(body, System.currentTimeMillis());
                if (body.equals("sync-3") && held == null) {
                    held = view;
                    continue;
                }
                if (!body.equals("delayed")) {
                    assertEquals("blue", view.getProperties().get("color"), body);
                }
                assertEquals("grpc", view.getTag().orElse(null));
                consumer.ack(view);
            }
        }
        assertEquals(sent.size(), attempts.size(), "received " + attempts.keySet() + serverLog());
        assertTrue(arrivedAt.get("delayed") >= dueAt - 5, "the delayed message came early");
        // Put back for one second: it comes again, its delivery attempt counted.
        assertTrue(held != null);
        consumer.changeInvisibleDuration(held, Duration.ofSeconds(1));
        MessageView again = null;
        deadline = System.currentTimeMillis() + 20_000;
        while (again == null && System.currentTimeMillis() < deadline) {
            for (MessageView view : consumer.receive(16, Duration.ofSeconds(15))) {
                again = view;
                consumer.ack(view);
            }
        }
        assertTrue(again != null, "the message put back never came again" + serverLog());
        assertEquals("sync-3", body(again));
        assertEquals(2, again.getDeliveryAttempt());
        // Nothing else comes: every other message was acknowledged once.
        assertEquals(0, consumer.receive(16, Duration.ofSeconds(15)).size());
        for (Map.Entry<String, List<Integer>> entry : attempts.entrySet()) {
            assertEquals(List.of(1), entry.getValue(), entry.getKey() + " delivered more than once");
        }
    }

    @Test
    @Timeout(value = 120, unit = TimeUnit.SECONDS)
    void aPushConsumerRetriesThenDeadLetters() throws Exception {
        String topic = Names.topic("g1push");
        String group = Names.group("g1push");
        DefaultMQProducer remoting = clients.producer();
        createGroup(remoting, group, 2, false);
        Producer producer = clients.grpcProducer(config(), topic);
        Map<String, List<Integer>> attempts = new ConcurrentHashMap<>();
        clients.pushConsumer(config(), group, topic, view -> {
            String body = body(view);
            attempts.computeIfAbsent(body, b -> new CopyOnWriteArrayList<>()).add(view.getDeliveryAttempt());
            return body.startsWith("fail") ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
        });
        producer.send(message(topic, "ok"));
        producer.send(message(topic, "fail"));
        List<MessageExt> dead = new CopyOnWriteArrayList<>();
        clients.push(Names.group("g1dlq"), "%DLQ%" + group, (MessageListenerConcurrently) (msgs, context) -> {
            dead.addAll(msgs);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        waitFor(() -> !dead.isEmpty(), 60_000);
        assertEquals(List.of(1), attempts.get("ok"));
        assertEquals(List.of(1, 2, 3), attempts.get("fail"), "retryMaxTimes 2: three deliveries" + serverLog());
        assertEquals(1, dead.size());
        assertEquals("fail", new String(dead.get(0).getBody(), StandardCharsets.UTF_8));
    }

    @Test
    @Timeout(value = 120, unit = TimeUnit.SECONDS)
    void aFifoPushConsumerKeepsEachMessageGroupInOrder() throws Exception {
        String topic = Names.topic("g1fifo");
        String group = Names.group("g1fifo");
        DefaultMQProducer remoting = clients.producer();
        createGroup(remoting, group, 16, true);
        Producer producer = clients.grpcProducer(config(), topic);
        for (int i = 0; i < 30; i++) {
            String messageGroup = "order-" + (i % 3);
            producer.send(clients.provider.newMessageBuilder().setTopic(topic).setTag("fifo")
                .setMessageGroup(messageGroup)
                .setBody((messageGroup + ":" + i).getBytes(StandardCharsets.UTF_8)).build());
        }
        Map<String, List<Integer>> seen = new ConcurrentHashMap<>();
        clients.pushConsumer(config(), group, topic, view -> {
            String[] parts = body(view).split(":");
            seen.computeIfAbsent(parts[0], g -> new CopyOnWriteArrayList<>()).add(Integer.parseInt(parts[1]));
            return ConsumeResult.SUCCESS;
        });
        waitFor(() -> seen.values().stream().mapToInt(List::size).sum() >= 30, 60_000);
        TimeUnit.SECONDS.sleep(2);
        for (int g = 0; g < 3; g++) {
            List<Integer> expected = new ArrayList<>();
            for (int i = g; i < 30; i += 3) {
                expected.add(i);
            }
            assertEquals(expected, seen.get("order-" + g), "message group order-" + g + serverLog());
        }
    }

    @Test
    @Timeout(value = 120, unit = TimeUnit.SECONDS)
    void messagesCrossBetweenGrpcAndRemoting() throws Exception {
        String topic = Names.topic("g1cross");
        Producer producer = clients.grpcProducer(config(), topic);
        producer.send(message(topic, "from-grpc"));
        List<MessageExt> remoted = new CopyOnWriteArrayList<>();
        clients.push(Names.group("g1remoting"), topic, (MessageListenerConcurrently) (msgs, context) -> {
            remoted.addAll(msgs);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        waitFor(() -> !remoted.isEmpty(), 30_000);
        assertEquals(1, remoted.size());
        MessageExt got = remoted.get(0);
        assertEquals("from-grpc", new String(got.getBody(), StandardCharsets.UTF_8));
        assertEquals("grpc", got.getTags());
        assertEquals("key-from-grpc", got.getKeys());
        assertEquals("blue", got.getUserProperty("color"));

        DefaultMQProducer remoting = clients.producer();
        org.apache.rocketmq.common.message.Message m = new org.apache.rocketmq.common.message.Message(
            topic, "remoting", "key-from-remoting", "from-remoting".getBytes(StandardCharsets.UTF_8));
        m.putUserProperty("color", "green");
        remoting.send(m);
        SimpleConsumer consumer = clients.simpleConsumer(config(), Names.group("g1grpc"), topic, Duration.ofSeconds(3));
        List<String> bodies = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30_000;
        while (!bodies.contains("from-remoting") && System.currentTimeMillis() < deadline) {
            for (MessageView view : consumer.receive(16, Duration.ofSeconds(15))) {
                bodies.add(body(view));
                if (body(view).equals("from-remoting")) {
                    assertEquals("remoting", view.getTag().orElse(null));
                    assertEquals("green", view.getProperties().get("color"));
                    assertTrue(view.getKeys().contains("key-from-remoting"));
                }
                consumer.ack(view);
            }
        }
        assertTrue(bodies.contains("from-remoting"), "got " + bodies + serverLog());
    }
}
