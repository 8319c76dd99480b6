//! A consumer's pull and consume figures per topic — response times and rates over the last
//! minute, failures over the last hour — as it reports them to an operator (RocketMQ's
//! `ConsumerStatsManager`, read by mqadmin `consumerStatus`).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tidemark_protocol::body::ConsumeStatus;

use crate::instance::lock;

const MINUTE_SECONDS: i64 = 60;
const HOUR_MINUTES: i64 = 60;

/// What happened in one second.
#[derive(Debug, Default, Clone, Copy)]
struct Second {
    pulls: u64,
    pull_rt_ms: u64,
    pulled: u64,
    calls: u64,
    consume_rt_ms: u64,
    ok: u64,
    failed: u64,
}

#[derive(Debug, Default)]
struct TopicRates {
    /// (epoch second, its figures), oldest first, the last minute only.
    seconds: VecDeque<(i64, Second)>,
    /// (epoch minute, failed messages), the last hour only.
    failed_minutes: VecDeque<(i64, u64)>,
    /// When the first figure came, so a young consumer's rates are not diluted over a minute.
    since_ms: i64,
}

impl TopicRates {
    fn second(&mut self, now_ms: i64) -> &mut Second {
        let second = now_ms.div_euclid(1000);
        while self
            .seconds
            .front()
            .is_some_and(|(at, _)| *at <= second - MINUTE_SECONDS)
        {
            self.seconds.pop_front();
        }
        if self.seconds.back().is_none_or(|(at, _)| *at != second) {
            self.seconds.push_back((second, Second::default()));
        }
        match self.seconds.back_mut() {
            Some((_, figures)) => figures,
            None => unreachable!("a second was just pushed"),
        }
    }

    fn add_failed(&mut self, failed: u64, now_ms: i64) {
        let minute = now_ms.div_euclid(60_000);
        while self
            .failed_minutes
            .front()
            .is_some_and(|(at, _)| *at <= minute - HOUR_MINUTES)
        {
            self.failed_minutes.pop_front();
        }
        match self.failed_minutes.back_mut() {
            Some((at, count)) if *at == minute => *count += failed,
            _ => self.failed_minutes.push_back((minute, failed)),
        }
    }
}

/// Figures of every topic a consumer reads.
#[derive(Debug, Default)]
pub(crate) struct ConsumeRates {
    topics: Mutex<HashMap<String, TopicRates>>,
}

impl ConsumeRates {
    fn record(&self, topic: &str, now_ms: i64, change: impl FnOnce(&mut TopicRates)) {
        let mut topics = lock(&self.topics);
        let rates = topics
            .entry(topic.to_owned())
            .or_insert_with(|| TopicRates {
                since_ms: now_ms,
                ..TopicRates::default()
            });
        change(rates);
    }

    /// A pull of `topic` that took `rt_ms` and brought `messages`.
    pub(crate) fn pulled(&self, topic: &str, rt_ms: u64, messages: usize, now_ms: i64) {
        self.record(topic, now_ms, |rates| {
            let second = rates.second(now_ms);
            second.pulls += 1;
            second.pull_rt_ms += rt_ms;
            second.pulled += messages as u64;
        });
    }

    /// A listener call on `topic`'s messages that took `rt_ms`.
    pub(crate) fn consumed(&self, topic: &str, rt_ms: u64, now_ms: i64) {
        self.record(topic, now_ms, |rates| {
            let second = rates.second(now_ms);
            second.calls += 1;
            second.consume_rt_ms += rt_ms;
        });
    }

    /// How a call's messages ended: `ok` consumed, `failed` to be retried.
    pub(crate) fn settled(&self, topic: &str, ok: usize, failed: usize, now_ms: i64) {
        self.record(topic, now_ms, |rates| {
            let second = rates.second(now_ms);
            second.ok += ok as u64;
            second.failed += failed as u64;
            if failed > 0 {
                rates.add_failed(failed as u64, now_ms);
            }
        });
    }

    /// `topic`'s figures now: response times in ms, rates per second over the last minute (or
    /// since the first figure, if younger), failures over the last hour.
    pub(crate) fn status(&self, topic: &str, now_ms: i64) -> ConsumeStatus {
        let mut topics = lock(&self.topics);
        let Some(rates) = topics.get_mut(topic) else {
            return ConsumeStatus::default();
        };
        // Drop what fell out of the windows.
        let _ = rates.second(now_ms);
        rates.add_failed(0, now_ms);
        let total = rates
            .seconds
            .iter()
            .fold(Second::default(), |mut sum, (_, second)| {
                sum.pulls += second.pulls;
                sum.pull_rt_ms += second.pull_rt_ms;
                sum.pulled += second.pulled;
                sum.calls += second.calls;
                sum.consume_rt_ms += second.consume_rt_ms;
                sum.ok += second.ok;
                sum.failed += second.failed;
                sum
            });
        let window_seconds = ((now_ms - rates.since_ms) as f64 / 1000.0).clamp(1.0, 60.0);
        let average = |sum: u64, count: u64| {
            if count == 0 {
                0.0
            } else {
                sum as f64 / count as f64
            }
        };
        ConsumeStatus {
            pull_rt: average(total.pull_rt_ms, total.pulls),
            pull_tps: total.pulled as f64 / window_seconds,
            consume_rt: average(total.consume_rt_ms, total.calls),
            consume_ok_tps: total.ok as f64 / window_seconds,
            consume_failed_tps: total.failed as f64 / window_seconds,
            consume_failed_msgs: rates
                .failed_minutes
                .iter()
                .map(|(_, failed)| *failed)
                .sum::<u64>()
                .try_into()
                .unwrap_or(i64::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_cover_the_last_minute_and_failures_the_last_hour() {
        let rates = ConsumeRates::default();
        let start = 1_000_000_000_000;
        rates.pulled("T", 10, 32, start);
        rates.pulled("T", 30, 32, start + 500);
        rates.consumed("T", 4, start + 1_000);
        rates.settled("T", 30, 2, start + 1_000);
        let status = rates.status("T", start + 2_000);
        assert_eq!(status.pull_rt, 20.0);
        assert_eq!(status.pull_tps, 32.0);
        assert_eq!(status.consume_rt, 4.0);
        assert_eq!(status.consume_ok_tps, 15.0);
        assert_eq!(status.consume_failed_tps, 1.0);
        assert_eq!(status.consume_failed_msgs, 2);

        // Two minutes on: the rates are gone, the failures still count within the hour.
        let later = rates.status("T", start + 120_000);
        assert_eq!(later.pull_tps, 0.0);
        assert_eq!(later.consume_rt, 0.0);
        assert_eq!(later.consume_failed_msgs, 2);
        // After the hour nothing is left.
        assert_eq!(rates.status("T", start + 3_700_000).consume_failed_msgs, 0);
        assert_eq!(rates.status("other", start), ConsumeStatus::default());
    }
}
