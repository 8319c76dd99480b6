package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 3: two clustering consumers of one group split the queues and, once the split is
 * stable, consume every message exactly once between them.
 */
@Tag("tidemark")
class Scenario03SharedGroupTest extends SuiteBase {

    private static final int COUNT = 200;

    @Test
    void twoConsumersShareTheQueuesAndConsumeEachMessageOnce() throws Exception {
        String topic = Names.topic("s03");
        String group = Names.group("s03");
        DefaultMQProducer producer = clients.producer();
        Msgs.warmUp(producer, topic);
        Set<Integer> allQueues = Queues.ids(producer, topic, 2);

        Received received = new Received();
        DefaultMQPushConsumer c1 = clients.push(group, topic, "*", received.listener("c1"));
        DefaultMQPushConsumer c2 = clients.push(group, topic, "*", received.listener("c2"));

        // The broker tells c1 about c2 with NOTIFY_CONSUMER_IDS_CHANGED; without it c1 only gives
        // up queues on its periodic rebalance (every 20 s), hence the long timeout.
        // An assignment that holds for a second is past the rebalance both sides triggered.
        Queues.awaitSplit(c1, c2, topic, allQueues, Duration.ofSeconds(1), SuiteBase::serverLog);

        Msgs.sendAll(producer, topic, "t", "m", COUNT);
        List<String> expected = Msgs.bodies("m", COUNT);
        received.awaitAll(expected, Duration.ofSeconds(30));
        received.awaitQuiet(Duration.ofSeconds(2), Duration.ofSeconds(20));

        assertEquals(Collections.emptyMap(), received.duplicates(),
            "messages delivered more than once in steady state (queues c1=" + Clients.ownedQueues(c1, topic)
                + " c2=" + Clients.ownedQueues(c2, topic) + ")");
        assertEquals(new TreeSet<>(expected), received.bodies(), "all messages, each once");
        long n1 = received.countOf("c1");
        long n2 = received.countOf("c2");
        System.out.println("scenario3 c1=" + n1 + " c2=" + n2 + " queues c1=" + Clients.ownedQueues(c1, topic)
            + " c2=" + Clients.ownedQueues(c2, topic));
        assertTrue(n1 > 0 && n2 > 0, "both consumers must receive messages: c1=" + n1 + " c2=" + n2);
    }
}
