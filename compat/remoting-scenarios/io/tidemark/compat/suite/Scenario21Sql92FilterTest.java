package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Predicate;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 21: SQL92 property filters ({@code MessageSelector.bySql}).
 *
 * <p>40 messages carry user properties {@code a} (0..39), {@code color} (red/green/blue cycling),
 * {@code price} ({@code a * 1.5} as {@code Double.toString}) and, except on every 4th message,
 * {@code region}; tags alternate TagA/TagB. Each expression gets its own push consumer group and
 * must receive exactly the messages its Java predicate selects (in both remoting suites: clients
 * 4.9.8 and 5.3.3). Unlike tags, the client does
 * not filter SQL92 again after a pull (its tag set is empty), so what a consumer receives is what
 * the broker decided.
 *
 * <p>The predicates spell out RocketMQ's three-valued logic: a comparison with a missing property
 * is UNKNOWN (so is {@code <>}, and NOT of UNKNOWN), only TRUE delivers, and UNKNOWN OR TRUE is
 * TRUE. Properties are strings on the wire; the broker converts one to the type of the literal it
 * is compared with, hence {@code price > 50.0}: with the integer literal {@code 50} every price
 * ("51.0" too) fails to parse as an integer and nothing is delivered (so Apache 4.9.7 does).
 */
@Tag("tidemark")
class Scenario21Sql92FilterTest extends SuiteBase {

    /** {@code ResponseCode.SUBSCRIPTION_PARSE_FAILED} (its package differs between 4.9 and 5.x). */
    private static final int SUBSCRIPTION_PARSE_FAILED = 23;

    private static final int COUNT = 40;
    private static final String[] COLORS = {"red", "green", "blue"};
    private static final Duration ARRIVAL = Duration.ofSeconds(30);
    /** After the expected messages are in, time in which a wrongly delivered one would show up. */
    private static final long QUIET_MS = 2_000;

    /** One message's properties; {@code region} is null where the message has none. */
    record Props(int a, String color, double price, String region, String tag) {
    }

    static Props props(int i) {
        return new Props(i, COLORS[i % 3], i * 1.5, i % 4 == 0 ? null : "eu-" + (i % 3), i % 2 == 0 ? "TagA" : "TagB");
    }

    record Case(String sql, Predicate<Props> expected) {
        Set<Integer> expectedSet() {
            return IntStream.range(0, COUNT).filter(i -> expected.test(props(i))).boxed()
                .collect(Collectors.toCollection(TreeSet::new));
        }
    }

    private static final List<Case> CASES = List.of(
        new Case("a > 30", p -> p.a() > 30),
        new Case("a BETWEEN 5 AND 9", p -> p.a() >= 5 && p.a() <= 9),
        new Case("a NOT BETWEEN 5 AND 35", p -> p.a() < 5 || p.a() > 35),
        new Case("color = 'red'", p -> p.color().equals("red")),
        new Case("color IN ('red', 'blue') AND a < 10",
            p -> (p.color().equals("red") || p.color().equals("blue")) && p.a() < 10),
        new Case("color <> 'green' OR a >= 38", p -> !p.color().equals("green") || p.a() >= 38),
        new Case("region IS NULL", p -> p.region() == null),
        new Case("region IS NOT NULL AND a <= 6", p -> p.region() != null && p.a() <= 6),
        new Case("NOT (color = 'blue')", p -> !p.color().equals("blue")),
        new Case("price > 50.0", p -> p.price() > 50.0),
        new Case("TAGS = 'TagA' AND a < 8", p -> p.tag().equals("TagA") && p.a() < 8),
        // missing region: UNKNOWN, not "not equal"
        new Case("region <> 'eu-1'", p -> p.region() != null && !p.region().equals("eu-1")),
        // missing region: NOT(UNKNOWN) stays UNKNOWN, so only a < 3 (TRUE) rescues message 0
        new Case("NOT (region = 'eu-2') OR a < 3",
            p -> (p.region() != null && !p.region().equals("eu-2")) || p.a() < 3));

    /** Syntax errors: the broker must refuse them in CHECK_CLIENT_CONFIG. */
    private static final List<String> INVALID = List.of("a > ", "a = 'x' AND");

    private static void produce(DefaultMQProducer producer, String topic) throws Exception {
        for (int i = 0; i < COUNT; i++) {
            Props p = props(i);
            // body = a, so the delivered bodies are the delivered `a` values
            Message m = Msgs.message(topic, p.tag(), Integer.toString(i));
            m.putUserProperty("a", Integer.toString(p.a()));
            m.putUserProperty("color", p.color());
            m.putUserProperty("price", Double.toString(p.price()));
            if (p.region() != null) {
                m.putUserProperty("region", p.region());
            }
            Msgs.sendOk(producer, m);
        }
    }

    private static Set<String> asBodies(Set<Integer> as) {
        return as.stream().map(String::valueOf).collect(Collectors.toSet());
    }

    private static Set<Integer> asInts(Set<String> bodies) {
        return bodies.stream().map(Integer::valueOf).collect(Collectors.toCollection(TreeSet::new));
    }

    @Test
    void eachExpressionDeliversExactlyTheMatchingMessages() throws Exception {
        String topic = Names.topic("s21");
        produce(clients.producer(), topic);

        // all groups at once: one after another would take 13 x (start-up + quiet period)
        List<Received> received = new ArrayList<>();
        for (Case c : CASES) {
            assertFalse(c.expectedSet().isEmpty(), "a case without matches proves little: " + c.sql());
            Received r = new Received();
            DefaultMQPushConsumer consumer = clients.pushUnstarted(Names.group("s21"), r.listener("c"));
            consumer.subscribe(topic, MessageSelector.bySql(c.sql()));
            consumer.start();
            received.add(r);
        }

        // one deadline for all groups: a server that gets every case wrong fails in 30 s, not 13 x 30 s
        try {
            Wait.until("every group's expected messages", ARRIVAL, () -> IntStream.range(0, CASES.size())
                .allMatch(k -> received.get(k).missing(asBodies(CASES.get(k).expectedSet())).isEmpty()));
        } catch (AssertionError timedOut) {
            // reported below, per case, with what is missing
        }
        Wait.sleep(QUIET_MS);

        List<String> failures = new ArrayList<>();
        for (int k = 0; k < CASES.size(); k++) {
            Case c = CASES.get(k);
            Received r = received.get(k);
            Set<Integer> got = asInts(r.bodies());
            if (!got.equals(c.expectedSet())) {
                Set<Integer> extra = new TreeSet<>(got);
                extra.removeAll(c.expectedSet());
                Set<Integer> missing = new TreeSet<>(c.expectedSet());
                missing.removeAll(got);
                failures.add("'" + c.sql() + "': expected " + c.expectedSet() + ", got " + got
                    + " (extra " + extra + ", missing " + missing + ")");
            }
            if (!r.duplicates().isEmpty()) {
                failures.add("'" + c.sql() + "': duplicates " + r.duplicates());
            }
        }
        // all cases reported together: one wrong operator usually breaks several
        assertTrue(failures.isEmpty(), String.join("\n", failures) + serverLog());
    }

    /**
     * subscribe() only stores the expression (the 4.9 client never parses SQL92 itself); the broker
     * judges it when start() sends CHECK_CLIENT_CONFIG, after the consumer is already running, and
     * start() then throws MQClientException with the broker's code and remark. The client checks
     * only against a broker it knows from the topic's route, so the route must exist beforehand:
     * for an unknown topic start() would succeed.
     */
    @Test
    void invalidExpressionFailsConsumerStart() throws Exception {
        String topic = Names.topic("s21bad");
        DefaultMQProducer producer = clients.producer();
        Msgs.warmUp(producer, topic);
        Wait.retrying("route of " + topic, Duration.ofSeconds(20), () -> producer.fetchPublishMessageQueues(topic));

        for (String bad : INVALID) {
            Received r = new Received();
            DefaultMQPushConsumer consumer = clients.pushUnstarted(Names.group("s21bad"), r.listener("c"));
            consumer.subscribe(topic, MessageSelector.bySql(bad));
            MQClientException e = assertThrows(MQClientException.class, consumer::start,
                () -> "start() with '" + bad + "' must fail" + serverLog());
            // the broker's answer as it is, not the client's own "server has not been upgraded" wrapper
            assertEquals(SUBSCRIPTION_PARSE_FAILED, e.getResponseCode(),
                () -> "response code for '" + bad + "': " + e + serverLog());
            System.out.println("scenario21 '" + bad + "' refused: " + e.getErrorMessage());
            consumer.shutdown();
        }
    }
}
