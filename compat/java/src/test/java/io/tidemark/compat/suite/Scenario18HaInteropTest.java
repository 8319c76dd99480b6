package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.store.config.BrokerRole;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Scenario 18: commit-log replication between Tidemark and Apache RocketMQ 4.9.7 brokers, both
 * ways, over RocketMQ's HA protocol. An Apache slave (a {@code BrokerController} in this JVM)
 * follows a Tidemark master process; a Tidemark slave process follows an Apache master. In each
 * case the slave's commit-log file must equal the master's byte for byte. Both sides use 64 MiB
 * segments (a slave writes at the master's offsets, so the sizes must agree, as in RocketMQ).
 */
@Tag("tidemark")
@Timeout(value = 180, unit = java.util.concurrent.TimeUnit.SECONDS)
class Scenario18HaInteropTest {

    private static final int SEGMENT = 64 * 1024 * 1024;
    private static final String FIRST_SEGMENT = "00000000000000000000";

    static {
        // BrokerStartup sets this; without it requests carry version 0 (see ApacheDev).
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        // Apache's store refuses every write once its disk passes 90% (and deletes files at 85%);
        // a CI machine's disk filled by build output must not turn into refused sends here.
        System.setProperty("rocketmq.broker.diskSpaceWarningLevelRatio", "0.99");
        System.setProperty("rocketmq.broker.diskSpaceCleanForciblyRatio", "0.99");
    }

    private static String bin() {
        return System.getProperty("tidemark.cli", System.getProperty("tidemark.bin"));
    }

    private static Path logs() throws IOException {
        Path logs = Path.of(System.getProperty("basedir", ".")).toAbsolutePath().resolve("target")
            .resolve("tidemark-suite-logs");
        Files.createDirectories(logs);
        return logs;
    }

    private static Path tomlBroker(Path dir, String role, int id, int port, String namesrv) throws IOException {
        Path file = dir.resolve("tidemark-" + id + ".toml");
        Files.writeString(file, String.join("\n",
            "broker_name = \"broker-ha\"",
            "broker_id = " + id,
            "broker_role = \"" + role + "\"",
            "broker_ip1 = \"127.0.0.1\"",
            "listen_ip = \"127.0.0.1\"",
            "listen_port = " + port,
            "grpc_listen_port = 0",
            "namesrv_addr = \"" + namesrv + "\"",
            "store_path_root_dir = \"" + dir.resolve("tidemark-store").toString().replace("\\", "/") + "\"",
            "mapped_file_size_commit_log = " + SEGMENT,
            "register_name_server_period = 10000",
            "slave_sync_interval_ms = 2000",
            ""), StandardCharsets.UTF_8);
        return file;
    }

    private static BrokerController apacheBroker(Path dir, String namesrv, int port, BrokerRole role, long id)
        throws Exception {
        BrokerConfig config = new BrokerConfig();
        config.setRocketmqHome(dir.toString());
        config.setBrokerClusterName("DefaultCluster");
        config.setBrokerName("broker-ha");
        config.setBrokerId(id);
        config.setBrokerIP1("127.0.0.1");
        config.setBrokerIP2("127.0.0.1");
        config.setNamesrvAddr(namesrv);
        config.setAutoCreateTopicEnable(true);
        NettyServerConfig netty = new NettyServerConfig();
        netty.setListenPort(port);
        MessageStoreConfig store = new MessageStoreConfig();
        File root = dir.resolve("apache-store").toFile();
        store.setStorePathRootDir(root.getPath());
        store.setStorePathCommitLog(new File(root, "commitlog").getPath());
        store.setHaListenPort(port + 1);
        store.setMappedFileSizeCommitLog(SEGMENT);
        store.setBrokerRole(role);
        BrokerController broker = new BrokerController(config, netty, new NettyClientConfig(), store);
        if (!broker.initialize()) {
            throw new IllegalStateException("Apache broker failed to initialize");
        }
        return broker;
    }

    /** The first {@code length} bytes of a commit-log segment file. */
    private static byte[] head(Path segment, long length) throws IOException {
        try (RandomAccessFile file = new RandomAccessFile(segment.toFile(), "r")) {
            byte[] bytes = new byte[(int) length];
            file.readFully(bytes);
            return bytes;
        }
    }

    private static long sendSome(String namesrv, String topic) throws Exception {
        try (Clients clients = new Clients(namesrv)) {
            DefaultMQProducer producer = clients.producer();
            for (int i = 0; i < 100; i++) {
                String body = i % 25 == 0 ? "z".repeat(6000) : "ha-" + i;
                Msgs.sendOk(producer, new Message(topic, "T", "k" + i, body.getBytes(StandardCharsets.UTF_8)));
            }
        }
        return 100;
    }

    @Test
    void apacheSlaveFollowsTidemarkMaster() throws Exception {
        Path dir = Files.createTempDirectory(logs().getParent(), "ha-a-");
        int namesrvPort = TidemarkProcess.freePort();
        String namesrv = "127.0.0.1:" + namesrvPort;
        ChildProcess ns = new ChildProcess(List.of(bin(), "namesrv", "--listen", namesrv),
            "tidemark namesrv ready", logs().resolve("s18a-namesrv.log"), MasterSlaveSet.READY);
        int masterPort = TidemarkProcess.freeBrokerPort();
        ChildProcess master = new ChildProcess(
            List.of(bin(), "broker", "-c", tomlBroker(dir, "ASYNC_MASTER", 0, masterPort, namesrv).toString()),
            "tidemark broker ready", logs().resolve("s18a-master.log"), MasterSlaveSet.READY);
        BrokerController slave = null;
        try {
            ns.start();
            master.start();
            slave = apacheBroker(dir, namesrv, TidemarkProcess.freeBrokerPort(), BrokerRole.SLAVE, 1);
            slave.start();
            sendSome(namesrv, Names.topic("s18a"));
            Path masterSegment = dir.resolve("tidemark-store").resolve("commitlog").resolve(FIRST_SEGMENT);
            BrokerController javaSlave = slave;
            // Tidemark writes the log with positioned writes; its end is where the records end.
            Wait.until("the Apache slave to copy the Tidemark master's log", Duration.ofSeconds(60),
                () -> javaSlave.getMessageStore().getMaxPhyOffset() > 0
                    && javaSlave.getMessageStore().getMaxPhyOffset() == tidemarkEnd(masterSegment));
            long end = javaSlave.getMessageStore().getMaxPhyOffset();
            Path slaveSegment = dir.resolve("apache-store").resolve("commitlog").resolve(FIRST_SEGMENT);
            assertArrayEquals(head(masterSegment, end), head(slaveSegment, end),
                "the Apache slave's commit log differs from the Tidemark master's");
        } finally {
            if (slave != null) {
                slave.shutdown();
            }
            master.stop();
            ns.stop();
            if (!Boolean.getBoolean("tidemark.keepData")) {
                TidemarkProcess.deleteTree(dir);
            }
        }
    }

    /** The end of the records in a Tidemark segment: the first offset where a record would have size 0. */
    private static long tidemarkEnd(Path segment) {
        try (RandomAccessFile file = new RandomAccessFile(segment.toFile(), "r")) {
            long position = 0;
            while (position + 8 <= file.length()) {
                file.seek(position);
                int size = file.readInt();
                if (size <= 0) {
                    return position;
                }
                position += size;
            }
            return position;
        } catch (IOException e) {
            return -1;
        }
    }

    @Test
    void tidemarkSlaveFollowsApacheMaster() throws Exception {
        Path dir = Files.createTempDirectory(logs().getParent(), "ha-b-");
        int namesrvPort = TidemarkProcess.freePort();
        String namesrv = "127.0.0.1:" + namesrvPort;
        NamesrvConfig nsConfig = new NamesrvConfig();
        nsConfig.setRocketmqHome(dir.toString());
        nsConfig.setKvConfigPath(dir.resolve("namesrv/kvConfig.json").toString());
        nsConfig.setConfigStorePath(dir.resolve("namesrv/namesrv.properties").toString());
        NettyServerConfig nsNetty = new NettyServerConfig();
        nsNetty.setListenPort(namesrvPort);
        NamesrvController ns = new NamesrvController(nsConfig, nsNetty);
        assertTrue(ns.initialize(), "Apache name server initialises");
        ns.start();
        BrokerController master = apacheBroker(dir, namesrv, TidemarkProcess.freeBrokerPort(), BrokerRole.ASYNC_MASTER, 0);
        ChildProcess slave = new ChildProcess(
            List.of(bin(), "broker", "-c", tomlBroker(dir, "SLAVE", 1, TidemarkProcess.freeBrokerPort(), namesrv).toString()),
            "tidemark broker ready", logs().resolve("s18b-slave.log"), MasterSlaveSet.READY);
        try {
            master.start();
            slave.start();
            sendSome(namesrv, Names.topic("s18b"));
            long end = master.getMessageStore().getMaxPhyOffset();
            Path slaveSegment = dir.resolve("tidemark-store").resolve("commitlog").resolve(FIRST_SEGMENT);
            Wait.until("the Tidemark slave to copy the Apache master's log", Duration.ofSeconds(60),
                () -> Files.exists(slaveSegment) && tidemarkEnd(slaveSegment) == end);
            Path masterSegment = dir.resolve("apache-store").resolve("commitlog").resolve(FIRST_SEGMENT);
            assertArrayEquals(head(masterSegment, end), head(slaveSegment, end),
                "the Tidemark slave's commit log differs from the Apache master's");
        } finally {
            slave.stop();
            master.shutdown();
            ns.shutdown();
            if (!Boolean.getBoolean("tidemark.keepData")) {
                TidemarkProcess.deleteTree(dir);
            }
        }
    }
}
