//! INVOKE_BROKER_TO_RESET_OFFSET: an operator's reset or skip of a group, recorded in the
//! progress history.

use std::collections::BTreeMap;

use tidemark_protocol::body::{
    MessageQueue, MessageQueueOffsetForC, MessageQueueOffsets, ResetOffsetBodyForC,
};
use tidemark_protocol::headers::ResetOffsetRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{now_ms, Channel};

use super::{bad_header, error, success};
use crate::history::{Actor, ChangeKind, QueueMove};
use crate::state::BrokerState;

/// INVOKE_BROKER_TO_RESET_OFFSET: an operator moves a group's progress on a topic to a time
/// (−1: the end) or, from 5.x admins, to an explicit offset. The broker applies it to its own
/// table (fenced against stale commits, see `offsets`), answers once the replicas a SYNC send
/// waits for hold it, and only then tells the group's clients with
/// RESET_CONSUMER_CLIENT_OFFSET, as RocketMQ 4.9 does; unlike 4.9 it also resets an offline group
/// (4.9 answers CONSUMER_NOT_ONLINE, and the admin then falls back to plain commits, which
/// Tidemark's forward-only rule would refuse).
pub(super) async fn reset_offset(
    state: &BrokerState,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<ResetOffsetRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let made_as = state.role.now();
    if let Some(refusal) = refuse_on_slave(state) {
        return refusal;
    }
    let targets = match targets(state, &header) {
        Ok(targets) => targets,
        Err(refusal) => return refusal,
    };
    let now = now_ms();
    let mut offset_table = BTreeMap::new();
    let mut journaled = crate::offsets::Journaled::Nothing;
    let mut pop_journaled = crate::offsets::Journaled::Nothing;
    let mut moves = Vec::new();
    for Target {
        queue_id, chosen, ..
    } in targets
    {
        // Tickets only grow: waiting for the last reset's covers the others.
        let (before, reset) =
            state
                .progress
                .offsets
                .reset(&header.topic, &header.group, queue_id, chosen, now);
        journaled = reset;
        moves.push(QueueMove {
            topic: header.topic.clone(),
            queue_id,
            before,
            after: Some(chosen),
        });
        // A group that pops restarts from there too, with nothing in flight.
        // A queue no POP consumer read answers Nothing: keep the last ticket, which covers
        // the earlier ones.
        let key = crate::pop::QueueKey::new(&header.group, &header.topic, queue_id);
        match state.pop.reset(&key, chosen) {
            crate::offsets::Journaled::Nothing => {}
            pending => pop_journaled = pending,
        }
        offset_table.insert(
            MessageQueue::new(
                header.topic.clone(),
                state.config.broker_name.clone(),
                queue_id,
            ),
            chosen,
        );
    }
    // A reset to timestamp -1 with no offset is RocketMQ's "skip accumulated"; 5.x admins send
    // offset -1 for "no offset".
    let explicit_offset = header.offset.is_some_and(|offset| offset >= 0);
    let kind = if !explicit_offset && header.timestamp == -1 {
        ChangeKind::Skip
    } else {
        ChangeKind::Reset
    };
    let actor = Actor::of_request(state.security.acl.as_deref(), channel, request);
    let (_, recorded) =
        state
            .progress
            .history
            .record(now, &header.group, kind, request.code, actor, moves);
    let durable = match state.progress.durable(journaled, recorded).await {
        Ok(()) => state.pop.durable(pop_journaled).await,
        Err(failure) => Err(failure),
    };
    if let Err(failure) = durable {
        return error(
            ResponseCode::SystemError,
            format!("reset applied but not durable: {failure}"),
        );
    }
    tracing::info!(topic = %header.topic, group = %header.group, queues = offset_table.len(), "consumer offsets reset by an operator");
    let body = MessageQueueOffsets { offset_table };
    let notice = ResetOffsetRequestHeader {
        queue_id: None,
        offset: None,
        ..header.clone()
    };
    // Clients hear of it only once the in-sync replicas hold it: a deposed master that runs a
    // reset queued while it was paused is never confirmed, and its notice would replay what
    // the group had already committed on the real master.
    let answer =
        super::confirm_operator_change(state, made_as, success().with_body(body.to_json_bytes()))
            .await;
    if answer.response_code() == ResponseCode::Success {
        tell_clients(state, &notice, &body);
    }
    answer
}

/// A slave's progress follows its master's: an operator's move there would be overwritten, and
/// the clients it told would replay for nothing (a master deposed while paused runs the moves
/// queued meanwhile once it learns of it).
pub(super) fn refuse_on_slave(state: &BrokerState) -> Option<RemotingCommand> {
    state.role.is_slave().then(|| {
        error(
            ResponseCode::ServiceNotAvailable,
            "this broker is a slave: consumer progress is moved on the master",
        )
    })
}

/// Where a reset moves one queue of the group.
pub(super) struct Target {
    pub queue_id: i32,
    pub current: Option<i64>,
    pub chosen: i64,
}

/// Where the reset `header` asks for moves each queue, by RocketMQ's rules: to an explicit
/// offset (5.x admins; never past the queue's end), to the end (timestamp −1, a skip), or to
/// the first message stored at or after the time; without force only backwards. Refused as
/// the reset would be (no such topic or queue, an index that cannot be searched).
pub(super) fn targets(
    state: &BrokerState,
    header: &ResetOffsetRequestHeader,
) -> Result<Vec<Target>, RemotingCommand> {
    let Some(config) = state.metadata.topics.get(&header.topic) else {
        return Err(error(
            ResponseCode::TopicNotExist,
            format!("[reset-offset] topic does not exist, {}", header.topic),
        ));
    };
    let queues: Vec<i32> = match header.queue_id.filter(|queue| *queue >= 0) {
        Some(queue) if queue < config.write_queue_nums => vec![queue],
        Some(queue) => {
            return Err(error(
                ResponseCode::SystemError,
                format!("queueId[{queue}] is illegal"),
            ))
        }
        None => (0..config.write_queue_nums).collect(),
    };
    let mut targets = Vec::with_capacity(queues.len());
    for queue_id in queues {
        let target = match header.offset {
            Some(offset) if offset >= 0 => {
                Ok(offset.min(state.log().max_offset(&header.topic, queue_id)))
            }
            _ if header.timestamp == -1 => Ok(state.log().max_offset(&header.topic, queue_id)),
            _ => state
                .log()
                .offset_by_timestamp(&header.topic, queue_id, header.timestamp),
        };
        let target = target
            .map_err(|failure| {
                error(
                    ResponseCode::SystemError,
                    format!("reset failed: {failure}"),
                )
            })?
            .max(0);
        let current = state
            .progress
            .offsets
            .query(&header.topic, &header.group, queue_id);
        // Without force, a reset only ever moves a group backwards (RocketMQ's rule).
        let chosen = match current {
            Some(current) if !header.is_force && target >= current => current,
            _ => target,
        };
        targets.push(Target {
            queue_id,
            current,
            chosen,
        });
    }
    Ok(targets)
}

/// Tells the group's online clients (`notice.group`) their offsets in `notice.topic` moved
/// (RESET_CONSUMER_CLIENT_OFFSET, as RocketMQ 4.9's broker does), without waiting for them.
/// POP requests held on the topic wake up too: a reset backwards made messages poppable again
/// that no arrival would announce, and a gRPC PushConsumer's long poll would otherwise sit out
/// its whole timeout before the replay begins.
pub(super) fn tell_clients(
    state: &BrokerState,
    notice: &ResetOffsetRequestHeader,
    offsets: &MessageQueueOffsets,
) {
    state.held_pulls.notify_topic(&notice.topic);
    for client in state.clients.group_clients(&notice.group) {
        // C++ clients cannot read object map keys: they get the list form.
        let payload = if client.language == tidemark_protocol::LanguageCode::Cpp {
            ResetOffsetBodyForC {
                offset_table: offsets
                    .offset_table
                    .iter()
                    .map(|(queue, offset)| MessageQueueOffsetForC {
                        topic: queue.topic.clone(),
                        broker_name: queue.broker_name.clone(),
                        queue_id: queue.queue_id,
                        offset: *offset,
                    })
                    .collect(),
            }
            .to_json_bytes()
        } else {
            offsets.to_json_bytes()
        };
        let notice =
            RemotingCommand::request_with_header(RequestCode::ResetConsumerClientOffset, notice)
                .with_body(payload);
        tokio::spawn(async move {
            if let Err(failure) = client.channel.oneway(notice).await {
                tracing::debug!(%failure, "could not tell a consumer about an offset reset");
            }
        });
    }
}
