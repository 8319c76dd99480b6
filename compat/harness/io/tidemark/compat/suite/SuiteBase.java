package io.tidemark.compat.suite;

import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/**
 * One fresh Tidemark (empty data directory) per test class, started with the class's
 * {@link DevArgs} if it has any; clients are closed after every
 * test method. Test classes run one after another, so the static process is never shared.
 */
@Tag("tidemark")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
abstract class SuiteBase {

    protected static TidemarkProcess tidemark;
    protected Clients clients;

    @BeforeAll
    static void startTidemark(TestInfo info) {
        DevArgs extra = info.getTestClass().map(c -> c.getAnnotation(DevArgs.class)).orElse(null);
        tidemark = TidemarkProcess.start(info.getTestClass().map(Class::getSimpleName).orElse("suite"),
            extra == null ? List.of() : List.of(extra.value()));
    }

    @AfterAll
    static void stopTidemark() {
        if (tidemark != null) {
            tidemark.close();
            tidemark = null;
        }
    }

    @BeforeEach
    void openClients() {
        clients = new Clients(tidemark.namesrvAddr());
    }

    @AfterEach
    void closeClients() {
        if (clients != null) {
            clients.close();
        }
    }

    /**
     * Whether {@code tidemark.bin} is {@code scripts/apache-dev}, the Apache RocketMQ 4.9.7 stand-in.
     * Only for the few checks where Tidemark answers differently on purpose (it refuses what it
     * does not implement instead of half-doing it); everything else must hold against both.
     */
    protected static boolean againstApacheReference() {
        String bin = System.getProperty("tidemark.bin", "");
        return !bin.isBlank() && Path.of(bin).getFileName().toString().startsWith("apache-dev");
    }

    /** Failure-message suffix: what the server printed last. */
    protected static String serverLog() {
        return "\n" + tidemark.tailText();
    }
}
