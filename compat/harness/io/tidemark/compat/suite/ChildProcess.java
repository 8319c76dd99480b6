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

/**
 * One child process of a multi-process scenario (a name server, a controller, a broker), started
 * with a fixed command line and ready once a stdout line contains {@code readyLine}; restartable.
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

    public void start() {
        try {
            Files.createDirectories(log.getParent());
            Files.writeString(log, "==== " + String.join(" ", command) + "\n", StandardCharsets.UTF_8,
                StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            process = new ProcessBuilder(command).redirectErrorStream(true).start();
        } catch (IOException e) {
            fail("cannot start " + command + ": " + e);
        }
        CountDownLatch ready = new CountDownLatch(1);
        Process p = process;
        Thread drain = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    Files.writeString(log, line + "\n", StandardCharsets.UTF_8, StandardOpenOption.APPEND);
                    synchronized (tail) {
                        tail.addLast(line);
                        while (tail.size() > TAIL_LINES) {
                            tail.removeFirst();
                        }
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
        try {
            if (!ready.await(readyTimeout.toMillis(), TimeUnit.MILLISECONDS)) {
                p.destroyForcibly();
                fail("not ready within " + readyTimeout.toSeconds() + " s: " + command + "\n" + tailText());
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            fail("interrupted");
        }
    }

    public boolean isRunning() {
        return process != null && process.isAlive();
    }

    /** SIGKILL. */
    public void kill() {
        if (process != null) {
            process.destroyForcibly();
            waitExit();
            process = null;
        }
    }

    /** SIGTERM, then SIGKILL after 20 s. */
    public void stop() {
        if (process != null) {
            process.destroy();
            if (!waitExit()) {
                process.destroyForcibly();
                waitExit();
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

    private boolean waitExit() {
        try {
            return process.waitFor(20, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }
}
