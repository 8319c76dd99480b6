//! Timer messages (RocketMQ 5's `TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`) over
//! loopback: delivered at their time in order of it, not before; refused when too far ahead or
//! unreadable; pending ones survive a restart and are delivered once.

use std::time::Instant;

use crate::common::*;
use tidemark_broker::BrokerConfig;

fn now_ms() -> i64 {
    tidemark_remoting::now_ms()
}

fn bodies(records: &[tidemark_protocol::message::MessageRecord]) -> Vec<String> {
    records
        .iter()
        .map(|record| String::from_utf8_lossy(&record.body).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timer_messages_arrive_at_their_time_in_order_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    client
        .invoke(&cluster.broker, send_request("create", "TagA", 2), WAIT)
        .await
        .expect("answered");
    let start = now_ms();
    let sent_at = Instant::now();
    // Sent out of order; each names its time a different way.
    let sends = [
        with_property(
            send_request("at-900ms", "TagA", 2),
            "TIMER_DELIVER_MS",
            &(start + 900).to_string(),
        ),
        with_property(send_request("at-300ms", "TagA", 2), "TIMER_DELAY_MS", "300"),
        with_property(send_request("at-1s", "TagA", 2), "TIMER_DELAY_SEC", "1"),
        with_property(
            send_request("in-the-past", "TagA", 2),
            "TIMER_DELIVER_MS",
            &(start - 5_000).to_string(),
        ),
    ];
    for request in sends {
        let response = client
            .invoke(&cluster.broker, request, WAIT)
            .await
            .expect("answered");
        assert_eq!(
            response.response_code(),
            ResponseCode::Success,
            "{:?}",
            response.remark
        );
    }
    // Refused: three days and a second ahead, and a value that is no number.
    for (name, value) in [
        ("TIMER_DELAY_SEC", (259_200 + 1).to_string()),
        ("TIMER_DELIVER_MS", "soon".to_owned()),
    ] {
        let response = client
            .invoke(
                &cluster.broker,
                with_property(send_request("refused", "TagA", 2), name, &value),
                WAIT,
            )
            .await
            .expect("answered");
        assert_eq!(
            response.response_code(),
            ResponseCode::MessageIllegal,
            "{name}={value}"
        );
        assert!(
            response
                .remark
                .as_deref()
                .unwrap_or("")
                .contains("timer message illegal"),
            "{:?}",
            response.remark
        );
    }
    // At once: the ordinary message and the one whose time has passed.
    assert_eq!(
        bodies(&pull_all((&client, &cluster.broker), TOPIC, 2, 2).await),
        vec!["create", "in-the-past"]
    );
    let records = pull_all((&client, &cluster.broker), TOPIC, 2, 5).await;
    let arrived = sent_at.elapsed();
    assert_eq!(
        bodies(&records),
        vec!["create", "in-the-past", "at-300ms", "at-900ms", "at-1s"],
        "in order of their time"
    );
    assert!(
        arrived >= Duration::from_millis(990),
        "not before its time: {arrived:?}"
    );
    for record in &records[2..] {
        let due: i64 = record
            .properties
            .get("TIMER_OUT_MS")
            .expect("TIMER_OUT_MS")
            .parse()
            .expect("number");
        assert!(
            record.store_timestamp >= due,
            "{} stored at {} before {due}",
            String::from_utf8_lossy(&record.body),
            record.store_timestamp
        );
        assert!(
            record.store_timestamp - due < 300,
            "{} late by {} ms",
            String::from_utf8_lossy(&record.body),
            record.store_timestamp - due
        );
        assert_eq!(record.properties.get("REAL_TOPIC"), None);
        assert!(record.properties.get("TIMER_DEQUEUE_MS").is_some());
        assert!(record
            .properties
            .get("UNIQ_KEY")
            .is_some_and(|id| id.starts_with("ID-at-")));
    }

    // One pending across a graceful restart, one across a crash-free stop: each arrives once.
    client
        .invoke(
            &cluster.broker,
            with_property(
                send_request("after-restart", "TagA", 2),
                "TIMER_DELAY_MS",
                "2500",
            ),
            WAIT,
        )
        .await
        .expect("answered");
    client.shutdown();
    let (namesrv, stop_namesrv) = cluster.stop_broker().await;
    let (broker, stop_broker, task) = start_broker(config(dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let records = pull_all((&client, &broker), TOPIC, 2, 6).await;
    assert_eq!(
        bodies(&records).last().map(String::as_str),
        Some("after-restart")
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(
        pull_all((&client, &broker), TOPIC, 2, 7).await.len(),
        6,
        "each timer message delivered exactly once"
    );
    client.shutdown();
    let _ = stop_broker.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

/// With the timer wheel switched off, timer messages are refused as RocketMQ refuses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timer_messages_are_refused_when_the_wheel_is_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, stop_namesrv) = start_namesrv().await;
    let (broker, stop_broker, task) = start_broker(BrokerConfig {
        timer_wheel_enable: false,
        ..config(dir.path(), &namesrv)
    })
    .await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let response = client
        .invoke(
            &broker,
            with_property(send_request("timed", "TagA", 0), "TIMER_DELAY_MS", "100"),
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(response.response_code(), ResponseCode::SystemError);
    assert_eq!(
        response.remark.as_deref(),
        Some("accurate timer message is not enabled, timerWheelEnable is false")
    );
    client.shutdown();
    let _ = stop_broker.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}
