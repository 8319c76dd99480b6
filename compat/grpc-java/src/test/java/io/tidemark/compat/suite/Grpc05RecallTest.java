package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.RecallReceipt;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * RecallMessage (RocketMQ 5.3.2+) with both of Apache's 5.x clients: delay messages sent through
 * gRPC ({@code SendReceipt.getRecallHandle}, {@code Producer.recallMessage}) and through remoting
 * ({@code SendResult.getRecallHandle}, {@code DefaultMQProducer.recallMessage}) and recalled
 * before they are due are never delivered; the others arrive; a recall after the due time is
 * refused ("timestamp invalid"), as RocketMQ refuses it.
 */
@Tag("tidemark")
class Grpc05RecallTest extends SuiteBase {

    private static final long DELAY_MS = 4_000;

    @Test
    @Timeout(value = 120, unit = TimeUnit.SECONDS)
    void recalledDelayMessagesAreNeverDeliveredAndLateRecallsAreRefused() throws Exception {
        String topic = Names.topic("g5recall");
        String group = Names.group("g5recall");
        DefaultMQProducer remoting = clients.producer();
        Resources.createTopic(remoting, tidemark.brokerAddr(), topic, "DELAY", 4);
        Resources.createGroup(remoting, tidemark.brokerAddr(), group, 16, false);
        ClientConfiguration config = clients.grpcConfig(tidemark.grpcAddr(), true);
        Producer producer = clients.provider.newProducerBuilder()
            .setClientConfiguration(config)
            .setTopics(topic)
            .build();

        long due = System.currentTimeMillis() + DELAY_MS;
        SendReceipt grpcRecalled = send(producer, topic, "grpc-recalled", due);
        SendReceipt grpcKept = send(producer, topic, "grpc-kept", due);
        org.apache.rocketmq.common.message.Message remotingMessage =
            new org.apache.rocketmq.common.message.Message(topic, "delayed",
                "remoting-recalled".getBytes(StandardCharsets.UTF_8));
        remotingMessage.setDeliverTimeMs(due);
        SendResult remotingRecalled = remoting.send(remotingMessage);
        assertEquals(SendStatus.SEND_OK, remotingRecalled.getSendStatus());
        org.apache.rocketmq.common.message.Message keptMessage =
            new org.apache.rocketmq.common.message.Message(topic, "delayed",
                "remoting-kept".getBytes(StandardCharsets.UTF_8));
        keptMessage.setDeliverTimeMs(due);
        SendResult remotingKept = remoting.send(keptMessage);

        for (String handle : List.of(grpcRecalled.getRecallHandle(), grpcKept.getRecallHandle(),
            remotingRecalled.getRecallHandle(), remotingKept.getRecallHandle())) {
            assertTrue(handle != null && !handle.isEmpty(), "a delay message's send names its recall");
        }
        RecallReceipt recalled = producer.recallMessage(topic, grpcRecalled.getRecallHandle());
        assertEquals(grpcRecalled.getMessageId().toString(), recalled.getMessageId().toString());
        String remotingId = remoting.recallMessage(topic, remotingRecalled.getRecallHandle());
        assertEquals(remotingRecalled.getMsgId(), remotingId);

        SimpleConsumer consumer = clients.simpleConsumer(config, group, topic, Duration.ofSeconds(10));
        Map<String, AtomicInteger> delivered = new ConcurrentHashMap<>();
        Set<String> kept = Set.of("grpc-kept", "remoting-kept");
        long deadline = System.currentTimeMillis() + 60_000;
        while (!delivered.keySet().containsAll(kept) && System.currentTimeMillis() < deadline) {
            receive(consumer, delivered);
        }
        // Quiet time past the due time: a recalled message would arrive now.
        long quietUntil = System.currentTimeMillis() + 3_000;
        while (System.currentTimeMillis() < quietUntil) {
            receive(consumer, delivered);
        }
        System.out.println("grpc recall against " + (againstApacheReference() ? "Apache" : "Tidemark")
            + ": delivered=" + delivered);
        assertEquals(new TreeSet<>(kept), new TreeSet<>(delivered.keySet()), () -> "delivered" + serverLog());
        assertTrue(System.currentTimeMillis() >= due, "waited past the due time");

        ClientException late = assertThrows(ClientException.class,
            () -> producer.recallMessage(topic, grpcKept.getRecallHandle()));
        assertTrue(late.getMessage().contains("timestamp invalid"), late::getMessage);
        MQBrokerException lateRemoting = assertThrows(MQBrokerException.class,
            () -> remoting.recallMessage(topic, remotingKept.getRecallHandle()));
        assertEquals(604, lateRemoting.getResponseCode(), lateRemoting::getErrorMessage);
        assertFalse(delivered.containsKey("grpc-recalled") || delivered.containsKey("remoting-recalled"));
    }

    private SendReceipt send(Producer producer, String topic, String body, long deliverAt) throws Exception {
        Message message = clients.provider.newMessageBuilder()
            .setTopic(topic)
            .setTag("delayed")
            .setKeys("key-" + body)
            .setDeliveryTimestamp(deliverAt)
            .setBody(body.getBytes(StandardCharsets.UTF_8))
            .build();
        return producer.send(message);
    }

    private static void receive(SimpleConsumer consumer, Map<String, AtomicInteger> delivered) throws Exception {
        for (MessageView view : consumer.receive(16, Duration.ofSeconds(15))) {
            delivered.computeIfAbsent(Clients.bodyOf(view), k -> new AtomicInteger()).incrementAndGet();
            consumer.ack(view);
        }
    }
}
