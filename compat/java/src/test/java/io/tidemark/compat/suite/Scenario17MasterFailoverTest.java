package io.tidemark.compat.suite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.header.QueryConsumerOffsetRequestHeader;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Scenario 17: a Java consumer group through a master failover, against a Tidemark master and
 * slave ({@code tidemark namesrv} + two {@code tidemark broker} processes). The group consumes
 * steadily; the master is SIGKILLed; consumption continues from the slave (the Java client
 * falls back to the slave's address for pulls and commits); the master comes back. Every
 * delivery is counted per message id: nothing may be lost, duplicates stay within what a
 * consumer can hold in flight (pullBatchSize 4 × 4 queues + the one being consumed), and no
 * committed offset on master or slave ends lower than before the kill.
 * <p>The second test keeps the master away longer than the slave's sync interval and replaces
 * the consumer while it is away: the new consumer reads its offsets from the returned master.
 * With RocketMQ's slave sync (the slave's offsets overwritten by the master's stale ones,
 * apache/rocketmq#1094) it would replay the outage; Tidemark's slave tells the master.
 */
@Tag("tidemark")
@Timeout(value = 240, unit = java.util.concurrent.TimeUnit.SECONDS)
class Scenario17MasterFailoverTest {

    private static final int QUEUES = 4;
    private static final int BEFORE = 240;
    private static final int AFTER = 40;
    private static final int IN_FLIGHT_BOUND = 4 * QUEUES + 1;

    private static Map<Integer, Long> offsets(MQClientAPIImpl api, String addr, String group, String topic) {
        Map<Integer, Long> out = new TreeMap<>();
        for (int q = 0; q < QUEUES; q++) {
            QueryConsumerOffsetRequestHeader header = new QueryConsumerOffsetRequestHeader();
            header.setConsumerGroup(group);
            header.setTopic(topic);
            header.setQueueId(q);
            try {
                out.put(q, api.queryConsumerOffset(addr, header, 3000));
            } catch (Exception e) {
                // no offset yet, or the broker is down
            }
        }
        return out;
    }

    /** Max offset of each queue of {@code topic} on one broker; a queue it cannot answer for is left out. */
    private static Map<Integer, Long> maxOffsets(MQClientAPIImpl api, String addr, String topic) {
        Map<Integer, Long> out = new TreeMap<>();
        for (int q = 0; q < QUEUES; q++) {
            try {
                out.put(q, api.getMaxOffset(addr, new MessageQueue(topic, "broker-ms", q), 3000));
            } catch (Exception e) {
                // not there yet (the slave learns the topic from the master), or the broker is down
            }
        }
        return out;
    }

    /** Whether the slave's max offset equals the master's on every queue of {@code topic}. */
    private static boolean replicated(MQClientAPIImpl api, MasterSlaveSet set, String topic) {
        Map<Integer, Long> master = maxOffsets(api, "127.0.0.1:" + set.masterPort, topic);
        return !master.isEmpty() && master.equals(maxOffsets(api, "127.0.0.1:" + set.slavePort, topic));
    }

    private void run(String name, boolean replaceConsumer, Duration outage) throws Exception {
        try (MasterSlaveSet set = new MasterSlaveSet(name,
                "slave_sync_interval_ms = 2000\nflush_consumer_offset_interval = 1000");
             Clients clients = new Clients(set.namesrvAddr())) {
            String topic = Names.topic(name);
            String group = Names.group(name);
            DefaultMQProducer producer = clients.producer();
            Set<String> sent = ConcurrentHashMap.newKeySet();
            for (int i = 0; i < BEFORE; i++) {
                sent.add(Msgs.sendOk(producer, new Message(topic, "t", ("before-" + i).getBytes())).getMsgId());
            }
            // The slave has every message before the master goes away (the loss check below is
            // about the failover, not about replication lag).
            MQClientAPIImpl replicationApi = producer.getDefaultMQProducerImpl().getmQClientFactory().getMQClientAPIImpl();
            Wait.until("the slave to have replicated every queue of " + topic, Duration.ofSeconds(30),
                () -> replicated(replicationApi, set, topic),
                () -> "master " + maxOffsets(replicationApi, "127.0.0.1:" + set.masterPort, topic)
                    + ", slave " + maxOffsets(replicationApi, "127.0.0.1:" + set.slavePort, topic));

            Map<String, Integer> deliveries = new ConcurrentHashMap<>();
            MessageListenerConcurrently listener = (msgs, ctx) -> {
                MasterSlaveSet.sleep(Duration.ofMillis(15));
                msgs.forEach(m -> deliveries.merge(m.getMsgId(), 1, Integer::sum));
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            };
            java.util.function.Consumer<DefaultMQPushConsumer> slow = c -> {
                c.setConsumeThreadMin(1);
                c.setConsumeThreadMax(1);
                c.setPullBatchSize(4);
            };
            DefaultMQPushConsumer first = clients.push(group, topic, "*", listener, slow);
            Wait.until("80 messages consumed", Duration.ofSeconds(60), () -> deliveries.size() >= 80);

            // The producer's client instance queries each broker directly (admin tools go through
            // the route, which names only the master).
            MQClientAPIImpl api = producer.getDefaultMQProducerImpl().getmQClientFactory().getMQClientAPIImpl();
            String masterAddr = "127.0.0.1:" + set.masterPort;
            String slaveAddr = "127.0.0.1:" + set.slavePort;
            Map<Integer, Long> masterBefore = offsets(api, masterAddr, group, topic);
            Map<Integer, Long> slaveBefore = offsets(api, slaveAddr, group, topic);
            int unconsumed = BEFORE - deliveries.size();
            set.master.kill();
            long killedAt = System.nanoTime();

            Wait.until("consumption to continue from the slave", Duration.ofSeconds(90),
                () -> deliveries.size() == BEFORE, () -> deliveries.size() + " of " + BEFORE);
            if (replaceConsumer) {
                first.shutdown();
            }
            long left = outage.toNanos() - (System.nanoTime() - killedAt);
            if (left > 0) {
                MasterSlaveSet.sleep(Duration.ofNanos(left));
            }
            Map<Integer, Long> slaveDuring = offsets(api, slaveAddr, group, topic);
            set.master.start();
            if (replaceConsumer) {
                Wait.until("the master to learn the slave's offsets " + slaveDuring, Duration.ofSeconds(30), () -> {
                    Map<Integer, Long> m = offsets(api, masterAddr, group, topic);
                    return slaveDuring.entrySet().stream()
                        .allMatch(e -> m.getOrDefault(e.getKey(), -1L) >= e.getValue());
                });
            }

            DefaultMQProducer after = clients.producer();
            Wait.retrying("a send to the returned master", Duration.ofSeconds(40),
                () -> after.send(new Message(topic + "_probe", "t", "probe".getBytes())));
            for (int i = 0; i < AFTER; i++) {
                sent.add(Msgs.sendOk(after, new Message(topic, "t", ("after-" + i).getBytes())).getMsgId());
            }
            if (replaceConsumer) {
                clients.push(group, topic, "*", listener, slow);
            }
            Wait.until("every message consumed", Duration.ofSeconds(90),
                () -> deliveries.keySet().containsAll(sent), () -> deliveries.size() + " of " + sent.size());
            MasterSlaveSet.sleep(Duration.ofSeconds(3));

            int duplicates = deliveries.values().stream().mapToInt(n -> n - 1).sum();
            long lost = sent.stream().filter(id -> !deliveries.containsKey(id)).count();
            System.out.println(name + ": " + sent.size() + " messages, "
                + deliveries.values().stream().mapToInt(Integer::intValue).sum() + " deliveries, "
                + duplicates + " duplicates, " + lost + " lost; not yet consumed at the kill: " + unconsumed);
            assertEquals(0, lost, "lost messages");
            assertTrue(duplicates <= IN_FLIGHT_BOUND, duplicates + " duplicates (bound " + IN_FLIGHT_BOUND + ")");

            // The consumers' last commits (and the slave's copy of them) travel on timers: read
            // both brokers until every queue is back at or past where it was before the kill
            // (bounded), then check each queue, so a queue that never got back is named.
            Map<Integer, Long> before = new HashMap<>(masterBefore);
            slaveBefore.forEach((q, o) -> before.merge(q, o, Math::max));
            Map<Integer, Map<Integer, Long>> settled = new HashMap<>();
            try {
                Wait.until("offsets on both brokers back at or past those before the kill",
                    Duration.ofSeconds(15), () -> {
                        settled.put(0, offsets(api, masterAddr, group, topic));
                        settled.put(1, offsets(api, slaveAddr, group, topic));
                        return before.entrySet().stream().allMatch(e ->
                            settled.get(0).getOrDefault(e.getKey(), -1L) >= e.getValue()
                                && settled.get(1).getOrDefault(e.getKey(), -1L) >= e.getValue());
                    });
            } catch (AssertionError notAllBack) {
                // the assertions below say which queue
            }
            Map<Integer, Long> masterAfter = settled.get(0);
            Map<Integer, Long> slaveAfter = settled.get(1);
            before.forEach((q, o) -> {
                assertTrue(masterAfter.getOrDefault(q, -1L) >= o, "master offset of queue " + q + " went back: "
                    + o + " -> " + masterAfter.get(q));
                assertTrue(slaveAfter.getOrDefault(q, -1L) >= o, "slave offset of queue " + q + " went back: "
                    + o + " -> " + slaveAfter.get(q));
            });
        }
    }

    @Test
    void shortOutageKeepsEveryonesProgress() throws Exception {
        run("s17short", false, Duration.ofSeconds(1));
    }

    @Test
    void outageLongerThanSlaveSyncDoesNotReplay() throws Exception {
        run("s17long", true, Duration.ofSeconds(8));
    }
}
