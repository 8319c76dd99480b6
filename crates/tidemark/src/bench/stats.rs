//! What one bench run counts: messages, bytes, errors and a latency histogram, with the
//! warm-up left out; the live progress line and the summary.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tidemark_protocol::json::{self, Object, Value, WriteOptions};

/// Latencies are recorded in microseconds up to this (a minute); longer ones count as this.
const LATENCY_MAX_US: u64 = 60_000_000;

/// Counters and latencies of one run. Samples taken before the warm-up ends, or after the run
/// was stopped, are not counted.
#[derive(Debug)]
pub(crate) struct Stats {
    pub(crate) count: AtomicU64,
    bytes: AtomicU64,
    pub(crate) errors: AtomicU64,
    latencies_us: Mutex<Histogram<u64>>,
    pub(crate) stopped: AtomicBool,
    measure_from: Instant,
}

impl Stats {
    /// A run whose first `warmup` is not measured.
    pub(crate) fn new(warmup: Duration) -> Stats {
        // Three significant digits over 1 µs – 1 min: a fixed ~200 KB, whatever the count.
        let histogram = Histogram::new_with_bounds(1, LATENCY_MAX_US, 3)
            .unwrap_or_else(|_| unreachable!("1 ≤ 60 s and 3 significant digits are valid"));
        Stats {
            count: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            latencies_us: Mutex::new(histogram),
            stopped: AtomicBool::new(false),
            measure_from: Instant::now() + warmup,
        }
    }

    fn measuring(&self) -> bool {
        !self.stopped.load(Ordering::Acquire) && Instant::now() >= self.measure_from
    }

    /// One message of `bytes` done in `latency`.
    pub(crate) fn record(&self, bytes: usize, latency: Duration) {
        self.record_many(1, bytes, latency);
    }

    /// `messages` done together (a batch) in `latency`; `bytes` is all of them.
    pub(crate) fn record_many(&self, messages: u64, bytes: usize, latency: Duration) {
        if !self.measuring() {
            return;
        }
        self.count.fetch_add(messages, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        let micros = (latency.as_micros() as u64).clamp(1, LATENCY_MAX_US);
        if let Ok(mut histogram) = self.latencies_us.lock() {
            histogram.saturating_record(micros);
        }
    }

    /// A failure, counted like a message (so not during the warm-up).
    pub(crate) fn error(&self) {
        if self.measuring() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Prints the summary of a run whose measured part lasted `elapsed`.
    pub(crate) fn print_summary(
        &self,
        mode: &str,
        size: usize,
        json_output: bool,
        elapsed: Duration,
    ) -> anyhow::Result<()> {
        let (p50, p99, p999, max) = match self.latencies_us.lock() {
            Ok(h) if !h.is_empty() => (
                h.value_at_quantile(0.50),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
                h.max(),
            ),
            _ => (0, 0, 0, 0),
        };
        let seconds = elapsed.as_secs_f64().max(0.001);
        let count = self.count.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        let errors = self.errors.load(Ordering::Relaxed);
        let rate = count as f64 / seconds;
        let mbps = bytes as f64 / seconds / (1024.0 * 1024.0);
        let ms = |micros: u64| micros as f64 / 1000.0;
        if json_output {
            let mut object = Object::new();
            let mut put = |name: &str, value: Value| object.push(Value::String(name.into()), value);
            put("mode", Value::String(mode.into()));
            put("size", Value::Int(size as i64));
            put("seconds", Value::Float(seconds));
            put("messages", Value::Int(count as i64));
            put("errors", Value::Int(errors as i64));
            put("msgsPerSec", Value::Float(rate));
            put("mbPerSec", Value::Float(mbps));
            put("p50Ms", Value::Float(ms(p50)));
            put("p99Ms", Value::Float(ms(p99)));
            put("p999Ms", Value::Float(ms(p999)));
            put("p50Us", Value::Int(p50 as i64));
            put("p99Us", Value::Int(p99 as i64));
            put("p999Us", Value::Int(p999 as i64));
            put("maxUs", Value::Int(max as i64));
            println!(
                "{}",
                json::write(&Value::Object(object), WriteOptions::STANDARD)
            );
        } else {
            println!(
                "{mode}: {count} msgs in {seconds:.1} s = {rate:.0} msgs/s, {mbps:.2} MB/s; \
                 latency p50 {p50} µs, p99 {p99} µs, p999 {p999} µs, max {max} µs; errors {errors}"
            );
        }
        Ok(())
    }
}

/// Prints `[Ns] <what> <count> (<rate>/s) errors <n>` to stderr every second (counts start
/// after the warm-up).
pub(crate) fn progress(stats: Arc<Stats>, what: &'static str) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let count = stats.count.load(Ordering::Relaxed);
            let errors = stats.errors.load(Ordering::Relaxed);
            let warming = if Instant::now() < stats.measure_from {
                " (warming up)"
            } else {
                ""
            };
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "[{:>3}s] {what} {count} ({}/s) errors {errors}{warming}",
                started.elapsed().as_secs(),
                count - last
            );
            last = count;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_up_and_stopped_runs_are_not_counted() {
        let warm = Stats::new(Duration::from_secs(3600));
        warm.record(10, Duration::from_micros(5));
        warm.error();
        assert_eq!(warm.count.load(Ordering::Relaxed), 0);
        assert_eq!(warm.errors.load(Ordering::Relaxed), 0);

        let stats = Stats::new(Duration::ZERO);
        stats.record_many(16, 160, Duration::from_micros(250));
        stats.record(10, Duration::from_nanos(10));
        stats.stopped.store(true, Ordering::Release);
        stats.record(10, Duration::from_micros(5));
        assert_eq!(stats.count.load(Ordering::Relaxed), 17);
        let histogram = stats.latencies_us.lock().expect("lock");
        assert_eq!(histogram.len(), 2);
        assert_eq!(
            histogram.min(),
            1,
            "sub-microsecond latencies count as 1 µs"
        );
        assert!(histogram.max() >= 250 && histogram.max() < 251);
    }
}
