package io.tidemark.compat.suite;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Consumer;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.MessageListener;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.header.QueryConsumerOffsetRequestHeader;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Creates 5.x remoting clients pointed at one Tidemark and shuts all of them down afterwards.
 * Mirrors compat/java's {@code io.tidemark.compat.suite.Clients} (same settings), without the
 * lite-pull client and request signing, plus a direct QUERY_CONSUMER_OFFSET for tests that want
 * one request rather than the admin client's.
 *
 * <p>Everything else is the 5.x client's default configuration (e.g. heartbeat V1, client-side
 * rebalance, no POP), which is what an application upgraded to the 5.x client would run with.
 */
final class Clients implements AutoCloseable {

    /** Client offset persistence / route polling, shortened so the tests need not wait 5 s / 30 s. */
    static final int PERSIST_INTERVAL_MS = 1000;
    static final int POLL_NAMESRV_INTERVAL_MS = 1000;

    private final String namesrvAddr;
    private final Deque<Runnable> shutdowns = new ArrayDeque<>();

    Clients(String namesrvAddr) {
        this.namesrvAddr = namesrvAddr;
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
        DefaultMQProducer p = new DefaultMQProducer(Names.unique("P"));
        common(p, "producer");
        p.setSendMsgTimeout(5000);
        p.start();
        shutdowns.push(p::shutdown);
        return p;
    }

    /** A push consumer reading from the first offset, not started: callers subscribe first. */
    DefaultMQPushConsumer pushUnstarted(String group, MessageListener listener) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        common(c, "push");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.registerMessageListener(listener);
        shutdowns.push(c::shutdown);
        return c;
    }

    /** A transactional producer of {@code group} (check-backs go to any producer of it). */
    TransactionMQProducer transactionProducer(String group, TransactionListener listener,
        Consumer<TransactionMQProducer> customize) throws Exception {
        TransactionMQProducer p = new TransactionMQProducer(group);
        common(p, "txproducer");
        p.setSendMsgTimeout(5000);
        p.setTransactionListener(listener);
        customize.accept(p);
        p.start();
        shutdowns.push(p::shutdown);
        return p;
    }

    TransactionMQProducer transactionProducer(TransactionListener listener) throws Exception {
        return transactionProducer(Names.unique("TP"), listener, p -> { });
    }

    TransactionMQProducer transactionProducer(String group, TransactionListener listener) throws Exception {
        return transactionProducer(group, listener, p -> { });
    }

    /**
     * A clustering push consumer reading from the first offset (so it also sees messages sent
     * before it started), subscribed to {@code topic} with {@code expression}.
     */
    DefaultMQPushConsumer push(String group, String topic, String expression, MessageListener listener,
        Consumer<DefaultMQPushConsumer> customize) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
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

    /** A lite pull consumer reading from the first offset, not started: callers subscribe or assign first. */
    DefaultLitePullConsumer litePull(String group) {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group);
        common(c, "lite");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        shutdowns.push(c::shutdown);
        return c;
    }

    /** A started admin client (rocketmq-tools' {@code DefaultMQAdminExt}). */
    DefaultMQAdminExt admin() throws Exception {
        DefaultMQAdminExt a = new DefaultMQAdminExt(5000);
        a.setNamesrvAddr(namesrvAddr);
        a.setInstanceName(Names.instance("admin"));
        a.setVipChannelEnabled(false);
        a.setAdminExtGroup(Names.unique("admin"));
        a.start();
        shutdowns.push(a::shutdown);
        return a;
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

    /**
     * The consumer offset the broker holds for {@code group} on {@code mq} (QUERY_CONSUMER_OFFSET,
     * code 14, sent through the producer's client instance), or -1 if it has none
     * (QUERY_NOT_FOUND).
     */
    static long brokerConsumerOffset(DefaultMQProducer producer, String brokerAddr, String group, MessageQueue mq)
        throws Exception {
        QueryConsumerOffsetRequestHeader h = new QueryConsumerOffsetRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(mq.getTopic());
        h.setQueueId(mq.getQueueId());
        h.setBrokerName(mq.getBrokerName());
        try {
            return producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl()
                .queryConsumerOffset(brokerAddr, h, 5000);
        } catch (MQBrokerException e) {
            if (e.getResponseCode() == ResponseCode.QUERY_NOT_FOUND) {
                return -1;
            }
            throw e;
        }
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
