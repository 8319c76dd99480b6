//! RocketMQ 5 POP consumption's state, kept exactly: per group and queue the pop cursor and the
//! set of messages handed out and not yet finished ([`state`]), journaled record by record in
//! `config/popJournal/`, so an acknowledged message is never handed out again and an
//! unacknowledged one is never lost — through crashes as well.
//!
//! Where Tidemark differs from RocketMQ: RocketMQ keeps this as check-point and ack messages in
//! a revive topic, merged by a background service (and has lost or duplicated messages there);
//! Tidemark has no revive topic. A message whose invisibility ends is copied to the group's POP
//! retry topic (`%RETRY%{group}_{topic}`) by [`revive`], with its reconsume count raised, or to
//! the group's dead-letter topic once the count passes the group's retry maximum (RocketMQ's
//! broker leaves that to the client).
//!
//! Lock order: this table's lock, then the journal's queue lock (inside `Journal::append`).
//! Nothing else is taken inside.

mod replica;
pub mod revive;
pub mod state;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use tidemark_storage::io::Storage;
use tidemark_storage::journal::{
    Journal, JournalCodec, JournalError, JournalOptions, RecoveryReport,
};
use tokio::sync::Notify;
use tracing::warn;

pub use state::{InFlight, PopQueue, Popped, QueueKey, ANY_RECEIPT};
use state::{PopCodec, PopState};

use crate::lock_rank::{self, Rank, Ranked};
use crate::offsets::Journaled;
use crate::progress_record::{ProgressOutbox, STREAM_POP};

/// The leading byte of [`PopTable::replica`]'s body: the form of what follows.
const REPLICA_FORMAT: u8 = 1;

/// Why a master's POP state could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error("POP state in an unknown form ({0}); is the master a newer Tidemark?")]
    Format(u8),
    #[error("POP state unreadable: {0}")]
    Unreadable(String),
    #[error(transparent)]
    Journal(JournalError),
}

/// What the table says about a queue before a pop reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopPlan {
    /// The cursor; `None` for a queue the group never popped (the caller picks the start).
    pub next: Option<i64>,
    pub in_flight: usize,
    /// Orderly: a handed-out message is still invisible.
    pub blocked: bool,
    /// Orderly: handed-out messages whose invisibility ended, in order — handed out again
    /// before anything new.
    pub redeliver: Vec<i64>,
    /// Orderly: the pop retries the attempt that took the queue (its answer was lost): the
    /// same batch again, and nothing new.
    pub same_attempt: bool,
}

/// How an acknowledgement went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The message was in flight under this receipt: it is finished.
    Finished(InFlight),
    /// An orderly offset handed out again since this receipt: nothing done.
    StaleReceipt,
    /// Not in flight: already finished, or visible again and taken by the revive service.
    NotInFlight,
}

/// One queue's POP progress as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePopView {
    pub topic: String,
    pub queue_id: i32,
    pub next: i64,
    pub floor: i64,
    pub in_flight: usize,
    /// The earliest time a handed-out message becomes visible again.
    pub oldest_visible_at: Option<i64>,
    /// Finished offsets between the floor and the cursor (acknowledged out of order).
    pub acked_holes: i64,
}

/// The broker's POP progress: behind its own lock, journaled.
#[derive(Debug)]
pub struct PopTable {
    inner: Mutex<Inner>,
    journal: Journal,
    /// Wakes the revive service when an earlier visibility deadline appears.
    wake: Notify,
    /// Where every journaled change is also queued for the replicas (`progress_stream`).
    outbox: Option<Arc<ProgressOutbox>>,
}

#[derive(Debug, Default)]
struct Inner {
    state: PopState,
    /// (visible at, queue, offset) of every in-flight message not being revived.
    deadlines: BTreeSet<(i64, QueueKey, i64)>,
    /// A replica applied its master's changes without keeping `deadlines` up to date (nothing
    /// revives there); indexed again before it acts as master.
    deadlines_stale: bool,
    /// Queues a pop is reading right now: one pop per queue at a time.
    busy: HashSet<QueueKey>,
    /// Orderly: the attempt id of the pop that took each queue (kept in memory: after a restart
    /// a retried attempt waits for the invisibility like any other pop).
    attempts: HashMap<QueueKey, String>,
    /// In-flight messages the revive service is copying.
    reviving: HashSet<(QueueKey, i64)>,
}

impl Inner {
    /// Whether a deadline at `at` would come before every one the revive service knows of.
    /// Only then is it woken: it already sleeps until the first deadline and looks again after,
    /// and waking it for every pop cost a blocking pass per pop.
    fn sooner_than_every_deadline(&self, at: i64) -> bool {
        self.deadlines
            .first()
            .is_none_or(|(first, _, _)| at < *first)
    }

    fn index(&mut self) {
        self.deadlines.clear();
        for (key, queue) in &self.state.queues {
            for (offset, entry) in &queue.in_flight {
                self.deadlines
                    .insert((entry.visible_at, key.clone(), *offset));
            }
        }
    }
}

/// A pop's exclusive hold on one queue; released when dropped.
#[derive(Debug)]
pub struct Claim<'a> {
    table: &'a PopTable,
    key: QueueKey,
}

impl Claim<'_> {
    pub fn key(&self) -> &QueueKey {
        &self.key
    }

    /// The queue's cursor and in-flight messages as they are now, for a pop with `attempt` (an
    /// orderly pop's attempt id).
    pub fn plan(&self, now: i64, attempt: Option<&str>) -> PopPlan {
        let inner = self.table.lock();
        let Some(queue) = inner.state.queues.get(&self.key) else {
            return PopPlan {
                next: None,
                in_flight: 0,
                blocked: false,
                redeliver: Vec::new(),
                same_attempt: false,
            };
        };
        let blocked = queue.orderly_blocked(now);
        let same_attempt = blocked
            && attempt.is_some_and(|attempt| {
                inner.attempts.get(&self.key).map(String::as_str) == Some(attempt)
            });
        PopPlan {
            next: Some(queue.next),
            in_flight: queue.in_flight.len(),
            blocked: blocked && !same_attempt,
            redeliver: queue
                .in_flight
                .iter()
                .filter(|(_, entry)| entry.orderly && (same_attempt || entry.visible_at <= now))
                .map(|(offset, _)| *offset)
                .collect(),
            same_attempt,
        }
    }

    /// Orderly: remembers which attempt took the queue.
    pub fn note_attempt(&self, attempt: &str) {
        self.table
            .lock()
            .attempts
            .insert(self.key.clone(), attempt.to_owned());
    }

    /// Records what this pop handed out (and where the cursor is now).
    pub fn record(&self, popped: &Popped) -> Journaled {
        let mut inner = self.table.lock();
        let sooner = inner.sooner_than_every_deadline(popped.visible_at);
        // An orderly redelivery replaces the entry's old deadline.
        let replaced: Vec<(i64, i64)> = match inner.state.queues.get(&self.key) {
            Some(queue) => popped
                .offsets
                .iter()
                .filter_map(|offset| queue.in_flight.get(offset).map(|e| (e.visible_at, *offset)))
                .collect(),
            None => Vec::new(),
        };
        for (visible_at, offset) in replaced {
            inner
                .deadlines
                .remove(&(visible_at, self.key.clone(), offset));
        }
        inner.state.apply_popped(&self.key, popped);
        for offset in &popped.offsets {
            inner
                .deadlines
                .insert((popped.visible_at, self.key.clone(), *offset));
        }
        let journaled = self.table.journal(&state::popped_record(&self.key, popped));
        drop(inner);
        if sooner && !popped.offsets.is_empty() {
            self.table.wake.notify_one();
        }
        journaled
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.table.lock().busy.remove(&self.key);
    }
}

impl PopTable {
    /// Recovers POP progress from the journal in `dir`. Blocking.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        options: JournalOptions,
    ) -> Result<(Self, RecoveryReport), JournalError> {
        let (journal, state, report) = Journal::open(storage, dir, "pop", options, &PopCodec)?;
        let mut inner = Inner {
            state,
            ..Inner::default()
        };
        inner.index();
        Ok((
            Self {
                inner: Mutex::new(inner),
                journal,
                wake: Notify::new(),
                outbox: None,
            },
            report,
        ))
    }

    fn lock(&self) -> Ranked<'_, Inner> {
        lock_rank::lock(&self.inner, Rank::Table)
    }

    /// Every change journaled from now on is also queued in `outbox` for the replicas.
    pub fn publish_to(&mut self, outbox: Arc<ProgressOutbox>) {
        self.outbox = Some(outbox);
    }

    /// Journals a record and queues it for the replicas (under the table's lock, so both orders
    /// are the table's).
    fn journal(&self, record: &[u8]) -> Journaled {
        if let Some(outbox) = &self.outbox {
            outbox.push(STREAM_POP, record.to_vec());
        }
        self.journal_here(record)
    }

    /// Journals a record that is this broker's alone (what it applied of its master's stream).
    fn journal_here(&self, record: &[u8]) -> Journaled {
        match self.journal.append(record) {
            Ok(ticket) => Journaled::Pending(ticket),
            Err(failure) => {
                warn!(%failure, "POP progress change not journaled");
                Journaled::Failed(failure)
            }
        }
    }

    /// Resolves once `journaled` is durable.
    pub async fn durable(&self, journaled: Journaled) -> Result<(), JournalError> {
        match journaled {
            Journaled::Pending(ticket) => self.journal.durable(ticket).await,
            Journaled::Failed(failure) => Err(failure),
            Journaled::Nothing => Ok(()),
        }
    }

    /// Blocking form of [`durable`](Self::durable), for the revive service's thread.
    pub fn wait_durable(&self, journaled: Journaled) -> Result<(), JournalError> {
        match journaled {
            Journaled::Pending(ticket) => self.journal.wait_durable(ticket),
            Journaled::Failed(failure) => Err(failure),
            Journaled::Nothing => Ok(()),
        }
    }

    /// Takes the queue for one pop; `None` while another pop reads it (RocketMQ skips a
    /// queue whose lock is taken, too).
    pub fn claim(&self, key: QueueKey) -> Option<Claim<'_>> {
        let mut inner = self.lock();
        if !inner.busy.insert(key.clone()) {
            return None;
        }
        Some(Claim { table: self, key })
    }

    /// An acknowledgement with the receipt popped or changed at `pop_time`.
    ///
    /// A message handed out unordered stays at its offset for one delivery, whose receipts
    /// differ only by changes of its invisibility: any of them finishes it. The client may hold
    /// an earlier one because the answer to a change was lost (recorded here, not confirmed in
    /// time), and it is done with the message all the same; RocketMQ takes such an
    /// acknowledgement and hands the message out again. An orderly offset is handed out again
    /// in place, perhaps to another consumer: there an earlier receipt finishes nothing.
    pub fn finish(&self, key: &QueueKey, offset: i64, pop_time: i64) -> (Finish, Journaled) {
        let mut inner = self.lock();
        let current = inner
            .state
            .queues
            .get(key)
            .and_then(|queue| queue.in_flight.get(&offset).copied());
        let outcome = match current {
            None => Finish::NotInFlight,
            Some(entry) if entry.orderly && entry.pop_time != pop_time => Finish::StaleReceipt,
            Some(entry) => {
                inner.state.apply_finished(key, offset, entry.pop_time);
                inner
                    .deadlines
                    .remove(&(entry.visible_at, key.clone(), offset));
                inner.reviving.remove(&(key.clone(), offset));
                Finish::Finished(entry)
            }
        };
        let journaled = match outcome {
            // The current receipt's pop time, which a replay and the replicas match.
            Finish::Finished(entry) => {
                self.journal(&state::finished_record(key, offset, entry.pop_time))
            }
            // The answer confirms nothing new, but it must not overtake the record that made
            // the message not in flight.
            _ => Journaled::Pending(self.journal.last_ticket()),
        };
        (outcome, journaled)
    }

    /// Moves an in-flight message's visibility: it becomes visible at `visible_at` and its
    /// current receipt is the one with `new_pop_time`. `None` if `old_pop_time` is not its
    /// current receipt, or the revive service already took it.
    pub fn change_invisibility(
        &self,
        key: &QueueKey,
        offset: i64,
        old_pop_time: i64,
        new_pop_time: i64,
        visible_at: i64,
    ) -> (Option<InFlight>, Journaled) {
        let mut inner = self.lock();
        if inner.reviving.contains(&(key.clone(), offset)) {
            return (None, Journaled::Pending(self.journal.last_ticket()));
        }
        let before = inner
            .state
            .queues
            .get(key)
            .and_then(|queue| queue.in_flight.get(&offset).copied());
        let sooner = inner.sooner_than_every_deadline(visible_at);
        let changed =
            inner
                .state
                .apply_changed(key, offset, old_pop_time, new_pop_time, visible_at);
        let journaled = match (before, changed) {
            (Some(before), Some(_)) => {
                inner
                    .deadlines
                    .remove(&(before.visible_at, key.clone(), offset));
                inner.deadlines.insert((visible_at, key.clone(), offset));
                self.journal(&state::changed_record(
                    key,
                    offset,
                    old_pop_time,
                    new_pop_time,
                    visible_at,
                ))
            }
            _ => Journaled::Pending(self.journal.last_ticket()),
        };
        drop(inner);
        if sooner && changed.is_some() {
            self.wake.notify_one();
        }
        (changed, journaled)
    }

    /// Moves a group's cursor on one queue (an operator's reset): nothing is in flight after.
    pub fn reset(&self, key: &QueueKey, offset: i64) -> Journaled {
        let mut inner = self.lock();
        if !inner.state.queues.contains_key(key) {
            return Journaled::Nothing;
        }
        inner.state.apply_reset(key, offset);
        inner.deadlines.retain(|(_, held, _)| held != key);
        inner.reviving.retain(|(held, _)| held != key);
        inner.attempts.remove(key);
        self.journal(&state::reset_record(key, offset))
    }

    /// Queues that were destroyed begin again at offset 0: every group's cursor on those
    /// `destroyed` names goes back there, with nothing in flight. Returns the journal ticket
    /// covering all of it (or the first failure).
    pub fn restart(&self, destroyed: impl Fn(&str, i32) -> bool) -> Journaled {
        let keys: Vec<QueueKey> = self
            .lock()
            .state
            .queues
            .keys()
            .filter(|key| destroyed(&key.topic, key.queue_id))
            .cloned()
            .collect();
        let mut covering = Journaled::Nothing;
        for key in keys {
            match self.reset(&key, 0) {
                failed @ Journaled::Failed(_) => return failed,
                Journaled::Nothing => {}
                pending => covering = pending,
            }
        }
        covering
    }

    /// The earliest visibility deadline.
    pub fn next_deadline(&self) -> Option<i64> {
        self.lock().deadlines.first().map(|(at, _, _)| *at)
    }

    /// Takes every message whose invisibility ended by `now`: non-orderly ones are marked as
    /// being revived (and returned to be copied); orderly ones stay in flight to be handed out
    /// again in place — their queues are returned so waiting pops can be woken.
    pub fn take_expired(
        &self,
        now: i64,
        limit: usize,
    ) -> (Vec<(QueueKey, i64, InFlight)>, Vec<QueueKey>) {
        let mut inner = self.lock();
        let mut revive = Vec::new();
        let mut unblocked = Vec::new();
        while revive.len() < limit {
            let Some((at, key, offset)) = inner.deadlines.first().cloned() else {
                break;
            };
            if at > now {
                break;
            }
            inner.deadlines.pop_first();
            let entry = inner
                .state
                .queues
                .get(&key)
                .and_then(|queue| queue.in_flight.get(&offset).copied());
            match entry {
                Some(entry) if entry.orderly => unblocked.push(key),
                Some(entry) => {
                    inner.reviving.insert((key.clone(), offset));
                    revive.push((key, offset, entry));
                }
                None => {}
            }
        }
        (revive, unblocked)
    }

    /// The revive service placed a copy of an expired message (ending `destination`'s queue at
    /// `destination_end`): it is finished here, whatever receipt it had.
    pub fn revived(
        &self,
        key: &QueueKey,
        offset: i64,
        destination: &str,
        destination_end: i64,
    ) -> Journaled {
        let mut inner = self.lock();
        inner.reviving.remove(&(key.clone(), offset));
        if let Some(entry) = inner.state.apply_finished(key, offset, ANY_RECEIPT) {
            inner
                .deadlines
                .remove(&(entry.visible_at, key.clone(), offset));
        }
        inner.state.apply_copied(destination, destination_end);
        let _ = self.journal(&state::finished_record(key, offset, ANY_RECEIPT));
        self.journal(&state::copied_record(destination, destination_end))
    }

    /// The message expired after retention dropped it: finished with nothing to copy.
    pub fn finish_gone(&self, key: &QueueKey, offset: i64) -> Journaled {
        let mut inner = self.lock();
        inner.reviving.remove(&(key.clone(), offset));
        if let Some(entry) = inner.state.apply_finished(key, offset, ANY_RECEIPT) {
            inner
                .deadlines
                .remove(&(entry.visible_at, key.clone(), offset));
        }
        self.journal(&state::finished_record(key, offset, ANY_RECEIPT))
    }

    /// The revive service could not copy the message: it stays in flight and is tried again
    /// at `retry_at`.
    pub fn revive_failed(&self, key: &QueueKey, offset: i64, retry_at: i64) {
        let mut inner = self.lock();
        if inner.reviving.remove(&(key.clone(), offset))
            && inner
                .state
                .queues
                .get(key)
                .is_some_and(|queue| queue.in_flight.contains_key(&offset))
        {
            inner.deadlines.insert((retry_at, key.clone(), offset));
        }
    }

    /// Where copies to `destination` ended at the last journaled one.
    pub fn copies_end(&self, destination: &str) -> Option<i64> {
        self.lock().state.copies_end.get(destination).copied()
    }

    /// Whether the message is in flight (so a copy found after a crash belongs to it).
    pub fn is_in_flight(&self, key: &QueueKey, offset: i64) -> bool {
        self.lock()
            .state
            .queues
            .get(key)
            .is_some_and(|queue| queue.in_flight.contains_key(&offset))
    }

    /// Groups with messages in flight, and their topics.
    pub fn groups_in_flight(&self) -> Vec<(String, String)> {
        let inner = self.lock();
        let mut out: Vec<(String, String)> = inner
            .state
            .queues
            .iter()
            .filter(|(_, queue)| !queue.in_flight.is_empty())
            .map(|(key, _)| (key.group.clone(), key.topic.clone()))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// One group's POP progress per queue (of `topic`, or of every topic).
    pub fn views(&self, group: &str, topic: Option<&str>) -> Vec<QueuePopView> {
        let inner = self.lock();
        let mut out: Vec<QueuePopView> = inner
            .state
            .queues
            .iter()
            .filter(|(key, _)| key.group == group && topic.is_none_or(|topic| key.topic == topic))
            .map(|(key, queue)| {
                let floor = queue.floor();
                QueuePopView {
                    topic: key.topic.clone(),
                    queue_id: key.queue_id,
                    next: queue.next,
                    floor,
                    in_flight: queue.in_flight.len(),
                    oldest_visible_at: queue.in_flight.values().map(|entry| entry.visible_at).min(),
                    acked_holes: (queue.next - floor) - queue.in_flight.len() as i64,
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.topic, a.queue_id).cmp(&(&b.topic, b.queue_id)));
        out
    }

    /// The queue's floor and cursor, if the group ever popped it.
    pub fn cursor(&self, key: &QueueKey) -> Option<(i64, i64)> {
        self.lock()
            .state
            .queues
            .get(key)
            .map(|queue| (queue.floor(), queue.next))
    }

    /// How many times the message was handed out (0 if it is not in flight).
    pub fn deliveries(&self, key: &QueueKey, offset: i64) -> u32 {
        self.lock()
            .state
            .queues
            .get(key)
            .and_then(|queue| queue.in_flight.get(&offset))
            .map_or(0, |entry| entry.deliveries)
    }

    /// Orderly: (blocked — a handed-out message is still invisible; something handed out is
    /// visible again and waits to be handed out).
    pub fn orderly_state(&self, key: &QueueKey, now: i64) -> (bool, bool) {
        let inner = self.lock();
        let Some(queue) = inner.state.queues.get(key) else {
            return (false, false);
        };
        (
            queue.orderly_blocked(now),
            queue
                .in_flight
                .values()
                .any(|entry| entry.orderly && entry.visible_at <= now),
        )
    }

    pub(crate) fn wake(&self) -> &Notify {
        &self.wake
    }

    /// Compacts the journal when due. Blocking.
    pub fn compact_if_due(&self) -> Result<bool, JournalError> {
        if !self.journal.compaction_due() {
            return Ok(false);
        }
        self.journal.compact(|cut| {
            let inner = self.lock();
            cut.cut();
            PopCodec.snapshot(&inner.state)
        })?;
        Ok(true)
    }

    /// Makes everything journaled so far durable and stops the journal. Blocking.
    pub fn close(&self) {
        self.journal.close();
    }
}

/// Mirrors a queue's POP floor into the consumer offset table, so consume stats, lag and a
/// later switch to PULL see what POP finished. Forward only; the POP journal stays the truth.
pub(crate) fn commit_floor(
    pop: &PopTable,
    offsets: &crate::offsets::ConsumerOffsets,
    log: &crate::message_log::MessageLog<'_>,
    key: &QueueKey,
) {
    if let Some((floor, _)) = pop.cursor(key) {
        let _ = offsets.commit(
            &key.topic,
            &key.group,
            key.queue_id,
            floor,
            log.written_max_offset(&key.topic, key.queue_id),
            tidemark_remoting::now_ms(),
            crate::offsets::Committer::Progress,
            None,
        );
    }
}

#[cfg(test)]
mod tests;
