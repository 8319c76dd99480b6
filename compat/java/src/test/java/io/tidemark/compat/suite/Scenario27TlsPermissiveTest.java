package io.tidemark.compat.suite;

import java.time.Duration;
import java.util.List;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 27: TLS in permissive mode (RocketMQ's default; here explicit), where one port serves
 * clients that dial TLS and clients that do not, told apart by their first byte: a
 * {@code -Dtls.enable=true} client in its own JVM and a plaintext client in this one produce and
 * consume at the same time.
 */
@Tag("tidemark")
class Scenario27TlsPermissiveTest extends SuiteBase {

    private static final int COUNT = 20;

    static List<String> runtimeDevArgs() {
        return List.of("--tls-mode", "permissive");
    }

    @Test
    void tlsAndPlaintextClientsAreServedAtOnce() throws Exception {
        Process child = TlsScenario.start(tidemark.namesrvAddr(), Names.topic("s27tls"), COUNT, true);

        String plainTopic = Names.topic("s27plain");
        DefaultMQProducer producer = clients.producer();
        for (int i = 0; i < COUNT; i++) {
            Msgs.sendOk(producer, Msgs.message(plainTopic, "plain", "plain-" + i));
        }
        Received received = new Received();
        clients.push(Names.group("s27"), plainTopic, "*", received.listener("c"));
        List<String> expected = Msgs.bodies("plain", COUNT);
        received.awaitAll(expected, Duration.ofSeconds(60));

        TlsScenario.assertAllCameBack(TlsScenario.finish(child), COUNT, serverLog());
    }
}
