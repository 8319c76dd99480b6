//! Helpers of the broker's loopback tests: an in-process name server and broker on ephemeral
//! loopback ports, and the raw requests the tests send.
#![allow(dead_code, unused_imports)]

mod handler;
pub use handler::{Connection, HandlerHarness};

pub use std::path::Path;
pub use std::sync::atomic::{AtomicU64, Ordering};
pub use std::sync::Arc;
pub use std::time::Duration;

pub use bytes::Bytes;
pub use tidemark_broker::{Broker, BrokerConfig, BrokerError};
pub use tidemark_namesrv::{NameServer, NameServerConfig};
pub use tidemark_protocol::body::{
    ConsumerData, HeartbeatData, MessageModel, ProducerData, SubscriptionData,
};
pub use tidemark_protocol::headers::{
    pull_sys_flag, GetMaxOffsetRequestHeader, OffsetResponseHeader, PullMessageRequestHeader,
    PullMessageResponseHeader, QueryConsumerOffsetRequestHeader, SendMessageRequestHeader,
    SendMessageRequestHeaderV2, SendMessageResponseHeader, UpdateConsumerOffsetRequestHeader,
};
pub use tidemark_protocol::json::JsonBody;
pub use tidemark_protocol::message::{decode_records, DecodeOptions, Properties};
pub use tidemark_protocol::{frame, RemotingCommand, RequestCode, ResponseCode};
pub use tidemark_remoting::{ClientConfig, RemotingClient};
pub use tokio::io::{AsyncReadExt, AsyncWriteExt};
pub use tokio::net::{TcpListener, TcpStream};
pub use tokio::sync::watch;

pub const WAIT: Duration = Duration::from_secs(10);
pub const TOPIC: &str = "LoopbackTopic";
pub const GROUP: &str = "loopback_group";

pub struct Cluster {
    pub namesrv: String,
    pub broker: String,
    pub stop_broker: watch::Sender<bool>,
    pub broker_task: tokio::task::JoinHandle<Result<(), BrokerError>>,
    pub stop_namesrv: watch::Sender<bool>,
}

pub fn config(dir: &Path, namesrv: &str) -> BrokerConfig {
    BrokerConfig {
        store_path_root_dir: dir.to_path_buf(),
        namesrv_addr: namesrv.to_owned(),
        listen_ip: "127.0.0.1".into(),
        flush_consumer_offset_interval: 200,
        mapped_file_size_commit_log: 8 << 20,
        // Short levels keep the delay tests quick.
        message_delay_level: "1s 2s 3s".into(),
        flush_delay_offset_interval: 200,
        ..BrokerConfig::default()
    }
}

pub async fn start_namesrv() -> (String, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound").to_string();
    (addr, serve_namesrv(listener))
}

/// A name server on `listener`, until the returned switch is set.
pub fn serve_namesrv(listener: TcpListener) -> watch::Sender<bool> {
    let (stop, mut stopping) = watch::channel(false);
    tokio::spawn(NameServer::serve(
        listener,
        NameServerConfig::default(),
        async move {
            let _ = stopping.wait_for(|stopped| *stopped).await;
        },
    ));
    stop
}

/// A started broker: its address, the switch that stops it, and its serving task.
pub type StartedBroker = (
    String,
    watch::Sender<bool>,
    tokio::task::JoinHandle<Result<(), BrokerError>>,
);

pub async fn start_broker(config: BrokerConfig) -> StartedBroker {
    let main = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    serve_on(config, main, None).await
}

/// A master serving its HA port (`listen_port + 1`) too, so a slave copies its log.
pub async fn start_broker_with_ha(config: BrokerConfig) -> StartedBroker {
    let (main, ha) = loop {
        let main = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = main.local_addr().expect("bound").port();
        if let Some(next) = port.checked_add(1) {
            if let Ok(ha) = TcpListener::bind(("127.0.0.1", next)).await {
                break (main, ha);
            }
        }
    };
    serve_on(config, main, Some(ha)).await
}

async fn serve_on(
    mut config: BrokerConfig,
    main: TcpListener,
    ha: Option<TcpListener>,
) -> StartedBroker {
    let vip = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    config.listen_port = main.local_addr().expect("bound").port();
    let addr = config.broker_addr();
    let broker = tokio::task::spawn_blocking(move || Broker::open(config))
        .await
        .expect("task")
        .expect("broker opens");
    let (stop, mut stopping) = watch::channel(false);
    let task = tokio::spawn(broker.serve_with_ha(main, vip, ha, async move {
        let _ = stopping.wait_for(|stopped| *stopped).await;
    }));
    (addr, stop, task)
}

impl Cluster {
    pub async fn start(dir: &Path) -> Cluster {
        let (namesrv, stop_namesrv) = start_namesrv().await;
        let (broker, stop_broker, broker_task) = start_broker(config(dir, &namesrv)).await;
        Cluster {
            namesrv,
            broker,
            stop_broker,
            broker_task,
            stop_namesrv,
        }
    }

    pub async fn stop_broker(self) -> (String, watch::Sender<bool>) {
        let _ = self.stop_broker.send(true);
        tokio::time::timeout(Duration::from_secs(30), self.broker_task)
            .await
            .expect("stops")
            .expect("task")
            .expect("clean stop");
        (self.namesrv, self.stop_namesrv)
    }
}

pub fn send_request(body: &str, tag: &str, queue_id: i32) -> RemotingCommand {
    send_request_to(TOPIC, body, tag, queue_id)
}

/// Whatever a test sends requests through: a broker on loopback (a client and the broker's
/// address) or a [`HandlerHarness`] connection (no socket). Helpers that only need request →
/// response take either, so a suite moves onto the harness without new helpers.
pub trait Calls {
    /// The broker's answer to `request`.
    fn call(&self, request: RemotingCommand) -> impl std::future::Future<Output = RemotingCommand>;
}

impl<S: AsRef<str> + ?Sized> Calls for (&RemotingClient, &S) {
    async fn call(&self, request: RemotingCommand) -> RemotingCommand {
        self.0
            .invoke(self.1.as_ref(), request, WAIT)
            .await
            .expect("answered")
    }
}

impl Calls for &Connection {
    async fn call(&self, request: RemotingCommand) -> RemotingCommand {
        Connection::call(self, request).await
    }
}

/// Sends `request` (a send of a message) and asserts the broker stored it; its answer.
pub async fn send_ok(to: impl Calls, request: RemotingCommand) -> RemotingCommand {
    let sent = to.call(request).await;
    assert_eq!(
        sent.response_code(),
        ResponseCode::Success,
        "{:?}",
        sent.remark
    );
    sent
}

/// [`send_request`] to `topic`.
pub fn send_request_to(topic: &str, body: &str, tag: &str, queue_id: i32) -> RemotingCommand {
    let mut properties = Properties::new();
    properties.insert("TAGS", tag);
    properties.insert("UNIQ_KEY", format!("ID-{body}"));
    let header = SendMessageRequestHeaderV2::from(SendMessageRequestHeader {
        producer_group: "loopback_producer".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        flag: 0,
        properties: Some(properties.encode()),
        reconsume_times: Some(0),
        unit_mode: false,
        batch: false,
        max_reconsume_times: None,
        broker_name: Some("broker-a".into()),
    });
    RemotingCommand::request_with_header(RequestCode::SendMessageV2, &header)
        .with_body(Bytes::from(body.as_bytes().to_vec()))
}

pub fn heartbeat() -> RemotingCommand {
    let data = HeartbeatData {
        client_id: "127.0.0.1@loopback".into(),
        consumer_data_set: vec![ConsumerData {
            group_name: GROUP.into(),
            message_model: MessageModel::Clustering,
            subscription_data_set: vec![SubscriptionData::from_expression(TOPIC, "TagA", 1)],
            ..ConsumerData::default()
        }],
        producer_data_set: vec![ProducerData {
            group_name: "loopback_producer".into(),
        }],
        ..HeartbeatData::default()
    };
    RemotingCommand::request(RequestCode::HeartBeat).with_body(data.to_json_bytes())
}

pub fn pull_request(
    queue_offset: i64,
    commit_offset: Option<i64>,
    suspend_ms: i64,
) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::PullMessage,
        &PullMessageRequestHeader {
            consumer_group: GROUP.into(),
            topic: TOPIC.into(),
            queue_id: 0,
            queue_offset,
            max_msg_nums: 32,
            sys_flag: pull_sys_flag::build(commit_offset.is_some(), suspend_ms > 0, false, false),
            commit_offset: commit_offset.unwrap_or(0),
            suspend_timeout_millis: suspend_ms,
            subscription: None,
            sub_version: 1,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            broker_name: None,
        },
    )
}

/// QUERY_CONSUMER_OFFSET for the tests' group on queue 0 of the tests' topic.
pub fn query_offset_request() -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::QueryConsumerOffset,
        &QueryConsumerOffsetRequestHeader {
            consumer_group: GROUP.into(),
            topic: TOPIC.into(),
            queue_id: 0,
            set_zero_if_not_found: Some(false),
            broker_name: None,
        },
    )
}

/// UPDATE_CONSUMER_OFFSET of the tests' group on queue 0 of the tests' topic (a synchronous
/// request; mark it oneway for a consumer's periodic commit).
pub fn commit_request(offset: i64) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::UpdateConsumerOffset,
        &UpdateConsumerOffsetRequestHeader {
            consumer_group: GROUP.into(),
            topic: TOPIC.into(),
            queue_id: 0,
            commit_offset: offset,
            broker_name: None,
        },
    )
}

pub async fn query_offset(client: &RemotingClient, broker: &str) -> RemotingCommand {
    client
        .invoke(broker, query_offset_request(), WAIT)
        .await
        .expect("answered")
}

/// Adds a message property to a SEND_MESSAGE_V2 request.
pub fn with_property(mut request: RemotingCommand, name: &str, value: &str) -> RemotingCommand {
    let mut properties = Properties::parse(request.ext_fields.get("i").unwrap_or_default());
    properties.insert(name, value);
    request.ext_fields.insert("i", properties.encode());
    request
}

/// Send, subscribe, pull with a filter and long polling, commit two ways, restart, resume.
pub fn with_delay(mut request: RemotingCommand, level: i32) -> RemotingCommand {
    let mut properties = Properties::parse(request.ext_fields.get("i").unwrap_or_default());
    properties.insert("DELAY", level.to_string());
    request.ext_fields.insert("i", properties.encode());
    request
}

pub fn pull_topic(topic: &str, queue_id: i32, queue_offset: i64) -> RemotingCommand {
    let mut request = pull_request(queue_offset, None, 0);
    request.ext_fields.insert("topic", topic);
    request.ext_fields.insert("queueId", queue_id.to_string());
    request.ext_fields.insert("subscription", "*");
    request.ext_fields.insert(
        "sysFlag",
        pull_sys_flag::build(false, false, true, false).to_string(),
    );
    request
}

/// Pulls everything a queue holds (bounded wait until `expected` arrive).
pub async fn pull_all(
    from: impl Calls,
    topic: &str,
    queue_id: i32,
    expected: usize,
) -> Vec<tidemark_protocol::message::MessageRecord> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let response = from.call(pull_topic(topic, queue_id, 0)).await;
        let records = if response.response_code() == ResponseCode::Success {
            decode_records(&response.body, DecodeOptions::default()).expect("records")
        } else {
            Vec::new()
        };
        if records.len() >= expected || tokio::time::Instant::now() >= deadline {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The end of [`TOPIC`]'s queue 0 on `broker`.
pub async fn max_offset(client: &RemotingClient, broker: &str) -> i64 {
    let request = RemotingCommand::request_with_header(
        RequestCode::GetMaxOffset,
        &GetMaxOffsetRequestHeader {
            topic: TOPIC.into(),
            queue_id: 0,
            committed: None,
            broker_name: None,
        },
    );
    client
        .invoke(broker, request, WAIT)
        .await
        .expect("answered")
        .decode_header::<OffsetResponseHeader>()
        .expect("offset header")
        .offset
}

/// GET_BROKER_RUNTIME_INFO's table.
pub async fn runtime_info(
    client: &RemotingClient,
    broker: &str,
) -> std::collections::HashMap<String, String> {
    let response = client
        .invoke(
            broker,
            RemotingCommand::request(RequestCode::GetBrokerRuntimeInfo),
            WAIT,
        )
        .await
        .expect("answered");
    tidemark_protocol::body::KvTable::from_json_bytes(&response.body)
        .expect("KVTable")
        .table
        .into_iter()
        .collect()
}

/// Every `.rs` file under `dir`, at any depth (for the tests that read the sources).
pub fn rust_files(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}
