package io.tidemark.compat.suite.reference;

import java.io.File;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * Stand-in for {@code tidemark dev} running Apache RocketMQ 5.3.3's own name server and broker
 * (timer wheel and POP on, as RocketMQ 5 ships them) in one JVM, with the same command line and
 * ready line. Pointing the 5.x suite at it (through {@code scripts/apache-dev}) checks the tests
 * themselves against the reference implementation. Not a test.
 *
 * <p>Usage: {@code dev --data-dir <dir> --namesrv-port <p1> --broker-port <p2> [--sync-flush] [--message-delay-level <levels>]}.
 * SIGTERM shuts both down gracefully (JVM shutdown hook); SIGKILL does not.
 */
public final class ApacheDev5 {

    private static final Set<String> KNOWN =
        Set.of("--data-dir", "--namesrv-port", "--broker-port", "--grpc-port", "--message-delay-level",
            "--transaction-check-interval-ms", "--transaction-timeout-ms");

    private ApacheDev5() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        if (args.length < 1 || !args[0].equals("dev")) {
            usage();
        }
        // The one option without a value; the rest come in pairs.
        boolean syncFlush = Arrays.asList(args).contains("--sync-flush");
        args = Arrays.stream(args).filter(arg -> !arg.equals("--sync-flush")).toArray(String[]::new);
        for (int i = 1; i + 1 < args.length; i += 2) {
            opts.put(args[i], args[i + 1]);
        }
        String dataDir = opts.get("--data-dir");
        if (dataDir == null || !opts.containsKey("--namesrv-port") || !opts.containsKey("--broker-port")) {
            usage();
        }
        for (String k : opts.keySet()) {
            if (!KNOWN.contains(k)) {
                System.err.println("unknown option " + k);
                usage();
            }
        }
        int namesrvPort = Integer.parseInt(opts.get("--namesrv-port"));
        int brokerPort = Integer.parseInt(opts.get("--broker-port"));
        File root = new File(dataDir).getAbsoluteFile();
        // BrokerStartup normally sets the version every request carries.
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        // Apache's store refuses every write once its disk passes 90% (and deletes files at 85%);
        // a CI machine's disk filled by build output must not turn into refused sends here.
        System.setProperty("rocketmq.broker.diskSpaceWarningLevelRatio", "0.99");
        System.setProperty("rocketmq.broker.diskSpaceCleanForciblyRatio", "0.99");

        NamesrvConfig nsConfig = new NamesrvConfig();
        nsConfig.setRocketmqHome(root.getPath());
        nsConfig.setKvConfigPath(new File(root, "namesrv/kvConfig.json").getPath());
        nsConfig.setConfigStorePath(new File(root, "namesrv/namesrv.properties").getPath());
        NettyServerConfig nsNetty = new NettyServerConfig();
        nsNetty.setListenPort(namesrvPort);
        NamesrvController namesrv = new NamesrvController(nsConfig, nsNetty, new NettyClientConfig());
        if (!namesrv.initialize()) {
            throw new IllegalStateException("name server failed to initialize");
        }
        namesrv.start();

        BrokerConfig brokerConfig = new BrokerConfig();
        brokerConfig.setRocketmqHome(root.getPath());
        brokerConfig.setBrokerClusterName("DefaultCluster");
        brokerConfig.setBrokerName("broker-a");
        brokerConfig.setBrokerId(0);
        brokerConfig.setBrokerIP1("127.0.0.1");
        brokerConfig.setBrokerIP2("127.0.0.1");
        brokerConfig.setNamesrvAddr("127.0.0.1:" + namesrvPort);
        brokerConfig.setAutoCreateTopicEnable(true);
        // SQL92 subscriptions (scenario 14) are off by default in Apache
        brokerConfig.setEnablePropertyFilter(true);
        String checkInterval = opts.get("--transaction-check-interval-ms");
        if (checkInterval != null) {
            brokerConfig.setTransactionCheckInterval(Long.parseLong(checkInterval));
        }
        String txTimeout = opts.get("--transaction-timeout-ms");
        if (txTimeout != null) {
            brokerConfig.setTransactionTimeOut(Long.parseLong(txTimeout));
        }
        NettyServerConfig brokerNetty = new NettyServerConfig();
        brokerNetty.setListenPort(brokerPort);
        MessageStoreConfig store = new MessageStoreConfig();
        File storeRoot = new File(root, "store");
        store.setStorePathRootDir(storeRoot.getPath());
        store.setStorePathCommitLog(new File(storeRoot, "commitlog").getPath());
        store.setHaListenPort(brokerPort + 1);
        store.setMappedFileSizeCommitLog(64 * 1024 * 1024);
        if (syncFlush) {
            // As `tidemark dev --sync-flush`: a send is answered once its message is on disk.
            store.setFlushDiskType(FlushDiskType.SYNC_FLUSH);
        }
        store.setTimerWheelEnable(true);
        // No gRPC here (Apache serves it from its proxy): --grpc-port is accepted and ignored.
        String delayLevels = opts.remove("--message-delay-level");
        if (delayLevels != null) {
            store.setMessageDelayLevel(delayLevels);
        }
        BrokerController broker = new BrokerController(brokerConfig, brokerNetty, new NettyClientConfig(), store);
        if (!broker.initialize()) {
            throw new IllegalStateException("broker failed to initialize");
        }
        GracefulStop.onSigterm("apache-dev", () -> {
            broker.shutdown();
            namesrv.shutdown();
        });
        broker.start();
        // A 5.x broker registers with the name server on a background thread: until it has, a
        // send to a topic that does not exist yet finds no route (auto-creation rides on the
        // default topic's route). `tidemark dev` is ready only once routes exist; so is this.
        long deadline = System.currentTimeMillis() + 30_000;
        while (namesrv.getRouteInfoManager().pickupTopicRouteData("TBW102") == null
            && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
        System.out.println("tidemark dev ready (Apache RocketMQ 5.3.3 stand-in) namesrv=127.0.0.1:" + namesrvPort
            + " broker=127.0.0.1:" + brokerPort);
        System.out.flush();
    }

    private static void usage() {
        System.err.println("usage: dev --data-dir <dir> --namesrv-port <p1> --broker-port <p2> [--sync-flush]"
            + " [--message-delay-level \"1s 5s 10s ...\"] [--transaction-check-interval-ms N]"
            + " [--transaction-timeout-ms N]");
        System.exit(2);
    }
}
