package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * A name server, a master and a slave of one broker name, each its own {@code tidemark} process
 * ({@code tidemark namesrv}, {@code tidemark broker -c FILE}); the binary is the system property
 * {@code tidemark.cli}, else {@code tidemark.bin}. Output goes to
 * {@code target/tidemark-suite-logs/<name>-<role>.log}.
 */
final class MasterSlaveSet implements AutoCloseable {

    /** How long a process may take to print its ready line. */
    static final Duration READY = Duration.ofSeconds(60);

    private final Path dir;
    private final int namesrvPort;
    final ChildProcess namesrv;
    final ChildProcess master;
    final ChildProcess slave;
    final int masterPort;
    final int slavePort;

    MasterSlaveSet(String name, String extraBrokerToml) throws IOException {
        String bin = System.getProperty("tidemark.cli", System.getProperty("tidemark.bin"));
        if (bin == null) {
            fail("-Dtidemark.cli (or -Dtidemark.bin) must name the tidemark binary");
        }
        Path target = Path.of(System.getProperty("basedir", ".")).toAbsolutePath().resolve("target");
        Path logs = target.resolve("tidemark-suite-logs");
        Files.createDirectories(logs);
        dir = Files.createTempDirectory(target, "ms-" + name + "-");
        // Each on ports below the ephemeral range (TidemarkProcess.freePort), so a restart finds
        // its port free; a port another process takes between probe and bind is replaced.
        List<ChildProcess> started = new ArrayList<>();
        try {
            ChildProcess.Started ns = ChildProcess.startOnFreePort(name + " name server", TidemarkProcess::freePort,
                port -> new ChildProcess(List.of(bin, "namesrv", "--listen", "127.0.0.1:" + port),
                    "tidemark namesrv ready", logs.resolve(name + "-namesrv.log"), READY));
            started.add(ns.process());
            namesrv = ns.process();
            namesrvPort = ns.port();
            ChildProcess.Started m = ChildProcess.startOnFreePort(name + " master", TidemarkProcess::freeBrokerPort,
                port -> new ChildProcess(List.of(bin, "broker", "-c",
                    config(0, "ASYNC_MASTER", port, ns.port(), extraBrokerToml).toString()),
                    "tidemark broker ready", logs.resolve(name + "-master.log"), READY));
            started.add(m.process());
            master = m.process();
            masterPort = m.port();
            ChildProcess.Started sl = ChildProcess.startOnFreePort(name + " slave", TidemarkProcess::freeBrokerPort,
                port -> new ChildProcess(List.of(bin, "broker", "-c",
                    config(1, "SLAVE", port, ns.port(), extraBrokerToml).toString()),
                    "tidemark broker ready", logs.resolve(name + "-slave.log"), READY));
            started.add(sl.process());
            slave = sl.process();
            slavePort = sl.port();
        } catch (IOException | RuntimeException | Error e) {
            for (int i = started.size() - 1; i >= 0; i--) {
                started.get(i).stop();
            }
            throw e;
        }
    }

    private Path config(int id, String role, int port, int namesrvPort, String extra) throws IOException {
        Path file = dir.resolve("broker-" + id + ".toml");
        Files.writeString(file, String.join("\n",
            "broker_name = \"broker-ms\"",
            "broker_id = " + id,
            "broker_role = \"" + role + "\"",
            "broker_ip1 = \"127.0.0.1\"",
            "listen_ip = \"127.0.0.1\"",
            "listen_port = " + port,
            "grpc_listen_port = 0",
            "namesrv_addr = \"127.0.0.1:" + namesrvPort + "\"",
            "store_path_root_dir = \"" + dir.resolve("store-" + id).toString().replace("\\", "/") + "\"",
            "register_name_server_period = 10000",
            extra,
            ""), StandardCharsets.UTF_8);
        return file;
    }

    String namesrvAddr() {
        return "127.0.0.1:" + namesrvPort;
    }

    @Override
    public void close() {
        slave.stop();
        master.stop();
        namesrv.stop();
        if (!Boolean.getBoolean("tidemark.keepData")) {
            TidemarkProcess.deleteTree(dir);
        }
    }

    static void sleep(Duration d) {
        try {
            Thread.sleep(d.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
