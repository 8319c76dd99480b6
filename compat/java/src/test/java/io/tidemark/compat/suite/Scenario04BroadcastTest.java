package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** Scenario 4: two BROADCASTING consumers of one group each receive every message. */
@Tag("tidemark")
class Scenario04BroadcastTest extends SuiteBase {

    private static final int HALF = 25;

    @Test
    void everyBroadcastConsumerReceivesEveryMessage() throws Exception {
        String topic = Names.topic("s04");
        String group = Names.group("s04");
        DefaultMQProducer producer = clients.producer();

        // half before the consumers exist (read from the first offset), half while they run
        Msgs.sendAll(producer, topic, "t", "before", HALF);
        Received r1 = new Received();
        Received r2 = new Received();
        clients.push(group, topic, "*", r1.listener("b1"), c -> c.setMessageModel(MessageModel.BROADCASTING));
        clients.push(group, topic, "*", r2.listener("b2"), c -> c.setMessageModel(MessageModel.BROADCASTING));
        Msgs.sendAll(producer, topic, "t", "after", HALF);

        List<String> expected = new ArrayList<>(Msgs.bodies("before", HALF));
        expected.addAll(Msgs.bodies("after", HALF));
        r1.awaitAll(expected, Duration.ofSeconds(30));
        r2.awaitAll(expected, Duration.ofSeconds(30));
        r1.awaitQuiet(Duration.ofSeconds(2), Duration.ofSeconds(20));
        r2.awaitQuiet(Duration.ofSeconds(2), Duration.ofSeconds(20));

        assertEquals(new TreeSet<>(expected), r1.bodies(), "consumer b1 must get every message");
        assertEquals(new TreeSet<>(expected), r2.bodies(), "consumer b2 must get every message");
        assertEquals(0, r1.duplicates().size(), "b1 duplicates: " + r1.duplicates());
        assertEquals(0, r2.duplicates().size(), "b2 duplicates: " + r2.duplicates());
    }
}
