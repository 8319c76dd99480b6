//! Messages as the application sees them: [`Message`] to send, [`MessageExt`] received.

use std::net::SocketAddr;

use bytes::Bytes;
use tidemark_protocol::body::MessageQueue;
use tidemark_protocol::message::{encode_offset_msg_id, property, MessageRecord, Properties};

/// `%RETRY%`: prefix of a group's retry topic.
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";
/// `%DLQ%`: prefix of a group's dead-letter topic.
pub const DLQ_TOPIC_PREFIX: &str = "%DLQ%";

/// The retry topic of a consumer group (`MixAll.getRetryTopic`).
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_TOPIC_PREFIX}{group}")
}

/// The dead-letter topic of a consumer group (`MixAll.getDLQTopic`).
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_TOPIC_PREFIX}{group}")
}

/// A message to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    topic: String,
    body: Bytes,
    flag: i32,
    properties: Properties,
}

impl Message {
    pub fn new(topic: impl Into<String>, body: impl Into<Bytes>) -> Self {
        Self {
            topic: topic.into(),
            body: body.into(),
            flag: 0,
            properties: Properties::new(),
        }
    }

    /// Sets the message's tag (one tag; consumers filter on it).
    pub fn with_tags(mut self, tags: impl Into<String>) -> Self {
        self.properties.insert(property::TAGS, tags);
        self
    }

    /// Sets the message's keys (space-separated on the wire, indexed by the broker).
    pub fn with_keys<I, K>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        let joined = keys
            .into_iter()
            .map(|key| key.as_ref().to_owned())
            .collect::<Vec<_>>()
            .join(property::KEY_SEPARATOR);
        self.properties.insert(property::KEYS, joined);
        self
    }

    /// Delivers the message only after delay level `level` (1-based; 0 means no delay).
    pub fn with_delay_level(mut self, level: i32) -> Self {
        if level > 0 {
            self.properties
                .insert(property::DELAY_TIME_LEVEL, level.to_string());
        } else {
            self.properties.remove(property::DELAY_TIME_LEVEL);
        }
        self
    }

    /// A timer message (RocketMQ 5): delivered at `epoch_ms` (Java `setDeliverTimeMs`). Brokers
    /// without timer support store it at once.
    pub fn with_deliver_time_ms(mut self, epoch_ms: i64) -> Self {
        self.properties
            .insert(property::TIMER_DELIVER_MS, epoch_ms.to_string());
        self
    }

    /// A timer message (RocketMQ 5): delivered `delay` after the broker receives it (Java
    /// `setDelayTimeMs`).
    pub fn with_delay(mut self, delay: std::time::Duration) -> Self {
        self.properties
            .insert(property::TIMER_DELAY_MS, delay.as_millis().to_string());
        self
    }

    /// Sets an application property.
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(name, value);
        self
    }

    /// Sets the application flag (an opaque int the broker stores).
    pub fn with_flag(mut self, flag: i32) -> Self {
        self.flag = flag;
        self
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn body(&self) -> &Bytes {
        &self.body
    }

    pub fn flag(&self) -> i32 {
        self.flag
    }

    pub fn tags(&self) -> Option<&str> {
        self.properties.tags()
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.properties.keys()
    }

    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties.get(name)
    }

    pub fn properties(&self) -> &Properties {
        &self.properties
    }

    pub(crate) fn properties_mut(&mut self) -> &mut Properties {
        &mut self.properties
    }

    /// The delay level, if one is set.
    pub fn delay_level(&self) -> Option<i32> {
        self.properties
            .get(property::DELAY_TIME_LEVEL)
            .and_then(|level| level.parse().ok())
            .filter(|level| *level > 0)
    }
}

/// A message as a consumer receives it (RocketMQ's `MessageExt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageExt {
    /// The topic the application sent to (restored from `RETRY_TOPIC` for retried messages).
    pub topic: String,
    /// The body, decompressed.
    pub body: Bytes,
    pub flag: i32,
    pub properties: Properties,
    /// The queue the message was pulled from (a `%RETRY%` queue for retried messages).
    pub queue: MessageQueue,
    pub queue_offset: i64,
    /// Physical offset in the broker's commit log (what CONSUMER_SEND_MSG_BACK names).
    pub commit_log_offset: i64,
    pub sys_flag: i32,
    pub reconsume_times: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    /// The client-generated unique id (`UNIQ_KEY`), or the offset id when there is none.
    pub msg_id: String,
    /// Store host + commit-log offset, as the broker would name the stored record.
    pub offset_msg_id: String,
}

impl MessageExt {
    /// Builds a received message from a pulled record of `queue` (whose broker name the record
    /// itself does not carry).
    pub fn from_record(
        record: MessageRecord,
        queue: &MessageQueue,
    ) -> Result<Self, tidemark_protocol::MessageError> {
        let body = record.uncompressed_body()?;
        let offset_msg_id = encode_offset_msg_id(record.store_host, record.physical_offset);
        let msg_id = record
            .properties
            .unique_key()
            .map(str::to_owned)
            .unwrap_or_else(|| offset_msg_id.clone());
        Ok(Self {
            topic: record.topic,
            body,
            flag: record.flag,
            properties: record.properties,
            queue: MessageQueue::new(
                queue.topic.clone(),
                queue.broker_name.clone(),
                record.queue_id,
            ),
            queue_offset: record.queue_offset,
            commit_log_offset: record.physical_offset,
            sys_flag: record.sys_flag,
            reconsume_times: record.reconsume_times,
            born_timestamp: record.born_timestamp,
            born_host: record.born_host,
            store_timestamp: record.store_timestamp,
            store_host: record.store_host,
            msg_id,
            offset_msg_id,
        })
    }

    pub fn tags(&self) -> Option<&str> {
        self.properties.tags()
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.properties.keys()
    }

    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties.get(name)
    }

    /// Bytes this message counts for in flow control (the body, as RocketMQ counts it).
    pub fn size_bytes(&self) -> u64 {
        self.body.len() as u64
    }

    /// Gives a message pulled from `%RETRY%{group}` its original topic back, as the Java client
    /// does before the listener sees it (the queue stays the retry queue it came from).
    pub(crate) fn restore_retry_topic(&mut self, group: &str) {
        if self.topic == retry_topic(group) {
            if let Some(original) = self.properties.get(property::RETRY_TOPIC) {
                self.topic = original.to_owned();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_sets_the_wire_properties() {
        let message = Message::new("T", "body")
            .with_tags("TagA")
            .with_keys(["k1", "k2"])
            .with_delay_level(3)
            .with_property("color", "red");
        assert_eq!(message.tags(), Some("TagA"));
        assert_eq!(message.keys().collect::<Vec<_>>(), vec!["k1", "k2"]);
        assert_eq!(message.property(property::KEYS), Some("k1 k2"));
        assert_eq!(message.delay_level(), Some(3));
        assert_eq!(message.property("color"), Some("red"));
        assert_eq!(message.with_delay_level(0).delay_level(), None);
    }

    #[test]
    fn retry_topic_is_restored_only_for_the_groups_retry_topic() {
        let record = MessageRecord {
            topic: retry_topic("G"),
            properties: [(property::RETRY_TOPIC, "Orders")].into_iter().collect(),
            ..MessageRecord::default()
        };
        let queue = MessageQueue::new(retry_topic("G"), "b", 0);
        let mut message = MessageExt::from_record(record, &queue).expect("valid record");
        message.restore_retry_topic("Other");
        assert_eq!(message.topic, retry_topic("G"));
        message.restore_retry_topic("G");
        assert_eq!(message.topic, "Orders");
        assert_eq!(message.queue.topic, retry_topic("G"));
    }
}
