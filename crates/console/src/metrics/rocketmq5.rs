//! RocketMQ 5's broker metric families (RIP-46), named as its Prometheus exporter shows them
//! in 5.1.4–5.3.x — a unit suffix where the instrument has a unit
//! (`rocketmq_consumer_lag_latency_milliseconds`), counters already ending in `_total` — with
//! its label keys and values, next to Tidemark's own families, so 5.x dashboards and alerts
//! work unchanged. Every series carries `cluster`, `node_type="broker"` and `node_id` (the
//! broker name, as RocketMQ sets it). Where RocketMQ's own definitions are loose, the choice
//! made is written in docs/book/src/guides/metrics.md.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use tidemark_broker::clients::ConnectionKind;
use tidemark_broker::pop::revive::popped_topic;
use tidemark_broker::stats::{
    MessageKind, TrafficTable, FINISH_LATENCY_BUCKETS_S, MESSAGE_SIZE_BUCKETS,
    RPC_LATENCY_BUCKETS_MS,
};
use tidemark_broker::BrokerState;
use tidemark_protocol::body::{ConsumeType, QueueProgressView};
use tidemark_protocol::code::version;
use tidemark_protocol::{RequestCode, ResponseCode};

use super::{family, storage, Counters, IntGauges, Labels};
use prometheus_client::registry::Registry;

/// The labels every RocketMQ 5 series starts with.
pub(super) struct Node<'a> {
    cluster: &'a str,
    node_id: &'a str,
}

impl Node<'_> {
    pub(super) fn labels(&self, more: &[(&str, &str)]) -> Labels {
        let mut labels = vec![
            ("cluster".to_owned(), self.cluster.to_owned()),
            ("node_type".to_owned(), "broker".to_owned()),
            ("node_id".to_owned(), self.node_id.to_owned()),
        ];
        labels.extend(
            more.iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned())),
        );
        labels
    }
}

/// Registers RocketMQ 5's families with the broker's values at `now_ms`.
pub fn register(registry: &mut Registry, state: &BrokerState, traffic: &TrafficTable, now_ms: i64) {
    let node = Node {
        cluster: &state.config.broker_cluster_name,
        node_id: &state.config.broker_name,
    };
    incoming(registry, state, traffic, &node);
    outgoing(registry, state, traffic, &node);
    dead_lettered(registry, state, traffic, &node);
    transactions(registry, state, &node);
    registry.register_collector(Box::new(request_latencies(state, &node)));
    consumers(registry, state, &node, now_ms);
    connections(registry, state, &node);
    broker(registry, state, &node);
    storage::register(registry, state, &node, now_ms);
}

/// Whether RocketMQ counts `topic` or `group` as the system's own (`TopicValidator` and
/// `MixAll.isSysConsumerGroup`).
fn is_system(state: &BrokerState, topic: &str, group: Option<&str>) -> &'static str {
    let system = state.metadata.topics.is_system(topic)
        || topic.starts_with("rmq_sys_")
        || topic == "TBW102"
        || group.is_some_and(|group| group.starts_with("CID_RMQ_SYS_"));
    if system {
        "true"
    } else {
        "false"
    }
}

/// Histograms of one family, one per label set, from counts kept per bucket (the last slot:
/// above every bound), as the broker's statistics keep them.
#[derive(Debug)]
struct Histograms {
    name: &'static str,
    help: &'static str,
    bounds: Vec<f64>,
    /// Labels, per-bucket counts, sum and count.
    series: Vec<(Labels, Vec<u64>, f64, u64)>,
}

impl Histograms {
    fn new(name: &'static str, help: &'static str, bounds: &[u64]) -> Self {
        Histograms {
            name,
            help,
            bounds: bounds.iter().map(|bound| *bound as f64).collect(),
            series: Vec::new(),
        }
    }

    fn push(&mut self, labels: Labels, by_bucket: &[u64], sum: f64, count: u64) {
        self.series.push((labels, by_bucket.to_vec(), sum, count));
    }
}

impl Collector for Histograms {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family =
            encoder.encode_descriptor(self.name, self.help, None, MetricType::Histogram)?;
        for (labels, by_bucket, sum, count) in &self.series {
            // Per bucket, not cumulative: the encoder adds them up; `+Inf` is `f64::MAX`.
            let buckets: Vec<(f64, u64)> = self
                .bounds
                .iter()
                .copied()
                .chain([f64::MAX])
                .zip(by_bucket.iter().copied())
                .collect();
            family
                .encode_family(labels)?
                .encode_histogram::<NoLabelSet>(*sum, *count, &buckets, None)?;
        }
        Ok(())
    }
}

/// `rocketmq_messages_in_total`, `rocketmq_throughput_in_total` and `rocketmq_message_size`:
/// what clients sent, per topic and kind, in stored record bytes as RocketMQ counts them. A
/// delayed message or a transaction's half counts once, under the topic the client named,
/// when it arrives (RocketMQ counts it under its system topic, and a delay-level message again
/// when it is due); retries and dead letters are not arrivals.
fn incoming(registry: &mut Registry, state: &BrokerState, traffic: &TrafficTable, node: &Node) {
    let messages: Counters = family(
        registry,
        "rocketmq_messages_in",
        "RocketMQ 5: messages clients sent, per topic and message type",
    );
    let bytes: Counters = family(
        registry,
        "rocketmq_throughput_in",
        "RocketMQ 5: bytes of the messages clients sent (as stored), per topic and message type",
    );
    let mut sizes = Histograms::new(
        "rocketmq_message_size",
        "RocketMQ 5: sizes of the messages clients sent (stored record bytes)",
        &MESSAGE_SIZE_BUCKETS,
    );
    for (topic, kinds) in &traffic.arrived {
        for (kind, arrivals) in MessageKind::ALL.iter().zip(kinds) {
            if arrivals.messages == 0 {
                continue;
            }
            let labels = node.labels(&[
                ("topic", topic),
                ("message_type", kind.name()),
                ("is_system", is_system(state, topic, None)),
            ]);
            messages.get_or_create(&labels).inc_by(arrivals.messages);
            bytes.get_or_create(&labels).inc_by(arrivals.bytes);
            sizes.push(
                labels,
                &arrivals.by_size,
                arrivals.bytes as f64,
                arrivals.messages,
            );
        }
    }
    registry.register_collector(Box::new(sizes));
}

/// `rocketmq_rpc_latency_milliseconds`: each request's time in the broker's handler, by
/// request and response code (RocketMQ's lower-cased constant names), with RocketMQ's bounds.
/// A request that asked to be held counts its wait, as in RocketMQ; its `is_long_polling` says
/// it asked, whether or not it had to wait.
fn request_latencies(state: &BrokerState, node: &Node) -> Histograms {
    let mut histograms = Histograms::new(
        "rocketmq_rpc_latency_milliseconds",
        "RocketMQ 5: a request's time in the broker, from its handler's start to its answer",
        &RPC_LATENCY_BUCKETS_MS,
    );
    let code_name = |java: &str, raw: i32| match java {
        "UNKNOWN" => raw.to_string(),
        known => known.to_ascii_lowercase(),
    };
    for (kind, latency) in state.stats.rpc.snapshot() {
        let request = RequestCode::from_i32(kind.request_code).java_name();
        let response = ResponseCode::from_i32(kind.response_code).java_name();
        let labels = node.labels(&[
            ("protocol_type", if kind.grpc { "grpc" } else { "remoting" }),
            (
                "is_long_polling",
                if kind.long_polling { "true" } else { "false" },
            ),
            ("request_code", &code_name(request, kind.request_code)),
            ("response_code", &code_name(response, kind.response_code)),
            ("result", "success"),
        ]);
        histograms.push(
            labels,
            &latency.by_bound,
            latency.sum_ms as f64,
            latency.count,
        );
    }
    histograms
}

/// `rocketmq_messages_out_total` and `rocketmq_throughput_out_total`: messages and bytes
/// delivered per topic and group. As RocketMQ counts them, a push or pull consumer's reads of
/// its `%RETRY%group` topic and of dead-letter topics are left out; a POP consumer's reads of
/// its retry topic count under the original topic with `is_retry="true"`.
fn outgoing(registry: &mut Registry, state: &BrokerState, traffic: &TrafficTable, node: &Node) {
    let messages: Counters = family(
        registry,
        "rocketmq_messages_out",
        "RocketMQ 5: messages delivered (pulled or popped) per topic and group",
    );
    let bytes: Counters = family(
        registry,
        "rocketmq_throughput_out",
        "RocketMQ 5: bytes of messages delivered per topic and group",
    );
    for ((topic, group), flow) in &traffic.delivered {
        let (topic, is_retry) = if topic.starts_with("%DLQ%") {
            continue;
        } else if topic.starts_with("%RETRY%") {
            let original = popped_topic(group, topic);
            if original == *topic {
                continue;
            }
            (original, "true")
        } else {
            (topic.clone(), "false")
        };
        let labels = node.labels(&[
            ("topic", &topic),
            ("consumer_group", group),
            ("is_retry", is_retry),
            ("is_system", is_system(state, &topic, Some(group))),
        ]);
        messages.get_or_create(&labels).inc_by(flow.messages);
        bytes.get_or_create(&labels).inc_by(flow.bytes);
    }
}

/// `rocketmq_send_to_dlq_messages_total`: messages moved to a group's dead-letter topic, by
/// the topic they were first sent to — by a consumer's send-back past its maximum, or by the
/// POP revive service.
fn dead_lettered(
    registry: &mut Registry,
    state: &BrokerState,
    traffic: &TrafficTable,
    node: &Node,
) {
    let moved: Counters = family(
        registry,
        "rocketmq_send_to_dlq_messages",
        "RocketMQ 5: messages moved to the group's dead-letter topic, by the topic they were sent to",
    );
    for ((group, topic), count) in &traffic.dead_lettered {
        moved
            .get_or_create(&node.labels(&[
                ("consumer_group", group),
                ("topic", topic),
                ("is_system", is_system(state, topic, Some(group))),
            ]))
            .inc_by(*count);
    }
}

/// The transaction families, per real topic: commits and rollbacks producers made, how long
/// each transaction took from its half to its resolution, and the halves still pending.
fn transactions(registry: &mut Registry, state: &BrokerState, node: &Node) {
    let committed: Counters = family(
        registry,
        "rocketmq_commit_messages",
        "RocketMQ 5: transactional messages committed, per topic",
    );
    let rolled_back: Counters = family(
        registry,
        "rocketmq_rollback_messages",
        "RocketMQ 5: transactional messages rolled back, per topic",
    );
    // Despite its name in seconds with bounds of 5 s to a day, as Apache's broker records it,
    // so dashboards built on it read the same.
    let mut latencies = Histograms::new(
        "rocketmq_finish_message_latency_milliseconds",
        "RocketMQ 5: seconds (as RocketMQ records them, despite the name) from a transaction's half to its commit or rollback",
        &FINISH_LATENCY_BUCKETS_S,
    );
    for (topic, finished) in state.stats.transactions.snapshot() {
        let labels = node.labels(&[("topic", &topic)]);
        if finished.committed > 0 {
            committed.get_or_create(&labels).inc_by(finished.committed);
        }
        if finished.rolled_back > 0 {
            rolled_back
                .get_or_create(&labels)
                .inc_by(finished.rolled_back);
        }
        latencies.push(
            labels,
            &finished.by_latency,
            finished.latency_sum_s as f64,
            finished.committed + finished.rolled_back,
        );
    }
    registry.register_collector(Box::new(latencies));
    let pending: IntGauges = family(
        registry,
        "rocketmq_half_messages",
        "RocketMQ 5: transactional messages stored and not yet committed or rolled back, per topic",
    );
    let mut halves: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for half in state.transactions.snapshot() {
        *halves.entry(half.real_topic).or_default() += 1;
    }
    for (topic, count) in halves {
        pending
            .get_or_create(&node.labels(&[("topic", &topic)]))
            .set(count);
    }
}

/// One group's position in one topic, summed over its queues on this broker.
#[derive(Default)]
struct Backlog {
    /// Stored and not yet consumed.
    lag: i64,
    /// Handed out and not yet consumed.
    in_flight: i64,
    /// Stored and not yet handed out.
    ready: i64,
    /// Age of the oldest message not consumed (0 when none).
    lag_ms: i64,
    /// Age of the oldest message not handed out (0 when none).
    queueing_ms: i64,
}

impl Backlog {
    /// Adds one queue. A queue the group pops: handed out is what is in flight, the rest from
    /// the POP cursor on is ready; acknowledged messages above the oldest in flight are
    /// neither. A queue the group pulls: handed out is from the committed offset to where its
    /// last pull told it to go on.
    fn add(&mut self, state: &BrokerState, group: &str, queue: &QueueProgressView, now_ms: i64) {
        let max = queue.broker_offset;
        let committed = queue.consumer_offset.min(max);
        let handed_out_end = match queue.pop_next_offset {
            Some(next) => next,
            None => state
                .progress
                .offsets
                .queue_progress(&queue.topic, group, queue.queue_id)
                .and_then(|progress| progress.pulled)
                .unwrap_or(committed),
        }
        .clamp(committed, max);
        let in_flight = match queue.pop_in_flight {
            Some(in_flight) => in_flight,
            None => handed_out_end - committed,
        };
        let ready = max - handed_out_end;
        self.in_flight += in_flight;
        self.ready += ready;
        self.lag += in_flight + ready;
        self.lag_ms = self.lag_ms.max(queue.time_lag_ms);
        if handed_out_end < max {
            let age = state
                .log()
                .store_timestamp_at(&queue.topic, queue.queue_id, handed_out_end)
                .ok()
                .flatten()
                .map_or(0, |stored| (now_ms - stored).max(0));
            self.queueing_ms = self.queueing_ms.max(age);
        }
    }
}

/// The consumer families, per group and topic (`is_retry="false"`) and, for a group that pops,
/// its retry topic of that topic too (`is_retry="true"`, under the original topic's name, as
/// RocketMQ reports it). Exact from the broker's own tables: a POP group's in-flight and ready
/// counts come from its POP cursor, not from estimates.
fn consumers(registry: &mut Registry, state: &BrokerState, node: &Node, now_ms: i64) {
    let lag: IntGauges = family(
        registry,
        "rocketmq_consumer_lag_messages",
        "RocketMQ 5: messages stored and not yet consumed by the group",
    );
    let lag_latency: IntGauges = family(
        registry,
        "rocketmq_consumer_lag_latency_milliseconds",
        "RocketMQ 5: age of the oldest message the group has not consumed",
    );
    let in_flight: IntGauges = family(
        registry,
        "rocketmq_consumer_inflight_messages",
        "RocketMQ 5: messages handed out to the group and not yet consumed",
    );
    let ready: IntGauges = family(
        registry,
        "rocketmq_consumer_ready_messages",
        "RocketMQ 5: messages stored and not yet handed out to the group",
    );
    let queueing: IntGauges = family(
        registry,
        "rocketmq_consumer_queueing_latency_milliseconds",
        "RocketMQ 5: age of the oldest message not yet handed out to the group",
    );
    let mut topics = state.metadata.topics.names();
    topics.sort();
    let popping = state.pop.groups_in_flight();
    for topic in topics.iter().filter(|topic| !topic.starts_with('%')) {
        let mut groups = state.progress.offsets.groups_of_topic(topic);
        for (group, popped) in &popping {
            if popped == topic && !groups.contains(group) {
                groups.push(group.clone());
            }
        }
        for group in groups {
            let mut series = vec![("false", backlog(state, &group, topic, now_ms))];
            if let Some(retry) = pop_retry_topic(state, &group, topic) {
                series.push(("true", backlog(state, &group, &retry, now_ms)));
            }
            for (is_retry, backlog) in series {
                let labels = node.labels(&[
                    ("topic", topic),
                    ("consumer_group", &group),
                    ("is_retry", is_retry),
                    ("is_system", is_system(state, topic, Some(&group))),
                ]);
                lag.get_or_create(&labels).set(backlog.lag);
                lag_latency.get_or_create(&labels).set(backlog.lag_ms);
                in_flight.get_or_create(&labels).set(backlog.in_flight);
                ready.get_or_create(&labels).set(backlog.ready);
                queueing.get_or_create(&labels).set(backlog.queueing_ms);
            }
        }
    }
}

fn backlog(state: &BrokerState, group: &str, topic: &str, now_ms: i64) -> Backlog {
    let mut backlog = Backlog::default();
    for queue in tidemark_broker::progress::group_progress(state, group, Some(topic), now_ms) {
        backlog.add(state, group, &queue, now_ms);
    }
    backlog
}

/// The retry topic a group that pops `topic` has on this broker (RocketMQ's v2 name, or v1).
fn pop_retry_topic(state: &BrokerState, group: &str, topic: &str) -> Option<String> {
    [
        format!("%RETRY%{group}+{topic}"),
        format!("%RETRY%{group}_{topic}"),
    ]
    .into_iter()
    .find(|retry| state.metadata.topics.get(retry).is_some())
}

/// `rocketmq_producer_connections` and `rocketmq_consumer_connections`. A gRPC client's
/// session counts with `protocol_type="grpc"` (RocketMQ's broker sees only its proxy).
fn connections(registry: &mut Registry, state: &BrokerState, node: &Node) {
    let producers: IntGauges = family(
        registry,
        "rocketmq_producer_connections",
        "RocketMQ 5: producer connections by client language and version",
    );
    let consumers: IntGauges = family(
        registry,
        "rocketmq_consumer_connections",
        "RocketMQ 5: consumer connections per group, by client language, version and consume mode",
    );
    for (kind, count) in state.clients.connection_kinds() {
        let ConnectionKind {
            consumer_group,
            consume_type,
            language,
            version,
            in_process,
        } = kind;
        let language = language.to_ascii_lowercase();
        let version = version_name(version);
        let protocol = if in_process { "grpc" } else { "remoting" };
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        match consumer_group {
            None => producers
                .get_or_create(&node.labels(&[
                    ("language", &language),
                    ("version", &version),
                    ("protocol_type", protocol),
                ]))
                .inc_by(count),
            Some(group) => consumers
                .get_or_create(&node.labels(&[
                    ("consumer_group", &group),
                    ("language", &language),
                    ("version", &version),
                    ("consume_mode", consume_mode(consume_type)),
                    ("protocol_type", protocol),
                    ("is_system", is_system(state, "", Some(&group))),
                ]))
                .inc_by(count),
        };
    }
}

/// `ConsumeType.getTypeCN()`, lower-cased as RocketMQ's label is.
fn consume_mode(consume_type: Option<ConsumeType>) -> &'static str {
    match consume_type {
        Some(ConsumeType::ConsumeActively) => "pull",
        Some(ConsumeType::ConsumePop) => "pop",
        _ => "push",
    }
}

/// `MQVersion.getVersionDesc`, lower-cased (`v5_3_3`, `v4_9_8`). From 4.0.0 on the ordinals run
/// evenly: each x.y.z has a SNAPSHOT and a release, ten patch and ten minor versions each;
/// older clients are shown by their ordinal.
fn version_name(ordinal: i32) -> String {
    const V4_0_0_SNAPSHOT: i32 = version::V4_1_0_SNAPSHOT - 20;
    let Some(index) = ordinal
        .checked_sub(V4_0_0_SNAPSHOT)
        .filter(|index| *index >= 0)
    else {
        return ordinal.to_string();
    };
    let (major, within) = (4 + index / 200, index % 200);
    let (minor, patch) = (within / 20, (within % 20) / 2);
    let snapshot = if within % 2 == 0 { "_snapshot" } else { "" };
    format!("v{major}_{minor}_{patch}{snapshot}")
}

/// The broker's own gauges: permission, topic and group counts.
fn broker(registry: &mut Registry, state: &BrokerState, node: &Node) {
    let permission: IntGauges = family(
        registry,
        "rocketmq_broker_permission",
        "RocketMQ 5: the broker's permission (6 read and write, 4 read, 2 write)",
    );
    permission
        .get_or_create(&node.labels(&[]))
        .set(i64::from(state.live.get().broker_permission));
    let topics: IntGauges = family(
        registry,
        "rocketmq_topic_number",
        "RocketMQ 5: topics on this broker, the system's own included",
    );
    topics
        .get_or_create(&node.labels(&[]))
        .set(state.metadata.topics.names().len() as i64);
    let groups: IntGauges = family(
        registry,
        "rocketmq_consumer_group_number",
        "RocketMQ 5: consumer groups configured on this broker",
    );
    groups
        .get_or_create(&node.labels(&[]))
        .set(i64::try_from(state.metadata.groups.count()).unwrap_or(i64::MAX));
}

#[cfg(test)]
mod tests {
    use super::{version_name, Histograms};
    use prometheus_client::registry::Registry;
    use tidemark_broker::stats::FINISH_LATENCY_BUCKETS_S;
    use tidemark_protocol::code::version;

    #[test]
    fn a_transactions_finish_latency_is_a_histogram_in_seconds() {
        let mut registry = Registry::default();
        let mut latencies = Histograms::new(
            "rocketmq_finish_message_latency_milliseconds",
            "seconds",
            &FINISH_LATENCY_BUCKETS_S,
        );
        let labels = vec![("topic".to_owned(), "Payments".to_owned())];
        latencies.push(labels, &[1, 2, 0, 0, 0, 0, 0], 70.0, 3);
        registry.register_collector(Box::new(latencies));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        for line in [
            "rocketmq_finish_message_latency_milliseconds_sum{topic=\"Payments\"} 70.0",
            "rocketmq_finish_message_latency_milliseconds_count{topic=\"Payments\"} 3",
            "rocketmq_finish_message_latency_milliseconds_bucket{le=\"5.0\",topic=\"Payments\"} 1",
            "rocketmq_finish_message_latency_milliseconds_bucket{le=\"60.0\",topic=\"Payments\"} 3",
            "rocketmq_finish_message_latency_milliseconds_bucket{le=\"+Inf\",topic=\"Payments\"} 3",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn versions_are_named_as_mqversion_names_them() {
        assert_eq!(version_name(version::V4_9_8), "v4_9_8");
        assert_eq!(version_name(version::V4_9_4), "v4_9_4");
        assert_eq!(version_name(version::V5_3_1), "v5_3_1");
        assert_eq!(version_name(version::V4_1_0_SNAPSHOT), "v4_1_0_snapshot");
        assert_eq!(version_name(5), "5");
    }
}
