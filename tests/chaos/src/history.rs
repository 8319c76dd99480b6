//! The record of a run: every operation a client or the run's watcher made, with when it was
//! invoked and when it completed (milliseconds since the run started, one clock for every
//! process since all clients live in this one), and what came of it.
//!
//! An outcome is `Ok` when the system acknowledged it, `Fail` when it certainly did not happen,
//! and `Unknown` when it may have (a send that timed out): the checker holds the system to
//! `Ok` and `Fail`, and lets `Unknown` go either way.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Fail,
    Unknown,
}

/// How a producer sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SendMode {
    Sync,
    Async,
    Batch,
    /// To the one queue its key maps to, in sequence: the orderly workload.
    Ordered,
    /// A sync send by Apache's Go client (rocketmq-client-go v2).
    GoSync,
    /// A sync send by Apache's gRPC Go client (rocketmq-clients Go v5).
    GrpcSync,
    /// A transaction: its half message, settled as the value says ([`transaction_commits`]).
    /// Acknowledged means committed; a rolled-back value must never be stored.
    Transaction,
}

/// A queue as clients name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QueueRef {
    pub topic: String,
    pub broker: String,
    pub queue: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Kind {
    /// Values sent in one request (several for a batch); `queue` and `offset` (of the first)
    /// as the acknowledgement named them.
    Send {
        mode: SendMode,
        values: Vec<String>,
        queue: Option<QueueRef>,
        offset: Option<i64>,
    },
    /// A value handed to a group's listener.
    Deliver {
        group: String,
        consumer: String,
        value: String,
        queue: QueueRef,
        offset: i64,
    },
    /// A group's committed offset of a queue as the master answered it (recorded when it
    /// differs from the reading before).
    Committed {
        group: String,
        queue: QueueRef,
        offset: i64,
    },
    /// A POP consumer acknowledged a value it received; `visible_until_ms`: when the receipt
    /// it acknowledged with would have expired (an acknowledgement that completes later may
    /// come too late: the message is handed out again).
    PopAck {
        group: String,
        value: String,
        visible_until_ms: f64,
    },
    /// A POP consumer kept a received value invisible longer.
    ChangeInvisible {
        group: String,
        value: String,
        visible_until_ms: f64,
    },
    /// An operator moved a group's progress (a reset or a skip): offsets may go back, and
    /// values come again, from here on.
    ProgressMoved { group: String, topic: String },
    /// The topic read whole at the end: every value each queue holds, in order.
    LogRead {
        queue: QueueRef,
        values: Vec<(i64, String)>,
    },
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    pub id: u64,
    /// Which client or watcher made it.
    pub process: String,
    pub invoked_ms: f64,
    pub completed_ms: f64,
    pub outcome: Outcome,
    #[serde(flatten)]
    pub kind: Kind,
}

/// Shared by every client of a run: appends operations as they complete.
#[derive(Debug, Clone)]
pub struct Recorder {
    start: Instant,
    /// The same moment on the wall clock, in Unix microseconds: for clients in other
    /// processes, which report wall-clock times.
    start_unix_us: i64,
    ops: Arc<Mutex<Vec<Op>>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        let start_unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as i64);
        Recorder {
            start: Instant::now(),
            start_unix_us,
            ops: Arc::default(),
        }
    }

    /// Milliseconds since the run started.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1e3
    }

    /// A wall-clock time in Unix microseconds as milliseconds of the run.
    pub fn ms_of_unix_us(&self, unix_us: i64) -> f64 {
        (unix_us - self.start_unix_us) as f64 / 1e3
    }

    /// Records an operation invoked at `invoked_ms` that completed now.
    pub fn complete(&self, process: &str, invoked_ms: f64, outcome: Outcome, kind: Kind) {
        self.complete_at(process, invoked_ms, self.now(), outcome, kind);
    }

    /// Records an operation with both its times given.
    pub fn complete_at(
        &self,
        process: &str,
        invoked_ms: f64,
        completed_ms: f64,
        outcome: Outcome,
        kind: Kind,
    ) {
        let mut ops = self
            .ops
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let id = ops.len() as u64;
        ops.push(Op {
            id,
            process: process.to_owned(),
            invoked_ms,
            completed_ms,
            outcome,
            kind,
        });
    }

    /// Records something that happened at one instant (a delivery, a reading).
    pub fn event(&self, process: &str, kind: Kind) {
        let now = self.now();
        self.complete(process, now, Outcome::Ok, kind);
    }

    /// Every operation so far, in the order they completed.
    pub fn snapshot(&self) -> Vec<Op> {
        self.ops
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// The key and sequence number of an ordered workload's value (`o-<key>-<seq>`).
pub fn ordered_parts(value: &str) -> Option<(&str, u64)> {
    let rest = value.strip_prefix("o-")?;
    let (key, seq) = rest.rsplit_once('-')?;
    Some((key, seq.parse().ok()?))
}

/// How a transactional value is settled, from its name: `tc<n>` and `tuc<n>` (left unknown,
/// then committed at the check-back) commit, `tr<n>` and `tur<n>` roll back; `None` for a
/// value that is not a transaction's.
pub fn transaction_commits(value: &str) -> Option<bool> {
    let kind = value.trim_end_matches(|c: char| c.is_ascii_digit());
    if kind.len() == value.len() {
        return None;
    }
    match kind {
        "tc" | "tuc" => Some(true),
        "tr" | "tur" => Some(false),
        _ => None,
    }
}

/// The value the ordered workload sends as `seq` of `key`.
pub fn ordered_value(key: &str, seq: u64) -> String {
    format!("o-{key}-{seq}")
}
