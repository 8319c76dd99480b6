package io.tidemark.compat.suite.reference;

/**
 * Registers what a stand-in runs on SIGTERM. A 5.x broker can take half a minute to stop its
 * schedulers; the suites throw their data directories away anyway, so after 5 s the JVM halts.
 */
final class GracefulStop {

    private GracefulStop() {
    }

    static void onSigterm(String name, Runnable stop) {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            Thread watchdog = new Thread(() -> {
                try {
                    Thread.sleep(5_000);
                } catch (InterruptedException e) {
                    return;
                }
                Runtime.getRuntime().halt(0);
            }, name + "-halt");
            watchdog.setDaemon(true);
            watchdog.start();
            stop.run();
        }, name + "-shutdown"));
    }
}
