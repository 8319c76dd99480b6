package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Tidemark's own command line as a client of the server under test: system property
 * {@code tidemark.cli}, defaulting to {@code tidemark.bin} (so runs against Apache's servers, whose
 * {@code tidemark.bin} is the stand-in script, must name the real binary in {@code tidemark.cli}).
 */
final class TidemarkCli {

    /** A finished run: its exit code, standard output lines and standard error. */
    record Run(int exit, List<String> stdout, String stderr) {
    }

    private TidemarkCli() {
    }

    static Path binary() {
        String path = System.getProperty("tidemark.cli", System.getProperty("tidemark.bin"));
        assertNotNull(path, "-Dtidemark.cli (or -Dtidemark.bin) must name the tidemark binary");
        return Path.of(path);
    }

    /** Runs the CLI to its end (at most 90 s), whatever its exit code. */
    static Run run(String... args) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>();
        command.add(binary().toString());
        command.addAll(List.of(args));
        Path err = Files.createTempFile("tidemark-cli", ".err");
        try {
            Process process = new ProcessBuilder(command).redirectError(err.toFile()).start();
            List<String> lines = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8)
                .lines().toList();
            if (!process.waitFor(90, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                fail("tidemark CLI did not finish: " + command);
            }
            return new Run(process.exitValue(), lines, Files.readString(err));
        } finally {
            Files.deleteIfExists(err);
        }
    }
}
