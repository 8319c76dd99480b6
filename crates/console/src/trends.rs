//! Trends the console draws: every [`SAMPLE_EVERY`] the put rate of each topic, and the lag
//! and consume rate of each group, kept in memory for an hour and drawn as inline SVG lines
//! (nothing persisted: a restart starts the charts afresh).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tidemark_broker::BrokerState;
use tidemark_client::Admin;

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

/// Series a console on its own samples at most, of each kind.
const CLUSTER_SERIES_MAX: usize = 200;

impl Trends {
    /// One pass over the cluster through `admin` at `now_ms`: each group's lag over every
    /// broker and how fast its committed offsets advance (its consume rate), each user topic's
    /// put rate from its queues' max offsets.
    pub async fn sample_cluster(&self, admin: &Admin, now_ms: i64) {
        let mut groups_seen = Vec::new();
        for group in crate::cluster_names::configured_groups(admin)
            .await
            .into_iter()
            .take(CLUSTER_SERIES_MAX)
        {
            let Ok(queues) = admin.consumer_progress(&group, None).await else {
                continue;
            };
            let lag: i64 = queues
                .values()
                .map(|queue| (queue.broker_offset - queue.consumer_offset).max(0))
                .sum();
            let committed: i64 = queues.values().map(|queue| queue.consumer_offset).sum();
            groups_seen.push((group, lag, committed));
        }
        let mut topics_seen = Vec::new();
        for topic in crate::cluster_names::user_topics(admin)
            .await
            .into_iter()
            .take(CLUSTER_SERIES_MAX)
        {
            if let Ok(stats) = admin.topic_stats(&topic).await {
                let stored: i64 = stats
                    .offset_table
                    .values()
                    .map(|queue| queue.max_offset)
                    .sum();
                topics_seen.push((topic, stored));
            }
        }
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        for (group, lag, committed) in groups_seen {
            Self::record(
                &mut samples,
                Series::GroupLag(group.clone()),
                now_ms,
                lag as f64,
            );
            Self::record_rate(
                &mut samples,
                Series::GroupConsumeRate(group),
                now_ms,
                committed.max(0).unsigned_abs(),
            );
        }
        for (topic, stored) in topics_seen {
            Self::record_rate(
                &mut samples,
                Series::TopicPutRate(topic),
                now_ms,
                stored.max(0).unsigned_abs(),
            );
        }
    }
}

/// Samples the cluster through `admin` into `trends` until the task is dropped (a console on
/// its own).
pub async fn run_cluster(trends: Arc<Trends>, admin: Arc<Admin>) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        trends
            .sample_cluster(&admin, tidemark_remoting::now_ms())
            .await;
    }
}

/// A line chart of `points` over the `window` ending at `now_ms`: a value axis (zero, half and
/// the highest), a time axis (UTC) and gridlines; hovering anywhere over it reads out the time and
/// value there (an SVG `<title>` per slice: no script). Server-rendered, nothing fetched.
pub fn svg(points: &[(i64, f64)], now_ms: i64, window: Duration, unit: &str) -> String {
    const WIDTH: f64 = 360.0;
    const HEIGHT: f64 = 96.0;
    // Room for the value labels on the left and the time labels below.
    const LEFT: f64 = 48.0;
    const BOTTOM: f64 = 16.0;
    const TOP: f64 = 4.0;
    let plot_width = WIDTH - LEFT;
    let plot_height = HEIGHT - BOTTOM - TOP;
    let span = window.as_millis().max(1) as f64;
    let highest = points
        .iter()
        .map(|(_, value)| *value)
        .fold(0.0_f64, f64::max);
    let scale = if highest > 0.0 { highest } else { 1.0 };
    let x_of = |at: i64| LEFT + plot_width - (now_ms - at) as f64 / span * plot_width;
    let y_of = |value: f64| TOP + plot_height - value / scale * plot_height;
    let mut chart = format!(
        "<svg class=\"trend\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" font-size=\"9\" font-family=\"sans-serif\"><rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_width}\" height=\"{plot_height}\" fill=\"#f6f8fa\"/>"
    );
    for value in [0.0, scale / 2.0, scale] {
        let y = y_of(value);
        let _ = write!(
            chart,
            "<line x1=\"{LEFT}\" x2=\"{WIDTH}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#d0d7de\" stroke-width=\"0.5\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"axis-value\">{}</text>",
            LEFT - 3.0,
            y + 3.0,
            short_number(value)
        );
    }
    for (fraction, anchor) in [(0.0, "start"), (0.5, "middle"), (1.0, "end")] {
        let at = now_ms - ((1.0 - fraction) * span) as i64;
        let _ = write!(
            chart,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" class=\"axis-time\">{}</text>",
            LEFT + fraction * plot_width,
            HEIGHT - 4.0,
            clock(at, window)
        );
    }
    let mut line = String::new();
    for (at, value) in points {
        let _ = write!(line, "{:.1},{:.1} ", x_of(*at), y_of(*value));
    }
    let _ = write!(
        chart,
        "<polyline fill=\"none\" stroke=\"#0969da\" stroke-width=\"1.5\" points=\"{}\"/>",
        line.trim_end()
    );
    hover_slices(&mut chart, points, &x_of, TOP, plot_height, unit, window);
    let latest = points.last().map_or(0.0, |(_, value)| *value);
    let _ = write!(
        chart,
        "</svg><span class=\"trend-figures\">now {latest:.1} {unit} · highest {highest:.1}</span>"
    );
    chart
}

/// Transparent slices over the plot, at most [`HOVER_SLICES_MAX`] of them, each titled with the
/// time and value of the last point it covers: the browser shows the title on hover.
fn hover_slices(
    chart: &mut String,
    points: &[(i64, f64)],
    x_of: &dyn Fn(i64) -> f64,
    top: f64,
    height: f64,
    unit: &str,
    window: Duration,
) {
    const HOVER_SLICES_MAX: usize = 120;
    if points.is_empty() {
        return;
    }
    let per_slice = points.len().div_ceil(HOVER_SLICES_MAX);
    let slices: Vec<&[(i64, f64)]> = points.chunks(per_slice).collect();
    for (index, slice) in slices.iter().enumerate() {
        let (Some(first), Some(&(at, value))) = (slice.first(), slice.last()) else {
            continue;
        };
        // From the slice's first point to the next slice's (the last reaches its own last).
        let from = x_of(first.0);
        let to = slices
            .get(index + 1)
            .and_then(|next| next.first())
            .map_or_else(|| x_of(at) + 2.0, |next| x_of(next.0));
        let _ = write!(
            chart,
            "<rect class=\"hover\" x=\"{from:.1}\" y=\"{top}\" width=\"{:.1}\" height=\"{height}\" fill=\"transparent\"><title>{} — {value:.1} {unit}</title></rect>",
            (to - from).max(1.0),
            clock(at, window)
        );
    }
}

/// `HH:MM:SS` UTC (`HH:MM` for windows of an hour or more).
fn clock(ms: i64, window: Duration) -> String {
    let seconds = ms.div_euclid(1000).rem_euclid(86_400);
    let (hours, minutes, secs) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if window >= Duration::from_secs(3600) {
        format!("{hours:02}:{minutes:02}")
    } else {
        format!("{hours:02}:{minutes:02}:{secs:02}")
    }
}

/// A value for an axis label: `0`, `12`, `3.5`, `12k`, `1.2M`.
fn short_number(value: f64) -> String {
    match value.abs() {
        v if v >= 1e6 => format!("{:.1}M", value / 1e6),
        v if v >= 1e4 => format!("{:.0}k", value / 1e3),
        v if v >= 10.0 || v == 0.0 => format!("{value:.0}"),
        _ => format!("{value:.1}"),
    }
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
        // Axes: zero, half and the highest; the window's start, middle and end in UTC.
        assert!(
            drawn.contains(">1.5</text>") && drawn.contains(">3.0</text>"),
            "{drawn}"
        );
        assert!(
            drawn.contains(">00:00:05</text>") && drawn.contains(">23:55:05</text>"),
            "{drawn}"
        );
        // Hover: each point's time and value.
        assert!(
            drawn.contains("<title>00:00:05 — 3.0 msg/s</title>"),
            "{drawn}"
        );
        assert!(
            drawn.contains("<title>00:00:00 — 1.0 msg/s</title>"),
            "{drawn}"
        );
    }
}
