//! TIDEMARK_PLAN_PROGRESS_MOVE: what a reset, skip or clone would do to a group on this broker —
//! each queue's committed offset now and where it would go — worked out by the very code the
//! move runs (`reset_offset::targets`, `clone_offset::sources`), so the plan an operator
//! confirms is the move that follows. Nothing changes.

use tidemark_protocol::body::MessageModel;
use tidemark_protocol::body::{ProgressPlan, ProgressPlanLine};
use tidemark_protocol::headers::{
    CloneGroupOffsetRequestHeader, PlanProgressMoveRequestHeader, ResetOffsetRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, ResponseCode};

use super::{bad_header, clone_offset, error, reset_offset, success};
use crate::state::BrokerState;

pub(super) fn plan_progress_move(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<PlanProgressMoveRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let group = &header.consumer_group;
    let queues = match &header.src_group {
        Some(src_group) => clone_lines(state, &header, src_group),
        None => match reset_lines(state, &header) {
            Ok(queues) => queues,
            Err(refusal) => return refusal,
        },
    };
    let plan = ProgressPlan {
        broker_name: state.config.broker_name.clone(),
        applied: false,
        entry: -1,
        queues,
        broadcasting: Some(is_broadcasting(state, group, header.topic.as_deref())),
    };
    success().with_body(plan.to_json_bytes())
}

fn reset_lines(
    state: &BrokerState,
    header: &PlanProgressMoveRequestHeader,
) -> Result<Vec<ProgressPlanLine>, RemotingCommand> {
    let (Some(topic), Some(timestamp)) = (&header.topic, header.timestamp) else {
        return Err(error(
            ResponseCode::SystemError,
            "a reset's plan needs topic and timestamp (a clone's needs srcGroup)",
        ));
    };
    let reset = ResetOffsetRequestHeader {
        topic: topic.clone(),
        group: header.consumer_group.clone(),
        timestamp,
        is_force: header.is_force.unwrap_or(true),
        queue_id: None,
        offset: None,
    };
    Ok(reset_offset::targets(state, &reset)?
        .into_iter()
        .map(|target| ProgressPlanLine {
            topic: topic.clone(),
            queue_id: target.queue_id,
            current: target.current.unwrap_or(-1),
            target: target.chosen,
        })
        .collect())
}

fn clone_lines(
    state: &BrokerState,
    header: &PlanProgressMoveRequestHeader,
    src_group: &str,
) -> Vec<ProgressPlanLine> {
    let clone = CloneGroupOffsetRequestHeader {
        src_group: src_group.to_owned(),
        dest_group: header.consumer_group.clone(),
        topic: header.topic.clone(),
        offline: header.offline.unwrap_or(false),
    };
    clone_offset::sources(state, &clone, false)
        .into_iter()
        .map(|(topic, queue_id, offset)| ProgressPlanLine {
            current: state
                .progress
                .offsets
                .query(&topic, &header.consumer_group, queue_id)
                .unwrap_or(-1),
            topic,
            queue_id,
            target: offset,
        })
        .collect()
}

/// Whether the group's online consumers of `topic` (of any topic, without one) broadcast.
pub(super) fn is_broadcasting(state: &BrokerState, group: &str, topic: Option<&str>) -> bool {
    let topics = match topic {
        Some(topic) => vec![topic.to_owned()],
        None => state.progress.offsets.topics_of_group(group),
    };
    topics.iter().any(|topic| {
        state
            .clients
            .group_subscription(group, topic)
            .is_some_and(|online| online.message_model == MessageModel::Broadcasting)
    })
}
