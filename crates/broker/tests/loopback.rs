//! The broker over loopback with an in-process name server, driven by raw remoting requests:
//! send, heartbeat, pull (long polling included), commits by request and by pull, persistence
//! across a restart, corrupt config files, and bad input while a producer and a consumer keep
//! working. (Compatibility with the real Java client is proven by compat/java's suite.)

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tidemark_broker::{Broker, BrokerConfig, BrokerError};
use tidemark_namesrv::{NameServer, NameServerConfig};
use tidemark_protocol::body::{
    ConsumerData, HeartbeatData, MessageModel, ProducerData, SubscriptionData,
};
use tidemark_protocol::headers::{
    pull_sys_flag, OffsetResponseHeader, PullMessageRequestHeader, PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2,
    SendMessageResponseHeader, UpdateConsumerOffsetRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::message::{decode_records, DecodeOptions, Properties};
use tidemark_protocol::{frame, RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig, RemotingClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(10);
const TOPIC: &str = "LoopbackTopic";
const GROUP: &str = "loopback_group";

struct Cluster {
    namesrv: String,
    broker: String,
    stop_broker: watch::Sender<bool>,
    broker_task: tokio::task::JoinHandle<Result<(), BrokerError>>,
    stop_namesrv: watch::Sender<bool>,
}

fn config(dir: &Path, namesrv: &str) -> BrokerConfig {
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

async fn start_namesrv() -> (String, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound").to_string();
    let (stop, mut stopping) = watch::channel(false);
    tokio::spawn(NameServer::serve(
        listener,
        NameServerConfig::default(),
        async move {
            let _ = stopping.wait_for(|stopped| *stopped).await;
        },
    ));
    (addr, stop)
}

async fn start_broker(
    mut config: BrokerConfig,
) -> (
    String,
    watch::Sender<bool>,
    tokio::task::JoinHandle<Result<(), BrokerError>>,
) {
    let main = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let vip = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    config.listen_port = main.local_addr().expect("bound").port();
    let addr = config.broker_addr();
    let broker = tokio::task::spawn_blocking(move || Broker::open(config))
        .await
        .expect("task")
        .expect("broker opens");
    let (stop, mut stopping) = watch::channel(false);
    let task = tokio::spawn(broker.serve(main, vip, async move {
        let _ = stopping.wait_for(|stopped| *stopped).await;
    }));
    (addr, stop, task)
}

impl Cluster {
    async fn start(dir: &Path) -> Cluster {
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

    async fn stop_broker(self) -> (String, watch::Sender<bool>) {
        let _ = self.stop_broker.send(true);
        tokio::time::timeout(Duration::from_secs(30), self.broker_task)
            .await
            .expect("stops")
            .expect("task")
            .expect("clean stop");
        (self.namesrv, self.stop_namesrv)
    }
}

fn send_request(body: &str, tag: &str, queue_id: i32) -> RemotingCommand {
    let mut properties = Properties::new();
    properties.insert("TAGS", tag);
    properties.insert("UNIQ_KEY", format!("ID-{body}"));
    let header = SendMessageRequestHeaderV2::from(SendMessageRequestHeader {
        producer_group: "loopback_producer".into(),
        topic: TOPIC.into(),
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

fn heartbeat() -> RemotingCommand {
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

fn pull_request(queue_offset: i64, commit_offset: Option<i64>, suspend_ms: i64) -> RemotingCommand {
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

async fn query_offset(client: &RemotingClient, broker: &str) -> RemotingCommand {
    let request = RemotingCommand::request_with_header(
        RequestCode::QueryConsumerOffset,
        &QueryConsumerOffsetRequestHeader {
            consumer_group: GROUP.into(),
            topic: TOPIC.into(),
            queue_id: 0,
            set_zero_if_not_found: Some(false),
            broker_name: None,
        },
    );
    client
        .invoke(broker, request, WAIT)
        .await
        .expect("answered")
}

/// Send, subscribe, pull with a filter and long polling, commit two ways, restart, resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_consume_commit_and_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let broker = cluster.broker.clone();
    for index in 0..6 {
        let tag = if index % 2 == 0 { "TagA" } else { "TagB" };
        let response = client
            .invoke(&broker, send_request(&format!("m{index}"), tag, 0), WAIT)
            .await
            .expect("answered");
        assert_eq!(
            response.response_code(),
            ResponseCode::Success,
            "{:?}",
            response.remark
        );
        let header: SendMessageResponseHeader = response
            .decode_header()
            .expect("complete send response header");
        assert_eq!((header.queue_id, header.queue_offset), (0, index));
        assert_eq!(response.ext_fields.get("MSG_REGION"), Some("DefaultRegion"));
    }
    // Pulls need the subscription from a heartbeat first.
    let early = client
        .invoke(&broker, pull_request(0, None, 0), WAIT)
        .await
        .expect("answered");
    assert_eq!(early.response_code(), ResponseCode::SubscriptionNotExist);
    assert_eq!(
        client
            .invoke(&broker, heartbeat(), WAIT)
            .await
            .expect("answered")
            .response_code(),
        ResponseCode::Success
    );
    let pulled = client
        .invoke(&broker, pull_request(0, None, 0), WAIT)
        .await
        .expect("answered");
    assert_eq!(pulled.response_code(), ResponseCode::Success);
    let header: PullMessageResponseHeader = pulled
        .decode_header()
        .expect("complete pull response header");
    assert_eq!(
        (
            header.next_begin_offset,
            header.min_offset,
            header.max_offset
        ),
        (6, 0, 6)
    );
    let records = decode_records(
        &pulled.body,
        DecodeOptions {
            verify_body_crc: true,
        },
    )
    .expect("stored records");
    assert_eq!(
        records
            .iter()
            .map(|record| String::from_utf8_lossy(&record.body).into_owned())
            .collect::<Vec<_>>(),
        vec!["m0", "m2", "m4"]
    );

    // No offset yet: QUERY_NOT_FOUND when asked not to apply the young-queue rule.
    assert_eq!(
        query_offset(&client, &broker).await.response_code(),
        ResponseCode::QueryNotFound
    );
    // Long polling: the pull waits, the send wakes it, and its commit offset is stored.
    let waiting = {
        let client_for_pull = RemotingClient::new(ClientConfig::default(), None);
        let broker = broker.clone();
        tokio::spawn(async move {
            client_for_pull
                .invoke(&broker, pull_request(6, Some(6), 5_000), WAIT)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the pull is held");
    client
        .invoke(&broker, send_request("late", "TagA", 0), WAIT)
        .await
        .expect("answered");
    let woken = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("woken by the send")
        .expect("task")
        .expect("answered");
    assert_eq!(woken.response_code(), ResponseCode::Success);
    let stored: OffsetResponseHeader = query_offset(&client, &broker)
        .await
        .decode_header()
        .expect("offset");
    assert_eq!(stored.offset, 6, "the piggy-backed commit was stored");
    // A oneway commit moves it on; an older one does not move it back.
    for offset in [7, 3] {
        let mut update = RemotingCommand::request_with_header(
            RequestCode::UpdateConsumerOffset,
            &UpdateConsumerOffsetRequestHeader {
                consumer_group: GROUP.into(),
                topic: TOPIC.into(),
                queue_id: 0,
                commit_offset: offset,
                broker_name: None,
            },
        );
        update.mark_oneway();
        client.invoke_oneway(&broker, update).await.expect("sent");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stored: OffsetResponseHeader = query_offset(&client, &broker)
        .await
        .decode_header()
        .expect("offset");
    assert_eq!(stored.offset, 7);
    client.shutdown();

    // Graceful restart keeps messages and offsets.
    let (namesrv, stop_namesrv) = cluster.stop_broker().await;
    let persisted =
        std::fs::read_to_string(dir.path().join("config/consumerOffset.json")).expect("persisted");
    assert!(
        persisted.contains("\"LoopbackTopic@loopback_group\":{0:7"),
        "{persisted}"
    );
    let (broker, stop_broker, task) = start_broker(config(dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let stored: OffsetResponseHeader = query_offset(&client, &broker)
        .await
        .decode_header()
        .expect("offset");
    assert_eq!(stored.offset, 7);
    client
        .invoke(&broker, heartbeat(), WAIT)
        .await
        .expect("answered");
    let pulled = client
        .invoke(&broker, pull_request(0, None, 0), WAIT)
        .await
        .expect("answered");
    assert_eq!(
        decode_records(&pulled.body, DecodeOptions::default())
            .expect("records")
            .len(),
        4
    );
    client.shutdown();
    let _ = stop_broker.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

/// A corrupt offsets file falls back to its backup; both corrupt refuses to start unless told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_offset_files_fall_back_or_refuse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config_dir = dir.path().join("config");
    std::fs::create_dir_all(&config_dir).expect("mkdir");
    let file = config_dir.join("consumerOffset.json");
    std::fs::write(&file, b"{\"offsetTable\":{\"T@g\":{0:").expect("torn file");
    std::fs::write(
        config_dir.join("consumerOffset.json.bak"),
        b"{\"offsetTable\":{\"T@g\":{0:42}}}",
    )
    .expect("backup");
    let broker = tokio::task::spawn_blocking({
        let config = config(dir.path(), "127.0.0.1:1");
        move || Broker::open(config)
    })
    .await
    .expect("task")
    .expect("starts from the backup");
    assert_eq!(broker.state().offsets.query("T", "g", 0), Some(42));
    drop(broker);
    std::fs::write(config_dir.join("consumerOffset.json.bak"), b"garbage").expect("corrupt backup");
    let refused = tokio::task::spawn_blocking({
        let config = config(dir.path(), "127.0.0.1:1");
        move || Broker::open(config)
    })
    .await
    .expect("task");
    let message = refused.expect_err("refuses").to_string();
    assert!(
        message.contains("consumerOffset.json") && message.contains("consumerOffset.json.bak"),
        "{message}"
    );
    let forced = tokio::task::spawn_blocking({
        let config = BrokerConfig {
            ignore_corrupt_config: true,
            ..config(dir.path(), "127.0.0.1:1")
        };
        move || Broker::open(config)
    })
    .await
    .expect("task")
    .expect("the explicit flag overrides");
    assert!(forced.state().offsets.is_empty());
}

async fn expect_closed(mut stream: TcpStream) {
    let mut buffer = [0u8; 256];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buffer))
            .await
            .expect("closed in time")
        {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}

/// Garbage, oversized frames, unknown codes and malformed headers and bodies get an error or a
/// closed connection, while a producer and a consumer keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_never_stops_the_broker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let broker = cluster.broker.clone();
    let sent = Arc::new(AtomicU64::new(0));
    let pulled = Arc::new(AtomicU64::new(0));
    let (stop, stopping) = watch::channel(false);
    let producer = {
        let (broker, sent, stopping) = (broker.clone(), sent.clone(), stopping.clone());
        tokio::spawn(async move {
            let client = RemotingClient::new(ClientConfig::default(), None);
            let mut index = 0;
            while !*stopping.borrow() {
                let response = client
                    .invoke(&broker, send_request(&format!("p{index}"), "TagA", 0), WAIT)
                    .await
                    .expect("producer keeps working");
                assert_eq!(response.response_code(), ResponseCode::Success);
                sent.fetch_add(1, Ordering::Relaxed);
                index += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let consumer = {
        let (broker, pulled, stopping) = (broker.clone(), pulled.clone(), stopping.clone());
        tokio::spawn(async move {
            let client = RemotingClient::new(ClientConfig::default(), None);
            client
                .invoke(&broker, heartbeat(), WAIT)
                .await
                .expect("heartbeat");
            let mut offset = 0;
            while !*stopping.borrow() {
                let response = client
                    .invoke(&broker, pull_request(offset, None, 200), WAIT)
                    .await
                    .expect("consumer keeps working");
                if response.response_code() == ResponseCode::Success {
                    let header: PullMessageResponseHeader =
                        response.decode_header().expect("header");
                    pulled.fetch_add(
                        decode_records(&response.body, DecodeOptions::default())
                            .expect("records")
                            .len() as u64,
                        Ordering::Relaxed,
                    );
                    offset = header.next_begin_offset;
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = (sent.load(Ordering::Relaxed), pulled.load(Ordering::Relaxed));

    // Garbage bytes and an oversized length word: the connection is closed.
    for bytes in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &[0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0][..],
        &[0, 0, 0, 9, 0, 0, 0, 5, b'{', b'x', b'y', b'z', b'}'][..],
    ] {
        let mut stream = TcpStream::connect(&broker).await.expect("connect");
        stream.write_all(bytes).await.expect("write");
        expect_closed(stream).await;
    }
    // Well-framed but wrong: an error response each, the connection stays usable.
    let client = RemotingClient::new(ClientConfig::default(), None);
    let unknown = client
        .invoke(
            &broker,
            RemotingCommand {
                code: 31_337,
                ..RemotingCommand::default()
            },
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(
        unknown.response_code(),
        ResponseCode::RequestCodeNotSupported
    );
    let mut missing = send_request("x", "TagA", 0);
    missing.ext_fields.remove("b");
    let response = client
        .invoke(&broker, missing, WAIT)
        .await
        .expect("answered");
    assert_eq!(response.response_code(), ResponseCode::SystemError);
    assert!(
        response.remark.unwrap_or_default().contains("`b`"),
        "names the missing field"
    );
    let mut malformed = pull_request(0, None, 0);
    malformed.ext_fields.insert("queueOffset", "not-a-number");
    let response = client
        .invoke(&broker, malformed, WAIT)
        .await
        .expect("answered");
    assert!(response.remark.unwrap_or_default().contains("queueOffset"));
    let bad_heartbeat = RemotingCommand::request(RequestCode::HeartBeat)
        .with_body(&b"{\"consumerDataSet\": [{\"groupName\": 7, "[..]);
    assert_eq!(
        client
            .invoke(&broker, bad_heartbeat, WAIT)
            .await
            .expect("answered")
            .response_code(),
        ResponseCode::SystemError
    );
    let mut bad_batch = send_request("x", "TagA", 0);
    bad_batch.code = RequestCode::SendBatchMessage.to_i32();
    bad_batch.body = Bytes::from_static(&[0, 0, 0, 99, 1, 2]);
    assert_eq!(
        client
            .invoke(&broker, bad_batch, WAIT)
            .await
            .expect("answered")
            .response_code(),
        ResponseCode::MessageIllegal
    );
    let mut raw = TcpStream::connect(&broker).await.expect("connect");
    raw.write_all(
        &frame::encode_to_bytes(&RemotingCommand {
            code: 31_337,
            opaque: 9,
            ..RemotingCommand::default()
        })
        .expect("encodes"),
    )
    .await
    .expect("write");
    let mut reply = bytes::BytesMut::new();
    while frame::decode(&mut reply, 1 << 20).expect("valid").is_none() {
        assert!(
            tokio::time::timeout(WAIT, raw.read_buf(&mut reply))
                .await
                .expect("answered")
                .expect("read")
                > 0
        );
    }

    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = (sent.load(Ordering::Relaxed), pulled.load(Ordering::Relaxed));
    assert!(
        after.0 > before.0 && after.1 > before.1,
        "producer and consumer kept working: {before:?} -> {after:?}"
    );
    let _ = stop.send(true);
    producer.await.expect("producer task");
    consumer.await.expect("consumer task");
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}

fn with_delay(mut request: RemotingCommand, level: i32) -> RemotingCommand {
    let mut properties = Properties::parse(request.ext_fields.get("i").unwrap_or_default());
    properties.insert("DELAY", level.to_string());
    request.ext_fields.insert("i", properties.encode());
    request
}

fn pull_topic(topic: &str, queue_id: i32, queue_offset: i64) -> RemotingCommand {
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
async fn pull_all(
    client: &RemotingClient,
    broker: &str,
    topic: &str,
    queue_id: i32,
    expected: usize,
) -> Vec<tidemark_protocol::message::MessageRecord> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let response = client
            .invoke(broker, pull_topic(topic, queue_id, 0), WAIT)
            .await
            .expect("answered");
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
        pull_all(&client, &cluster.broker, TOPIC, 1, 1).await.len(),
        1,
        "only the undelayed message at first"
    );
    let records = pull_all(&client, &cluster.broker, TOPIC, 1, 2).await;
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
    let records = pull_all(&client, &broker, TOPIC, 1, 3).await;
    assert_eq!(
        records
            .iter()
            .map(|record| String::from_utf8_lossy(&record.body).into_owned())
            .collect::<Vec<_>>(),
        vec!["create", "delayed-1s", "delayed-3s"]
    );
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        pull_all(&client, &broker, TOPIC, 1, 4).await.len(),
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
    let original = pull_all(&client, &cluster.broker, TOPIC, 0, 1)
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
    let first = pull_all(&client, &cluster.broker, &retry_topic, 0, 1).await;
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
    let second = pull_all(&client, &cluster.broker, &retry_topic, 0, 2).await;
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
    let parked = pull_all(&client, &cluster.broker, &dlq, 0, 1).await;
    assert_eq!(parked.len(), 1);
    assert_eq!(&parked[0].body[..], b"fails");
    assert_eq!(parked[0].reconsume_times, 3);
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}

/// GET_BROKER_RUNTIME_INFO carries the keys the Java admin reads, with measured values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_info_reports_measured_figures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    for index in 0..3 {
        client
            .invoke(
                &cluster.broker,
                send_request(&format!("r{index}"), "TagA", 0),
                WAIT,
            )
            .await
            .expect("answered");
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let response = client
        .invoke(
            &cluster.broker,
            RemotingCommand::request(RequestCode::GetBrokerRuntimeInfo),
            WAIT,
        )
        .await
        .expect("answered");
    let table = tidemark_protocol::body::KvTable::from_json_bytes(&response.body)
        .expect("KVTable")
        .table;
    assert_eq!(table["msgPutTotalTodayNow"], "3");
    assert_eq!(
        table["putTps"].split(' ').count(),
        3,
        "tps over 10, 60 and 600 s"
    );
    assert!(
        table["commitLogDirCapacity"].starts_with("Total : "),
        "{}",
        table["commitLogDirCapacity"]
    );
    assert!(
        table["earliestMessageTimeStamp"]
            .parse::<i64>()
            .expect("a timestamp")
            > 1_600_000_000_000
    );
    assert_eq!(table["brokerRole"], "ASYNC_MASTER");
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}

/// An operator's reset moves a group back, tells its clients, and a commit sent before the
/// client heard of it cannot undo it; the client's confirmation lifts the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_resets_hold_against_stale_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let (seen, mut notices) = tokio::sync::mpsc::channel(4);
    let handler = tidemark_remoting::handler_fn(move |_channel, request: RemotingCommand| {
        let seen = seen.clone();
        async move {
            let _ = seen.send(request).await;
            tidemark_remoting::Reply::NoResponse
        }
    });
    let client = RemotingClient::new(ClientConfig::default(), Some(Arc::new(handler)));
    for index in 0..5 {
        client
            .invoke(
                &cluster.broker,
                send_request(&format!("m{index}"), "TagA", 0),
                WAIT,
            )
            .await
            .expect("answered");
    }
    client
        .invoke(&cluster.broker, heartbeat(), WAIT)
        .await
        .expect("answered");
    let commit = |offset: i64| {
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
    };
    client
        .invoke(&cluster.broker, commit(5), WAIT)
        .await
        .expect("answered");
    let reset = RemotingCommand::request_with_header(
        RequestCode::InvokeBrokerToResetOffset,
        &tidemark_protocol::headers::ResetOffsetRequestHeader {
            topic: TOPIC.into(),
            group: GROUP.into(),
            timestamp: 0,
            is_force: true,
            queue_id: None,
            offset: None,
        },
    );
    let response = client
        .invoke(&cluster.broker, reset, WAIT)
        .await
        .expect("answered");
    assert_eq!(
        response.response_code(),
        ResponseCode::Success,
        "{:?}",
        response.remark
    );
    let body = tidemark_protocol::body::MessageQueueOffsets::from_json_bytes(&response.body)
        .expect("ResetOffsetBody");
    assert_eq!(
        body.offset_table
            .get(&tidemark_protocol::body::MessageQueue::new(
                TOPIC, "broker-a", 0
            )),
        Some(&0)
    );
    // The heartbeat's membership notice may come first.
    loop {
        let notice = tokio::time::timeout(WAIT, notices.recv())
            .await
            .expect("clients are told")
            .expect("notice");
        if notice.request_code() == RequestCode::ResetConsumerClientOffset {
            assert_eq!(notice.ext_fields.get("group"), Some(GROUP));
            break;
        }
    }
    async fn offset(client: &RemotingClient, broker: &str) -> i64 {
        query_offset(client, broker)
            .await
            .decode_header::<OffsetResponseHeader>()
            .expect("offset")
            .offset
    }
    assert_eq!(offset(&client, &cluster.broker).await, 0);
    client
        .invoke(&cluster.broker, commit(5), WAIT)
        .await
        .expect("answered");
    assert_eq!(
        offset(&client, &cluster.broker).await,
        0,
        "a stale commit does not undo the reset"
    );
    client
        .invoke(&cluster.broker, commit(0), WAIT)
        .await
        .expect("answered");
    client
        .invoke(&cluster.broker, commit(3), WAIT)
        .await
        .expect("answered");
    assert_eq!(
        offset(&client, &cluster.broker).await,
        3,
        "after the client confirmed the reset, progress moves on"
    );
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}
