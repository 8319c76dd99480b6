package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Pattern;

import org.apache.rocketmq.tools.command.MQAdminStartup;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 28: retention changed on a running broker with Apache's own {@code mqadmin}
 * (rocketmq-tools 4.9.8 in compat/java, 5.3.3 in compat/java5, which both compile this file),
 * as operators do during an incident: {@code updateBrokerConfig -k fileReservedTime -v 48} is
 * accepted and {@code getBrokerConfig} then shows 48. Against Tidemark also: a key that cannot
 * change while the broker runs ({@code listenPort}) is refused with RocketMQ's black-list text
 * and the reason, and the broker's value stays. The accepted half runs against Apache RocketMQ
 * as the reference (Apache's black list is smaller and takes {@code listenPort} without
 * applying it, so the refusal is not asked of it).
 */
@Tag("tidemark")
class Scenario28LiveBrokerConfigTest extends SuiteBase {

    private static final Pattern RESERVED_48 = Pattern.compile("(?m)^fileReservedTime\\s*=\\s*48\\s*$");

    /**
     * One mqadmin subcommand through {@code MQAdminStartup.main0}, the entry point the
     * {@code mqadmin} script calls, in this JVM; its stdout and stderr together.
     */
    private static String mqadmin(String... args) throws Exception {
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        PrintStream out = System.out;
        PrintStream err = System.err;
        PrintStream capture = new PrintStream(captured, true, StandardCharsets.UTF_8);
        ExecutorService runner = Executors.newSingleThreadExecutor();
        System.setOut(capture);
        System.setErr(capture);
        // A bad command line makes mqadmin call System.exit: that must fail the run, not end
        // this JVM.
        installExitGuard();
        try {
            Future<?> done = runner.submit(() -> MQAdminStartup.main0(args, null));
            done.get(60, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            capture.println("mqadmin ended abnormally: " + e.getCause());
        } catch (TimeoutException e) {
            fail("mqadmin did not finish: " + String.join(" ", args));
        } finally {
            System.setSecurityManager(null);
            System.setOut(out);
            System.setErr(err);
            runner.shutdownNow();
        }
        String text = captured.toString(StandardCharsets.UTF_8);
        System.out.println("scenario28 mqadmin " + String.join(" ", args) + "\n" + text);
        return text;
    }

    @SuppressWarnings("removal")
    private static void installExitGuard() {
        System.setSecurityManager(new SecurityManager() {
            @Override
            public void checkExit(int status) {
                throw new SecurityException("mqadmin called System.exit(" + status + ")");
            }

            @Override
            public void checkPermission(java.security.Permission permission) {
            }

            @Override
            public void checkPermission(java.security.Permission permission, Object context) {
            }
        });
    }

    @Test
    void retentionChangesLiveAndStartOnlyKeysAreRefusedWithTheReason() throws Exception {
        // mqadmin reads its logging setup from rocketmq.home.dir; errors only, to the console.
        Path home = Files.createTempDirectory("mqadmin-home");
        System.setProperty("rocketmq.home.dir", home.toString());
        Files.createDirectories(home.resolve("conf"));
        Files.writeString(home.resolve("conf/logback_tools.xml"), """
            <configuration>
              <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
                <encoder><pattern>%p %m%n</pattern></encoder>
              </appender>
              <root level="ERROR"><appender-ref ref="OUT"/></root>
            </configuration>
            """);
        String n = tidemark.namesrvAddr();
        String b = tidemark.brokerAddr();

        String before = mqadmin("getBrokerConfig", "-n", n, "-b", b);
        assertTrue(before.contains("fileReservedTime") && !RESERVED_48.matcher(before).find(),
            "fileReservedTime shown, not yet 48:\n" + before + serverLog());

        String updated = mqadmin("updateBrokerConfig", "-n", n, "-b", b, "-k", "fileReservedTime", "-v", "48");
        assertTrue(updated.contains("update broker config success"), updated + serverLog());
        String after = mqadmin("getBrokerConfig", "-n", n, "-b", b);
        assertTrue(RESERVED_48.matcher(after).find(), "fileReservedTime = 48 read back:\n" + after + serverLog());

        if (againstApacheReference()) {
            return;
        }
        String refused = mqadmin("updateBrokerConfig", "-n", n, "-b", b, "-k", "listenPort", "-v", "1");
        assertTrue(!refused.contains("update broker config success")
                && refused.contains("Can not update config in black list. listenPort cannot change while the broker runs: "
                    + "the servers bind their ports"),
            "listenPort refused with the reason:\n" + refused + serverLog());
        String port = b.substring(b.lastIndexOf(':') + 1);
        String unchanged = mqadmin("getBrokerConfig", "-n", n, "-b", b);
        assertTrue(Pattern.compile("(?m)^listenPort\\s*=\\s*" + port + "\\s*$").matcher(unchanged).find(),
            "listenPort still " + port + ":\n" + unchanged + serverLog());
    }
}
