package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.concurrent.Callable;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

/** Bounded polling; every wait in the suite goes through here so none can hang a build. */
final class Wait {
    private Wait() {
    }

    /** Polls {@code done} every 50 ms; fails with {@code what} plus {@code detail} after {@code timeout}. */
    static void until(String what, Duration timeout, BooleanSupplier done, Supplier<String> detail) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("timed out after " + timeout.toSeconds() + " s waiting for " + what + ": " + detail.get());
            }
            sleep(50);
        }
    }

    static void until(String what, Duration timeout, BooleanSupplier done) {
        until(what, timeout, done, () -> "");
    }

    /**
     * Calls {@code call} until it returns without throwing (every 500 ms), e.g. while a restarted
     * broker has not registered its topics with the name server yet.
     */
    static <T> T retrying(String what, Duration timeout, Callable<T> call) {
        long deadline = System.nanoTime() + timeout.toNanos();
        Exception last;
        while (true) {
            try {
                return call.call();
            } catch (Exception e) {
                last = e;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError("gave up after " + timeout.toSeconds() + " s: " + what
                    + "; last error: " + last, last);
            }
            sleep(500);
        }
    }

    static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
    }
}
