//! PULL_MESSAGE and LITE_PULL_MESSAGE, with long polling and the piggy-backed commit.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use std::sync::Arc;

use tidemark_protocol::acked::HAND_OFF_FIELD;

use tidemark_protocol::body::{perm, MessageModel, SubscriptionGroupConfig};
use tidemark_protocol::headers::{
    pull_sys_flag, PullMessageRequestHeader, PullMessageResponseHeader,
};
use tidemark_protocol::message::PHYSICAL_OFFSET_POSITION;
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::now_ms;
use tidemark_remoting::Channel;
use tidemark_store::{GetResult, GetStatus};

use super::{bad_header, error, offset_moved};
use crate::offsets::Committer;
use crate::state::BrokerState;

/// Messages and bytes one pull returns at most (RocketMQ's limits for data in memory).
const PULL_MESSAGES_MAX: usize = 32;
const PULL_BYTES_MAX: usize = 256 * 1024;
/// Longest a pull is held, whatever the client asks.
const SUSPEND_MAX: Duration = Duration::from_secs(30);

pub(super) async fn pull(
    state: &Arc<BrokerState>,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<PullMessageRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    if !perm::is_readable(state.live.get().broker_permission) {
        return error(
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] pulling message is forbidden",
                state.config.broker_ip1
            ),
        );
    }
    let found = state.metadata.groups.find_or_create(
        &header.consumer_group,
        state.live.get().auto_create_subscription_group,
        now_ms(),
    );
    let group = match found {
        Some((group, false)) => group,
        Some((group, true)) => {
            if let Err(failure) = state.persist_metadata_now().await {
                return super::metadata_not_durable(&failure);
            }
            group
        }
        None => {
            return error(
                ResponseCode::SubscriptionGroupNotExist,
                format!(
                    "subscription group [{}] does not exist",
                    header.consumer_group
                ),
            )
        }
    };
    // This connection consumes the queue now: a rewind it commits is deliberate.
    let hands_off = request.ext_fields.get(HAND_OFF_FIELD) == Some("1");
    let live = if hands_off {
        super::consumer::live_holder(
            state,
            &header.topic,
            &header.consumer_group,
            header.queue_id,
            channel.id(),
        )
    } else {
        None
    };
    state.progress.offsets.note_puller(
        &header.topic,
        &header.consumer_group,
        header.queue_id,
        channel.id(),
        hands_off,
        |holder| Some(holder) == live,
    );
    let acked = super::consumer::acked_ranges(request, header.commit_offset);
    let started = std::time::Instant::now();
    let first = process(state, channel, &header, &group, true, acked.as_ref());
    state
        .stats
        .pull_latency
        .observe(started.elapsed().as_secs_f64());
    match first {
        Outcome::Respond(response) => response,
        Outcome::Hold => {
            let wait = if state.live.get().long_polling_enable {
                Duration::from_millis(header.suspend_timeout_millis.max(0) as u64).min(SUSPEND_MAX)
            } else {
                Duration::from_millis(state.live.get().short_polling_time_mills)
            };
            let arrival = state.held_pulls.hold(&header.topic, header.queue_id);
            // A message may have landed between the read and the hold: look once more first.
            if state.log().max_offset(&header.topic, header.queue_id) <= header.queue_offset {
                let _ = tokio::time::timeout(wait, arrival).await;
            }
            // Second pass: never held again, and the commit offset is not applied twice.
            let started = std::time::Instant::now();
            let second = process(state, channel, &header, &group, false, None);
            state
                .stats
                .pull_latency
                .observe(started.elapsed().as_secs_f64());
            match second {
                Outcome::Respond(response) => response,
                Outcome::Hold => error(ResponseCode::SystemError, "pull held twice"),
            }
        }
    }
}

enum Outcome {
    Respond(RemotingCommand),
    Hold,
}

fn process(
    state: &BrokerState,
    channel: &Channel,
    header: &PullMessageRequestHeader,
    group: &SubscriptionGroupConfig,
    allow_suspend: bool,
    acked: Option<&tidemark_protocol::acked::AckedRanges>,
) -> Outcome {
    let respond = |code, remark: String| Outcome::Respond(error(code, remark));
    if !group.consume_enable {
        return respond(
            ResponseCode::NoPermission,
            format!(
                "subscription group no permission, {}",
                header.consumer_group
            ),
        );
    }
    let Some(topic) = state.metadata.topics.get(&header.topic) else {
        return respond(
            ResponseCode::TopicNotExist,
            format!("topic[{}] not exist, apply first please!", header.topic),
        );
    };
    if !perm::is_readable(topic.perm) {
        return respond(
            ResponseCode::NoPermission,
            format!("the topic[{}] pulling message is forbidden", header.topic),
        );
    }
    if header.queue_id < 0 || header.queue_id >= topic.read_queue_nums {
        return respond(
            ResponseCode::SystemError,
            format!(
                "queueId[{}] is illegal, topic:[{}] topicConfig.readQueueNums:[{}]",
                header.queue_id, header.topic, topic.read_queue_nums
            ),
        );
    }
    let expression = if header.sys_flag & pull_sys_flag::SUBSCRIPTION != 0 {
        match state.selectors.filter(
            header.expression_type.as_deref(),
            header.subscription.as_deref().unwrap_or("*"),
            state.live.get().enable_property_filter,
        ) {
            Ok(filter) => filter,
            Err((code, remark)) => return respond(code, remark),
        }
    } else {
        let Some(online) = state
            .clients
            .group_subscription(&header.consumer_group, &header.topic)
        else {
            return respond(
                ResponseCode::SubscriptionNotExist,
                format!(
                    "the consumer's group info not exist, group: {}",
                    header.consumer_group
                ),
            );
        };
        if online.message_model == MessageModel::Broadcasting && !group.consume_broadcast_enable {
            return respond(
                ResponseCode::NoPermission,
                format!(
                    "the consumer group[{}] can not consume by broadcast way",
                    header.consumer_group
                ),
            );
        }
        let Some(subscription) = online.subscription else {
            return respond(
                ResponseCode::SubscriptionNotExist,
                format!(
                    "the consumer's subscription not exist, group: {}",
                    header.consumer_group
                ),
            );
        };
        if subscription.sub_version < header.sub_version {
            super::stale_subscription::ask_member(
                &state.clients,
                &header.consumer_group,
                channel.id(),
            );
            return respond(
                ResponseCode::SubscriptionNotLatest,
                "the consumer's subscription not latest".to_owned(),
            );
        }
        match state.selectors.filter(
            Some(subscription.expression_type.as_str()),
            &subscription.sub_string,
            state.live.get().enable_property_filter,
        ) {
            Ok(filter) => filter,
            Err((code, remark)) => return respond(code, remark),
        }
    };

    if !state.role.is_slave() {
        let redirect = state.progress.offsets.take_pull_redirect(
            &header.topic,
            &header.consumer_group,
            header.queue_id,
            header.queue_offset,
        );
        if let Some(target) = redirect {
            return Outcome::Respond(reset_moved(state, header, target));
        }
    }
    let max_count = (header.max_msg_nums.max(1) as usize).min(PULL_MESSAGES_MAX);
    let max_bytes = header.max_msg_bytes.map_or(PULL_BYTES_MAX, |bytes| {
        (bytes.max(1) as usize).min(PULL_BYTES_MAX)
    });
    let result = match state.log().get_matching(
        &header.topic,
        header.queue_id,
        header.queue_offset,
        max_count,
        max_bytes,
        |code| expression.matches_code(code),
        |record| expression.matches_record(record),
    ) {
        Ok(result) => result,
        Err(failure) => {
            return respond(
                ResponseCode::SystemError,
                format!("store read failed: {failure}"),
            )
        }
    };

    // The consumer's progress rides on the pull; stored on the first pass only, and never by a slave.
    let commit = allow_suspend
        && header.sys_flag & pull_sys_flag::COMMIT_OFFSET != 0
        && !state.role.is_slave();
    if commit {
        state.progress.offsets.commit(
            &header.topic,
            &header.consumer_group,
            header.queue_id,
            header.commit_offset,
            // Behind a read fence the result's max is what readers see; validity is judged
            // against what was written.
            state
                .log()
                .written_max_offset(&header.topic, header.queue_id),
            now_ms(),
            Committer::Progress,
            acked,
        );
    }

    let (mut code, mut next_begin_offset) = response_code(&result, header.queue_offset);
    if state.role.is_slave() && code == ResponseCode::PullOffsetMoved {
        // A slave may simply be behind its master: never correct a consumer's offset from
        // here (RocketMQ's offsetCheckInSlave=false). Wait for the copy to catch up instead.
        code = ResponseCode::PullNotFound;
        next_begin_offset = header.queue_offset;
    }
    if code == ResponseCode::PullOffsetMoved {
        offset_moved::record(state, header, next_begin_offset);
    }
    let suggest_which_broker_id = suggest_broker(state, group, &result);
    let suspend = header.sys_flag & pull_sys_flag::SUSPEND != 0;
    if code == ResponseCode::PullNotFound && allow_suspend && suspend {
        return Outcome::Hold;
    }
    let mut body = BytesMut::with_capacity(result.messages.iter().map(Bytes::len).sum());
    for message in &result.messages {
        body.put_slice(message);
    }
    state.stats.messages_got_total.fetch_add(
        result.messages.len() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    state.stats.traffic.delivered(
        &header.topic,
        &header.consumer_group,
        result.messages.len() as u64,
        body.len() as u64,
    );
    if code == ResponseCode::Success {
        state.progress.offsets.note_pulled(
            &header.topic,
            &header.consumer_group,
            header.queue_id,
            next_begin_offset,
        );
    }
    let mut response = RemotingCommand::response(code, status_name(result.status).to_owned())
        .with_header(&PullMessageResponseHeader {
            suggest_which_broker_id,
            next_begin_offset,
            min_offset: result.min_offset,
            max_offset: result.max_offset,
            offset_delta: None,
            topic_sys_flag: None,
            group_sys_flag: None,
            forbidden_type: None,
        });
    response.body = body.freeze();
    Outcome::Respond(response)
}

/// PULL_OFFSET_MOVED to an operator's reset offset: every RocketMQ client takes the answer's
/// next offset as where to pull from (a push consumer also drops what it buffered and
/// re-reads its offset; a lite pull consumer just pulls from there).
fn reset_moved(
    state: &BrokerState,
    header: &PullMessageRequestHeader,
    target: i64,
) -> RemotingCommand {
    tracing::debug!(group = %header.consumer_group, topic = %header.topic, queue = header.queue_id, requested = header.queue_offset, target, "pull sent to the reset offset");
    RemotingCommand::response(
        ResponseCode::PullOffsetMoved,
        "OFFSET_RESET: the group's offset was reset by an operator".to_owned(),
    )
    .with_header(&PullMessageResponseHeader {
        suggest_which_broker_id: tidemark_protocol::body::MASTER_ID,
        next_begin_offset: target,
        min_offset: state.log().min_offset(&header.topic, header.queue_id),
        max_offset: state.log().max_offset(&header.topic, header.queue_id),
        offset_delta: None,
        topic_sys_flag: None,
        group_sys_flag: None,
        forbidden_type: None,
    })
}

/// Which broker the consumer should pull from next (RocketMQ 4.9): the master, unless
/// `slave_read_enable` is on and this read reached further back than the share of RAM the page
/// cache is trusted to hold (`access_message_in_memory_max_ratio`) — then the group's
/// `whichBrokerWhenConsumeSlowly`; a slave with reads enabled keeps consumers on the group's
/// `brokerId`.
fn suggest_broker(
    state: &BrokerState,
    group: &tidemark_protocol::body::SubscriptionGroupConfig,
    result: &GetResult,
) -> i64 {
    if !state.live.get().slave_read_enable {
        return tidemark_protocol::body::MASTER_ID;
    }
    let log_end = state.log().positions().1;
    let read_at = result
        .messages
        .last()
        .and_then(|record| record.get(PHYSICAL_OFFSET_POSITION..PHYSICAL_OFFSET_POSITION + 8))
        .and_then(|bytes| bytes.try_into().ok())
        .map(i64::from_be_bytes)
        .unwrap_or(log_end as i64);
    let behind = log_end.saturating_sub(read_at.max(0) as u64);
    let cold = behind
        > crate::stats::total_memory_bytes() / 100
            * state.live.get().access_message_in_memory_max_ratio;
    if cold {
        group.which_broker_when_consume_slowly
    } else if state.role.is_slave() {
        group.broker_id
    } else {
        tidemark_protocol::body::MASTER_ID
    }
}

/// The pull table of the protocol notes (§3.3): store status → response code, next offset.
fn response_code(result: &GetResult, requested: i64) -> (ResponseCode, i64) {
    match result.status {
        GetStatus::Found => (ResponseCode::Success, result.next_begin_offset),
        GetStatus::NoMatchedMessage | GetStatus::MessageWasRemoving => {
            (ResponseCode::PullRetryImmediately, result.next_begin_offset)
        }
        GetStatus::NoMatchedLogicQueue | GetStatus::NoMessageInQueue => {
            if requested != 0 {
                (ResponseCode::PullOffsetMoved, 0)
            } else {
                (ResponseCode::PullNotFound, 0)
            }
        }
        GetStatus::OffsetTooSmall => (ResponseCode::PullOffsetMoved, result.next_begin_offset),
        GetStatus::OffsetOverflowOne => (ResponseCode::PullNotFound, requested),
        GetStatus::OffsetOverflowBadly => (ResponseCode::PullOffsetMoved, result.next_begin_offset),
        GetStatus::OffsetFoundNull => (ResponseCode::PullNotFound, result.next_begin_offset),
    }
}

fn status_name(status: GetStatus) -> &'static str {
    match status {
        GetStatus::Found => "FOUND",
        GetStatus::NoMatchedMessage => "NO_MATCHED_MESSAGE",
        GetStatus::MessageWasRemoving => "MESSAGE_WAS_REMOVING",
        GetStatus::OffsetFoundNull => "OFFSET_FOUND_NULL",
        GetStatus::OffsetOverflowBadly => "OFFSET_OVERFLOW_BADLY",
        GetStatus::OffsetOverflowOne => "OFFSET_OVERFLOW_ONE",
        GetStatus::OffsetTooSmall => "OFFSET_TOO_SMALL",
        GetStatus::NoMatchedLogicQueue => "NO_MATCHED_LOGIC_QUEUE",
        GetStatus::NoMessageInQueue => "NO_MESSAGE_IN_QUEUE",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(status: GetStatus, next: i64) -> GetResult {
        GetResult {
            status,
            next_begin_offset: next,
            min_offset: 0,
            max_offset: 12,
            messages: Vec::new(),
        }
    }

    #[test]
    fn status_table_matches_rocketmq() {
        assert_eq!(
            response_code(&result(GetStatus::OffsetOverflowOne, 12), 12),
            (ResponseCode::PullNotFound, 12)
        );
        assert_eq!(
            response_code(&result(GetStatus::OffsetOverflowBadly, 12), 40),
            (ResponseCode::PullOffsetMoved, 12)
        );
        assert_eq!(
            response_code(&result(GetStatus::OffsetTooSmall, 3), 1),
            (ResponseCode::PullOffsetMoved, 3)
        );
        assert_eq!(
            response_code(&result(GetStatus::NoMessageInQueue, 0), 0),
            (ResponseCode::PullNotFound, 0)
        );
        assert_eq!(
            response_code(&result(GetStatus::NoMessageInQueue, 0), 5),
            (ResponseCode::PullOffsetMoved, 0)
        );
        assert_eq!(
            response_code(&result(GetStatus::NoMatchedMessage, 9), 4),
            (ResponseCode::PullRetryImmediately, 9)
        );
    }
}
