package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** Runs {@link TlsClientRun} in its own JVM, with or without {@code -Dtls.enable=true}. */
final class TlsScenario {

    /** What the child JVM did: its exit code and everything it printed. */
    record Outcome(int exit, String output) {
        String summary() {
            return output.lines().filter(l -> l.startsWith("tls-client")).findFirst().orElse("(no summary line)");
        }
    }

    private TlsScenario() {
    }

    /** Starts the child JVM; {@link #finish} waits for it. */
    static Process start(String namesrv, String topic, int count, boolean tls) throws IOException {
        Path target = TidemarkProcess.targetDir();
        Path cpFile = target.resolve("suite-test.classpath");
        if (!Files.exists(cpFile)) {
            fail(cpFile + " is missing: the compat-suite profile writes it (process-test-classes)");
        }
        String classpath = target.resolve("test-classes") + ":" + target.resolve("classes") + ":"
            + Files.readString(cpFile).trim();
        List<String> command = new ArrayList<>(List.of(
            Path.of(System.getProperty("java.home"), "bin", "java").toString(),
            "-Xmx256m",
            "-Drocketmq.client.logRoot=" + target.resolve("tidemark-suite-logs").resolve("tls-client"),
            "-Drocketmq.client.localOffsetStoreDir=" + target.resolve("tidemark-suite-offsets")));
        if (tls) {
            // The client's whole TLS configuration: on, and (the default) not checking the
            // server's certificate, which is self-signed here.
            command.add("-Dtls.enable=true");
            command.add("-Dtls.client.authServer=false");
        }
        command.addAll(List.of("-cp", classpath, TlsClientRun.class.getName(), namesrv, topic,
            Integer.toString(count)));
        return new ProcessBuilder(command).redirectErrorStream(true).start();
    }

    static Outcome finish(Process child) throws Exception {
        StringBuilder text = new StringBuilder();
        Thread reader = new Thread(() -> {
            try {
                text.append(new String(child.getInputStream().readAllBytes(), StandardCharsets.UTF_8));
            } catch (IOException e) {
                text.append("(output unreadable: ").append(e).append(')');
            }
        }, "tls-client-output");
        reader.start();
        // The child bounds its own waits (60 s to consume); this bounds the JVM as a whole.
        if (!child.waitFor(100, TimeUnit.SECONDS)) {
            child.destroyForcibly();
            fail("the TLS client JVM did not finish within 100 s");
        }
        reader.join(5000);
        return new Outcome(child.exitValue(), text.toString());
    }

    static void assertAllCameBack(Outcome outcome, int count, String context) {
        assertEquals(0, outcome.exit(), "TLS client failed: " + outcome.summary() + "\n" + tail(outcome.output())
            + context);
        assertTrue(outcome.summary().contains("tlsEnable=true") && outcome.summary().contains("received=" + count),
            outcome.summary() + context);
    }

    private static String tail(String output) {
        List<String> lines = output.lines().toList();
        return String.join("\n", lines.subList(Math.max(0, lines.size() - 30), lines.size()));
    }
}
