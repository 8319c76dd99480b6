//! What the gRPC tests share: a name server and brokers on loopback ports (each broker with or
//! without a gateway), tonic's client, and the requests every test makes.
#![allow(dead_code)]

use std::time::Duration;

use tidemark_broker::{BrokerConfig, BrokerError};
use tidemark_grpc::proto::messaging_service_client::MessagingServiceClient;
use tidemark_grpc::proto::*;
use tidemark_namesrv::{NameServer, NameServerConfig};
use tokio::net::TcpListener;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::Request;

pub struct Server {
    pub grpc: String,
    pub broker: String,
    pub namesrv: String,
    pub state: std::sync::Arc<tidemark_broker::BrokerState>,
    _running: Running,
    /// The name server, when this server brought its own.
    _namesrv: Option<watch::Sender<bool>>,
}

/// The running broker and its store directory. Dropping it stops the broker and removes the
/// directory only once the broker has written its last files: removing it under a running
/// broker races those writes, and the directory is left behind in /tmp.
struct Running {
    stop: watch::Sender<bool>,
    serving: Option<JoinHandle<Result<(), BrokerError>>>,
    dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let serving = self.serving.take();
        if let (Some(serving), Ok(runtime)) = (serving, Handle::try_current()) {
            // A current-thread runtime cannot run the broker's shutdown while this blocks; its
            // tasks are dropped with the runtime instead, and the retries below cover the rest.
            if runtime.runtime_flavor() == RuntimeFlavor::MultiThread {
                let _ = tokio::task::block_in_place(|| {
                    runtime.block_on(tokio::time::timeout(Duration::from_secs(10), serving))
                });
            }
        }
        for _ in 0..10 {
            match std::fs::remove_dir_all(self.dir.path()) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => break,
            }
        }
    }
}

async fn stopped(mut stopping: watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stopped| *stopped).await;
}

/// A name server on a loopback port, stopped when the returned sender drops.
pub async fn start_namesrv() -> (String, watch::Sender<bool>) {
    let namesrv = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = namesrv.local_addr().expect("bound").to_string();
    let (stop, stopping) = watch::channel(false);
    tokio::spawn(NameServer::serve(
        namesrv,
        NameServerConfig::default(),
        stopped(stopping),
    ));
    (addr, stop)
}

/// A broker named `name` registered with `namesrv`, serving gRPC too when `grpc` is set.
pub async fn start_broker(namesrv: &str, name: &str, grpc: bool) -> Server {
    start_broker_with(namesrv, name, grpc, |_| {}).await
}

/// [`start_broker`] with `configure` applied to the broker's settings.
pub async fn start_broker_with(
    namesrv: &str,
    name: &str,
    grpc: bool,
    configure: impl FnOnce(&mut BrokerConfig),
) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stop, stopping) = watch::channel(false);
    let main = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let vip = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let broker_addr = main.local_addr().expect("bound").to_string();
    let config = BrokerConfig {
        store_path_root_dir: dir.path().to_path_buf(),
        namesrv_addr: namesrv.to_owned(),
        broker_name: name.to_owned(),
        listen_ip: "127.0.0.1".into(),
        listen_port: main.local_addr().expect("bound").port(),
        mapped_file_size_commit_log: 8 << 20,
        pre_online_timeout_ms: 0,
        ..BrokerConfig::default()
    };
    let mut config = config;
    configure(&mut config);
    let broker = tokio::task::spawn_blocking(move || tidemark_broker::Broker::open(config))
        .await
        .expect("task")
        .expect("broker opens");
    let state = broker.state().clone();
    let serving = tokio::spawn(broker.serve(main, vip, stopped(stopping.clone())));
    let grpc_addr = if grpc {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("bound").to_string();
        tokio::spawn(tidemark_grpc::serve(
            listener,
            state.clone(),
            stopped(stopping),
        ));
        addr
    } else {
        String::new()
    };
    Server {
        grpc: grpc_addr,
        broker: broker_addr,
        namesrv: namesrv.to_owned(),
        state,
        _running: Running {
            stop,
            serving: Some(serving),
            dir,
        },
        _namesrv: None,
    }
}

/// One broker with a gateway and its own name server (kept running for the test's length).
pub async fn start() -> Server {
    start_configured(|_| {}).await
}

/// [`start`] with the broker's configuration changed by `configure`.
pub async fn start_configured(configure: impl FnOnce(&mut BrokerConfig)) -> Server {
    let (namesrv, stop) = start_namesrv().await;
    let mut server = start_broker_with(&namesrv, "broker-a", true, configure).await;
    server._namesrv = Some(stop);
    server
}

pub async fn client(server: &Server) -> MessagingServiceClient<Channel> {
    for _ in 0..50 {
        if let Ok(client) = MessagingServiceClient::connect(format!("http://{}", server.grpc)).await
        {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("gRPC server not reachable");
}

pub fn with_client_id<T>(message: T, client_id: &str) -> Request<T> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("x-mq-client-id", client_id.parse().expect("ascii"));
    request.set_timeout(Duration::from_secs(10));
    request
}

/// One AckMessage call for `entries` of `group` on `topic`; its answer (the call itself must
/// get through).
pub async fn ack(
    client: &mut MessagingServiceClient<Channel>,
    group: &str,
    topic: &str,
    entries: Vec<AckMessageEntry>,
    client_id: &str,
) -> AckMessageResponse {
    client
        .ack_message(with_client_id(
            AckMessageRequest {
                group: Some(resource(group)),
                topic: Some(resource(topic)),
                entries,
            },
            client_id,
        ))
        .await
        .expect("ack")
        .into_inner()
}

/// The receipt handle a received message is acknowledged with.
pub fn handle(message: &Message) -> String {
    message
        .system_properties
        .as_ref()
        .and_then(|system| system.receipt_handle.clone())
        .expect("receipt handle")
}

pub fn resource(name: &str) -> Resource {
    Resource {
        resource_namespace: String::new(),
        name: name.into(),
    }
}

pub fn code(status: &Option<Status>) -> Code {
    Code::try_from(status.as_ref().map_or(0, |status| status.code)).expect("known code")
}

pub fn message(topic: &str, id: &str, body: &str, tag: &str) -> Message {
    Message {
        topic: Some(resource(topic)),
        user_properties: [("color".to_owned(), "blue".to_owned())].into(),
        system_properties: Some(SystemProperties {
            tag: Some(tag.into()),
            keys: vec![format!("key-{id}")],
            message_id: id.into(),
            body_encoding: Encoding::Identity as i32,
            message_type: MessageType::Normal as i32,
            queue_id: 0,
            ..SystemProperties::default()
        }),
        body: body.as_bytes().to_vec(),
    }
}

pub async fn receive(
    client: &mut MessagingServiceClient<Channel>,
    group: &str,
    topic: &str,
    invisible_ms: i64,
) -> (Code, Vec<Message>) {
    receive_at(client, group, topic, None, invisible_ms).await
}

/// Receives from one broker's queues of the topic (`None`: the gateway's own broker).
pub async fn receive_at(
    client: &mut MessagingServiceClient<Channel>,
    group: &str,
    topic: &str,
    broker: Option<&str>,
    invisible_ms: i64,
) -> (Code, Vec<Message>) {
    let filter = FilterExpression {
        r#type: FilterType::Tag as i32,
        expression: "*".into(),
    };
    receive_filtered(client, group, topic, broker, filter, invisible_ms).await
}

/// Receives what `filter` selects from one broker's queues of the topic.
pub async fn receive_filtered(
    client: &mut MessagingServiceClient<Channel>,
    group: &str,
    topic: &str,
    broker: Option<&str>,
    filter: FilterExpression,
    invisible_ms: i64,
) -> (Code, Vec<Message>) {
    let request = ReceiveMessageRequest {
        group: Some(resource(group)),
        message_queue: Some(MessageQueue {
            topic: Some(resource(topic)),
            id: -1,
            broker: broker.map(|name| Broker {
                name: name.to_owned(),
                ..Broker::default()
            }),
            ..MessageQueue::default()
        }),
        filter_expression: Some(filter),
        batch_size: 32,
        invisible_duration: Some(prost_types::Duration {
            seconds: invisible_ms / 1000,
            nanos: ((invisible_ms % 1000) * 1_000_000) as i32,
        }),
        auto_renew: false,
        long_polling_timeout: Some(prost_types::Duration {
            seconds: 2,
            nanos: 0,
        }),
        attempt_id: None,
    };
    let mut stream = client
        .receive_message(with_client_id(request, "consumer-1"))
        .await
        .expect("receive call")
        .into_inner();
    let mut status = None;
    let mut messages = Vec::new();
    while let Some(frame) = stream.message().await.expect("frame") {
        match frame.content {
            Some(receive_message_response::Content::Status(s)) => status = Some(s),
            Some(receive_message_response::Content::Message(m)) => messages.push(m),
            _ => {}
        }
    }
    (code(&status), messages)
}

/// An open Telemetry stream: what the server sends, and the client's side (the stream ends when
/// `sender` drops).
pub struct Telemetry {
    pub commands: tonic::Streaming<TelemetryCommand>,
    pub sender: tokio::sync::mpsc::Sender<TelemetryCommand>,
    /// The server's answer to the settings.
    pub settings: TelemetryCommand,
}

/// Opens a Telemetry stream for `client_id` and sends `settings`; returns it once the server
/// answered them (as every 5.x client does before anything else).
pub async fn open_telemetry(
    client: &mut MessagingServiceClient<Channel>,
    client_id: &str,
    settings: Settings,
) -> Telemetry {
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    sender
        .send(TelemetryCommand {
            status: None,
            command: Some(telemetry_command::Command::Settings(settings)),
        })
        .await
        .expect("queued");
    let mut telemetry = client
        .telemetry(with_client_id(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
            client_id,
        ))
        .await
        .expect("telemetry")
        .into_inner();
    let reply = tokio::time::timeout(Duration::from_secs(5), telemetry.message())
        .await
        .expect("settings answered in time")
        .expect("frame")
        .expect("a command");
    Telemetry {
        commands: telemetry,
        sender,
        settings: reply,
    }
}

/// A producer's settings publishing `topic`.
pub fn producer_settings(topic: &str) -> Settings {
    Settings {
        client_type: Some(ClientType::Producer as i32),
        pub_sub: Some(settings::PubSub::Publishing(Publishing {
            topics: vec![resource(topic)],
            ..Publishing::default()
        })),
        ..Settings::default()
    }
}

/// A simple consumer's settings: `group` subscribing to every tag of `topic`.
pub fn consumer_settings(group: &str, topic: &str) -> Settings {
    Settings {
        client_type: Some(ClientType::SimpleConsumer as i32),
        pub_sub: Some(settings::PubSub::Subscription(Subscription {
            group: Some(resource(group)),
            subscriptions: vec![SubscriptionEntry {
                topic: Some(resource(topic)),
                expression: Some(FilterExpression {
                    r#type: FilterType::Tag as i32,
                    expression: "*".into(),
                }),
            }],
            ..Subscription::default()
        })),
        ..Settings::default()
    }
}
