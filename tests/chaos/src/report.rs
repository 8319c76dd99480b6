//! What a run leaves behind, in its own directory: `history.jsonl` (every operation),
//! `faults.json` (the fault timeline), `timeline.svg` (acknowledged sends per second and their
//! slowest latency, with a band per fault) and `summary.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::checker::{unavailability, Verdict};
use crate::history::{Kind, Op, Outcome};
use crate::nemesis::FaultRecord;

/// Per broker set, per whole second of the run: acknowledged sends; and per second the
/// slowest acknowledged send (ms).
fn per_second(ops: &[Op]) -> (BTreeMap<String, Vec<f64>>, Vec<f64>) {
    let mut sets: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut slowest: Vec<f64> = Vec::new();
    for op in ops {
        let Kind::Send {
            queue: Some(queue), ..
        } = &op.kind
        else {
            continue;
        };
        if op.outcome != Outcome::Ok {
            continue;
        }
        let second = (op.completed_ms / 1000.0) as usize;
        if slowest.len() <= second {
            slowest.resize(second + 1, 0.0);
        }
        slowest[second] = slowest[second].max(op.completed_ms - op.invoked_ms);
        let counts = sets.entry(queue.broker.clone()).or_default();
        if counts.len() <= second {
            counts.resize(second + 1, 0.0);
        }
        counts[second] += 1.0;
    }
    (sets, slowest)
}

const SET_COLOURS: [&str; 4] = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b"];

/// The throughput and latency chart with fault bands: a line per broker set (acknowledged
/// sends per second), the slowest acknowledged send per second on its own scale.
pub fn timeline_svg(ops: &[Op], faults: &[FaultRecord]) -> String {
    let (width, height, left, top) = (960.0, 380.0, 50.0, 34.0);
    let (plot_w, plot_h) = (width - 2.0 * left, height - top - 40.0);
    let (sets, slowest) = per_second(ops);
    let span = slowest.len().max(1) as f64;
    let most = sets.values().flatten().copied().fold(1.0, f64::max);
    let slowest_ms = slowest.iter().copied().fold(1.0, f64::max);
    let x = |second: f64| left + second / span * plot_w;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (index, fault) in faults.iter().enumerate() {
        let start = x(fault.started_ms / 1000.0);
        let end = x(fault.healed_ms.unwrap_or(fault.started_ms) / 1000.0);
        let _ = writeln!(
            svg,
            "<rect x=\"{start:.1}\" y=\"{top}\" width=\"{:.1}\" height=\"{plot_h}\" fill=\"#f4c7c3\" \
             opacity=\"0.6\"><title>{:?} on {}</title></rect>\n<text x=\"{start:.1}\" y=\"{:.1}\" \
             font-size=\"9\">{:?} {}</text>",
            (end - start).max(1.0),
            fault.kind,
            fault.targets.join(", "),
            top + 10.0 + 11.0 * (index % 2) as f64,
            fault.kind,
            fault.targets.join(",")
        );
    }
    let line = |values: &[f64], scale: f64| -> String {
        values
            .iter()
            .enumerate()
            .map(|(second, value)| {
                format!(
                    "{:.1},{:.1}",
                    x(second as f64 + 0.5),
                    top + plot_h - value / scale * plot_h
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut legend = left;
    for ((name, counts), colour) in sets.iter().zip(SET_COLOURS.iter().cycle()) {
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>\n\
             <text x=\"{legend:.1}\" y=\"14\" fill=\"{colour}\">{name}: acknowledged sends/s</text>",
            line(counts, most)
        );
        legend += 210.0;
    }
    let bottom = top + plot_h;
    let _ = writeln!(
        svg,
        "<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"1\" points=\"{}\"/>\n\
         <text x=\"{legend:.1}\" y=\"14\" fill=\"#ff7f0e\">slowest acknowledged send (top: {slowest_ms:.0} ms)</text>\n\
         <line x1=\"{left}\" y1=\"{bottom}\" x2=\"{:.1}\" y2=\"{bottom}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"black\"/>\n\
         <text x=\"{left}\" y=\"{:.1}\">0 s</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{span} s</text>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{most}/s</text>\n</svg>",
        line(&slowest, slowest_ms),
        left + plot_w,
        bottom + 14.0,
        left + plot_w,
        bottom + 14.0,
        left - 4.0,
        top + 4.0,
    );
    svg
}

/// The summary in Markdown.
pub fn summary(seed: u64, ops: &[Op], faults: &[FaultRecord], verdict: &Verdict) -> String {
    let windows = unavailability(ops, faults);
    let counts = &verdict.counts;
    let mut text = format!("# Chaos run, seed {seed}\n\n");
    let _ = writeln!(
        text,
        "- operations: {}; values acknowledged: {}; stored: {}; deliveries: {} ({} again); \
         commit readings: {}",
        ops.len(),
        counts.values_acknowledged,
        counts.stored,
        counts.deliveries,
        counts.redeliveries,
        counts.commit_readings
    );
    let sends: Vec<String> = counts
        .sends
        .iter()
        .map(|(label, n)| format!("{label} {n}"))
        .collect();
    let _ = writeln!(text, "- send requests: {}", sends.join(", "));
    if counts.pop_redelivered_by_clock > 0 {
        let _ = writeln!(
            text,
            "- POP values acknowledged and handed out again after a clock step (not promised): {}",
            counts.pop_redelivered_by_clock
        );
    }
    if counts.pop_redelivered_stored_twice > 0 {
        let _ = writeln!(
            text,
            "- POP values acknowledged and handed out again from their second stored copy: {}",
            counts.pop_redelivered_stored_twice
        );
    }
    let _ = writeln!(text, "- anomalies: {}\n", verdict.anomalies.len());
    for anomaly in verdict.anomalies.iter().take(50) {
        let _ = writeln!(text, "  - {anomaly}");
    }
    let _ = writeln!(
        text,
        "\n## Faults\n\n| at (s) | fault | on | healed (s) | settled (s) | longest without an acked send (s) |\n|---|---|---|---|---|---|"
    );
    let secs = |ms: Option<f64>| ms.map_or("never".to_owned(), |ms| format!("{:.1}", ms / 1000.0));
    for (fault, window) in faults.iter().zip(&windows) {
        let _ = writeln!(
            text,
            "| {:.1} | {:?}{} | {} | {} | {} | {:.2} |",
            fault.started_ms / 1000.0,
            fault.kind,
            if fault.overlapped {
                " (overlapping)"
            } else {
                ""
            },
            fault.targets.join(", "),
            secs(fault.healed_ms),
            secs(fault.settled_ms),
            window / 1000.0
        );
    }
    text
}

/// Writes the run's files into `dir`.
pub fn write(
    dir: &Path,
    seed: u64,
    ops: &[Op],
    faults: &[FaultRecord],
    verdict: &Verdict,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut history = String::new();
    for op in ops {
        history.push_str(&serde_json::to_string(op).map_err(std::io::Error::other)?);
        history.push('\n');
    }
    std::fs::write(dir.join("history.jsonl"), history)?;
    let timeline = serde_json::to_string_pretty(faults).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("faults.json"), timeline)?;
    std::fs::write(dir.join("timeline.svg"), timeline_svg(ops, faults))?;
    std::fs::write(dir.join("summary.md"), summary(seed, ops, faults, verdict))
}

/// A run's history and fault timeline, read back from its directory.
pub fn read(dir: &Path) -> std::io::Result<(Vec<Op>, Vec<FaultRecord>)> {
    let history = std::fs::read_to_string(dir.join("history.jsonl"))?;
    let ops = history
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<Vec<Op>, _>>()
        .map_err(std::io::Error::other)?;
    let faults = serde_json::from_str(&std::fs::read_to_string(dir.join("faults.json"))?)
        .map_err(std::io::Error::other)?;
    Ok((ops, faults))
}
