//! `/metrics`: what the broker knows, rendered at each scrape in the OpenMetrics text format
//! (which Prometheus reads). Consumer progress per group and queue — committed offset, lag in
//! messages and in seconds, a stuck marker, POP in flight — is the point; per-topic traffic,
//! the store and send latency come with it. Where rocketmq-exporter has an equivalent, its
//! metric is emitted too under its name (see docs/book/src/guides/metrics.md for the mapping).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tidemark_broker::BrokerState;

mod rocketmq5;
mod storage;

type Labels = Vec<(String, String)>;
pub(crate) type IntGauges = Family<Labels, Gauge>;
type FloatGauges = Family<Labels, Gauge<f64, AtomicU64>>;
pub(crate) type Counters = Family<Labels, Counter>;

pub(crate) fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

pub(crate) fn family<M: Clone + Default + std::fmt::Debug + Send + Sync + 'static>(
    registry: &mut Registry,
    name: &str,
    help: &str,
) -> Family<Labels, M>
where
    Family<Labels, M>: prometheus_client::registry::Metric,
{
    let family = Family::<Labels, M>::default();
    registry.register(name, help, family.clone());
    family
}

/// The metrics of `state`'s broker at `now_ms`, as OpenMetrics text.
pub fn render(state: &BrokerState, now_ms: i64) -> String {
    let mut registry = Registry::default();
    let cluster = state.config.broker_cluster_name.as_str();
    let broker = state.config.broker_name.as_str();

    // Traffic.
    let stored_messages: Counters = family(
        &mut registry,
        "tidemark_topic_stored_messages",
        "Messages stored per topic since the broker started",
    );
    let stored_bytes: Counters = family(
        &mut registry,
        "tidemark_topic_stored_bytes",
        "Body bytes stored per topic since the broker started",
    );
    let delivered_messages: Counters = family(
        &mut registry,
        "tidemark_topic_delivered_messages",
        "Messages delivered (pulled or popped) per topic and group since the broker started",
    );
    let delivered_bytes: Counters = family(
        &mut registry,
        "tidemark_topic_delivered_bytes",
        "Record bytes delivered per topic and group since the broker started",
    );
    let traffic = state.stats.traffic.snapshot();
    for (topic, flow) in &traffic.stored {
        let topic_labels = labels(&[("topic", topic)]);
        stored_messages
            .get_or_create(&topic_labels)
            .inc_by(flow.messages);
        stored_bytes.get_or_create(&topic_labels).inc_by(flow.bytes);
    }
    for ((topic, group), flow) in &traffic.delivered {
        let group_labels = labels(&[("topic", topic), ("group", group)]);
        delivered_messages
            .get_or_create(&group_labels)
            .inc_by(flow.messages);
        delivered_bytes
            .get_or_create(&group_labels)
            .inc_by(flow.bytes);
    }

    // Queues and consumer progress.
    let max_offset: IntGauges = family(
        &mut registry,
        "tidemark_queue_max_offset",
        "The next offset to be written in each queue (messages ever stored in it)",
    );
    let min_offset: IntGauges = family(
        &mut registry,
        "tidemark_queue_min_offset",
        "The oldest offset still held in each queue",
    );
    let committed: IntGauges = family(
        &mut registry,
        "tidemark_consumer_offset",
        "A group's committed offset per queue: everything below it is consumed",
    );
    let lag: IntGauges = family(
        &mut registry,
        "tidemark_consumer_lag_messages",
        "Messages of a queue above the group's committed offset",
    );
    let time_lag: FloatGauges = family(
        &mut registry,
        "tidemark_consumer_lag_seconds",
        "Age of the oldest message of a queue the group has not consumed (0 when caught up)",
    );
    let acked_above: IntGauges = family(
        &mut registry,
        "tidemark_consumer_acked_above_offset_messages",
        "Messages above the committed offset already acknowledged (kept, not redelivered)",
    );
    let stuck_offset: IntGauges = family(
        &mut registry,
        "tidemark_consumer_stuck_offset",
        "The offset one unacknowledged message holds a group at while later ones complete (queues so held only)",
    );
    let stuck_seconds: FloatGauges = family(
        &mut registry,
        "tidemark_consumer_stuck_seconds",
        "How long the group has been held at its stuck offset (queues so held only)",
    );
    let pop_in_flight: IntGauges = family(
        &mut registry,
        "tidemark_pop_in_flight_messages",
        "Messages popped and neither acknowledged nor back yet, per group and queue",
    );
    let exporter_producer: IntGauges = family(
        &mut registry,
        "rocketmq_producer_offset",
        "rocketmq-exporter: the topic's max offsets on this broker, summed over its queues",
    );
    let exporter_consumer: IntGauges = family(
        &mut registry,
        "rocketmq_consumer_offset",
        "rocketmq-exporter: the group's committed offsets on this broker, summed over the topic's queues",
    );
    let exporter_diff: IntGauges = family(
        &mut registry,
        "rocketmq_group_diff",
        "rocketmq-exporter: the group's lag in messages on this broker, summed over the topic's queues",
    );
    let exporter_latency: IntGauges = family(
        &mut registry,
        "rocketmq_group_get_latency_by_storetime",
        "rocketmq-exporter: age in ms of the oldest message the group has not consumed, over the topic's queues",
    );
    let mut topics = state.metadata.topics.names();
    topics.sort();
    for topic in &topics {
        let Some(config) = state.metadata.topics.get(topic) else {
            continue;
        };
        let mut topic_max = 0i64;
        for queue_id in 0..config.read_queue_nums.max(config.write_queue_nums) {
            let queue = queue_id.to_string();
            let queue_labels = labels(&[("topic", topic), ("queue", &queue)]);
            let max = state.log().max_offset(topic, queue_id);
            topic_max += max;
            max_offset.get_or_create(&queue_labels).set(max);
            min_offset
                .get_or_create(&queue_labels)
                .set(state.log().min_offset(topic, queue_id));
        }
        exporter_producer
            .get_or_create(&labels(&[
                ("cluster", cluster),
                ("broker", broker),
                ("topic", topic),
            ]))
            .set(topic_max);
        for group in state.progress.offsets.groups_of_topic(topic) {
            let progress =
                tidemark_broker::progress::group_progress(state, &group, Some(topic), now_ms);
            let (mut offsets, mut diff, mut oldest_ms) = (0i64, 0i64, 0i64);
            for queue in &progress {
                let id = queue.queue_id.to_string();
                let queue_labels = labels(&[("group", &group), ("topic", topic), ("queue", &id)]);
                let behind = (queue.broker_offset - queue.consumer_offset).max(0);
                offsets += queue.consumer_offset;
                diff += behind;
                oldest_ms = oldest_ms.max(queue.time_lag_ms);
                committed
                    .get_or_create(&queue_labels)
                    .set(queue.consumer_offset);
                lag.get_or_create(&queue_labels).set(behind);
                time_lag
                    .get_or_create(&queue_labels)
                    .set(queue.time_lag_ms as f64 / 1000.0);
                acked_above
                    .get_or_create(&queue_labels)
                    .set(queue.acked_above);
                if queue.stuck_offset >= 0 {
                    stuck_offset
                        .get_or_create(&queue_labels)
                        .set(queue.stuck_offset);
                    stuck_seconds
                        .get_or_create(&queue_labels)
                        .set((now_ms - queue.stuck_since_ms).max(0) as f64 / 1000.0);
                }
                if let Some(in_flight) = queue.pop_in_flight {
                    pop_in_flight.get_or_create(&queue_labels).set(in_flight);
                }
            }
            let group_labels = labels(&[
                ("cluster", cluster),
                ("broker", broker),
                ("topic", topic),
                ("group", &group),
            ]);
            exporter_consumer.get_or_create(&group_labels).set(offsets);
            exporter_diff.get_or_create(&group_labels).set(diff);
            exporter_latency.get_or_create(&group_labels).set(oldest_ms);
        }
    }

    // Retries and dead letters, from what was stored in the groups' retry and DLQ topics.
    let retried: Counters = family(
        &mut registry,
        "tidemark_consumer_retried_messages",
        "Messages put back for a group to consume again since the broker started (failed deliveries sent back, POP invisibility expired)",
    );
    let dead_lettered: Counters = family(
        &mut registry,
        "tidemark_consumer_dead_lettered_messages",
        "Messages moved to a group's dead-letter topic since the broker started",
    );
    for (topic, count) in &traffic.redelivered {
        if let Some(rest) = topic.strip_prefix("%RETRY%") {
            retried
                .get_or_create(&labels(&[("group", &retry_group(state, rest))]))
                .inc_by(*count);
        } else if let Some(group) = topic.strip_prefix("%DLQ%") {
            dead_lettered
                .get_or_create(&labels(&[("group", group)]))
                .inc_by(*count);
        }
    }

    // Connections.
    let connections: IntGauges = family(
        &mut registry,
        "tidemark_client_connections",
        "Online client connections per group, by role (producer or consumer)",
    );
    for (role, group, count) in state.clients.group_connections() {
        connections
            .get_or_create(&labels(&[("role", role), ("group", &group)]))
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    // What operators did to groups' progress.
    let operator_changes: Counters = family(
        &mut registry,
        "tidemark_progress_operator_changes",
        "Changes of a group's progress someone asked for (reset, skip, clone, rewind, deletion, restore, resend, retry-replay) recorded on this broker since it started",
    );
    for (group, kind, count) in state.progress.history.changes_counted() {
        operator_changes
            .get_or_create(&labels(&[("group", &group), ("kind", kind)]))
            .inc_by(count);
    }
    let resent: Counters = family(
        &mut registry,
        "tidemark_messages_resent",
        "Messages an operator sent again for a group (kind resend: dead letters; retry-replay: consumed retries) since the broker started",
    );
    for (group, kind, count) in state.progress.history.resent_counted() {
        resent
            .get_or_create(&labels(&[("group", &group), ("kind", kind)]))
            .inc_by(count);
    }

    // Request latency and the store.
    registry.register(
        "tidemark_send_latency_seconds",
        "A send request in the broker, from decoding to the reply",
        state.stats.send_latency.clone(),
    );
    registry.register(
        "tidemark_pull_read_seconds",
        "A pull's read of its queue and the reply built from it, each pass (a held pull reads twice; the wait is not counted)",
        state.stats.pull_latency.clone(),
    );
    registry.register(
        "tidemark_store_latency_seconds",
        "From a send's append to its reply: the group commit under SYNC_FLUSH, the append under ASYNC_FLUSH",
        state.stats.store_latency.clone(),
    );
    registry.register(
        "tidemark_commit_log_sync_seconds",
        "Each sync (fsync) that made commit-log bytes durable",
        SyncHistogram(state.log().sync_times()),
    );
    let disk = state.log().disk_usage();
    let disk_used: Gauge<f64, AtomicU64> = Gauge::default();
    disk_used.set(disk.usage_ratio);
    registry.register(
        "tidemark_store_disk_used_ratio",
        "Used share of the store's file system at the last retention pass",
        disk_used,
    );
    let refuse_at: Gauge<f64, AtomicU64> = Gauge::default();
    refuse_at.set(f64::from(state.live.get().disk_space_warning_level_ratio) / 100.0);
    registry.register(
        "tidemark_store_disk_refuse_writes_ratio",
        "Used share of the store's file system above which the broker refuses writes (diskSpaceWarningLevelRatio)",
        refuse_at,
    );
    let (log_min, log_written, log_flushed) = state.log().positions();
    for (name, help, value) in [
        (
            "tidemark_store_writes_refused",
            "1 while the disk is too full to take messages",
            i64::from(disk.writes_refused),
        ),
        (
            "tidemark_commit_log_bytes",
            "Bytes of commit log held (written minus deleted)",
            log_written.saturating_sub(log_min) as i64,
        ),
        (
            "tidemark_commit_log_unflushed_bytes",
            "Bytes written to the commit log but not yet synced to disk",
            log_written.saturating_sub(log_flushed) as i64,
        ),
    ] {
        let gauge: Gauge = Gauge::default();
        gauge.set(value);
        registry.register(name, help, gauge);
    }

    rocketmq5::register(&mut registry, state, &traffic, now_ms);

    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}

/// The group a retry topic (the part after `%RETRY%`) belongs to: `{group}` for a push
/// consumer's, `{group}_{topic}` or `{group}+{topic}` for a POP consumer's — split where the
/// rest names a topic this broker has (a group name may hold `_` itself).
fn retry_group(state: &BrokerState, rest: &str) -> String {
    if state.metadata.groups.get(rest).is_some() {
        return rest.to_owned();
    }
    rest.char_indices()
        .filter(|(_, c)| *c == '_' || *c == '+')
        .map(|(at, _)| (&rest[..at], &rest[at + 1..]))
        .find(|(group, topic)| !group.is_empty() && state.metadata.topics.get(topic).is_some())
        .map_or_else(|| rest.to_owned(), |(group, _)| group.to_owned())
}

/// The commit log's sync durations as a Prometheus histogram.
#[derive(Debug)]
struct SyncHistogram(tidemark_store::SyncTimesSnapshot);

impl EncodeMetric for SyncHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // The encoder takes per-bucket counts and sums them up itself; `+Inf` is `f64::MAX`.
        let mut below = 0;
        let buckets: Vec<(f64, u64)> = self
            .0
            .buckets
            .iter()
            .map(|(bound, cumulative)| {
                let in_bucket = cumulative - below;
                below = *cumulative;
                let bound = if bound.is_finite() { *bound } else { f64::MAX };
                (bound, in_bucket)
            })
            .collect();
        encoder.encode_histogram::<NoLabelSet>(self.0.sum_seconds, self.0.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}
