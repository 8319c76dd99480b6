//! The name server over real loopback sockets: a broker registers, clients read routes in both
//! JSON key styles, cluster info and topic lists, and a broker whose connection closes drops
//! out of the routes.

use std::time::Duration;

use tidemark_namesrv::{NameServer, NameServerConfig};
use tidemark_protocol::body::{
    ClusterInfo, DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper,
    TopicList, TopicRouteData,
};
use tidemark_protocol::headers::{
    GetRouteInfoRequestHeader, RegisterBrokerRequestHeader, RegisterBrokerResponseHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig, RemotingClient};
use tokio::net::TcpListener;

const WAIT: Duration = Duration::from_secs(5);

async fn start() -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound").to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(NameServer::serve(
        listener,
        NameServerConfig::default(),
        async {
            let _ = stopped.await;
        },
    ));
    (addr, stop, task)
}

fn register(broker_addr: &str, broker_id: i64, topics: &[(&str, i32)]) -> RemotingCommand {
    let wrapper = TopicConfigSerializeWrapper {
        data_version: DataVersion {
            counter: 1,
            timestamp: 1_700_000_000_000,
            state_version: None,
        },
        topic_config_table: topics
            .iter()
            .map(|(name, queues)| {
                (
                    (*name).to_owned(),
                    TopicConfig {
                        topic_name: (*name).to_owned(),
                        read_queue_nums: *queues,
                        write_queue_nums: *queues,
                        ..TopicConfig::default()
                    },
                )
            })
            .collect(),
    };
    let body = RegisterBrokerBody {
        topic_config_serialize_wrapper: wrapper,
        filter_server_list: Vec::new(),
    }
    .to_json_bytes();
    let header = RegisterBrokerRequestHeader {
        broker_name: "broker-a".into(),
        broker_addr: broker_addr.into(),
        cluster_name: "DefaultCluster".into(),
        ha_server_addr: "127.0.0.1:10912".into(),
        broker_id,
        compressed: false,
        body_crc32: (crc32fast::hash(&body) & 0x7FFF_FFFF) as i32,
        heartbeat_timeout_millis: None,
        enable_acting_master: None,
    };
    RemotingCommand::request_with_header(RequestCode::RegisterBroker, &header).with_body(body)
}

fn route_request(topic: &str, version: i32) -> RemotingCommand {
    let mut request = RemotingCommand::request_with_header(
        RequestCode::GetRouteInfoByTopic,
        &GetRouteInfoRequestHeader {
            topic: topic.into(),
            accept_standard_json_only: None,
        },
    );
    request.version = version;
    request
}

#[tokio::test]
async fn brokers_register_and_clients_read_routes() {
    let (addr, stop, task) = start().await;
    let broker = RemotingClient::new(ClientConfig::default(), None);
    let response = broker
        .invoke(
            &addr,
            register("127.0.0.1:10911", 0, &[("TopicA", 4), ("TBW102", 8)]),
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
    let reply: RegisterBrokerResponseHeader = response.decode_header().expect("header");
    assert_eq!(reply.master_addr, None, "a master has no master");

    let client = RemotingClient::new(ClientConfig::default(), None);
    let old = client
        .invoke(&addr, route_request("TopicA", 317), WAIT)
        .await
        .expect("answered");
    assert_eq!(old.response_code(), ResponseCode::Success);
    let text = String::from_utf8(old.body.to_vec()).expect("utf8");
    assert!(
        text.contains(r#"{0:"127.0.0.1:10911"}"#),
        "old callers get unquoted keys: {text}"
    );
    let new = client
        .invoke(&addr, route_request("TopicA", 409), WAIT)
        .await
        .expect("answered");
    let text = String::from_utf8(new.body.to_vec()).expect("utf8");
    assert!(
        text.contains(r#"{"0":"127.0.0.1:10911"}"#),
        "4.9.4+ callers get quoted keys: {text}"
    );
    let route = TopicRouteData::from_json_bytes(&new.body).expect("route");
    assert_eq!(route.queue_datas[0].write_queue_nums, 4);

    let missing = client
        .invoke(&addr, route_request("Nope", 409), WAIT)
        .await
        .expect("answered");
    assert_eq!(missing.response_code(), ResponseCode::TopicNotExist);

    let cluster = client
        .invoke(
            &addr,
            RemotingCommand::request(RequestCode::GetBrokerClusterInfo),
            WAIT,
        )
        .await
        .expect("answered");
    let cluster = ClusterInfo::from_json_bytes(&cluster.body).expect("cluster info");
    assert_eq!(
        cluster.cluster_addr_table["DefaultCluster"],
        vec!["broker-a".to_owned()]
    );
    let topics = client
        .invoke(
            &addr,
            RemotingCommand::request(RequestCode::GetAllTopicListFromNameserver),
            WAIT,
        )
        .await
        .expect("answered");
    let topics = TopicList::from_json_bytes(&topics.body).expect("topic list");
    assert_eq!(
        topics.topic_list,
        vec!["TBW102".to_owned(), "TopicA".to_owned()]
    );

    // The broker's connection closes: it leaves the routes at once.
    broker.shutdown();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let response = client
            .invoke(&addr, route_request("TopicA", 409), WAIT)
            .await
            .expect("answered");
        if response.response_code() == ResponseCode::TopicNotExist {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "broker still routed after its connection closed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(());
    task.await.expect("stops");
}

#[tokio::test]
async fn bad_register_bodies_and_checksums_are_refused() {
    let (addr, stop, task) = start().await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let mut corrupted = register("127.0.0.1:10911", 0, &[("T", 1)]);
    corrupted.body = bytes::Bytes::from_static(b"{not json");
    let response = client
        .invoke(&addr, corrupted, WAIT)
        .await
        .expect("answered");
    assert_eq!(response.response_code(), ResponseCode::SystemError);
    assert_eq!(response.remark.as_deref(), Some("crc32 not match"));
    let mut missing = register("127.0.0.1:10911", 0, &[("T", 1)]);
    missing.ext_fields.remove("brokerName");
    let response = client.invoke(&addr, missing, WAIT).await.expect("answered");
    assert_eq!(response.response_code(), ResponseCode::SystemError);
    assert!(response.remark.unwrap_or_default().contains("brokerName"));
    let unknown = client
        .invoke(
            &addr,
            RemotingCommand::request(RequestCode::PullMessage),
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(
        unknown.response_code(),
        ResponseCode::RequestCodeNotSupported
    );
    let _ = stop.send(());
    task.await.expect("stops");
}

/// mqadmin `getNamesrvConfig` / `updateNamesrvConfig`: the settings as properties text; an
/// update is refused with RocketMQ's black-list answer (nothing changes while serving).
#[tokio::test]
async fn config_is_shown_and_updates_are_refused() {
    let (addr, stop, task) = start().await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let shown = client
        .invoke(
            &addr,
            RemotingCommand::request(RequestCode::GetNamesrvConfig),
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(shown.response_code(), ResponseCode::Success);
    let text = String::from_utf8_lossy(&shown.body).into_owned();
    let port = addr.rsplit(':').next().expect("port");
    assert!(
        text.lines()
            .any(|line| line == format!("listenPort={port}")),
        "{text}"
    );
    assert!(text
        .lines()
        .any(|line| line == "scanNotActiveBrokerInterval=10000"));
    let refused = client
        .invoke(
            &addr,
            RemotingCommand::request(RequestCode::UpdateNamesrvConfig)
                .with_body(b"scanNotActiveBrokerInterval=1".to_vec()),
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(refused.response_code(), ResponseCode::NoPermission);
    assert!(refused
        .remark
        .unwrap_or_default()
        .starts_with("Can not update config in black list."));
    let _ = stop.send(());
    task.await.expect("stops");
}
