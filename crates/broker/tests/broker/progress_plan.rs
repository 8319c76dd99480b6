//! TIDEMARK_PLAN_PROGRESS_MOVE over the request handlers: the plan of a reset, a skip and a
//! clone names each queue's offset now and where the move takes it, by the rules the move
//! itself follows (only backwards without force); the move that follows lands exactly there;
//! planning changes nothing; a plan that names no move, or a topic the broker lacks, is refused.

use std::collections::BTreeMap;

use tidemark_protocol::body::{MessageQueueOffsets, ProgressPlan};
use tidemark_protocol::headers::{PlanProgressMoveRequestHeader, ResetOffsetRequestHeader};

use crate::common::*;

fn reset_plan(timestamp: i64, force: bool) -> PlanProgressMoveRequestHeader {
    PlanProgressMoveRequestHeader {
        consumer_group: GROUP.to_owned(),
        topic: Some(TOPIC.to_owned()),
        timestamp: Some(timestamp),
        is_force: Some(force),
        src_group: None,
        offline: None,
    }
}

async fn plan(connection: &Connection, header: &PlanProgressMoveRequestHeader) -> ProgressPlan {
    let request = RemotingCommand::request_with_header(RequestCode::PlanProgressMove, header);
    let answer = connection.succeeds(request).await;
    ProgressPlan::from_json_bytes(&answer.body).expect("plan body")
}

/// (queue, current, target) of every line.
fn lines(plan: &ProgressPlan) -> Vec<(i32, i64, i64)> {
    plan.queues
        .iter()
        .map(|line| (line.queue_id, line.current, line.target))
        .collect()
}

#[tokio::test]
async fn a_plan_is_the_move_that_follows_and_changes_nothing() {
    let broker = HandlerHarness::open(|_| {}).await;
    let operator = broker.connect();
    for index in 0..10 {
        operator
            .succeeds(send_request(&format!("m{index}"), "TagA", 0))
            .await;
    }
    operator.succeeds(commit_request(6)).await;

    // To the start, forced: queue 0 replays 6; the other queues hold nothing yet.
    let back = plan(&operator, &reset_plan(0, true)).await;
    assert_eq!(back.broker_name, "broker-a");
    assert!(!back.applied);
    assert_eq!(back.broadcasting, Some(false), "nobody is online");
    let queue_count = back.queues.len() as i32;
    assert!(queue_count >= 1);
    let mut expected = vec![(0, 6, 0)];
    expected.extend((1..queue_count).map(|queue| (queue, -1, 0)));
    assert_eq!(lines(&back), expected);
    // A skip: to the end of queue 0.
    let skip = plan(&operator, &reset_plan(-1, true)).await;
    assert_eq!(lines(&skip)[0], (0, 6, 10));
    // Without force only backwards: a move forward leaves queue 0 where it is.
    let forward = plan(&operator, &reset_plan(-1, false)).await;
    assert_eq!(lines(&forward)[0], (0, 6, 6));
    assert_eq!(operator.stored().await, 6, "planning moved the group");

    // The skip itself lands where its plan said.
    let request = RemotingCommand::request_with_header(
        RequestCode::InvokeBrokerToResetOffset,
        &ResetOffsetRequestHeader {
            topic: TOPIC.into(),
            group: GROUP.into(),
            timestamp: -1,
            is_force: true,
            queue_id: None,
            offset: None,
        },
    );
    let moved = operator.succeeds(request).await;
    let moved: BTreeMap<i32, i64> = MessageQueueOffsets::from_json_bytes(&moved.body)
        .expect("offsets")
        .offset_table
        .into_iter()
        .map(|(queue, offset)| (queue.queue_id, offset))
        .collect();
    let planned: BTreeMap<i32, i64> = skip
        .queues
        .iter()
        .map(|line| (line.queue_id, line.target))
        .collect();
    assert_eq!(moved, planned);

    // A clone into a group with no offsets: each queue starts where the source stands.
    let clone = plan(
        &operator,
        &PlanProgressMoveRequestHeader {
            consumer_group: "copy".to_owned(),
            topic: Some(TOPIC.to_owned()),
            timestamp: None,
            is_force: None,
            src_group: Some(GROUP.to_owned()),
            offline: Some(true),
        },
    )
    .await;
    assert_eq!(
        lines(&clone).iter().find(|line| line.0 == 0),
        Some(&(0, -1, 10))
    );
}

#[tokio::test]
async fn a_plan_without_a_move_or_of_an_unknown_topic_is_refused() {
    let broker = HandlerHarness::open(|_| {}).await;
    let operator = broker.connect();
    let nothing = PlanProgressMoveRequestHeader {
        timestamp: None,
        ..reset_plan(0, true)
    };
    let request = RemotingCommand::request_with_header(RequestCode::PlanProgressMove, &nothing);
    let answer = operator.call(request).await;
    assert_eq!(answer.response_code(), ResponseCode::SystemError);
    assert!(answer.remark.unwrap_or_default().contains("timestamp"));
    let unknown = PlanProgressMoveRequestHeader {
        topic: Some("NoSuchTopic".to_owned()),
        ..reset_plan(0, true)
    };
    let request = RemotingCommand::request_with_header(RequestCode::PlanProgressMove, &unknown);
    let answer = operator.call(request).await;
    assert_eq!(answer.response_code(), ResponseCode::TopicNotExist);
}
