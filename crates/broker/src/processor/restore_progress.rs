//! TIDEMARK_RESTORE_PROGRESS: puts a group's queues back where the progress history says they
//! stood at a time, or before one of its entries — an undo. The move is applied as a reset is
//! (fenced against stale commits, POP cursors too, the group's clients told) and recorded as a
//! history entry itself, so a restore can be undone in turn. With `dryRun` only the plan is
//! answered: each queue's offset now and where it would go.

use std::collections::BTreeMap;

use tidemark_protocol::body::{MessageQueue, MessageQueueOffsets, ProgressPlan, ProgressPlanLine};
use tidemark_protocol::headers::{ResetOffsetRequestHeader, RestoreProgressRequestHeader};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::{now_ms, Channel};

use super::reset_offset::tell_clients;
use super::{bad_header, error, success};
use crate::history::{Actor, ChangeKind, QueueMove};
use crate::offsets::Journaled;
use crate::state::BrokerState;

pub(super) async fn restore_progress(
    state: &BrokerState,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<RestoreProgressRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let targets = match targets(state, &header) {
        Ok(targets) => targets,
        Err(reason) => return error(ResponseCode::SystemError, reason),
    };
    let mut queues = Vec::new();
    for ((topic, queue_id), target) in &targets {
        let current = state
            .progress
            .offsets
            .query(topic, &header.consumer_group, *queue_id);
        queues.push(ProgressPlanLine {
            topic: topic.clone(),
            queue_id: *queue_id,
            current: current.unwrap_or(-1),
            // Never past what the queue holds (a topic recreated since starts lower).
            target: (*target).min(state.log().max_offset(topic, *queue_id)),
        });
    }
    let mut plan = ProgressPlan {
        broker_name: state.config.broker_name.clone(),
        applied: false,
        entry: -1,
        queues,
        broadcasting: Some(super::progress_plan::is_broadcasting(
            state,
            &header.consumer_group,
            header.topic.as_deref(),
        )),
    };
    if header.dry_run.unwrap_or(false) {
        return success().with_body(plan.to_json_bytes());
    }
    let made_as = state.role.now();
    if let Some(refusal) = super::reset_offset::refuse_on_slave(state) {
        return refusal;
    }
    match apply(
        state,
        channel,
        request,
        &header.consumer_group,
        &plan.queues,
    )
    .await
    {
        Ok((entry, notices)) => {
            plan.applied = true;
            plan.entry = i64::try_from(entry).unwrap_or(i64::MAX);
            // Told only once the in-sync replicas hold it (see `reset_offset`).
            let answer = super::confirm_operator_change(
                state,
                made_as,
                success().with_body(plan.to_json_bytes()),
            )
            .await;
            if answer.response_code() == ResponseCode::Success {
                for (notice, offsets) in notices {
                    tell_clients(state, &notice, &offsets);
                }
            }
            answer
        }
        Err(reason) => error(ResponseCode::SystemError, reason),
    }
}

/// Where each queue goes: (topic, queue) → offset, from the history.
fn targets(
    state: &BrokerState,
    header: &RestoreProgressRequestHeader,
) -> Result<BTreeMap<(String, i32), i64>, String> {
    let group = &header.consumer_group;
    let topic = header.topic.as_deref().filter(|topic| !topic.is_empty());
    let history = &state.progress.history;
    let found: BTreeMap<(String, i32), Option<i64>> = match (header.at_ms, header.undo_entry) {
        (Some(at_ms), None) => history.position_at(group, topic, at_ms),
        (None, Some(id)) => {
            let entry = u64::try_from(id)
                .ok()
                .and_then(|id| history.entry(id))
                .filter(|entry| entry.group == *group)
                .ok_or_else(|| format!("no history entry {id} of group {group} on this broker"))?;
            entry
                .queues
                .into_iter()
                .filter(|queue| topic.is_none_or(|topic| queue.topic == topic))
                .map(|queue| ((queue.topic, queue.queue_id), queue.before))
                .collect()
        }
        _ => return Err("give either atMs or undoEntry".to_owned()),
    };
    // A queue with no offset then is left alone: removing an offset is not a restore.
    let targets: BTreeMap<_, _> = found
        .into_iter()
        .filter_map(|(queue, offset)| offset.map(|offset| (queue, offset)))
        .filter(|((topic, _), _)| state.metadata.topics.get(topic).is_some())
        .collect();
    if targets.is_empty() {
        return Err(format!(
            "the progress history of group {group} on this broker has nothing to restore there"
        ));
    }
    Ok(targets)
}

/// Moves every queue of `plan`, records the restore and waits until both are durable; returns
/// the history entry's id and, per topic, the notice for the group's clients.
async fn apply(
    state: &BrokerState,
    channel: &Channel,
    request: &RemotingCommand,
    group: &str,
    plan: &[ProgressPlanLine],
) -> Result<(u64, Vec<(ResetOffsetRequestHeader, MessageQueueOffsets)>), String> {
    let now = now_ms();
    let mut journaled = Journaled::Nothing;
    let mut pop_journaled = Journaled::Nothing;
    let mut moves = Vec::new();
    let mut by_topic: BTreeMap<&str, BTreeMap<MessageQueue, i64>> = BTreeMap::new();
    for line in plan {
        let (before, reset) =
            state
                .progress
                .offsets
                .reset(&line.topic, group, line.queue_id, line.target, now);
        journaled = reset;
        // (Nothing for a queue no POP consumer read: the last ticket covers the others.)
        let key = crate::pop::QueueKey::new(group, &line.topic, line.queue_id);
        match state.pop.reset(&key, line.target) {
            Journaled::Nothing => {}
            pending => pop_journaled = pending,
        }
        moves.push(QueueMove {
            topic: line.topic.clone(),
            queue_id: line.queue_id,
            before,
            after: Some(line.target),
        });
        let queue = MessageQueue::new(
            line.topic.clone(),
            state.config.broker_name.clone(),
            line.queue_id,
        );
        by_topic
            .entry(&line.topic)
            .or_default()
            .insert(queue, line.target);
    }
    let actor = Actor::of_request(state.security.acl.as_deref(), channel, request);
    let (entry, recorded) =
        state
            .progress
            .history
            .record(now, group, ChangeKind::Restore, request.code, actor, moves);
    let durable = match state.progress.durable(journaled, recorded).await {
        Ok(()) => state.pop.durable(pop_journaled).await,
        Err(failure) => Err(failure),
    };
    durable.map_err(|failure| format!("restore applied but not durable: {failure}"))?;
    tracing::info!(%group, entry, queues = plan.len(), "consumer offsets restored by an operator");
    let notices = by_topic
        .into_iter()
        .map(|(topic, offset_table)| {
            let notice = ResetOffsetRequestHeader {
                topic: topic.to_owned(),
                group: group.to_owned(),
                timestamp: now,
                is_force: true,
                queue_id: None,
                offset: None,
            };
            (notice, MessageQueueOffsets { offset_table })
        })
        .collect();
    Ok((entry, notices))
}
