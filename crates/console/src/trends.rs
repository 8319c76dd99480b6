//! Trends the console draws: every [`SAMPLE_EVERY`] the put rate of each topic, and the lag
//! and consume rate of each group, kept in memory for an hour and drawn as inline SVG lines
//! (nothing persisted: a restart starts the charts afresh).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tidemark_broker::BrokerState;

/// How often a point is taken.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Points kept: one hour.
const POINTS_MAX: usize = 720;

/// What a series measures.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Series {
    /// Messages stored per second.
    TopicPutRate(String),
    /// Messages above the group's committed offsets, over all its queues.
    GroupLag(String),
    /// Messages delivered to the group per second.
    GroupConsumeRate(String),
}

#[derive(Debug, Default)]
struct Samples {
    series: HashMap<Series, VecDeque<(i64, f64)>>,
    /// Counter readings of the last pass, to turn totals into rates.
    last_totals: HashMap<Series, (i64, u64)>,
}

/// The sampled series, shared by the sampler and the pages.
#[derive(Debug, Default)]
pub struct Trends {
    samples: Mutex<Samples>,
}

impl Trends {
    fn record(samples: &mut Samples, series: Series, at_ms: i64, value: f64) {
        let points = samples.series.entry(series).or_default();
        points.push_back((at_ms, value));
        while points.len() > POINTS_MAX {
            points.pop_front();
        }
    }

    /// Records a counter's total; the point is its rate since the last reading.
    fn record_rate(samples: &mut Samples, series: Series, at_ms: i64, total: u64) {
        if let Some((then, before)) = samples.last_totals.insert(series.clone(), (at_ms, total)) {
            let seconds = (at_ms - then) as f64 / 1000.0;
            if seconds > 0.0 {
                let rate = total.saturating_sub(before) as f64 / seconds;
                Self::record(samples, series, at_ms, rate);
            }
        }
    }

    /// One pass over the broker's figures at `now_ms`.
    pub fn sample(&self, state: &BrokerState, now_ms: i64) {
        let traffic = state.stats.traffic.snapshot();
        let mut lags: Vec<(String, i64)> = Vec::new();
        let mut groups: Vec<String> = state
            .metadata
            .topics
            .names()
            .iter()
            .flat_map(|topic| state.progress.offsets.groups_of_topic(topic))
            .collect();
        groups.sort();
        groups.dedup();
        for group in groups {
            let lag: i64 = tidemark_broker::progress::group_progress(state, &group, None, now_ms)
                .iter()
                .map(|queue| (queue.broker_offset - queue.consumer_offset).max(0))
                .sum();
            lags.push((group, lag));
        }
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        for (topic, flow) in &traffic.stored {
            Self::record_rate(
                &mut samples,
                Series::TopicPutRate(topic.clone()),
                now_ms,
                flow.messages,
            );
        }
        let mut delivered: HashMap<&str, u64> = HashMap::new();
        for ((_, group), flow) in &traffic.delivered {
            *delivered.entry(group.as_str()).or_default() += flow.messages;
        }
        for (group, total) in delivered {
            Self::record_rate(
                &mut samples,
                Series::GroupConsumeRate(group.to_owned()),
                now_ms,
                total,
            );
        }
        for (group, lag) in lags {
            Self::record(&mut samples, Series::GroupLag(group), now_ms, lag as f64);
        }
    }

    /// The series' points no older than `window` before `now_ms`.
    pub fn points(&self, series: &Series, now_ms: i64, window: Duration) -> Vec<(i64, f64)> {
        let since = now_ms - window.as_millis() as i64;
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        samples
            .series
            .get(series)
            .map(|points| {
                points
                    .iter()
                    .filter(|(at, _)| *at >= since)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Samples `state` into `trends` until the task is dropped.
pub async fn run(trends: Arc<Trends>, state: Arc<BrokerState>) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (trends, state) = (trends.clone(), state.clone());
        // Group progress reads every queue's bounds and a store timestamp: off the workers.
        let _ =
            tokio::task::spawn_blocking(move || trends.sample(&state, tidemark_remoting::now_ms()))
                .await;
    }
}

/// An SVG line of `points` over `window` ending at `now_ms`, with its latest and highest value.
pub fn svg(points: &[(i64, f64)], now_ms: i64, window: Duration, unit: &str) -> String {
    const WIDTH: f64 = 320.0;
    const HEIGHT: f64 = 64.0;
    let span = window.as_millis().max(1) as f64;
    let highest = points
        .iter()
        .map(|(_, value)| *value)
        .fold(0.0_f64, f64::max);
    let scale = if highest > 0.0 { highest } else { 1.0 };
    let mut line = String::new();
    for (at, value) in points {
        let x = WIDTH - (now_ms - at) as f64 / span * WIDTH;
        let y = HEIGHT - value / scale * (HEIGHT - 4.0) - 2.0;
        let _ = write!(line, "{x:.1},{y:.1} ");
    }
    let latest = points.last().map_or(0.0, |(_, value)| *value);
    format!(
        "<svg class=\"trend\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\"><title>now {latest:.1} {unit}, highest {highest:.1}</title><rect width=\"100%\" height=\"100%\" fill=\"#f6f8fa\"/><polyline fill=\"none\" stroke=\"#0969da\" stroke-width=\"1.5\" points=\"{}\"/></svg><span class=\"trend-figures\">now {latest:.1} {unit} · highest {highest:.1}</span>",
        line.trim_end()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_successive_totals_and_old_points_leave() {
        let mut samples = Samples::default();
        let series = Series::TopicPutRate("T".into());
        Trends::record_rate(&mut samples, series.clone(), 0, 100);
        Trends::record_rate(&mut samples, series.clone(), 5_000, 600);
        let trends = Trends {
            samples: Mutex::new(samples),
        };
        assert_eq!(
            trends.points(&series, 5_000, Duration::from_secs(300)),
            vec![(5_000, 100.0)]
        );
        assert!(trends
            .points(&series, 5_000 + 400_000, Duration::from_secs(300))
            .is_empty());
        let drawn = svg(
            &[(0, 1.0), (5_000, 3.0)],
            5_000,
            Duration::from_secs(300),
            "msg/s",
        );
        assert!(drawn.contains("<polyline") && drawn.contains("now 3.0 msg/s"));
    }
}
