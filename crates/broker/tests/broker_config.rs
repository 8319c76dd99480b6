//! GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG: the whole configuration under RocketMQ's names,
//! live keys applied at once and written back, read-only and unknown keys refused, and a
//! read-only broker announced as such to the name server.

mod common;

use common::*;
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
