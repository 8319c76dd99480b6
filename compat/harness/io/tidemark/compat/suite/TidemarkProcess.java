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
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;

/**
 * One {@code tidemark dev} child process (name server + broker) for a test class.
 *
 * <p>Command line: {@code <tidemark.bin> dev --data-dir <dir> --namesrv-port <p1> --broker-port <p2> --grpc-port <p3> [extra...]},
 * where the extra arguments (none by default; see compat/java's {@code DevArgs}) are passed on unchanged, on every start.
 * Ready when a stdout line contains {@value #READY_LINE}. stdout and stderr of every start go to
 * one log file under {@code target/tidemark-suite-logs/}; its tail is put into failure messages.
 * {@link #restart()} reuses the data directory and the ports, which is what the restart
 * scenarios are about.
 *
 * <p>Ports come from below the kernel's ephemeral range ({@link #freePort()}), so no client
 * connection's local end can take one while the server is down for a restart. Ports are only
 * probed before the launch, though, so another process may bind one first: a first start whose
 * server reports "Address already in use" is retried on fresh ports, a restart on the same ports
 * after a short pause ({@link #PORT_ATTEMPTS} attempts either way).
 */
public final class TidemarkProcess implements AutoCloseable {

    public static final String READY_LINE = "tidemark dev ready";
    static final Duration READY_TIMEOUT = Duration.ofSeconds(30);
    static final Duration STOP_TIMEOUT = Duration.ofSeconds(20);
    static final Duration KILL_TIMEOUT = Duration.ofSeconds(10);
    /** Launch attempts when the server reports a port already in use (fresh ports, or a pause on restart). */
    static final int PORT_ATTEMPTS = 5;
    /** What a server prints (Tidemark and the JVM alike) when a port it must listen on is taken. */
    static final String ADDRESS_IN_USE = "Address already in use";
    private static final int TAIL_LINES = 80;

    private final Path bin;
    private final Path dataDir;
    private final Path logFile;
    // re-picked only when a first start finds one taken; fixed from the first ready start on
    private int namesrvPort;
    private int brokerPort;
    private int grpcPort;
    private final List<String> extraArgs;
    private final Deque<String> tail = new ArrayDeque<>();
    private Writer log;
    private Process process;
    private final List<Thread> drainers = new ArrayList<>();
    private int starts;
    /** Whether the current start's output reported a port already in use. */
    private volatile boolean addressInUse;

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
        p.launchRetrying(true);
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
        if (!waitExit(KILL_TIMEOUT)) {
            // Still running: leave it in place (isRunning() stays true, restart() refuses, close()
            // tries once more) and stop here rather than go on against a live server.
            finishLog("still running " + KILL_TIMEOUT.toSeconds() + " s after SIGKILL");
            fail("tidemark (pid " + process.pid() + ") did not exit within " + KILL_TIMEOUT.toSeconds()
                + " s of SIGKILL\n" + tailText());
        }
        finishLog("killed (SIGKILL), exit code " + process.exitValue());
        process = null;
    }

    /**
     * Starts again on the same data directory and ports (stop() or kill() first). A port still
     * in use (e.g. by a process that has not quite let go of it) is waited for briefly.
     */
    public void restart() {
        if (isRunning()) {
            fail("restart() while tidemark is still running; stop() or kill() it first");
        }
        launchRetrying(false);
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

    /**
     * Launches until ready. When the server exits reporting a port in use: on a first start
     * ({@code freshPorts}) picks new ports and starts over on an emptied data directory; on a
     * restart tries the same ports again after 200, 400, 800, 1600 ms. Fails after
     * {@link #PORT_ATTEMPTS} attempts, or at once on any other failure.
     */
    private void launchRetrying(boolean freshPorts) {
        for (int attempt = 1; ; attempt++) {
            if (launch()) {
                return;
            }
            String ports = "ports " + namesrvPort + ", " + brokerPort + " (and " + (brokerPort - 2) + ", "
                + (brokerPort + 1) + "), " + grpcPort;
            if (attempt >= PORT_ATTEMPTS) {
                fail("tidemark could not listen (" + ADDRESS_IN_USE + ") in " + PORT_ATTEMPTS + " attempts"
                    + (freshPorts ? ", the last on " : " on ") + ports + "\n" + tailText());
            }
            if (freshPorts) {
                int[] fresh = pickPorts();
                namesrvPort = fresh[0];
                brokerPort = fresh[1];
                grpcPort = fresh[2];
                deleteTree(dataDir);
                try {
                    Files.createDirectories(dataDir);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
                logLine("==== a port was in use; trying again on fresh ports");
            } else {
                long pause = 200L << (attempt - 1);
                logLine("==== a port was in use (" + ports + "); trying the same ports again in " + pause + " ms");
                Wait.sleep(pause);
            }
        }
    }

    /**
     * One launch: true once ready; false when the process exited before that and its output
     * said {@value #ADDRESS_IN_USE}; fails on any other exit and on the ready timeout.
     */
    private boolean launch() {
        starts++;
        addressInUse = false;
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
                    if (addressInUse) {
                        logLine("==== exited with code " + code + ": a port was in use");
                        return false;
                    }
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
        return true;
    }

    private Thread drain(InputStream in, String prefix, CountDownLatch ready) {
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    logLine(prefix + line);
                    if (line.contains(ADDRESS_IN_USE)) {
                        addressInUse = true;
                    }
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
     * Name-server port p1, broker port p2 such that p2-2 (VIP channel) and p2+1 (HA) are free as
     * well, and gRPC port p3, all from {@link #freePort()}. Ports are only probed, so another
     * process could still grab one before tidemark binds it: {@link #start} then tries fresh ones.
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

    /** Lowest port {@link #freePort()} hands out. */
    static final int PORT_LOW = 10_000;
    private static final AtomicInteger PORT_CURSOR = new AtomicInteger();
    // JVMs run side by side (the suites, the reference's helper processes): each starts at its
    // own place in the range, and steps through it so that its own picks do not repeat.
    private static final int PORT_SEED = (int) (ProcessHandle.current().pid() * 2_654_435_761L ^ System.nanoTime());

    /**
     * A free loopback port below the kernel's ephemeral range (from
     * {@code /proc/sys/net/ipv4/ip_local_port_range}, else 32768), from {@value #PORT_LOW} up: an
     * ephemeral port could be taken by some connection's local end while its server is down for
     * a restart, which the restart then fails on. Falls back to an ephemeral port when nothing
     * below the range is free.
     */
    static int freePort() {
        int span = Math.min(ephemeralLow(), 65536) - PORT_LOW;
        // (a kernel whose ephemeral range starts that low leaves nothing worth searching)
        for (int i = 0; span >= 1_000 && i < Math.min(span, 5_000); i++) {
            int port = PORT_LOW + Math.floorMod(PORT_SEED + PORT_CURSOR.getAndAdd(7), span);
            if (canBind(port)) {
                return port;
            }
        }
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * A free port for a broker whose neighbours are free too: RocketMQ brokers also listen on
     * port - 2 (the "VIP" channel) and port + 1 (HA).
     */
    static int freeBrokerPort() {
        for (int i = 0; i < 200; i++) {
            int port = freePort();
            if (port > 1030 && port < 65534 && canBind(port - 2) && canBind(port + 1)) {
                return port;
            }
        }
        throw new IllegalStateException("no free broker port with free neighbours");
    }

    /** The first port of the kernel's ephemeral (local) port range. */
    static int ephemeralLow() {
        // (a reader, not Files.readString: JDK 17 reads a /proc file, whose size shows as 0, as
        // its first byte only)
        try (BufferedReader r = Files.newBufferedReader(Path.of("/proc/sys/net/ipv4/ip_local_port_range"))) {
            return Integer.parseInt(r.readLine().trim().split("\\s+")[0]);
        } catch (IOException | RuntimeException e) {
            return 32_768;
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
