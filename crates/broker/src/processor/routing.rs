//! Where a message goes instead of its topic: a delay level's schedule queue, or its group's
//! dead-letter topic. Used by sends and by CONSUMER_SEND_MSG_BACK alike; both edit the
//! message's parsed properties, which the store encodes once.

use tidemark_protocol::body::perm;
use tidemark_protocol::message::property;
use tidemark_store::{NewMessage, SCHEDULE_TOPIC};

use crate::metadata::{dlq_topic, DLQ_QUEUE_NUMS};
use crate::state::{now_ms, BrokerState};

/// Parks `message` in the schedule queue of `level` (clamped to the configured levels); the
/// schedule service stores it again in its real topic and queue once due.
pub(super) fn to_schedule(state: &BrokerState, message: &mut NewMessage, level: i32) {
    let levels = state
        .config
        .delay_levels_ms()
        .map(|levels| levels.len() as i32)
        .unwrap_or(1)
        .max(1);
    let level = level.clamp(1, levels);
    let properties = &mut message.properties;
    properties.insert(property::REAL_TOPIC, message.topic.clone());
    properties.insert(property::REAL_QUEUE_ID, message.queue_id.to_string());
    properties.insert(property::DELAY_TIME_LEVEL, level.to_string());
    message.topic = SCHEDULE_TOPIC.to_owned();
    message.queue_id = level - 1;
}

/// Sends `message` to `%DLQ%{group}` (one queue, readable and writable as RocketMQ 4.9.7 creates
/// it; releases before apache/rocketmq#2437 made it write-only), creating the topic on first use.
/// Returns whether it created the topic: the caller persists it before answering.
#[must_use]
pub(super) fn to_dead_letter(state: &BrokerState, message: &mut NewMessage, group: &str) -> bool {
    let topic = dlq_topic(group);
    let (_, created) =
        state
            .topics
            .ensure(&topic, DLQ_QUEUE_NUMS, perm::READ | perm::WRITE, now_ms());
    message.properties.remove(property::DELAY_TIME_LEVEL);
    message.topic = topic;
    message.queue_id = 0;
    created
}
