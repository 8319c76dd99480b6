package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;

import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.ResponseCode;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 19: nothing reaches a consumer that the broker did not accept in full.
 *
 * <p>Transactions: a half message whose local transaction is rolled back must never be delivered
 * (scenario 22 covers commits and check-backs).
 *
 * <p>Size limit: the default {@code maxMessageSize} is a limit on the body (4 MiB, inclusive). The
 * producer's own check is lifted to 8 MiB so the broker is the one that decides, and compression is
 * off because a compressed body would not be the size being tested.
 */
@Tag("tidemark")
class Scenario19DataSafetyTest extends SuiteBase {

    private static final int TX_MESSAGES = 5;
    private static final int MAX_BODY = 4 * 1024 * 1024;
    /** Time after the markers arrived during which anything else that shows up is caught. */
    private static final long QUIET_MS = 3_000;

    @Test
    void rolledBackTransactionalMessagesAreNeverDelivered() throws Exception {
        String topic = Names.topic("s19tx");
        DefaultMQProducer producer = clients.producer();
        Msgs.warmUp(producer, topic);

        // live before the transactional sends, so a half delivered right away would be seen too
        Received received = new Received();
        clients.push(Names.group("s19tx"), topic, "*", received.listener("c"));

        AtomicInteger executed = new AtomicInteger();
        AtomicInteger checked = new AtomicInteger();
        TransactionMQProducer tx = clients.transactionProducer(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                executed.incrementAndGet();
                return LocalTransactionState.ROLLBACK_MESSAGE;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                // a check only comes if the broker missed the rollback; the answer must be the same
                checked.incrementAndGet();
                return LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });

        List<String> txBodies = Msgs.bodies("tx", TX_MESSAGES);
        for (String body : txBodies) {
            TransactionSendResult r = tx.sendMessageInTransaction(Msgs.message(topic, "tx", body), null);
            assertEquals(SendStatus.SEND_OK, r.getSendStatus(), "half message " + body + ": " + r);
            assertEquals(LocalTransactionState.ROLLBACK_MESSAGE, r.getLocalTransactionState(),
                "local transaction state of " + body + ": " + r);
        }
        // the client runs the local transaction only for a half the broker stored
        assertEquals(TX_MESSAGES, executed.get(), "local transactions executed");

        // A rolled-back message that leaked would sit in some queue before that queue's marker, so
        // once every marker is in, the consumer has read past all of them.
        List<String> markers = sendMarkerToEveryQueue(producer, topic, "tx-marker");
        received.awaitAll(markers, Duration.ofSeconds(30));
        Wait.sleep(QUIET_MS);

        System.out.println("scenario19 transactions against " + (againstApacheReference() ? "Apache" : "Tidemark")
            + ": executed="
            + executed.get() + " checked=" + checked.get() + " received=" + received.bodies());
        Set<String> leaked = new TreeSet<>(received.bodies());
        leaked.retainAll(txBodies);
        assertTrue(leaked.isEmpty(), "rolled-back transactional messages were delivered: " + leaked
            + " (all deliveries: " + received.deliveries() + ")" + serverLog());
        assertEquals(new TreeSet<>(markers), received.bodies(), "the consumer must see only the markers");
    }

    @Test
    void aBodyOfExactlyMaxMessageSizeIsAcceptedAndOneByteMoreIsRefused() throws Exception {
        String topic = Names.topic("s19size");
        DefaultMQProducer producer = clients.producer(p -> {
            p.setMaxMessageSize(2 * MAX_BODY);
            p.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);
            // a 4 MiB round trip on a loaded CI machine can take well over the suite's usual 5 s
            p.setSendMsgTimeout(30_000);
        });
        Msgs.warmUp(producer, topic);

        // random bytes do not compress, should anything on the way try
        Random random = new Random(19);
        byte[] atLimit = new byte[MAX_BODY];
        random.nextBytes(atLimit);
        byte[] overLimit = new byte[MAX_BODY + 1];
        random.nextBytes(overLimit);

        long t0 = System.nanoTime();
        SendResult ok = producer.send(new Message(topic, "at-limit", atLimit));
        long sendMs = (System.nanoTime() - t0) / 1_000_000;
        assertEquals(SendStatus.SEND_OK, ok.getSendStatus(), () -> "a body of exactly " + MAX_BODY + " bytes: " + ok);

        // MESSAGE_ILLEGAL is not among the codes the 4.9 client retries, so send() throws the
        // broker's answer as it is instead of wrapping it in "Send [3] times ..."
        MQBrokerException refused = assertThrows(MQBrokerException.class,
            () -> producer.send(new Message(topic, "over-limit", overLimit)),
            () -> "a body of " + (MAX_BODY + 1) + " bytes must be refused by the broker" + serverLog());
        assertEquals(ResponseCode.MESSAGE_ILLEGAL, refused.getResponseCode(),
            () -> "response code for a body one byte over the limit: " + refused + serverLog());
        System.out.println("scenario19 at-limit send took " + sendMs + " ms; over-limit refused: "
            + refused.getMessage());

        List<String> markers = sendMarkerToEveryQueue(producer, topic, "size-marker");

        // bodies kept as bytes: they are not text, and must come back bit for bit
        ConcurrentLinkedQueue<MessageExt> delivered = new ConcurrentLinkedQueue<>();
        MessageListenerConcurrently listener = (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (!Msgs.WARMUP_TAG.equals(m.getTags())) {
                    delivered.add(m);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        };
        clients.push(Names.group("s19size"), topic, "*", listener);
        Wait.until("the at-limit message and " + markers.size() + " markers", Duration.ofSeconds(60),
            () -> delivered.stream().anyMatch(m -> "at-limit".equals(m.getTags()))
                && markerBodies(delivered).containsAll(markers),
            () -> "got " + describe(delivered) + serverLog());
        Wait.sleep(QUIET_MS);

        List<MessageExt> big = delivered.stream().filter(m -> !"marker".equals(m.getTags())).toList();
        assertEquals(1, big.size(), () -> "only the at-limit message may be delivered besides the markers: "
            + describe(delivered) + serverLog());
        MessageExt got = big.get(0);
        assertEquals("at-limit", got.getTags(), () -> "the message one byte over the limit was delivered: "
            + describe(delivered) + serverLog());
        assertEquals(ok.getMsgId(), got.getMsgId(), "msgId of the at-limit message");
        assertEquals(MAX_BODY, got.getBody().length, "body length of the at-limit message");
        if (!Arrays.equals(atLimit, got.getBody())) {
            fail("the at-limit body came back different: sent sha256 " + sha256(atLimit) + ", got "
                + sha256(got.getBody()));
        }
        assertEquals(new TreeSet<>(markers), markerBodies(delivered), "markers");
        assertEquals(markers.size(), delivered.size() - 1, () -> "each marker once: " + describe(delivered));
    }

    /**
     * Sends one small message to every write queue of {@code topic} (body {@code prefix-q<id>}).
     * Queues are read in order, so once a consumer has all of them it has read everything that was
     * stored before them.
     */
    private static List<String> sendMarkerToEveryQueue(DefaultMQProducer producer, String topic, String prefix)
        throws Exception {
        List<String> bodies = new ArrayList<>();
        for (MessageQueue mq : producer.fetchPublishMessageQueues(topic)) {
            String body = prefix + "-q" + mq.getQueueId();
            Message m = Msgs.message(topic, "marker", body);
            SendResult r = producer.send(m, mq);
            assertEquals(SendStatus.SEND_OK, r.getSendStatus(), "marker " + body + ": " + r);
            bodies.add(body);
        }
        assertFalse(bodies.isEmpty(), "no write queues for " + topic);
        return bodies;
    }

    private static Set<String> markerBodies(ConcurrentLinkedQueue<MessageExt> delivered) {
        return delivered.stream().filter(m -> "marker".equals(m.getTags()))
            .map(m -> new String(m.getBody(), StandardCharsets.UTF_8))
            .collect(Collectors.toCollection(TreeSet::new));
    }

    /** Deliveries without their bodies, which are too large (and not text) to print. */
    private static String describe(ConcurrentLinkedQueue<MessageExt> delivered) {
        return delivered.stream()
            .map(m -> m.getTags() + "[q" + m.getQueueId() + "@" + m.getQueueOffset() + " " + m.getBody().length
                + " bytes" + ("marker".equals(m.getTags()) ? " " + new String(m.getBody(), StandardCharsets.UTF_8) : "")
                + "]")
            .collect(Collectors.joining(", ", "[", "]"));
    }

    private static String sha256(byte[] b) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(b));
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
