package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.Set;
import java.util.TreeSet;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 8: DefaultLitePullConsumer with auto-commit off. What was polled before commitSync()
 * is never seen again by the next consumer of the group; what was polled after it (uncommitted)
 * is seen again; nothing is lost.
 *
 * <p>commitSync() only updates the client's offset store; the commits reach the broker at the
 * next periodic persist (1 s here) or, at the latest, at shutdown (oneway UPDATE_CONSUMER_OFFSET).
 */
@Tag("tidemark")
class Scenario08LitePullCommitTest extends SuiteBase {

    private static final int COUNT = 80;
    private static final int POLL_BEFORE_COMMIT = 30;

    @Test
    void nextLitePullConsumerContinuesAfterTheCommittedOffsets() throws Exception {
        String topic = Names.topic("s08");
        String group = Names.group("s08");
        Msgs.sendAll(clients.producer(), topic, "t", "m", COUNT);
        Set<String> all = new TreeSet<>(Msgs.bodies("m", COUNT));

        DefaultLitePullConsumer first = clients.litePull(group);
        first.setAutoCommit(false);
        first.subscribe(topic, "*");
        first.start();
        Set<String> committed = new TreeSet<>();
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (committed.size() < POLL_BEFORE_COMMIT) {
            assertTrue(System.nanoTime() < deadline, "first consumer polled only " + committed.size() + serverLog());
            addBodies(first.poll(1000), committed);
        }
        first.commitSync();
        Map<Integer, Long> commitPoint = new TreeMap<>();
        for (MessageQueue mq : first.assignment()) {
            // in-memory value after commitSync (or what the broker answered for a queue never polled)
            commitPoint.put(mq.getQueueId(), Math.max(0, first.committed(mq)));
        }
        Set<String> uncommitted = new TreeSet<>();
        addBodies(first.poll(1000), uncommitted);
        first.shutdown();
        // The commits travel as oneway UPDATE_CONSUMER_OFFSET on the first consumer's connection,
        // the second consumer's QUERY_CONSUMER_OFFSET on its own: wait until the broker has them
        // (a restarting application has at least this much time), which also checks it stored them.
        DefaultMQAdminExt admin = clients.admin();
        @SuppressWarnings("unchecked")
        Map<Integer, OffsetWrapper>[] stats = new Map[1];
        Wait.until("the broker to hold the offsets committed by commitSync() + shutdown()", Duration.ofSeconds(10),
            () -> {
                stats[0] = Stats.byQueue(Stats.examine(admin, group, topic, Duration.ofSeconds(10)), topic);
                return Stats.consumerOffsets(stats[0]).equals(commitPoint);
            }, () -> "client committed " + commitPoint + ", broker reports " + Stats.describe(stats[0]) + serverLog());
        assertTrue(committed.size() < COUNT, "the first consumer must stop part way; it polled everything");

        DefaultLitePullConsumer second = clients.litePull(group);
        second.setAutoCommit(false);
        second.subscribe(topic, "*");
        second.start();
        Set<String> expected = new TreeSet<>(all);
        expected.removeAll(committed);
        Set<String> got = new TreeSet<>();
        Set<String> again = new TreeSet<>();
        deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (!got.containsAll(expected)) {
            assertTrue(System.nanoTime() < deadline, "second consumer still misses "
                + Received.describe(missing(expected, got)) + serverLog());
            for (MessageExt m : second.poll(1000)) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                if (!got.add(body)) {
                    again.add(body);
                }
            }
        }
        // a few more polls so late re-deliveries are seen too
        for (int i = 0; i < 2; i++) {
            addBodies(second.poll(500), got);
        }
        second.shutdown();

        Set<String> redelivered = new TreeSet<>(got);
        redelivered.retainAll(committed);
        System.out.println("scenario8 committed=" + committed.size() + " uncommitted=" + uncommitted.size()
            + " second=" + got.size() + " redeliveredCommitted=" + redelivered.size());
        assertTrue(redelivered.isEmpty(), "messages polled before commitSync() were delivered again: "
            + Received.describe(redelivered));
        assertEquals(expected, got, "the second consumer must get exactly everything not committed");
        assertTrue(got.containsAll(uncommitted), "uncommitted messages must come again");
        assertTrue(again.isEmpty(), "the second consumer alone got duplicates: " + again);
    }

    private static void addBodies(List<MessageExt> msgs, Set<String> into) {
        for (MessageExt m : msgs) {
            into.add(new String(m.getBody(), StandardCharsets.UTF_8));
        }
    }

    private static Set<String> missing(Set<String> expected, Set<String> got) {
        Set<String> m = new TreeSet<>(expected);
        m.removeAll(got);
        return m;
    }
}
