package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Predicate;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.apache.rocketmq.tools.command.MQAdminStartup;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Scenario 24: Apache's own command-line admin, {@code mqadmin} from rocketmq-tools (4.9.8 in
 * compat/java, 5.3.3 in compat/java5, which both compile this file), run
 * through the entry point its script calls ({@code MQAdminStartup}) against the server with a live
 * producer and consumer, each subcommand's output checked. The same runs against Apache
 * RocketMQ 4.9.7 and 5.3.3 as the reference (scripts/test-reference). Left out: the subcommands that run
 * until stopped ({@code startMonitoring}, {@code clusterRT}), and those Tidemark does not answer
 * yet, listed in {@link #NOT_YET}.
 */
@Tag("tidemark")
class Scenario24MqadminTest extends SuiteBase {

    /** mqadmin subcommands Tidemark does not serve yet (issue 17), with what is missing. */
    static final Map<String, String> NOT_YET = Map.of(
        "updateAclConfig", "ACL (issue 18)");

    private Path home;

    /**
     * Runs one mqadmin subcommand through {@code MQAdminStartup.main0}, the entry point the
     * {@code mqadmin} script calls (in this JVM: a JVM per subcommand would take minutes); its
     * stdout and stderr together.
     */
    private String mqadmin(String... args) throws Exception {
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
            fail("mqadmin did not finish: " + String.join(" ", args) + "\n" + captured.toString(StandardCharsets.UTF_8));
        } finally {
            System.setSecurityManager(null);
            System.setOut(out);
            System.setErr(err);
            runner.shutdownNow();
        }
        return captured.toString(StandardCharsets.UTF_8);
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

    /** Whether these are the 5.x tools (some subcommands take other options there). */
    private static boolean toolsV5() {
        return MQVersion.getVersionDesc(MQVersion.CURRENT_VERSION).startsWith("V5");
    }

    @Test
    void everySupportedSubcommandWorks() throws Exception {
        home = Files.createTempDirectory("mqadmin-home");
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
        String topic = Names.topic("s24");
        String group = Names.group("s24");
        DefaultMQProducer producer = clients.producer();
        Msgs.warmUp(producer, topic);
        List<SendResult> sent = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            Message m = Msgs.message(topic, "TagA", "m-" + i);
            m.setKeys("key-" + i);
            sent.add(Msgs.sendOk(producer, m));
        }
        // A producer joins a broker's producer list only by heartbeat, which the client sends on
        // a 30 s timer (the first 1 s after start, possibly before it knew this broker): send one
        // now, so the producer subcommands below do not depend on that timer.
        producer.getDefaultMQProducerImpl().getmQClientFactory().sendHeartbeatToAllBrokerWithLock();
        String brokerName = sent.get(0).getMessageQueue().getBrokerName();
        String offsetId = sent.get(0).getOffsetMsgId();
        int queue = sent.get(0).getMessageQueue().getQueueId();
        Received received = new Received();
        DefaultMQPushConsumer consumer = clients.push(group, topic, "*", received.listener("c"));
        received.awaitDistinct(20, Duration.ofSeconds(30));
        String clientId = consumer.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId();
        // Consumed is not yet committed: the client commits on its next pull or its 5 s timer (first
        // run 10 s after it started). The progress subcommands below need the committed offsets,
        // so each look asks the client for that persist (the same oneway updates) at once.
        DefaultMQAdminExt progressAdmin = new DefaultMQAdminExt();
        progressAdmin.setNamesrvAddr(n);
        progressAdmin.setInstanceName(Names.instance("progress"));
        progressAdmin.start();
        try {
            Wait.until("the group's offsets to be committed", Duration.ofSeconds(30), () -> {
                consumer.getDefaultMQPushConsumerImpl().persistConsumerOffset();
                try {
                    // (var: the type moved between the 4.9 and 5.x tools.)
                    var stats = progressAdmin.examineConsumeStats(group);
                    var queues = stats.getOffsetTable().entrySet().stream()
                        .filter(e -> e.getKey().getTopic().equals(topic)).toList();
                    return !queues.isEmpty() && queues.stream()
                        .allMatch(e -> e.getValue().getConsumerOffset() >= e.getValue().getBrokerOffset());
                } catch (Exception notYet) {
                    return false;
                }
            });
        } finally {
            progressAdmin.shutdown();
        }

        // Each subcommand with what its output must show; checked in order.
        Map<String[], Predicate<String>> runs = new LinkedHashMap<>();
        runs.put(new String[] {"clusterList", "-n", n}, out -> out.contains(brokerName) && out.contains(b) && !out.contains("null"));
        runs.put(new String[] {"clusterList", "-n", n, "-m"}, out -> out.contains(brokerName) && !out.contains("null"));
        runs.put(new String[] {"topicList", "-n", n}, out -> out.contains(topic));
        runs.put(new String[] {"topicRoute", "-n", n, "-t", topic}, out -> out.contains("brokerDatas") && out.contains(brokerName));
        runs.put(new String[] {"topicStatus", "-n", n, "-t", topic}, out -> out.contains("#Max Offset") && out.contains(brokerName));
        runs.put(new String[] {"topicClusterList", "-n", n, "-t", topic}, out -> out.contains("DefaultCluster"));
        runs.put(new String[] {"brokerStatus", "-n", n, "-b", b}, out -> out.contains("putTps") && out.contains("brokerVersionDesc"));
        runs.put(new String[] {"getBrokerConfig", "-n", n, "-b", b}, out -> out.contains("brokerName") && out.contains(brokerName));
        runs.put(new String[] {"updateBrokerConfig", "-n", n, "-b", b, "-k", "shortPollingTimeMills", "-v", "1000"},
            out -> out.contains("update broker config success"));
        runs.put(new String[] {"getNamesrvConfig", "-n", n}, out -> out.contains("listenPort"));
        runs.put(new String[] {"brokerConsumeStats", "-n", n, "-b", b}, out -> out.contains("Diff Total"));
        runs.put(new String[] {"producerConnection", "-n", n, "-g", producer.getProducerGroup(), "-t", topic},
            out -> out.contains("JAVA"));
        runs.put(new String[] {"producer", "-n", n, "-b", b}, out -> out.contains(producer.getProducerGroup()));
        runs.put(new String[] {"consumerConnection", "-n", n, "-g", group}, out -> out.contains(clientId) && out.contains(topic));
        runs.put(new String[] {"consumerProgress", "-n", n, "-g", group}, out -> out.contains(topic) && out.contains("Diff Total"));
        runs.put(new String[] {"consumerProgress", "-n", n}, out -> out.contains(group));
        runs.put(new String[] {"consumerStatus", "-n", n, "-g", group, "-i", clientId},
            out -> out.contains("#Consumer Properties#") && out.contains(topic));
        runs.put(new String[] {"statsAll", "-n", n, "-t", topic}, out -> out.contains(topic) && out.contains(group));
        runs.put(new String[] {"getConsumerConfig", "-n", n, "-g", group}, out -> out.contains("groupName") && out.contains(group));
        runs.put(toolsV5()
                ? new String[] {"queryMsgById", "-n", n, "-t", topic, "-i", offsetId}
                : new String[] {"queryMsgById", "-n", n, "-i", offsetId},
            out -> out.contains("Topic:") && out.contains(topic));
        String uniqueId = sent.get(3).getMsgId();
        runs.put(new String[] {"queryMsgByKey", "-n", n, "-t", topic, "-k", "key-7"},
            out -> out.contains(sent.get(7).getMsgId()));
        runs.put(new String[] {"queryMsgByUniqueKey", "-n", n, "-t", topic, "-i", uniqueId},
            out -> out.contains("Topic:") && out.contains(topic) && out.contains("[key-3]"));
        runs.put(new String[] {"queryMsgByOffset", "-n", n, "-t", topic, "-b", brokerName, "-i", String.valueOf(queue), "-o", "0"},
            out -> out.contains("OffsetID:"));
        runs.put(new String[] {"printMsg", "-n", n, "-t", topic}, out -> out.contains("MSGID") && out.contains("m-0"));
        runs.put(new String[] {"queryCq", "-n", n, "-t", topic, "-q", String.valueOf(queue), "-i", "0", "-c", "40", "-g", group},
            out -> out.contains("queueData") || out.contains("physicOffset"));
        runs.put(new String[] {"sendMsgStatus", "-n", n, "-b", brokerName, "-c", "2"}, out -> out.contains("SEND_OK"));
        runs.put(new String[] {"sendMessage", "-n", n, "-t", topic, "-p", "from-mqadmin"}, out -> out.contains("SEND_OK"));
        runs.put(new String[] {"consumeMessage", "-n", n, "-t", topic, "-b", brokerName, "-i", String.valueOf(queue), "-o", "0", "-c", "1"},
            out -> out.contains("Consume ok"));
        runs.put(new String[] {"allocateMQ", "-n", n, "-t", topic, "-i", "a,b"}, out -> out.contains("result"));
        runs.put(new String[] {"checkMsgSendRT", "-n", n, "-t", topic, "-a", "2"}, out -> out.contains("Avg RT"));
        String newTopic = Names.topic("s24n");
        String newGroup = Names.group("s24n");
        runs.put(new String[] {"updateTopic", "-n", n, "-b", b, "-t", newTopic, "-r", "4", "-w", "4"}, out -> out.contains("success"));
        runs.put(new String[] {"updateTopicPerm", "-n", n, "-b", b, "-t", newTopic, "-p", "4"}, out -> out.contains("success"));
        runs.put(new String[] {"deleteTopic", "-n", n, "-c", "DefaultCluster", "-t", newTopic}, out -> out.contains("success"));
        runs.put(new String[] {"updateSubGroup", "-n", n, "-b", b, "-g", newGroup}, out -> out.contains("success"));
        runs.put(new String[] {"updateKvConfig", "-n", n, "-s", "S24", "-k", "k", "-v", "v"}, out -> out.contains("success"));
        runs.put(new String[] {"deleteKvConfig", "-n", n, "-s", "S24", "-k", "k"}, out -> out.contains("success"));
        runs.put(new String[] {"updateOrderConf", "-n", n, "-t", topic, "-v", brokerName + ":4", "-m", "put"}, out -> out.contains("success"));
        runs.put(new String[] {"updateOrderConf", "-n", n, "-t", topic, "-m", "get"}, out -> out.contains(brokerName + ":4"));
        runs.put(new String[] {"updateOrderConf", "-n", n, "-t", topic, "-m", "delete"}, out -> out.contains("success"));
        String listTopic = Names.topic("s24l");
        String listGroup = Names.group("s24l");
        if (toolsV5()) {
            // RocketMQ 5's batch forms: a JSON array of configs from a file.
            Path topicList = home.resolve("topic-list.json");
            Files.writeString(topicList, "[{\"topicName\":\"" + listTopic
                + "\",\"readQueueNums\":2,\"writeQueueNums\":2,\"perm\":6}]");
            Path groupList = home.resolve("group-list.json");
            Files.writeString(groupList, "[{\"groupName\":\"" + listGroup + "\",\"retryMaxTimes\":5}]");
            runs.put(new String[] {"updateTopicList", "-n", n, "-b", b, "-f", topicList.toString()},
                out -> out.contains("success"));
            runs.put(new String[] {"updateSubGroupList", "-n", n, "-b", b, "-f", groupList.toString()},
                out -> out.contains("success"));
            runs.put(new String[] {"getConsumerConfig", "-n", n, "-g", listGroup},
                out -> out.contains(listGroup) && out.contains("retryMaxTimes") && out.contains("5"));
        }
        runs.put(new String[] {"cloneGroupOffset", "-n", n, "-s", group, "-d", newGroup, "-t", topic}, out -> out.contains("success"));
        runs.put(new String[] {"deleteSubGroup", "-n", n, "-b", b, "-g", newGroup}, out -> out.contains("success"));
        runs.put(new String[] {"resetOffsetByTime", "-n", n, "-g", group, "-t", topic, "-s", "now"}, out -> out.contains(brokerName));
        runs.put(new String[] {"skipAccumulatedMessage", "-n", n, "-g", group, "-t", topic}, out -> out.contains(brokerName));
        Path exported = home.resolve("export");
        runs.put(new String[] {"exportConfigs", "-n", n, "-c", "DefaultCluster", "-f", exported.toString()},
            out -> Files.exists(exported.resolve("configs.json")));
        Path metrics = home.resolve("metrics");
        runs.put(new String[] {"exportMetrics", "-n", n, "-c", "DefaultCluster", "-f", metrics.toString()},
            out -> out.contains("success") && Files.exists(metrics.resolve("metrics.json")));
        runs.put(new String[] {"deleteExpiredCommitLog", "-n", n, "-b", b}, out -> out.contains("success"));
        // Nothing has expired and every topic is in use: both answer success and remove
        // nothing (the broker tests check what they remove); the live topic stays readable.
        runs.put(new String[] {"cleanExpiredCQ", "-n", n, "-b", b}, out -> out.contains("success"));
        runs.put(new String[] {"cleanExpiredCQ", "-n", n, "-c", "DefaultCluster"}, out -> out.contains("success"));
        runs.put(new String[] {"cleanUnusedTopic", "-n", n, "-b", b}, out -> out.contains("success"));
        runs.put(new String[] {"cleanUnusedTopic", "-n", n, "-c", "DefaultCluster"}, out -> out.contains("success"));
        runs.put(new String[] {"wipeWritePerm", "-n", n, "-b", brokerName}, out -> out.contains("OK"));
        runs.put(new String[] {"addWritePerm", "-n", n, "-b", brokerName}, out -> out.contains("OK"));

        List<String> failures = new ArrayList<>();
        for (Map.Entry<String[], Predicate<String>> run : runs.entrySet()) {
            String[] args = run.getKey();
            String out = mqadmin(args);
            boolean ok = run.getValue().test(out) && !out.contains("SubCommandException");
            System.out.println("scenario24 " + String.join(" ", args) + " -> " + (ok ? "ok" : "FAILED"));
            if (!ok) {
                failures.add(String.join(" ", args) + "\n" + out);
            }
        }
        // The stats item statsAll reads (its errors are swallowed there): the topic's puts.
        // (var: the type moved between the 4.9 and 5.x tools.)
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(n);
        admin.setInstanceName(Names.instance("admin"));
        admin.start();
        try {
            var puts = admin.viewBrokerStatsData(b, "TOPIC_PUT_NUMS", topic);
            assertTrue(puts.getStatsMinute() != null && puts.getStatsDay().getSum() >= 0, "TOPIC_PUT_NUMS of " + topic);
            if (toolsV5()) {
                // updateTopicList's topic, once the broker has registered it.
                Wait.until("the listed topic's route", Duration.ofSeconds(30), () -> {
                    try {
                        return admin.examineTopicStats(listTopic).getOffsetTable().size() == 2;
                    } catch (Exception notYet) {
                        return false;
                    }
                });
            }
            // The clean-ups left the live topic's queue alone.
            long max = admin.maxOffset(new MessageQueue(topic, brokerName, queue));
            assertTrue(max >= 1, "max offset of the live topic's queue after the clean-ups: " + max);
        } finally {
            admin.shutdown();
        }
        assertTrue(failures.isEmpty(), failures.size() + " mqadmin subcommands failed:\n"
            + String.join("\n----\n", failures) + serverLog());
    }
}
