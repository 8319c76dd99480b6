//! A real Prometheus (Debian's package) scrapes Tidemark once a second and evaluates the rules
//! shipped in deploy/prometheus; PromQL through its HTTP API checks what operators would read.
//! A `tidemark dev` under a small load: each RocketMQ 5 family is there with its labels and
//! moves, a group's lag equals what `tidemark admin consumer-progress` says, POP's in-flight
//! count is exact while messages are held, and dead letters raise their alert. Controllers with
//! a broker set: the replicated state is read, and a killed slave and then a killed master
//! raise the SyncStateSet and no-master alerts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tidemark_client::{
    concurrent_fn, ClientConfig, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer,
    PushConsumer, SimpleConsumer,
};
use tidemark_tests::admin_cli::{admin_json, int, rows};
use tidemark_tests::counting::CountingConsumer;
use tidemark_tests::prometheus::{shipped_rules, Prometheus, Sample};
use tidemark_tests::replica_set::{field, ReplicaSet};
use tidemark_tests::{init_logging, unique, DevServer};

const SETTLE: Duration = Duration::from_secs(30);

/// The single value of a one-series answer.
fn only(answer: &[Sample]) -> f64 {
    assert_eq!(answer.len(), 1, "one series expected: {answer:?}");
    answer[0].1
}

/// Asks `promql` until it answers with at least one series whose values all pass `accept`.
async fn until(prometheus: &Prometheus, promql: &str, accept: fn(f64) -> bool) -> Vec<Sample> {
    let (answer, accepted) = prometheus
        .query_until(promql, SETTLE, |answer| {
            !answer.is_empty() && answer.iter().all(|(_, value)| accept(*value))
        })
        .await;
    assert!(accepted, "{promql}: {answer:?}");
    answer
}

/// Sum of a field over `consumer-progress --json`'s queues of `topic`.
async fn progress_sum(namesrv: &str, group: &str, topic: &str, key: &str) -> i64 {
    let progress = admin_json(&["consumer-progress"], namesrv, &["-g", group, "-t", topic]).await;
    let queues = field(&progress, "queues").expect("queues");
    rows(queues)
        .iter()
        .filter(|queue| field(queue, key).is_some())
        .map(|queue| int(queue, key))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_reads_every_family_of_a_dev_server_under_load() {
    init_logging();
    let server = DevServer::start_with_console("prometheus-dev", &[]);
    let ns = server.namesrv_addr();
    let prometheus = Prometheus::start(
        "prometheus-dev-scraper",
        &[(
            "tidemark",
            vec![format!("127.0.0.1:{}", server.http_port())],
        )],
        &[shipped_rules()],
    );
    let rules = prometheus.rules().await;
    assert!(rules.len() >= 15, "the shipped rules loaded: {rules:?}");

    let topic = unique("PromTopic");
    let producer = Arc::new(
        Producer::builder(unique("prom_producer"))
            .namesrv_addr(&ns)
            .start()
            .await
            .expect("producer"),
    );
    producer
        .send(Message::new(&topic, "first"))
        .await
        .expect("first send");
    let sending = Arc::new(AtomicBool::new(true));
    let load = {
        let (producer, sending, topic) = (producer.clone(), sending.clone(), topic.clone());
        tokio::spawn(async move {
            let mut sent = 0u64;
            while sending.load(Ordering::SeqCst) {
                let body = format!("load-{sent}-{}", "x".repeat(100));
                producer
                    .send(Message::new(&topic, body))
                    .await
                    .expect("send under load");
                sent += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            sent
        })
    };

    // A push group that keeps up, and one whose every message fails straight to its DLQ.
    let group = unique("prom_push");
    let pushing = CountingConsumer::start(ClientConfig::new(&ns), &group, &topic).await;
    let failing_group = unique("prom_failing");
    let failing = PushConsumer::builder(&failing_group)
        .client_config(ClientConfig::new(&ns))
        .subscribe(&topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .max_reconsume_times(0)
        .start_concurrently(concurrent_fn(|_messages: Vec<MessageExt>| async {
            ConsumeStatus::ReconsumeLater
        }))
        .await
        .expect("failing consumer");

    let t = &topic;
    let g = &group;
    until(
        &prometheus,
        &format!(r#"rate(rocketmq_messages_in_total{{topic="{t}",message_type="normal",is_system="false",node_type="broker",node_id="broker-a"}}[1m])"#),
        |rate| rate > 0.0,
    )
    .await;
    until(
        &prometheus,
        &format!(r#"rate(rocketmq_throughput_in_total{{topic="{t}"}}[1m])"#),
        |rate| rate > 0.0,
    )
    .await;
    // The bodies are about 110 bytes: every message is in the first bucket (1 KiB).
    until(
        &prometheus,
        &format!(r#"histogram_quantile(0.9, sum by (le) (rate(rocketmq_message_size_bucket{{topic="{t}"}}[1m])))"#),
        |size| size > 0.0 && size <= 1024.0,
    )
    .await;
    until(
        &prometheus,
        &format!(r#"rate(rocketmq_messages_out_total{{topic="{t}",consumer_group="{g}",is_retry="false"}}[1m])"#),
        |rate| rate > 0.0,
    )
    .await;
    until(
        &prometheus,
        &format!(r#"rate(rocketmq_throughput_out_total{{topic="{t}",consumer_group="{g}"}}[1m])"#),
        |rate| rate > 0.0,
    )
    .await;
    let sends = until(
        &prometheus,
        r#"sum by (request_code) (rate(rocketmq_rpc_latency_milliseconds_count{protocol_type="remoting",response_code="success"}[1m]))"#,
        |rate| rate >= 0.0,
    )
    .await;
    assert!(
        sends.iter().any(|(labels, rate)| labels
            .get("request_code")
            .is_some_and(|code| code.starts_with("send_message"))
            && *rate > 0.0),
        "sends are timed: {sends:?}"
    );
    until(
        &prometheus,
        r#"histogram_quantile(0.99, sum by (le) (rate(rocketmq_rpc_latency_milliseconds_bucket{request_code=~"send_message.*"}[1m])))"#,
        |p99| p99 > 0.0,
    )
    .await;
    until(
        &prometheus,
        r#"sum(rocketmq_producer_connections{protocol_type="remoting"})"#,
        |connections| connections >= 1.0,
    )
    .await;
    until(
        &prometheus,
        &format!(
            r#"sum(rocketmq_consumer_connections{{consumer_group="{g}",consume_mode="push"}})"#
        ),
        |connections| connections >= 1.0,
    )
    .await;
    for (gauge, accept) in [
        (
            "rocketmq_broker_permission",
            (|v| v == 6.0) as fn(f64) -> bool,
        ),
        ("rocketmq_topic_number", |v| v >= 1.0),
        ("rocketmq_consumer_group_number", |v| v >= 2.0),
        ("rocketmq_storage_size_bytes", |v| v > 0.0),
        ("rocketmq_storage_flush_behind_bytes", |v| v >= 0.0),
        ("rocketmq_storage_dispatch_behind_bytes", |v| v >= 0.0),
        ("rocketmq_storage_message_reserve_time_milliseconds", |v| {
            v >= 0.0
        }),
        ("rocketmq_timer_enqueue_lag", |v| v >= 0.0),
        ("rocketmq_timer_dequeue_latency_milliseconds", |v| v >= 0.0),
    ] {
        until(&prometheus, gauge, accept).await;
    }

    // Dead letters: the failing group's, counted and alerting.
    until(
        &prometheus,
        &format!(r#"increase(rocketmq_send_to_dlq_messages_total{{topic="{t}",consumer_group="{failing_group}"}}[1m])"#),
        |increase| increase > 0.0,
    )
    .await;
    until(
        &prometheus,
        &format!(r#"ALERTS{{alertname="TidemarkDeadLettersIncreasing",alertstate="firing",consumer_group="{failing_group}",topic="{t}"}}"#),
        |active| active == 1.0,
    )
    .await;
    failing.shutdown().await;

    // POP: five held, none acknowledged.
    let pop_group = unique("prom_pop");
    let simple = SimpleConsumer::builder(&pop_group)
        .namesrv_addr(&ns)
        .subscribe(&topic, "*")
        .invisible_duration(Duration::from_secs(120))
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .start()
        .await
        .expect("simple consumer");
    let mut held = Vec::new();
    for _ in 0..20 {
        held.extend(simple.receive(5 - held.len()).await.expect("receive"));
        if held.len() >= 5 {
            break;
        }
    }
    assert_eq!(held.len(), 5, "five messages received");
    let pop_in_flight = progress_sum(&ns, &pop_group, &topic, "popInFlight").await;
    assert_eq!(pop_in_flight, 5, "consumer-progress counts the five held");
    let in_flight = until(
        &prometheus,
        &format!(r#"sum(rocketmq_consumer_inflight_messages{{consumer_group="{pop_group}",topic="{t}"}})"#),
        |held| held == 5.0,
    )
    .await;
    assert_eq!(only(&in_flight), 5.0);

    // At rest: the push group leaves, 25 more arrive; its lag is what consumer-progress says.
    sending.store(false, Ordering::SeqCst);
    let sent = load.await.expect("load task") + 1;
    assert!(
        pushing.reaches(sent as usize).await,
        "the push group consumed {} of {sent}",
        pushing.consumed()
    );
    pushing.shutdown().await;
    for i in 0..25 {
        producer
            .send(Message::new(&topic, format!("after-{i}")))
            .await
            .expect("send at rest");
    }
    let expected = progress_sum(&ns, &group, &topic, "lag").await;
    assert!(
        expected >= 25,
        "the 25 sent after the group left: {expected}"
    );
    let lag = until(
        &prometheus,
        &format!(r#"sum(rocketmq_consumer_lag_messages{{consumer_group="{g}",topic="{t}"}})"#),
        |lag| lag >= 25.0,
    )
    .await;
    let (answer, equal) = prometheus
        .query_until(
            &format!(r#"sum(rocketmq_consumer_lag_messages{{consumer_group="{g}",topic="{t}"}})"#),
            SETTLE,
            |answer| answer.len() == 1 && answer[0].1 == expected as f64,
        )
        .await;
    assert!(
        equal,
        "Prometheus's lag {answer:?} (first {lag:?}) against consumer-progress's {expected}"
    );
    until(
        &prometheus,
        &format!(r#"tidemark:consumer_lag_messages:sum{{consumer_group="{g}",topic="{t}"}}"#),
        |sum| sum >= 25.0,
    )
    .await;
    until(
        &prometheus,
        &format!(
            r#"max(rocketmq_consumer_lag_latency_milliseconds{{consumer_group="{g}",topic="{t}"}})"#
        ),
        |age| age > 0.0,
    )
    .await;
    for message in &held {
        simple.ack(message).await.expect("ack");
    }
    until(
        &prometheus,
        &format!(r#"sum(rocketmq_consumer_inflight_messages{{consumer_group="{pop_group}",topic="{t}"}})"#),
        |held| held == 0.0,
    )
    .await;
    simple.shutdown().await;
    producer.shutdown().await;

    let rules = prometheus.rules().await;
    let unhealthy: Vec<_> = rules
        .iter()
        .filter(|(_, health, _)| health != "ok")
        .collect();
    assert!(unhealthy.is_empty(), "every rule evaluates: {unhealthy:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_sees_a_slave_leave_and_a_broker_set_lose_its_master() {
    init_logging();
    let mut set = ReplicaSet::start(2, 3).await;
    let prometheus = Prometheus::start(
        "prometheus-controller-scraper",
        &[("tidemark-controllers", set.controller_metrics())],
        &[shipped_rules()],
    );
    until(
        &prometheus,
        "sum(tidemark_controller_role == bool 3)",
        |leaders| leaders == 1.0,
    )
    .await;
    until(
        &prometheus,
        "min(tidemark_controller_leader_known)",
        |known| known == 1.0,
    )
    .await;
    let replicas = until(
        &prometheus,
        r#"tidemark_controller_replica_in_sync_state_set{broker_set="broker-rs"} and on (instance) tidemark_controller_role == 3"#,
        |in_sync| in_sync == 1.0,
    )
    .await;
    assert_eq!(replicas.len(), 2, "both replicas in sync: {replicas:?}");
    let slave = until(
        &prometheus,
        r#"tidemark_controller_replica_is_master{broker_set="broker-rs"} == 0 and on (instance) tidemark_controller_role == 3"#,
        |_| true,
    )
    .await;
    assert_eq!(slave.len(), 1, "one slave: {slave:?}");
    let slave_id = slave[0].0.get("broker_id").cloned().expect("broker_id");
    let slave_addr = slave[0].0.get("address").cloned().expect("address");
    let slave_index = set
        .replica_at(&slave_addr)
        .unwrap_or_else(|| panic!("{slave_addr} is not one of {:?}", set.replica_addrs));
    until(
        &prometheus,
        r#"max(tidemark_controller_broker_set_has_master{broker_set="broker-rs"})"#,
        |has| has == 1.0,
    )
    .await;

    // The slave dies: the master drops it from the SyncStateSet; the alert goes pending.
    set.replicas[slave_index].kill();
    let alert = format!(
        r#"ALERTS{{alertname="TidemarkReplicaOutOfSyncStateSet",broker_set="broker-rs",broker_id="{slave_id}"}}"#
    );
    let (answer, raised) = prometheus
        .query_until(&alert, Duration::from_secs(60), |answer| answer.len() == 1)
        .await;
    assert!(raised, "{alert}: {answer:?}\n{:?}", set.view());
    let quiet = prometheus
        .query(r#"ALERTS{alertname="TidemarkNoMaster"}"#)
        .await;
    assert!(quiet.is_empty(), "the master still serves: {quiet:?}");

    // The master dies too: nobody of the SyncStateSet is left, no master is elected.
    let master_index = 1 - slave_index;
    set.replicas[master_index].kill();
    let (answer, raised) = prometheus
        .query_until(
            r#"ALERTS{alertname="TidemarkNoMaster",broker_set="broker-rs"}"#,
            Duration::from_secs(60),
            |answer| answer.len() == 1,
        )
        .await;
    assert!(raised, "no master: {answer:?}\n{:?}", set.view());
    until(
        &prometheus,
        r#"sum(tidemark_controller_replica_alive{broker_set="broker-rs"} and on (instance) tidemark_controller_role == 3)"#,
        |alive| alive == 0.0,
    )
    .await;
}
