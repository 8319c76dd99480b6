//! SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE.

use std::sync::Arc;

use bytes::Bytes;
use tidemark_protocol::body::perm;
use tidemark_protocol::code::version;
use tidemark_protocol::headers::SendMessageRequestHeader;
use tidemark_protocol::message::{decode_batch, property, Properties};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::now_ms;
use tidemark_remoting::Channel;
use tidemark_store::NewMessage;

use super::append::{acknowledge, store_error_response, AnswerExtras};
use super::{bad_header, error};
use crate::metadata::{
    is_system_topic_for_send, is_valid_topic_name, DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX,
};
use crate::metadata_change::Announce;
use crate::state::BrokerState;

pub(super) async fn send(
    state: &Arc<BrokerState>,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let mut header = match SendMessageRequestHeader::decode_request(request) {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    if let Some(refusal) = refuse_send(state, &header) {
        return refusal;
    }
    // Parsed once here; routing reads this value and the store gets it encoded once.
    let properties = Properties::parse(header.properties.as_deref().unwrap_or(""));
    let half = super::transaction::is_half(&mut header, &properties);
    let Some((topic_config, topic_created)) = resolve_topic(state, &header) else {
        return error(
            ResponseCode::TopicNotExist,
            format!("topic[{}] not exist, apply first please!", header.topic),
        );
    };
    let queue_count = topic_config
        .write_queue_nums
        .max(topic_config.read_queue_nums);
    let queue_id = if header.queue_id < 0 {
        (now_ms().unsigned_abs() % topic_config.write_queue_nums.max(1) as u64) as i32
    } else {
        header.queue_id
    };
    if queue_id >= queue_count {
        return error(
            ResponseCode::SystemError,
            format!(
                "request queueId[{queue_id}] is illegal, {topic_config:?} Producer: {}",
                channel.peer_addr()
            ),
        );
    }
    let target = Target {
        header: &header,
        queue_id,
        born_host: channel.peer_addr(),
    };
    let batch = header.batch || request.request_code() == RequestCode::SendBatchMessage;
    if half {
        if batch {
            return super::transaction::batch_refused();
        }
        if topic_created {
            if let Err(failure) = state.topic_changes().publish(Announce::BeforeAnswer).await {
                return super::metadata_not_durable(&failure);
            }
        }
        let mut properties = properties;
        stamp(state, &mut properties);
        let producer_waits = waits_for_slave(&properties);
        let message = new_message(
            state,
            &target,
            header.flag,
            request.body.clone(),
            properties,
        );
        return super::transaction::send_half(state, message, queue_id, producer_waits).await;
    }
    let prepared = if batch {
        batch_messages(state, &target, &request.body)
    } else {
        single_message(
            state,
            &target,
            request.body.clone(),
            properties,
            request.version,
        )
    };
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(refusal) => return refusal,
    };
    if topic_created || prepared.topic_created {
        // A topic created by this send must outlive a crash before the send is acknowledged:
        // otherwise the stored messages are unreachable after a restart.
        if let Err(failure) = state.topic_changes().publish(Announce::BeforeAnswer).await {
            return super::metadata_not_durable(&failure);
        }
    }
    let appended = match state.log().put(prepared.messages).await {
        Ok(appended) => appended,
        Err(failure) => return store_error_response(&failure),
    };
    let extras = AnswerExtras {
        transaction_id: None,
        recall_handle: prepared.recall_handle,
    };
    acknowledge(
        state,
        queue_id,
        &appended,
        prepared.producer_waits_for_slave,
        extras,
    )
    .await
}

/// Sends the broker does not take at all: a read-only broker or slave, a bad topic name, a
/// system topic.
fn refuse_send(state: &BrokerState, header: &SendMessageRequestHeader) -> Option<RemotingCommand> {
    if let Some(refusal) = super::refuse_writes_if_read_only(state) {
        return Some(refusal);
    }
    if !is_valid_topic_name(&header.topic) {
        return Some(error(
            ResponseCode::SystemError,
            format!("the specified topic[{}] is not valid", header.topic),
        ));
    }
    if is_system_topic_for_send(&header.topic) {
        return Some(error(
            ResponseCode::NoPermission,
            format!("Sending message to topic[{}] is forbidden.", header.topic),
        ));
    }
    None
}

/// The topic's config, created on first send (a `%RETRY%` topic, or from the producer's
/// template topic), with whether this send created it; `None` when it may not be created.
fn resolve_topic(
    state: &BrokerState,
    header: &SendMessageRequestHeader,
) -> Option<(tidemark_protocol::body::TopicConfig, bool)> {
    if header.topic.starts_with(RETRY_GROUP_TOPIC_PREFIX) {
        return Some(state.metadata.topics.ensure(
            &header.topic,
            1,
            perm::READ | perm::WRITE,
            now_ms(),
        ));
    }
    state.metadata.topics.get_or_create_from_template(
        &header.topic,
        &header.default_topic,
        header.default_topic_queue_nums,
        now_ms(),
    )
}

/// Where the messages of one send go, and what every one of them shares.
struct Target<'a> {
    header: &'a SendMessageRequestHeader,
    queue_id: i32,
    born_host: std::net::SocketAddr,
}

/// The messages of one send, ready for the store.
struct Prepared {
    messages: Vec<NewMessage>,
    /// Routing created a dead-letter topic.
    topic_created: bool,
    /// No message said `WAIT=false`.
    producer_waits_for_slave: bool,
    /// A single timer message's recall handle.
    recall_handle: Option<String>,
}

/// What the broker adds to every message it stores, as RocketMQ's does: its cluster, and its
/// region and trace switch (a traced consumer reads them from the message; the 5.x client writes
/// no consume trace for a message without a region). And what only the broker may write: the
/// mark of a POP copy, which finishes its original message when found after a crash or an
/// election — a client's forged one would finish another's message undelivered.
fn stamp(state: &BrokerState, properties: &mut Properties) {
    properties.remove(property::POP_ORIGIN);
    properties.insert(property::MSG_REGION, state.live.get().region_id.clone());
    properties.insert(
        property::TRACE_SWITCH,
        state.live.get().trace_on.to_string(),
    );
    properties.insert(property::CLUSTER, state.config.broker_cluster_name.clone());
}

fn waits_for_slave(properties: &Properties) -> bool {
    properties.get(property::WAIT_STORE_MSG_OK) != Some("false")
}

/// One message: stamped with the cluster, routed to the dead-letter topic (a retried message
/// past its group's limit), a delay level's schedule queue or the timer topic; the store
/// encodes it once. Refused: a timer message the broker cannot or may not hold.
fn single_message(
    state: &BrokerState,
    target: &Target<'_>,
    body: Bytes,
    mut properties: Properties,
    request_version: i32,
) -> Result<Prepared, RemotingCommand> {
    let header = target.header;
    if properties.get(property::TIMER_DEL_UNIQKEY).is_some() {
        // RocketMQ takes such a send as a recall marker for any topic's message; recalls here
        // go through RECALL_MESSAGE, checked on the topic they act on.
        return Err(error(
            ResponseCode::MessageIllegal,
            "TIMER_DEL_UNIQKEY is the broker's; recall a timer message with RECALL_MESSAGE",
        ));
    }
    stamp(state, &mut properties);
    let producer_waits_for_slave = waits_for_slave(&properties);
    let delay = properties
        .get(property::DELAY_TIME_LEVEL)
        .and_then(|level| level.parse::<i32>().ok())
        .unwrap_or(0);
    let mut message = new_message(state, target, header.flag, body, properties);
    let mut topic_created = false;
    let mut recall_handle = None;
    if let Some(group) = header.topic.strip_prefix(RETRY_GROUP_TOPIC_PREFIX) {
        let from_header = if request_version >= version::V3_4_9 {
            header.max_reconsume_times
        } else {
            None
        };
        let max = from_header.unwrap_or_else(|| state.metadata.groups.retry_max_times(group));
        if message.reconsume_times >= max {
            topic_created = super::routing::to_dead_letter(state, &mut message, group);
        }
    }
    if delay > 0 {
        // A delay level takes precedence over timer properties (RocketMQ drops them).
        super::routing::drop_timer(&mut message.properties);
        if !message.topic.starts_with(DLQ_GROUP_TOPIC_PREFIX) {
            crate::schedule::to_schedule(state.delay_level_count(), &mut message, delay);
        }
    } else if !message.topic.starts_with(DLQ_GROUP_TOPIC_PREFIX) {
        let now = now_ms();
        let timer = super::routing::timer_deliver_ms(&message.properties, now);
        if !matches!(timer, Ok(None)) && !state.live.get().timer_wheel_enable {
            return Err(error(
                ResponseCode::SystemError,
                "accurate timer message is not enabled, timerWheelEnable is false",
            ));
        }
        let max_delay_ms = state.live.get().timer_max_delay_sec.saturating_mul(1000) as i64;
        match timer {
            Ok(Some(deliver)) if deliver.saturating_sub(now) > max_delay_ms => {
                return Err(timer_illegal(max_delay_ms));
            }
            Ok(Some(deliver)) if deliver > now => {
                recall_handle = handle_of_timer(state, &message, deliver);
                super::routing::to_timer(&mut message, deliver);
            }
            // Due already: stored as an ordinary message (RocketMQ does the same).
            Ok(_) => {}
            Err(_) => return Err(timer_illegal(max_delay_ms)),
        }
    }
    Ok(Prepared {
        messages: vec![message],
        topic_created,
        producer_waits_for_slave,
        recall_handle,
    })
}

/// The recall handle of a timer message due at `deliver` (none for a retry topic's, as
/// RocketMQ gives none, nor for a message without a unique id to name it by).
fn handle_of_timer(state: &BrokerState, message: &NewMessage, deliver: i64) -> Option<String> {
    if message.topic.starts_with(RETRY_GROUP_TOPIC_PREFIX) {
        return None;
    }
    let id = message
        .properties
        .get(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)?;
    Some(
        tidemark_protocol::message::RecallHandle::for_timer(
            &message.topic,
            &state.config.broker_name,
            deliver,
            id,
        )
        .encode(),
    )
}

/// RocketMQ 5's answer to a timer message it will not hold (too far ahead, or unreadable).
fn timer_illegal(max_delay_ms: i64) -> RemotingCommand {
    error(
        ResponseCode::MessageIllegal,
        format!("timer message illegal, the delay time should not be bigger than the max delay {max_delay_ms}ms; or if set del msg, the delay time should be bigger than the current time"),
    )
}

/// A batch: every entry stamped with the cluster; delays are refused.
fn batch_messages(
    state: &BrokerState,
    target: &Target<'_>,
    body: &Bytes,
) -> Result<Prepared, RemotingCommand> {
    let entries = decode_batch(body).map_err(|failure| {
        error(
            ResponseCode::MessageIllegal,
            format!("bad batch body: {failure}"),
        )
    })?;
    if entries.is_empty() {
        return Err(error(ResponseCode::MessageIllegal, "empty batch"));
    }
    let mut producer_waits_for_slave = true;
    let mut messages = Vec::with_capacity(entries.len());
    for entry in entries {
        let mut properties = entry.properties;
        let timed = [
            property::TIMER_DELIVER_MS,
            property::TIMER_DELAY_SEC,
            property::TIMER_DELAY_MS,
        ]
        .iter()
        .any(|name| properties.get(name).is_some());
        if timed
            || properties
                .get(property::DELAY_TIME_LEVEL)
                .is_some_and(|level| level != "0")
        {
            return Err(error(
                ResponseCode::MessageIllegal,
                "a batch message cannot be delayed",
            ));
        }
        producer_waits_for_slave &= waits_for_slave(&properties);
        stamp(state, &mut properties);
        messages.push(new_message(
            state, target, entry.flag, entry.body, properties,
        ));
    }
    Ok(Prepared {
        messages,
        topic_created: false,
        producer_waits_for_slave,
        recall_handle: None,
    })
}

/// A message of this send.
fn new_message(
    state: &BrokerState,
    target: &Target<'_>,
    flag: i32,
    body: Bytes,
    properties: Properties,
) -> NewMessage {
    let header = target.header;
    NewMessage {
        topic: header.topic.clone(),
        queue_id: target.queue_id,
        flag,
        sys_flag: header.sys_flag,
        born_timestamp: header.born_timestamp,
        born_host: target.born_host,
        store_host: state.store_host(),
        reconsume_times: header.reconsume_times.unwrap_or(0),
        prepared_transaction_offset: 0,
        body,
        properties,
    }
}
