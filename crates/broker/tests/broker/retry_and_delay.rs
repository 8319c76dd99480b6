//! Delay levels and retries over loopback: delayed messages arrive after their level (across a
//! restart too), failed messages go through the retry topic and end in the dead-letter queue.

use crate::common::*;

/// A delayed message arrives in its real queue no earlier than its level's delay, carrying
/// REAL_TOPIC/REAL_QID; one still pending across a graceful restart arrives exactly once after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_messages_arrive_after_their_delay_even_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    client
        .invoke(&cluster.broker, send_request("create", "TagA", 1), WAIT)
        .await
        .expect("answered");
    let sent_at = std::time::Instant::now();
    let response = client
        .invoke(
            &cluster.broker,
            with_delay(send_request("delayed-1s", "TagA", 1), 1),
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(
        response.response_code(),
        ResponseCode::Success,
        "{:?}",
        response.remark
    );
    assert_eq!(
        pull_all((&client, &cluster.broker), TOPIC, 1, 1)
            .await
            .len(),
        1,
        "only the undelayed message at first"
    );
    let records = pull_all((&client, &cluster.broker), TOPIC, 1, 2).await;
    assert!(
        sent_at.elapsed() >= Duration::from_millis(1_000),
        "not before its delay"
    );
    assert_eq!(records.len(), 2);
    assert_eq!(&records[1].body[..], b"delayed-1s");
    assert_eq!(records[1].properties.get("REAL_TOPIC"), Some(TOPIC));
    assert_eq!(records[1].properties.get("DELAY"), None);
    // A level-3 (3 s) message pending while the broker restarts gracefully.
    client
        .invoke(
            &cluster.broker,
            with_delay(send_request("delayed-3s", "TagA", 1), 3),
            WAIT,
        )
        .await
        .expect("answered");
    client.shutdown();
    let (namesrv, stop_namesrv) = cluster.stop_broker().await;
    let delay_offsets =
        std::fs::read_to_string(dir.path().join("config/delayOffset.json")).expect("persisted");
    assert!(delay_offsets.contains("offsetTable"), "{delay_offsets}");
    let (broker, stop_broker, task) = start_broker(config(dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let records = pull_all((&client, &broker), TOPIC, 1, 3).await;
    assert_eq!(
        records
            .iter()
            .map(|record| String::from_utf8_lossy(&record.body).into_owned())
            .collect::<Vec<_>>(),
        vec!["create", "delayed-1s", "delayed-3s"]
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        pull_all((&client, &broker), TOPIC, 1, 4).await.len(),
        3,
        "delivered exactly once"
    );
    client.shutdown();
    let _ = stop_broker.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

/// CONSUMER_SEND_MSG_BACK: the message comes back through %RETRY% with reconsume times 1 after
/// its delay, RETRY_TOPIC and ORIGIN_MESSAGE_ID set; past the group's limit it lands in %DLQ%,
/// where it can be read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_messages_retry_then_land_in_the_dead_letter_queue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    client
        .invoke(&cluster.broker, send_request("fails", "TagA", 0), WAIT)
        .await
        .expect("answered");
    let original = pull_all((&client, &cluster.broker), TOPIC, 0, 1)
        .await
        .remove(0);
    let send_back = |offset: i64, delay_level: i32, max: i32| {
        RemotingCommand::request_with_header(
            RequestCode::ConsumerSendMsgBack,
            &tidemark_protocol::headers::ConsumerSendMsgBackRequestHeader {
                offset,
                group: GROUP.into(),
                delay_level,
                origin_msg_id: None,
                origin_topic: Some(TOPIC.into()),
                unit_mode: false,
                max_reconsume_times: Some(max),
                broker_name: None,
            },
        )
    };
    let sent_at = std::time::Instant::now();
    let response = client
        .invoke(
            &cluster.broker,
            send_back(original.physical_offset, 1, 2),
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(
        response.response_code(),
        ResponseCode::Success,
        "{:?}",
        response.remark
    );
    let retry_topic = format!("%RETRY%{GROUP}");
    let first = pull_all((&client, &cluster.broker), &retry_topic, 0, 1).await;
    assert!(
        sent_at.elapsed() >= Duration::from_millis(1_000),
        "not before its delay level"
    );
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].reconsume_times, 1);
    assert_eq!(first[0].properties.get("RETRY_TOPIC"), Some(TOPIC));
    assert!(first[0].properties.get("ORIGIN_MESSAGE_ID").is_some());
    assert_eq!(&first[0].body[..], b"fails");
    // Second failure: back again with reconsume times 2; third: over the limit of 2, to the DLQ.
    client
        .invoke(
            &cluster.broker,
            send_back(first[0].physical_offset, 1, 2),
            WAIT,
        )
        .await
        .expect("answered");
    let second = pull_all((&client, &cluster.broker), &retry_topic, 0, 2).await;
    assert_eq!(second.len(), 2);
    assert_eq!(second[1].reconsume_times, 2);
    client
        .invoke(
            &cluster.broker,
            send_back(second[1].physical_offset, 1, 2),
            WAIT,
        )
        .await
        .expect("answered");
    let dlq = format!("%DLQ%{GROUP}");
    let max_offset = || {
        RemotingCommand::request_with_header(
            RequestCode::GetMaxOffset,
            &tidemark_protocol::headers::GetMaxOffsetRequestHeader {
                topic: dlq.clone(),
                queue_id: 0,
                committed: None,
                broker_name: None,
            },
        )
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let response = client
            .invoke(&cluster.broker, max_offset(), WAIT)
            .await
            .expect("answered");
        let header: OffsetResponseHeader = response.decode_header().expect("offset");
        if header.offset == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the third failure reaches the DLQ"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Readable and writable, as RocketMQ 4.9.7 creates it.
    let parked = pull_all((&client, &cluster.broker), &dlq, 0, 1).await;
    assert_eq!(parked.len(), 1);
    assert_eq!(&parked[0].body[..], b"fails");
    assert_eq!(parked[0].reconsume_times, 3);
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}
