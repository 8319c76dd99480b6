//! Messages between the two protocols: a v2 `Message` a client sends becomes a remoting send
//! (properties in RocketMQ's names), and a stored record becomes the v2 `Message` a consumer
//! receives (with its receipt handle, digest and delivery attempt).

use std::io::Read;

use bytes::Bytes;
use prost_types::{Duration as ProtoDuration, Timestamp};
use tidemark_protocol::message::{encode_offset_msg_id, property, MessageRecord, Properties};

use crate::proto::{
    Digest, DigestType, Encoding, Message, MessageType, Resource, SystemProperties,
};

/// RocketMQ's property for a FIFO message's group (`MessageConst.PROPERTY_SHARDING_KEY`).
pub const MESSAGE_GROUP: &str = "__SHARDINGKEY";
/// Set on a transactional half message.
const TRANSACTION_PREPARED: &str = property::TRANSACTION_PREPARED;

/// Properties that are RocketMQ's own, never shown to an application as user properties.
const SYSTEM_PROPERTIES: &[&str] = &[
    property::KEYS,
    property::TAGS,
    property::WAIT_STORE_MSG_OK,
    property::DELAY_TIME_LEVEL,
    property::RETRY_TOPIC,
    property::REAL_TOPIC,
    property::REAL_QUEUE_ID,
    property::TRANSACTION_PREPARED,
    property::PRODUCER_GROUP,
    property::MIN_OFFSET,
    property::MAX_OFFSET,
    property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    property::RECONSUME_TIME,
    property::MAX_RECONSUME_TIMES,
    property::ORIGIN_MESSAGE_ID,
    property::CONSUME_START_TIME,
    property::CLUSTER,
    property::MSG_REGION,
    property::TRACE_SWITCH,
    property::TIMER_DELIVER_MS,
    property::TIMER_DELAY_SEC,
    property::TIMER_DELAY_MS,
    property::TIMER_OUT_MS,
    property::TIMER_ENQUEUE_MS,
    property::TIMER_DEQUEUE_MS,
    property::POP_CK,
    property::FIRST_POP_TIME,
    property::POP_ORIGIN,
    MESSAGE_GROUP,
    "TRACE_CONTEXT",
    "INNER_NUM",
    "INNER_BASE",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "TRANSACTION_ID",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_ORIGIN_MESSAGE_ID",
];

pub fn timestamp(epoch_ms: i64) -> Timestamp {
    Timestamp {
        seconds: epoch_ms.div_euclid(1_000),
        nanos: (epoch_ms.rem_euclid(1_000) * 1_000_000) as i32,
    }
}

pub fn epoch_ms(timestamp: &Timestamp) -> i64 {
    timestamp
        .seconds
        .saturating_mul(1_000)
        .saturating_add(i64::from(timestamp.nanos) / 1_000_000)
}

pub fn duration_ms(duration: &ProtoDuration) -> i64 {
    duration
        .seconds
        .saturating_mul(1_000)
        .saturating_add(i64::from(duration.nanos) / 1_000_000)
}

pub fn duration(ms: i64) -> ProtoDuration {
    ProtoDuration {
        seconds: ms.div_euclid(1_000),
        nanos: (ms.rem_euclid(1_000) * 1_000_000) as i32,
    }
}

/// A resource's full name: RocketMQ namespaces are a `namespace%name` prefix.
pub fn full_name(resource: Option<&Resource>) -> String {
    match resource {
        Some(resource) if !resource.resource_namespace.is_empty() => {
            format!("{}%{}", resource.resource_namespace, resource.name)
        }
        Some(resource) => resource.name.clone(),
        None => String::new(),
    }
}

/// A v2 filter expression as the broker takes it: its expression type (`TAG` or `SQL92`) and
/// text (`*` when empty).
pub fn filter_of(filter: Option<&crate::proto::FilterExpression>) -> (&'static str, String) {
    match filter {
        Some(filter) if filter.r#type == crate::proto::FilterType::Sql as i32 => {
            ("SQL92", filter.expression.clone())
        }
        Some(filter) if !filter.expression.trim().is_empty() => ("TAG", filter.expression.clone()),
        _ => ("TAG", "*".to_owned()),
    }
}

/// What a client's message becomes before it is stored: body (decompressed), properties.
#[derive(Debug)]
pub struct Outgoing {
    pub body: Bytes,
    pub properties: Properties,
    /// The FIFO message group, if any.
    pub message_group: Option<String>,
    pub born_timestamp: i64,
    pub transactional: bool,
}

/// Why a client's message cannot be stored.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    NoMessageId,
    BadTag(String),
    ReservedProperty(String),
    BadBody(String),
}

/// Reads a client's message in RocketMQ's property names (as the proxy maps them). The message
/// is taken: its strings and body move into what is stored.
pub fn outgoing(message: Message) -> Result<Outgoing, Refused> {
    let Message {
        user_properties,
        system_properties,
        body,
        ..
    } = message;
    let SystemProperties {
        tag,
        keys,
        message_id,
        message_group,
        delivery_timestamp,
        trace_context,
        message_type,
        body_encoding,
        born_timestamp,
        ..
    } = system_properties.unwrap_or_default();
    if message_id.is_empty() {
        return Err(Refused::NoMessageId);
    }
    // The user's properties and at most seven system ones.
    let mut properties = Properties::with_capacity(user_properties.len() + 7);
    for (name, value) in user_properties {
        if SYSTEM_PROPERTIES.contains(&name.as_str()) {
            return Err(Refused::ReservedProperty(name));
        }
        properties.insert(name, value);
    }
    if let Some(tag) = tag.filter(|tag| !tag.is_empty()) {
        if tag.contains('|') || tag.chars().any(char::is_control) {
            return Err(Refused::BadTag(tag));
        }
        properties.insert(property::TAGS, tag);
    }
    let keys: Vec<&str> = keys
        .iter()
        .map(String::as_str)
        .filter(|key| !key.is_empty())
        .collect();
    if !keys.is_empty() {
        properties.insert(property::KEYS, keys.join(property::KEY_SEPARATOR));
    }
    properties.insert(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX, message_id);
    let message_group = message_group.filter(|group| !group.is_empty());
    if let Some(group) = &message_group {
        properties.insert(MESSAGE_GROUP, group.as_str());
    }
    if let Some(at) = &delivery_timestamp {
        properties.insert(property::TIMER_DELIVER_MS, epoch_ms(at).to_string());
    }
    if let Some(context) = trace_context.filter(|context| !context.is_empty()) {
        properties.insert("TRACE_CONTEXT", context);
    }
    let transactional = message_type == MessageType::Transaction as i32;
    if transactional {
        properties.insert(TRANSACTION_PREPARED, "true");
    }
    let body = if body_encoding == Encoding::Gzip as i32 {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .map_err(|failure| Refused::BadBody(format!("gzip body unreadable: {failure}")))?;
        Bytes::from(out)
    } else {
        Bytes::from(body)
    };
    Ok(Outgoing {
        body,
        properties,
        message_group,
        born_timestamp: born_timestamp
            .as_ref()
            .map_or_else(tidemark_remoting::now_ms, epoch_ms),
        transactional,
    })
}

/// The message type a stored message reads as.
fn message_type(properties: &Properties) -> MessageType {
    if properties.get(TRANSACTION_PREPARED) == Some("true") {
        MessageType::Transaction
    } else if properties.get(MESSAGE_GROUP).is_some() {
        MessageType::Fifo
    } else if properties.get(property::TIMER_OUT_MS).is_some()
        || properties.get(property::TIMER_DELIVER_MS).is_some()
        || properties.get(property::DELAY_TIME_LEVEL).is_some()
    {
        MessageType::Delay
    } else {
        MessageType::Normal
    }
}

/// How a consumer receives a stored record of `topic` (the topic it subscribed to; retries
/// read as that topic too).
pub fn incoming(
    record: MessageRecord,
    topic: &Resource,
    receipt_handle: Option<String>,
    invisible_ms: Option<i64>,
) -> Message {
    // Every received message passes here: the record is taken so that its properties move
    // into the answer instead of being copied.
    let body = record
        .uncompressed_body()
        .unwrap_or_else(|_| record.body.clone());
    // MD5 in upper-case hex, as Apache's proxy sends it: the clients disagree on how to write
    // a CRC32 (the Java and Go ones hex, the Node.js one decimal), but all check MD5 alike.
    let checksum = {
        use md5::Digest as _;
        tidemark_protocol::hex::encode_upper(&md5::Md5::digest(&body))
    };
    let mut properties = record.properties;
    let delivery_timestamp = properties
        .get(property::TIMER_OUT_MS)
        .or_else(|| properties.get(property::TIMER_DELIVER_MS))
        .and_then(|at| at.parse::<i64>().ok())
        .map(timestamp);
    let message_type = message_type(&properties) as i32;
    // Each of these is a system property, so taking it out leaves the user's ones unchanged.
    let message_id = properties
        .remove(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        .unwrap_or_else(|| encode_offset_msg_id(record.store_host, record.physical_offset));
    let tag = properties.remove(property::TAGS);
    let keys = properties.keys().map(str::to_owned).collect();
    let message_group = properties.remove(MESSAGE_GROUP);
    let trace_context = properties.remove("TRACE_CONTEXT");
    let user_properties = properties
        .into_entries()
        .filter(|(name, _)| !SYSTEM_PROPERTIES.contains(&name.as_str()))
        .collect();
    let system = SystemProperties {
        tag,
        keys,
        message_id,
        body_digest: Some(Digest {
            r#type: DigestType::Md5 as i32,
            checksum,
        }),
        body_encoding: Encoding::Identity as i32,
        message_type,
        born_timestamp: Some(timestamp(record.born_timestamp)),
        born_host: text_of(record.born_host.ip()),
        store_timestamp: Some(timestamp(record.store_timestamp)),
        store_host: text_of(record.store_host),
        delivery_timestamp,
        receipt_handle,
        queue_id: record.queue_id,
        queue_offset: Some(record.queue_offset),
        invisible_duration: invisible_ms.map(duration),
        delivery_attempt: Some(record.reconsume_times.saturating_add(1)),
        message_group,
        trace_context,
        orphaned_transaction_recovery_duration: None,
        dead_letter_queue: None,
        lite_topic: None,
        priority: None,
    };
    Message {
        topic: Some(topic.clone()),
        user_properties,
        system_properties: Some(system),
        body: body.to_vec(),
    }
}

/// An address as text in one allocation (`to_string` grows its buffer piece by piece).
fn text_of(address: impl std::fmt::Display) -> String {
    use std::fmt::Write as _;
    // The longest socket address, `[IPv6%scope]:port`, fits.
    let mut text = String::with_capacity(64);
    let _ = write!(text, "{address}");
    text
}

/// A consumer's subscriptions as the broker registers them (tags or SQL92 per topic).
pub(crate) fn subscriptions_of(
    subscription: &crate::proto::Subscription,
) -> Vec<tidemark_protocol::body::SubscriptionData> {
    subscription
        .subscriptions
        .iter()
        .map(|entry| {
            let topic = full_name(entry.topic.as_ref());
            match filter_of(entry.expression.as_ref()) {
                ("SQL92", selector) => tidemark_protocol::body::SubscriptionData {
                    topic,
                    sub_string: selector,
                    expression_type: "SQL92".to_owned(),
                    sub_version: 1,
                    ..tidemark_protocol::body::SubscriptionData::default()
                },
                (_, tags) => {
                    tidemark_protocol::body::SubscriptionData::from_expression(&topic, &tags, 1)
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn message(system: SystemProperties, user: &[(&str, &str)]) -> Message {
        Message {
            topic: Some(Resource {
                resource_namespace: String::new(),
                name: "T".into(),
            }),
            user_properties: user
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<HashMap<_, _>>(),
            system_properties: Some(system),
            body: b"hello".to_vec(),
        }
    }

    #[test]
    fn client_messages_map_onto_rocketmq_properties() {
        let out = outgoing(message(
            SystemProperties {
                tag: Some("TagA".into()),
                keys: vec!["k1".into(), "k2".into()],
                message_id: "01ABC".into(),
                message_group: Some("g1".into()),
                delivery_timestamp: Some(timestamp(1_700_000_000_123)),
                ..SystemProperties::default()
            },
            &[("color", "red")],
        ))
        .expect("accepted");
        assert_eq!(out.properties.get("TAGS"), Some("TagA"));
        assert_eq!(out.properties.get("KEYS"), Some("k1 k2"));
        assert_eq!(out.properties.get("UNIQ_KEY"), Some("01ABC"));
        assert_eq!(out.properties.get(MESSAGE_GROUP), Some("g1"));
        assert_eq!(
            out.properties.get("TIMER_DELIVER_MS"),
            Some("1700000000123")
        );
        assert_eq!(out.properties.get("color"), Some("red"));
        assert_eq!(
            outgoing(message(SystemProperties::default(), &[])).err(),
            Some(Refused::NoMessageId)
        );
        let reserved = message(
            SystemProperties {
                message_id: "x".into(),
                ..SystemProperties::default()
            },
            &[("UNIQ_KEY", "spoof")],
        );
        assert!(matches!(
            outgoing(reserved),
            Err(Refused::ReservedProperty(_))
        ));
        let bad_tag = message(
            SystemProperties {
                message_id: "x".into(),
                tag: Some("a|b".into()),
                ..SystemProperties::default()
            },
            &[],
        );
        assert!(matches!(outgoing(bad_tag), Err(Refused::BadTag(_))));
    }

    #[test]
    fn times_convert_both_ways() {
        for ms in [0, 1, 999, 1_700_000_000_123, -1] {
            assert_eq!(epoch_ms(&timestamp(ms)), ms);
            assert_eq!(duration_ms(&duration(ms)), ms);
        }
        assert_eq!(
            full_name(Some(&Resource {
                resource_namespace: "ns".into(),
                name: "T".into()
            })),
            "ns%T"
        );
    }
}
