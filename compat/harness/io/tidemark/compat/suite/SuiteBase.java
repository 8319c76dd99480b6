package io.tidemark.compat.suite;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.Path;
import java.util.ArrayList;
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
 * {@link DevArgs} if it has any, followed by what the class's own {@code static List<String>
 * runtimeDevArgs()} returns if it declares one (for arguments only known at run time, such as the
 * path of a file the class writes before the server starts); clients are closed after every
 * test method. Test classes run one after another, so the static process is never shared.
 */
@Tag("tidemark")
@Timeout(value = 120, unit = TimeUnit.SECONDS)
abstract class SuiteBase {

    protected static TidemarkProcess tidemark;
    protected Clients clients;

    @BeforeAll
    static void startTidemark(TestInfo info) {
        Class<?> testClass = info.getTestClass().orElse(null);
        List<String> args = new ArrayList<>();
        DevArgs extra = testClass == null ? null : testClass.getAnnotation(DevArgs.class);
        if (extra != null) {
            args.addAll(List.of(extra.value()));
        }
        args.addAll(runtimeDevArgs(testClass));
        tidemark = TidemarkProcess.start(testClass == null ? "suite" : testClass.getSimpleName(), args);
    }

    /**
     * The test class's {@code static List<String> runtimeDevArgs()}, called once before the first
     * start. A static hook because the server is up before any of the class's own {@code @BeforeAll}
     * methods run, and annotation values must be constants.
     */
    @SuppressWarnings("unchecked")
    private static List<String> runtimeDevArgs(Class<?> testClass) {
        if (testClass == null) {
            return List.of();
        }
        Method hook;
        try {
            hook = testClass.getDeclaredMethod("runtimeDevArgs");
        } catch (NoSuchMethodException e) {
            return List.of();
        }
        if (!Modifier.isStatic(hook.getModifiers()) || !List.class.isAssignableFrom(hook.getReturnType())) {
            throw new IllegalStateException(
                testClass.getSimpleName() + ".runtimeDevArgs() must be static and return List<String>");
        }
        try {
            hook.setAccessible(true);
            return List.copyOf((List<String>) hook.invoke(null));
        } catch (InvocationTargetException e) {
            throw new IllegalStateException(testClass.getSimpleName() + ".runtimeDevArgs() failed", e.getCause());
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
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
