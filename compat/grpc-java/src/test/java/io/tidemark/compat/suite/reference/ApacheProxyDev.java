package io.tidemark.compat.suite.reference;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.proxy.ProxyStartup;
import org.apache.rocketmq.proxy.config.ConfigurationManager;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * Stand-in for {@code tidemark dev} running Apache RocketMQ 5.3.3's own name server and its
 * proxy in local mode (the proxy builds the broker inside its own JVM, so gRPC, the broker's
 * remoting port and the name server all live in this one process), with the same command line
 * and ready line. Pointing the gRPC suite at it (through {@code scripts/apache-dev}) checks the
 * tests themselves against the reference implementation. Not a test.
 *
 * <p>Usage: {@code dev --data-dir <dir> --namesrv-port <p1> --broker-port <p2> --grpc-port <p3>
 * [--message-delay-level <levels>]}. The broker listens on p2 (HA on p2+1, its VIP channel on
 * p2-2), the proxy's gRPC server on p3; the proxy's own remoting port is any free one (the suite
 * never uses it). SIGTERM ends the JVM within about five seconds; SIGKILL at once.
 */
public final class ApacheProxyDev {

    private static final Set<String> KNOWN =
        Set.of("--data-dir", "--namesrv-port", "--broker-port", "--grpc-port", "--message-delay-level",
            "--transaction-check-interval-ms", "--transaction-timeout-ms");
    /** Leaves the suite's 30 s ready timeout a margin for the JVM's own start. */
    private static final long READY_BUDGET_MS = 25_000;

    private ApacheProxyDev() {
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        if (args.length < 1 || !args[0].equals("dev") || args.length % 2 == 0) {
            usage();
        }
        for (int i = 1; i + 1 < args.length; i += 2) {
            opts.put(args[i], args[i + 1]);
        }
        for (String k : opts.keySet()) {
            if (!KNOWN.contains(k)) {
                System.err.println("unknown option " + k);
                usage();
            }
        }
        String dataDir = opts.get("--data-dir");
        if (dataDir == null || !opts.containsKey("--namesrv-port") || !opts.containsKey("--broker-port")
            || !opts.containsKey("--grpc-port")) {
            usage();
        }
        int namesrvPort = Integer.parseInt(opts.get("--namesrv-port"));
        int brokerPort = Integer.parseInt(opts.get("--broker-port"));
        int grpcPort = Integer.parseInt(opts.get("--grpc-port"));
        String delayLevels = opts.get("--message-delay-level");
        String namesrvAddr = "127.0.0.1:" + namesrvPort;
        long deadline = System.currentTimeMillis() + READY_BUDGET_MS;

        File root = new File(dataDir).getAbsoluteFile();
        File conf = new File(root, "proxy/conf");
        File storeRoot = new File(root, "store");
        Files.createDirectories(conf.toPath());
        Files.createDirectories(storeRoot.toPath());
        // What mqnamesrv / mqbroker / mqproxy normally get from their launch scripts.
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        // Apache's store refuses every write once its disk passes 90% (and deletes files at 85%);
        // a CI machine's disk filled by build output must not turn into refused sends here.
        System.setProperty("rocketmq.broker.diskSpaceWarningLevelRatio", "0.99");
        System.setProperty("rocketmq.broker.diskSpaceCleanForciblyRatio", "0.99");
        System.setProperty("rocketmq.home.dir", root.getPath());
        System.setProperty(ConfigurationManager.RMQ_PROXY_HOME, new File(root, "proxy").getPath());

        // Installed first, so that a failing start (ProxyStartup calls System.exit) ends quickly too.
        NamesrvController[] namesrvHolder = new NamesrvController[1];
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // The proxy and the broker each install their own shutdown hook (ProxyStartup,
            // BrokerStartup), and a 5.x broker can take half a minute to stop its schedulers.
            // The suite's data directory is thrown away anyway: give them a few seconds, then go.
            Thread watchdog = new Thread(() -> {
                try {
                    Thread.sleep(4_000);
                } catch (InterruptedException e) {
                    return;
                }
                Runtime.getRuntime().halt(0);
            }, "apache-dev-halt");
            watchdog.setDaemon(true);
            watchdog.start();
            System.err.println("apache-dev: shutting down (" + java.time.LocalTime.now() + ")");
            if (namesrvHolder[0] != null) {
                namesrvHolder[0].shutdown();
            }
        }, "apache-dev-shutdown"));

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
        namesrvHolder[0] = namesrv;

        // broker.conf, read by BrokerStartup.buildBrokerController (properties onto BrokerConfig,
        // NettyServerConfig, MessageStoreConfig alike).
        Properties broker = new Properties();
        broker.setProperty("rocketmqHome", root.getPath());
        broker.setProperty("brokerClusterName", "DefaultCluster");
        broker.setProperty("brokerName", "broker-a");
        broker.setProperty("brokerId", "0");
        broker.setProperty("brokerIP1", "127.0.0.1");
        broker.setProperty("brokerIP2", "127.0.0.1");
        broker.setProperty("listenPort", Integer.toString(brokerPort));
        broker.setProperty("haListenPort", Integer.toString(brokerPort + 1));
        broker.setProperty("namesrvAddr", namesrvAddr);
        broker.setProperty("storePathRootDir", storeRoot.getPath());
        broker.setProperty("storePathCommitLog", new File(storeRoot, "commitlog").getPath());
        broker.setProperty("mappedFileSizeCommitLog", Integer.toString(64 * 1024 * 1024));
        broker.setProperty("autoCreateTopicEnable", "true");
        broker.setProperty("autoCreateSubscriptionGroup", "true");
        broker.setProperty("timerWheelEnable", "true");
        // Off by default in Apache (5.3.2+); `tidemark dev` takes recalls, so the reference does.
        broker.setProperty("recallMessageEnable", "true");
        if (opts.containsKey("--transaction-check-interval-ms")) {
            broker.setProperty("transactionCheckInterval", opts.get("--transaction-check-interval-ms"));
        }
        if (opts.containsKey("--transaction-timeout-ms")) {
            broker.setProperty("transactionTimeOut", opts.get("--transaction-timeout-ms"));
        }
        // Off by default in Apache (UPDATE_AND_CREATE_TOPIC refuses +message.type=MIXED); the
        // suite's producer test puts normal and delayed messages on one topic, which Tidemark
        // allows, so the reference is configured to allow it too.
        broker.setProperty("enableMixedMessageType", "true");
        if (delayLevels != null) {
            broker.setProperty("messageDelayLevel", delayLevels);
        }
        File brokerConf = new File(conf, "broker.conf");
        try (Writer w = Files.newBufferedWriter(brokerConf.toPath(), StandardCharsets.UTF_8)) {
            broker.store(w, "written by ApacheProxyDev");
        }

        // rmq-proxy.json: local mode; routes handed to gRPC clients name the broker's host
        // (brokerIP1, loopback) with grpcServerPort.
        StringBuilder json = new StringBuilder("{\n");
        json.append("  \"rocketMQClusterName\": \"DefaultCluster\",\n");
        json.append("  \"proxyName\": \"apache-dev-proxy\",\n");
        json.append("  \"proxyMode\": \"local\",\n");
        json.append("  \"namesrvAddr\": \"").append(namesrvAddr).append("\",\n");
        json.append("  \"localServeAddr\": \"127.0.0.1\",\n");
        json.append("  \"grpcServerPort\": ").append(grpcPort).append(",\n");
        json.append("  \"remotingListenPort\": ").append(freePort()).append(",\n");
        json.append("  \"grpcShutdownTimeSeconds\": 1,\n");
        json.append("  \"enablePrintJstack\": false,\n");
        // The cross-language checks (compat/grpc-rust) hold messages for 2 s and poll for 3 s,
        // well under the proxy's defaults (10 s and 5 s minimums), which Tidemark does not have.
        json.append("  \"minInvisibleTimeMillsForRecv\": 1000,\n");
        json.append("  \"grpcClientConsumerMinLongPollingTimeoutMillis\": 1000,\n");
        if (delayLevels != null) {
            json.append("  \"messageDelayLevel\": \"").append(delayLevels).append("\",\n");
        }
        json.append("  \"brokerConfigPath\": \"").append(jsonEscape(brokerConf.getPath())).append("\"\n");
        json.append("}\n");
        File proxyConf = new File(conf, "rmq-proxy.json");
        Files.writeString(proxyConf.toPath(), json, StandardCharsets.UTF_8);

        // Builds and starts the broker, the gRPC server and the proxy's remoting server; returns
        // once they are started (System.exit(1) if anything fails).
        ProxyStartup.main(new String[] {
            "-pc", proxyConf.getPath(), "-pm", "local", "-bc", brokerConf.getPath(), "-n", namesrvAddr});

        // The broker registers with the name server on a background thread; until it has, a
        // remoting client finds no routes. `tidemark dev` is ready only once routes exist and
        // gRPC accepts connections; so is this.
        while (!accepts(grpcPort) && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
        while (namesrv.getRouteInfoManager().pickupTopicRouteData("TBW102") == null
            && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
        if (!accepts(grpcPort) || namesrv.getRouteInfoManager().pickupTopicRouteData("TBW102") == null) {
            System.err.println("apache-dev: not ready within " + READY_BUDGET_MS / 1000
                + " s (gRPC port " + grpcPort + " accepting: " + accepts(grpcPort) + ")");
            System.exit(1);
        }
        System.out.println("tidemark dev ready (Apache RocketMQ 5.3.3 proxy stand-in) namesrv=" + namesrvAddr
            + " broker=127.0.0.1:" + brokerPort + " grpc=127.0.0.1:" + grpcPort);
        System.out.flush();
    }

    private static boolean accepts(int port) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 500);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    private static int freePort() {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static String jsonEscape(String s) {
        return s.replace("\\", "\\\\").replace("\"", "\\\"");
    }

    private static void usage() {
        System.err.println("usage: dev --data-dir <dir> --namesrv-port <p1> --broker-port <p2> --grpc-port <p3>"
            + " [--message-delay-level \"1s 5s 10s ...\"]");
        System.exit(2);
    }
}
