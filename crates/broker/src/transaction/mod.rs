//! Transactional messages: half (prepared) messages waiting for their producer's decision.
//!
//! A half message is stored in [`HALF_TOPIC`] (queue 0) with its real topic and queue in
//! `REAL_TOPIC`/`REAL_QID`, where no consumer reads it. END_TRANSACTION commits it (stored
//! again in its real topic, flagged COMMIT, its PREPAREDTRANSACTIONOFFSET naming the half) or
//! rolls it back; either way an op record in [`OP_TOPIC`] (tag `d`, body the half's queue
//! offset, as RocketMQ writes it) marks the half resolved. Halves nobody resolves are checked
//! back with a producer of their group (`check`), at most `transaction_check_max` times, then
//! discarded. Every check leaves an op record too (tag `c`), so check counts survive restarts.
//!
//! [`Transactions`] holds what is still pending, rebuilt at start from the two topics
//! (`recovery`). Resolutions append one at a time ([`Transactions::exclusively`]): a commit's
//! message is appended before its op record and the next resolution starts after that, so after
//! a crash a commit without its op record can only lie after the last op record, where
//! recovery looks for it. That is what makes a commit take effect exactly once: a retried or
//! late END_TRANSACTION, or one answering a check-back after the producer's own, finds nothing
//! pending and changes nothing.

pub mod check;
pub mod recovery;
pub(crate) mod resolve;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use tidemark_protocol::message::{property, Properties};
use tidemark_remoting::now_ms;
use tidemark_store::NewMessage;

use crate::lock_rank::{self, Rank, Ranked};

/// Where half messages wait (RocketMQ's `RMQ_SYS_TRANS_HALF_TOPIC`), one queue.
pub const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// Where resolutions and checks are recorded (RocketMQ's `RMQ_SYS_TRANS_OP_HALF_TOPIC`).
pub const OP_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// Op tag of a resolved (committed, rolled back or discarded) half: RocketMQ's `d`.
pub const OP_REMOVED_TAG: &str = "d";
/// Op tag of one check-back sent (Tidemark's; RocketMQ stores the half again instead).
pub const OP_CHECKED_TAG: &str = "c";

/// A half's pending entry from its stored properties and position; `timeout_ms` applies when
/// the producer set no immunity of its own.
pub fn pending_of(
    properties: &Properties,
    commit_log_offset: i64,
    queue_offset: i64,
    stored_at_ms: i64,
    timeout_ms: u64,
) -> PendingHalf {
    let immunity_ms = properties
        .get(property::CHECK_IMMUNITY_TIME_IN_SECONDS)
        .and_then(|seconds| seconds.trim().parse::<i64>().ok())
        .filter(|seconds| *seconds > 0)
        .map(|seconds| seconds.saturating_mul(1000))
        .unwrap_or(timeout_ms as i64);
    let text = |name: &str| properties.get(name).unwrap_or_default().to_owned();
    PendingHalf {
        commit_log_offset,
        queue_offset,
        producer_group: text(property::PRODUCER_GROUP),
        real_topic: text(property::REAL_TOPIC),
        unique_key: text(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        stored_at_ms,
        check_after_ms: stored_at_ms.saturating_add(immunity_ms),
        checks: 0,
    }
}

/// The op record of a half: tag `tag`, body its half-queue offset (RocketMQ's format).
pub fn op_message(store_host: SocketAddr, tag: &str, half_queue_offset: i64) -> NewMessage {
    let mut properties = Properties::new();
    properties.insert(property::TAGS, tag);
    properties.insert(property::WAIT_STORE_MSG_OK, "false");
    NewMessage::broker_record(
        OP_TOPIC,
        store_host,
        now_ms(),
        Bytes::from(half_queue_offset.to_string()),
        properties,
    )
}

/// A half message nobody has resolved yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingHalf {
    /// Where the half is in the commit log: what END_TRANSACTION names it by.
    pub commit_log_offset: i64,
    /// Its offset in the half topic's queue (`tranStateTableOffset`).
    pub queue_offset: i64,
    pub producer_group: String,
    pub real_topic: String,
    /// The client's message id (`UNIQ_KEY`), empty when it had none.
    pub unique_key: String,
    pub stored_at_ms: i64,
    /// Not checked back before this (store time plus the producer's immunity or the broker's
    /// transaction timeout).
    pub check_after_ms: i64,
    /// Check-backs sent so far.
    pub checks: u32,
}

/// What an [`Transactions::exclusively`] step did to its half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Committed, rolled back or discarded: no longer pending.
    Resolved,
    /// Checked back once more.
    Checked,
    /// Nothing was recorded (an append failed).
    Unchanged,
}

/// What a check round found due.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DueHalves {
    /// To check back with a producer now.
    pub check: Vec<PendingHalf>,
    /// Checked `check_max` times already: to discard.
    pub discard: Vec<PendingHalf>,
}

/// The pending half messages, by commit-log offset. Owns its lock; every operation is atomic
/// and returns copies.
///
/// Invariants: a commit-log offset is pending at most once, and so is a half-queue offset
/// (both name one stored half); nothing is pending on a slave (it neither resolves nor checks).
#[derive(Debug, Default)]
pub struct Transactions {
    pending: Mutex<BTreeMap<i64, PendingHalf>>,
    /// Held while a resolution appends (the appends only, not their durability); see the
    /// module doc for why they run one at a time. Taken before `pending`'s lock, never inside.
    resolving: Mutex<()>,
    /// Rotates check-backs over a group's producers.
    check_turn: std::sync::atomic::AtomicUsize,
}

impl Transactions {
    fn lock(&self) -> Ranked<'_, BTreeMap<i64, PendingHalf>> {
        lock_rank::lock(&self.pending, Rank::TransactionPending)
    }

    /// A table holding `halves` (recovery's result).
    pub fn with_pending(halves: impl IntoIterator<Item = PendingHalf>) -> Self {
        let table = Self::default();
        for half in halves {
            table.add(half);
        }
        table
    }

    /// Takes `rebuilt`'s pending halves in place of these (a replica becoming master: what it
    /// held since its start is stale; the log it copied says what is pending now).
    pub fn replace_with(&self, rebuilt: Transactions) {
        let _resolving = lock_rank::lock(&self.resolving, Rank::TransactionResolution);
        let halves = rebuilt
            .pending
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        *self.lock() = halves;
    }

    /// Records a half message just stored.
    pub fn add(&self, half: PendingHalf) {
        let mut pending = self.lock();
        debug_assert!(
            !pending
                .values()
                .any(|other| other.queue_offset == half.queue_offset
                    && other.commit_log_offset != half.commit_log_offset),
            "two pending halves at half-queue offset {}",
            half.queue_offset
        );
        pending.insert(half.commit_log_offset, half);
    }

    /// The pending half stored at `commit_log_offset`.
    pub fn get(&self, commit_log_offset: i64) -> Option<PendingHalf> {
        self.lock().get(&commit_log_offset).cloned()
    }

    /// Forgets a resolved half; returns whether it was pending.
    pub fn remove(&self, commit_log_offset: i64) -> bool {
        self.lock().remove(&commit_log_offset).is_some()
    }

    /// Counts one more check-back of a pending half.
    pub fn count_check(&self, commit_log_offset: i64) {
        if let Some(half) = self.lock().get_mut(&commit_log_offset) {
            half.checks = half.checks.saturating_add(1);
        }
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Every pending half, oldest first.
    pub fn snapshot(&self) -> Vec<PendingHalf> {
        self.lock().values().cloned().collect()
    }

    /// The halves a check round at `now_ms` acts on: those past their immunity, split into
    /// the ones to check back and the ones already checked `check_max` times.
    ///
    /// A half stored later than `now_ms` (by more than a clock's jitter) was stamped by a wall
    /// clock that has stepped back since, or by a former master's clock ahead of this one's: its
    /// age cannot be read off the clock, and waiting for the clock to catch up would leave its
    /// producer unasked that long. Its immunity starts again now.
    pub fn due(&self, now_ms: i64, check_max: u32) -> DueHalves {
        const FUTURE_TOLERANCE_MS: i64 = 1_000;
        let mut due = DueHalves::default();
        for half in self.lock().values_mut() {
            if half.stored_at_ms > now_ms.saturating_add(FUTURE_TOLERANCE_MS) {
                let immunity = half.check_after_ms.saturating_sub(half.stored_at_ms);
                half.stored_at_ms = now_ms;
                half.check_after_ms = now_ms.saturating_add(immunity);
            }
            if half.check_after_ms > now_ms {
                continue;
            }
            if half.checks >= check_max {
                due.discard.push(half.clone());
            } else {
                due.check.push(half.clone());
            }
        }
        due
    }

    /// Runs `apply` on the pending half at `commit_log_offset` while no other resolution
    /// runs, then applies the [`Step`] it returns; `None` (and `apply` not run) when the half
    /// is not pending. `apply` does the appends, which take their log positions in this order.
    pub(crate) fn exclusively<T>(
        &self,
        commit_log_offset: i64,
        apply: impl FnOnce(&PendingHalf) -> (Step, T),
    ) -> Option<T> {
        let _one_at_a_time = lock_rank::lock(&self.resolving, Rank::TransactionResolution);
        let half = self.get(commit_log_offset)?;
        let (step, value) = apply(&half);
        match step {
            Step::Resolved => {
                self.remove(commit_log_offset);
            }
            Step::Checked => self.count_check(commit_log_offset),
            Step::Unchanged => {}
        }
        Some(value)
    }

    /// The next turn for picking among a group's producers.
    pub(crate) fn next_check_turn(&self) -> usize {
        self.check_turn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(clo: i64, queue_offset: i64, check_after_ms: i64) -> PendingHalf {
        PendingHalf {
            commit_log_offset: clo,
            queue_offset,
            producer_group: "P".into(),
            real_topic: "T".into(),
            unique_key: format!("K{queue_offset}"),
            stored_at_ms: 0,
            check_after_ms,
            checks: 0,
        }
    }

    #[test]
    fn a_half_is_checked_after_the_timeout_or_its_own_immunity() {
        let mut properties = Properties::default();
        assert_eq!(
            pending_of(&properties, 0, 0, 1_000, 300).check_after_ms,
            1_300
        );
        properties.insert(property::CHECK_IMMUNITY_TIME_IN_SECONDS, "5".to_owned());
        assert_eq!(
            pending_of(&properties, 0, 0, 1_000, 300).check_after_ms,
            6_000
        );
        properties.insert(property::CHECK_IMMUNITY_TIME_IN_SECONDS, "soon".to_owned());
        assert_eq!(
            pending_of(&properties, 0, 0, 1_000, 300).check_after_ms,
            1_300
        );
    }

    #[test]
    fn due_halves_split_by_check_count_and_wait_for_their_immunity() {
        let table =
            Transactions::with_pending([half(0, 0, 100), half(200, 1, 100), half(400, 2, 5_000)]);
        table.count_check(200);
        table.count_check(200);
        let due = table.due(1_000, 2);
        assert_eq!(
            due.check
                .iter()
                .map(|h| h.commit_log_offset)
                .collect::<Vec<_>>(),
            [0]
        );
        assert_eq!(
            due.discard
                .iter()
                .map(|h| h.commit_log_offset)
                .collect::<Vec<_>>(),
            [200]
        );
        assert!(table.remove(0));
        assert!(!table.remove(0), "a half is resolved once");
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn a_half_stamped_in_the_future_waits_its_immunity_from_now() {
        // Stored at 90 s by a clock since stepped back to 10 s; immunity 2 s.
        let mut ahead = half(0, 0, 92_000);
        ahead.stored_at_ms = 90_000;
        let table = Transactions::with_pending([ahead]);
        assert!(
            table.due(10_000, 15).check.is_empty(),
            "immune again from now"
        );
        assert!(table.due(11_000, 15).check.is_empty());
        let due = table.due(12_000, 15);
        assert_eq!(
            due.check.len(),
            1,
            "checked 2 s after it was found, not at 92 s"
        );
    }
}
