package io.tidemark.compat.suite;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.MessageListener;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;

/**
 * The clients of one test against one Tidemark: RocketMQ 5's gRPC clients (rocketmq-client-java,
 * pointed at {@code tidemark dev}'s gRPC port) and, for the cross-protocol scenarios, the 5.x
 * remoting ones (pointed at its name server). All shut down afterwards.
 */
final class Clients implements AutoCloseable {

    private final String namesrvAddr;
    private final Deque<AutoCloseable> open = new ArrayDeque<>();
    final ClientServiceProvider provider = ClientServiceProvider.loadService();

    Clients(String namesrvAddr) {
        this.namesrvAddr = namesrvAddr;
    }

    /** A received message's body as text. */
    static String bodyOf(MessageView view) {
        ByteBuffer buffer = view.getBody().duplicate();
        byte[] bytes = new byte[buffer.remaining()];
        buffer.get(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
    }

    /** The gRPC clients' configuration: the gateway's address; TLS as the test asks. */
    ClientConfiguration grpcConfig(String endpoint, boolean tls) {
        return ClientConfiguration.newBuilder()
            .setEndpoints(endpoint)
            .enableSsl(tls)
            .setRequestTimeout(Duration.ofSeconds(5))
            .build();
    }

    Producer grpcProducer(ClientConfiguration config, String... topics) throws Exception {
        Producer p = provider.newProducerBuilder().setClientConfiguration(config).setTopics(topics).build();
        open.push(p);
        return p;
    }

    SimpleConsumer simpleConsumer(ClientConfiguration config, String group, String topic, Duration await)
        throws Exception {
        SimpleConsumer c = provider.newSimpleConsumerBuilder()
            .setClientConfiguration(config)
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL))
            .setAwaitDuration(await)
            .build();
        open.push(c);
        return c;
    }

    PushConsumer pushConsumer(ClientConfiguration config, String group, String topic, MessageListener listener)
        throws Exception {
        PushConsumer c = provider.newPushConsumerBuilder()
            .setClientConfiguration(config)
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Map.of(topic, FilterExpression.SUB_ALL))
            .setMessageListener(listener)
            .build();
        open.push(c);
        return c;
    }

    /** A 5.x remoting producer (also the way to admin calls through its MQClientAPIImpl). */
    DefaultMQProducer producer() throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(Names.unique("P"));
        p.setNamesrvAddr(namesrvAddr);
        p.setInstanceName(Names.instance("producer"));
        p.setVipChannelEnabled(false);
        p.setPollNameServerInterval(1000);
        p.setSendMsgTimeout(5000);
        p.start();
        open.push(p::shutdown);
        return p;
    }

    /** A 5.x remoting push consumer reading from the first offset. */
    DefaultMQPushConsumer push(String group, String topic, MessageListenerConcurrently listener) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrvAddr);
        c.setInstanceName(Names.instance("push"));
        c.setVipChannelEnabled(false);
        c.setPollNameServerInterval(1000);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener(listener);
        c.start();
        open.push(c::shutdown);
        return c;
    }

    /**
     * Closes every client at once: a gRPC PushConsumer's close waits for its long-polling receive
     * to come back (up to the server's 20 s), and one after another those waits would add up.
     */
    @Override
    public void close() {
        List<Thread> closing = new ArrayList<>();
        while (!open.isEmpty()) {
            AutoCloseable client = open.pop();
            Thread thread = new Thread(() -> {
                try {
                    client.close();
                } catch (Exception e) {
                    System.err.println("client shutdown failed: " + e);
                }
            }, "close-client");
            thread.start();
            closing.add(thread);
        }
        for (Thread thread : closing) {
            try {
                thread.join(60_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }
}
