package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 22: transactional messages with {@link TransactionMQProducer}, in both remoting suites
 * (rocketmq-client 4.9.8 in compat/java, 5.3.3 in compat/java5).
 *
 * <p>A half message is invisible until its producer commits it; a rolled-back one is never
 * delivered; one left UNKNOW is checked back with a producer of its group (any one of them) after
 * the transaction timeout, and the check's answer applies; a broker SIGKILL between the half and
 * the decision loses nothing. Every committed message is delivered exactly once.
 *
 * <p>The broker checks back halves older than 3 s every second (the defaults, 60 s and 6 s,
 * would make the suite slow). Apache is known to deliver checked-back messages twice when its
 * check interval is 3 s or less, so against Apache it checks every 4 s.
 */
@Tag("tidemark")
class Scenario22TransactionTest extends SuiteBase {

    private static final long CHECK_INTERVAL_MS = againstApacheReference() ? 4_000 : 1_000;
    private static final long TRANSACTION_TIMEOUT_MS = 3_000;

    static List<String> runtimeDevArgs() {
        return List.of("--transaction-check-interval-ms", String.valueOf(CHECK_INTERVAL_MS),
            "--transaction-timeout-ms", String.valueOf(TRANSACTION_TIMEOUT_MS));
    }

    /** Far longer than a half's 3 s timeout and two check rounds. */
    private static final Duration CHECK_WAIT = Duration.ofSeconds(40);
    /** After everything expected arrived: anything more that shows up in this time is caught. */
    private static final long QUIET_MS = 3_000;

    /** What a listener decides, by the body's prefix: c = commit, r = rollback, u = unknown. */
    private static LocalTransactionState byPrefix(Message m) {
        String body = Msgs.bodyOf(m);
        if (body.startsWith("c")) {
            return LocalTransactionState.COMMIT_MESSAGE;
        }
        if (body.startsWith("r")) {
            return LocalTransactionState.ROLLBACK_MESSAGE;
        }
        return LocalTransactionState.UNKNOW;
    }

    /** Executes by prefix; a check answers COMMIT for {@code u-k…} bodies, ROLLBACK otherwise. */
    private static final class Listener implements TransactionListener {
        final AtomicInteger executed = new AtomicInteger();
        final Map<String, AtomicInteger> checks = new ConcurrentHashMap<>();

        @Override
        public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
            executed.incrementAndGet();
            return byPrefix(msg);
        }

        @Override
        public LocalTransactionState checkLocalTransaction(MessageExt msg) {
            String body = Msgs.bodyOf(msg);
            checks.computeIfAbsent(body, b -> new AtomicInteger()).incrementAndGet();
            if (body.startsWith("c") || body.startsWith("u-k")) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }
            return LocalTransactionState.ROLLBACK_MESSAGE;
        }

        int checkCount() {
            return checks.values().stream().mapToInt(AtomicInteger::get).sum();
        }
    }

    private void sendAll(TransactionMQProducer tx, String topic, List<String> bodies) throws Exception {
        for (String body : bodies) {
            TransactionSendResult r = tx.sendMessageInTransaction(Msgs.message(topic, "tx", body), null);
            assertEquals(SendStatus.SEND_OK, r.getSendStatus(), "half message " + body + ": " + r);
        }
    }

    /** Every delivery of a committed body exactly once, nothing else, and quiet afterwards. */
    private void assertExactlyOnce(Received received, Set<String> committed, String label) {
        assertDelivered(received, committed, label, true);
    }

    /**
     * Every committed body delivered, nothing else; exactly once unless {@code once} is off (the
     * reference's known duplicates after a crash).
     */
    private void assertDelivered(Received received, Set<String> committed, String label, boolean once) {
        received.awaitAll(committed, CHECK_WAIT);
        Wait.sleep(QUIET_MS);
        System.out.println("scenario22 " + label + " against " + (againstApacheReference() ? "Apache" : "Tidemark")
            + ": delivered=" + received.total() + " distinct=" + received.distinct() + " expected=" + committed.size()
            + " duplicates=" + received.duplicates());
        assertEquals(new TreeSet<>(committed), new TreeSet<>(received.bodies()),
            () -> label + ": delivered bodies" + serverLog());
        if (once) {
            assertEquals(committed.size(), received.total(),
                () -> label + ": each committed message exactly once, got " + received.deliveries() + serverLog());
        }
    }

    @Test
    void theLocalTransactionCommitsOrRollsBack() throws Exception {
        String topic = Names.topic("s22local");
        DefaultMQProducer plain = clients.producer();
        Msgs.warmUp(plain, topic);
        Received received = new Received();
        clients.push(Names.group("s22local"), topic, "*", received.listener("c"));

        Listener listener = new Listener();
        TransactionMQProducer tx = clients.transactionProducer(listener);
        List<String> commits = Msgs.bodies("c", 10);
        List<String> rollbacks = Msgs.bodies("r", 10);
        for (int i = 0; i < 10; i++) {
            sendAll(tx, topic, List.of(commits.get(i), rollbacks.get(i)));
        }
        assertEquals(20, listener.executed.get(), "local transactions executed");
        assertExactlyOnce(received, new TreeSet<>(commits), "commit/rollback");
        // Nothing is left to check: give the checker two rounds past the timeout to prove it.
        Wait.sleep(TRANSACTION_TIMEOUT_MS + 2 * CHECK_INTERVAL_MS);
        assertEquals(0, listener.checkCount(), () -> "resolved transactions were checked back: " + listener.checks);
        assertEquals(commits.size(), received.total(), "still each commit once");
    }

    @Test
    void anUnknownTransactionIsCheckedBackAndTheAnswerApplies() throws Exception {
        String topic = Names.topic("s22check");
        DefaultMQProducer plain = clients.producer();
        Msgs.warmUp(plain, topic);
        Received received = new Received();
        clients.push(Names.group("s22check"), topic, "*", received.listener("c"));

        Listener listener = new Listener();
        TransactionMQProducer tx = clients.transactionProducer(listener);
        // unknown when executed; the check answers COMMIT for u-k… and ROLLBACK for u-r…
        List<String> toCommit = Msgs.bodies("u-k", 5);
        List<String> toRollback = Msgs.bodies("u-r", 5);
        for (int i = 0; i < 5; i++) {
            sendAll(tx, topic, List.of(toCommit.get(i), toRollback.get(i)));
        }
        assertEquals(10, listener.executed.get(), "local transactions executed");
        // well inside the 3 s transaction timeout: an unknown half must still be invisible
        Wait.sleep(1_000);
        assertEquals(0, received.total(), () -> "delivered before any decision: " + received.deliveries());
        assertExactlyOnce(received, new TreeSet<>(toCommit), "check-back");
        for (String body : toCommit) {
            assertTrue(listener.checks.containsKey(body), () -> body + " was delivered without a check-back");
        }
        for (String body : toRollback) {
            assertTrue(listener.checks.containsKey(body), () -> body + " was never checked back: " + listener.checks);
        }
    }

    @Test
    void anotherProducerOfTheGroupAnswersWhenTheSenderIsGone() throws Exception {
        String topic = Names.topic("s22other");
        DefaultMQProducer plain = clients.producer();
        Msgs.warmUp(plain, topic);
        Received received = new Received();
        clients.push(Names.group("s22other"), topic, "*", received.listener("c"));

        String group = Names.unique("TPG");
        Listener sender = new Listener();
        TransactionMQProducer first = clients.transactionProducer(group, sender);
        Listener survivor = new Listener();
        TransactionMQProducer other =
            clients.transactionProducer(group, survivor, p -> p.setHeartbeatBrokerInterval(1_000));
        // A client heartbeats only the brokers its routes name (the 5.x client does not even
        // look up the auto-create topic's): one send makes the broker know this producer.
        Msgs.warmUp(other, topic);
        List<String> bodies = Msgs.bodies("u-k", 4);
        sendAll(first, topic, bodies);
        first.shutdown();
        assertExactlyOnce(received, new TreeSet<>(bodies), "other producer");
        assertEquals(0, sender.checkCount(), "the stopped producer cannot have answered");
        assertTrue(survivor.checkCount() >= bodies.size(), () -> "the other producer's checks: " + survivor.checks);
    }

    @Test
    void aBrokerKilledBetweenHalfAndDecisionLosesNothing() throws Exception {
        String topic = Names.topic("s22kill");
        DefaultMQProducer plain = clients.producer();
        Msgs.warmUp(plain, topic);

        Listener listener = new Listener();
        // heartbeats every second, so the restarted broker knows the producer before it checks
        TransactionMQProducer tx = clients.transactionProducer(Names.unique("TPK"), listener,
            p -> p.setHeartbeatBrokerInterval(1_000));
        List<String> commits = Msgs.bodies("u-k", 5);
        List<String> rollbacks = Msgs.bodies("u-r", 5);
        sendAll(tx, topic, commits);
        sendAll(tx, topic, rollbacks);
        tidemark.kill();
        tidemark.restart();

        Received received = new Received();
        clients.push(Names.group("s22kill"), topic, "*", received.listener("c"));
        // Apache re-checks and commits again halves whose op records the crash lost, so it may
        // deliver these twice (seen with 5.3.3); Tidemark finds the commit at start instead.
        assertDelivered(received, new TreeSet<>(commits), "broker SIGKILL", !againstApacheReference());
        for (String body : rollbacks) {
            assertTrue(listener.checks.containsKey(body), () -> body + " was never checked back: " + listener.checks);
        }
    }
}
