package io.tidemark.compat.suite;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Consumer;
import java.util.function.Supplier;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListener;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Creates Apache clients pointed at one Tidemark and shuts all of them down afterwards (every
 * shutdown() used here is idempotent, so tests may also shut clients down themselves). Clients
 * from {@link #signedWith} pass an {@link RPCHook} (ACL credentials) to every constructor; the
 * others pass none, exactly as the plain constructors do.
 */
final class Clients implements AutoCloseable {

    /** Client offset persistence / route polling, shortened so the tests need not wait 5 s / 30 s. */
    static final int PERSIST_INTERVAL_MS = 1000;
    static final int POLL_NAMESRV_INTERVAL_MS = 1000;

    private final String namesrvAddr;
    private final RPCHook rpcHook;
    private final Deque<Runnable> shutdowns;

    Clients(String namesrvAddr) {
        this(namesrvAddr, null, new ArrayDeque<>());
    }

    private Clients(String namesrvAddr, RPCHook rpcHook, Deque<Runnable> shutdowns) {
        this.namesrvAddr = namesrvAddr;
        this.rpcHook = rpcHook;
        this.shutdowns = shutdowns;
    }

    /**
     * Clients whose every request goes through {@code hook} (e.g. an {@code AclClientRPCHook});
     * closing this object closes them too. Each client has its own instance name and so its own
     * MQClientInstance: the 4.9 client keeps the hook of whichever client created an instance.
     */
    Clients signedWith(RPCHook hook) {
        return new Clients(namesrvAddr, hook, shutdowns);
    }

    private void common(ClientConfig c, String role) {
        c.setNamesrvAddr(namesrvAddr);
        // unique instance names: each client gets its own MQClientInstance (own connections,
        // own client id), as separate processes would
        c.setInstanceName(Names.instance(role));
        c.setVipChannelEnabled(false);
        c.setPollNameServerInterval(POLL_NAMESRV_INTERVAL_MS);
        c.setPersistConsumerOffsetInterval(PERSIST_INTERVAL_MS);
    }

    DefaultMQProducer producer() throws Exception {
        return producer(p -> { });
    }

    /** A producer with {@code customize} applied to the suite's defaults before it starts. */
    DefaultMQProducer producer(Consumer<DefaultMQProducer> customize) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(Names.unique("P"), rpcHook);
        common(p, "producer");
        p.setSendMsgTimeout(5000);
        customize.accept(p);
        p.start();
        shutdowns.push(p::shutdown);
        return p;
    }

    /**
     * A transactional producer in its own group: the broker's transaction checks for a half
     * message go back to the producer group that sent it, so the group must not be shared.
     */
    TransactionMQProducer transactionProducer(TransactionListener listener) throws Exception {
        return transactionProducer(Names.unique("TP"), listener);
    }

    /** A transactional producer of {@code group} (several may share one: check-backs go to any). */
    TransactionMQProducer transactionProducer(String group, TransactionListener listener) throws Exception {
        return transactionProducer(group, listener, p -> { });
    }

    TransactionMQProducer transactionProducer(String group, TransactionListener listener,
        Consumer<TransactionMQProducer> customize) throws Exception {
        TransactionMQProducer p = new TransactionMQProducer(group, rpcHook);
        common(p, "txproducer");
        p.setSendMsgTimeout(5000);
        p.setTransactionListener(listener);
        customize.accept(p);
        p.start();
        shutdowns.push(p::shutdown);
        return p;
    }

    /**
     * A clustering push consumer reading from the first offset (so it also sees messages sent
     * before it started), subscribed to {@code topic} with {@code expression}.
     */
    DefaultMQPushConsumer push(String group, String topic, String expression, MessageListener listener,
        Consumer<DefaultMQPushConsumer> customize) throws Exception {
        DefaultMQPushConsumer c = newPush(group);
        common(c, "push");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, expression);
        c.registerMessageListener(listener);
        customize.accept(c);
        c.start();
        shutdowns.push(c::shutdown);
        return c;
    }

    DefaultMQPushConsumer push(String group, String topic, String expression, MessageListener listener)
        throws Exception {
        return push(group, topic, expression, listener, c -> { });
    }

    /**
     * A clustering push consumer reading from the first offset, not started and without a
     * subscription, so callers can subscribe with a {@code MessageSelector} and see which of
     * subscribe() / start() fails. Registered for shutdown already: a 4.9 consumer whose start()
     * fails in the final broker check is left running.
     */
    DefaultMQPushConsumer pushUnstarted(String group, MessageListener listener) {
        DefaultMQPushConsumer c = newPush(group);
        common(c, "push");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener(listener);
        shutdowns.push(c::shutdown);
        return c;
    }

    /** 4.9 has no (group, hook) push consumer constructor; this is what (group) itself passes on. */
    private DefaultMQPushConsumer newPush(String group) {
        AllocateMessageQueueStrategy averagely = new AllocateMessageQueueAveragely();
        return new DefaultMQPushConsumer(group, rpcHook, averagely);
    }

    /** Not started: callers subscribe/assign first. */
    DefaultLitePullConsumer litePull(String group) {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group, rpcHook);
        common(c, "lite");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        shutdowns.push(c::shutdown);
        return c;
    }

    /**
     * A started {@code DefaultMQPullConsumer} (the 4.9 pull API the lite pull consumer replaced):
     * each {@code pull()} is one PULL_MESSAGE, so its failures are the broker's answer to it.
     */
    @SuppressWarnings("deprecation")
    DefaultMQPullConsumer pullConsumer(String group) throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(group, rpcHook);
        common(c, "pull");
        c.start();
        shutdowns.push(c::shutdown);
        return c;
    }

    DefaultMQAdminExt admin() throws Exception {
        DefaultMQAdminExt a = new DefaultMQAdminExt(rpcHook, 5000);
        a.setNamesrvAddr(namesrvAddr);
        a.setInstanceName(Names.instance("admin"));
        a.setVipChannelEnabled(false);
        a.setAdminExtGroup(Names.unique("admin"));
        a.start();
        shutdowns.push(a::shutdown);
        return a;
    }

    /**
     * Makes the broker create {@code %RETRY%<group>} (it does so when a consumer of the group sends
     * its heartbeat) and waits until the name server has its route, using a throwaway consumer of
     * the group that is shut down again. A consumer of the group started afterwards then finds the
     * retry topic's route in its start-up route lookup and owns the retry queue from its first
     * rebalance; started cold, it may only look up the route after that first rebalance, and the
     * 4.9 client rebalances again only every 20 s, which would end up in the retry timings.
     */
    void primeRetryTopic(DefaultMQAdminExt admin, String group, String topic) throws Exception {
        DefaultMQPushConsumer p = push(group, topic, "*",
            (MessageListenerConcurrently) (msgs, ctx) -> ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        String retry = MixAll.getRetryTopic(group);
        // The client heartbeats only to brokers it knows from some route. With neither the topic nor
        // the retry topic existing yet, the only one is TBW102's (its inner producer's), fetched by
        // the route poll, which can lose the race against the first heartbeat (1 s after start);
        // the next comes 30 s later. So heartbeat again explicitly until the route is there.
        Wait.retrying("route of " + retry + " after a consumer heartbeat", Duration.ofSeconds(20), () -> {
            p.getDefaultMQPushConsumerImpl().getmQClientFactory().sendHeartbeatToAllBrokerWithLock();
            return admin.examineTopicRouteInfo(retry);
        });
        p.shutdown();
    }

    /** Waits until {@code c} owns a queue of its group's retry topic (see {@link #primeRetryTopic}). */
    static void awaitOwnsRetryQueue(DefaultMQPushConsumer c, Supplier<String> detail) {
        String retry = MixAll.getRetryTopic(c.getConsumerGroup());
        Wait.until(c.getConsumerGroup() + " consumer to own a queue of " + retry, Duration.ofSeconds(10),
            () -> !ownedQueues(c, retry).isEmpty(), detail);
    }

    /** Queues of {@code topic} this push consumer currently owns (its rebalance result). */
    static Set<Integer> ownedQueues(DefaultMQPushConsumer c, String topic) {
        Set<Integer> ids = new TreeSet<>();
        for (MessageQueue mq : c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            if (mq.getTopic().equals(topic)) {
                ids.add(mq.getQueueId());
            }
        }
        return ids;
    }

    @Override
    public void close() {
        while (!shutdowns.isEmpty()) {
            try {
                shutdowns.pop().run();
            } catch (RuntimeException e) {
                System.err.println("client shutdown failed: " + e);
            }
        }
    }
}
