package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 6: consumer offsets survive a graceful broker restart exactly, and a SIGKILL loses at
 * most the commits of the last offset-flush interval.
 *
 * <p>Consumers are shut down before each restart: a live consumer would re-commit its in-memory
 * offsets after the restart and hide whatever the broker lost.
 */
@Tag("tidemark")
class Scenario06BrokerRestartTest extends SuiteBase {

    private static final int FIRST = 100;
    private static final int SECOND = 40;
    /**
     * Apache's broker persists consumer offsets every 5 s, the first time 10 s after start, so a
     * commit older than one interval must survive a kill. Tidemark's journal makes each commit
     * durable as it is taken: no first flush to wait for, and a commit 1.5 s old must survive.
     */
    private static Duration firstFlushAfterStart() {
        return againstApacheReference() ? Duration.ofMillis(10_500) : Duration.ZERO;
    }

    private static Duration beforeKill() {
        return againstApacheReference() ? Duration.ofMillis(6_500) : Duration.ofMillis(1_500);
    }

    @Test
    void offsetsSurviveGracefulRestartAndAKillLosesAtMostOneFlushInterval() throws Exception {
        String topic = Names.topic("s06");
        String group = Names.group("s06");
        DefaultMQAdminExt admin = clients.admin();

        // ---- graceful restart ----
        DefaultMQProducer producer = clients.producer();
        Msgs.sendAll(producer, topic, "t", "a", FIRST);
        Received r1 = new Received();
        DefaultMQPushConsumer c1 = clients.push(group, topic, "*", r1.listener("c1"));
        r1.awaitAll(Msgs.bodies("a", FIRST), Duration.ofSeconds(30));
        awaitCaughtUp(admin, group, topic, FIRST);
        c1.shutdown();
        producer.shutdown();
        Map<Integer, OffsetWrapper> before = Stats.byQueue(Stats.examine(admin, group, topic, Duration.ofSeconds(10)), topic);
        assertEquals(Stats.brokerOffsets(before), Stats.consumerOffsets(before),
            "everything was consumed before the restart: " + Stats.describe(before));

        tidemark.stop();
        tidemark.restart();
        long restartedAt = System.nanoTime();
        Map<Integer, OffsetWrapper> after = Stats.byQueue(Stats.examine(admin, group, topic, Duration.ofSeconds(30)), topic);
        System.out.println("scenario6 graceful before=" + Stats.describe(before) + " after=" + Stats.describe(after));
        assertEquals(Stats.brokerOffsets(before), Stats.brokerOffsets(after),
            "queue max offsets after a graceful restart (messages lost?)" + serverLog());
        assertEquals(Stats.consumerOffsets(before), Stats.consumerOffsets(after),
            "consumer offsets after a graceful restart must be exactly those before it" + serverLog());

        // ---- SIGKILL ----
        DefaultMQProducer producer2 = clients.producer();
        Received r2 = new Received();
        DefaultMQPushConsumer c2 = clients.push(group, topic, "*", r2.listener("c2"));
        Msgs.sendAll(producer2, topic, "t", "b", SECOND);
        r2.awaitAll(Msgs.bodies("b", SECOND), Duration.ofSeconds(30));
        Set<String> replayed = new TreeSet<>(r2.bodies());
        replayed.retainAll(Msgs.bodies("a", FIRST));
        assertTrue(replayed.isEmpty(), "a consumer started after the graceful restart re-read "
            + Received.describe(replayed));

        // make sure a periodic offset flush falls between t0 and the kill, even the broker's first
        long waitMs = (restartedAt + firstFlushAfterStart().toNanos() - System.nanoTime()) / 1_000_000;
        if (waitMs > 0) {
            Wait.sleep(waitMs);
        }
        Map<Integer, OffsetWrapper> t0 = awaitCaughtUp(admin, group, topic, FIRST + SECOND);
        long t0At = System.nanoTime();

        List<String> during = new ArrayList<>();
        for (int i = 0; System.nanoTime() - t0At < beforeKill().toNanos(); i++) {
            String body = "c-" + i;
            Msgs.sendOk(producer2, Msgs.message(topic, "t", body));
            during.add(body);
            Wait.sleep(100);
        }
        r2.awaitAll(during, Duration.ofSeconds(20));
        Map<Integer, OffsetWrapper> last = awaitCaughtUp(admin, group, topic, FIRST + SECOND + during.size());
        c2.shutdown();
        tidemark.kill();
        tidemark.restart();
        Map<Integer, OffsetWrapper> recovered =
            Stats.byQueue(Stats.examine(admin, group, topic, Duration.ofSeconds(30)), topic);

        long regression = 0;
        for (Map.Entry<Integer, OffsetWrapper> e : last.entrySet()) {
            OffsetWrapper rec = recovered.get(e.getKey());
            long now = rec == null ? 0 : rec.getConsumerOffset();
            regression += Math.max(0, e.getValue().getConsumerOffset() - now);
        }
        System.out.println("scenario6 kill regression=" + regression + " messages (t0=" + Stats.describe(t0)
            + " last=" + Stats.describe(last) + " recovered=" + Stats.describe(recovered) + ")");

        assertEquals(t0.keySet(), recovered.keySet(), "queues reported after the kill" + serverLog());
        for (Map.Entry<Integer, OffsetWrapper> e : recovered.entrySet()) {
            int q = e.getKey();
            long consumer = e.getValue().getConsumerOffset();
            long max = e.getValue().getBrokerOffset();
            assertTrue(consumer <= max, "queue " + q + ": consumer offset " + consumer
                + " is beyond the broker max offset " + max + " after the kill" + serverLog());
            assertTrue(consumer >= t0.get(q).getConsumerOffset(), "queue " + q + ": consumer offset " + consumer
                + " after the kill is below " + t0.get(q).getConsumerOffset() + ", the value committed "
                + beforeKill().toMillis() + "+ ms before it (more than one 5 s flush interval lost)" + serverLog());
        }
    }

    /** Waits until the broker holds {@code total} messages and the group has committed all of them. */
    private static Map<Integer, OffsetWrapper> awaitCaughtUp(DefaultMQAdminExt admin, String group, String topic,
        long total) {
        @SuppressWarnings("unchecked")
        Map<Integer, OffsetWrapper>[] last = new Map[1];
        Wait.until("group " + group + " to commit all " + total + " messages", Duration.ofSeconds(20), () -> {
            last[0] = Stats.byQueue(Stats.examine(admin, group, topic, Duration.ofSeconds(10)), topic);
            long sum = last[0].values().stream().mapToLong(OffsetWrapper::getBrokerOffset).sum();
            return sum == total && Stats.brokerOffsets(last[0]).equals(Stats.consumerOffsets(last[0]));
        }, () -> Stats.describe(last[0]) + serverLog());
        return last[0];
    }
}
