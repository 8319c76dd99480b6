package io.tidemark.compat.suite;

import java.util.concurrent.atomic.AtomicInteger;

/** Unique topic, group and instance names, so no test sees another test's (or run's) state. */
final class Names {
    private static final AtomicInteger SEQ = new AtomicInteger();
    private static final String RUN = Long.toString(System.nanoTime() % 1_000_000_000L, 36);

    private Names() {
    }

    static String topic(String scenario) {
        return unique("T_" + scenario);
    }

    static String group(String scenario) {
        return unique("G_" + scenario);
    }

    static String instance(String role) {
        return unique("i_" + role);
    }

    static String unique(String prefix) {
        return prefix + "_" + RUN + "_" + SEQ.incrementAndGet();
    }
}
