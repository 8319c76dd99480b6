package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.constant.PermName;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * RocketMQ ACL on the gRPC port: rocketmq-client-java 5.x signs each call with its
 * {@code StaticSessionCredentialsProvider} (the {@code authorization} header over
 * {@code x-mq-date-time}), and Tidemark checks it against the same {@code plain_acl.yml} as the
 * remoting port: an allowed account sends, receives and acknowledges; a denied topic, a denied
 * group, a wrong secret, an unknown key and a client without credentials are refused with
 * RocketMQ's texts.
 *
 * <p>Tidemark only: Apache's 5.3.3 proxy (the reference stand-in) has no 4.x {@code plain_acl.yml}
 * (its ACL 2.0 keeps users in its own store), so against it this class is skipped.
 */
@Tag("tidemark")
class Grpc03AclTest extends SuiteBase {

    private static final String TOPIC_OK = "grpcAclTopicOk";
    private static final String TOPIC_DENIED = "grpcAclTopicDenied";
    private static final String GROUP_OK = "grpcAclGroupOk";
    private static final String GROUP_DENIED = "grpcAclGroupDenied";

    /** Called by {@link SuiteBase} before the server starts: the file must exist by then. */
    static List<String> runtimeDevArgs() throws IOException {
        if (againstApacheReference()) {
            return List.of();
        }
        Path dir = TidemarkProcess.targetDir().resolve("tidemark-grpc-acl");
        Files.createDirectories(dir);
        Path file = dir.resolve(Names.unique("plain_acl") + ".yml");
        Files.writeString(file, """
            accounts:
              - accessKey: alice-key
                secretKey: alice-secret
                defaultTopicPerm: DENY
                defaultGroupPerm: DENY
                topicPerms:
                  - grpcAclTopicOk=PUB|SUB
                  - grpcAclTopicDenied=DENY
                groupPerms:
                  - grpcAclGroupOk=SUB
              - accessKey: admin-key
                secretKey: admin-secret
                admin: true
            """);
        return List.of("--acl-file", file.toString(), "--acl-access-key", "admin-key", "--acl-secret-key",
            "admin-secret");
    }

    private ClientConfiguration config(String accessKey, String secretKey) {
        var builder = ClientConfiguration.newBuilder()
            .setEndpoints(tidemark.grpcAddr())
            .enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(5));
        if (accessKey != null) {
            builder.setCredentialProvider(new StaticSessionCredentialsProvider(accessKey, secretKey));
        }
        return builder.build();
    }

    private Message message(String topic, String body) {
        return clients.provider.newMessageBuilder()
            .setTopic(topic)
            .setBody(body.getBytes(StandardCharsets.UTF_8))
            .build();
    }

    /** The text of the failure, through whatever the client wrapped it in. */
    private static String failure(Exception e) {
        StringBuilder text = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            text.append(t.getClass().getSimpleName()).append(": ").append(t.getMessage()).append(" <- ");
        }
        return text.toString();
    }

    private static void assertRefused(String expected, Exception e, String what) {
        String text = failure(e);
        assertTrue(text.contains(expected), what + ": expected \"" + expected + "\", got " + text);
        System.out.println("grpc03 " + what + ": refused: " + expected);
    }

    @Test
    @Timeout(value = 120, unit = TimeUnit.SECONDS)
    void accountsAreCheckedOnTheGrpcPort() throws Exception {
        assumeFalse(againstApacheReference(), "Apache's proxy has no plain_acl.yml (see the class comment)");
        // Topics and groups made by the admin account over remoting (admin request codes).
        DefaultMQProducer remoting = new DefaultMQProducer(Names.unique("P"),
            new AclClientRPCHook(new SessionCredentials("admin-key", "admin-secret")));
        remoting.setNamesrvAddr(tidemark.namesrvAddr());
        remoting.setInstanceName(Names.instance("acl-admin"));
        remoting.setVipChannelEnabled(false);
        remoting.start();
        try {
            var api = remoting.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
            for (String topic : List.of(TOPIC_OK, TOPIC_DENIED)) {
                TopicConfig config = new TopicConfig(topic, 4, 4, PermName.PERM_READ | PermName.PERM_WRITE);
                api.createTopic(tidemark.brokerAddr(), TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC, config, 5000);
            }
            for (String group : List.of(GROUP_OK, GROUP_DENIED)) {
                SubscriptionGroupConfig config = new SubscriptionGroupConfig();
                config.setGroupName(group);
                api.createSubscriptionGroup(tidemark.brokerAddr(), config, 5000);
            }
        } finally {
            remoting.shutdown();
        }

        // Allowed: send, receive, acknowledge.
        Producer producer = clients.grpcProducer(config("alice-key", "alice-secret"), TOPIC_OK);
        for (int i = 0; i < 5; i++) {
            assertNotNull(producer.send(message(TOPIC_OK, "ok-" + i)).getMessageId());
        }
        SimpleConsumer consumer = clients.simpleConsumer(config("alice-key", "alice-secret"), GROUP_OK, TOPIC_OK,
            Duration.ofSeconds(3));
        int received = 0;
        long deadline = System.currentTimeMillis() + 30_000;
        while (received < 5 && System.currentTimeMillis() < deadline) {
            for (MessageView view : consumer.receive(16, Duration.ofSeconds(15))) {
                consumer.ack(view);
                received++;
            }
        }
        assertEquals(5, received, "alice's SimpleConsumer in " + GROUP_OK);
        System.out.println("grpc03 alice SEND/RECEIVE/ACK " + TOPIC_OK + " as " + GROUP_OK + ": allowed");

        // A denied topic: the route lookup itself is refused, so the producer does not start.
        Exception deniedTopic = assertThrows(Exception.class,
            () -> clients.grpcProducer(config("alice-key", "alice-secret"), TOPIC_DENIED));
        assertRefused("No default permission for topic:" + TOPIC_DENIED, deniedTopic, "alice producer " + TOPIC_DENIED);

        // A denied group: receiving is refused.
        SimpleConsumer denied = clients.simpleConsumer(config("alice-key", "alice-secret"), GROUP_DENIED, TOPIC_OK,
            Duration.ofSeconds(1));
        Exception deniedGroup = assertThrows(ClientException.class, () -> denied.receive(16, Duration.ofSeconds(15)));
        assertRefused("No default permission for group:" + GROUP_DENIED, deniedGroup, "alice receive as " + GROUP_DENIED);

        Exception wrongSecret = assertThrows(Exception.class,
            () -> clients.grpcProducer(config("alice-key", "not-alice-secret"), TOPIC_OK));
        assertRefused("Check signature failed for accessKey=alice-key", wrongSecret, "alice with a wrong secret");

        Exception unknownKey = assertThrows(Exception.class,
            () -> clients.grpcProducer(config("bob-key-1", "bob-secret"), TOPIC_OK));
        assertRefused("No acl config for bob-key-1", unknownKey, "unknown key bob-key-1");

        Exception anonymous = assertThrows(Exception.class, () -> clients.grpcProducer(config(null, null), TOPIC_OK));
        assertRefused("No accessKey is configured", anonymous, "no credentials");
    }
}
