//! How long making the commit log durable takes: each sync's duration counted into fixed
//! buckets, read by the metrics endpoint as a histogram. Plain atomics: the store does not
//! depend on a metrics crate, and recording costs nothing next to an fsync.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, seconds (the last bucket is everything above).
pub const SYNC_BUCKETS_SECONDS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

/// Sync durations recorded so far.
#[derive(Debug, Default)]
pub struct SyncTimes {
    /// Per bucket, not cumulative; one more than the bounds for "above the last".
    buckets: [AtomicU64; SYNC_BUCKETS_SECONDS.len() + 1],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// A copy of [`SyncTimes`] in Prometheus' terms.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncTimesSnapshot {
    pub count: u64,
    pub sum_seconds: f64,
    /// (upper bound, syncs at or below it), cumulative, ending with `+Inf`.
    pub buckets: Vec<(f64, u64)>,
}

impl SyncTimes {
    pub fn record(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = SYNC_BUCKETS_SECONDS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(SYNC_BUCKETS_SECONDS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(
            u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn snapshot(&self) -> SyncTimesSnapshot {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(SYNC_BUCKETS_SECONDS.len() + 1);
        for (index, bound) in SYNC_BUCKETS_SECONDS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .enumerate()
        {
            cumulative += self.buckets[index].load(Ordering::Relaxed);
            buckets.push((bound, cumulative));
        }
        SyncTimesSnapshot {
            // The buckets' total, so count and buckets agree under concurrent recording.
            count: cumulative,
            sum_seconds: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_land_in_cumulative_buckets() {
        let times = SyncTimes::default();
        times.record(Duration::from_micros(50));
        times.record(Duration::from_millis(3));
        times.record(Duration::from_secs(2));
        let snapshot = times.snapshot();
        assert_eq!(snapshot.count, 3);
        assert_eq!(snapshot.buckets.first(), Some(&(0.0001, 1)));
        assert_eq!(snapshot.buckets[5], (0.005, 2));
        assert_eq!(snapshot.buckets.last(), Some(&(f64::INFINITY, 3)));
        assert!((snapshot.sum_seconds - 2.00305).abs() < 1e-9);
    }
}
