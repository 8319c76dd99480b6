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
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One child process of a multi-process scenario (a name server, a controller, a broker), started
 * with a fixed command line and ready once a stdout line contains {@code readyLine}; restartable
 * ({@link #start()} again after {@link #kill()} or {@link #stop()}).
 * Its output is appended to {@code log}; {@link #tailText()} gives the last lines for failure
 * messages.
 */
public final class ChildProcess implements AutoCloseable {

    private static final int TAIL_LINES = 60;

    private final List<String> command;
    private final String readyLine;
    private final Path log;
    private final Duration readyTimeout;
    private final Deque<String> tail = new ArrayDeque<>();
    private Process process;

    public ChildProcess(List<String> command, String readyLine, Path log, Duration readyTimeout) {
        this.command = List.copyOf(command);
        this.readyLine = readyLine;
        this.log = log;
        this.readyTimeout = readyTimeout;
    }

    /**
     * A command running {@code mainClass} of the suite's test classes in a new JVM, on the class
     * path the compat-suite profile writes to {@code target/suite-test.classpath} (surefire's own
     * class path is a manifest-only jar of its booter).
     */
    public static List<String> javaMain(String mainClass, List<String> args) {
        Path target = Path.of(System.getProperty("basedir", ".")).toAbsolutePath().resolve("target");
        String classPath;
        try {
            classPath = target.resolve("test-classes") + java.io.File.pathSeparator + target.resolve("classes")
                + java.io.File.pathSeparator + Files.readString(target.resolve("suite-test.classpath")).trim();
        } catch (IOException e) {
            fail("cannot read " + target.resolve("suite-test.classpath") + " (built by -Pcompat-suite): " + e);
            return List.of();
        }
        List<String> command = new java.util.ArrayList<>(List.of(
            Path.of(System.getProperty("java.home"), "bin", "java").toString(),
            "-Xms128m", "-Xmx384m", "-XX:+UseSerialGC",
            "--add-opens", "java.base/java.nio=ALL-UNNAMED",
            "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
            "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
            "-Duser.home=" + target.resolve("apache-dev-home"),
            "-cp", classPath,
            mainClass));
        command.addAll(args);
        return command;
    }

    /**
     * Starts the process and waits until it is ready. When it exits before that reporting a port
     * already in use (a restart can find its port not quite let go of yet), the same command is
     * tried again after 200, 400, 800, 1600 ms; fails after {@link TidemarkProcess#PORT_ATTEMPTS}
     * attempts, or at once on any other exit, on the ready timeout.
     */
    public void start() {
        for (int attempt = 1; ; attempt++) {
            if (startUnlessAddressInUse()) {
                return;
            }
            if (attempt >= TidemarkProcess.PORT_ATTEMPTS) {
                fail("could not listen (" + TidemarkProcess.ADDRESS_IN_USE + ") in " + attempt + " attempts: "
                    + command + "\n" + tailText());
            }
            long pause = 200L << (attempt - 1);
            appendToLog("==== a port was in use; trying again in " + pause + " ms");
            Wait.sleep(pause);
        }
    }

    /**
     * One start: true once ready; false when the process exited before that and its output said
     * {@value TidemarkProcess#ADDRESS_IN_USE} (so that a caller can pick other ports, see
     * {@link #startOnFreePort}); fails on any other exit and on the ready timeout.
     */
    public boolean startUnlessAddressInUse() {
        try {
            Files.createDirectories(log.getParent());
            appendToLog("==== " + String.join(" ", command));
            process = new ProcessBuilder(command).redirectErrorStream(true).start();
        } catch (IOException e) {
            fail("cannot start " + command + ": " + e);
        }
        CountDownLatch ready = new CountDownLatch(1);
        AtomicBoolean addressInUse = new AtomicBoolean();
        Process p = process;
        Thread drain = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    appendToLog(line);
                    synchronized (tail) {
                        tail.addLast(line);
                        while (tail.size() > TAIL_LINES) {
                            tail.removeFirst();
                        }
                    }
                    if (line.contains(TidemarkProcess.ADDRESS_IN_USE)) {
                        addressInUse.set(true);
                    }
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
        long deadline = System.nanoTime() + readyTimeout.toNanos();
        try {
            while (!ready.await(100, TimeUnit.MILLISECONDS)) {
                if (!p.isAlive()) {
                    drain.join(2000);
                    if (ready.getCount() == 0) {
                        break;
                    }
                    process = null;
                    if (addressInUse.get()) {
                        appendToLog("==== exited with code " + p.exitValue() + ": a port was in use");
                        return false;
                    }
                    fail("exited with code " + p.exitValue() + " before it was ready: " + command + "\n" + tailText());
                }
                if (System.nanoTime() > deadline) {
                    p.destroyForcibly();
                    process = null;
                    fail("not ready within " + readyTimeout.toSeconds() + " s: " + command + "\n" + tailText());
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            fail("interrupted");
        }
        return true;
    }

    /** A process started by {@link #startOnFreePort}, and the port it listens on. */
    public record Started(ChildProcess process, int port) {
    }

    /** Picks a port for {@link #startOnFreePort}. */
    @FunctionalInterface
    public interface PortSource {
        int next() throws IOException;
    }

    /** The process to start listening on {@code port}. */
    @FunctionalInterface
    public interface OnPort {
        ChildProcess at(int port) throws IOException;
    }

    /**
     * A first start on a port from {@code ports}: when the process reports its port already in
     * use (ports are only probed before the start, so another process can take one first), it is
     * tried on a fresh port; fails after {@link TidemarkProcess#PORT_ATTEMPTS} attempts.
     */
    public static Started startOnFreePort(String what, PortSource ports, OnPort launch) throws IOException {
        for (int attempt = 1; ; attempt++) {
            int port = ports.next();
            ChildProcess child = launch.at(port);
            if (child.startUnlessAddressInUse()) {
                return new Started(child, port);
            }
            if (attempt >= TidemarkProcess.PORT_ATTEMPTS) {
                fail(what + " could not listen (" + TidemarkProcess.ADDRESS_IN_USE + ") in " + attempt
                    + " attempts, the last on port " + port + "\n" + child.tailText());
            }
        }
    }

    public boolean isRunning() {
        return process != null && process.isAlive();
    }

    /**
     * SIGKILL, then up to 20 s for the process to exit; fails if it has not (the process stays
     * in place: {@link #isRunning()} stays true and {@link #close()} tries once more).
     */
    public void kill() {
        if (process != null) {
            process.destroyForcibly();
            if (!waitExit()) {
                fail("pid " + process.pid() + " did not exit within 20 s of SIGKILL: " + command + "\n" + tailText());
            }
            process = null;
        }
    }

    /** SIGTERM, then SIGKILL after 20 s. */
    public void stop() {
        if (process != null) {
            process.destroy();
            if (!waitExit()) {
                process.destroyForcibly();
                if (!waitExit()) {
                    System.err.println("pid " + process.pid() + " did not exit within 20 s of SIGKILL: " + command);
                }
            }
            process = null;
        }
    }

    public String tailText() {
        synchronized (tail) {
            return "---- last lines of " + log + " ----\n" + String.join("\n", tail) + "\n----";
        }
    }

    @Override
    public void close() {
        stop();
    }

    private void appendToLog(String line) {
        try {
            Files.writeString(log, line + "\n", StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException ignored) {
            // logging must never fail a test
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
