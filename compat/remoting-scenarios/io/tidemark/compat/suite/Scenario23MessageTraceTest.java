package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.trace.TraceBean;
import org.apache.rocketmq.client.trace.TraceContext;
import org.apache.rocketmq.client.trace.TraceDataEncoder;
import org.apache.rocketmq.client.trace.TraceType;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 23: message trace, in both remoting suites (4.9.8 and 5.3.3). A producer and a push consumer with tracing on
 * ({@code enableMsgTrace}) write their trace records to {@code RMQ_SYS_TRACE_TOPIC}; the broker
 * stores and serves them like any topic: read back with a plain consumer and decoded with the
 * client's own {@code TraceDataEncoder}, each message has its Pub (the producer's group, success)
 * and its SubBefore / SubAfter (the consumer's group, success). Against Tidemark,
 * {@code tidemark admin query-message --id <offset id> --trace --json} shows the same records.
 */
@Tag("tidemark")
class Scenario23MessageTraceTest extends SuiteBase {

    private static final int MESSAGES = 3;

    @Test
    void traceRecordsAppearForSendAndConsume() throws Exception {
        String topic = Names.topic("s23trace");
        String producerGroup = Names.unique("TraceP");
        String consumerGroup = Names.group("s23trace");
        DefaultMQProducer producer = new DefaultMQProducer(producerGroup, true, null);
        producer.setNamesrvAddr(tidemark.namesrvAddr());
        producer.setInstanceName(Names.instance("traceproducer"));
        producer.setVipChannelEnabled(false);
        producer.setPollNameServerInterval(1000);
        producer.start();
        try {
            Msgs.warmUp(producer, topic);
            List<SendResult> sent = new ArrayList<>();
            for (String body : Msgs.bodies("traced", MESSAGES)) {
                sent.add(Msgs.sendOk(producer, Msgs.message(topic, "traced", body)));
            }
            Set<String> ids = new TreeSet<>();
            sent.forEach(r -> ids.add(r.getMsgId()));

            DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(consumerGroup, true, null);
            consumer.setNamesrvAddr(tidemark.namesrvAddr());
            consumer.setInstanceName(Names.instance("traceconsumer"));
            consumer.setVipChannelEnabled(false);
            consumer.setPollNameServerInterval(1000);
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.subscribe(topic, "traced");
            Set<String> consumed = ConcurrentHashMap.newKeySet();
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                msgs.forEach(m -> consumed.add(m.getMsgId()));
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            try {
                Wait.until("the traced messages consumed", Duration.ofSeconds(30), () -> consumed.containsAll(ids));
                // Read the trace topic with a plain consumer, as any application could.
                List<TraceContext> records = new CopyOnWriteArrayList<>();
                clients.push(Names.group("s23reader"), TopicValidator.RMQ_SYS_TRACE_TOPIC, "*",
                    (MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) {
                        records.addAll(TraceDataEncoder.decoderFromTraceDataString(
                            new String(m.getBody(), StandardCharsets.UTF_8)));
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                Wait.until("Pub, SubBefore and SubAfter for every message", Duration.ofSeconds(60),
                    () -> complete(records, ids, producerGroup, consumerGroup),
                    () -> "trace records: " + describe(records) + serverLog());
                System.out.println("scenario23 against " + (againstApacheReference() ? "Apache" : "Tidemark")
                    + ": trace records=" + records.size() + " for " + ids.size() + " messages");
                if (!againstApacheReference()) {
                    checkAdminQuery(sent.get(0), producerGroup, consumerGroup);
                }
            } finally {
                consumer.shutdown();
            }
        } finally {
            producer.shutdown();
        }
    }

    /** Whether every id has a successful Pub of the producer group and both consume records. */
    private static boolean complete(List<TraceContext> records, Set<String> ids, String producerGroup,
        String consumerGroup) {
        for (String id : ids) {
            boolean pub = false;
            boolean before = false;
            boolean after = false;
            for (TraceContext ctx : records) {
                for (TraceBean bean : ctx.getTraceBeans()) {
                    if (!id.equals(bean.getMsgId())) {
                        continue;
                    }
                    if (ctx.getTraceType() == TraceType.Pub && producerGroup.equals(ctx.getGroupName())
                        && ctx.isSuccess()) {
                        pub = true;
                    } else if (ctx.getTraceType() == TraceType.SubBefore
                        && consumerGroup.equals(ctx.getGroupName())) {
                        before = true;
                    } else if (ctx.getTraceType() == TraceType.SubAfter && ctx.isSuccess()) {
                        after = true;
                    }
                }
            }
            if (!(pub && before && after)) {
                return false;
            }
        }
        return true;
    }

    private static String describe(List<TraceContext> records) {
        StringBuilder out = new StringBuilder();
        for (TraceContext ctx : records) {
            out.append(ctx.getTraceType()).append('/').append(ctx.getGroupName()).append('/')
                .append(ctx.getTraceBeans().isEmpty() ? "" : ctx.getTraceBeans().get(0).getMsgId()).append(' ');
        }
        return out.toString();
    }

    /** The operator's view: {@code tidemark admin query-message --trace} finds the same records. */
    private void checkAdminQuery(SendResult sent, String producerGroup, String consumerGroup) throws Exception {
        String bin = System.getProperty("tidemark.bin");
        Process admin = new ProcessBuilder(Path.of(bin).toString(), "admin", "query-message", "-n",
            tidemark.namesrvAddr(), "--id", sent.getOffsetMsgId(), "--trace", "--json")
            .redirectErrorStream(false)
            .start();
        String output = new String(admin.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(admin.waitFor(60, TimeUnit.SECONDS), "query-message finished");
        String errors = new String(admin.getErrorStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, admin.exitValue(), () -> "query-message failed: " + output + errors);
        System.out.println("scenario23 query-message: " + output.trim());
        assertTrue(output.contains("\"msgId\":\"" + sent.getMsgId() + "\""), () -> "the message: " + output);
        for (String expected : List.of("\"type\":\"Pub\"", "\"type\":\"SubBefore\"", "\"type\":\"SubAfter\"",
            "\"group\":\"" + producerGroup + "\"", "\"group\":\"" + consumerGroup + "\"")) {
            assertTrue(output.contains(expected), () -> expected + " missing in " + output);
        }
    }
}
