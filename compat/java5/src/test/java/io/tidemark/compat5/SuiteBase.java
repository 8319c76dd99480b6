package io.tidemark.compat5;

import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/**
 * One fresh Tidemark (empty data directory) per test class; clients are closed after every
 * test method. Mirrors compat/java's {@code io.tidemark.compat.suite.SuiteBase}.
 */
@Tag("tidemark")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
abstract class SuiteBase {

    protected static TidemarkProcess tidemark;
    protected Clients clients;

    @BeforeAll
    static void startTidemark(TestInfo info) {
        tidemark = TidemarkProcess.start(info.getTestClass().map(Class::getSimpleName).orElse("suite"));
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

    /** Failure-message suffix: what the server printed last. */
    protected static String serverLog() {
        return "\n" + tidemark.tailText();
    }
}
