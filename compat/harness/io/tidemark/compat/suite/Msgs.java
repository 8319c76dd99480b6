package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/** Message building and plain synchronous sending. */
final class Msgs {
    /** Tag of messages that exist only to get a topic auto-created; {@link Received} skips them. */
    static final String WARMUP_TAG = "warmup";

    private Msgs() {
    }

    static Message message(String topic, String tag, String body) {
        Message m = new Message(topic, tag, body.getBytes(StandardCharsets.UTF_8));
        m.setKeys(body);
        return m;
    }

    static SendResult sendOk(DefaultMQProducer producer, Message m) throws Exception {
        SendResult r = producer.send(m);
        assertEquals(SendStatus.SEND_OK, r.getSendStatus(), "send status of " + bodyOf(m) + ": " + r);
        return r;
    }

    /** Sends {@code count} bodies {@code prefix-0..} synchronously; returns the results in order. */
    static List<SendResult> sendAll(DefaultMQProducer producer, String topic, String tag, String prefix, int count)
        throws Exception {
        List<SendResult> results = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            results.add(sendOk(producer, message(topic, tag, prefix + "-" + i)));
        }
        return results;
    }

    static List<String> bodies(String prefix, int count) {
        List<String> b = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            b.add(prefix + "-" + i);
        }
        return b;
    }

    /** One message so the broker auto-creates {@code topic} from TBW102 before consumers start. */
    static void warmUp(DefaultMQProducer producer, String topic) throws Exception {
        sendOk(producer, message(topic, WARMUP_TAG, "warmup-" + System.nanoTime()));
    }

    static String bodyOf(Message m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }
}
