//! CLONE_GROUP_OFFSET: one group's committed offsets copied to another (mqadmin
//! `cloneGroupOffset`, `tidemark admin clone-offset`), e.g. to start a new group where an old
//! one stands.

use tidemark_protocol::headers::CloneGroupOffsetRequestHeader;
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::{now_ms, Channel};
use tracing::{info, warn};

use super::{bad_header, error, success};
use crate::history::{Actor, ChangeKind, QueueMove};
use crate::offsets::Journaled;
use crate::state::BrokerState;

pub(super) async fn clone_group_offset(
    state: &BrokerState,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<CloneGroupOffsetRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    if header.src_group == header.dest_group {
        return error(
            ResponseCode::SystemError,
            "the source and destination groups are the same",
        );
    }
    let now = now_ms();
    let mut journaled = Journaled::Nothing;
    let mut moves = Vec::new();
    for (topic, queue_id, offset) in sources(state, &header, true) {
        // Tickets only grow: waiting for the last one covers the others.
        let (before, reset) =
            state
                .progress
                .offsets
                .reset(&topic, &header.dest_group, queue_id, offset, now);
        journaled = reset;
        moves.push(QueueMove {
            topic,
            queue_id,
            before,
            after: Some(offset),
        });
    }
    let cloned = moves.len();
    let actor = Actor::of_request(state.security.acl.as_deref(), channel, request);
    let (_, recorded) = state.progress.history.record(
        now,
        &header.dest_group,
        ChangeKind::Clone,
        request.code,
        actor,
        moves,
    );
    if let Err(failure) = state.progress.durable(journaled, recorded).await {
        return error(
            ResponseCode::SystemError,
            format!("offsets cloned but not durable: {failure}"),
        );
    }
    info!(src = %header.src_group, dest = %header.dest_group, queues = cloned, "consumer offsets cloned by an operator");
    success()
}

/// What a clone copies: (topic, queue, the source group's offset), by RocketMQ's rules; `tell`
/// logs each topic left out and why.
pub(super) fn sources(
    state: &BrokerState,
    header: &CloneGroupOffsetRequestHeader,
    tell: bool,
) -> Vec<(String, i32, i64)> {
    let topics = match header.topic.as_deref().filter(|topic| !topic.is_empty()) {
        Some(topic) => vec![topic.to_owned()],
        None => state.progress.offsets.topics_of_group(&header.src_group),
    };
    let mut copied = Vec::new();
    for topic in topics {
        if state.metadata.topics.get(&topic).is_none() {
            if tell {
                warn!(%topic, "offsets not cloned: the topic does not exist here");
            }
            continue;
        }
        // RocketMQ's rule: unless the caller says the source is offline, a topic the online
        // source group does not subscribe is left alone.
        if !header.offline {
            if let Some(online) = state.clients.group_subscription(&header.src_group, &topic) {
                if online.subscribes_anything && online.subscription.is_none() {
                    if tell {
                        warn!(%topic, group = %header.src_group, "offsets not cloned: the online group does not subscribe the topic");
                    }
                    continue;
                }
            }
        }
        let Some(offsets) = state
            .progress
            .offsets
            .queue_offsets(&topic, &header.src_group)
        else {
            continue;
        };
        copied.extend(
            offsets
                .into_iter()
                .map(|(queue_id, offset)| (topic.clone(), queue_id, offset)),
        );
    }
    copied
}
