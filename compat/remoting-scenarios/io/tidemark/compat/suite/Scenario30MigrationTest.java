package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.Reader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Scenario 30: moving a broker between Apache RocketMQ and Tidemark, both ways, on one store
 * directory and one {@code broker.conf}, with Apache's broker in the test's JVM: 4.9.7 in
 * compat/java, 5.3.3 in compat/java5 (both compile this file). An Apache broker takes sends, a
 * group consumes them and commits, a delay-level message waits (and with 5.3.3 a timer message
 * is delivered and another waits); the broker stops. Tidemark starts on the same directory and
 * file: the topic, the group's committed offsets and the waiting messages are there, the group
 * resumes with none of what it consumed delivered again, and the waiting timer message arrives
 * at its time, not before. Tidemark takes more sends and commits and stops; Apache starts again
 * on what Tidemark wrote: its offsets are Tidemark's, the group resumes where it stood with
 * nothing delivered twice (not the timer message Tidemark delivered either), and a new group
 * reads every message, those Tidemark stored included. Last, Tidemark starts once more: it takes
 * the progress Apache committed meanwhile over its own older offset journal.
 */
@Tag("tidemark")
@Timeout(value = 300, unit = java.util.concurrent.TimeUnit.SECONDS)
class Scenario30MigrationTest {

    private static final int SEGMENT = 64 * 1024 * 1024;
    private static final Duration DELIVERY = Duration.ofSeconds(60);

    static {
        // BrokerStartup sets this; without it requests carry version 0 (see ApacheDev).
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        // Apache refuses writes past 90% disk use; a CI disk full of build output must not matter.
        System.setProperty("rocketmq.broker.diskSpaceWarningLevelRatio", "0.99");
        System.setProperty("rocketmq.broker.diskSpaceCleanForciblyRatio", "0.99");
    }

    private static final Duration READY = Duration.ofSeconds(60);

    private static String bin() {
        return System.getProperty("tidemark.cli", System.getProperty("tidemark.bin"));
    }

    private static Path logs() throws IOException {
        Path logs = TidemarkProcess.targetDir().resolve("tidemark-suite-logs");
        Files.createDirectories(logs);
        return logs;
    }

    /**
     * One {@code broker.conf} both brokers start from. Apache sets what its config classes have
     * setters for and ignores the rest; Tidemark reads its keys, warns about Apache's others, and
     * takes {@code bindAddress} and {@code grpcServerPort} (the proxy's key in 5.x, unknown to
     * 4.9.7) so that it binds loopback only and no gRPC port.
     */
    private static Path brokerConf(Path dir, int port, String namesrv) throws IOException {
        Path store = dir.resolve("store");
        Path file = dir.resolve("broker.conf");
        Files.writeString(file, String.join("\n",
            "brokerClusterName = DefaultCluster",
            "brokerName = broker-mig",
            "brokerId = 0",
            "brokerRole = ASYNC_MASTER",
            "flushDiskType = ASYNC_FLUSH",
            "deleteWhen = 04",
            "fileReservedTime = 48",
            "brokerIP1 = 127.0.0.1",
            "bindAddress = 127.0.0.1",
            "listenPort = " + port,
            "grpcServerPort = 0",
            "namesrvAddr = " + namesrv,
            "autoCreateTopicEnable = true",
            "autoCreateSubscriptionGroup = true",
            "storePathRootDir = " + store,
            "storePathCommitLog = " + store.resolve("commitlog"),
            "mappedFileSizeCommitLog = " + SEGMENT,
            ""), StandardCharsets.UTF_8);
        return file;
    }

    /** An Apache broker configured as BrokerStartup configures one from {@code conf}. */
    private static BrokerController apacheBroker(Path conf) throws Exception {
        Properties properties = new Properties();
        try (Reader reader = Files.newBufferedReader(conf)) {
            properties.load(reader);
        }
        BrokerConfig broker = new BrokerConfig();
        NettyServerConfig server = new NettyServerConfig();
        NettyClientConfig client = new NettyClientConfig();
        MessageStoreConfig store = new MessageStoreConfig();
        MixAll.properties2Object(properties, broker);
        MixAll.properties2Object(properties, server);
        MixAll.properties2Object(properties, client);
        MixAll.properties2Object(properties, store);
        broker.setRocketmqHome(conf.getParent().toString());
        store.setHaListenPort(server.getListenPort() + 1);
        BrokerController controller = new BrokerController(broker, server, client, store);
        if (!controller.initialize()) {
            throw new IllegalStateException("Apache broker failed to initialize on " + conf);
        }
        controller.start();
        return controller;
    }

    /** The group's committed offsets and the queues' ends, summed over the topic's queues. */
    private record Progress(long committed, long end) {
    }

    private static Progress progress(DefaultMQAdminExt admin, String group, String topic) throws Exception {
        // (var: ConsumeStats and OffsetWrapper moved packages in 5.x; this file compiles with both)
        var stats = admin.examineConsumeStats(group, topic);
        long committed = 0;
        long end = 0;
        for (var entry : stats.getOffsetTable().entrySet()) {
            if (entry.getKey().getTopic().equals(topic)) {
                committed += Math.max(0, entry.getValue().getConsumerOffset());
                end += entry.getValue().getBrokerOffset();
            }
        }
        return new Progress(committed, end);
    }

    private static void awaitProgress(String namesrv, String group, String topic, Progress expected,
        String what) throws Exception {
        try (Clients clients = new Clients(namesrv)) {
            DefaultMQAdminExt admin = clients.admin();
            Progress[] last = new Progress[1];
            Wait.until(what, DELIVERY, () -> {
                try {
                    last[0] = progress(admin, group, topic);
                    return last[0].equals(expected);
                } catch (Exception e) {
                    return false;
                }
            }, () -> "expected " + expected + ", last read " + last[0]);
        }
    }

    private static void awaitCommitted(String namesrv, String group, String topic, long expected, String what)
        throws Exception {
        try (Clients clients = new Clients(namesrv)) {
            DefaultMQAdminExt admin = clients.admin();
            Progress[] last = new Progress[1];
            Wait.until(what, DELIVERY, () -> {
                try {
                    last[0] = progress(admin, group, topic);
                    return last[0].committed() == expected;
                } catch (Exception e) {
                    return false;
                }
            }, () -> "expected " + expected + " committed, last read " + last[0]);
        }
    }

    /**
     * Consumes {@code expected} with {@code group} and waits until the group has committed
     * {@code committed} in total; then every delivery was one of {@code expected}, each once.
     * Returns when each body arrived (epoch ms).
     */
    private static Map<String, Long> consumeExactly(String namesrv, String group, String topic,
        List<String> expected, Runnable sendWhileConsuming, long committed, long end) throws Exception {
        Received received = new Received();
        Map<String, Long> arrivals = new ConcurrentHashMap<>();
        MessageListenerConcurrently counting = received.listener(group);
        MessageListenerConcurrently timed = (messages, context) -> {
            for (MessageExt message : messages) {
                arrivals.putIfAbsent(Msgs.bodyOf(message), System.currentTimeMillis());
            }
            return counting.consumeMessage(messages, context);
        };
        try (Clients clients = new Clients(namesrv)) {
            clients.push(group, topic, "*", timed);
            sendWhileConsuming.run();
            received.awaitAll(expected, DELIVERY);
            awaitProgress(namesrv, group, topic, new Progress(committed, end),
                group + " to commit everything it consumed");
        }
        Set<String> unexpected = new HashSet<>(received.bodies());
        unexpected.removeAll(expected);
        assertTrue(unexpected.isEmpty(), group + " was handed messages it had consumed: "
            + Received.describe(unexpected));
        assertEquals(expected.size(), received.total(), group + " got a message twice: "
            + received.deliveries());
        return arrivals;
    }

    /**
     * Waits until Apache 5's timer has taken in the first {@code count} timer-queue entries, as
     * its checkpoint ({@code config/timercheck}, big-endian, flushed every second) says at byte 16.
     */
    private static void awaitTimersTakenIn(Path store, long count) throws Exception {
        Path check = store.resolve("config").resolve("timercheck");
        long[] last = {-1};
        Wait.until("Apache's timer to take in " + count + " timer messages", DELIVERY, () -> {
            try {
                byte[] bytes = Files.readAllBytes(check);
                last[0] = bytes.length >= 24 ? ByteBuffer.wrap(bytes, 16, 8).getLong() : -1;
                return last[0] >= count;
            } catch (IOException e) {
                return false;
            }
        }, () -> "last lastTimerQueueOffset read: " + last[0]);
    }

    /** A RocketMQ 5 timer message (the 4.9 client has no setter for it; the property is the same). */
    private static long sendTimer(String namesrv, String topic, String body, long inMillis) throws Exception {
        long due = System.currentTimeMillis() + inMillis;
        try (Clients clients = new Clients(namesrv)) {
            Message message = Msgs.message(topic, "m", body);
            MessageAccessor.putProperty(message, "TIMER_DELIVER_MS", Long.toString(due));
            Msgs.sendOk(clients.producer(), message);
        }
        return due;
    }

    private static Runnable sending(String namesrv, String topic, List<String> bodies) {
        return () -> {
            try (Clients clients = new Clients(namesrv)) {
                DefaultMQProducer producer = clients.producer();
                for (String body : bodies) {
                    Msgs.sendOk(producer, Msgs.message(topic, "m", body));
                }
            } catch (Exception e) {
                throw new IllegalStateException("sending " + bodies.size() + " messages", e);
            }
        };
    }

    @Test
    void aBrokerMovesFromApacheToTidemarkAndBack() throws Exception {
        Path dir = Files.createTempDirectory(TidemarkProcess.targetDir(), "migrate-");
        String namesrv = "127.0.0.1:" + TidemarkProcess.freePort();
        ChildProcess ns = new ChildProcess(List.of(bin(), "namesrv", "--listen", namesrv),
            "tidemark namesrv ready", logs().resolve("s30-namesrv.log"), READY);
        Path conf = brokerConf(dir, TidemarkProcess.freeBrokerPort(), namesrv);
        ChildProcess tidemark = new ChildProcess(List.of(bin(), "broker", "-c", conf.toString()),
            "tidemark broker ready", logs().resolve("s30-tidemark.log"), READY);
        String topic = Names.topic("s30");
        String group = Names.group("s30");
        List<String> onApache = Msgs.bodies("apache-", 100);
        List<String> onTidemark = Msgs.bodies("tidemark-", 50);
        List<String> backOnApache = Msgs.bodies("back-", 10);
        String delayed = "delayed-past-the-move";
        // Apache 5's timer keeps its own records of what it delivered: one timer message is
        // delivered before the move (Tidemark must not deliver it again), one after it (not
        // before its time, once, and not again when Apache is back).
        boolean timers = MQVersion.CURRENT_VERSION >= MQVersion.Version.V5_0_0.ordinal();
        int timer = timers ? 1 : 0;
        BrokerController apache = null;
        try {
            ns.start();
            apache = apacheBroker(conf);
            sending(namesrv, topic, onApache).run();
            List<String> first = new ArrayList<>(onApache);
            if (timers) {
                sendTimer(namesrv, topic, "timer-before-the-move", 2_000);
                first.add("timer-before-the-move");
            }
            consumeExactly(namesrv, group, topic, first, () -> { }, 100 + timer, 100 + timer);
            long lateDue = 0;
            try (Clients clients = new Clients(namesrv)) {
                Message message = Msgs.message(topic, "m", delayed);
                message.setDelayTimeLevel(3); // 10 s: it is still waiting when Apache stops
                Msgs.sendOk(clients.producer(), message);
            }
            if (timers) {
                // Apache 5.3.3 takes up to 20 s to stop here: due well after Tidemark is up.
                lateDue = sendTimer(namesrv, topic, "timer-past-the-move", 40_000);
                // One Apache has not taken in yet would be read again by Apache when it is back
                // and delivered a second time (the migration guide says so): wait until it has.
                awaitTimersTakenIn(dir.resolve("store"), 2);
            }
            apache.shutdown();
            apache = null;

            tidemark.start();
            long up = System.currentTimeMillis();
            assertTrue(!timers || up < lateDue, "Tidemark was up only " + (up - lateDue)
                + " ms after the timer message was due: it cannot tell whether it came early");
            long done = 100 + timer;
            // (the delay-level message may be stored already: it was due while Apache stopped)
            awaitCommitted(namesrv, group, topic, done, "Tidemark to show the offsets Apache's group committed");
            List<String> second = new ArrayList<>(onTidemark);
            second.add(delayed);
            if (timers) {
                second.add("timer-past-the-move");
            }
            done += onTidemark.size() + 1 + timer;
            Map<String, Long> arrivals =
                consumeExactly(namesrv, group, topic, second, sending(namesrv, topic, onTidemark), done, done);
            if (timers) {
                long arrived = arrivals.get("timer-past-the-move");
                assertTrue(arrived >= lateDue, "the timer message Apache held arrived " + (lateDue - arrived)
                    + " ms before its time");
            }
            tidemark.stop();

            apache = apacheBroker(conf);
            awaitProgress(namesrv, group, topic, new Progress(done, done),
                "Apache to show the offsets committed on Tidemark");
            done += backOnApache.size();
            consumeExactly(namesrv, group, topic, backOnApache, sending(namesrv, topic, backOnApache), done, done);
            List<String> everything = new ArrayList<>(first);
            everything.addAll(second);
            everything.addAll(backOnApache);
            consumeExactly(namesrv, Names.group("s30-new"), topic, everything, () -> { }, done, done);
            apache.shutdown();
            apache = null;

            // Tidemark again: its journal is older than what Apache committed since.
            tidemark.start();
            awaitProgress(namesrv, group, topic, new Progress(done, done),
                "Tidemark to take the offsets committed on Apache, not its older journal's");
            assertTrue(tidemark.tailText().contains("consumerOffset.json was written by another broker"),
                "Tidemark says it took Apache's progress:\n" + tidemark.tailText());
            List<String> again = Msgs.bodies("again-", 5);
            done += again.size();
            consumeExactly(namesrv, group, topic, again, sending(namesrv, topic, again), done, done);
        } finally {
            if (apache != null) {
                apache.shutdown();
            }
            tidemark.stop();
            ns.stop();
            if (!Boolean.getBoolean("tidemark.keepData")) {
                TidemarkProcess.deleteTree(dir);
            }
        }
    }
}
