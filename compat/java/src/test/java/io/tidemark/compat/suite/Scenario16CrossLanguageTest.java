package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.body.ConsumerConnection;
import org.apache.rocketmq.common.protocol.body.ConsumerRunningInfo;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 16: the real Java client and Tidemark's Rust client exchange messages through the
 * server. The Rust side is the {@code tidemark admin send-message} / {@code consume-message}
 * commands (system property {@code tidemark.cli}, defaulting to {@code tidemark.bin}), which
 * print one JSON line per message. Ids, bodies, tags, keys and user properties must survive
 * both directions.
 */
@Tag("tidemark")
class Scenario16CrossLanguageTest extends SuiteBase {

    private static final int COUNT = 10;

    /** Runs the CLI, returns its stdout lines; fails with its stderr on a non-zero exit. */
    private static List<String> runCli(String... args) throws Exception {
        TidemarkCli.Run run = TidemarkCli.run(args);
        if (run.exit() != 0) {
            fail("tidemark CLI " + List.of(args) + " exited with " + run.exit() + "\n" + run.stderr() + serverLog());
        }
        return run.stdout();
    }

    @Test
    void javaProducerToRustConsumer() throws Exception {
        String topic = Names.topic("s16j");
        DefaultMQProducer producer = clients.producer();
        Map<String, Message> sent = new ConcurrentHashMap<>();
        for (int i = 0; i < COUNT; i++) {
            Message m = new Message(topic, "TagJ", "key-" + i, ("from java " + i).getBytes(StandardCharsets.UTF_8));
            m.putUserProperty("color", "blue");
            SendResult r = Msgs.sendOk(producer, m);
            sent.put(r.getMsgId(), m);
        }
        List<String> lines = runCli("admin", "consume-message", "-n", tidemark.namesrvAddr(), "-t", topic,
            "-g", Names.group("s16j"), "--count", Integer.toString(COUNT), "--timeout-secs", "60");
        assertEquals(COUNT, lines.size(), "one JSON line per message: " + lines);
        for (String line : lines) {
            JSONObject got = JSON.parseObject(line);
            Message m = sent.get(got.getString("msgId"));
            assertNotNull(m, "the Rust consumer reports a msgId the Java producer never got: " + line);
            assertEquals(topic, got.getString("topic"));
            assertEquals(new String(m.getBody(), StandardCharsets.UTF_8), got.getString("body"));
            JSONObject properties = got.getJSONObject("properties");
            assertEquals("TagJ", properties.getString("TAGS"));
            assertEquals(m.getKeys(), properties.getString("KEYS"));
            assertEquals("blue", properties.getString("color"));
        }
    }

    @Test
    void rustProducerToJavaConsumer() throws Exception {
        String topic = Names.topic("s16r");
        List<String> lines = runCli("admin", "send-message", "-n", tidemark.namesrvAddr(), "-t", topic,
            "--count", Integer.toString(COUNT), "-b", "from rust {i}", "--tag", "TagR", "-k", "key-{i}",
            "-p", "color=green");
        assertEquals(COUNT, lines.size(), "one JSON line per send: " + lines);
        Map<String, String> bodyById = new ConcurrentHashMap<>();
        for (int i = 0; i < lines.size(); i++) {
            JSONObject result = JSON.parseObject(lines.get(i));
            assertEquals("SEND_OK", result.getString("status"), lines.get(i));
            bodyById.put(result.getString("msgId"), "from rust " + i);
        }
        Map<String, MessageExt> received = new ConcurrentHashMap<>();
        MessageListenerConcurrently listener = (msgs, ctx) -> {
            msgs.forEach(m -> received.put(m.getMsgId(), m));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        clients.push(Names.group("s16r"), topic, "*", listener);
        Wait.until("the Java consumer to receive the Rust producer's messages", Duration.ofSeconds(60),
            () -> received.keySet().containsAll(bodyById.keySet()),
            () -> "received " + received.keySet() + " of " + bodyById.keySet() + serverLog());
        for (Map.Entry<String, String> e : bodyById.entrySet()) {
            MessageExt m = received.get(e.getKey());
            assertEquals(e.getValue(), new String(m.getBody(), StandardCharsets.UTF_8));
            assertEquals("TagR", m.getTags());
            assertTrue(m.getKeys().startsWith("key-"), m.getKeys());
            assertEquals("green", m.getUserProperty("color"));
            assertEquals(topic, m.getTopic());
        }
    }

    /**
     * A Rust push consumer answers GET_CONSUMER_RUNNING_INFO (mqadmin {@code consumerStatus})
     * in a form the Java admin decodes and analyses: properties, subscriptions, held queues.
     */
    @Test
    void rustConsumerReportsItsRunningInfoToJavaAdmin() throws Exception {
        String topic = Names.topic("s16s");
        String group = Names.group("s16s");
        DefaultMQProducer producer = clients.producer();
        for (int i = 0; i < COUNT; i++) {
            Msgs.sendOk(producer, new Message(topic, "TagS", ("status " + i).getBytes(StandardCharsets.UTF_8)));
        }
        List<String> command = List.of(TidemarkCli.binary().toString(), "admin", "consume-message", "-n", tidemark.namesrvAddr(),
            "-t", topic, "-g", group, "--timeout-secs", "60");
        Process process = new ProcessBuilder(command)
            .redirectOutput(ProcessBuilder.Redirect.DISCARD)
            .redirectError(ProcessBuilder.Redirect.DISCARD)
            .start();
        try {
            DefaultMQAdminExt admin = clients.admin();
            String[] clientId = new String[1];
            Wait.until("the Rust consumer to be online", Duration.ofSeconds(30), () -> {
                try {
                    ConsumerConnection connection = admin.examineConsumerConnectionInfo(group);
                    // The group's only member is the Rust consumer.
                    clientId[0] = connection.getConnectionSet().stream()
                        .map(c -> c.getClientId()).findFirst().orElse(null);
                    return clientId[0] != null;
                } catch (Exception notYet) {
                    return false;
                }
            });
            ConsumerRunningInfo[] info = new ConsumerRunningInfo[1];
            Wait.until("the Rust consumer to hold the topic's queues", Duration.ofSeconds(30), () -> {
                try {
                    info[0] = admin.getConsumerRunningInfo(group, clientId[0], false);
                    return info[0].getMqTable().keySet().stream().anyMatch(mq -> mq.getTopic().equals(topic));
                } catch (Exception notYet) {
                    return false;
                }
            });
            assertEquals("CONSUME_PASSIVELY", info[0].getProperties().getProperty("PROP_CONSUME_TYPE"));
            assertEquals("false", info[0].getProperties().getProperty("PROP_CONSUMEORDERLY"));
            Long.parseLong(info[0].getProperties().getProperty("PROP_CONSUMER_START_TIMESTAMP"));
            assertTrue(info[0].getSubscriptionSet().stream().anyMatch(s -> s.getTopic().equals(topic)),
                info[0].getSubscriptionSet().toString());
            assertTrue(info[0].getStatusTable().containsKey(topic), info[0].getStatusTable().toString());
            java.util.TreeMap<String, ConsumerRunningInfo> table = new java.util.TreeMap<>();
            table.put(clientId[0], info[0]);
            assertTrue(ConsumerRunningInfo.analyzeSubscription(table), "mqadmin's subscription analysis");
            String report = info[0].formatString();
            assertTrue(report.contains("#Consumer MQ Detail#") && report.contains(topic), report);
            // mqadmin getConsumerStatus: the broker collects the Rust consumer's offsets.
            Map<String, Map<MessageQueue, Long>> status = admin.getConsumeStatus(topic, group, "");
            assertTrue(status.containsKey(clientId[0]), status.toString());
            assertTrue(status.get(clientId[0]).keySet().stream().allMatch(mq -> mq.getTopic().equals(topic))
                && !status.get(clientId[0]).isEmpty(), status.toString());
        } finally {
            process.destroy();
            process.waitFor(10, TimeUnit.SECONDS);
        }
    }
}
