//! Transactional messages: a half is invisible until committed, applied once however often
//! END_TRANSACTION comes, never delivered after a rollback, checked back with a producer of its
//! group when nobody decides, discarded after the maximum of checks, still pending (and
//! resolvable once) after a restart, and never checked back nor resolved by a slave.
//!
//! On the socket-free harness: the check-back rounds are run by the test
//! (`transaction::check::check_round`, what the service runs every `transaction_check_interval`),
//! so no test waits for a timer.

use crate::common::*;
use tidemark_broker::transaction::check::check_round;
use tidemark_protocol::headers::{CheckTransactionStateRequestHeader, EndTransactionRequestHeader};
use tidemark_protocol::message::{decode_offset_msg_id, sys_flag, MessageRecord};

const PRODUCER_GROUP: &str = "loopback_producer";

/// A half message of `body` for TOPIC queue 0, as the Java client sends one.
fn half_request(body: &str) -> RemotingCommand {
    let mut request = with_property(send_request(body, "TagA", 0), "TRAN_MSG", "true");
    request = with_property(request, "PGROUP", PRODUCER_GROUP);
    request
        .ext_fields
        .insert("f", sys_flag::TRANSACTION_PREPARED_TYPE.to_string());
    request
}

/// What END_TRANSACTION quotes: the half's commit-log offset and half-queue offset.
#[derive(Debug, Clone, Copy)]
struct HalfId {
    commit_log_offset: i64,
    queue_offset: i64,
}

async fn send_half(producer: &Connection, body: &str) -> HalfId {
    let response = producer.call(half_request(body)).await;
    assert_eq!(
        response.response_code(),
        ResponseCode::Success,
        "{:?}",
        response.remark
    );
    let header = response
        .decode_header::<SendMessageResponseHeader>()
        .expect("send header");
    assert_eq!(
        header.transaction_id.as_deref(),
        Some(format!("ID-{body}").as_str())
    );
    let (_, commit_log_offset) = decode_offset_msg_id(&header.msg_id).expect("offset msg id");
    HalfId {
        commit_log_offset,
        queue_offset: header.queue_offset,
    }
}

fn end_request(half: HalfId, group: &str, decision: i32, from_check: bool) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::EndTransaction,
        &EndTransactionRequestHeader {
            producer_group: group.into(),
            tran_state_table_offset: half.queue_offset,
            commit_log_offset: half.commit_log_offset,
            commit_or_rollback: decision,
            from_transaction_check: Some(from_check),
            msg_id: "ignored".into(),
            transaction_id: None,
        },
    )
}

async fn end(producer: &Connection, half: HalfId, decision: i32) -> ResponseCode {
    producer
        .call(end_request(half, PRODUCER_GROUP, decision, false))
        .await
        .response_code()
}

async fn delivered(connection: &Connection, topic: &str) -> Vec<MessageRecord> {
    let response = connection.call(pull_topic(topic, 0, 0)).await;
    if response.response_code() != ResponseCode::Success {
        return Vec::new();
    }
    decode_records(&response.body, DecodeOptions::default()).expect("records")
}

fn bodies(records: &[MessageRecord]) -> Vec<String> {
    records
        .iter()
        .map(|record| String::from_utf8_lossy(&record.body).into_owned())
        .collect()
}

/// A producer of the group (its heartbeat says so): check-backs go to it.
async fn producer(broker: &HandlerHarness) -> Connection {
    let producer = broker.connect();
    assert_eq!(
        producer.call(heartbeat()).await.response_code(),
        ResponseCode::Success
    );
    producer
}

/// One check-back round, as the service runs it.
async fn check_back(broker: &HandlerHarness) {
    check_round(&broker.state.transaction_checker()).await;
}

/// The check-backs the broker sent `producer` so far (a round sends them from a task of its
/// own: this waits for `expected` of them, and finds none when `expected` is 0).
async fn checks_sent(producer: &mut Connection, expected: usize) -> Vec<RemotingCommand> {
    let mut checks = Vec::new();
    while checks.len() < expected {
        let sent = tokio::time::timeout(WAIT, producer.from_broker.recv())
            .await
            .expect("a check-back within the wait")
            .expect("the broker is open");
        if sent.request_code() == RequestCode::CheckTransactionState {
            checks.push(sent);
        }
    }
    while let Ok(sent) = producer.from_broker.try_recv() {
        assert_ne!(
            sent.request_code(),
            RequestCode::CheckTransactionState,
            "more check-backs than expected"
        );
    }
    checks
}

#[tokio::test]
async fn a_commit_applies_once_and_a_rollback_never_delivers() {
    let broker = HandlerHarness::open(|_| {}).await;
    let client = broker.connect();

    let committed = send_half(&client, "commit-me").await;
    let rolled_back = send_half(&client, "roll-me-back").await;
    assert!(
        delivered(&client, TOPIC).await.is_empty(),
        "a half is invisible"
    );

    // Another group's END_TRANSACTION is refused and leaves the half pending.
    let foreign = client
        .call(end_request(committed, "someone_else", 8, false))
        .await;
    assert_eq!(foreign.response_code(), ResponseCode::SystemError);
    assert!(foreign
        .remark
        .unwrap_or_default()
        .contains("producer group wrong"));

    assert_eq!(end(&client, committed, 8).await, ResponseCode::Success);
    assert_eq!(end(&client, rolled_back, 12).await, ResponseCode::Success);
    // Retried, and contradicted: nothing is pending any more, nothing changes.
    assert_eq!(end(&client, committed, 8).await, ResponseCode::SystemError);
    assert_eq!(end(&client, committed, 12).await, ResponseCode::SystemError);
    assert_eq!(
        end(&client, rolled_back, 8).await,
        ResponseCode::SystemError
    );

    // Counted once each for RocketMQ 5's transaction metrics, under the real topic, both
    // resolved within five seconds of their halves.
    let finished = broker.state.stats.transactions.snapshot();
    assert_eq!(finished.len(), 1, "{finished:?}");
    let (topic, counts) = &finished[0];
    assert_eq!(topic, TOPIC);
    assert_eq!((counts.committed, counts.rolled_back), (1, 1));
    assert_eq!(counts.by_latency[0], 2, "{counts:?}");

    let records = delivered(&client, TOPIC).await;
    assert_eq!(bodies(&records), ["commit-me"], "committed once");
    let record = &records[0];
    assert_eq!(
        record.sys_flag & sys_flag::TRANSACTION_MASK,
        sys_flag::TRANSACTION_COMMIT_TYPE
    );
    assert_eq!(
        record.prepared_transaction_offset,
        committed.commit_log_offset
    );
    assert_eq!(record.properties.get("REAL_TOPIC"), None);
    assert_eq!(record.properties.get("TRAN_MSG"), None);
    assert_eq!(record.properties.get("UNIQ_KEY"), Some("ID-commit-me"));
    assert_eq!(record.properties.get("PGROUP"), Some(PRODUCER_GROUP));

    // Two op records, RocketMQ's shape: tag d, body the half-queue offset.
    let ops = delivered(&client, "RMQ_SYS_TRANS_OP_HALF_TOPIC").await;
    let mut op_bodies = bodies(&ops);
    op_bodies.sort();
    assert_eq!(op_bodies, ["0", "1"]);
    assert!(ops.iter().all(|op| op.properties.tags() == Some("d")));

    // A transactional batch is refused as RocketMQ refuses it.
    let mut batch = half_request("batch");
    batch.ext_fields.insert("m", "true");
    let refused = client.call(batch).await;
    assert_eq!(refused.response_code(), ResponseCode::MessageIllegal);
}

#[tokio::test]
async fn pending_halves_survive_a_restart_and_resolve_once() {
    let broker = HandlerHarness::open(|_| {}).await;
    let client = broker.connect();
    let first = send_half(&client, "first").await;
    let second = send_half(&client, "second").await;
    let third = send_half(&client, "third").await;
    assert_eq!(end(&client, first, 8).await, ResponseCode::Success);
    drop(client);

    let broker = broker.restart(|_| {}).await;
    let client = broker.connect();
    assert_eq!(
        end(&client, first, 8).await,
        ResponseCode::SystemError,
        "resolved before the restart"
    );
    assert_eq!(end(&client, second, 8).await, ResponseCode::Success);
    assert_eq!(end(&client, third, 12).await, ResponseCode::Success);
    assert_eq!(end(&client, second, 8).await, ResponseCode::SystemError);
    assert_eq!(
        bodies(&delivered(&client, TOPIC).await),
        ["first", "second"]
    );
}

#[tokio::test]
async fn an_undecided_half_is_checked_back_then_discarded_after_the_maximum() {
    // Due at once: when a half becomes due (the timeout, or its own immunity) is
    // `transaction::tests`'s concern; here, what a round does with it.
    let broker = HandlerHarness::open(|settings| {
        settings.transaction_timeout = 0;
        settings.transaction_check_max = 2;
    })
    .await;
    let mut client = producer(&broker).await;

    let answered = send_half(&client, "answered").await;
    check_back(&broker).await;
    let check = checks_sent(&mut client, 1).await.remove(0);
    let header = check
        .decode_header::<CheckTransactionStateRequestHeader>()
        .expect("check header");
    assert_eq!(header.commit_log_offset, answered.commit_log_offset);
    assert_eq!(header.tran_state_table_offset, answered.queue_offset);
    assert_eq!(header.msg_id.as_deref(), Some("ID-answered"));
    let (record, _) =
        MessageRecord::decode(&check.body, 0, DecodeOptions::default()).expect("record");
    assert_eq!(record.topic, TOPIC, "the producer sees its own topic");
    assert_eq!(String::from_utf8_lossy(&record.body), "answered");
    // The producer answers the check, as the Java client does (oneway, from_check).
    let mut answer = end_request(answered, PRODUCER_GROUP, 8, true);
    answer.ext_fields.insert("msgId", "ID-answered");
    client.send_oneway(answer).await;
    assert_eq!(bodies(&delivered(&client, TOPIC).await), ["answered"]);

    // Nobody answers this one: checked in two rounds, discarded in the third.
    let ignored = send_half(&client, "ignored").await;
    for round in 1..=2 {
        check_back(&broker).await;
        let checks = checks_sent(&mut client, 1).await;
        let header = checks[0]
            .decode_header::<CheckTransactionStateRequestHeader>()
            .expect("check header");
        assert_eq!(
            header.commit_log_offset, ignored.commit_log_offset,
            "round {round}"
        );
    }
    check_back(&broker).await;
    assert!(
        checks_sent(&mut client, 0).await.is_empty(),
        "checked past the maximum"
    );
    assert_eq!(
        bodies(&delivered(&client, "TRANS_CHECK_MAX_TIME_TOPIC").await),
        ["ignored"]
    );
    // The discard topic the broker made is on disk before its copy is stored, not only after
    // the next periodic save: a crash now must not leave the copy in a topic nobody knows.
    let topics = std::fs::read_to_string(
        broker
            .state
            .config
            .store_path_root_dir
            .join("config")
            .join("topics.json"),
    )
    .expect("topics.json");
    assert!(
        topics.contains("TRANS_CHECK_MAX_TIME_TOPIC"),
        "the discard topic is durable once a copy is in it: {topics}"
    );
    assert_eq!(
        end(&client, ignored, 8).await,
        ResponseCode::SystemError,
        "a discarded half cannot be committed"
    );
    assert_eq!(bodies(&delivered(&client, TOPIC).await), ["answered"]);
}

/// A slave holds the master's halves in its copy of the log but never resolves or checks them
/// back: END_TRANSACTION is refused there, and no producer connected to it is asked.
#[tokio::test]
async fn a_slave_never_checks_back_nor_resolves() {
    let broker = HandlerHarness::open(|settings| settings.transaction_timeout = 0).await;
    let client = broker.connect();
    let half = send_half(&client, "held by the master").await;
    drop(client);

    // The same store opened as a slave (no master to follow: the harness runs no replication).
    let slave = broker
        .restart(|settings| {
            settings.broker_role = tidemark_broker::BrokerRole::Slave;
            settings.broker_id = 1;
            settings.ha_master_address = Some("127.0.0.1:9".into());
            settings.transaction_timeout = 0;
        })
        .await;
    let mut client = producer(&slave).await;
    assert_eq!(end(&client, half, 8).await, ResponseCode::SlaveNotAvailable);
    check_back(&slave).await;
    assert!(
        checks_sent(&mut client, 0).await.is_empty(),
        "a slave checked back"
    );
}
