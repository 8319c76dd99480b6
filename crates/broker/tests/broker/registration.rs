//! Registration with the name servers: a name server back from a crash knows no broker, and
//! learns this one within seconds rather than at the next registration period (30 s here).

use crate::common::*;
use tidemark_protocol::body::TopicRouteData;
use tidemark_protocol::headers::GetRouteInfoRequestHeader;

/// Whether `namesrv` routes the test topic to a broker.
async fn routed(client: &RemotingClient, namesrv: &str) -> bool {
    let request = RemotingCommand::request_with_header(
        RequestCode::GetRouteInfoByTopic,
        &GetRouteInfoRequestHeader {
            topic: TOPIC.into(),
            accept_standard_json_only: None,
        },
    );
    let Ok(response) = client.invoke(namesrv, request, WAIT).await else {
        return false;
    };
    response.response_code() == ResponseCode::Success
        && TopicRouteData::from_json_bytes(&response.body)
            .is_ok_and(|route| !route.broker_datas.is_empty())
}

async fn routed_within(client: &RemotingClient, namesrv: &str, bound: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + bound;
    while tokio::time::Instant::now() < deadline {
        if routed(client, namesrv).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test]
async fn a_name_server_back_from_a_crash_learns_the_broker_within_seconds() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let namesrv = listener.local_addr().expect("bound").to_string();
    let stop_first = serve_namesrv(listener);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = config(dir.path(), &namesrv);
    settings.register_name_server_period = 30_000;
    let (broker, stop_broker, broker_task) = start_broker(settings).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    send_ok((&client, &broker), send_request("m-1", "", 0)).await;
    assert!(
        routed_within(&client, &namesrv, WAIT).await,
        "the topic was never routed"
    );

    // The name server dies and another starts on its port, knowing nothing.
    let _ = stop_first.send(true);
    let freed = tokio::time::Instant::now() + WAIT;
    let listener = loop {
        match TcpListener::bind(&namesrv).await {
            Ok(listener) => break listener,
            Err(error) if tokio::time::Instant::now() > freed => {
                panic!("{namesrv} not free again: {error}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let stop_second = serve_namesrv(listener);
    assert!(
        routed_within(&client, &namesrv, Duration::from_secs(8)).await,
        "the restarted name server still routes nothing after 8 s"
    );

    let _ = stop_broker.send(true);
    broker_task.await.expect("task").expect("clean stop");
    let _ = stop_second.send(true);
    client.shutdown();
}
