package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.body.BrokerReplicasInfo;
import org.apache.rocketmq.remoting.protocol.header.controller.GetMetaDataResponseHeader;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Scenario 13 (RocketMQ 5 controller mode): three controllers, a name server and two Apache
 * RocketMQ 5.3.3 brokers of one broker name in controller mode (each its own JVM). The brokers
 * register with the controllers, one is elected master and widens its SyncStateSet to the other;
 * a producer's acknowledged sends (acknowledged only once every in-sync replica has them) go on
 * through a SIGKILL of the master: the controllers elect the slave, the producer resumes, a
 * consumer then receives every acknowledged message, and the old master returns as a slave and
 * rejoins the SyncStateSet. mqadmin's admin client reads the controllers throughout.
 *
 * <p>A second run does the same with two Tidemark brokers in controller mode.
 *
 * <p>Against Tidemark the controllers and the name server are {@code tidemark controller} and
 * {@code tidemark namesrv}; with {@code -Dtidemark.bin=.../apache-dev} they are Apache's own
 * (DLedger controllers), which is the reference this scenario is checked against.
 */
@Tag("tidemark")
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class Scenario13ControllerFailoverTest {

    private static final String PARTS = "io.tidemark.compat.suite.reference.ApacheControllerParts5";
    private static final String BROKER_NAME = "broker-s13";
    private static final Duration READY = Duration.ofSeconds(90);

    private final List<ChildProcess> processes = new ArrayList<>();

    @Test
    void apacheBrokersFailOverThroughTheControllers() throws Exception {
        failover(false);
    }

    /**
     * The same with two Tidemark brokers in controller mode ({@code enable_controller_mode}).
     * Its reference is the test above: against Apache's parts the brokers are Apache's anyway.
     */
    @Test
    void tidemarkBrokersFailOverThroughTheControllers() throws Exception {
        Assumptions.assumeFalse(isReference(), "the reference run is apacheBrokersFailOverThroughTheControllers");
        failover(true);
    }

    private static boolean isReference() {
        String bin = System.getProperty("tidemark.bin");
        return bin != null && Path.of(bin).getFileName().toString().equals("apache-dev");
    }

    private void failover(boolean tidemarkBrokers) throws Exception {
        String bin = System.getProperty("tidemark.bin");
        if (bin == null) {
            fail("-Dtidemark.bin must name the tidemark binary (or scripts/apache-dev)");
        }
        boolean reference = isReference();
        String tidemark = System.getProperty("tidemark.cli", bin);
        Path target = Path.of(System.getProperty("basedir", ".")).toAbsolutePath().resolve("target");
        Path logs = target.resolve("tidemark-suite-logs");
        Files.createDirectories(logs);
        Path dir = Files.createTempDirectory(target, "s13-");
        DefaultMQAdminExt admin = null;
        DefaultMQProducer producer = null;
        DefaultMQPushConsumer consumer = null;
        try {
            int namesrvPort = TidemarkProcess.freePort();
            String namesrv = "127.0.0.1:" + namesrvPort;
            start(reference
                ? new ChildProcess(ChildProcess.javaMain(PARTS, List.of("namesrv", "--port", Integer.toString(namesrvPort))),
                    "apache namesrv ready", logs.resolve("s13-namesrv.log"), READY)
                : new ChildProcess(List.of(tidemark, "namesrv", "--listen", namesrv),
                    "tidemark namesrv ready", logs.resolve("s13-namesrv.log"), READY));

            List<String> controllers = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                controllers.add("127.0.0.1:" + TidemarkProcess.freePort());
            }
            List<String> tidemarkPeers = new ArrayList<>();
            List<String> apachePeers = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                tidemarkPeers.add((i + 1) + "=" + controllers.get(i));
                apachePeers.add("n" + (i + 1) + "-" + controllers.get(i));
            }
            for (int i = 0; i < 3; i++) {
                String data = dir.resolve("controller-" + (i + 1)).toString();
                Path log = logs.resolve("s13-controller-" + (i + 1) + ".log");
                start(reference
                    ? new ChildProcess(ChildProcess.javaMain(PARTS, List.of("controller", "--id", "n" + (i + 1),
                        "--peers", String.join(";", apachePeers), "--data-dir", data)), "apache controller ready", log, READY)
                    : new ChildProcess(List.of(tidemark, "controller", "--id", Integer.toString(i + 1),
                        "--peers", String.join(";", tidemarkPeers), "--listen", controllers.get(i),
                        "--data-dir", data, "--broker-timeout-ms", "3000"), "tidemark controller ready", log, READY));
            }

            admin = new DefaultMQAdminExt();
            admin.setNamesrvAddr(namesrv);
            admin.setInstanceName("s13-admin-" + System.nanoTime());
            admin.start();
            DefaultMQAdminExt adminRef = admin;
            String leader = Wait.retrying("a controller leader", Duration.ofSeconds(60), () -> leaderOf(adminRef, controllers));
            System.out.println("s13: controller leader " + leader + (reference ? " (Apache controllers)" : " (Tidemark controllers)"));

            int[] brokerPorts = {TidemarkProcess.freeBrokerPort(), TidemarkProcess.freeBrokerPort()};
            ChildProcess[] brokers = new ChildProcess[2];
            for (int i = 0; i < 2; i++) {
                Path log = logs.resolve("s13-broker-" + i + (tidemarkBrokers ? "-tidemark" : "") + ".log");
                if (tidemarkBrokers) {
                    Path config = dir.resolve("broker-" + i + ".toml");
                    Files.writeString(config, String.join("\n",
                        "broker_name = \"" + BROKER_NAME + "\"",
                        "broker_ip1 = \"127.0.0.1\"",
                        "listen_ip = \"127.0.0.1\"",
                        "listen_port = " + brokerPorts[i],
                        "grpc_listen_port = 0",
                        "namesrv_addr = \"" + namesrv + "\"",
                        "store_path_root_dir = \"" + dir.resolve("broker-" + i) + "\"",
                        "enable_controller_mode = true",
                        "controller_addr = \"" + String.join(";", controllers) + "\"",
                        "broker_election_priority = " + (i + 1),
                        ""));
                    brokers[i] = start(new ChildProcess(List.of(tidemark, "broker", "-c", config.toString()),
                        "tidemark broker ready", log, READY));
                } else {
                    brokers[i] = start(new ChildProcess(ChildProcess.javaMain(PARTS, List.of("broker",
                        "--data-dir", dir.resolve("broker-" + i).toString(), "--namesrv", namesrv,
                        "--controllers", String.join(";", controllers), "--port", Integer.toString(brokerPorts[i]),
                        "--broker-name", BROKER_NAME, "--priority", Integer.toString(i + 1))),
                        "apache broker ready", log, READY));
                }
            }

            // One master, both replicas in its SyncStateSet.
            BrokerReplicasInfo.ReplicasInfo before = Wait.retrying("a master with both replicas in sync",
                Duration.ofSeconds(90), () -> inSync(adminRef, controllers, 2));
            long masterId = before.getMasterBrokerId();
            String masterAddr = before.getMasterAddress();
            int masterEpoch = before.getMasterEpoch();
            System.out.println("s13: master " + masterId + " at " + masterAddr + ", epoch " + masterEpoch
                + ", in sync " + ids(before.getInSyncReplicas()));

            producer = new DefaultMQProducer("s13-producer-" + System.nanoTime());
            producer.setNamesrvAddr(namesrv);
            producer.setPollNameServerInterval(1000);
            producer.setSendMsgTimeout(3000);
            producer.start();
            String topic = Names.topic("s13");
            DefaultMQProducer producerRef = producer;
            Set<String> acked = ConcurrentHashMap.newKeySet();
            Wait.retrying("the first send", Duration.ofSeconds(60), () -> {
                send(producerRef, topic, "m-first", acked);
                return true;
            });
            for (int i = 0; i < 100; i++) {
                send(producer, topic, "m-" + i, acked);
            }

            // SIGKILL the master; keep sending until writes resume and 50 more are acknowledged.
            int masterIndex = masterAddr.endsWith(":" + brokerPorts[0]) ? 0 : 1;
            long killedAt = System.nanoTime();
            brokers[masterIndex].kill();
            long resumedAt = 0;
            int after = 0;
            int failures = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
            for (int i = 0; after < 50; i++) {
                if (System.nanoTime() > deadline) {
                    fail("writes did not resume within 90 s of the master's SIGKILL (" + after + " sent, "
                        + failures + " failed)\n" + tails());
                }
                try {
                    send(producer, topic, "k-" + i, acked);
                    if (resumedAt == 0) {
                        resumedAt = System.nanoTime();
                    }
                    after++;
                } catch (Exception e) {
                    failures++;
                    TimeUnit.MILLISECONDS.sleep(100);
                }
            }
            long resumeMs = TimeUnit.NANOSECONDS.toMillis(resumedAt - killedAt);
            BrokerReplicasInfo.ReplicasInfo elected = Wait.retrying("a new master", Duration.ofSeconds(30), () -> {
                BrokerReplicasInfo.ReplicasInfo now = replicas(adminRef, controllers);
                if (now.getMasterBrokerId() == null || now.getMasterBrokerId() == masterId) {
                    throw new IllegalStateException("master still " + now.getMasterBrokerId());
                }
                return now;
            });
            assertTrue(elected.getMasterEpoch() > masterEpoch, "the master epoch rose: " + elected.getMasterEpoch());

            // Every acknowledged message is there.
            Set<String> received = ConcurrentHashMap.newKeySet();
            consumer = new DefaultMQPushConsumer("s13-consumer-" + System.nanoTime());
            consumer.setNamesrvAddr(namesrv);
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
                for (MessageExt m : msgs) {
                    received.add(new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8));
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            Wait.until("every acknowledged message", Duration.ofSeconds(60), () -> received.containsAll(acked),
                () -> missing(acked, received).toString());
            int lost = missing(acked, received).size();
            assertEquals(0, lost);

            // The old master comes back as a slave and rejoins the SyncStateSet.
            long returning = System.nanoTime();
            brokers[masterIndex].start();
            BrokerReplicasInfo.ReplicasInfo rejoined = Wait.retrying("the old master back in sync", Duration.ofSeconds(90),
                () -> inSync(adminRef, controllers, 2));
            assertEquals(elected.getMasterBrokerId(), rejoined.getMasterBrokerId(), "the new master stays");
            long rejoinMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - returning);

            System.out.println("s13" + (tidemarkBrokers ? " (Tidemark brokers)" : " (Apache brokers)") + ": master " + masterId + " SIGKILLed; controllers elected " + elected.getMasterBrokerId()
                + " (epoch " + masterEpoch + " -> " + elected.getMasterEpoch() + "); writes resumed " + resumeMs
                + " ms after the kill (" + failures + " sends failed meanwhile); acknowledged " + acked.size()
                + ", lost " + lost + ", received " + received.size() + "; the old master was back in sync "
                + rejoinMs + " ms after its restart");
        } finally {
            if (consumer != null) {
                consumer.shutdown();
            }
            if (producer != null) {
                producer.shutdown();
            }
            if (admin != null) {
                admin.shutdown();
            }
            List<ChildProcess> reversed = new ArrayList<>(processes);
            Collections.reverse(reversed);
            reversed.forEach(ChildProcess::stop);
            if (!Boolean.getBoolean("tidemark.keepData")) {
                TidemarkProcess.deleteTree(dir);
            }
        }
    }

    private ChildProcess start(ChildProcess process) {
        processes.add(process);
        process.start();
        return process;
    }

    private String tails() {
        StringBuilder text = new StringBuilder();
        for (ChildProcess process : processes) {
            text.append(process.tailText()).append('\n');
        }
        return text.toString();
    }

    private static void send(DefaultMQProducer producer, String topic, String body, Set<String> acked) throws Exception {
        SendResult result = producer.send(new Message(topic, body.getBytes(java.nio.charset.StandardCharsets.UTF_8)));
        if (result.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException(body + ": " + result.getSendStatus());
        }
        acked.add(body);
    }

    /** The leader's address, once every controller names the same one. */
    private static String leaderOf(DefaultMQAdminExt admin, List<String> controllers) throws Exception {
        String leader = null;
        for (String controller : controllers) {
            GetMetaDataResponseHeader meta = admin.getControllerMetaData(controller);
            String named = meta.getControllerLeaderAddress();
            if (named == null || named.isEmpty() || (leader != null && !leader.equals(named))) {
                throw new IllegalStateException(controller + " names leader " + named);
            }
            leader = named;
        }
        return leader;
    }

    private static BrokerReplicasInfo.ReplicasInfo replicas(DefaultMQAdminExt admin, List<String> controllers) throws Exception {
        String leader = leaderOf(admin, controllers);
        BrokerReplicasInfo info = admin.getInSyncStateData(leader, List.of(BROKER_NAME));
        BrokerReplicasInfo.ReplicasInfo replicas = info.getReplicasInfoTable().get(BROKER_NAME);
        if (replicas == null) {
            throw new IllegalStateException("no replicas of " + BROKER_NAME + " yet");
        }
        return replicas;
    }

    private static BrokerReplicasInfo.ReplicasInfo inSync(DefaultMQAdminExt admin, List<String> controllers, int count)
        throws Exception {
        BrokerReplicasInfo.ReplicasInfo replicas = replicas(admin, controllers);
        if (replicas.getMasterBrokerId() == null || replicas.getInSyncReplicas().size() < count) {
            throw new IllegalStateException("master " + replicas.getMasterBrokerId() + ", in sync "
                + ids(replicas.getInSyncReplicas()));
        }
        return replicas;
    }

    private static List<Long> ids(List<BrokerReplicasInfo.ReplicaIdentity> replicas) {
        List<Long> ids = new ArrayList<>();
        for (BrokerReplicasInfo.ReplicaIdentity replica : replicas) {
            ids.add(replica.getBrokerId());
        }
        return ids;
    }

    private static Set<String> missing(Set<String> acked, Set<String> received) {
        Set<String> missing = new java.util.TreeSet<>(acked);
        missing.removeAll(received);
        return missing;
    }
}
