//! Reads a whole history and names every anomaly in it, with the operations involved.
//!
//! What is checked, against what Tidemark promises:
//! - an acknowledged send is in the log at the end (no lost acknowledged write: RPO 0 for SYNC
//!   replication), and every group that consumes its topic got it;
//! - no value is stored twice (producers here never retry, so a second copy is the broker's);
//! - nothing is delivered or stored that was never sent;
//! - a group's committed offset never goes back, unless an operator moved it;
//! - once a commit past an offset was read, the group never gets that offset again (progress
//!   is exact across failover: a new master knows every commit the old one answered with);
//! - an orderly group gets each key's values in the order they were acknowledged, none
//!   skipped and come later;
//! - a POP group is never handed a value again once it acknowledged it in time;
//! - a committed transaction is a write like any acknowledged send; a rolled-back one is never
//!   stored or delivered;
//! - a broker set that lost its master acknowledges sends again within a bound.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::history::{ordered_parts, transaction_commits, Kind, Op, Outcome, QueueRef};
use crate::nemesis::{FaultKind, FaultRecord};

/// Which groups consume which topics, and which of those groups are orderly.
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    /// (group, topic): the group must get every acknowledged value of the topic.
    pub subscriptions: Vec<(String, String)>,
    pub orderly_groups: BTreeSet<String>,
    /// A send that waited this long may have been moved off a silent master by the client and
    /// stored twice (a retry Tidemark documents); quicker sends must be stored once.
    pub moved_after_ms: f64,
    /// When a broker set's wall clock was stepped ([`clock_steps`]).
    pub clock_steps: Vec<ClockStep>,
}

/// A broker set whose wall clock was off between `from_ms` and `to_ms`. POP invisibility is
/// measured on the broker's wall clock (as in RocketMQ): a step forward, or the step back from
/// a clock set behind, ends it early, and a message acknowledged on the client's clock may
/// already be on its way back. Such a redelivery is counted, not an anomaly.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockStep {
    pub set: String,
    pub from_ms: f64,
    pub to_ms: f64,
}

/// How long after its file changes libfaketime may take to step a clock.
const CLOCK_STEP_LAG_MS: f64 = 2_500.0;

/// The clock steps among `faults`.
pub fn clock_steps(faults: &[FaultRecord]) -> Vec<ClockStep> {
    faults
        .iter()
        .filter(|fault| fault.kind == FaultKind::ClockJump)
        .filter_map(|fault| {
            Some(ClockStep {
                set: fault.set.clone()?,
                from_ms: fault.started_ms,
                to_ms: fault.healed_ms.unwrap_or(f64::INFINITY) + CLOCK_STEP_LAG_MS,
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq)]
pub enum Anomaly {
    LostWrite {
        value: String,
        send: u64,
    },
    DuplicateInLog {
        value: String,
        places: Vec<(QueueRef, i64)>,
    },
    Unexpected {
        value: String,
        op: u64,
    },
    NeverDelivered {
        group: String,
        value: String,
        send: u64,
    },
    OffsetBackwards {
        group: String,
        queue: QueueRef,
        before: (u64, i64),
        after: (u64, i64),
    },
    RedeliveredAfterCommit {
        group: String,
        value: String,
        offset: i64,
        commit: (u64, i64),
        delivery: u64,
    },
    OrderViolation {
        group: String,
        key: String,
        delivered: (u64, u64),
        missing: u64,
    },
    /// A POP group was handed a value again after it acknowledged it in time.
    PopAckedRedelivered {
        group: String,
        value: String,
        ack: u64,
        delivery: u64,
    },
    /// A value whose transaction was rolled back was stored or delivered (`op`: the log read
    /// or the delivery).
    RolledBackVisible {
        value: String,
        op: u64,
    },
    /// A broker set acknowledged no send for `ms` after a fault took its master at `at_ms`.
    Unavailable {
        fault: String,
        at_ms: f64,
        ms: f64,
    },
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::LostWrite { value, send } => {
                write!(
                    f,
                    "lost acknowledged write: {value} (send op {send}) is not in the log"
                )
            }
            Anomaly::DuplicateInLog { value, places } => {
                write!(
                    f,
                    "duplicate in the log: {value} stored {} times at {places:?}",
                    places.len()
                )
            }
            Anomaly::Unexpected { value, op } => {
                write!(f, "unexpected value: {value} (op {op}) was never sent")
            }
            Anomaly::NeverDelivered { group, value, send } => write!(
                f,
                "never delivered: {group} never got {value} (acknowledged by send op {send})"
            ),
            Anomaly::OffsetBackwards {
                group,
                queue,
                before,
                after,
            } => write!(
                f,
                "committed offset went back: {group} on {queue:?} read {} (op {}), then {} (op {})",
                before.1, before.0, after.1, after.0
            ),
            Anomaly::RedeliveredAfterCommit {
                group,
                value,
                offset,
                commit,
                delivery,
            } => write!(
                f,
                "redelivered after its commit: {group} got {value} at offset {offset} (op \
                 {delivery}) after a commit of {} was read (op {})",
                commit.1, commit.0
            ),
            Anomaly::OrderViolation {
                group,
                key,
                delivered,
                missing,
            } => write!(
                f,
                "order violation: {group} got {key}'s value {} (op {}) before its acknowledged \
                 value {missing}",
                delivered.1, delivered.0
            ),
            Anomaly::PopAckedRedelivered {
                group,
                value,
                ack,
                delivery,
            } => write!(
                f,
                "POP acknowledged value redelivered: {group} got {value} (op {delivery}) after \
                 acknowledging it within its invisibility (op {ack})"
            ),
            Anomaly::RolledBackVisible { value, op } => write!(
                f,
                "rolled-back transaction visible: {value} was stored or delivered (op {op})"
            ),
            Anomaly::Unavailable { fault, at_ms, ms } => write!(
                f,
                "unavailable too long: {fault} at {:.1} s, no acknowledged send for {:.1} s \
                 (bound {:.0} s)",
                at_ms / 1e3,
                ms / 1e3,
                MASTER_LOSS_BOUND_MS / 1e3
            ),
        }
    }
}

/// Figures of a history, for the summary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Send requests per "mode outcome" (`sync ok`, `batch unknown`, …).
    pub sends: BTreeMap<String, usize>,
    pub values_acknowledged: usize,
    pub deliveries: usize,
    /// Deliveries of a value the group had had before (allowed below the committed offset).
    pub redeliveries: usize,
    pub commit_readings: usize,
    pub stored: usize,
    /// POP redeliveries of an acknowledged value that a stepped clock explains ([`ClockStep`]).
    pub pop_redelivered_by_clock: usize,
    /// POP deliveries of an acknowledged value stored twice (the other stored copy).
    pub pop_redelivered_stored_twice: usize,
}

#[derive(Debug, Clone, Default)]
pub struct Verdict {
    pub anomalies: Vec<Anomaly>,
    pub counts: Counts,
}

/// Every anomaly of `ops` (in any order; sorted here by completion).
pub fn check(ops: &[Op], expect: &Expectations) -> Verdict {
    let mut ops: Vec<&Op> = ops.iter().collect();
    ops.sort_by(|a, b| {
        effective_ms(a)
            .total_cmp(&effective_ms(b))
            .then(a.id.cmp(&b.id))
    });
    let mut verdict = Verdict::default();
    let sent = sent_values(&ops, &mut verdict.counts);
    check_log(&ops, &sent, expect, &mut verdict);
    check_deliveries(&ops, &sent, expect, &mut verdict);
    check_commits(&ops, &mut verdict);
    verdict
}

/// When an operation counts as having happened: an operator's move from the moment it was
/// asked for (the broker may apply it before answering), anything else once it completed.
fn effective_ms(op: &Op) -> f64 {
    match op.kind {
        Kind::ProgressMoved { .. } => op.invoked_ms,
        _ => op.completed_ms,
    }
}

/// Every value any send attempted: its send op, whether acknowledged, and its topic (when the
/// acknowledgement named the queue).
struct Sent {
    op: u64,
    acked: bool,
    /// How long the send took.
    waited_ms: f64,
    topic: Option<String>,
}

fn sent_values(ops: &[&Op], counts: &mut Counts) -> BTreeMap<String, Sent> {
    let mut sent = BTreeMap::new();
    for op in ops {
        let Kind::Send {
            mode,
            values,
            queue,
            ..
        } = &op.kind
        else {
            continue;
        };
        let label = format!("{mode:?} {:?}", op.outcome).to_lowercase();
        *counts.sends.entry(label).or_default() += 1;
        for value in values {
            // A transaction is acknowledged as a write only when it commits.
            let acked = op.outcome == Outcome::Ok && transaction_commits(value) != Some(false);
            if acked {
                counts.values_acknowledged += 1;
            }
            sent.insert(
                value.clone(),
                Sent {
                    op: op.id,
                    acked,
                    waited_ms: op.completed_ms - op.invoked_ms,
                    topic: queue.as_ref().map(|queue| queue.topic.clone()),
                },
            );
        }
    }
    sent
}

fn check_log(
    ops: &[&Op],
    sent: &BTreeMap<String, Sent>,
    expect: &Expectations,
    verdict: &mut Verdict,
) {
    let mut stored: BTreeMap<&str, Vec<(QueueRef, i64)>> = BTreeMap::new();
    for op in ops {
        if let Kind::LogRead { queue, values } = &op.kind {
            for (offset, value) in values {
                stored
                    .entry(value)
                    .or_default()
                    .push((queue.clone(), *offset));
                if !sent.contains_key(value.as_str()) {
                    verdict.anomalies.push(Anomaly::Unexpected {
                        value: value.clone(),
                        op: op.id,
                    });
                }
                if transaction_commits(value) == Some(false) {
                    verdict.anomalies.push(Anomaly::RolledBackVisible {
                        value: value.clone(),
                        op: op.id,
                    });
                }
            }
        }
    }
    verdict.counts.stored = stored.len();
    for (value, places) in &stored {
        let moved = sent
            .get(*value)
            .is_some_and(|send| send.waited_ms >= expect.moved_after_ms);
        if places.len() > 1 && !moved {
            verdict.anomalies.push(Anomaly::DuplicateInLog {
                value: (*value).to_owned(),
                places: places.clone(),
            });
        }
    }
    for (value, send) in sent {
        if send.acked && !stored.contains_key(value.as_str()) {
            verdict.anomalies.push(Anomaly::LostWrite {
                value: value.clone(),
                send: send.op,
            });
        }
    }
}

fn check_deliveries(
    ops: &[&Op],
    sent: &BTreeMap<String, Sent>,
    expect: &Expectations,
    verdict: &mut Verdict,
) {
    // Per group: values delivered so far; per (group, key): sequence numbers delivered.
    let mut delivered: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut ordered_seen: BTreeMap<(&str, &str), BTreeSet<u64>> = BTreeMap::new();
    // Per key: the acknowledged sequence numbers (the ordered producer sends them in turn).
    let mut acked_seqs: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for (value, send) in sent {
        if let (true, Some((key, seq))) = (send.acked, ordered_parts(value)) {
            acked_seqs.entry(key).or_default().insert(seq);
        }
    }
    // Per (group, value): the POP acknowledgement that settled it, and when it completed.
    let mut pop_acked: BTreeMap<(&str, &str), (u64, f64)> = BTreeMap::new();
    let stored_twice = stored_more_than_once(ops);
    for op in ops {
        if let Kind::PopAck {
            group,
            value,
            visible_until_ms,
        } = &op.kind
        {
            if op.outcome == Outcome::Ok && op.completed_ms < *visible_until_ms {
                pop_acked
                    .entry((group, value))
                    .or_insert((op.id, op.completed_ms));
            }
            continue;
        }
        let Kind::Deliver {
            group,
            value,
            queue,
            ..
        } = &op.kind
        else {
            continue;
        };
        verdict.counts.deliveries += 1;
        if let Some((ack, acked_ms)) = pop_acked.get(&(group.as_str(), value.as_str())) {
            let stepped = expect.clock_steps.iter().any(|step| {
                step.set == queue.broker
                    && step.from_ms <= op.completed_ms
                    && step.to_ms >= *acked_ms
            });
            if stored_twice.contains(value.as_str()) {
                // Two stored messages carry the value (a send the client retried; the
                // duplicate check judges that): acknowledging one leaves the other to come.
                verdict.counts.pop_redelivered_stored_twice += 1;
            } else if stepped {
                verdict.counts.pop_redelivered_by_clock += 1;
            } else {
                verdict.anomalies.push(Anomaly::PopAckedRedelivered {
                    group: group.clone(),
                    value: value.clone(),
                    ack: *ack,
                    delivery: op.id,
                });
            }
        }
        if !sent.contains_key(value.as_str()) {
            verdict.anomalies.push(Anomaly::Unexpected {
                value: value.clone(),
                op: op.id,
            });
        }
        if transaction_commits(value) == Some(false) {
            verdict.anomalies.push(Anomaly::RolledBackVisible {
                value: value.clone(),
                op: op.id,
            });
        }
        if !delivered.entry(group).or_default().insert(value) {
            verdict.counts.redeliveries += 1;
        }
        if !expect.orderly_groups.contains(group.as_str()) {
            continue;
        }
        let Some((key, seq)) = ordered_parts(value) else {
            continue;
        };
        let seen = ordered_seen.entry((group, key)).or_default();
        let missing = acked_seqs
            .get(key)
            .and_then(|acked| acked.range(..seq).find(|earlier| !seen.contains(earlier)));
        if let Some(missing) = missing {
            verdict.anomalies.push(Anomaly::OrderViolation {
                group: group.clone(),
                key: key.to_owned(),
                delivered: (op.id, seq),
                missing: *missing,
            });
        }
        seen.insert(seq);
    }
    for (group, topic) in &expect.subscriptions {
        let got = delivered.get(group.as_str());
        for (value, send) in sent {
            let of_topic = send.topic.as_deref() == Some(topic.as_str());
            if send.acked && of_topic && !got.is_some_and(|got| got.contains(value.as_str())) {
                verdict.anomalies.push(Anomaly::NeverDelivered {
                    group: group.clone(),
                    value: value.clone(),
                    send: send.op,
                });
            }
        }
    }
}

fn check_commits(ops: &[&Op], verdict: &mut Verdict) {
    // Per (group, queue): the highest committed offset read so far and the op that read it.
    let mut highest: BTreeMap<(&str, &QueueRef), (u64, i64)> = BTreeMap::new();
    // Per (group, topic): when the latest operator move completed; a reading asked for before
    // that may show the offset from before the move or after it.
    let mut moved_until: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for op in ops {
        match &op.kind {
            Kind::Committed {
                group,
                queue,
                offset,
            } => {
                verdict.counts.commit_readings += 1;
                let moved = moved_until.get(&(group.as_str(), queue.topic.as_str()));
                if moved.is_some_and(|moved| op.invoked_ms < *moved) {
                    continue;
                }
                let entry = highest.entry((group, queue)).or_insert((op.id, *offset));
                if *offset < entry.1 {
                    verdict.anomalies.push(Anomaly::OffsetBackwards {
                        group: group.clone(),
                        queue: queue.clone(),
                        before: *entry,
                        after: (op.id, *offset),
                    });
                }
                if *offset >= entry.1 {
                    *entry = (op.id, *offset);
                }
            }
            Kind::ProgressMoved { group, topic } => {
                highest.retain(|(moved, queue), _| !(moved == group && &queue.topic == topic));
                // The broker's history records the same move again, applied within it:
                // the window runs until the last of them was answered.
                let until = moved_until.entry((group, topic)).or_insert(op.completed_ms);
                *until = until.max(op.completed_ms);
            }
            Kind::Deliver {
                group,
                value,
                queue,
                offset,
                ..
            } => {
                // Readings that completed before this delivery was made.
                if let Some((commit, committed)) = highest.get(&(group.as_str(), queue)) {
                    if *offset < *committed {
                        verdict.anomalies.push(Anomaly::RedeliveredAfterCommit {
                            group: group.clone(),
                            value: value.clone(),
                            offset: *offset,
                            commit: (*commit, *committed),
                            delivery: op.id,
                        });
                    }
                }
            }
            _ => {}
        }
    }
}

/// The values the final reads of the log found in more than one place.
fn stored_more_than_once<'a>(ops: &[&'a Op]) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut twice = BTreeSet::new();
    for op in ops {
        if let Kind::LogRead { values, .. } = &op.kind {
            for (_, value) in values {
                if !seen.insert(value.as_str()) {
                    twice.insert(value.as_str());
                }
            }
        }
    }
    twice
}

/// The longest time without an acknowledged send while a fault was in force and until the
/// cluster settled (ms), per fault: sends to the faulted broker set for a fault on a broker,
/// any send otherwise.
pub fn unavailability(ops: &[Op], faults: &[FaultRecord]) -> Vec<f64> {
    faults
        .iter()
        .map(|fault| {
            let mut acked: Vec<f64> = ops
                .iter()
                .filter(|op| op.outcome == Outcome::Ok)
                .filter(|op| match (&op.kind, &fault.set) {
                    (
                        Kind::Send {
                            queue: Some(queue), ..
                        },
                        Some(set),
                    ) => &queue.broker == set,
                    (Kind::Send { .. }, None) => true,
                    _ => false,
                })
                .map(|op| op.completed_ms)
                .collect();
            acked.sort_by(f64::total_cmp);
            let end = fault
                .settled_ms
                .or(fault.healed_ms)
                .unwrap_or(fault.started_ms);
            let mut previous = fault.started_ms;
            let mut longest: f64 = 0.0;
            for at in acked.iter().copied().filter(|at| *at > fault.started_ms) {
                longest = longest.max(at - previous);
                previous = at;
                if at > end {
                    break;
                }
            }
            if previous <= end {
                longest = longest.max(end - previous);
            }
            longest
        })
        .collect()
}

/// How long a broker set may acknowledge nothing after it lost its master: the controllers
/// notice a silent master within 3 s (at once when its process dies), elect, and the clients
/// move within 5 s of the election (docs: Failover, "What clients see").
pub const MASTER_LOSS_BOUND_MS: f64 = 10_000.0;

/// Faults that took a set's master away alone (not overlapping another fault) after which the
/// set acknowledged nothing for longer than [`MASTER_LOSS_BOUND_MS`].
pub fn check_availability(ops: &[Op], faults: &[FaultRecord]) -> Vec<Anomaly> {
    let overlapped: BTreeSet<usize> = faults
        .iter()
        .enumerate()
        .filter(|(_, fault)| fault.overlapped)
        .flat_map(|(index, _)| [index.saturating_sub(1), index])
        .collect();
    faults
        .iter()
        .zip(unavailability(ops, faults))
        .enumerate()
        .filter(|(index, (fault, window))| {
            fault.kind.loses_master()
                && !overlapped.contains(index)
                && *window > MASTER_LOSS_BOUND_MS
        })
        .map(|(_, (fault, window))| Anomaly::Unavailable {
            fault: format!("{:?} on {}", fault.kind, fault.targets.join(", ")),
            at_ms: fault.started_ms,
            ms: window,
        })
        .collect()
}

#[cfg(test)]
mod tests;
