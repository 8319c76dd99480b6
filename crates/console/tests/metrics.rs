//! `/metrics` over HTTP against a broker under load: the text parses as Prometheus exposition,
//! counters only grow, and the consumer figures agree with the broker's own consume stats
//! (lag = broker offset − committed offset) and store timestamps (time lag).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tidemark_broker::{Broker, BrokerConfig};
use tidemark_namesrv::{NameServer, NameServerConfig};
use tidemark_protocol::body::{ConsumeStats, HeartbeatData, ProducerData};
use tidemark_protocol::headers::{
    ConsumerSendMsgBackRequestHeader, GetConsumeStatsRequestHeader, PopMessageRequestHeader,
    PullMessageRequestHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2,
    SendMessageResponseHeader, UpdateConsumerOffsetRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::message::{decode_offset_msg_id, Properties};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig, RemotingClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(10);
const TOPIC: &str = "MetricsTopic";
const GROUP: &str = "metrics_group";
const POP_GROUP: &str = "metrics_pop_group";
const DELAY_TOPIC: &str = "MetricsDelayTopic";
const TIMER_TOPIC: &str = "MetricsTimerTopic";

async fn stopped(mut stopping: watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stopped| *stopped).await;
}

fn send(index: u32) -> RemotingCommand {
    send_to(TOPIC, index, None)
}

/// A send of message `index` to `topic`, with one more property if given (a delay level, a
/// timer's delivery time).
fn send_to(topic: &str, index: u32, property: Option<(&str, String)>) -> RemotingCommand {
    let mut properties = Properties::new();
    properties.insert("UNIQ_KEY", format!("METRICS{index:08}"));
    if let Some((name, value)) = property {
        properties.insert(name, value);
    }
    let header = SendMessageRequestHeaderV2::from(SendMessageRequestHeader {
        producer_group: "metrics_producer".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 2,
        queue_id: (index % 2) as i32,
        sys_flag: 0,
        born_timestamp: tidemark_remoting::now_ms(),
        flag: 0,
        properties: Some(properties.encode()),
        reconsume_times: Some(0),
        unit_mode: false,
        batch: false,
        max_reconsume_times: None,
        broker_name: None,
    });
    RemotingCommand::request_with_header(RequestCode::SendMessageV2, &header)
        .with_body(Bytes::from(vec![b'm'; 100]))
}

/// One GET over HTTP/1.1; the body.
async fn get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("request");
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut answer))
        .await
        .expect("answered in time")
        .expect("read");
    let answer = String::from_utf8(answer).expect("utf-8");
    let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head
        .to_ascii_lowercase()
        .contains("content-type: application/openmetrics-text"));
    body.to_owned()
}

/// Samples by metric name and label set (as sorted `k=v` pairs).
fn parse(text: &str) -> HashMap<(String, Vec<String>), f64> {
    let lines = text.lines().map(|line| Ok(line.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    scrape
        .samples
        .into_iter()
        .map(|sample| {
            let mut labels: Vec<String> = sample
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            labels.sort();
            let value = match sample.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            };
            ((sample.metric, labels), value)
        })
        .collect()
}

fn sample(
    samples: &HashMap<(String, Vec<String>), f64>,
    name: &str,
    labels: &[&str],
) -> Option<f64> {
    let mut labels: Vec<String> = labels.iter().map(|l| (*l).to_owned()).collect();
    labels.sort();
    samples.get(&(name.to_owned(), labels)).copied()
}

fn pull(group: &str, offset: i64, max: i32) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::PullMessage,
        &PullMessageRequestHeader {
            consumer_group: group.into(),
            topic: TOPIC.into(),
            queue_id: 0,
            queue_offset: offset,
            max_msg_nums: max,
            // The subscription in the request: no consumer heartbeat needed.
            sys_flag: tidemark_protocol::headers::pull_sys_flag::SUBSCRIPTION,
            commit_offset: 0,
            suspend_timeout_millis: 0,
            subscription: Some("*".into()),
            sub_version: 1,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            broker_name: None,
        },
    )
}

fn pop(group: &str, max: i32) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::PopMessage,
        &PopMessageRequestHeader {
            consumer_group: group.into(),
            topic: TOPIC.into(),
            queue_id: 0,
            max_msg_nums: max,
            invisible_time: 300_000,
            poll_time: 0,
            born_time: tidemark_remoting::now_ms(),
            init_mode: 0,
            exp_type: Some("TAG".into()),
            exp: Some("*".into()),
            order: Some(false),
            attempt_id: None,
            broker_name: None,
        },
    )
}

/// The store's and the timer's gauges at rest: the timer message (due in two hours) is pending
/// under its real topic, nothing is due, and the oldest message was stored in this test.
fn storage_and_timers(value: &dyn Fn(&str, &[String]) -> f64, node: &[&str]) {
    let plain: Vec<String> = node.iter().map(|l| (*l).to_owned()).collect();
    let mut disk = plain.clone();
    disk.extend([
        "storage_type=local".to_owned(),
        "storage_medium=disk".to_owned(),
    ]);
    assert!(value("rocketmq_storage_size_bytes", &disk) > 0.0);
    assert!(value("rocketmq_storage_dispatch_behind_bytes", &disk) >= 0.0);
    let reserve = value("rocketmq_storage_message_reserve_time_milliseconds", &disk);
    assert!((0.0..120_000.0).contains(&reserve), "{reserve}");
    assert_eq!(value("tidemark_timer_pending_messages", &plain), 1.0);
    assert_eq!(value("rocketmq_timer_enqueue_lag", &plain), 0.0);
    let mut by_topic = plain.clone();
    by_topic.push(format!("topic={TIMER_TOPIC}"));
    assert_eq!(value("rocketmq_timing_messages", &by_topic), 1.0);
    assert_eq!(value("rocketmq_timer_enqueue_total", &by_topic), 1.0);
    assert_eq!(value("rocketmq_timer_dequeue_total", &by_topic), 0.0);
    // Due in two hours: in the 4 h bound's period (after 1 h), no other.
    for bound in ["5", "60", "300", "900", "3600", "14400", "28800", "86400"] {
        let mut labels = plain.clone();
        labels.push(format!("timer_bound_s={bound}"));
        let expected = if bound == "14400" { 1.0 } else { 0.0 };
        assert_eq!(
            value("rocketmq_timer_message_snapshot", &labels),
            expected,
            "{bound}"
        );
    }
    assert_eq!(value("rocketmq_timer_dequeue_lag", &plain), 0.0);
    assert_eq!(
        value("rocketmq_timer_dequeue_latency_milliseconds", &plain),
        0.0
    );
    assert_eq!(value("tidemark_store_disk_refuse_writes_ratio", &[]), 0.9);
}

/// RocketMQ 5's families at rest. Queue 0 holds 1,020 messages, queue 1 1,020. GROUP
/// committed 7 and 20 and pulled queue 0 up to 17; POP_GROUP popped 0..5 of queue 0 and
/// holds them.
fn rocketmq5_families(samples: &HashMap<(String, Vec<String>), f64>, body: &str) {
    let node = [
        "cluster=DefaultCluster",
        "node_type=broker",
        "node_id=broker-a",
    ];
    let consumer = |group: &str| {
        let mut labels: Vec<String> = node.iter().map(|l| (*l).to_owned()).collect();
        labels.extend([
            format!("topic={TOPIC}"),
            format!("consumer_group={group}"),
            "is_retry=false".to_owned(),
            "is_system=false".to_owned(),
        ]);
        labels
    };
    let value = |name: &str, labels: &[String]| {
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        sample(samples, name, &labels).unwrap_or_else(|| panic!("{name} {labels:?}\n{body}"))
    };
    storage_and_timers(&value, &node);
    let pulling = consumer(GROUP);
    assert_eq!(value("rocketmq_consumer_lag_messages", &pulling), 2_013.0);
    assert_eq!(value("rocketmq_consumer_inflight_messages", &pulling), 10.0);
    assert_eq!(value("rocketmq_consumer_ready_messages", &pulling), 2_003.0);
    let lag_ms = value("rocketmq_consumer_lag_latency_milliseconds", &pulling);
    let queueing_ms = value("rocketmq_consumer_queueing_latency_milliseconds", &pulling);
    assert!(lag_ms > 0.0 && lag_ms < 30_000.0, "{lag_ms}");
    assert!(
        queueing_ms > 0.0 && queueing_ms <= lag_ms,
        "{queueing_ms} {lag_ms}"
    );
    let popping = consumer(POP_GROUP);
    assert_eq!(value("rocketmq_consumer_inflight_messages", &popping), 5.0);
    assert_eq!(value("rocketmq_consumer_ready_messages", &popping), 2_035.0);
    assert_eq!(value("rocketmq_consumer_lag_messages", &popping), 2_040.0);
    // The one pull delivered ten, the pop five.
    assert_eq!(value("rocketmq_messages_out_total", &pulling), 10.0);
    assert_eq!(value("rocketmq_messages_out_total", &popping), 5.0);
    let mut producers: Vec<String> = node.iter().map(|l| (*l).to_owned()).collect();
    producers
        .extend(["language=java", "version=v4_9_8", "protocol_type=remoting"].map(String::from));
    assert_eq!(value("rocketmq_producer_connections", &producers), 1.0);
    let broker: Vec<String> = node.iter().map(|l| (*l).to_owned()).collect();
    assert_eq!(value("rocketmq_broker_permission", &broker), 6.0);
    // The two groups that read, made on first use.
    assert!(value("rocketmq_consumer_group_number", &broker) >= 2.0);

    // What clients sent: the 2,040 sends, not the retry or the dead letter sent back.
    let mut sent: Vec<String> = node.iter().map(|l| (*l).to_owned()).collect();
    sent.extend([
        format!("topic={TOPIC}"),
        "message_type=normal".to_owned(),
        "is_system=false".to_owned(),
    ]);
    assert_eq!(value("rocketmq_messages_in_total", &sent), 2_040.0);
    let bytes_in = value("rocketmq_throughput_in_total", &sent);
    assert!(bytes_in > 2_040.0 * 100.0, "stored records: {bytes_in}");
    // Each record (a 100-byte body and its header) is under 1 KiB: all in the first bucket.
    let size_line = |suffix: &str| {
        body.lines()
            .find(|line| {
                line.starts_with(&format!("rocketmq_message_size_{suffix}"))
                    && line.contains(&format!("topic=\"{TOPIC}\""))
            })
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("rocketmq_message_size_{suffix} of {TOPIC}\n{body}"))
    };
    assert_eq!(size_line("count"), 2_040.0);
    assert_eq!(size_line("sum"), bytes_in);
    assert_eq!(
        size_line("bucket{"),
        2_040.0,
        "the first bucket, le=1024, holds them all"
    );
    let mut delayed: Vec<String> = node.iter().map(|l| (*l).to_owned()).collect();
    delayed.extend([
        format!("topic={DELAY_TOPIC}"),
        "message_type=delay".to_owned(),
        "is_system=false".to_owned(),
    ]);
    assert_eq!(value("rocketmq_messages_in_total", &delayed), 1.0);
    // The one sent straight to the dead letters, by the topic it came from.
    let mut dead: Vec<String> = node.iter().map(|l| (*l).to_owned()).collect();
    dead.extend([
        format!("topic={TOPIC}"),
        format!("consumer_group={GROUP}"),
        "is_system=false".to_owned(),
    ]);
    assert_eq!(value("rocketmq_send_to_dlq_messages_total", &dead), 1.0);
    // Every send went through the handler: 2,040 successful SEND_MESSAGE_V2 to TOPIC, 1 delayed,
    // 1 timer message.
    let sends = body
        .lines()
        .find(|line| {
            line.starts_with("rocketmq_rpc_latency_milliseconds_count{")
                && line.contains("request_code=\"send_message_v2\"")
                && line.contains("response_code=\"success\"")
                && line.contains("protocol_type=\"remoting\"")
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("send latency count\n{body}"));
    assert_eq!(sends, 2_042.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_agree_with_consume_stats_under_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stop, stopping) = watch::channel(false);
    let namesrv = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let namesrv_addr = namesrv.local_addr().expect("bound").to_string();
    tokio::spawn(NameServer::serve(
        namesrv,
        NameServerConfig::default(),
        stopped(stopping.clone()),
    ));
    let main = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let vip = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let http = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let broker_addr = main.local_addr().expect("bound").to_string();
    let http_addr = http.local_addr().expect("bound").to_string();
    let config = BrokerConfig {
        store_path_root_dir: dir.path().to_path_buf(),
        namesrv_addr,
        listen_ip: "127.0.0.1".into(),
        listen_port: main.local_addr().expect("bound").port(),
        mapped_file_size_commit_log: 8 << 20,
        pre_online_timeout_ms: 0,
        default_topic_queue_nums: 2,
        ..BrokerConfig::default()
    };
    let broker = tokio::task::spawn_blocking(move || Broker::open(config))
        .await
        .expect("task")
        .expect("broker opens");
    let state = broker.state().clone();
    let serving = tokio::spawn(broker.serve(main, vip, stopped(stopping.clone())));
    tokio::spawn(tidemark_console::serve(http, state, stopped(stopping)));
    let client = RemotingClient::new(ClientConfig::default(), None);

    let mut first_offsets = Vec::new();
    for index in 0..40 {
        let response = client
            .invoke(&broker_addr, send(index), WAIT)
            .await
            .expect("sent");
        assert_eq!(response.response_code(), ResponseCode::Success);
        let header = response
            .decode_header::<SendMessageResponseHeader>()
            .expect("send response header");
        let (_, offset) = decode_offset_msg_id(&header.msg_id).expect("offset message id");
        first_offsets.push(offset);
    }
    // One failed delivery sent back for a retry, one straight to the dead letters.
    for (offset, delay_level) in [(first_offsets[0], 1), (first_offsets[1], -1)] {
        let header = ConsumerSendMsgBackRequestHeader {
            offset,
            group: GROUP.into(),
            delay_level,
            origin_msg_id: None,
            origin_topic: Some(TOPIC.into()),
            unit_mode: false,
            max_reconsume_times: None,
            broker_name: None,
        };
        let response = client
            .invoke(
                &broker_addr,
                RemotingCommand::request_with_header(RequestCode::ConsumerSendMsgBack, &header),
                WAIT,
            )
            .await
            .expect("sent back");
        assert_eq!(response.response_code(), ResponseCode::Success);
    }
    // A producer connection, as a client's heartbeat announces it.
    let heartbeat = HeartbeatData {
        client_id: "127.0.0.1@metrics".into(),
        producer_data_set: vec![ProducerData {
            group_name: "metrics_producer".into(),
        }],
        ..HeartbeatData::default()
    };
    let response = client
        .invoke(
            &broker_addr,
            RemotingCommand::request(RequestCode::HeartBeat).with_body(heartbeat.to_json_bytes()),
            WAIT,
        )
        .await
        .expect("heartbeat");
    assert_eq!(response.response_code(), ResponseCode::Success);
    for (queue_id, offset) in [(0, 7), (1, 20)] {
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: GROUP.into(),
            topic: TOPIC.into(),
            queue_id,
            commit_offset: offset,
            broker_name: None,
        };
        let response = client
            .invoke(
                &broker_addr,
                RemotingCommand::request_with_header(RequestCode::UpdateConsumerOffset, &header),
                WAIT,
            )
            .await
            .expect("committed");
        assert_eq!(response.response_code(), ResponseCode::Success);
    }

    // Load while scraping: stored counts only grow.
    let load = {
        let client = RemotingClient::new(ClientConfig::default(), None);
        let broker_addr = broker_addr.clone();
        tokio::spawn(async move {
            for index in 40..2_040 {
                let _ = client.invoke(&broker_addr, send(index), WAIT).await;
            }
            client.shutdown();
        })
    };
    let mut last_stored = 0.0;
    for _ in 0..5 {
        let samples = parse(&get(&http_addr, "/metrics").await);
        let stored = sample(
            &samples,
            "tidemark_topic_stored_messages_total",
            &[&format!("topic={TOPIC}")],
        )
        .expect("stored counter");
        assert!(stored >= last_stored, "{stored} after {last_stored}");
        last_stored = stored;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    load.await.expect("load");

    // A delayed message to a topic of its own: it arrives as `delay` under that topic.
    let delayed = client
        .invoke(
            &broker_addr,
            send_to(DELAY_TOPIC, 9_999, Some(("DELAY", "3".to_owned()))),
            WAIT,
        )
        .await
        .expect("sent delayed");
    assert_eq!(delayed.response_code(), ResponseCode::Success);
    // A timer message due in two hours, for the timer gauges.
    let due = tidemark_remoting::now_ms() + 2 * 3_600_000;
    let timed = client
        .invoke(
            &broker_addr,
            send_to(
                TIMER_TOPIC,
                9_998,
                Some(("TIMER_DELIVER_MS", due.to_string())),
            ),
            WAIT,
        )
        .await
        .expect("sent timer message");
    assert_eq!(timed.response_code(), ResponseCode::Success);

    // The group pulls ten from queue 0 (committed at 7); another group pops five from it.
    let pulled = client
        .invoke(&broker_addr, pull(GROUP, 7, 10), WAIT)
        .await
        .expect("pulled");
    assert_eq!(pulled.response_code(), ResponseCode::Success);
    let popped = client
        .invoke(&broker_addr, pop(POP_GROUP, 5), WAIT)
        .await
        .expect("popped");
    assert_eq!(popped.response_code(), ResponseCode::Success);

    // At rest: lag and time lag against the broker's own figures, once the timer service has
    // taken the timer message in (it is woken by the send; bounded wait).
    let mut body = get(&http_addr, "/metrics").await;
    for _ in 0..100 {
        let pending = sample(
            &parse(&body),
            "tidemark_timer_pending_messages",
            &[
                "cluster=DefaultCluster",
                "node_type=broker",
                "node_id=broker-a",
            ],
        );
        if pending == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        body = get(&http_addr, "/metrics").await;
    }
    let samples = parse(&body);
    assert_eq!(
        sample(
            &samples,
            "tidemark_topic_stored_messages_total",
            &[&format!("topic={TOPIC}")]
        ),
        Some(2_040.0)
    );
    let stats_request = RemotingCommand::request_with_header(
        RequestCode::GetConsumeStats,
        &GetConsumeStatsRequestHeader {
            consumer_group: GROUP.into(),
            topic: Some(TOPIC.into()),
            topic_list: None,
        },
    );
    let stats = client
        .invoke(&broker_addr, stats_request, WAIT)
        .await
        .expect("stats");
    let stats = ConsumeStats::from_json_bytes(&stats.body).expect("consume stats");
    let mut total_diff = 0.0;
    for (queue, offsets) in &stats.offset_table {
        let labels = [
            format!("group={GROUP}"),
            format!("topic={TOPIC}"),
            format!("queue={}", queue.queue_id),
        ];
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        let diff = (offsets.broker_offset - offsets.consumer_offset) as f64;
        total_diff += diff;
        assert_eq!(
            sample(&samples, "tidemark_consumer_lag_messages", &labels),
            Some(diff),
            "{labels:?}"
        );
        assert_eq!(
            sample(&samples, "tidemark_consumer_offset", &labels),
            Some(offsets.consumer_offset as f64)
        );
        let time_lag =
            sample(&samples, "tidemark_consumer_lag_seconds", &labels).expect("time lag");
        assert!(time_lag > 0.0 && time_lag < 30.0, "{time_lag}");
    }
    assert_eq!(total_diff, 1_020.0 - 7.0 + 1_020.0 - 20.0);
    assert_eq!(
        sample(
            &samples,
            "rocketmq_group_diff",
            &[
                "cluster=DefaultCluster",
                "broker=broker-a",
                &format!("topic={TOPIC}"),
                &format!("group={GROUP}")
            ]
        ),
        Some(total_diff)
    );
    assert!(body.contains("tidemark_store_latency_seconds_bucket"));
    assert_eq!(
        sample(
            &samples,
            "tidemark_consumer_retried_messages_total",
            &[&format!("group={GROUP}")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &samples,
            "tidemark_consumer_dead_lettered_messages_total",
            &[&format!("group={GROUP}")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &samples,
            "tidemark_client_connections",
            &["role=producer", "group=metrics_producer"]
        ),
        Some(1.0)
    );
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|line| Ok(line.to_owned())))
        .expect("Prometheus text");
    let histogram_count = |name: &str| {
        scrape
            .samples
            .iter()
            .find_map(|sample| match &sample.value {
                prometheus_parse::Value::Histogram(buckets) if sample.metric == name => buckets
                    .iter()
                    .find(|bucket| bucket.less_than == f64::INFINITY)
                    .map(|bucket| bucket.count),
                _ => None,
            })
            .unwrap_or_else(|| panic!("histogram {name} in the scrape"))
    };
    // Every send of this test went through the broker's send handler.
    assert!(histogram_count("tidemark_send_latency_seconds") >= 2_040.0);
    assert!(histogram_count("tidemark_commit_log_sync_seconds") >= 0.0);
    assert!(histogram_count("tidemark_pull_read_seconds") >= 0.0);
    assert!(sample(&samples, "tidemark_store_disk_used_ratio", &[]).is_some());
    assert!(body.trim_end().ends_with("# EOF"));
    rocketmq5_families(&samples, &body);
    client.shutdown();
    let _ = stop.send(true);
    // The broker writes its last files before the directory goes.
    serving.await.expect("broker task").expect("clean stop");
}
