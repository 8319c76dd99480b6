//! Dispatch: the consume-queue entry a commit-log record gets (RocketMQ's `DispatchRequest`).
//!
//! Appends, replicated bytes and recovery all build entries here, so a record is indexed the
//! same way whichever path put it in the log; a slave's queues and a recovered store's match
//! the ones the append wrote.

use tidemark_protocol::message::{property, tags_code, MessageRecord, Properties};

use crate::config::StoreConfig;
use crate::consume_queue::QueueEntry;

/// The topic delayed messages wait in, one queue per delay level (RocketMQ's
/// `RMQ_SYS_SCHEDULE_TOPIC`).
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// The topic timer messages (RocketMQ 5's any-delay messages) wait in, one queue (RocketMQ's
/// `rmq_sys_wheel_timer`).
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";

/// What a record's consume-queue entry is made of.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DispatchRequest<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub properties: &'a Properties,
    pub store_timestamp: i64,
    /// Where the record starts in the commit log.
    pub commit_log_offset: u64,
    pub size: u32,
}

impl<'a> DispatchRequest<'a> {
    /// The request for a decoded record stored at `commit_log_offset`.
    pub fn of_record(record: &'a MessageRecord, commit_log_offset: u64, size: u32) -> Self {
        DispatchRequest {
            topic: &record.topic,
            queue_id: record.queue_id,
            properties: &record.properties,
            store_timestamp: record.store_timestamp,
            commit_log_offset,
            size,
        }
    }

    /// The record's consume-queue entry.
    pub fn queue_entry(&self, config: &StoreConfig) -> QueueEntry {
        QueueEntry {
            commit_log_offset: self.commit_log_offset as i64,
            size: self.size as i32,
            tags_code: queue_tags_code(
                config,
                self.topic,
                self.queue_id,
                self.properties,
                self.store_timestamp,
            ),
        }
    }
}

/// The consume-queue tags code of a record: its tag's hash, or for the schedule and timer topics
/// the time it is due (schedule: store time + its level's delay; timer: `TIMER_OUT_MS`), which
/// their services scan by.
fn queue_tags_code(
    config: &StoreConfig,
    topic: &str,
    queue_id: i32,
    properties: &Properties,
    store_timestamp: i64,
) -> i64 {
    if topic == TIMER_TOPIC {
        return properties
            .get(property::TIMER_OUT_MS)
            .and_then(|due| due.parse().ok())
            .unwrap_or(store_timestamp);
    }
    let tags = properties.tags();
    if topic == SCHEDULE_TOPIC {
        if let Some(delay) = usize::try_from(queue_id)
            .ok()
            .and_then(|level| config.delay_levels_ms.get(level))
        {
            return store_timestamp + delay;
        }
    }
    tags_code(tags)
}
