package io.tidemark.compat.store;

import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.store.MessageExtBrokerInner;

/**
 * The deterministic message set written into the store fixture. Everything here is a pure
 * function of the message index and one fixed seed, so two generator runs put byte-identical
 * messages; only what the store takes from the clock (store timestamps) differs.
 */
final class FixtureMessages {

    static final String TOPIC_A = "TopicA";
    static final String TOPIC_B = "TopicB";
    static final int TOPIC_A_QUEUES = 4;
    static final int TOPIC_B_QUEUES = 2;
    static final int COUNT = 300;
    static final long SEED = 0x7EDE_3A2C_0FF1_CE5EL;
    static final long BORN_BASE = 1_700_000_000_000L;

    static final InetSocketAddress BORN_HOST = new InetSocketAddress("127.0.0.1", 50000);
    static final InetSocketAddress STORE_HOST = new InetSocketAddress("127.0.0.1", 10911);

    /** Low-entropy alphabet for text bodies: keeps the checked-in fixture compressible. */
    private static final char[] TEXT = "abcdefghijklmnop".toCharArray();

    record Spec(int index, String topic, int queueId, int flag, String tags, String keys, String uniqKey,
                long bornTimestamp, byte[] body, Map<String, String> properties) {

        String propertiesString() {
            return MessageDecoder.messageProperties2String(properties);
        }

        MessageExtBrokerInner toInner() {
            MessageExtBrokerInner m = new MessageExtBrokerInner();
            m.setTopic(topic);
            m.setQueueId(queueId);
            m.setFlag(flag);
            m.setBody(body);
            // The broker normally copies the request's properties; mirror that so the map the
            // encoder sees and the string it writes agree.
            properties.forEach((k, v) -> MessageAccessor.putProperty(m, k, v));
            m.setPropertiesString(propertiesString());
            m.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(tags));
            m.setBornTimestamp(bornTimestamp);
            m.setBornHost(BORN_HOST);
            m.setStoreHost(STORE_HOST);
            m.setSysFlag(0);
            m.setReconsumeTimes(0);
            return m;
        }
    }

    private FixtureMessages() {
    }

    /**
     * Queue spread is deliberately uneven: TopicA queue 0 takes every even index (150 entries, so
     * with 100-entry consume-queue files it spans two), queues 1..3 share a quarter, TopicB's two
     * queues share the last quarter.
     */
    static List<Spec> all() {
        Random rnd = new Random(SEED);
        List<Spec> out = new ArrayList<>(COUNT);
        for (int i = 0; i < COUNT; i++) {
            String topic;
            int queueId;
            if (i % 4 == 3) {
                topic = TOPIC_B;
                queueId = (i / 4) % TOPIC_B_QUEUES;
            } else if (i % 2 == 0) {
                topic = TOPIC_A;
                queueId = 0;
            } else {
                topic = TOPIC_A;
                queueId = 1 + (i / 4) % (TOPIC_A_QUEUES - 1);
            }
            String tags = switch (i % 3) {
                case 0 -> "TagA";
                case 1 -> "TagB";
                default -> null;
            };
            String keys;
            if (i % 7 == 6) {
                keys = null;
            } else if (i % 5 == 0) {
                // Two space-separated keys; "grp<n>" repeats, giving index hash chains with several entries.
                keys = "k" + i + " grp" + (i % 4);
            } else {
                keys = "k" + i;
            }
            // Shaped like a real client id (ip, pid, classloader hash, ms since month start, counter).
            String uniqKey = String.format("7F0000010FA01234ABCD%08X%04X", i * 1000, i);

            int size = 10 + rnd.nextInt(591);
            byte[] body = new byte[size];
            if (i % 10 == 9) {
                rnd.nextBytes(body);
            } else {
                for (int j = 0; j < size; j++) {
                    body[j] = (byte) TEXT[rnd.nextInt(TEXT.length)];
                }
            }

            Map<String, String> props = new LinkedHashMap<>();
            if (tags != null) {
                props.put(MessageConst.PROPERTY_TAGS, tags);
            }
            if (keys != null) {
                props.put(MessageConst.PROPERTY_KEYS, keys);
            }
            props.put(MessageConst.PROPERTY_WAIT_STORE_MSG_OK, "true");
            props.put(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, uniqKey);
            props.put("seq", Integer.toString(i));

            out.add(new Spec(i, topic, queueId, i % 5, tags, keys, uniqKey, BORN_BASE + i * 137L, body, props));
        }
        return out;
    }

    static Map<String, Integer> expectedQueueCounts(List<Spec> specs) {
        Map<String, Integer> counts = new LinkedHashMap<>();
        for (int q = 0; q < TOPIC_A_QUEUES; q++) {
            counts.put(TOPIC_A + "/" + q, 0);
        }
        for (int q = 0; q < TOPIC_B_QUEUES; q++) {
            counts.put(TOPIC_B + "/" + q, 0);
        }
        for (Spec s : specs) {
            counts.merge(s.topic() + "/" + s.queueId(), 1, Integer::sum);
        }
        return counts;
    }
}
