package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.List;
import java.util.StringJoiner;
import java.util.concurrent.Callable;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.CommunicationMode;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.PlainAccessConfig;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.constant.PermName;
import org.apache.rocketmq.common.filter.ExpressionType;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageBatch;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.ResponseCode;
import org.apache.rocketmq.common.protocol.header.PullMessageRequestHeader;
import org.apache.rocketmq.common.protocol.header.SendMessageRequestHeader;
import org.apache.rocketmq.common.protocol.route.TopicRouteData;
import org.apache.rocketmq.common.sysflag.PullSysFlag;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * Scenario 25: RocketMQ 4.x ACL ({@code plain_acl.yml}, requests signed with
 * {@link AclClientRPCHook}), with the 4.9.8 client only (5.x replaced this ACL). The server starts
 * with {@code --acl-file <file>} ({@link #runtimeDevArgs}); the file has an admin account and
 * {@code alice-key}, who may publish and subscribe {@value #TOPIC_OK} as {@value #GROUP_OK} and
 * nothing else.
 *
 * <p>Every refusal is checked against the broker's own answer to the same request from the same
 * client (so with the same credentials): the message text, and the code, which is SYSTEM_ERROR (1)
 * from Apache 4.9 (its ACL exception escapes the request hook) and NO_PERMISSION (16) from Tidemark.
 * The public client call must fail with that answer too, unless the name server refused the
 * client's route lookup first: Apache's name server has no ACL, Tidemark's has, and the 4.9 client
 * only logs a name server's refusal and then reports that it has no route. So when the name server
 * refuses, its answer must be the same code and text instead. One {@code scenario25} line per case
 * shows what each server answered.
 *
 * <p>The cases run in order: the last one white-lists 127.0.0.1, after which the server lets
 * every request from this machine through unchecked.
 */
@Tag("tidemark")
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class Scenario25AclTest extends SuiteBase {

    static final String TOPIC_OK = "aclTopicOk";
    static final String TOPIC_DENIED = "aclTopicDenied";
    static final String GROUP_OK = "aclGroupOk";
    static final String GROUP_DENIED = "aclGroupDenied";
    private static final int COUNT = 20;

    private static final RPCHook ADMIN = hook("admin-key", "admin-secret");
    private static final RPCHook ALICE = hook("alice-key", "alice-secret");

    private static Path aclFile;
    private static String brokerName;

    /**
     * What a server answered (0 for a served route lookup, else code and remark) and, when a client
     * call reported it, the exceptions it was reported through, outermost first.
     */
    record Answer(int code, String text, String thrown) {
        Answer(int code, String text) {
            this(code, text, "");
        }

        @Override
        public String toString() {
            return (thrown.isEmpty() ? "" : thrown + " ") + code + " \"" + text.replaceAll("\\s+", " ") + "\"";
        }
    }

    private static RPCHook hook(String accessKey, String secretKey) {
        return new AclClientRPCHook(new SessionCredentials(accessKey, secretKey));
    }

    /** Called by {@link SuiteBase} before the server starts: the file must exist by then. */
    static List<String> runtimeDevArgs() throws IOException {
        Path dir = TidemarkProcess.targetDir().resolve("tidemark-suite-acl");
        Files.createDirectories(dir);
        aclFile = dir.resolve(Names.unique("plain_acl") + ".yml");
        Files.writeString(aclFile, aclYaml(List.of()));
        // Tidemark's name server checks ACL too: its broker registers as the admin account.
        return List.of("--acl-file", aclFile.toString(), "--acl-access-key", "admin-key",
            "--acl-secret-key", "admin-secret");
    }

    private static String aclYaml(List<String> globalWhiteAddresses) {
        StringBuilder y = new StringBuilder("globalWhiteRemoteAddresses:");
        if (globalWhiteAddresses.isEmpty()) {
            y.append(" []\n");
        } else {
            y.append('\n');
            globalWhiteAddresses.forEach(a -> y.append("  - ").append(a).append('\n'));
        }
        y.append("""
            accounts:
              - accessKey: alice-key
                secretKey: alice-secret
                whiteRemoteAddress:
                admin: false
                defaultTopicPerm: DENY
                defaultGroupPerm: DENY
                topicPerms:
                  - aclTopicOk=PUB|SUB
                  - aclTopicDenied=DENY
                groupPerms:
                  - aclGroupOk=SUB
                  - aclGroupDenied=DENY
              - accessKey: admin-key
                secretKey: admin-secret
                whiteRemoteAddress:
                admin: true
            """);
        return y.toString();
    }

    /** Case a, first half: only an admin account may create topics (UPDATE_AND_CREATE_TOPIC, 17). */
    @BeforeAll
    static void adminCreatesTopics() throws Exception {
        try (Clients admins = new Clients(tidemark.namesrvAddr())) {
            DefaultMQAdminExt admin = admins.signedWith(ADMIN).admin();
            for (String topic : List.of(TOPIC_OK, TOPIC_DENIED)) {
                admin.createAndUpdateTopicConfig(tidemark.brokerAddr(),
                    new TopicConfig(topic, 4, 4, PermName.PERM_READ | PermName.PERM_WRITE));
                TopicRouteData route = Wait.retrying("route of " + topic, Duration.ofSeconds(20),
                    () -> admin.examineTopicRouteInfo(topic));
                brokerName = route.getBrokerDatas().get(0).getBrokerName();
            }
        }
        System.out.println("scenario25 a admin-key UPDATE_AND_CREATE_TOPIC " + TOPIC_OK + ", " + TOPIC_DENIED
            + ": allowed (broker " + brokerName + ")");
    }

    @Test
    @Order(1)
    void aliceSendsAndConsumesWhereAllowed() throws Exception {
        Clients alice = clients.signedWith(ALICE);
        Msgs.sendAll(alice.producer(), TOPIC_OK, "acl", "ok", COUNT);
        System.out.println("scenario25 a alice-key SEND " + TOPIC_OK + " x" + COUNT + ": allowed");
        Received received = new Received();
        alice.push(GROUP_OK, TOPIC_OK, "*", received.listener("alice"));
        received.awaitAll(Msgs.bodies("ok", COUNT), Duration.ofSeconds(30));
        System.out.println("scenario25 a alice-key PUSH " + TOPIC_OK + " as " + GROUP_OK + ": allowed, "
            + received.distinct() + "/" + COUNT + " received");
    }

    @Test
    @Order(2)
    void aliceCannotSendToADeniedTopic() throws Exception {
        DefaultMQProducer p = clients.signedWith(ALICE).producer();
        expectRefused("b alice-key SEND " + TOPIC_DENIED, "No default permission for topic:" + TOPIC_DENIED,
            p, TOPIC_DENIED, () -> p.send(Msgs.message(TOPIC_DENIED, "acl", "denied")), sendAtBroker(p, TOPIC_DENIED));
    }

    /**
     * Case j: the client's own batch ({@link MessageBatch}: SEND_BATCH_MESSAGE, 320, with the short
     * header whose topic is field {@code b}) is checked on the topic it writes, also when a signing
     * hook adds a long-form {@code topic} field naming a permitted topic: refused, nothing stored,
     * no topic created. Apache 4.9 checks no batch at all and stores both (the reference run shows
     * it); Tidemark refuses them as it refuses the same messages sent one by one.
     */
    @Test
    @Order(2)
    void aBatchIsCheckedOnTheTopicItWrites() throws Exception {
        RPCHook conflicting = new RPCHook() {
            @Override
            public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
                request.addExtField("topic", TOPIC_OK);
                ALICE.doBeforeRequest(remoteAddr, request);
            }

            @Override
            public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
                ALICE.doAfterResponse(remoteAddr, request, response);
            }
        };
        DefaultMQProducer plain = clients.signedWith(ALICE).producer();
        DefaultMQProducer withTopicField = clients.signedWith(conflicting).producer();
        DefaultMQAdminExt admin = clients.signedWith(ADMIN).admin();
        String fresh = Names.unique("aclFresh");
        long before = storedIn(admin, TOPIC_DENIED);
        for (DefaultMQProducer p : List.of(plain, withTopicField)) {
            String how = p == plain ? "" : " (topic=" + TOPIC_OK + " beside b)";
            if (againstApacheReference()) {
                Object sent = batchAtBroker(p, TOPIC_DENIED).call();
                System.out.println("scenario25 j alice-key SEND_BATCH_MESSAGE " + TOPIC_DENIED + how
                    + ": allowed by Apache 4.9 (it checks no batch): " + sent);
                continue;
            }
            for (String topic : List.of(TOPIC_DENIED, fresh)) {
                Answer broker = refusal(batchAtBroker(p, topic));
                System.out.println("scenario25 j alice-key SEND_BATCH_MESSAGE " + topic + how + ": refused; broker "
                    + broker);
                assertRefusedWith("permission for topic:" + topic, broker, "alice's batch to " + topic + how);
            }
        }
        if (!againstApacheReference()) {
            assertEquals(before, storedIn(admin, TOPIC_DENIED), "a refused batch was stored");
            boolean created = api(admin).getAllTopicConfig(tidemark.brokerAddr(), 5000).getTopicConfigTable()
                .containsKey(fresh);
            assertTrue(!created, "a refused batch created topic " + fresh);
            // The same batch to the permitted topic is stored: the refusals were the ACL's.
            batchAtBroker(plain, TOPIC_OK).call();
        }
    }

    /** Messages in {@code topic}'s queues, as the admin account sees them. */
    private static long storedIn(DefaultMQAdminExt admin, String topic) throws Exception {
        return admin.examineTopicStats(topic).getOffsetTable().values().stream()
            .mapToLong(o -> o.getMaxOffset() - o.getMinOffset()).sum();
    }

    /** One {@link MessageBatch} of 5 straight to the broker, as the client sends a batch. */
    private static Callable<Object> batchAtBroker(DefaultMQProducer p, String topic) {
        return () -> {
            List<Message> messages = new java.util.ArrayList<>();
            for (int i = 0; i < 5; i++) {
                messages.add(Msgs.message(topic, "acl", "batch-" + i + "-" + System.nanoTime()));
            }
            MessageBatch batch = MessageBatch.generateFromList(messages);
            batch.setBody(batch.encode());
            SendMessageRequestHeader h = new SendMessageRequestHeader();
            h.setProducerGroup(p.getProducerGroup());
            h.setTopic(topic);
            h.setDefaultTopic(TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC);
            h.setDefaultTopicQueueNums(4);
            h.setQueueId(0);
            h.setSysFlag(0);
            h.setBornTimestamp(System.currentTimeMillis());
            h.setFlag(batch.getFlag());
            h.setProperties(MessageDecoder.messageProperties2String(batch.getProperties()));
            h.setReconsumeTimes(0);
            h.setBatch(true);
            return api(p).sendMessage(tidemark.brokerAddr(), brokerName, batch, h, 5000, CommunicationMode.SYNC,
                null, null);
        };
    }

    @Test
    @Order(3)
    @SuppressWarnings("deprecation")
    void aliceCannotPullAsADeniedGroup() throws Exception {
        DefaultMQPullConsumer c = clients.signedWith(ALICE).pullConsumer(GROUP_DENIED);
        MessageQueue mq = new MessageQueue(TOPIC_OK, brokerName, 0);
        expectRefused("c alice-key PULL " + TOPIC_OK + " as " + GROUP_DENIED,
            "No default permission for group:" + GROUP_DENIED,
            c, TOPIC_OK, () -> c.pull(mq, "*", 0, 32), pullAtBroker(c, GROUP_DENIED, mq));
    }

    @Test
    @Order(4)
    void aWrongSecretIsRefused() throws Exception {
        DefaultMQProducer p = clients.signedWith(hook("alice-key", "not-alice-secret")).producer();
        expectRefused("d alice-key (wrong secret) SEND " + TOPIC_OK, "Check signature failed for accessKey=alice-key",
            p, TOPIC_OK, () -> p.send(Msgs.message(TOPIC_OK, "acl", "wrong-secret")), sendAtBroker(p, TOPIC_OK));
    }

    @Test
    @Order(5)
    void anUnknownAccessKeyIsRefused() throws Exception {
        DefaultMQProducer p = clients.signedWith(hook("bob-key", "bob-secret")).producer();
        expectRefused("e bob-key SEND " + TOPIC_OK, "No acl config for bob-key",
            p, TOPIC_OK, () -> p.send(Msgs.message(TOPIC_OK, "acl", "bob")), sendAtBroker(p, TOPIC_OK));
    }

    @Test
    @Order(6)
    void onlyAdminsCreateTopics() throws Exception {
        DefaultMQAdminExt admin = clients.signedWith(ALICE).admin();
        // goes to the broker directly (no route lookup), so the client's answer is the broker's
        Answer broker = refusal(() -> {
            admin.createAndUpdateTopicConfig(tidemark.brokerAddr(),
                new TopicConfig("aclTopicByAlice", 4, 4, PermName.PERM_READ | PermName.PERM_WRITE));
            return null;
        });
        System.out.println("scenario25 f alice-key UPDATE_AND_CREATE_TOPIC aclTopicByAlice: refused; broker " + broker);
        assertRefusedWith("Need admin permission for request code=17, but accessKey=alice-key is not", broker,
            "alice's createAndUpdateTopicConfig");
    }

    /**
     * Case i: Tidemark's own tools sign as the Java hook does, so they work against either server:
     * {@code tidemark admin send-message} with alice's account sends, and with a wrong secret is
     * refused with the server's text.
     */
    @Test
    @Order(6)
    void tidemarksOwnCliSignsForEitherServer() throws Exception {
        TidemarkCli.Run sent = TidemarkCli.run("admin", "send-message", "-n", tidemark.namesrvAddr(),
            "--access-key", "alice-key", "--secret-key", "alice-secret", "-t", TOPIC_OK, "--count", "3");
        assertEquals(0, sent.exit(), "signed CLI send failed: " + sent.stderr() + serverLog());
        assertEquals(3, sent.stdout().stream().filter(l -> l.contains("\"SEND_OK\"")).count(),
            "sends: " + sent.stdout());
        TidemarkCli.Run refused = TidemarkCli.run("admin", "send-message", "-n", tidemark.namesrvAddr(),
            "--access-key", "alice-key", "--secret-key", "not-alice-secret", "-t", TOPIC_OK, "--count", "1");
        System.out.println("scenario25 i tidemark admin send-message as alice-key: 3/3 SEND_OK; wrong secret: exit "
            + refused.exit() + " " + refused.stderr().lines().reduce((a, b) -> b).orElse(""));
        assertTrue(refused.exit() != 0, "a wrong secret got through: " + refused.stdout());
        assertTrue(refused.stderr().contains("Check signature failed for accessKey=alice-key"),
            "the refusal does not carry the server's text: " + refused.stderr());
    }

    /**
     * Apache: the name server serves the route to anyone, the broker answers SYSTEM_ERROR "No
     * accessKey is configured". Tidemark: the broker answers NO_PERMISSION with that text, and its
     * name server may refuse the route lookup the same way (then the client reports no route).
     * Once 127.0.0.1 is globally white-listed, the same unsigned producer gets through, which
     * needs the server to reload the edited file.
     */
    /**
     * Case h: an admin creates an account at run time (UPDATE_AND_CREATE_ACL_CONFIG, 50), its
     * holder can send at once, the file's version moved (GET_BROKER_CLUSTER_ACL_INFO, 52), and
     * once the admin deletes it (DELETE_ACL_CONFIG, 51) the same client is refused again.
     * Apache 4.9 lets any account send these codes; Tidemark only admins (checked against it only).
     */
    @Test
    @Order(7)
    void adminsManageAccountsWhileTheServerRuns() throws Exception {
        DefaultMQAdminExt admin = clients.signedWith(ADMIN).admin();
        String addr = tidemark.brokerAddr();
        long before = aclVersion(admin, addr);
        PlainAccessConfig carol = new PlainAccessConfig();
        carol.setAccessKey("carol-key");
        carol.setSecretKey("carol-secret");
        carol.setDefaultTopicPerm("DENY");
        carol.setDefaultGroupPerm("DENY");
        carol.setTopicPerms(List.of(TOPIC_OK + "=PUB"));
        if (!againstApacheReference()) {
            DefaultMQAdminExt alice = clients.signedWith(ALICE).admin();
            Answer refused = refusal(() -> {
                alice.createAndUpdatePlainAccessConfig(addr, carol);
                return null;
            });
            assertRefusedWith("Need admin permission for request code=50, but accessKey=alice-key is not", refused,
                "alice's createAndUpdatePlainAccessConfig");
        }
        admin.createAndUpdatePlainAccessConfig(addr, carol);
        DefaultMQProducer p = clients.signedWith(hook("carol-key", "carol-secret")).producer();
        // the name server (Tidemark's checks ACL too) reads the changed file on its own timer
        Wait.retrying("carol's send once her account exists", Duration.ofSeconds(30),
            () -> Msgs.sendOk(p, Msgs.message(TOPIC_OK, "acl", "carol")));
        long after = aclVersion(admin, addr);
        assertTrue(after > before, "the ACL version counter must move with a change: " + before + " -> " + after);
        System.out.println("scenario25 h admin-key UPDATE_AND_CREATE_ACL_CONFIG carol-key: allowed; carol SEND "
            + TOPIC_OK + ": allowed; ACL version " + before + " -> " + after);

        admin.deletePlainAccessConfig(addr, "carol-key");
        Answer[] last = new Answer[1];
        Wait.until("carol refused once her account is deleted", Duration.ofSeconds(30), () -> {
            try {
                last[0] = refusal(sendAtBroker(p, TOPIC_OK));
            } catch (AssertionError accepted) {
                return false;
            }
            return last[0].text().contains("No acl config for carol-key");
        }, () -> "last answer " + last[0]);
        System.out.println("scenario25 h admin-key DELETE_ACL_CONFIG carol-key; carol SEND: refused; broker " + last[0]);
    }

    /**
     * The highest version counter over the broker's ACL files: Apache 4.9 moves the per-file
     * versions (its single {@code version} field stays put), Tidemark has one file.
     */
    private static long aclVersion(DefaultMQAdminExt admin, String addr) throws Exception {
        return admin.examineBrokerClusterAclVersionInfo(addr).getAllAclConfigDataVersion().values().stream()
            .mapToLong(v -> v.getCounter().get()).max().orElse(-1);
    }

    @Test
    @Order(8)
    void unsignedIsRefusedUntilItsAddressIsWhiteListed() throws Exception {
        DefaultMQProducer p = clients.producer();
        expectRefused("g unsigned SEND " + TOPIC_OK, "No accessKey is configured",
            p, TOPIC_OK, () -> p.send(Msgs.message(TOPIC_OK, "acl", "unsigned-refused")), sendAtBroker(p, TOPIC_OK));

        Path edited = aclFile.resolveSibling(aclFile.getFileName() + ".new");
        Files.writeString(edited, aclYaml(List.of("127.0.0.1")));
        Files.move(edited, aclFile, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        long start = System.nanoTime();
        Wait.retrying("the unsigned producer's send once 127.0.0.1 is white-listed (file reloaded)",
            Duration.ofSeconds(30),
            () -> Msgs.sendOk(p, Msgs.message(TOPIC_OK, "acl", "unsigned-" + System.nanoTime())));
        System.out.println("scenario25 g unsigned SEND " + TOPIC_OK + " with 127.0.0.1 in globalWhiteRemoteAddresses: "
            + "allowed " + (System.nanoTime() - start) / 1_000_000 + " ms after the edit");
    }

    /** What the servers answer to a refused request: see the class comment. */
    private void expectRefused(String label, String expected, ClientConfig client, String topic,
        Callable<?> publicCall, Callable<?> atBroker) {
        Answer broker = refusal(atBroker);
        Answer namesrv = routeAnswer(client, topic);
        Answer viaClient = refusal(publicCall);
        System.out.println("scenario25 " + label + ": refused; broker " + broker + "; namesrv "
            + (namesrv.code() == 0 ? "serves the route" : namesrv.toString()) + "; client " + viaClient);

        assertRefusedWith(expected, broker, label + ", the broker's direct answer");
        if (againstApacheReference()) {
            assertEquals(0, namesrv.code(), "Apache 4.9's name server has no ACL: " + namesrv);
        }
        if (namesrv.code() == 0) {
            assertRefusedWith(expected, viaClient, label + ", through the client API");
        } else {
            assertRefusedWith(expected, namesrv, label + ", the name server's answer to the route lookup");
            assertTrue(viaClient.text().contains("No route info of this topic")
                    || viaClient.text().contains("not exist"),
                label + ": with the route refused the 4.9 client should report a missing route, got " + viaClient);
        }
    }

    private static void assertRefusedWith(String expected, Answer answer, String what) {
        int code = againstApacheReference() ? ResponseCode.SYSTEM_ERROR : ResponseCode.NO_PERMISSION;
        assertTrue(answer.text().contains(expected), what + ": expected \"" + expected + "\", got " + answer
            + serverLog());
        assertEquals(code, answer.code(), what + ": response code of " + answer);
    }

    /**
     * Runs a call that must fail; the server's code and remark as the 4.9 client reports them: the
     * innermost MQBrokerException's (a send wraps it in an MQClientException after its retries),
     * else the MQClientException's own (a refused admin request or route lookup).
     */
    private static Answer refusal(Callable<?> call) {
        Object result;
        try {
            result = call.call();
        } catch (Exception e) {
            StringJoiner chain = new StringJoiner("<-");
            MQBrokerException innermost = null;
            for (Throwable t = e; t != null; t = t.getCause()) {
                chain.add(t.getClass().getSimpleName());
                if (t instanceof MQBrokerException b) {
                    innermost = b;
                }
            }
            if (innermost != null) {
                return new Answer(innermost.getResponseCode(), String.valueOf(innermost.getErrorMessage()),
                    chain.toString());
            }
            if (e instanceof MQClientException c) {
                return new Answer(c.getResponseCode(), String.valueOf(c.getErrorMessage()), chain.toString());
            }
            return new Answer(-1, e.toString(), chain.toString());
        }
        return fail("expected a refusal, the server accepted: " + result);
    }

    /** The name server's answer to this client's GET_ROUTEINFO_BY_TOPIC. */
    private static Answer routeAnswer(ClientConfig client, String topic) {
        try {
            api(client).getTopicRouteInfoFromNameServer(topic, 5000);
            return new Answer(0, "route");
        } catch (MQClientException e) {
            return new Answer(e.getResponseCode(), String.valueOf(e.getErrorMessage()));
        } catch (Exception e) {
            return new Answer(-1, e.toString());
        }
    }

    /** One SEND_MESSAGE(_V2) straight to the broker through this client's signing hook. */
    private static Callable<Object> sendAtBroker(DefaultMQProducer p, String topic) {
        return () -> {
            Message m = Msgs.message(topic, "acl", "direct-" + System.nanoTime());
            SendMessageRequestHeader h = new SendMessageRequestHeader();
            h.setProducerGroup(p.getProducerGroup());
            h.setTopic(topic);
            h.setDefaultTopic(TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC);
            h.setDefaultTopicQueueNums(4);
            h.setQueueId(0);
            h.setSysFlag(0);
            h.setBornTimestamp(System.currentTimeMillis());
            h.setFlag(m.getFlag());
            h.setProperties(MessageDecoder.messageProperties2String(m.getProperties()));
            h.setReconsumeTimes(0);
            h.setBatch(false);
            return api(p).sendMessage(tidemark.brokerAddr(), brokerName, m, h, 5000, CommunicationMode.SYNC,
                null, null);
        };
    }

    /** One PULL_MESSAGE straight to the broker through this client's signing hook. */
    private static Callable<Object> pullAtBroker(ClientConfig c, String group, MessageQueue mq) {
        return () -> {
            PullMessageRequestHeader h = new PullMessageRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(mq.getTopic());
            h.setQueueId(mq.getQueueId());
            h.setQueueOffset(0L);
            h.setMaxMsgNums(32);
            h.setSysFlag(PullSysFlag.buildSysFlag(false, false, true, false));
            h.setCommitOffset(0L);
            h.setSuspendTimeoutMillis(0L);
            h.setSubscription("*");
            h.setSubVersion(0L);
            h.setExpressionType(ExpressionType.TAG);
            return api(c).pullMessage(tidemark.brokerAddr(), h, 5000, CommunicationMode.SYNC, null);
        };
    }

    /** The started client's own MQClientInstance (instances are shared by client id). */
    private static MQClientAPIImpl api(ClientConfig client) {
        return MQClientManager.getInstance().getOrCreateMQClientInstance(client).getMQClientAPIImpl();
    }
}
