//! GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG: the whole configuration under RocketMQ's names,
//! live keys applied at once and written back (retention too: the next cleanup follows it),
//! start-only keys refused with the reason and unknown keys refused, and a read-only broker
//! announced as such to the name server.

use crate::common::*;
use tidemark_protocol::body::TopicRouteData;
use tidemark_protocol::headers::GetRouteInfoRequestHeader;

fn properties(response: &RemotingCommand) -> Vec<(String, String)> {
    String::from_utf8_lossy(&response.body)
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

fn value_of(response: &RemotingCommand, key: &str) -> Option<String> {
    properties(response)
        .into_iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| value)
}

fn update(body: &str) -> RemotingCommand {
    RemotingCommand::request(RequestCode::UpdateBrokerConfig).with_body(body.as_bytes().to_vec())
}

async fn route_perm(client: &RemotingClient, namesrv: &str) -> Option<i32> {
    let request = RemotingCommand::request_with_header(
        RequestCode::GetRouteInfoByTopic,
        &GetRouteInfoRequestHeader {
            topic: TOPIC.into(),
            accept_standard_json_only: None,
        },
    );
    let response = client.invoke(namesrv, request, WAIT).await.ok()?;
    let route = TopicRouteData::from_json_bytes(&response.body).ok()?;
    route.queue_datas.first().map(|queue| queue.perm)
}

#[tokio::test]
async fn live_keys_change_at_once_and_are_written_back_others_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, stop_namesrv) = start_namesrv().await;
    let file = dir.path().join("broker.conf");
    std::fs::write(&file, "# my broker\nbrokerName=broker-a\ntraceOn=true\n").expect("write");
    let mut settings = config(&dir.path().join("store"), &namesrv);
    settings.config_file = Some(file.clone());
    let (broker, stop, task) = start_broker(settings).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let sent = client
        .invoke(&broker, send_request("m-1", "", 0), WAIT)
        .await
        .expect("answered");
    assert_eq!(sent.response_code(), ResponseCode::Success);

    let shown = client
        .invoke(
            &broker,
            RemotingCommand::request(RequestCode::GetBrokerConfig),
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(shown.response_code(), ResponseCode::Success);
    assert!(shown
        .ext_fields
        .get("version")
        .is_some_and(|v| v.contains("counter")));
    assert_eq!(value_of(&shown, "brokerName").as_deref(), Some("broker-a"));
    assert_eq!(value_of(&shown, "brokerPermission").as_deref(), Some("6"));
    assert_eq!(
        value_of(&shown, "listenPort"),
        Some(broker.rsplit(':').next().expect("port").to_owned())
    );
    assert!(properties(&shown).len() > 50, "every key is shown");

    // Read-only: RocketMQ's black-list answer. Unknown: refused. Nothing changes with them.
    let refused = client
        .invoke(&broker, update("brokerPermission=4\nlistenPort=1"), WAIT)
        .await
        .expect("answered");
    assert_eq!(refused.response_code(), ResponseCode::NoPermission);
    assert!(refused
        .remark
        .as_deref()
        .is_some_and(|remark| remark.starts_with("Can not update config in black list.")));
    let unknown = client
        .invoke(&broker, update("noSuchKey=1"), WAIT)
        .await
        .expect("answered");
    assert_eq!(unknown.response_code(), ResponseCode::InvalidParameter);
    let bad = client
        .invoke(&broker, update("brokerPermission=9"), WAIT)
        .await
        .expect("answered");
    assert_eq!(bad.response_code(), ResponseCode::InvalidParameter);
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        "# my broker\nbrokerName=broker-a\ntraceOn=true\n",
        "a refused update writes nothing"
    );

    // Read-only broker: sends refused, the route shows read-only, the file has it.
    let writable = wait_for_perm(&client, &namesrv, 6).await;
    assert!(writable, "registered read-write first");
    let applied = client
        .invoke(&broker, update("brokerPermission=4\ntraceOn=false"), WAIT)
        .await
        .expect("answered");
    assert_eq!(
        applied.response_code(),
        ResponseCode::Success,
        "{:?}",
        applied.remark
    );
    let sent = client
        .invoke(&broker, send_request("m-2", "", 0), WAIT)
        .await
        .expect("answered");
    assert_eq!(sent.response_code(), ResponseCode::NoPermission);
    assert!(
        wait_for_perm(&client, &namesrv, 4).await,
        "the name server routes the topic read-only"
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        "# my broker\nbrokerName=broker-a\ntraceOn=false\nbrokerPermission=4\n"
    );
    let shown = client
        .invoke(
            &broker,
            RemotingCommand::request(RequestCode::GetBrokerConfig),
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(value_of(&shown, "brokerPermission").as_deref(), Some("4"));
    assert_eq!(value_of(&shown, "traceOn").as_deref(), Some("false"));

    // Writable again.
    let applied = client
        .invoke(&broker, update("brokerPermission=6"), WAIT)
        .await
        .expect("answered");
    assert_eq!(applied.response_code(), ResponseCode::Success);
    let sent = client
        .invoke(&broker, send_request("m-3", "", 0), WAIT)
        .await
        .expect("answered");
    assert_eq!(sent.response_code(), ResponseCode::Success);
    let _ = stop.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

async fn wait_for_perm(client: &RemotingClient, namesrv: &str, perm: i32) -> bool {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        if route_perm(client, namesrv).await == Some(perm) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A broker configured in code keeps its updates in the store and takes them at the next start.
#[tokio::test]
async fn without_a_file_updates_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, stop_namesrv) = start_namesrv().await;
    let (broker, stop, task) = start_broker(config(dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let applied = client
        .invoke(&broker, update("consumer_stuck_threshold_ms=1234"), WAIT)
        .await
        .expect("answered");
    assert_eq!(applied.response_code(), ResponseCode::Success);
    let _ = stop.send(true);
    task.await.expect("task").expect("clean stop");
    assert!(dir
        .path()
        .join("config/liveBrokerConfig.properties")
        .exists());

    let (broker, stop, task) = start_broker(config(dir.path(), &namesrv)).await;
    let shown = client
        .invoke(
            &broker,
            RemotingCommand::request(RequestCode::GetBrokerConfig),
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(
        value_of(&shown, "consumerStuckThresholdMs").as_deref(),
        Some("1234")
    );
    let _ = stop.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

async fn broker_config(client: &RemotingClient, broker: &str) -> RemotingCommand {
    client
        .invoke(
            broker,
            RemotingCommand::request(RequestCode::GetBrokerConfig),
            WAIT,
        )
        .await
        .expect("answered")
}

/// Polls `done` until it holds or [`WAIT`] has passed; whether it held.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

/// Retention is live, as in RocketMQ, where operators lower `fileReservedTime` during an
/// incident to free disk: the update is shown, written to the file, and the next retention
/// pass deletes the segments it expired — segments the 72 h the broker started with kept.
/// Mixed with a start-only key it is refused whole, and the refusal says why.
#[tokio::test]
async fn a_lowered_reserved_time_is_applied_by_the_next_retention_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, stop_namesrv) = start_namesrv().await;
    let file = dir.path().join("broker.conf");
    std::fs::write(&file, "brokerName=broker-a\nfileReservedTime=72\n").expect("write");
    let store = dir.path().join("store");
    let mut settings = BrokerConfig {
        // Small segments, so a few sends close some.
        mapped_file_size_commit_log: 128 * 1024,
        max_message_size: 16 * 1024,
        // Expired segments go at any hour (a real disk is more than 0% used); none goes before
        // it expires, and writes are never refused for space, whatever this disk holds.
        disk_max_used_space_ratio: 0,
        clean_file_forcibly_enable: false,
        disk_space_clean_forcibly_ratio: 100,
        disk_space_warning_level_ratio: 100,
        // A pass every 100 ms.
        clean_resource_interval: 100,
        flush_interval_commit_log: 50,
        ..config(&store, &namesrv)
    };
    settings.config_file = Some(file.clone());
    let (broker, stop, task) = start_broker(settings).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let filler = "x".repeat(8_000);
    for index in 0..40 {
        send_ok(
            (&client, &broker),
            send_request(&format!("{index}-{filler}"), "", 0),
        )
        .await;
    }
    let segments = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(store.join("commitlog"))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    let first = "00000000000000000000".to_owned();
    let before = segments();
    assert!(
        before.len() >= 3 && before[0] == first,
        "closed segments to expire: {before:?}"
    );

    // All or nothing, and the refusal names the reason.
    let refused = client
        .invoke(&broker, update("fileReservedTime=0\nlistenPort=1"), WAIT)
        .await
        .expect("answered");
    assert_eq!(refused.response_code(), ResponseCode::NoPermission);
    let remark = refused.remark.unwrap_or_default();
    assert!(
        remark.starts_with("Can not update config in black list. listenPort cannot change while the broker runs: the servers bind their ports"),
        "{remark}"
    );
    assert_eq!(
        value_of(&broker_config(&client, &broker).await, "fileReservedTime").as_deref(),
        Some("72")
    );
    assert_eq!(
        segments()[0],
        first,
        "72 h reserved: the oldest segment stays"
    );

    let applied = client
        .invoke(&broker, update("fileReservedTime=0"), WAIT)
        .await
        .expect("answered");
    assert_eq!(
        applied.response_code(),
        ResponseCode::Success,
        "{:?}",
        applied.remark
    );
    assert_eq!(
        value_of(&broker_config(&client, &broker).await, "fileReservedTime").as_deref(),
        Some("0")
    );
    assert_eq!(
        std::fs::read_to_string(&file).expect("read"),
        "brokerName=broker-a\nfileReservedTime=0\n"
    );
    assert!(
        eventually(|| segments().first() != Some(&first)).await,
        "the next retention pass deletes the expired segments: {:?}",
        segments()
    );
    assert!(!segments().is_empty(), "the active segment stays");
    let _ = stop.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

/// Keys that shape what the broker built at start are refused, each with why; the prefix is
/// the one RocketMQ's tools look for.
#[tokio::test]
async fn start_only_keys_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, stop_namesrv) = start_namesrv().await;
    let (broker, stop, task) = start_broker(config(dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    for (update_body, reason) in [
        (
            "storePathRootDir=/elsewhere",
            "storePathRootDir cannot change while the broker runs: the store is opened with it",
        ),
        (
            "brokerName=broker-b",
            "brokerName cannot change while the broker runs: it is who the broker is",
        ),
        (
            "broker_role=SLAVE",
            "broker_role cannot change while the broker runs: the role decides which services run",
        ),
        (
            "mappedFileSizeCommitLog=1024",
            "mappedFileSizeCommitLog cannot change while the broker runs: the store is opened",
        ),
    ] {
        let refused = client
            .invoke(&broker, update(update_body), WAIT)
            .await
            .expect("answered");
        assert_eq!(refused.response_code(), ResponseCode::NoPermission);
        let remark = refused.remark.unwrap_or_default();
        assert!(
            remark.starts_with(&format!("Can not update config in black list. {reason}")),
            "{remark}"
        );
    }
    let _ = stop.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}
