//! The broker's counters and rates, for runtime info, `statsAll` and the metrics endpoint.

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};

use crate::stats::{Throughput, Traffic, LATENCY_BUCKETS_SECONDS};
use crate::stats_history::StatsHistory;

/// Counters and rates runtime info and the metrics endpoint report.
#[derive(Debug)]
pub struct BrokerStats {
    pub messages_put_total: AtomicU64,
    pub messages_got_total: AtomicU64,
    /// Put and get rates, sampled every second.
    throughput: Mutex<Throughput>,
    /// Messages and bytes stored per topic and delivered per topic and group.
    pub traffic: Traffic,
    /// RocketMQ's stats items over the last minute, hour and day, sampled from `traffic`.
    pub history: StatsHistory,
    /// Seconds from a send's append to its reply (the group commit under SYNC_FLUSH).
    pub store_latency: prometheus_client::metrics::histogram::Histogram,
    /// Seconds a send request takes in the broker, decoding to reply.
    pub send_latency: prometheus_client::metrics::histogram::Histogram,
    /// Seconds a pull takes to read and answer, a long-polling wait left out.
    pub pull_latency: prometheus_client::metrics::histogram::Histogram,
    /// Every request's time in the handler, by request and response code.
    pub rpc: crate::stats::RpcLatencies,
    /// Transactions producers resolved, per real topic.
    pub transactions: crate::stats::TransactionStats,
}

impl Default for BrokerStats {
    fn default() -> Self {
        Self {
            messages_put_total: AtomicU64::new(0),
            messages_got_total: AtomicU64::new(0),
            throughput: Mutex::default(),
            traffic: Traffic::default(),
            history: StatsHistory::default(),
            store_latency: prometheus_client::metrics::histogram::Histogram::new(
                LATENCY_BUCKETS_SECONDS,
            ),
            send_latency: prometheus_client::metrics::histogram::Histogram::new(
                LATENCY_BUCKETS_SECONDS,
            ),
            pull_latency: prometheus_client::metrics::histogram::Histogram::new(
                LATENCY_BUCKETS_SECONDS,
            ),
            rpc: crate::stats::RpcLatencies::default(),
            transactions: crate::stats::TransactionStats::default(),
        }
    }
}

impl BrokerStats {
    /// Runs `read` on the sampled rates.
    pub fn with_throughput<R>(&self, read: impl FnOnce(&mut Throughput) -> R) -> R {
        read(
            &mut self
                .throughput
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}
