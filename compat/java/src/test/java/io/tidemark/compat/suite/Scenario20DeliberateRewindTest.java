package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import java.util.stream.LongStream;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.store.OffsetStore;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.header.QueryConsumerOffsetRequestHeader;
import org.apache.rocketmq.common.protocol.route.BrokerData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 20: a group's committed offset can be moved back on purpose, and the group then reads
 * again from there. Apache stores whatever offset an UPDATE_CONSUMER_OFFSET carries; Tidemark
 * refuses a lower offset from a member of the group that no longer consumes the queue (a former
 * owner's late commit), so this scenario pins down the two deliberate cases it must still store:
 * a rewind from a connection that is not a consumer of the group (an admin tool), and one from the
 * consumer that currently pulls the queue.
 *
 * <p>All messages go to one queue of the topic (one the warm-up message did not land on), so their
 * queue offsets are exactly 0..9.
 *
 * <p>What the 4.9.8 {@link DefaultLitePullConsumer} commits after {@code seek(mq, n)} (seen against
 * Apache): {@code seek} only records the new position for the queue's pull task, which takes it
 * over when it next runs. {@code commitSync()} commits the consumer's position, so straight after
 * the seek it usually still commits the old one (10); a moment later, once the pull task has taken
 * the seek, it commits n; after one polled batch it commits the position after that batch. The
 * timing-dependent form is not used here: the test rewinds with a polled batch (position after it)
 * and with {@code commitSync(Map.of(mq, n), true)} (exactly n, sent right away).
 */
@Tag("tidemark")
class Scenario20DeliberateRewindTest extends SuiteBase {

    private static final long COUNT = 10;
    private static final long ADMIN_REWIND_TO = 3;
    private static final long SEEK_TO = 4;
    /** Lite pull batch size, so one poll after the seek returns offsets 4 and 5 only. */
    private static final int PULL_BATCH = 2;

    /** A topic whose queue {@code mq} holds exactly the bodies {@code prefix-0..9} at offsets 0..9. */
    private record OneQueue(String topic, MessageQueue mq, String prefix) {
        String body(long offset) {
            return prefix + "-" + offset;
        }

        List<String> bodies(long fromOffset) {
            return LongStream.range(fromOffset, COUNT).mapToObj(this::body).toList();
        }
    }

    @Test
    void anAdminRewindIsStored() throws Exception {
        String group = Names.group("s20admin");
        OneQueue q = oneQueueWithTenMessages("s20admin", "a");
        DefaultMQAdminExt admin = clients.admin();
        OffsetView stats = () -> statsOffset(admin, group, q);

        Received first = new Received();
        DefaultMQPushConsumer c1 = clients.push(group, q.topic(), "*", first.listener("first"));
        first.awaitAll(q.bodies(0), Duration.ofSeconds(30));
        awaitAcknowledged(c1, q.mq(), COUNT);
        // no consumer of the group may be running when the admin rewinds: a live one would
        // commit its own position over the rewind
        c1.shutdown();
        awaitOffset(stats, q.mq(), COUNT, "the first consumer's commits (persisted at shutdown)");

        // the admin's client is not a member of the group; the request is synchronous, so the
        // broker must report the new offset as soon as it has answered
        admin.updateConsumeOffset(brokerAddr(admin, q.mq()), group, q.mq(), ADMIN_REWIND_TO);
        long stored = statsOffset(admin, group, q);
        assertEquals(ADMIN_REWIND_TO, stored, () -> "committed offset of " + q.mq() + " after the admin's "
            + "updateConsumeOffset(" + ADMIN_REWIND_TO + "), was " + COUNT + serverLog());

        Received second = new Received();
        DefaultMQPushConsumer c2 = clients.push(group, q.topic(), "*", second.listener("second"));
        second.awaitAll(q.bodies(ADMIN_REWIND_TO), Duration.ofSeconds(30));
        second.awaitQuiet(Duration.ofSeconds(2), Duration.ofSeconds(20));
        List<Long> offsets = new ArrayList<>();
        for (Received.Delivery d : second.deliveries()) {
            assertEquals(q.mq().getQueueId(), d.queueId(), () -> "delivery from another queue: " + d);
            offsets.add(d.queueOffset());
        }
        offsets.sort(null);
        System.out.println("scenario20 admin rewind to " + stored + ": the next consumer got offsets " + offsets);
        assertEquals(range(ADMIN_REWIND_TO, COUNT), offsets,
            () -> "after the rewind to " + ADMIN_REWIND_TO + " the next consumer must get offsets "
                + ADMIN_REWIND_TO + ".." + (COUNT - 1) + " once each, nothing before: " + second.deliveries());

        // and the group moves forward from the rewound offset as usual
        awaitAcknowledged(c2, q.mq(), COUNT);
        c2.shutdown();
        awaitOffset(stats, q.mq(), COUNT, "the second consumer's commits (persisted at shutdown)");
    }

    @Test
    void aLitePullConsumerThatSeeksBackAndCommitsReplays() throws Exception {
        String group = Names.group("s20lite");
        OneQueue q = oneQueueWithTenMessages("s20lite", "l");
        MessageQueue mq = q.mq();
        OffsetView broker = queriedOffset(clients.admin(), group, mq);

        DefaultLitePullConsumer c = clients.litePull(group);
        c.setAutoCommit(false);
        c.setPullBatchSize(PULL_BATCH);
        c.start();
        c.assign(List.of(mq));
        assertEquals(range(0, COUNT), pollOffsets(c, q, COUNT), "first pass over the queue");
        c.commitSync();
        assertEquals(COUNT, c.committed(mq).longValue(), "client's committed offset after commitSync()");
        // commitSync() only updates the client's offset store; the client's periodic persist
        // (first run 10 s after the client started, then every second) sends it
        awaitOffset(broker, mq, COUNT, "commitSync() after the first pass");
        // An online group whose member subscribes to nothing (assign mode) is still listed by
        // examineConsumeStats (Tidemark skipped it once; 4.9.7 does not).
        assertEquals(COUNT, statsOffset(clients.admin(), group, q), "examineConsumeStats while assigned");

        // The usual way back: seek, process a batch, commit. commitSync() commits the position
        // after the polled batch, which is below the stored offset.
        c.seek(mq, SEEK_TO);
        List<Long> batch = pollBatch(c, q);
        assertEquals(range(SEEK_TO, SEEK_TO + PULL_BATCH), batch, "first batch after seek(" + SEEK_TO + ")");
        c.commitSync();
        long afterBatch = SEEK_TO + PULL_BATCH;
        assertEquals(afterBatch, c.committed(mq).longValue(),
            "client's committed offset after seek, one batch, commitSync()");
        awaitOffset(broker, mq, afterBatch,
            "commitSync() after seek(" + SEEK_TO + ") and one polled batch (a rewind from " + COUNT + ")");

        // Back to the sought offset itself, committed explicitly and sent at once.
        c.seek(mq, SEEK_TO);
        c.commitSync(Map.of(mq, SEEK_TO), true);
        assertEquals(SEEK_TO, c.committed(mq).longValue(),
            "client's committed offset after commitSync({mq: " + SEEK_TO + "}, true)");
        awaitOffset(broker, mq, SEEK_TO, "commitSync({mq: " + SEEK_TO + "}, persist) after a seek");
        // the same consumer reads from there again (and commits nothing more)
        List<Long> replay = pollOffsets(c, q, COUNT - SEEK_TO);
        assertEquals(range(SEEK_TO, COUNT), replay, "what the consumer polls after seek(" + SEEK_TO + ")");
        c.shutdown();
        // shutdown persists the client's committed offset, which is still the rewound one
        awaitOffset(broker, mq, SEEK_TO, "the rewound offset after the consumer's shutdown");

        DefaultLitePullConsumer next = clients.litePull(group);
        next.setAutoCommit(false);
        next.setPullBatchSize(PULL_BATCH);
        next.start();
        next.assign(List.of(mq));
        List<Long> resumed = pollOffsets(next, q, COUNT - SEEK_TO);
        List<Long> extra = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            next.poll(500).forEach(m -> extra.add(m.getQueueOffset()));
        }
        System.out.println("scenario20 lite pull: after the rewind to " + SEEK_TO + " the next consumer polled "
            + resumed + (extra.isEmpty() ? "" : " then " + extra));
        assertEquals(SEEK_TO, resumed.get(0).longValue(),
            () -> "first offset the next consumer of the group polls: " + resumed);
        assertEquals(range(SEEK_TO, COUNT), resumed, "what the next consumer of the group polls");
        assertTrue(extra.isEmpty(), () -> "the next consumer polled more than the queue holds: " + extra);
        next.shutdown();
    }

    /**
     * Sends a warm-up message (the broker auto-creates the topic), then {@value #COUNT} messages
     * to one queue the warm-up did not land on; checks that they got offsets 0..9.
     */
    private OneQueue oneQueueWithTenMessages(String scenario, String prefix) throws Exception {
        String topic = Names.topic(scenario);
        DefaultMQProducer producer = clients.producer();
        SendResult warm = Msgs.sendOk(producer, Msgs.message(topic, Msgs.WARMUP_TAG, "warmup-" + System.nanoTime()));
        int warmQueue = warm.getMessageQueue().getQueueId();
        // The name server learns an auto-created topic at the broker's next registration, which
        // runs alongside the send's answer: ask again until it knows it (bounded).
        java.util.List<MessageQueue> queues = null;
        long deadline = System.currentTimeMillis() + 15_000;
        while (queues == null) {
            try {
                queues = producer.fetchPublishMessageQueues(topic);
            } catch (org.apache.rocketmq.client.exception.MQClientException notYet) {
                if (System.currentTimeMillis() > deadline) {
                    throw notYet;
                }
                Thread.sleep(100);
            }
        }
        MessageQueue mq = queues.stream()
            .filter(m -> m.getQueueId() != warmQueue).findFirst()
            .orElseThrow(() -> new AssertionError("no second write queue for " + topic));
        OneQueue q = new OneQueue(topic, mq, prefix);
        for (long i = 0; i < COUNT; i++) {
            SendResult r = producer.send(Msgs.message(topic, "t", q.body(i)), mq);
            assertEquals(SendStatus.SEND_OK, r.getSendStatus(), "send of " + q.body(i) + ": " + r);
            assertEquals(i, r.getQueueOffset(), "queue offset of " + q.body(i) + " in " + mq);
        }
        return q;
    }

    /** Offsets of the next {@code n} messages {@code c} polls (bounded), in poll order. */
    private static List<Long> pollOffsets(DefaultLitePullConsumer c, OneQueue q, long n) {
        List<Long> offsets = new ArrayList<>();
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (offsets.size() < n) {
            assertTrue(System.nanoTime() < deadline, () -> "polled only " + offsets + " of " + n + serverLog());
            offsets.addAll(offsetsOf(c.poll(500), q));
        }
        return offsets;
    }

    /** Offsets of the first non-empty batch {@code c} polls (bounded). */
    private static List<Long> pollBatch(DefaultLitePullConsumer c, OneQueue q) {
        long deadline = System.nanoTime() + Duration.ofSeconds(15).toNanos();
        while (true) {
            List<Long> offsets = offsetsOf(c.poll(500), q);
            if (!offsets.isEmpty()) {
                return offsets;
            }
            assertTrue(System.nanoTime() < deadline, () -> "nothing polled within 15 s" + serverLog());
        }
    }

    private static List<Long> offsetsOf(List<MessageExt> msgs, OneQueue q) {
        List<Long> offsets = new ArrayList<>();
        for (MessageExt m : msgs) {
            assertEquals(q.mq().getQueueId(), m.getQueueId(), () -> "message from another queue: " + m);
            // the body says which offset the message was sent to
            assertEquals(q.body(m.getQueueOffset()), new String(m.getBody(), StandardCharsets.UTF_8),
                () -> "body of the message at offset " + m.getQueueOffset());
            offsets.add(m.getQueueOffset());
        }
        return offsets;
    }

    /**
     * Waits until the push consumer's own offset store holds {@code offset} for {@code mq}: the
     * listener records a message before the client acknowledges it, and shutdown persists only
     * what is acknowledged.
     */
    private static void awaitAcknowledged(DefaultMQPushConsumer c, MessageQueue mq, long offset) {
        OffsetStore store = c.getDefaultMQPushConsumerImpl().getOffsetStore();
        Wait.until(c.getConsumerGroup() + " consumer to acknowledge up to " + offset, Duration.ofSeconds(10),
            () -> store.readOffset(mq, ReadOffsetType.READ_FROM_MEMORY) == offset,
            () -> "its offset store has " + store.readOffset(mq, ReadOffsetType.READ_FROM_MEMORY));
    }

    /** Where the broker says a group stands in one queue (throws while it cannot say yet). */
    @FunctionalInterface
    private interface OffsetView {
        long read() throws Exception;
    }

    /** The group's committed offset for the queue as examineConsumeStats reports it. */
    private static long statsOffset(DefaultMQAdminExt admin, String group, OneQueue q) {
        Map<Integer, OffsetWrapper> byQueue = Stats.byQueue(
            Stats.examine(admin, group, q.topic(), Duration.ofSeconds(10)), q.topic());
        OffsetWrapper w = byQueue.get(q.mq().getQueueId());
        assertNotNull(w, () -> "examineConsumeStats(" + group + ", " + q.topic() + ") has no entry for "
            + q.mq() + ": " + Stats.describe(byQueue) + serverLog());
        return w.getConsumerOffset();
    }

    /**
     * The broker's answer to QUERY_CONSUMER_OFFSET, the request a starting consumer sends to learn
     * where to begin, sent over the admin's own client (not a member of the group). Used for the
     * lite pull group, whose client persists on its own timer; examineConsumeStats is checked
     * once as well.
     */
    private static OffsetView queriedOffset(DefaultMQAdminExt admin, String group, MessageQueue mq) {
        // the admin's MQClientInstance (same client id), already started
        MQClientInstance instance = MQClientManager.getInstance().getOrCreateMQClientInstance(admin);
        return () -> {
            QueryConsumerOffsetRequestHeader h = new QueryConsumerOffsetRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(mq.getTopic());
            h.setQueueId(mq.getQueueId());
            return instance.getMQClientAPIImpl().queryConsumerOffset(brokerAddr(admin, mq), h, 5000);
        };
    }

    /** Polls {@code view} until it reads {@code expected}; 20 s covers the client's first periodic persist. */
    private static void awaitOffset(OffsetView view, MessageQueue mq, long expected, String what) {
        String[] last = {"nothing yet"};
        Wait.until("the broker to report offset " + expected + " for " + mq + " (" + what + ")",
            Duration.ofSeconds(20), () -> {
                try {
                    long v = view.read();
                    last[0] = Long.toString(v);
                    return v == expected;
                } catch (Exception | AssertionError e) {
                    last[0] = e.toString();
                    return false;
                }
            }, () -> "last answer: " + last[0] + serverLog());
    }

    private static String brokerAddr(DefaultMQAdminExt admin, MessageQueue mq) throws Exception {
        List<BrokerData> brokers = admin.examineTopicRouteInfo(mq.getTopic()).getBrokerDatas();
        return brokers.stream().filter(b -> b.getBrokerName().equals(mq.getBrokerName())).findFirst()
            .map(BrokerData::selectBrokerAddr)
            .orElseThrow(() -> new AssertionError("no broker " + mq.getBrokerName() + " in the route of "
                + mq.getTopic() + ": " + brokers.stream().map(BrokerData::getBrokerName)
                    .collect(Collectors.joining(", "))));
    }

    private static List<Long> range(long from, long to) {
        return LongStream.range(from, to).boxed().toList();
    }
}
