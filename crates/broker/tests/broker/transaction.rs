//! Transactional messages over loopback: a half is invisible until committed, applied once
//! however often END_TRANSACTION comes, never delivered after a rollback, checked back with a
//! producer of its group when nobody decides, discarded after the maximum of checks, and still
//! pending (and resolvable once) after a restart.

use crate::common::*;
use tidemark_protocol::headers::{CheckTransactionStateRequestHeader, EndTransactionRequestHeader};
use tidemark_protocol::message::{decode_offset_msg_id, sys_flag, MessageRecord};
use tidemark_remoting::{handler_fn, Reply};
use tokio::sync::mpsc;

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

async fn send_half(client: &RemotingClient, broker: &str, body: &str) -> HalfId {
    let response = client
        .invoke(broker, half_request(body), WAIT)
        .await
        .expect("answered");
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

async fn end(client: &RemotingClient, broker: &str, half: HalfId, decision: i32) -> ResponseCode {
    client
        .invoke(
            broker,
            end_request(half, PRODUCER_GROUP, decision, false),
            WAIT,
        )
        .await
        .expect("answered")
        .response_code()
}

async fn delivered(client: &RemotingClient, broker: &str, topic: &str) -> Vec<MessageRecord> {
    let response = client
        .invoke(broker, pull_topic(topic, 0, 0), WAIT)
        .await
        .expect("answered");
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

/// A producer's connection that hands every CHECK_TRANSACTION_STATE it gets to the test.
fn checked_client() -> (RemotingClient, mpsc::UnboundedReceiver<RemotingCommand>) {
    let (checks, checked) = mpsc::unbounded_channel();
    let handler = handler_fn(move |_channel, request: RemotingCommand| {
        let checks = checks.clone();
        async move {
            if request.request_code() == RequestCode::CheckTransactionState {
                let _ = checks.send(request);
            }
            Reply::NoResponse
        }
    });
    (
        RemotingClient::new(ClientConfig::default(), Some(Arc::new(handler))),
        checked,
    )
}

#[tokio::test]
async fn a_commit_applies_once_and_a_rollback_never_delivers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let broker = cluster.broker.clone();

    let committed = send_half(&client, &broker, "commit-me").await;
    let rolled_back = send_half(&client, &broker, "roll-me-back").await;
    assert!(
        delivered(&client, &broker, TOPIC).await.is_empty(),
        "a half is invisible"
    );

    // Another group's END_TRANSACTION is refused and leaves the half pending.
    let foreign = client
        .invoke(
            &broker,
            end_request(committed, "someone_else", 8, false),
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(foreign.response_code(), ResponseCode::SystemError);
    assert!(foreign
        .remark
        .unwrap_or_default()
        .contains("producer group wrong"));

    assert_eq!(
        end(&client, &broker, committed, 8).await,
        ResponseCode::Success
    );
    assert_eq!(
        end(&client, &broker, rolled_back, 12).await,
        ResponseCode::Success
    );
    // Retried, and contradicted: nothing is pending any more, nothing changes.
    assert_eq!(
        end(&client, &broker, committed, 8).await,
        ResponseCode::SystemError
    );
    assert_eq!(
        end(&client, &broker, committed, 12).await,
        ResponseCode::SystemError
    );
    assert_eq!(
        end(&client, &broker, rolled_back, 8).await,
        ResponseCode::SystemError
    );

    let records = pull_all((&client, &broker), TOPIC, 0, 1).await;
    assert_eq!(bodies(&records), ["commit-me"]);
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
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        delivered(&client, &broker, TOPIC).await.len(),
        1,
        "committed once"
    );

    // Two op records, RocketMQ's shape: tag d, body the half-queue offset.
    let ops = pull_all((&client, &broker), "RMQ_SYS_TRANS_OP_HALF_TOPIC", 0, 2).await;
    let mut op_bodies = bodies(&ops);
    op_bodies.sort();
    assert_eq!(op_bodies, ["0", "1"]);
    assert!(ops.iter().all(|op| op.properties.tags() == Some("d")));

    // A transactional batch is refused as RocketMQ refuses it.
    let mut batch = half_request("batch");
    batch.ext_fields.insert("m", "true");
    let refused = client.invoke(&broker, batch, WAIT).await.expect("answered");
    assert_eq!(refused.response_code(), ResponseCode::MessageIllegal);
    cluster.stop_broker().await;
}

#[tokio::test]
async fn pending_halves_survive_a_restart_and_resolve_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let broker = cluster.broker.clone();
    let first = send_half(&client, &broker, "first").await;
    let second = send_half(&client, &broker, "second").await;
    let third = send_half(&client, &broker, "third").await;
    assert_eq!(end(&client, &broker, first, 8).await, ResponseCode::Success);
    let (namesrv, stop_namesrv) = cluster.stop_broker().await;

    let (broker, stop, task) = start_broker(config(dir.path(), &namesrv)).await;
    client.shutdown();
    let client = RemotingClient::new(ClientConfig::default(), None);
    assert_eq!(
        end(&client, &broker, first, 8).await,
        ResponseCode::SystemError,
        "resolved before the restart"
    );
    assert_eq!(
        end(&client, &broker, second, 8).await,
        ResponseCode::Success
    );
    assert_eq!(
        end(&client, &broker, third, 12).await,
        ResponseCode::Success
    );
    assert_eq!(
        end(&client, &broker, second, 8).await,
        ResponseCode::SystemError
    );
    let records = pull_all((&client, &broker), TOPIC, 0, 2).await;
    assert_eq!(bodies(&records), ["first", "second"]);
    let _ = stop.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

#[tokio::test]
async fn an_undecided_half_is_checked_back_then_discarded_after_the_maximum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, stop_namesrv) = start_namesrv().await;
    let mut settings = config(dir.path(), &namesrv);
    settings.transaction_check_interval = 200;
    settings.transaction_timeout = 300;
    settings.transaction_check_max = 2;
    // No periodic save during the test: what is on disk is what the discard path wrote.
    settings.flush_consumer_offset_interval = 600_000;
    let (broker, stop, task) = start_broker(settings).await;

    let (client, mut checked) = checked_client();
    let registered = client
        .invoke(&broker, heartbeat(), WAIT)
        .await
        .expect("answered");
    assert_eq!(registered.response_code(), ResponseCode::Success);

    let answered = send_half(&client, &broker, "answered").await;
    let sent_at = tokio::time::Instant::now();
    let check = tokio::time::timeout(WAIT, checked.recv())
        .await
        .expect("a check-back within the wait")
        .expect("check");
    assert!(
        sent_at.elapsed() >= Duration::from_millis(250),
        "checked before the timeout: {:?}",
        sent_at.elapsed()
    );
    assert_eq!(check.request_code(), RequestCode::CheckTransactionState);
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
    client.invoke_oneway(&broker, answer).await.expect("sent");
    assert_eq!(
        bodies(&pull_all((&client, &broker), TOPIC, 0, 1).await),
        ["answered"]
    );

    // Nobody answers this one: two checks, then it goes to the discard topic.
    let ignored = send_half(&client, &broker, "ignored").await;
    let mut ignored_checks = 0;
    let discarded = loop {
        let records = delivered(&client, &broker, "TRANS_CHECK_MAX_TIME_TOPIC").await;
        while let Ok(check) = checked.try_recv() {
            let header = check
                .decode_header::<CheckTransactionStateRequestHeader>()
                .expect("check header");
            if header.commit_log_offset == ignored.commit_log_offset {
                ignored_checks += 1;
            }
        }
        if !records.is_empty() || sent_at.elapsed() > WAIT {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(bodies(&discarded), ["ignored"]);
    // The discard topic the broker made is on disk before its copy is stored, not only after
    // the next periodic save: a crash now must not leave the copy in a topic nobody knows.
    let topics = std::fs::read_to_string(dir.path().join("config").join("topics.json"))
        .expect("topics.json");
    assert!(
        topics.contains("TRANS_CHECK_MAX_TIME_TOPIC"),
        "the discard topic is durable once a copy is in it: {topics}"
    );
    assert_eq!(
        ignored_checks, 2,
        "checked transaction_check_max times, then discarded"
    );
    assert_eq!(
        end(&client, &broker, ignored, 8).await,
        ResponseCode::SystemError,
        "a discarded half cannot be committed"
    );
    assert_eq!(
        bodies(&delivered(&client, &broker, TOPIC).await),
        ["answered"]
    );
    let _ = stop.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

/// A slave holds the master's halves in its copy of the log but never resolves or checks them
/// back: END_TRANSACTION is refused there, and no producer connected to it is asked.
#[tokio::test]
async fn a_slave_never_checks_back_nor_resolves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let half = send_half(&client, &cluster.broker, "held by the master").await;
    let (namesrv, stop_namesrv) = cluster.stop_broker().await;
    client.shutdown();

    // The same store opened as a slave (its master is gone; it keeps trying in the background).
    let mut settings = config(dir.path(), &namesrv);
    settings.broker_role = tidemark_broker::BrokerRole::Slave;
    settings.broker_id = 1;
    settings.ha_master_address = Some("127.0.0.1:9".into());
    settings.transaction_check_interval = 100;
    settings.transaction_timeout = 100;
    let (slave, stop, task) = start_broker(settings).await;
    let (client, mut checked) = checked_client();
    let registered = client
        .invoke(&slave, heartbeat(), WAIT)
        .await
        .expect("answered");
    assert_eq!(registered.response_code(), ResponseCode::Success);
    assert_eq!(
        end(&client, &slave, half, 8).await,
        ResponseCode::SlaveNotAvailable
    );
    let check = tokio::time::timeout(Duration::from_secs(1), checked.recv()).await;
    assert!(check.is_err(), "a slave checked back: {check:?}");
    let _ = stop.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}
