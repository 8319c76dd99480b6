//! RocketMQ's broker stats items (VIEW_BROKER_STATS_DATA; mqadmin `statsAll`, `exportMetrics`):
//! per topic the messages and bytes stored, per topic and group those delivered, per broker the
//! totals — each as the sum, rate and messages per request over the last minute, hour and day.
//!
//! The running totals of [`Traffic`](crate::stats::Traffic) are sampled every 10 s; a window's
//! figures are the difference between its oldest and newest sample, as RocketMQ's `StatsItem`
//! computes them (minute: samples 10 s apart, hour: 10 min, day: 1 h).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::stats::{Flow, TrafficTable};

/// How often [`StatsHistory::sample`] is meant to run.
pub const SAMPLE_INTERVAL_MS: i64 = 10_000;

/// One window's figures (RocketMQ's `BrokerStatsItem`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowStats {
    pub sum: i64,
    pub tps: f64,
    /// Messages (or bytes) per request.
    pub avgpt: f64,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at_ms: i64,
    value: u64,
    times: u64,
}

/// The three windows of one item.
#[derive(Debug, Default)]
struct Item {
    minute: VecDeque<Sample>,
    hour: VecDeque<Sample>,
    day: VecDeque<Sample>,
}

impl Item {
    fn record(&mut self, sample: Sample) {
        push(&mut self.minute, sample, SAMPLE_INTERVAL_MS, 7);
        push(&mut self.hour, sample, 600_000, 7);
        push(&mut self.day, sample, 3_600_000, 25);
    }
}

/// Appends `sample` once `every_ms` passed since the newest, keeping at most `keep`.
fn push(window: &mut VecDeque<Sample>, sample: Sample, every_ms: i64, keep: usize) {
    if window
        .back()
        .is_some_and(|last| sample.at_ms - last.at_ms < every_ms)
    {
        return;
    }
    window.push_back(sample);
    while window.len() > keep {
        window.pop_front();
    }
}

fn figures(window: &VecDeque<Sample>) -> WindowStats {
    let (Some(first), Some(last)) = (window.front(), window.back()) else {
        return WindowStats::default();
    };
    let sum = last.value.saturating_sub(first.value) as i64;
    let elapsed = last.at_ms - first.at_ms;
    let times = last.times.saturating_sub(first.times);
    WindowStats {
        sum,
        tps: if elapsed > 0 {
            sum as f64 * 1000.0 / elapsed as f64
        } else {
            0.0
        },
        avgpt: if times > 0 {
            sum as f64 / times as f64
        } else {
            0.0
        },
    }
}

/// The stats of one item over the minute, hour and day.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ItemStats {
    pub minute: WindowStats,
    pub hour: WindowStats,
    pub day: WindowStats,
}

/// Every item's samples. Owns its lock.
#[derive(Debug, Default)]
pub struct StatsHistory {
    items: Mutex<HashMap<(&'static str, String), Item>>,
}

impl StatsHistory {
    fn lock(&self) -> MutexGuard<'_, HashMap<(&'static str, String), Item>> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Samples the running totals of `traffic` at `now_ms`; `cluster` keys the broker totals.
    pub fn sample(&self, now_ms: i64, cluster: &str, traffic: &TrafficTable) {
        let mut items = self.lock();
        let mut record = |name: &'static str, key: String, value: u64, times: u64| {
            items.entry((name, key)).or_default().record(Sample {
                at_ms: now_ms,
                value,
                times,
            });
        };
        let mut put = Flow::default();
        for (topic, flow) in &traffic.stored {
            record(
                "TOPIC_PUT_NUMS",
                topic.clone(),
                flow.messages,
                flow.requests,
            );
            record("TOPIC_PUT_SIZE", topic.clone(), flow.bytes, flow.requests);
            put.messages += flow.messages;
            put.requests += flow.requests;
        }
        let mut got = Flow::default();
        for ((topic, group), flow) in &traffic.delivered {
            let key = format!("{topic}@{group}");
            record("GROUP_GET_NUMS", key.clone(), flow.messages, flow.requests);
            record("GROUP_GET_SIZE", key, flow.bytes, flow.requests);
            got.messages += flow.messages;
            got.requests += flow.requests;
        }
        record(
            "BROKER_PUT_NUMS",
            cluster.to_owned(),
            put.messages,
            put.requests,
        );
        record(
            "BROKER_GET_NUMS",
            cluster.to_owned(),
            got.messages,
            got.requests,
        );
    }

    /// An item's figures; `None` for a name or key never sampled.
    pub fn item(&self, name: &str, key: &str) -> Option<ItemStats> {
        let items = self.lock();
        let (_, item) = items
            .iter()
            .find(|((item_name, item_key), _)| *item_name == name && item_key == key)?;
        Some(ItemStats {
            minute: figures(&item.minute),
            hour: figures(&item.hour),
            day: figures(&item.day),
        })
    }

    /// Forgets a removed topic's items.
    pub fn drop_topic(&self, topic: &str) {
        let prefix = format!("{topic}@");
        self.lock()
            .retain(|(_, key), _| key != topic && !key.starts_with(&prefix));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_the_difference_between_their_oldest_and_newest_samples() {
        let history = StatsHistory::default();
        let mut traffic = TrafficTable::default();
        for step in 0..=6u64 {
            traffic.stored.insert(
                "T".into(),
                Flow {
                    messages: step * 100,
                    bytes: step * 1000,
                    requests: step * 10,
                },
            );
            history.sample(step as i64 * SAMPLE_INTERVAL_MS, "C", &traffic);
        }
        let put = history.item("TOPIC_PUT_NUMS", "T").expect("sampled");
        assert_eq!(put.minute.sum, 600);
        assert!((put.minute.tps - 10.0).abs() < 1e-9, "{put:?}");
        assert!((put.minute.avgpt - 10.0).abs() < 1e-9);
        // The hour and day windows have one sample so far.
        assert_eq!(put.hour.sum, 0);
        assert_eq!(
            history
                .item("BROKER_PUT_NUMS", "C")
                .expect("sampled")
                .minute
                .sum,
            600
        );
        assert!(history.item("TOPIC_PUT_NUMS", "other").is_none());
        history.drop_topic("T");
        assert!(history.item("TOPIC_PUT_NUMS", "T").is_none());
    }
}
