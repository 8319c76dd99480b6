package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.time.LocalTime;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Deque;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * One {@code tidemark dev} child process (name server + broker) for a test class.
 *
 * <p>Command line: {@code <tidemark.bin> dev --data-dir <dir> --namesrv-port <p1> --broker-port <p2> --grpc-port <p3> [extra...]},
 * where the extra arguments (none by default; see compat/java's {@code DevArgs}) are passed on unchanged, on every start.
 * Ready when a stdout line contains {@value #READY_LINE}. stdout and stderr of every start go to
 * one log file under {@code target/tidemark-suite-logs/}; its tail is put into failure messages.
 * {@link #restart()} reuses the data directory and both ports, which is what the restart
 * scenarios are about.
 */
public final class TidemarkProcess implements AutoCloseable {

    public static final String READY_LINE = "tidemark dev ready";
    static final Duration READY_TIMEOUT = Duration.ofSeconds(30);
    static final Duration STOP_TIMEOUT = Duration.ofSeconds(20);
    private static final int TAIL_LINES = 80;

    private final Path bin;
    private final Path dataDir;
    private final Path logFile;
    private final int namesrvPort;
    private final int brokerPort;
    private final int grpcPort;
    private final List<String> extraArgs;
    private final Deque<String> tail = new ArrayDeque<>();
    private Writer log;
    private Process process;
    private final List<Thread> drainers = new ArrayList<>();
    private int starts;

    private TidemarkProcess(Path bin, Path dataDir, Path logFile, int namesrvPort, int brokerPort,
        int grpcPort, List<String> extraArgs) {
        this.bin = bin;
        this.extraArgs = List.copyOf(extraArgs);
        this.dataDir = dataDir;
        this.logFile = logFile;
        this.namesrvPort = namesrvPort;
        this.brokerPort = brokerPort;
        this.grpcPort = grpcPort;
    }

    /** Picks a data directory and free ports, then starts and waits until ready. */
    public static TidemarkProcess start(String label) {
        return start(label, List.of());
    }

    /**
     * Like {@link #start(String)}, with {@code extraArgs} appended to the {@code dev} command line
     * (e.g. {@code --message-delay-level "1s 2s 3s"}, one list element per argument); {@link #restart()}
     * passes them again.
     */
    public static TidemarkProcess start(String label, List<String> extraArgs) {
        String prop = System.getProperty("tidemark.bin");
        if (prop == null || prop.isBlank()) {
            fail("system property tidemark.bin is not set; run e.g. "
                + "`mvn -B -ntp -f compat/java test -Pcompat-suite -Dtidemark.bin=/path/to/tidemark` (or compat/java5)");
        }
        Path bin = Path.of(prop).toAbsolutePath();
        if (!Files.isRegularFile(bin) || !Files.isExecutable(bin)) {
            fail("tidemark.bin=" + prop + " is not an executable file");
        }
        String stamp = label + "-" + Long.toString(System.nanoTime(), 36);
        Path target = targetDir();
        Path dataDir = target.resolve("tidemark-suite-" + stamp);
        Path logFile = target.resolve("tidemark-suite-logs").resolve(stamp + ".log");
        int[] ports = pickPorts();
        TidemarkProcess p = new TidemarkProcess(bin, dataDir, logFile, ports[0], ports[1], ports[2], extraArgs);
        try {
            Files.createDirectories(dataDir);
            Files.createDirectories(logFile.getParent());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        p.launch();
        return p;
    }

    static Path targetDir() {
        // surefire sets basedir; fall back to the usual layout when run from an IDE
        return Path.of(System.getProperty("basedir", ".")).toAbsolutePath().resolve("target");
    }

    public String namesrvAddr() {
        return "127.0.0.1:" + namesrvPort;
    }

    public String brokerAddr() {
        return "127.0.0.1:" + brokerPort;
    }

    /** Where RocketMQ 5's gRPC clients connect. */
    public String grpcAddr() {
        return "127.0.0.1:" + grpcPort;
    }

    public Path dataDir() {
        return dataDir;
    }

    public boolean isRunning() {
        return process != null && process.isAlive();
    }

    /** Graceful stop: SIGTERM, then wait up to 20 s for the process to exit. */
    public void stop() {
        if (process == null) {
            return;
        }
        process.destroy();
        boolean exited = waitExit(STOP_TIMEOUT);
        if (!exited) {
            process.destroyForcibly();
            waitExit(Duration.ofSeconds(5));
            finishLog("did not exit within " + STOP_TIMEOUT.toSeconds() + " s of SIGTERM; killed");
            process = null;
            fail("tidemark did not exit within " + STOP_TIMEOUT.toSeconds() + " s of SIGTERM\n" + tailText());
        }
        finishLog("stopped (SIGTERM), exit code " + process.exitValue());
        process = null;
    }

    /** SIGKILL: no chance to persist anything that is not already on disk (or in the page cache). */
    public void kill() {
        if (process == null) {
            return;
        }
        process.destroyForcibly();
        waitExit(Duration.ofSeconds(10));
        finishLog("killed (SIGKILL)");
        process = null;
    }

    /** Starts again on the same data directory and ports (stop() or kill() first). */
    public void restart() {
        if (isRunning()) {
            fail("restart() while tidemark is still running; stop() or kill() it first");
        }
        launch();
    }

    @Override
    public void close() {
        try {
            if (isRunning()) {
                stop();
            }
        } catch (AssertionError e) {
            System.err.println("tidemark close: " + e.getMessage());
        } finally {
            closeLog();
            if (!Boolean.getBoolean("tidemark.keepData")) {
                deleteTree(dataDir);
            }
        }
    }

    public String tailText() {
        synchronized (tail) {
            return "---- last " + tail.size() + " lines of " + logFile + " ----\n"
                + String.join("\n", tail) + "\n---- end of tidemark log tail ----";
        }
    }

    private void launch() {
        starts++;
        List<String> cmd = new ArrayList<>(List.of(bin.toString(), "dev",
            "--data-dir", dataDir.toString(),
            "--namesrv-port", Integer.toString(namesrvPort),
            "--broker-port", Integer.toString(brokerPort),
            "--grpc-port", Integer.toString(grpcPort)));
        cmd.addAll(extraArgs);
        try {
            if (log == null) {
                log = Files.newBufferedWriter(logFile, StandardCharsets.UTF_8,
                    StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            }
            logLine("==== start #" + starts + ": " + String.join(" ",
                cmd.stream().map(a -> a.contains(" ") ? "'" + a + "'" : a).toList()));
            ProcessBuilder pb = new ProcessBuilder(cmd);
            pb.environment().putIfAbsent("RUST_BACKTRACE", "1");
            process = pb.start();
        } catch (IOException e) {
            fail("could not start " + cmd + ": " + e);
        }
        CountDownLatch ready = new CountDownLatch(1);
        drainers.clear();
        drainers.add(drain(process.getInputStream(), "", ready));
        drainers.add(drain(process.getErrorStream(), "[stderr] ", null));

        long deadline = System.nanoTime() + READY_TIMEOUT.toNanos();
        try {
            while (!ready.await(100, TimeUnit.MILLISECONDS)) {
                if (!process.isAlive()) {
                    joinDrainers();
                    int code = process.exitValue();
                    process = null;
                    fail("tidemark exited with code " + code + " before printing '" + READY_LINE + "'\n"
                        + tailText());
                }
                if (System.nanoTime() > deadline) {
                    Process p = process;
                    process = null;
                    p.destroyForcibly();
                    fail("tidemark did not print '" + READY_LINE + "' within " + READY_TIMEOUT.toSeconds()
                        + " s\n" + tailText());
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            fail("interrupted while waiting for tidemark to become ready");
        }
    }

    private Thread drain(InputStream in, String prefix, CountDownLatch ready) {
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    logLine(prefix + line);
                    if (ready != null && line.contains(READY_LINE)) {
                        ready.countDown();
                    }
                }
            } catch (IOException ignored) {
                // the process went away; nothing left to read
            }
        }, "tidemark-drain" + (prefix.isEmpty() ? "-out" : "-err"));
        t.setDaemon(true);
        t.start();
        return t;
    }

    private void logLine(String line) {
        synchronized (tail) {
            tail.addLast(line);
            while (tail.size() > TAIL_LINES) {
                tail.removeFirst();
            }
            try {
                if (log != null) {
                    log.write(LocalTime.now() + " " + line + "\n");
                    log.flush();
                }
            } catch (IOException ignored) {
                // logging must never fail a test
            }
        }
    }

    private boolean waitExit(Duration timeout) {
        try {
            boolean exited = process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS);
            if (exited) {
                joinDrainers();
            }
            return exited;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    private void joinDrainers() {
        for (Thread t : drainers) {
            try {
                t.join(2000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private void finishLog(String what) {
        logLine("==== " + what);
    }

    private void closeLog() {
        synchronized (tail) {
            try {
                if (log != null) {
                    log.close();
                }
            } catch (IOException ignored) {
                // best effort
            }
            log = null;
        }
    }

    /**
     * Name-server port p1 and broker port p2 such that p2-2 (VIP channel) and p2+1 (HA) are free
     * as well. Ports are only probed, so another process could still grab one before tidemark
     * binds it; the retries make that unlikely enough.
     */
    static int[] pickPorts() {
        for (int attempt = 0; attempt < 50; attempt++) {
            int p1 = freePort();
            int p2 = freePort();
            if (p2 - 2 <= 1024 || p2 + 1 > 65535) {
                continue;
            }
            int p3 = freePort();
            boolean distinct = p1 != p2 - 2 && p1 != p2 && p1 != p2 + 1
                && p3 != p1 && p3 != p2 - 2 && p3 != p2 && p3 != p2 + 1;
            if (distinct && canBind(p2 - 2) && canBind(p2 + 1) && canBind(p1) && canBind(p2) && canBind(p3)) {
                return new int[] {p1, p2, p3};
            }
        }
        throw new IllegalStateException("could not find free ports p1, p2-2, p2, p2+1, p3 on 127.0.0.1");
    }

    static int freePort() {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static boolean canBind(int port) {
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(false);
            s.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 1);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    static void deleteTree(Path dir) {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            System.err.println("could not delete " + dir + ": " + e);
        }
    }
}
