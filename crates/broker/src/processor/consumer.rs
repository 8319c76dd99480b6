//! Client management and consumer progress: HEART_BEAT, UNREGISTER_CLIENT,
//! GET_CONSUMER_LIST_BY_GROUP, QUERY/UPDATE_CONSUMER_OFFSET, LOCK/UNLOCK_BATCH_MQ.

use std::sync::Arc;

use tidemark_protocol::acked::{
    AckedRanges, ACKED_RANGES_FIELD, FROM_CONSUMER_FIELD, HELD_FIELD, RELEASED_FIELD,
    TAKE_OVER_FIELD,
};
use tidemark_protocol::body::{
    perm, CheckClientRequestBody, ConsumerListBody, HeartbeatData, LockBatchRequestBody,
    LockBatchResponseBody,
};
use tidemark_protocol::headers::{
    GetConsumerListByGroupRequestHeader, NotifyConsumerIdsChangedRequestHeader,
    OffsetResponseHeader, QueryConsumerOffsetRequestHeader, UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::now_ms;
use tidemark_remoting::Channel;
use tracing::debug;

use super::{bad_header, error, success};
use crate::clients::ClientChannel;
use crate::history::{Actor, ChangeKind, QueueMove};
use crate::metadata::retry_topic;
use crate::metadata_change::Announce;
use crate::offsets::{CommitOutcome, Committer, Journaled};
use crate::state::BrokerState;

/// A lock not renewed for this long is free (`rocketmq.broker.rebalance.lockMaxLiveTime`).
const QUEUE_LOCK_TTL: std::time::Duration = std::time::Duration::from_secs(60);

pub(super) async fn heartbeat(
    state: &Arc<BrokerState>,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let data = match HeartbeatData::from_json_bytes(&request.body) {
        Ok(data) => data,
        Err(failure) => {
            return error(
                ResponseCode::SystemError,
                format!("bad heartbeat body: {failure}"),
            )
        }
    };
    let now = now_ms();
    let client = ClientChannel {
        channel: channel.clone(),
        client_id: data.client_id.clone(),
        language: request.language,
        version: request.version,
        last_update_ms: now,
        last_seen: std::time::Instant::now(),
    };
    let mut metadata_created = false;
    for consumer in &data.consumer_data_set {
        let Some((group, group_created)) = state.metadata.groups.find_or_create(
            &consumer.group_name,
            state.live.get().auto_create_subscription_group,
            now,
        ) else {
            debug!(group = %consumer.group_name, "heartbeat for an unknown group; auto-create is off");
            continue;
        };
        // Every clustering group has a retry topic; clients subscribe to it and it must be routed.
        metadata_created |= group_created;
        let retry = retry_topic(&consumer.group_name);
        if group.retry_queue_nums > 0 {
            let (_, created) = state.metadata.topics.ensure(
                &retry,
                group.retry_queue_nums,
                perm::READ | perm::WRITE,
                now,
            );
            metadata_created |= created;
        }
        let changed = state.clients.register_consumer(consumer, client.clone());
        if changed && group.notify_consumer_ids_changed_enable {
            notify_ids_changed(state, &consumer.group_name);
        }
    }
    for producer in &data.producer_data_set {
        state
            .clients
            .register_producer(&producer.group_name, client.clone());
    }
    if metadata_created {
        // The group and its retry topic a consumer now relies on must survive a crash.
        if let Err(failure) = state.topic_changes().publish(Announce::Soon).await {
            return super::metadata_not_durable(&failure);
        }
    }
    success()
}

/// Tells every member of a group to rebalance now (NOTIFY_CONSUMER_IDS_CHANGED, oneway).
pub(crate) fn notify_ids_changed(state: &BrokerState, group: &str) {
    let channels = state.clients.group_channels(group);
    for channel in channels {
        let notice = RemotingCommand::request_with_header(
            RequestCode::NotifyConsumerIdsChanged,
            &NotifyConsumerIdsChangedRequestHeader {
                consumer_group: group.to_owned(),
            },
        );
        tokio::spawn(async move {
            if let Err(failure) = channel.oneway(notice).await {
                debug!(%failure, "could not notify a consumer of a membership change");
            }
        });
    }
}

pub(super) fn unregister_client(
    state: &BrokerState,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<UnregisterClientRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    if let Some(group) = header.producer_group.as_deref() {
        state.clients.unregister_producer(group, channel.id());
    }
    if let Some(group) = header.consumer_group.as_deref() {
        if state.clients.unregister_consumer(group, channel.id()) {
            notify_ids_changed(state, group);
        }
    }
    success()
}

pub(super) fn consumer_list(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<GetConsumerListByGroupRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let ids = state.clients.consumer_ids(&header.consumer_group);
    if ids.is_empty() {
        return error(
            ResponseCode::SystemError,
            format!("no consumer for this group, {}", header.consumer_group),
        );
    }
    success().with_body(
        ConsumerListBody {
            consumer_id_list: ids,
        }
        .to_json_bytes(),
    )
}

/// QUERY_CONSUMER_OFFSET. A Tidemark consumer about to take the queue over (`tidemarkTakeOver`)
/// is also told when another live member of the group still holds it and has not released it
/// (`tidemarkHeld`): it asks again until released, or for a bounded time.
pub(super) fn query_offset(
    state: &BrokerState,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let mut response = stored_offset(state, request);
    if request.ext_fields.get(TAKE_OVER_FIELD) == Some("1") {
        if let Ok(header) = request.decode_header::<QueryConsumerOffsetRequestHeader>() {
            let (topic, group, queue_id) = (&header.topic, &header.consumer_group, header.queue_id);
            let live = live_holder(state, topic, group, queue_id, channel.id());
            let held =
                state
                    .progress
                    .offsets
                    .claim(topic, group, queue_id, channel.id(), |holder| {
                        Some(holder) == live
                    });
            if held.is_some() {
                response.ext_fields.insert(HELD_FIELD, "1");
            }
        }
    }
    response
}

/// The queue's current hand-off holder when it is another connection that is still a member of
/// the group. Looked up before the offset table is changed, as the tables' locks never nest; a
/// holder that changes in between is taken for gone (the window is one lookup wide).
pub(super) fn live_holder(
    state: &BrokerState,
    topic: &str,
    group: &str,
    queue_id: i32,
    connection: u64,
) -> Option<u64> {
    state
        .progress
        .offsets
        .holder(topic, group, queue_id)
        .filter(|holder| *holder != connection && state.clients.is_member(group, *holder))
}

fn stored_offset(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<QueryConsumerOffsetRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let stored = state.progress.offsets.queue_progress(
        &header.topic,
        &header.consumer_group,
        header.queue_id,
    );
    if let Some(progress) = stored {
        let mut response = success().with_header(&OffsetResponseHeader {
            offset: progress.offset,
        });
        if !progress.acked.is_empty() {
            response
                .ext_fields
                .insert(ACKED_RANGES_FIELD, progress.acked.encode(progress.offset));
        }
        return response;
    }
    // A group's first look at a queue whose start is still there and recent starts at 0
    // (RocketMQ 4.9's rule), so CONSUME_FROM_LAST_OFFSET on a young topic reads it all.
    if header.set_zero_if_not_found != Some(false)
        && state.log().min_offset(&header.topic, header.queue_id) <= 0
    {
        let hot = match state.log().queue_entry(&header.topic, header.queue_id, 0) {
            Ok(Some(entry)) => {
                let (_, written, _) = state.log().positions();
                written.saturating_sub(entry.commit_log_offset.max(0) as u64)
                    <= crate::stats::total_memory_bytes() * 4 / 10
            }
            Ok(None) => true,
            Err(_) => false,
        };
        if hot {
            return success().with_header(&OffsetResponseHeader { offset: 0 });
        }
    }
    error(
        ResponseCode::QueryNotFound,
        "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
    )
}

/// The acknowledged ranges a Tidemark client sent with its commit offset, if any; unreadable
/// ones are ignored (the offset alone is still right).
pub(crate) fn acked_ranges(request: &RemotingCommand, commit_offset: i64) -> Option<AckedRanges> {
    let text = request.ext_fields.get(ACKED_RANGES_FIELD)?;
    match AckedRanges::decode(commit_offset, text) {
        Ok(acked) => Some(acked),
        Err(reason) => {
            debug!(%reason, "acknowledged ranges unreadable; the commit offset alone is stored");
            None
        }
    }
}

/// Whether an UPDATE_CONSUMER_OFFSET is a consumer's own commit whatever connection it comes
/// on: consumers commit oneway (Java, Go and C++ clients persist that way) or, Tidemark's, with
/// [`FROM_CONSUMER_FIELD`]; admin tools (`updateConsumeOffset`, the old reset by time, offset
/// cloning) wait for the answer.
fn from_consumer(request: &RemotingCommand) -> bool {
    request.is_oneway() || request.ext_fields.get(FROM_CONSUMER_FIELD) == Some("1")
}

/// UPDATE_CONSUMER_OFFSET. A value lower than the stored one is a deliberate rewind when it
/// comes from an admin tool (a synchronous request from a connection that is not a consumer of
/// the group) or from the queue's current consumer (the connection that last pulled it), and is
/// stored; from any other member of the group — a former owner whose commit arrives late — or
/// from a consumer this broker has no heartbeat of yet, it is ignored.
///
/// A synchronous request is answered only once the stored value is durable in the offset
/// journal (a oneway one is durable within the journal's next group commit) and, on a SYNC
/// master, once the replicas a SYNC send waits for have it (`progress_stream`).
pub(super) async fn update_offset(
    state: &BrokerState,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<UpdateConsumerOffsetRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let made_as = state.role.now();
    let since = crate::progress_stream::Since::now(&state.progress_stream);
    let (topic, group, queue_id) = (&header.topic, &header.consumer_group, header.queue_id);
    let committer = if made_as.is_slave() {
        // A slave's progress follows its master's stream. A client's commit here (its route
        // still names this broker as master, or it reads from a slave) is progress passed on:
        // taken as a rewind it would raise the queue's reset epoch, outrank every newer offset
        // the master streams, and be what this replica answers once elected.
        Committer::Progress
    } else if request
        .ext_fields
        .get(tidemark_protocol::acked::FORWARD_ONLY_FIELD)
        .is_some()
    {
        Committer::Progress
    } else if !state.clients.is_member(group, channel.id()) {
        if from_consumer(request) {
            // A consumer whose heartbeat has not reached this broker yet (it just started or
            // just became master): what it commits is its own progress, perhaps stale.
            Committer::Progress
        } else {
            Committer::Admin
        }
    } else if state
        .progress
        .offsets
        .is_current_consumer(topic, group, queue_id, channel.id())
    {
        Committer::CurrentConsumer
    } else {
        Committer::Progress
    };
    // What was written, not what a read fence shows: an offset is invalid only past the former.
    let max = state.log().written_max_offset(topic, queue_id);
    let acked = acked_ranges(request, header.commit_offset);
    let now = now_ms();
    let (outcome, journaled) = state.progress.offsets.commit(
        topic,
        group,
        queue_id,
        header.commit_offset,
        max,
        now,
        committer,
        acked.as_ref(),
    );
    // A deliberate rewind is an operator's (or the consumer's own) move: it goes in the
    // history. Routine commits are only checkpointed.
    let recorded = match outcome {
        CommitOutcome::Rewound { previous } => {
            let actor = Actor::of_request(state.security.acl.as_deref(), channel, request);
            let moved = QueueMove {
                topic: topic.clone(),
                queue_id,
                before: Some(previous),
                after: Some(header.commit_offset),
            };
            let history = &state.progress.history;
            let (_, recorded) = history.record(
                now,
                group,
                ChangeKind::Rewind,
                request.code,
                actor,
                vec![moved],
            );
            recorded
        }
        _ => Journaled::Nothing,
    };
    if request.ext_fields.get(RELEASED_FIELD) == Some("1") {
        // The consumer gave the queue up with this commit: whoever takes it over may start.
        state
            .progress
            .offsets
            .release(topic, group, queue_id, channel.id());
    }
    if request.is_oneway() {
        return success();
    }
    // Taken after the commit: it covers the commit's own record and the one that set the
    // value it confirmed, or — when it changed nothing — a barrier of its own.
    let published_through = since.through(&state.progress_stream, made_as);
    if let Err(failure) = state.progress.durable(journaled, recorded).await {
        return error(
            ResponseCode::SystemError,
            format!("consumer offset not durable: {failure}"),
        );
    }
    match crate::progress_stream::wait_replicated(
        state.log(),
        &state.progress_stream,
        published_through,
        made_as,
    )
    .await
    {
        ResponseCode::Success => success(),
        code => error(
            code,
            "consumer offset stored here, not yet confirmed by the in-sync replicas",
        ),
    }
}

pub(super) fn lock(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let body = match LockBatchRequestBody::from_json_bytes(&request.body) {
        Ok(body) => body,
        Err(failure) => {
            return error(
                ResponseCode::SystemError,
                format!("bad lock body: {failure}"),
            )
        }
    };
    let locked = state.locks.lock(
        &body.consumer_group,
        &body.client_id,
        &body.mq_set,
        std::time::Instant::now(),
        QUEUE_LOCK_TTL,
    );
    success().with_body(
        LockBatchResponseBody {
            lock_ok_mq_set: locked,
        }
        .to_json_bytes(),
    )
}

pub(super) fn unlock(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let body = match LockBatchRequestBody::from_json_bytes(&request.body) {
        Ok(body) => body,
        Err(failure) => {
            return error(
                ResponseCode::SystemError,
                format!("bad unlock body: {failure}"),
            )
        }
    };
    state
        .locks
        .unlock(&body.consumer_group, &body.client_id, &body.mq_set);
    success()
}

/// CHECK_CLIENT_CONFIG: a consumer's subscription, checked before it starts: a SQL92 selector
/// must compile (and property filtering be on).
pub(super) fn check_client_config(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let body = match CheckClientRequestBody::from_json_bytes(&request.body) {
        Ok(body) => body,
        Err(failure) => {
            return error(
                ResponseCode::SystemError,
                format!("bad check-client body: {failure}"),
            )
        }
    };
    let Some(subscription) = body.subscription_data else {
        return success();
    };
    match state.selectors.filter(
        Some(subscription.expression_type.as_str()),
        &subscription.sub_string,
        state.live.get().enable_property_filter,
    ) {
        Ok(_) => success(),
        Err((code, remark)) => error(code, remark),
    }
}
