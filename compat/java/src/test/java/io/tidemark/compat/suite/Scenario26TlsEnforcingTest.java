package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.remoting.netty.TlsSystemConfig;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 26: TLS in enforcing mode ({@code --tls-mode enforcing}; Apache:
 * {@code -Dtls.server.mode=enforcing}) on the name server and the broker, with the server's
 * self-signed certificate. A 4.9 client started with {@code -Dtls.enable=true} produces and consumes
 * (in its own JVM: the client reads the property once); a plaintext client gets nothing through.
 */
@Tag("tidemark")
class Scenario26TlsEnforcingTest extends SuiteBase {

    private static final int COUNT = 20;

    static List<String> runtimeDevArgs() {
        return List.of("--tls-mode", "enforcing");
    }

    @Test
    void aClientWithTlsEnabledProducesAndConsumes() throws Exception {
        String topic = Names.topic("s26");
        Process child = TlsScenario.start(tidemark.namesrvAddr(), topic, COUNT, true);
        TlsScenario.assertAllCameBack(TlsScenario.finish(child), COUNT, serverLog());
    }

    @Test
    void aPlaintextClientIsRefused() throws Exception {
        assertFalse(TlsSystemConfig.tlsEnable, "the suite's own JVM must dial plaintext");
        DefaultMQProducer producer = clients.producer(p -> p.setSendMsgTimeout(2000));
        // The name server closes the connection: no route, so the send fails in the client
        // (with MQClientException or, from the 4.9 client, IllegalStateException).
        assertThrows(Exception.class,
            () -> producer.send(Msgs.message(Names.topic("s26plain"), "plain", "refused")),
            "a plaintext send went through an enforcing server" + serverLog());
    }
}
