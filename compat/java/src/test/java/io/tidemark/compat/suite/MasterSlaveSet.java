package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A name server, a master and a slave of one broker name, each its own {@code tidemark} process
 * ({@code tidemark namesrv}, {@code tidemark broker -c FILE}); the binary is the system property
 * {@code tidemark.cli}, else {@code tidemark.bin}. Output goes to
 * {@code target/tidemark-suite-logs/<name>-<role>.log}.
 */
final class MasterSlaveSet implements AutoCloseable {

    /** One child process, restartable with the same command line. */
    static final class Proc {
        private final List<String> command;
        private final String readyLine;
        private final Path log;
        private Process process;

        Proc(List<String> command, String readyLine, Path log) {
            this.command = command;
            this.readyLine = readyLine;
            this.log = log;
        }

        void start() {
            try {
                Files.writeString(log, "==== " + String.join(" ", command) + "\n", StandardCharsets.UTF_8,
                    StandardOpenOption.CREATE, StandardOpenOption.APPEND);
                process = new ProcessBuilder(command)
                    .redirectErrorStream(true)
                    .start();
            } catch (IOException e) {
                fail("cannot start " + command + ": " + e);
            }
            CountDownLatch ready = new CountDownLatch(1);
            Process p = process;
            Thread drain = new Thread(() -> {
                try (BufferedReader r = new BufferedReader(
                    new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = r.readLine()) != null) {
                        Files.writeString(log, line + "\n", StandardCharsets.UTF_8, StandardOpenOption.APPEND);
                        if (line.contains(readyLine)) {
                            ready.countDown();
                        }
                    }
                } catch (IOException ignored) {
                    // the process went away
                }
            }, "drain-" + log.getFileName());
            drain.setDaemon(true);
            drain.start();
            try {
                if (!ready.await(60, TimeUnit.SECONDS)) {
                    p.destroyForcibly();
                    fail("not ready within 60 s: " + command + "; see " + log);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                fail("interrupted");
            }
        }

        void kill() {
            if (process != null) {
                process.destroyForcibly();
                waitExit();
                process = null;
            }
        }

        void stop() {
            if (process != null) {
                process.destroy();
                if (!waitExit()) {
                    process.destroyForcibly();
                    waitExit();
                }
                process = null;
            }
        }

        private boolean waitExit() {
            try {
                return process.waitFor(20, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
    }

    private final Path dir;
    private final int namesrvPort;
    final Proc namesrv;
    final Proc master;
    final Proc slave;
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
        namesrvPort = TidemarkProcess.freePort();
        namesrv = new Proc(List.of(bin, "namesrv", "--listen", "127.0.0.1:" + namesrvPort),
            "tidemark namesrv ready", logs.resolve(name + "-namesrv.log"));
        masterPort = freeBrokerPort();
        slavePort = freeBrokerPort();
        master = new Proc(List.of(bin, "broker", "-c", config(0, "ASYNC_MASTER", masterPort, extraBrokerToml).toString()),
            "tidemark broker ready", logs.resolve(name + "-master.log"));
        slave = new Proc(List.of(bin, "broker", "-c", config(1, "SLAVE", slavePort, extraBrokerToml).toString()),
            "tidemark broker ready", logs.resolve(name + "-slave.log"));
        namesrv.start();
        master.start();
        slave.start();
    }

    private Path config(int id, String role, int port, String extra) throws IOException {
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

    /** A port whose VIP (port - 2) and HA (port + 1) neighbours are free too. */
    static int freeBrokerPort() throws IOException {
        for (int i = 0; i < 200; i++) {
            int port = TidemarkProcess.freePort();
            if (port > 1030 && port < 65535 && TidemarkProcess.canBind(port - 2) && TidemarkProcess.canBind(port + 1)) {
                return port;
            }
        }
        throw new IOException("no free broker port with free neighbours");
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
