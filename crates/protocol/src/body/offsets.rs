//! Offset files and bodies: `consumerOffset.json` (GET_ALL_CONSUMER_OFFSET), `delayOffset.json`
//! (GET_ALL_DELAY_OFFSET), and maps keyed by message queue (client `offsets.json`, reset bodies).

use std::collections::BTreeMap;

use super::admin::MessageQueue;
use super::topic::DataVersion;
use crate::json_object;

/// Separates topic and group in `consumerOffset.json` keys.
pub const TOPIC_GROUP_SEPARATOR: char = '@';

json_object! {
    /// `ConsumerOffsetManager` as persisted and as sent to slaves: `"topic@group"` →
    /// queue id → next offset to consume.
    pub struct ConsumerOffsetWrapper {
        /// 5.x.
        "dataVersion" => data_version: Option<DataVersion>,
        "offsetTable" => offset_table: BTreeMap<String, BTreeMap<i32, i64>>,
        /// Tidemark only (Java ignores it): per `topic@group` and queue, the epoch of the last
        /// operator reset, so a slave can tell a reset from a stale copy.
        "resetEpochTable" => reset_epoch_table: Option<BTreeMap<String, BTreeMap<i32, i64>>>,
        /// Tidemark only: per `topic@group` and queue, the acknowledged ranges above the offset
        /// in [`AckedRanges`](crate::acked::AckedRanges)' text form, so a slave has them too.
        "ackedRangesTable" => acked_ranges_table: Option<BTreeMap<String, BTreeMap<i32, String>>>,
    }
}

/// Builds a `topic@group` key.
pub fn topic_at_group(topic: &str, group: &str) -> String {
    format!("{topic}{TOPIC_GROUP_SEPARATOR}{group}")
}

/// Splits a `topic@group` key; `None` unless it has exactly one separator with text on
/// both sides (Java skips such keys too).
pub fn split_topic_at_group(key: &str) -> Option<(&str, &str)> {
    let (topic, group) = key.split_once(TOPIC_GROUP_SEPARATOR)?;
    if topic.is_empty() || group.is_empty() || group.contains(TOPIC_GROUP_SEPARATOR) {
        return None;
    }
    Some((topic, group))
}

json_object! {
    /// `delayOffset.json`: delay level (queue id + 1) → next offset of that schedule queue.
    pub struct DelayOffsetWrapper {
        /// 5.x.
        "dataVersion" => data_version: Option<DataVersion>,
        "offsetTable" => offset_table: BTreeMap<i32, i64>,
    }
}

json_object! {
    /// Offsets keyed by message queue: the client's broadcasting `offsets.json`
    /// (`OffsetSerializeWrapper`) and `ResetOffsetBody`. Java only reads object keys here.
    pub struct MessageQueueOffsets {
        "offsetTable" => offset_table: BTreeMap<MessageQueue, i64>,
    }
}
