//! The trace a pull leaves when it moves a group's offset: retention removed messages the group
//! had not read (or the offset lies past the queue's end), and PULL_OFFSET_MOVED sends the
//! consumer to the queue's new bounds. Moving is right, but silently losing data is not: the
//! broker logs a WARN naming group, queue and both offsets, and stores an `OffsetMovedEvent` in
//! the system topic `OFFSET_MOVED_EVENT` (tag and key: the group), as RocketMQ's
//! `generateOffsetMovedEvent` does, for operators' tools to read.

use bytes::Bytes;
use tidemark_protocol::body::{MessageQueue, OffsetMovedEvent};
use tidemark_protocol::headers::PullMessageRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::message::{property, Properties};
use tidemark_remoting::now_ms;
use tidemark_store::NewMessage;
use tracing::warn;

use crate::metadata::OFFSET_MOVED_EVENT;
use crate::state::BrokerState;

/// Logs and records that `header`'s group was moved from its requested offset to `new_offset`.
/// Recording is best effort: a failed append is logged, and the pull is answered either way.
pub(super) fn record(state: &BrokerState, header: &PullMessageRequestHeader, new_offset: i64) {
    warn!(
        group = %header.consumer_group,
        topic = %header.topic,
        queue = header.queue_id,
        requested_offset = header.queue_offset,
        new_offset,
        min_offset = state.log().min_offset(&header.topic, header.queue_id),
        max_offset = state.log().max_offset(&header.topic, header.queue_id),
        "consumer offset moved: the requested offset is outside the queue; messages between \
         the two offsets were removed or never existed"
    );
    let event = OffsetMovedEvent {
        consumer_group: header.consumer_group.clone(),
        message_queue: MessageQueue::new(
            header.topic.clone(),
            state.config.broker_name.clone(),
            header.queue_id,
        ),
        offset_new: new_offset,
        offset_request: header.queue_offset,
    };
    let mut properties = Properties::default();
    properties.insert(property::TAGS, header.consumer_group.clone());
    properties.insert(property::KEYS, header.consumer_group.clone());
    let message = NewMessage::broker_record(
        OFFSET_MOVED_EVENT,
        state.store_host(),
        now_ms(),
        Bytes::from(event.to_json_bytes()),
        properties,
    );
    // Not awaited for durability: the event is a report, and the pull that caused it must not
    // wait for a group commit.
    match state.log().append(
        std::slice::from_ref(&message),
        crate::message_log::Origin::Traffic,
    ) {
        Ok(stored) => drop(stored.without_waiting()),
        Err(failure) => warn!(%failure, "could not store the OFFSET_MOVED_EVENT message"),
    }
}
