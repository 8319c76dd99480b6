package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 31, in both remoting suites: every kind of remoting consumer follows an operator's
 * reset made while it is online (mqadmin's {@code resetOffsetByTimestamp}, forced). Push
 * consumers, concurrent and orderly, take the broker's RESET_CONSUMER_CLIENT_OFFSET notice; lite
 * pull consumers, subscribed and assigned, ignore that notice and follow the broker's answer to
 * their next pull (PULL_OFFSET_MOVED to the reset offset). For each: ten messages in one queue
 * are consumed and committed, the group is reset to the store time of the sixth, and the next
 * message the consumer processes from that queue is the reset target, then every one after it
 * once more, none before (a concurrent listener's threads take them in their own order). A push
 * consumer's committed offset ends at ten again; a lite pull consumer goes on committing the
 * position it had before the reset, which the broker keeps from undoing the reset (the fence
 * lasts until the consumer commits the reset offset itself, or five minutes).
 *
 * <p>The four run at once, each with its own topic and group, so the client's ten-second pause
 * in handling a reset is paid once.
 *
 * <p>Against the Apache reference (scripts/test-reference) what Apache does differently is
 * printed instead of asserted. Apache 4.9.7 refuses the reset of a group that has no committed
 * offset in some queue of the topic ("consumer group not exist": the lite assign and in-flight
 * cases, and the orderly one when its consumer has not committed every queue yet) and never
 * tells a lite pull consumer (lite subscribe goes on from where it was). Apache 5.3.3 resets on the broker and
 * every kind follows, but a lite pull consumer's commit of its old position then undoes the reset.
 */
@Tag("tidemark")
class Scenario31ResetFollowedTest extends SuiteBase {

    private static final int COUNT = 10;
    private static final int RESET_AT = 5;
    private static final Duration WAIT = Duration.ofSeconds(60);

    /** What one consumer processed from the test's queue, in order: (offset, store time). */
    private static final class Seen {
        private final List<long[]> processed = new ArrayList<>();

        synchronized void add(MessageQueue mq, List<MessageExt> msgs) {
            for (MessageExt m : msgs) {
                if (m.getQueueId() == mq.getQueueId() && m.getTopic().equals(mq.getTopic())) {
                    processed.add(new long[] {m.getQueueOffset(), m.getStoreTimestamp()});
                }
            }
        }

        synchronized List<long[]> copy() {
            return new ArrayList<>(processed);
        }

        synchronized List<Long> offsetsFrom(int index) {
            List<Long> offsets = new ArrayList<>();
            for (int i = index; i < processed.size(); i++) {
                offsets.add(processed.get(i)[0]);
            }
            return offsets;
        }

        synchronized int size() {
            return processed.size();
        }
    }

    private record Queue(String topic, MessageQueue mq) { }

    @Test
    void everyRemotingConsumerFollowsAResetMadeWhileItIsOnline() throws Exception {
        DefaultMQAdminExt admin = clients.admin();
        List<String> kinds = List.of("concurrent", "orderly", "lite-subscribe", "lite-assign");
        ExecutorService pool = Executors.newFixedThreadPool(kinds.size());
        List<Future<String>> runs = new ArrayList<>();
        for (String kind : kinds) {
            runs.add(pool.submit(() -> followsAReset(admin, kind)));
        }
        List<String> failures = new ArrayList<>();
        for (int i = 0; i < kinds.size(); i++) {
            try {
                System.out.println("scenario31 " + runs.get(i).get());
            } catch (java.util.concurrent.ExecutionException failed) {
                if (apache49() && !kinds.get(i).equals("concurrent")) {
                    System.out.println("scenario31 Apache 4.9.7: " + kinds.get(i) + " does not follow: "
                        + failed.getCause());
                } else {
                    failures.add(String.valueOf(failed.getCause()));
                }
            }
        }
        pool.shutdownNow();
        assertTrue(failures.isEmpty(), () -> String.join("\n", failures) + serverLog());
    }

    /**
     * A message still in flight when the reset comes: its acknowledgement, made after the reset,
     * must not move the group past the target. Offset 8's first delivery blocks; the group sits
     * at 8 (the smallest offset in flight). The group is reset to 5 and the replay of 6 is held
     * too; then the old delivery of 8 completes. Its consumer has dropped the queue's old
     * state, so nothing commits past the replay: the offset stays at most 6 until the replay of
     * 6 is released, and ends at ten.
     */
    @Test
    void anOldInFlightMessageIsNotAcknowledgedPastTheResetTarget() throws Exception {
        try {
            oldInFlightMessage();
        } catch (Exception | AssertionError failed) {
            if (!apache49()) {
                throw failed;
            }
            System.out.println("scenario31 Apache 4.9.7: the in-flight case fails: " + failed);
        }
    }

    private void oldInFlightMessage() throws Exception {
        DefaultMQAdminExt admin = clients.admin();
        String group = Names.group("s31inflight");
        Queue q = tenMessagesInOneQueue("s31inflight");
        Seen seen = new Seen();
        java.util.concurrent.CountDownLatch oldEight = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.CountDownLatch replayedSix = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.atomic.AtomicInteger sixes = new java.util.concurrent.atomic.AtomicInteger();
        java.util.concurrent.atomic.AtomicInteger eights = new java.util.concurrent.atomic.AtomicInteger();
        clients.push(group, q.topic(), "*", (MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                boolean ours = m.getQueueId() == q.mq().getQueueId();
                try {
                    if (ours && m.getQueueOffset() == 8 && eights.getAndIncrement() == 0) {
                        oldEight.await(WAIT.toSeconds(), java.util.concurrent.TimeUnit.SECONDS);
                    }
                    if (ours && m.getQueueOffset() == 6 && sixes.getAndIncrement() == 1) {
                        replayedSix.await(WAIT.toSeconds(), java.util.concurrent.TimeUnit.SECONDS);
                    }
                } catch (InterruptedException stop) {
                    Thread.currentThread().interrupt();
                }
            }
            seen.add(q.mq(), msgs);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        }, c -> c.setConsumeMessageBatchMaxSize(1));
        Wait.until("offsets 0..9 but 8 processed", WAIT, () -> seen.size() >= COUNT - 1,
            () -> "processed " + seen.offsetsFrom(0));
        Wait.until("the group held at 8, the offset in flight", WAIT,
            () -> committed(admin, group, q.mq()) == 8,
            () -> "committed " + committed(admin, group, q.mq()));
        List<long[]> first = seen.copy();
        long at = first.stream().filter(p -> p[0] == RESET_AT).findFirst().orElseThrow()[1];
        admin.resetOffsetByTimestamp(q.topic(), group, at, true);
        Wait.until("the replay to reach 6", WAIT, () -> sixes.get() >= 2,
            () -> "processed " + seen.offsetsFrom(0));

        oldEight.countDown();
        Wait.until("the old delivery of 8 to complete", WAIT, () -> seen.offsetsFrom(0).contains(8L),
            () -> "processed " + seen.offsetsFrom(0));
        long highest = -1;
        long until = System.currentTimeMillis() + 2_500;
        while (System.currentTimeMillis() < until) {
            highest = Math.max(highest, committed(admin, group, q.mq()));
            Wait.sleep(100);
        }
        long seenHighest = highest;
        assertTrue(highest <= 6, () -> "the old delivery of 8 moved the group to " + seenHighest
            + " while the replay of 6 was still in flight" + serverLog());
        replayedSix.countDown();
        Wait.until("the replay committed", WAIT, () -> committed(admin, group, q.mq()) == COUNT,
            () -> "committed " + committed(admin, group, q.mq()));
        System.out.println("scenario31 in flight: after the reset to 5 the old delivery of 8 completed; "
            + "the group stayed at " + highest + " until the replay went on, then reached " + COUNT);
    }

    private String followsAReset(DefaultMQAdminExt admin, String kind) throws Exception {
        String group = Names.group("s31" + kind.replace("-", ""));
        Queue q = tenMessagesInOneQueue("s31" + kind.replace("-", ""));
        Seen seen = new Seen();
        AtomicBoolean polling = new AtomicBoolean(true);
        Thread poller = start(kind, group, q, seen, polling);
        try {
            Wait.until(kind + ": the first pass over the queue", WAIT, () -> seen.size() >= COUNT,
                () -> kind + " processed " + seen.offsetsFrom(0));
            Wait.until(kind + ": the first pass committed", WAIT,
                () -> committed(admin, group, q.mq()) == COUNT,
                () -> kind + " committed " + committed(admin, group, q.mq()));
            List<long[]> first = seen.copy();
            // Processing order is the listener threads' for a concurrent consumer: by offset.
            long at = first.stream().filter(p -> p[0] == RESET_AT).findFirst().orElseThrow()[1];
            long target = first.stream().filter(p -> p[1] >= at).mapToLong(p -> p[0]).min().orElseThrow();
            int before = seen.size();

            Map<MessageQueue, Long> reset = admin.resetOffsetByTimestamp(q.topic(), group, at, true);
            assertEquals(target, reset.get(q.mq()), kind + ": the reset's target for " + q.mq());

            Wait.until(kind + ": the replay from the reset target", WAIT,
                () -> seen.size() >= before + (COUNT - target),
                () -> kind + " processed after the reset " + seen.offsetsFrom(before));
            List<Long> replay = seen.offsetsFrom(before);
            List<Long> expected = new ArrayList<>();
            for (long o = target; o < COUNT; o++) {
                expected.add(o);
            }
            assertTrue(replay.stream().allMatch(o -> o >= target), kind + ": nothing before the target: " + replay);
            if (kind.equals("concurrent")) {
                // Several listener threads: the replay's order is theirs.
                assertEquals(expected, replay.stream().sorted().distinct().toList(),
                    kind + ": the replay, each from the target once");
            } else {
                assertEquals(target, replay.get(0).longValue(),
                    kind + ": the first message processed after the reset is the target; got " + replay);
                assertEquals(expected, replay.subList(0, expected.size()),
                    kind + ": the replay, in order, from the target");
            }
            if (kind.startsWith("lite")) {
                // A lite pull consumer commits the position it had before it heard of the reset
                // (it has no way to tell): the broker holds the reset until the consumer commits
                // the reset offset itself or five minutes pass, so its old position never
                // overwrites the reset.
                Wait.sleep(2_500);
                if (againstApacheReference()) {
                    System.out.println("scenario31 Apache: " + kind + " committed " + committed(admin, group, q.mq())
                        + " after the reset to " + target + " (its commits of its old position undo it)");
                } else {
                    assertEquals(target, committed(admin, group, q.mq()),
                        kind + ": the reset is not undone by the consumer's commits of its old position");
                }
            } else {
                Wait.until(kind + ": the replay committed", WAIT,
                    () -> committed(admin, group, q.mq()) == COUNT,
                    () -> kind + " committed " + committed(admin, group, q.mq()));
            }
            return kind + " reset to " + target + " (store time of offset " + RESET_AT + "): replayed " + replay;
        } finally {
            polling.set(false);
            if (poller != null) {
                poller.join(5_000);
            }
        }
    }

    /** Starts a consumer of {@code kind}; for lite pull, the thread that polls it. */
    private Thread start(String kind, String group, Queue q, Seen seen, AtomicBoolean polling) throws Exception {
        switch (kind) {
            case "concurrent" -> {
                clients.push(group, q.topic(), "*", (MessageListenerConcurrently) (msgs, context) -> {
                    seen.add(q.mq(), msgs);
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                return null;
            }
            case "orderly" -> {
                clients.push(group, q.topic(), "*", (MessageListenerOrderly) (msgs, context) -> {
                    seen.add(q.mq(), msgs);
                    return ConsumeOrderlyStatus.SUCCESS;
                });
                return null;
            }
            default -> {
                DefaultLitePullConsumer c = clients.litePull(group);
                c.setAutoCommitIntervalMillis(1000);
                if (kind.equals("lite-subscribe")) {
                    c.subscribe(q.topic(), "*");
                    c.start();
                } else {
                    c.start();
                    c.assign(List.of(q.mq()));
                }
                Thread poller = new Thread(() -> {
                    while (polling.get()) {
                        seen.add(q.mq(), c.poll(200));
                    }
                }, "s31-" + kind);
                poller.setDaemon(true);
                poller.start();
                return poller;
            }
        }
    }

    /** Whether this run is the 4.x suite against Apache RocketMQ 4.9.7 (the 5.x suite's reference is 5.3.3). */
    private static boolean apache49() {
        return againstApacheReference()
            && org.apache.rocketmq.common.MQVersion.getVersionDesc(org.apache.rocketmq.common.MQVersion.CURRENT_VERSION)
                .startsWith("V4");
    }

    /** The group's committed offset of {@code mq} as the broker reports it; -1 while it has none. */
    private static long committed(DefaultMQAdminExt admin, String group, MessageQueue mq) {
        try {
            var wrapper = admin.examineConsumeStats(group).getOffsetTable().get(mq);
            return wrapper == null ? -1 : wrapper.getConsumerOffset();
        } catch (Exception notYet) {
            return -1;
        }
    }

    /** A topic with ten messages in one queue (one the warm-up message did not land on). */
    private Queue tenMessagesInOneQueue(String scenario) throws Exception {
        String topic = Names.topic(scenario);
        DefaultMQProducer producer = clients.producer();
        SendResult warm = Msgs.sendOk(producer, Msgs.message(topic, Msgs.WARMUP_TAG, "warmup-" + System.nanoTime()));
        int warmQueue = warm.getMessageQueue().getQueueId();
        List<MessageQueue> queues = Wait.retrying("the route of " + topic, Duration.ofSeconds(15),
            () -> producer.fetchPublishMessageQueues(topic));
        MessageQueue mq = queues.stream()
            .filter(m -> m.getQueueId() != warmQueue).findFirst()
            .orElseThrow(() -> new AssertionError("no second write queue for " + topic));
        for (int i = 0; i < COUNT; i++) {
            SendResult sent = producer.send(Msgs.message(topic, "TagA", scenario + "-" + i), mq);
            assertEquals(i, sent.getQueueOffset(), "offset of message " + i + " in " + mq);
            // distinct store times, so a reset by time names exactly one offset
            Thread.sleep(3);
        }
        return new Queue(topic, mq);
    }
}
