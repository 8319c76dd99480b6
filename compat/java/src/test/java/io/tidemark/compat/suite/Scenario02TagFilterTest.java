package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.consumer.PullResultExt;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.filter.ExpressionType;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.common.sysflag.PullSysFlag;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** Scenario 2: "TagA || TagB" delivers exactly the TagA and TagB messages. */
@Tag("tidemark")
class Scenario02TagFilterTest extends SuiteBase {

    private static final int COUNT = 30;
    private static final String EXPRESSION = "TagA || TagB";

    private static String tagOf(int i) {
        return switch (i % 3) {
            case 0 -> "TagA";
            case 1 -> "TagB";
            default -> "TagC";
        };
    }

    private List<String> produce(DefaultMQProducer producer, String topic) throws Exception {
        List<String> wanted = new ArrayList<>();
        for (int i = 0; i < COUNT; i++) {
            String body = tagOf(i) + "-" + i;
            Msgs.sendOk(producer, Msgs.message(topic, tagOf(i), body));
            if (!tagOf(i).equals("TagC")) {
                wanted.add(body);
            }
        }
        return wanted;
    }

    @Test
    void pushConsumerReceivesOnlyTagAAndTagB() throws Exception {
        String topic = Names.topic("s02");
        List<String> wanted = produce(clients.producer(), topic);

        Received received = new Received();
        clients.push(Names.group("s02"), topic, EXPRESSION, received.listener("c"));
        received.awaitAll(wanted, Duration.ofSeconds(30));
        // give a wrongly delivered TagC message time to show up
        received.awaitQuiet(Duration.ofSeconds(2), Duration.ofSeconds(20));

        assertEquals(new TreeSet<>(wanted), received.bodies(), "bodies delivered for '" + EXPRESSION + "'");
        assertTrue(received.duplicates().isEmpty(), "duplicates: " + received.duplicates());
    }

    /**
     * The Java client drops non-matching tags again after every pull, so the push test above passes
     * even if the broker does not filter. Here PULL_MESSAGE is sent directly (subscription flag set,
     * expression in the header) and the raw response body is decoded, which shows what the broker
     * itself returned: it must filter on the tag hash codes of the consume queue.
     */
    @Test
    void brokerItselfFiltersByTag() throws Exception {
        String topic = Names.topic("s02raw");
        DefaultMQProducer producer = clients.producer();
        List<String> wanted = produce(producer, topic);

        MQClientInstance factory = producer.getDefaultMQProducerImpl().getmQClientFactory();
        MQClientAPIImpl api = factory.getMQClientAPIImpl();
        String group = Names.group("s02raw");
        Set<String> seen = new TreeSet<>();
        List<String> wrong = new ArrayList<>();
        for (MessageQueue mq : producer.fetchPublishMessageQueues(topic)) {
            String addr = factory.findBrokerAddressInPublish(mq.getBrokerName());
            long max = producer.getDefaultMQProducerImpl().maxOffset(mq);
            long offset = 0;
            for (int round = 0; offset < max; round++) {
                if (round > 50) {
                    fail("pulling " + mq + " from offset 0 to " + max + " did not finish in 50 pulls");
                }
                PullMessageRequestHeader h = new PullMessageRequestHeader();
                h.setConsumerGroup(group);
                h.setTopic(topic);
                h.setQueueId(mq.getQueueId());
                h.setQueueOffset(offset);
                h.setMaxMsgNums(32);
                h.setSysFlag(PullSysFlag.buildSysFlag(false, false, true, false));
                h.setCommitOffset(0L);
                h.setSuspendTimeoutMillis(0L);
                h.setSubscription(EXPRESSION);
                h.setSubVersion(System.currentTimeMillis());
                h.setExpressionType(ExpressionType.TAG);
                PullResult r = api.pullMessage(addr, h, 5000, CommunicationMode.SYNC, null);
                if (r.getPullStatus() == PullStatus.FOUND) {
                    byte[] bin = ((PullResultExt) r).getMessageBinary();
                    for (MessageExt m : MessageDecoder.decodes(ByteBuffer.wrap(bin))) {
                        String body = new String(m.getBody(), StandardCharsets.UTF_8);
                        seen.add(body);
                        if ("TagC".equals(m.getTags())) {
                            wrong.add(body + "@" + mq.getQueueId() + ":" + m.getQueueOffset());
                        }
                    }
                } else if (r.getPullStatus() != PullStatus.NO_MATCHED_MSG) {
                    fail("pull " + mq + " at " + offset + " (max " + max + ") answered " + r.getPullStatus()
                        + ", nextBeginOffset " + r.getNextBeginOffset());
                }
                if (r.getNextBeginOffset() <= offset) {
                    fail("pull " + mq + " at " + offset + " did not advance: " + r);
                }
                offset = r.getNextBeginOffset();
            }
        }
        assertTrue(wrong.isEmpty(), "broker returned TagC messages for '" + EXPRESSION + "': " + wrong);
        assertEquals(new TreeSet<>(wanted), seen, "messages the broker returned for '" + EXPRESSION + "'");
    }
}
