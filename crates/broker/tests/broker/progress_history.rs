//! Progress history over the request handlers: an admin tool's rewind, an operator's skip, a
//! clone and a group's deletion are each recorded with who (account, address, client), the
//! request, and every queue's offset before and after; routine commits are not; a restart
//! keeps the history; TIDEMARK_GET_PROGRESS_HISTORY reads it back, filtered by time; and
//! TIDEMARK_RESTORE_PROGRESS shows a plan, puts a group back, and is undone in turn.

use tidemark_protocol::body::ProgressHistory;
use tidemark_protocol::headers::{
    CloneGroupOffsetRequestHeader, DeleteSubscriptionGroupRequestHeader,
    GetProgressHistoryRequestHeader, ResetOffsetRequestHeader,
};

use crate::common::*;

async fn history(connection: &Connection, group: &str, since_ms: Option<i64>) -> ProgressHistory {
    let request = RemotingCommand::request_with_header(
        RequestCode::GetProgressHistory,
        &GetProgressHistoryRequestHeader {
            consumer_group: group.to_owned(),
            since_ms,
            checkpoints: None,
        },
    );
    let answer = connection.succeeds(request).await;
    ProgressHistory::from_json_bytes(&answer.body).expect("history body")
}

#[tokio::test]
async fn operator_moves_are_recorded_with_who_and_where_routine_commits_are_not() {
    let broker = HandlerHarness::open(|_| {}).await;
    let operator = broker.connect();
    for index in 0..10 {
        operator
            .succeeds(send_request(&format!("m{index}"), "TagA", 0))
            .await;
    }
    // Routine: the first commit and a forward one.
    operator.succeeds(commit_request(6)).await;
    operator.succeeds(commit_request(10)).await;
    assert!(history(&operator, GROUP, None).await.entries.is_empty());

    // mqadmin's updateConsumeOffset below the stored offset: a deliberate rewind.
    operator.succeeds(commit_request(3)).await;
    // skipAccumulatedMessage: a reset to timestamp -1.
    let skip = RemotingCommand::request_with_header(
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
    operator.succeeds(skip).await;

    let found = history(&operator, GROUP, None).await;
    assert_eq!(found.broker_name, "broker-a");
    let kinds: Vec<&str> = found
        .entries
        .iter()
        .map(|entry| entry.kind.as_str())
        .collect();
    assert_eq!(kinds, ["rewind", "skip"]);
    let rewind = &found.entries[0];
    assert_eq!(
        rewind.request_code,
        RequestCode::UpdateConsumerOffset.to_i32()
    );
    assert_eq!(rewind.account, "open", "no ACL on this broker");
    assert!(
        rewind.address.starts_with("127.0.0.1:"),
        "{}",
        rewind.address
    );
    assert!(rewind.client.starts_with("JAVA"), "{}", rewind.client);
    assert_eq!(rewind.queues.len(), 1);
    assert_eq!((rewind.queues[0].before, rewind.queues[0].after), (10, 3));
    let skip = &found.entries[1];
    assert_eq!(
        skip.request_code,
        RequestCode::InvokeBrokerToResetOffset.to_i32()
    );
    assert!(skip.id > rewind.id);
    let queue_0 = skip
        .queues
        .iter()
        .find(|queue| queue.queue_id == 0)
        .expect("queue 0");
    assert_eq!((queue_0.before, queue_0.after), (3, 10));
    assert!(
        skip.queues
            .iter()
            .filter(|queue| queue.queue_id != 0)
            .all(|queue| queue.before == -1 && queue.after == 0),
        "queues the group never committed: {:?}",
        skip.queues
    );
    let since = history(&operator, GROUP, Some(skip.time_ms)).await;
    assert_eq!(
        since.entries.len(),
        1,
        "entries before --since are left out"
    );

    // 5.x admins send offset -1 for "no offset": their skip is a skip too.
    operator.succeeds(commit_request(3)).await;
    let skip_5x = RemotingCommand::request_with_header(
        RequestCode::InvokeBrokerToResetOffset,
        &ResetOffsetRequestHeader {
            topic: TOPIC.into(),
            group: GROUP.into(),
            timestamp: -1,
            is_force: true,
            queue_id: None,
            offset: Some(-1),
        },
    );
    operator.succeeds(skip_5x).await;
    let kinds: Vec<String> = history(&operator, GROUP, None)
        .await
        .entries
        .into_iter()
        .map(|entry| entry.kind)
        .collect();
    assert_eq!(kinds, ["rewind", "skip", "rewind", "skip"]);
}

#[tokio::test]
async fn a_clone_and_a_deletion_are_recorded_for_the_group_they_change_and_kept_over_a_restart() {
    let broker = HandlerHarness::open(|_| {}).await;
    let operator = broker.connect();
    for index in 0..5 {
        operator
            .succeeds(send_request(&format!("m{index}"), "TagA", 0))
            .await;
    }
    operator.succeeds(commit_request(5)).await;
    let copy = "copy_of_loopback_group";
    let clone = RemotingCommand::request_with_header(
        RequestCode::CloneGroupOffset,
        &CloneGroupOffsetRequestHeader {
            src_group: GROUP.into(),
            dest_group: copy.into(),
            topic: Some(TOPIC.into()),
            offline: true,
        },
    );
    operator.succeeds(clone).await;
    let delete = RemotingCommand::request_with_header(
        RequestCode::DeleteSubscriptionGroup,
        &DeleteSubscriptionGroupRequestHeader {
            group_name: copy.into(),
            remove_offset: Some(true),
            clean_offset: None,
        },
    );
    operator.succeeds(delete).await;
    assert!(
        history(&operator, GROUP, None).await.entries.is_empty(),
        "the source group did not move"
    );
    drop(operator);

    let broker = broker.restart(|_| {}).await;
    let operator = broker.connect();
    let found = history(&operator, copy, None).await;
    let moves: Vec<(&str, i64, i64)> = found
        .entries
        .iter()
        .flat_map(|entry| {
            entry
                .queues
                .iter()
                .map(move |queue| (entry.kind.as_str(), queue.before, queue.after))
        })
        .collect();
    assert_eq!(moves, [("clone", -1, 5), ("group-deleted", 5, -1)]);
}

async fn restore(
    connection: &Connection,
    at_ms: Option<i64>,
    undo_entry: Option<i64>,
    dry_run: bool,
) -> RemotingCommand {
    let request = RemotingCommand::request_with_header(
        RequestCode::RestoreProgress,
        &tidemark_protocol::headers::RestoreProgressRequestHeader {
            consumer_group: GROUP.to_owned(),
            topic: None,
            at_ms,
            undo_entry,
            dry_run: Some(dry_run),
        },
    );
    connection.call(request).await
}

fn plan(answer: &RemotingCommand) -> tidemark_protocol::body::ProgressPlan {
    assert_eq!(answer.response_code(), ResponseCode::Success, "{answer:?}");
    tidemark_protocol::body::ProgressPlan::from_json_bytes(&answer.body).expect("plan body")
}

#[tokio::test]
async fn a_restore_shows_its_plan_puts_the_group_back_and_can_itself_be_undone() {
    let broker = HandlerHarness::open(|_| {}).await;
    let operator = broker.connect();
    for index in 0..10 {
        operator
            .succeeds(send_request(&format!("m{index}"), "TagA", 0))
            .await;
    }
    operator.succeeds(commit_request(8)).await;
    operator.succeeds(commit_request(2)).await; // an admin tool's rewind
    let rewind = history(&operator, GROUP, None).await.entries[0].clone();
    assert_eq!(rewind.kind, "rewind");

    // The plan alone moves nothing.
    let dry = plan(&restore(&operator, None, Some(rewind.id), true).await);
    assert!(!dry.applied);
    assert_eq!(dry.entry, -1);
    let lines: Vec<(i32, i64, i64)> = dry
        .queues
        .iter()
        .map(|line| (line.queue_id, line.current, line.target))
        .collect();
    assert_eq!(lines, [(0, 2, 8)]);
    assert_eq!(operator.stored().await, 2);

    // Undo the rewind, then undo the undo.
    let undone = plan(&restore(&operator, None, Some(rewind.id), false).await);
    assert!(undone.applied);
    assert_eq!(operator.stored().await, 8);
    let redone = plan(&restore(&operator, None, Some(undone.entry), false).await);
    assert_eq!(operator.stored().await, 2);
    assert!(redone.entry > undone.entry);

    // Where the group stood just before the rewind.
    plan(&restore(&operator, Some(rewind.time_ms - 1), None, false).await);
    assert_eq!(operator.stored().await, 8);

    let kinds: Vec<String> = history(&operator, GROUP, None)
        .await
        .entries
        .into_iter()
        .map(|entry| entry.kind)
        .collect();
    assert_eq!(kinds, ["rewind", "restore", "restore", "restore"]);

    let unknown = restore(&operator, None, Some(999), false).await;
    assert_eq!(unknown.response_code(), ResponseCode::SystemError);
    assert!(
        unknown
            .remark
            .as_deref()
            .unwrap_or("")
            .contains("no history entry 999"),
        "{unknown:?}"
    );
    let neither = restore(&operator, None, None, true).await;
    assert_eq!(neither.response_code(), ResponseCode::SystemError);
}
