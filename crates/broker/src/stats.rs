//! Throughput figures for GET_BROKER_RUNTIME_INFO: messages put and got, sampled once a second,
//! as rates over the last 10, 60 and 600 s (RocketMQ's `StoreStatsService` format); and the
//! per-topic traffic the metrics endpoint reports.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Upper bounds of the latency histograms, seconds (100 µs to 5 s).
pub const LATENCY_BUCKETS_SECONDS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Messages and their bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    pub messages: u64,
    pub bytes: u64,
    /// Requests that carried them (RocketMQ's stats "times").
    pub requests: u64,
}

impl Flow {
    fn add(&mut self, messages: u64, bytes: u64) {
        self.messages += messages;
        self.bytes += bytes;
        self.requests += 1;
    }
}

/// What kind of message a client sent, as RocketMQ 5's `message_type` label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MessageKind {
    Normal,
    Fifo,
    Delay,
    Transaction,
}

impl MessageKind {
    pub const ALL: [MessageKind; 4] = [
        MessageKind::Normal,
        MessageKind::Fifo,
        MessageKind::Delay,
        MessageKind::Transaction,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MessageKind::Normal => "normal",
            MessageKind::Fifo => "fifo",
            MessageKind::Delay => "delay",
            MessageKind::Transaction => "transaction",
        }
    }
}

/// Upper bounds of RocketMQ 5's message size histogram, bytes (1 KiB to 4 MiB).
pub const MESSAGE_SIZE_BUCKETS: [u64; 6] = [1024, 4096, 524_288, 1_048_576, 2_097_152, 4_194_304];

/// Messages clients sent to one topic as one kind: how many, their stored bytes, and how many
/// fell at or under each of [`MESSAGE_SIZE_BUCKETS`] (the last slot: above them all).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Arrivals {
    pub messages: u64,
    pub bytes: u64,
    pub by_size: [u64; MESSAGE_SIZE_BUCKETS.len() + 1],
}

/// Traffic since start: stored per topic, delivered (pulled or popped) per topic and group.
#[derive(Debug, Default, Clone)]
pub struct TrafficTable {
    pub stored: HashMap<String, Flow>,
    pub delivered: HashMap<(String, String), Flow>,
    /// Messages bound for a retry (`%RETRY%…`) or dead-letter (`%DLQ%…`) topic, by that topic,
    /// counted when they are put back — a delayed retry too, though it is stored under the
    /// schedule topic until its delay ends.
    pub redelivered: HashMap<String, u64>,
    /// What clients sent, by the topic and kind they sent it as (a delayed message under its
    /// real topic, once, when it arrives; retries and dead letters left out).
    /// Indexed by the kind's place in [`MessageKind::ALL`].
    pub arrived: HashMap<String, [Arrivals; 4]>,
    /// Messages moved to a group's dead-letter topic, by group and the topic they were first
    /// sent to (empty when the message does not say).
    pub dead_lettered: HashMap<(String, String), u64>,
}

/// [`TrafficTable`] behind its lock; counting costs one map lookup.
#[derive(Debug, Default)]
pub struct Traffic {
    inner: Mutex<TrafficTable>,
}

impl Traffic {
    fn lock(&self) -> MutexGuard<'_, TrafficTable> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn stored(&self, topic: &str, messages: u64, bytes: u64) {
        let mut table = self.lock();
        match table.stored.get_mut(topic) {
            Some(flow) => flow.add(messages, bytes),
            None => {
                let mut flow = Flow::default();
                flow.add(messages, bytes);
                table.stored.insert(topic.to_owned(), flow);
            }
        }
    }

    pub fn redelivered(&self, topic: &str, messages: u64) {
        let mut table = self.lock();
        match table.redelivered.get_mut(topic) {
            Some(count) => *count += messages,
            None => {
                table.redelivered.insert(topic.to_owned(), messages);
            }
        }
    }

    pub fn delivered(&self, topic: &str, group: &str, messages: u64, bytes: u64) {
        if messages == 0 {
            return;
        }
        let mut table = self.lock();
        table
            .delivered
            .entry((topic.to_owned(), group.to_owned()))
            .or_default()
            .add(messages, bytes);
    }

    /// Counts messages clients sent: (topic, kind, stored record bytes) each.
    pub fn arrived(&self, messages: &[(&str, MessageKind, u64)]) {
        if messages.is_empty() {
            return;
        }
        let mut table = self.lock();
        for (topic, kind, bytes) in messages {
            let kinds = match table.arrived.get_mut(*topic) {
                Some(kinds) => kinds,
                None => table.arrived.entry((*topic).to_owned()).or_default(),
            };
            let arrivals = &mut kinds[*kind as usize];
            arrivals.messages += 1;
            arrivals.bytes += bytes;
            let slot = MESSAGE_SIZE_BUCKETS
                .iter()
                .position(|bound| bytes <= bound)
                .unwrap_or(MESSAGE_SIZE_BUCKETS.len());
            arrivals.by_size[slot] += 1;
        }
    }

    pub fn dead_lettered(&self, group: &str, origin: &str) {
        *self
            .lock()
            .dead_lettered
            .entry((group.to_owned(), origin.to_owned()))
            .or_default() += 1;
    }

    pub fn snapshot(&self) -> TrafficTable {
        self.lock().clone()
    }

    /// Forgets a removed topic's figures.
    pub fn drop_topic(&self, topic: &str) {
        let mut table = self.lock();
        table.stored.remove(topic);
        table.redelivered.remove(topic);
        table.delivered.retain(|(t, _), _| t != topic);
        table.arrived.remove(topic);
        table.dead_lettered.retain(|(_, origin), _| origin != topic);
    }
}

/// Samples kept: ten minutes at one a second.
const SAMPLES_MAX: usize = 601;
const DAY_MS: i64 = 86_400_000;

#[derive(Debug, Clone, Copy)]
struct Sample {
    at_ms: i64,
    put_total: u64,
    got_total: u64,
}

/// Rolling totals of puts and gets.
#[derive(Debug, Default)]
pub struct Throughput {
    samples: VecDeque<Sample>,
    /// Totals at the start of the current UTC day, and that day's number.
    day: (i64, u64, u64),
    /// Totals at the start of the previous UTC day (0 when the broker started after it).
    yesterday: (u64, u64),
}

impl Throughput {
    /// Records the running totals at `now_ms`.
    pub fn sample(&mut self, now_ms: i64, put_total: u64, got_total: u64) {
        let today = now_ms.div_euclid(DAY_MS);
        if self.samples.is_empty() {
            // Everything since boot happened today (or the broker booted yesterday; close enough
            // for the first day).
            self.day = (today, 0, 0);
        } else if today != self.day.0 {
            self.yesterday = if today == self.day.0 + 1 {
                (self.day.1, self.day.2)
            } else {
                (put_total, got_total)
            };
            self.day = (today, put_total, got_total);
        }
        self.samples.push_back(Sample {
            at_ms: now_ms,
            put_total,
            got_total,
        });
        while self.samples.len() > SAMPLES_MAX {
            self.samples.pop_front();
        }
    }

    fn rate(&self, window_s: i64, total: impl Fn(&Sample) -> u64) -> f64 {
        let (Some(last), Some(first)) = (
            self.samples.back(),
            self.samples.iter().find(|sample| {
                self.samples
                    .back()
                    .is_some_and(|last| last.at_ms - sample.at_ms <= window_s * 1000)
            }),
        ) else {
            return 0.0;
        };
        let elapsed_ms = last.at_ms - first.at_ms;
        if elapsed_ms <= 0 {
            return 0.0;
        }
        total(last).saturating_sub(total(first)) as f64 * 1000.0 / elapsed_ms as f64
    }

    /// `"tps10 tps60 tps600"` of puts.
    pub fn put_tps(&self) -> String {
        format!(
            "{:.2} {:.2} {:.2}",
            self.rate(10, |s| s.put_total),
            self.rate(60, |s| s.put_total),
            self.rate(600, |s| s.put_total)
        )
    }

    /// `"tps10 tps60 tps600"` of messages returned by pulls.
    pub fn get_tps(&self) -> String {
        format!(
            "{:.2} {:.2} {:.2}",
            self.rate(10, |s| s.got_total),
            self.rate(60, |s| s.got_total),
            self.rate(600, |s| s.got_total)
        )
    }

    /// Running totals (put, got) at the start of the previous and of the current UTC day, as
    /// RocketMQ's `msgPutTotalYesterdayMorning` / `msgPutTotalTodayMorning` (and Get).
    pub fn mornings(&self) -> ((u64, u64), (u64, u64)) {
        (self.yesterday, (self.day.1, self.day.2))
    }

    /// Messages put and got since the start of the current UTC day.
    pub fn today(&self, put_total: u64, got_total: u64) -> (u64, u64) {
        (
            put_total.saturating_sub(self.day.1),
            got_total.saturating_sub(self.day.2),
        )
    }
}

/// `1536 MiB`-style sizes, as RocketMQ's `humanReadableByteCount` prints them.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Physical memory (`MemTotal`), read once; 8 GiB when it cannot be read. Both "hot data" rules
/// use it: the young-queue answer of QUERY_CONSUMER_OFFSET and cold-read steering of pulls.
pub fn total_memory_bytes() -> u64 {
    static TOTAL: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find(|line| line.starts_with("MemTotal:"))
                    .and_then(|line| line.split_whitespace().nth(1))
                    .and_then(|kib| kib.parse::<u64>().ok())
            })
            .map_or(8 << 30, |kib| kib * 1024)
    })
}

/// Upper bounds of RocketMQ 5's transaction finish latency histogram, seconds (5 s to a day).
pub const FINISH_LATENCY_BUCKETS_S: [u64; 6] = [5, 60, 600, 3_600, 43_200, 86_400];

/// One topic's resolved transactions: commits, rollbacks, and how long each took from its half
/// being stored, counted at or under each of [`FINISH_LATENCY_BUCKETS_S`] (the last slot: above
/// them all), with the sum in seconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    pub committed: u64,
    pub rolled_back: u64,
    pub by_latency: [u64; FINISH_LATENCY_BUCKETS_S.len() + 1],
    pub latency_sum_s: u64,
}

/// Transactions resolved per real topic.
#[derive(Debug, Default)]
pub struct TransactionStats {
    inner: Mutex<HashMap<String, Finished>>,
}

impl TransactionStats {
    /// A producer's commit (or rollback) of a half stored `age_ms` ago, for `topic`.
    pub fn finished(&self, topic: &str, committed: bool, age_ms: i64) {
        let seconds = u64::try_from(age_ms.max(0) / 1000).unwrap_or(0);
        let slot = FINISH_LATENCY_BUCKETS_S
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(FINISH_LATENCY_BUCKETS_S.len());
        let mut table = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let finished = table.entry(topic.to_owned()).or_default();
        if committed {
            finished.committed += 1;
        } else {
            finished.rolled_back += 1;
        }
        finished.by_latency[slot] += 1;
        finished.latency_sum_s += seconds;
    }

    pub fn snapshot(&self) -> Vec<(String, Finished)> {
        let table = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<_> = table
            .iter()
            .map(|(topic, one)| (topic.clone(), *one))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

/// Upper bounds of RocketMQ 5's request latency histogram, milliseconds.
pub const RPC_LATENCY_BUCKETS_MS: [u64; 9] = [1, 3, 5, 7, 10, 100, 1000, 2000, 3000];

/// Which requests one latency histogram counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RpcKind {
    pub request_code: i32,
    pub response_code: i32,
    /// The request asked to be held until something arrives (a pull with the suspend flag, a
    /// POP or a notification with a poll time): its time includes the wait.
    pub long_polling: bool,
    /// A gRPC client's call through the gateway rather than a remoting connection.
    pub grpc: bool,
}

/// One histogram: the count at or under each of [`RPC_LATENCY_BUCKETS_MS`] (the last slot:
/// above them all), the sum and the count.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RpcLatency {
    pub by_bound: [u64; RPC_LATENCY_BUCKETS_MS.len() + 1],
    pub sum_ms: u64,
    pub count: u64,
}

/// Request latencies in the broker, from the handler's start to its answer.
#[derive(Debug, Default)]
pub struct RpcLatencies {
    inner: Mutex<HashMap<RpcKind, RpcLatency>>,
}

impl RpcLatencies {
    pub fn observe(&self, kind: RpcKind, elapsed: std::time::Duration) {
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let slot = RPC_LATENCY_BUCKETS_MS
            .iter()
            .position(|bound| ms <= *bound)
            .unwrap_or(RPC_LATENCY_BUCKETS_MS.len());
        let mut table = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let latency = table.entry(kind).or_default();
        latency.by_bound[slot] += 1;
        latency.sum_ms = latency.sum_ms.saturating_add(ms);
        latency.count += 1;
    }

    pub fn snapshot(&self) -> Vec<(RpcKind, RpcLatency)> {
        let table = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<_> = table
            .iter()
            .map(|(kind, latency)| (*kind, *latency))
            .collect();
        all.sort_by_key(|(kind, _)| *kind);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_over_windows_and_daily_totals() {
        let mut throughput = Throughput::default();
        let day_start = 19_000 * DAY_MS;
        for second in 0..=20 {
            throughput.sample(
                day_start + second * 1000,
                100 * second as u64,
                10 * second as u64,
            );
        }
        assert_eq!(throughput.put_tps(), "100.00 100.00 100.00");
        assert_eq!(throughput.get_tps(), "10.00 10.00 10.00");
        assert_eq!(
            throughput.today(2_000, 200),
            (2_000, 200),
            "counted from boot on the first day"
        );
        throughput.sample(day_start + DAY_MS + 1, 2_500, 250);
        assert_eq!(
            throughput.today(2_600, 260),
            (100, 10),
            "a new day starts from the totals at its first sample"
        );
        assert_eq!(human_bytes(1536 * 1024 * 1024), "1.5 GiB");
        assert_eq!(human_bytes(12), "12 B");
    }
}
