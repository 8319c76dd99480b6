package io.tidemark.compat.suite.reference;

import java.io.File;
import java.util.HashMap;
import java.util.Map;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.ControllerConfig;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.controller.ControllerManager;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * Apache RocketMQ 5.3.3's name server, controller (DLedger) or a broker in controller mode, one per
 * JVM, for the controller scenario: brokers always run this way; the name server and the
 * controllers too when the suite checks itself against Apache. Not a test.
 *
 * <pre>
 * namesrv --port P
 * controller --id n1 --peers "n1-127.0.0.1:P1;n2-127.0.0.1:P2;n3-127.0.0.1:P3" --data-dir D
 * broker --data-dir D --namesrv A --controllers "A1;A2;A3" --port P --broker-name N [--priority K]
 * </pre>
 * Each prints "apache &lt;part&gt; ready" once it serves.
 */
public final class ApacheControllerParts5 {

    private ApacheControllerParts5() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            usage();
        }
        Map<String, String> opts = new HashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            opts.put(args[i], args[i + 1]);
        }
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        // Apache's store refuses every write once its disk passes 90% (and deletes files at 85%);
        // a CI machine's disk filled by build output must not turn into refused sends here.
        System.setProperty("rocketmq.broker.diskSpaceWarningLevelRatio", "0.99");
        System.setProperty("rocketmq.broker.diskSpaceCleanForciblyRatio", "0.99");
        switch (args[0]) {
            case "namesrv":
                namesrv(opts);
                break;
            case "controller":
                controller(opts);
                break;
            case "broker":
                broker(opts);
                break;
            default:
                usage();
        }
    }

    private static String need(Map<String, String> opts, String key) {
        String value = opts.get(key);
        if (value == null) {
            System.err.println("missing " + key);
            usage();
        }
        return value;
    }

    private static void namesrv(Map<String, String> opts) throws Exception {
        int port = Integer.parseInt(need(opts, "--port"));
        File root = new File(System.getProperty("java.io.tmpdir"), "apache-namesrv-" + port);
        NamesrvConfig config = new NamesrvConfig();
        config.setRocketmqHome(root.getPath());
        config.setKvConfigPath(new File(root, "kvConfig.json").getPath());
        config.setConfigStorePath(new File(root, "namesrv.properties").getPath());
        NettyServerConfig netty = new NettyServerConfig();
        netty.setListenPort(port);
        NamesrvController namesrv = new NamesrvController(config, netty, new NettyClientConfig());
        if (!namesrv.initialize()) {
            throw new IllegalStateException("name server failed to initialize");
        }
        namesrv.start();
        GracefulStop.onSigterm("namesrv", namesrv::shutdown);
        ready("namesrv");
    }

    private static void controller(Map<String, String> opts) throws Exception {
        String id = need(opts, "--id");
        String peers = need(opts, "--peers");
        File root = new File(need(opts, "--data-dir")).getAbsoluteFile();
        ControllerConfig config = new ControllerConfig();
        config.setRocketmqHome(root.getPath());
        config.setConfigStorePath(new File(root, "controller.properties").getPath());
        config.setControllerDLegerGroup("tidemark-compat");
        config.setControllerDLegerPeers(peers);
        config.setControllerDLegerSelfId(id);
        config.setControllerStorePath(new File(root, "store").getPath());
        config.setMappedFileSize(16 * 1024 * 1024);
        config.setScanNotActiveBrokerInterval(1000);
        NettyServerConfig netty = new NettyServerConfig();
        String self = null;
        for (String peer : peers.split(";")) {
            String[] idAndAddr = peer.split("-", 2);
            if (idAndAddr[0].equals(id)) {
                self = idAndAddr[1];
            }
        }
        if (self == null) {
            throw new IllegalArgumentException(id + " is not among " + peers);
        }
        netty.setListenPort(Integer.parseInt(self.substring(self.lastIndexOf(':') + 1)));
        ControllerManager controller = new ControllerManager(config, netty, new NettyClientConfig());
        if (!controller.initialize()) {
            throw new IllegalStateException("controller failed to initialize");
        }
        controller.start();
        GracefulStop.onSigterm("controller", controller::shutdown);
        ready("controller");
    }

    private static void broker(Map<String, String> opts) throws Exception {
        File root = new File(need(opts, "--data-dir")).getAbsoluteFile();
        int port = Integer.parseInt(need(opts, "--port"));
        BrokerConfig config = new BrokerConfig();
        config.setRocketmqHome(root.getPath());
        config.setBrokerClusterName("DefaultCluster");
        config.setBrokerName(need(opts, "--broker-name"));
        config.setBrokerIP1("127.0.0.1");
        config.setBrokerIP2("127.0.0.1");
        config.setNamesrvAddr(need(opts, "--namesrv"));
        config.setAutoCreateTopicEnable(true);
        config.setEnableControllerMode(true);
        config.setControllerAddr(need(opts, "--controllers"));
        // Quick reactions, so the scenario does not wait on RocketMQ's 5 to 10 s defaults.
        config.setSyncBrokerMetadataPeriod(1000);
        config.setCheckSyncStateSetPeriod(1000);
        config.setSyncControllerMetadataPeriod(2000);
        config.setControllerHeartBeatTimeoutMills(3000);
        config.setBrokerElectionPriority(Integer.parseInt(opts.getOrDefault("--priority", "1")));
        NettyServerConfig netty = new NettyServerConfig();
        netty.setListenPort(port);
        MessageStoreConfig store = new MessageStoreConfig();
        File storeRoot = new File(root, "store");
        store.setStorePathRootDir(storeRoot.getPath());
        store.setStorePathCommitLog(new File(storeRoot, "commitlog").getPath());
        store.setHaListenPort(port + 1);
        store.setMappedFileSizeCommitLog(64 * 1024 * 1024);
        // A send is acknowledged once every replica in the SyncStateSet has it.
        store.setAllAckInSyncStateSet(true);
        store.setHaMaxTimeSlaveNotCatchup(5000);
        BrokerController broker = new BrokerController(config, netty, new NettyClientConfig(), store);
        if (!broker.initialize()) {
            throw new IllegalStateException("broker failed to initialize");
        }
        GracefulStop.onSigterm("broker", broker::shutdown);
        broker.start();
        ready("broker");
    }

    private static void ready(String part) {
        System.out.println("apache " + part + " ready");
        System.out.flush();
    }

    private static void usage() {
        System.err.println("usage: namesrv --port P | controller --id ID --peers PEERS --data-dir D"
            + " | broker --data-dir D --namesrv A --controllers A1;A2 --port P --broker-name N [--priority K]");
        System.exit(2);
    }
}
