package io.tidemark.compat.suite;

import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.netty.TlsSystemConfig;

/**
 * A separate JVM for the TLS scenarios: the 4.9 client reads {@code -Dtls.enable} (and the other
 * {@code tls.*} properties) once, into static fields, so a client that dials TLS cannot share a JVM
 * with the suite's plaintext clients. Sends {@code count} messages to {@code topic}, consumes them
 * back with a push consumer, prints one {@code tls-client} line and exits 0 only if every message
 * came back.
 *
 * <p>Arguments: {@code <namesrv> <topic> <count>}.
 */
public final class TlsClientRun {

    private TlsClientRun() {
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        String tag = "tls-" + System.nanoTime();
        DefaultMQProducer producer = new DefaultMQProducer("tlsP" + tag);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("tlsP" + tag);
        producer.setVipChannelEnabled(false);
        producer.setSendMsgTimeout(5000);
        producer.start();
        int sent = 0;
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "tls", ("tls-" + i).getBytes(StandardCharsets.UTF_8));
            SendResult r = producer.send(m);
            if (r.getSendStatus() == SendStatus.SEND_OK) {
                sent++;
            }
        }
        Set<String> received = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer("tlsC" + tag);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("tlsC" + tag);
        consumer.setVipChannelEnabled(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            msgs.forEach(m -> received.add(new String(m.getBody(), StandardCharsets.UTF_8)));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (received.size() < count && System.nanoTime() < deadline) {
            Thread.sleep(100);
        }
        consumer.shutdown();
        producer.shutdown();
        System.out.println("tls-client tlsEnable=" + TlsSystemConfig.tlsEnable + " sent=" + sent
            + " received=" + received.size());
        System.out.flush();
        System.exit(sent == count && received.size() == count ? 0 : 1);
    }
}
