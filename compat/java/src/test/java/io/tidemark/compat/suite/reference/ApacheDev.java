package io.tidemark.compat.suite.reference;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;

/**
 * Stand-in for {@code tidemark dev} that runs Apache RocketMQ 4.9.7's own name server and broker
 * in one JVM, with the same command line and ready line. Pointing the suite at it (through
 * {@code scripts/apache-dev}) checks the tests themselves against the reference implementation.
 * Not a test; the suite never starts it unless told to.
 *
 * <p>Usage: {@code dev --data-dir <dir> --namesrv-port <p1> --broker-port <p2> [--sync-flush] [--message-delay-level <levels>]
 * [--acl-file <plain_acl.yml> [--acl-access-key <key> --acl-secret-key <secret>]] [--tls-mode <mode>]}.
 * {@code --message-delay-level} (e.g. {@code "1s 2s 3s"}) goes to
 * {@link MessageStoreConfig#setMessageDelayLevel}, as {@code messageDelayLevel} in a broker.conf would.
 * {@code --acl-file} turns on the broker's 4.x ACL ({@code aclEnable=true}) with that file: Apache
 * only reads {@code <rocketmq.home.dir>/conf/plain_acl.yml}, so the file is copied there (the data
 * directory is the home) and copied again whenever it changes, which Apache's own watcher then
 * picks up within 5 s, as it would an edit of its file. Apache's name server has no ACL.
 * {@code --acl-access-key} / {@code --acl-secret-key} (the account Tidemark's broker signs its own
 * requests with) are accepted and ignored: Apache 4.9's broker signs nothing and its name server
 * checks nothing.
 * The broker runs with {@code enablePropertyFilter=true}, so it serves SQL92 subscriptions.
 * SIGTERM shuts both down gracefully (JVM shutdown hook); SIGKILL does not.
 */
public final class ApacheDev {

    private static final Set<String> KNOWN =
        Set.of("--data-dir", "--namesrv-port", "--broker-port", "--grpc-port", "--message-delay-level",
            "--transaction-check-interval-ms", "--transaction-timeout-ms", "--acl-file",
            "--acl-access-key", "--acl-secret-key", "--tls-mode");

    private ApacheDev() {
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
        // BrokerStartup normally does this; without it every request carries version 0 and the
        // name server takes REGISTER_BROKER for a pre-3.0.11 broker (and drops its topics)
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        // Apache's store refuses every write once its disk passes 90% (and deletes files at 85%);
        // a CI machine's disk filled by build output must not turn into refused sends here.
        System.setProperty("rocketmq.broker.diskSpaceWarningLevelRatio", "0.99");
        System.setProperty("rocketmq.broker.diskSpaceCleanForciblyRatio", "0.99");

        // TlsSystemConfig reads its system properties once, when the first server or client of
        // this JVM is built: set them before that. Apache's default mode is permissive too; with
        // no certificate files it serves a self-signed one (tls.test.mode.enable).
        String tlsMode = opts.getOrDefault("--tls-mode", "permissive");
        System.setProperty("tls.server.mode", tlsMode);
        boolean enforcing = tlsMode.equals("enforcing");

        NamesrvConfig nsConfig = new NamesrvConfig();
        nsConfig.setRocketmqHome(root.getPath());
        nsConfig.setKvConfigPath(new File(root, "namesrv/kvConfig.json").getPath());
        nsConfig.setConfigStorePath(new File(root, "namesrv/namesrv.properties").getPath());
        NettyServerConfig nsNetty = new NettyServerConfig();
        nsNetty.setListenPort(namesrvPort);
        NamesrvController namesrv = new NamesrvController(nsConfig, nsNetty);
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
        // SQL92 subscriptions (scenario 21) are off by default in Apache 4.9: CHECK_CLIENT_CONFIG and
        // pulls answer SYSTEM_ERROR "does not support ... SQL92", so a consumer's start() fails
        brokerConfig.setEnablePropertyFilter(true);
        String checkInterval = opts.get("--transaction-check-interval-ms");
        if (checkInterval != null) {
            brokerConfig.setTransactionCheckInterval(Long.parseLong(checkInterval));
        }
        String txTimeout = opts.get("--transaction-timeout-ms");
        if (txTimeout != null) {
            brokerConfig.setTransactionTimeOut(Long.parseLong(txTimeout));
        }
        String aclFile = opts.get("--acl-file");
        if (aclFile != null) {
            // PlainPermissionManager takes its home from this property when the broker
            // initializes; it must point at the copy before the broker is constructed
            Path source = Path.of(aclFile).toAbsolutePath();
            Path copy = root.toPath().resolve("conf").resolve("plain_acl.yml");
            Files.createDirectories(copy.getParent());
            replaceWith(source, copy, Files.readAllBytes(source));
            System.setProperty(MixAll.ROCKETMQ_HOME_PROPERTY, root.getPath());
            brokerConfig.setAclEnable(true);
            followAclFile(source, copy);
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
        // No gRPC here (Apache serves it from its proxy): --grpc-port is accepted and ignored.
        String delayLevels = opts.remove("--message-delay-level");
        if (delayLevels != null) {
            store.setMessageDelayLevel(delayLevels);
        }
        // As BrokerStartup does: an enforcing name server only takes a registration over TLS.
        NettyClientConfig brokerClient = new NettyClientConfig();
        brokerClient.setUseTLS(enforcing);
        BrokerController broker = new BrokerController(brokerConfig, brokerNetty, brokerClient, store);
        if (!broker.initialize()) {
            throw new IllegalStateException("broker failed to initialize");
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            broker.shutdown();
            namesrv.shutdown();
        }, "apache-dev-shutdown"));
        // start() registers with the name server synchronously, so routes exist once it returns
        broker.start();
        System.out.println("tidemark dev ready (Apache RocketMQ 4.9.7 stand-in) namesrv=127.0.0.1:" + namesrvPort
            + " broker=127.0.0.1:" + brokerPort);
        System.out.flush();
    }

    /**
     * Keeps {@code copy} equal to {@code source} for the life of the JVM: a test edits the file it
     * passed as {@code --acl-file}, as it would with tidemark, which reads that file itself.
     */
    private static void followAclFile(Path source, Path copy) throws IOException {
        byte[][] last = {Files.readAllBytes(source)};
        Thread t = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(200);
                    byte[] now = Files.readAllBytes(source);
                    if (!Arrays.equals(now, last[0])) {
                        replaceWith(source, copy, now);
                        last[0] = now;
                    }
                } catch (InterruptedException e) {
                    return;
                } catch (IOException e) {
                    // mid-replace or deleted; the next round tries again
                }
            }
        }, "apache-dev-acl-file");
        t.setDaemon(true);
        t.start();
    }

    /** Whole-file replace, so Apache's watcher never reads a half-written copy. */
    private static void replaceWith(Path source, Path copy, byte[] content) throws IOException {
        Path tmp = copy.resolveSibling(copy.getFileName() + ".tmp");
        Files.write(tmp, content);
        Files.move(tmp, copy, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        System.out.println("apache-dev: ACL file " + source + " -> " + copy + " (" + content.length + " bytes)");
        System.out.flush();
    }

    private static void usage() {
        System.err.println("usage: dev --data-dir <dir> --namesrv-port <p1> --broker-port <p2> [--sync-flush]"
            + " [--message-delay-level \"1s 5s 10s ...\"] [--transaction-check-interval-ms N]"
            + " [--transaction-timeout-ms N] [--acl-file <plain_acl.yml>] [--tls-mode disabled|permissive|enforcing]");
        System.exit(2);
    }
}
