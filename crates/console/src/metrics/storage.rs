//! RocketMQ 5's storage and timer gauges (its store's metrics manager), with Tidemark's
//! readings: the store's file system, the commit log's sync and index positions, the oldest
//! message held, and the timer service's scan and pending set.

use prometheus_client::registry::Registry;
use tidemark_broker::BrokerState;
use tidemark_store::TIMER_TOPIC;

use super::rocketmq5::Node;
use super::{family, Counters, IntGauges};

const LOCAL_DISK: [(&str, &str); 2] = [("storage_type", "local"), ("storage_medium", "disk")];

/// Registers the storage and timer families of `state`'s broker at `now_ms`.
pub(super) fn register(registry: &mut Registry, state: &BrokerState, node: &Node, now_ms: i64) {
    let labels = node.labels(&LOCAL_DISK);
    let log = state.log();
    let (_, written, flushed) = log.positions();
    let used = tidemark_store::disk_used_bytes(&state.config.store_path_root_dir).ok();
    let oldest = log.oldest_store_timestamp().ok().flatten();
    let storage: [(&str, &str, Option<i64>); 4] = [
        (
            "rocketmq_storage_size_bytes",
            "RocketMQ 5: bytes in use on the store's file system",
            used.map(saturating_i64),
        ),
        (
            "rocketmq_storage_flush_behind_bytes",
            "RocketMQ 5: bytes written to the commit log and not yet synced to disk",
            Some(saturating_i64(written.saturating_sub(flushed))),
        ),
        (
            "rocketmq_storage_dispatch_behind_bytes",
            "RocketMQ 5: commit-log bytes not yet indexed (queue entries are written with the append; the key index follows behind)",
            Some(saturating_i64(log.index_behind_bytes())),
        ),
        (
            "rocketmq_storage_message_reserve_time_milliseconds",
            "RocketMQ 5: how long ago the oldest message the commit log holds was stored",
            oldest.map(|stored| now_ms.saturating_sub(stored).max(0)),
        ),
    ];
    for (name, help, value) in storage {
        let gauges: IntGauges = family(registry, name, help);
        if let Some(value) = value {
            gauges.get_or_create(&labels).set(value);
        }
    }
    timers(registry, state, node, now_ms);
}

/// The timer service: how far its scan of the timer queue is behind (messages and the age of
/// the first one not taken in), and how late its deliveries are.
fn timers(registry: &mut Registry, state: &BrokerState, node: &Node, now_ms: i64) {
    let labels = node.labels(&[]);
    let log = state.log();
    let scanned = state.timers.scanned_up_to();
    let end = log.max_offset(TIMER_TOPIC, 0);
    let enqueue_latency = if scanned < end {
        log.store_timestamp_at(TIMER_TOPIC, 0, scanned)
            .ok()
            .flatten()
            .map_or(0, |stored| now_ms.saturating_sub(stored).max(0))
    } else {
        0
    };
    let dequeue_latency = state
        .timers
        .next_due()
        .map_or(0, |due| now_ms.saturating_sub(due).max(0));
    let gauges: [(&str, &str, i64); 5] = [
        (
            "rocketmq_timer_enqueue_lag",
            "RocketMQ 5: timer messages stored but not yet taken in by the timer service",
            end.saturating_sub(scanned).max(0),
        ),
        (
            "rocketmq_timer_enqueue_latency_milliseconds",
            "RocketMQ 5: age of the oldest timer message not yet taken in",
            enqueue_latency,
        ),
        (
            "rocketmq_timer_dequeue_lag",
            "RocketMQ 5: timer messages due and not yet delivered",
            saturating_i64(state.timers.due_by(now_ms) as u64),
        ),
        (
            "rocketmq_timer_dequeue_latency_milliseconds",
            "RocketMQ 5: how late the earliest pending timer message is (0 when none is due)",
            dequeue_latency,
        ),
        (
            "tidemark_timer_pending_messages",
            "Timer and delay messages waiting for their delivery time",
            saturating_i64(state.timers.pending() as u64),
        ),
    ];
    for (name, help, value) in gauges {
        let family: IntGauges = family(registry, name, help);
        family.get_or_create(&labels).set(value);
    }
    timer_topics(registry, state, node, now_ms);
}

/// RocketMQ's default timer distribution bounds, seconds (`TimerMetrics.timerDist`).
const TIMER_BOUNDS_S: [i64; 8] = [5, 60, 300, 900, 3_600, 14_400, 28_800, 86_400];

/// The timer's figures by real topic, and the pending messages by how soon they are due.
fn timer_topics(registry: &mut Registry, state: &BrokerState, node: &Node, now_ms: i64) {
    let timing: IntGauges = family(
        registry,
        "rocketmq_timing_messages",
        "RocketMQ 5: timer messages waiting for their delivery time, by real topic",
    );
    let entered: Counters = family(
        registry,
        "rocketmq_timer_enqueue",
        "RocketMQ 5: timer messages taken in by the timer service since start, by real topic",
    );
    let left: Counters = family(
        registry,
        "rocketmq_timer_dequeue",
        "RocketMQ 5: timer messages delivered to their real topic since start",
    );
    for (topic, tally) in state.timers.topic_tallies() {
        let labels = node.labels(&[("topic", &topic)]);
        timing
            .get_or_create(&labels)
            .set(saturating_i64(tally.pending));
        entered.get_or_create(&labels).inc_by(tally.entered);
        left.get_or_create(&labels).inc_by(tally.delivered);
    }
    let snapshot: IntGauges = family(
        registry,
        "rocketmq_timer_message_snapshot",
        "RocketMQ 5: pending timer messages due within each bound (seconds) and after the one before it, up to 24 h",
    );
    let bounds_ms: Vec<i64> = TIMER_BOUNDS_S.iter().map(|s| s * 1_000).collect();
    let within = state.timers.due_within(now_ms, &bounds_ms);
    let mut before = 0;
    for (bound, cumulative) in TIMER_BOUNDS_S.iter().zip(within) {
        let bound_text = bound.to_string();
        snapshot
            .get_or_create(&node.labels(&[("timer_bound_s", &bound_text)]))
            .set(saturating_i64(cumulative.saturating_sub(before) as u64));
        before = cumulative;
    }
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
