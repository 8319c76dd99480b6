//! RECALL_MESSAGE (RocketMQ 5.3.2+) over loopback: a timer message's send is answered with a
//! recall handle; a recall before its due time means it is never delivered, across a restart
//! too; after it, and for handles that are not this broker's or topic's, the answer says why.

use tidemark_protocol::headers::{RecallMessageRequestHeader, RecallMessageResponseHeader};
use tidemark_protocol::message::RecallHandle;

use crate::common::*;

fn recall_request(topic: &str, handle: &str) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::RecallMessage,
        &RecallMessageRequestHeader {
            topic: topic.into(),
            recall_handle: handle.into(),
            producer_group: Some("loopback_producer".into()),
            broker_name: None,
        },
    )
}

fn recall_enabled(dir: &std::path::Path, namesrv: &str) -> BrokerConfig {
    BrokerConfig {
        recall_message_enable: true,
        ..config(dir, namesrv)
    }
}

fn handle_of(answer: &RemotingCommand) -> Option<String> {
    answer.ext_fields.get("recallHandle").map(str::to_owned)
}

fn timer(body: &str, delay_ms: i64) -> RemotingCommand {
    with_property(
        send_request(body, "TagA", 0),
        "TIMER_DELAY_MS",
        &delay_ms.to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recalled_timer_message_is_never_delivered_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, stop_namesrv) = start_namesrv().await;
    let settings = recall_enabled(dir.path(), &namesrv);
    let broker_name = settings.broker_name.clone();
    let (broker, stop_broker, task) = start_broker(settings).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let at = (&client, &broker);
    let plain = send_ok(at, send_request("plain", "TagA", 0)).await;
    assert_eq!(handle_of(&plain), None, "an ordinary message has no handle");

    let recalled = handle_of(&send_ok(at, timer("recalled", 2_500)).await).expect("handle");
    let kept = handle_of(&send_ok(at, timer("kept", 2_000)).await).expect("handle");
    let decoded = RecallHandle::decode(&recalled).expect("a RocketMQ handle");
    assert_eq!(
        (
            decoded.topic.as_str(),
            decoded.broker_name.as_str(),
            decoded.message_id.as_str()
        ),
        (TOPIC, broker_name.as_str(), "ID-recalled")
    );

    let answer = at.call(recall_request(TOPIC, &recalled)).await;
    assert_eq!(
        answer.response_code(),
        ResponseCode::Success,
        "{:?}",
        answer.remark
    );
    let header: RecallMessageResponseHeader = answer.decode_header().expect("header");
    assert_eq!(header.msg_id, "ID-recalled");
    let again = at.call(recall_request(TOPIC, &recalled)).await;
    assert_eq!(
        again.response_code(),
        ResponseCode::Success,
        "a recall repeated is answered the same"
    );

    // Stopped with both pending; the recall is all that keeps one from being delivered.
    client.shutdown();
    let _ = stop_broker.send(true);
    task.await.expect("task").expect("clean stop");
    let (broker, stop_broker, task) = start_broker(recall_enabled(dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let at = (&client, &broker);
    let delivered = pull_all(at, TOPIC, 0, 2).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let delivered_later = pull_all(at, TOPIC, 0, 3).await;
    let bodies: Vec<_> = delivered_later
        .iter()
        .map(|record| String::from_utf8_lossy(&record.body).into_owned())
        .collect();
    assert_eq!(delivered.len(), 2);
    assert_eq!(
        bodies,
        ["plain", "kept"],
        "the recalled message never arrives"
    );

    let late = at.call(recall_request(TOPIC, &kept)).await;
    assert_eq!(late.response_code(), ResponseCode::IllegalOperation);
    assert!(
        late.remark
            .as_deref()
            .unwrap_or("")
            .contains("timestamp invalid"),
        "{:?}",
        late.remark
    );
    client.shutdown();
    let _ = stop_broker.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recalls_that_cannot_be_taken_are_answered_as_rocketmq_answers_them() {
    let harness = HandlerHarness::open(|settings| settings.recall_message_enable = true).await;
    let connection = harness.connect();
    let sent = send_ok(&connection, timer("pending", 60_000)).await;
    let handle = handle_of(&sent).expect("handle");
    let decoded = RecallHandle::decode(&handle).expect("handle");
    let other_broker = RecallHandle {
        broker_name: "elsewhere".into(),
        ..decoded.clone()
    }
    .encode();
    let other_topic = RecallHandle {
        topic: "Elsewhere".into(),
        ..decoded.clone()
    }
    .encode();
    let too_far = RecallHandle {
        timestamp_ms: decoded.timestamp_ms + 10 * 86_400_000,
        ..decoded.clone()
    }
    .encode();
    let cases = [
        (
            TOPIC,
            "not a handle",
            ResponseCode::IllegalOperation,
            "recall handle is invalid",
        ),
        (
            TOPIC,
            other_broker.as_str(),
            ResponseCode::IllegalOperation,
            "handle is of broker elsewhere",
        ),
        (
            TOPIC,
            other_topic.as_str(),
            ResponseCode::IllegalOperation,
            "topic not match",
        ),
        (
            TOPIC,
            too_far.as_str(),
            ResponseCode::IllegalOperation,
            "timestamp invalid",
        ),
        (
            "Nowhere",
            handle.as_str(),
            ResponseCode::TopicNotExist,
            "not exist",
        ),
        (
            "%RETRY%g",
            handle.as_str(),
            ResponseCode::IllegalOperation,
            "retry or dead-letter",
        ),
    ];
    for (topic, handle, code, remark) in cases {
        let answer = connection.call(recall_request(topic, handle)).await;
        assert_eq!(
            answer.response_code(),
            code,
            "{topic} {handle}: {:?}",
            answer.remark
        );
        assert!(
            answer.remark.as_deref().unwrap_or("").contains(remark),
            "{topic} {handle}: {:?}",
            answer.remark
        );
    }
    // RocketMQ would take this send as a marker recalling any topic's message.
    let forged = with_property(
        timer("forged marker", 60_000),
        "TIMER_DEL_UNIQKEY",
        &format!("{TOPIC}+ID-pending"),
    );
    let refused = connection.call(forged).await;
    assert_eq!(refused.response_code(), ResponseCode::MessageIllegal);
    assert!(
        refused
            .remark
            .as_deref()
            .unwrap_or("")
            .contains("RECALL_MESSAGE"),
        "{:?}",
        refused.remark
    );
    let mut headless = RemotingCommand::request(RequestCode::RecallMessage);
    headless.ext_fields.insert("topic", TOPIC);
    assert_eq!(
        connection.call(headless).await.response_code(),
        ResponseCode::SystemError,
        "no handle: the field is named"
    );

    let harness = {
        drop(connection);
        harness
            .restart(|settings| settings.recall_message_enable = false)
            .await
    };
    let connection = harness.connect();
    let answer = connection.call(recall_request(TOPIC, &handle)).await;
    assert_eq!(
        answer.response_code(),
        ResponseCode::NoPermission,
        "off by default, as in RocketMQ"
    );
}

/// A store that moves from Apache RocketMQ 5.3.2+ brings its recalls: the marker Apache's recall
/// wrote into the timer topic settles the message it names once Tidemark takes the store over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apache_recall_marker_in_a_moved_store_keeps_its_message_back() {
    use tidemark_store::{MessageStore, NewMessage, TIMER_TOPIC};

    let dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, stop_namesrv) = start_namesrv().await;
    let settings = config(dir.path(), &namesrv);
    let (broker, stop_broker, task) = start_broker(settings.clone()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let at = (&client, &broker);
    send_ok(at, timer("apache-kept", 2_000)).await;
    let recalled = handle_of(&send_ok(at, timer("apache-recalled", 2_500)).await).expect("handle");
    let due = RecallHandle::decode(&recalled).expect("handle").due_ms();
    client.shutdown();
    let _ = stop_broker.send(true);
    task.await.expect("task").expect("clean stop");

    // What Apache's RECALL_MESSAGE leaves: a timer message naming `<topic>+<id>`, in the slot
    // of the handle's time, and Apache's timer checkpoint (nothing delivered yet).
    let store_config = settings.store_config();
    tokio::task::spawn_blocking(move || {
        let (store, _) = MessageStore::open(store_config).expect("store opens");
        let mut properties = Properties::new();
        properties.insert("TIMER_DEL_UNIQKEY", format!("{TOPIC}+ID-apache-recalled"));
        properties.insert("UNIQ_KEY", "ID-apache-recalled");
        properties.insert("TIMER_DELIVER_MS", (due + 1).to_string());
        properties.insert("TIMER_OUT_MS", (due / 1000 * 1000).to_string());
        properties.insert("REAL_TOPIC", TOPIC);
        properties.insert("REAL_QID", "0");
        let host = "127.0.0.1:10911".parse().expect("address");
        let marker = NewMessage::broker_record(
            TIMER_TOPIC,
            host,
            due - 2_000,
            Bytes::from_static(b"0"),
            properties,
        );
        store.put(&marker).expect("marker stored");
        store.shutdown().expect("store closes");
    })
    .await
    .expect("store task");
    let mut checkpoint = Vec::new();
    for value in [tidemark_remoting::now_ms() - 60_000, 0, 0] {
        checkpoint.extend_from_slice(&i64::to_be_bytes(value));
    }
    checkpoint.resize(4096, 0);
    std::fs::write(dir.path().join("config").join("timercheck"), checkpoint).expect("checkpoint");

    let (broker, stop_broker, task) = start_broker(settings).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let at = (&client, &broker);
    assert_eq!(
        pull_all(at, TOPIC, 0, 1).await.len(),
        1,
        "the other one arrives"
    );
    while tidemark_remoting::now_ms() < due + 1_000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bodies: Vec<_> = pull_all(at, TOPIC, 0, 0)
        .await
        .iter()
        .map(|record| String::from_utf8_lossy(&record.body).into_owned())
        .collect();
    assert_eq!(
        bodies,
        ["apache-kept"],
        "the recalled one and the marker never arrive"
    );
    client.shutdown();
    let _ = stop_broker.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}
