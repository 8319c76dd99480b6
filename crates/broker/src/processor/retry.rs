//! CONSUMER_SEND_MSG_BACK: a message its consumer failed goes back through the group's retry
//! topic at a delay level, or to the dead-letter topic past the group's maximum (`routing`).

use std::sync::Arc;

use tidemark_protocol::body::perm;
use tidemark_protocol::code::version;
use tidemark_protocol::headers::ConsumerSendMsgBackRequestHeader;
use tidemark_protocol::message::{encode_offset_msg_id, property, DecodeOptions, MessageRecord};
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::now_ms;
use tidemark_store::NewMessage;

use super::append::store_error_response;
use super::routing::to_dead_letter;
use super::{bad_header, error, success};
use crate::metadata::retry_topic;
use crate::metadata_change::Announce;
use crate::schedule::to_schedule;
use crate::state::BrokerState;

/// The level the broker picks when the consumer leaves it open: 3 + times already retried.
const DEFAULT_RETRY_LEVEL_BASE: i32 = 3;

pub(super) async fn send_back(
    state: &Arc<BrokerState>,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<ConsumerSendMsgBackRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let Some((group, mut metadata_created)) = state.metadata.groups.find_or_create(
        &header.group,
        state.live.get().auto_create_subscription_group,
        now_ms(),
    ) else {
        return error(
            ResponseCode::SubscriptionGroupNotExist,
            format!("subscription group not exist, {}", header.group),
        );
    };
    if let Some(refusal) = super::refuse_writes_if_read_only(state) {
        return refusal;
    }
    if group.retry_queue_nums <= 0 {
        return success();
    }
    let retry = retry_topic(&header.group);
    let (_, created) = state.metadata.topics.ensure(
        &retry,
        group.retry_queue_nums,
        perm::READ | perm::WRITE,
        now_ms(),
    );
    metadata_created |= created;
    let original = u64::try_from(header.offset)
        .ok()
        .and_then(|offset| state.log().read_record(offset).ok().flatten())
        .and_then(|bytes| MessageRecord::decode(&bytes, 0, DecodeOptions::default()).ok())
        .map(|(record, _)| record);
    let Some(mut original) = original else {
        return error(
            ResponseCode::SystemError,
            format!("look message by offset failed, {}", header.offset),
        );
    };
    let mut properties = std::mem::take(&mut original.properties);
    if properties.get(property::RETRY_TOPIC).is_none() {
        properties.insert(property::RETRY_TOPIC, original.topic.clone());
    }
    if properties.get(property::ORIGIN_MESSAGE_ID).is_none() {
        properties.insert(
            property::ORIGIN_MESSAGE_ID,
            encode_offset_msg_id(original.store_host, original.physical_offset),
        );
    }
    let max = if request.version >= version::V3_4_9 {
        header.max_reconsume_times
    } else {
        None
    }
    .unwrap_or(group.retry_max_times);
    let mut message = NewMessage {
        topic: retry,
        queue_id: (now_ms().unsigned_abs() % group.retry_queue_nums as u64) as i32,
        flag: original.flag,
        sys_flag: original.sys_flag,
        born_timestamp: original.born_timestamp,
        born_host: original.born_host,
        store_host: state.store_host(),
        reconsume_times: original.reconsume_times + 1,
        prepared_transaction_offset: 0,
        body: original.body.clone(),
        properties,
    };
    if original.reconsume_times >= max || header.delay_level < 0 {
        metadata_created |= to_dead_letter(state, &mut message, &header.group);
    } else {
        let level = if header.delay_level > 0 {
            header.delay_level
        } else {
            DEFAULT_RETRY_LEVEL_BASE + original.reconsume_times
        };
        to_schedule(state.delay_level_count(), &mut message, level);
    }
    if metadata_created {
        if let Err(failure) = state.topic_changes().publish(Announce::Soon).await {
            return super::metadata_not_durable(&failure);
        }
    }
    match state.log().put(vec![message]).await {
        Ok(_) => success(),
        Err(failure) => store_error_response(&failure),
    }
}
