package io.tidemark.compat.suite;

import java.util.Map;

import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.constant.PermName;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;

/**
 * Topics and groups made explicitly through the remoting admin calls of a 5.x producer's client:
 * Apache's proxy creates neither for gRPC clients, so the suite creates both before any gRPC
 * client uses them, against Tidemark and the reference alike.
 */
final class Resources {

    private Resources() {
    }

    /** The remoting API of {@code remoting}'s client instance (admin calls go through it). */
    static MQClientAPIImpl api(DefaultMQProducer remoting) {
        return remoting.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
    }

    /** A topic of {@code queues} queues whose {@code message.type} is NORMAL, FIFO, DELAY, MIXED or TRANSACTION. */
    static void createTopic(DefaultMQProducer remoting, String broker, String topic, String messageType, int queues)
        throws Exception {
        TopicConfig config = new TopicConfig(topic, queues, queues, PermName.PERM_READ | PermName.PERM_WRITE);
        config.setAttributes(Map.of("+message.type", messageType));
        api(remoting).createTopic(broker, TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC, config, 5000);
    }

    /** A consumer group; {@code orderly} makes its gRPC consumers FIFO ones. */
    static void createGroup(DefaultMQProducer remoting, String broker, String group, int retryMaxTimes,
        boolean orderly) throws Exception {
        SubscriptionGroupConfig config = new SubscriptionGroupConfig();
        config.setGroupName(group);
        config.setRetryMaxTimes(retryMaxTimes);
        config.setConsumeMessageOrderly(orderly);
        api(remoting).createSubscriptionGroup(broker, config, 5000);
    }
}
