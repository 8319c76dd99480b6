//! [`ProcessQueue`]: the messages of one queue that were pulled but are not consumed yet.
//!
//! It decides the commit point. The offset a consumer may commit for a queue is the smallest
//! offset still in flight, or one past the largest offset ever taken in when nothing is in flight:
//! committing further would skip a message that was never consumed.
//!
//! Invariants (checked by [`ProcessQueue::check_invariants`] in debug builds after every change):
//! - every message is held once, keyed by its queue offset, either waiting (`waiting`) or taken by
//!   an orderly consumer (`consuming`), never both;
//! - `cached_bytes` is the sum of the body sizes of all held messages;
//! - `highest_offset` is at least every offset ever put (−1 before the first put).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tidemark_protocol::acked::{AckedRanges, ACKED_RANGES_MAX};
use tidemark_protocol::body::ProcessQueueInfo;

use crate::message::MessageExt;

/// How long an idle queue (no pull) is considered alive (`PULL_MAX_IDLE_TIME`).
pub const PULL_MAX_IDLE: Duration = Duration::from_secs(120);
/// How long a broker lock is trusted without being renewed (`REBALANCE_LOCK_MAX_LIVE_TIME`).
pub const LOCK_MAX_LIVE: Duration = Duration::from_secs(30);

/// The pull-side limits of one queue (Java `pullThresholdForQueue`, `pullThresholdSizeForQueue`,
/// `consumeConcurrentlyMaxSpan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLimits {
    pub max_messages: usize,
    pub max_bytes: u64,
    /// Largest allowed distance between the lowest and highest waiting offset (concurrent only).
    pub max_span: i64,
}

impl Default for FlowLimits {
    fn default() -> Self {
        Self {
            max_messages: 1000,
            max_bytes: 100 * 1024 * 1024,
            max_span: 2000,
        }
    }
}

/// Why the next pull of a queue has to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowControl {
    TooManyMessages(usize),
    TooManyBytes(u64),
    SpanTooWide(i64),
}

/// In-flight messages of one assigned queue (RocketMQ's `ProcessQueue`).
///
/// Messages are held as `Arc`s: the consumer shares them with the task consuming them instead
/// of copying each one.
#[derive(Debug)]
pub struct ProcessQueue {
    waiting: BTreeMap<i64, Arc<MessageExt>>,
    /// Orderly consumption: taken but not yet committed.
    consuming: BTreeMap<i64, Arc<MessageExt>>,
    cached_bytes: u64,
    highest_offset: i64,
    dropped: bool,
    /// Orderly: whether a consume task is (or is about to be) working on this queue.
    orderly_busy: bool,
    locked: bool,
    last_lock: Option<Instant>,
    last_pull: Instant,
    last_consume: Instant,
    /// Offsets an earlier owner already consumed (the broker's acknowledged ranges when the
    /// queue was assigned): dropped when pulled, as if consumed at once.
    acknowledged: AckedRanges,
}

impl ProcessQueue {
    pub fn new(now: Instant) -> Self {
        Self {
            waiting: BTreeMap::new(),
            consuming: BTreeMap::new(),
            cached_bytes: 0,
            highest_offset: -1,
            dropped: false,
            orderly_busy: false,
            locked: false,
            last_lock: None,
            last_pull: now,
            last_consume: now,
            acknowledged: AckedRanges::new(),
        }
    }

    /// Offsets already consumed by an earlier owner of the queue; see
    /// [`drop_acknowledged`](Self::drop_acknowledged).
    pub fn set_acknowledged(&mut self, acked: AckedRanges) {
        self.acknowledged = acked;
    }

    /// Removes from `messages` those an earlier owner already consumed: they count as taken in
    /// (they raise the highest offset, so the commit point passes them) but are never held or
    /// delivered. Returns the others and how many were removed.
    pub fn drop_acknowledged(
        &mut self,
        messages: Vec<Arc<MessageExt>>,
    ) -> (Vec<Arc<MessageExt>>, usize) {
        if self.acknowledged.is_empty() {
            return (messages, 0);
        }
        let before = messages.len();
        let mut kept = Vec::with_capacity(before);
        for message in messages {
            if self.acknowledged.contains(message.queue_offset) {
                self.highest_offset = self.highest_offset.max(message.queue_offset);
            } else {
                kept.push(message);
            }
        }
        let dropped = before - kept.len();
        self.check_invariants();
        (kept, dropped)
    }

    /// The offset that may be committed now: the smallest held, else one past the highest taken
    /// in; −1 before anything was.
    pub fn commit_point(&self) -> i64 {
        match self.lowest_held() {
            Some(lowest) => lowest,
            None if self.highest_offset >= 0 => self.highest_offset + 1,
            None => -1,
        }
    }

    /// What is done above `commit`: every offset up to the highest taken in that is not held
    /// (consumed, sent back, filtered out, or consumed by an earlier owner), and what an earlier
    /// owner acknowledged beyond that. At most [`ACKED_RANGES_MAX`] ranges, the lowest.
    pub fn acked_above(&self, commit: i64) -> AckedRanges {
        let mut ranges = Vec::new();
        let mut previous = commit;
        let mut held = self.waiting.range(commit + 1..).map(|(offset, _)| *offset);
        let mut held_consuming = self
            .consuming
            .range(commit + 1..)
            .map(|(offset, _)| *offset);
        let (mut next_waiting, mut next_consuming) = (held.next(), held_consuming.next());
        while ranges.len() < ACKED_RANGES_MAX {
            let next = match (next_waiting, next_consuming) {
                (Some(a), Some(b)) if a <= b => {
                    next_waiting = held.next();
                    a
                }
                (_, Some(b)) => {
                    next_consuming = held_consuming.next();
                    b
                }
                (Some(a), None) => {
                    next_waiting = held.next();
                    a
                }
                (None, None) => break,
            };
            if next > previous + 1 {
                ranges.push((previous + 1, next));
            }
            previous = next;
        }
        if ranges.len() < ACKED_RANGES_MAX && self.highest_offset > previous {
            ranges.push((previous + 1, self.highest_offset + 1));
        }
        AckedRanges::from_ranges(ranges).union(&self.acknowledged.above(commit))
    }

    /// Takes in pulled messages. Offsets already held are ignored (a re-pull after an error).
    /// Returns whether an orderly consume task must be started for this queue (none is busy
    /// and there is something to consume); concurrent consumers ignore it.
    pub fn put<M: Into<Arc<MessageExt>>>(&mut self, messages: impl IntoIterator<Item = M>) -> bool {
        for message in messages {
            let message = message.into();
            let offset = message.queue_offset;
            if self.waiting.contains_key(&offset) || self.consuming.contains_key(&offset) {
                continue;
            }
            self.cached_bytes += message.size_bytes();
            self.highest_offset = self.highest_offset.max(offset);
            self.waiting.insert(offset, message);
        }
        let start_orderly = !self.waiting.is_empty() && !self.orderly_busy;
        if start_orderly {
            self.orderly_busy = true;
        }
        self.check_invariants();
        start_orderly
    }

    /// Removes consumed (or sent-back) messages and returns the offset that may now be
    /// committed: the smallest offset still in flight, or one past the highest offset taken in
    /// when nothing is left. Returns −1 when the queue held nothing to begin with (a batch
    /// that was already removed, e.g. after a reset), so the caller commits nothing.
    pub fn remove(&mut self, offsets: impl IntoIterator<Item = i64>) -> i64 {
        if self.is_empty() {
            return -1;
        }
        for offset in offsets {
            if let Some(message) = self.waiting.remove(&offset) {
                self.cached_bytes -= message.size_bytes();
            }
        }
        let commit = self.lowest_held().unwrap_or(self.highest_offset + 1);
        self.check_invariants();
        commit
    }

    fn lowest_held(&self) -> Option<i64> {
        let waiting = self.waiting.keys().next().copied();
        let consuming = self.consuming.keys().next().copied();
        match (waiting, consuming) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Messages held (waiting and being consumed).
    pub fn message_count(&self) -> usize {
        self.waiting.len() + self.consuming.len()
    }

    pub fn cached_bytes(&self) -> u64 {
        self.cached_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.consuming.is_empty()
    }

    /// Distance between the lowest and the highest waiting offset (0 when fewer than two).
    pub fn max_span(&self) -> i64 {
        match (self.waiting.keys().next(), self.waiting.keys().next_back()) {
            (Some(first), Some(last)) => last - first,
            _ => 0,
        }
    }

    /// Whether the next pull must wait; `check_span` is set for concurrent consumption.
    pub fn flow_control(&self, limits: &FlowLimits, check_span: bool) -> Option<FlowControl> {
        let count = self.message_count();
        if count > limits.max_messages {
            return Some(FlowControl::TooManyMessages(count));
        }
        if self.cached_bytes > limits.max_bytes {
            return Some(FlowControl::TooManyBytes(self.cached_bytes));
        }
        let span = self.max_span();
        if check_span && span > limits.max_span {
            return Some(FlowControl::SpanTooWide(span));
        }
        None
    }

    /// The highest offset ever taken in (−1 before the first message).
    pub fn highest_offset(&self) -> i64 {
        self.highest_offset
    }

    /// Marks the queue as given up: nothing more is pulled, consumed results are not committed.
    pub fn drop_queue(&mut self) {
        self.dropped = true;
    }

    pub fn is_dropped(&self) -> bool {
        self.dropped
    }

    /// Forgets every held message (offset reset); the commit point restarts from the next put.
    pub fn clear(&mut self) {
        self.acknowledged = AckedRanges::new();
        self.waiting.clear();
        self.consuming.clear();
        self.cached_bytes = 0;
        self.highest_offset = -1;
        self.check_invariants();
    }

    pub fn record_pull(&mut self, now: Instant) {
        self.last_pull = now;
    }

    pub fn record_consume(&mut self, now: Instant) {
        self.last_consume = now;
    }

    /// Whether the queue has not been pulled for [`PULL_MAX_IDLE`] (its pull loop is stuck).
    pub fn is_pull_expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_pull) > PULL_MAX_IDLE
    }

    // --- orderly consumption -------------------------------------------------------------

    /// Takes up to `count` waiting messages, lowest offsets first, for an orderly consume task.
    /// When nothing is waiting the queue is marked idle so the next put starts a new task.
    pub fn take(&mut self, count: usize) -> Vec<Arc<MessageExt>> {
        let mut taken = Vec::with_capacity(count.min(self.waiting.len()));
        while taken.len() < count {
            let Some((offset, message)) = self.waiting.pop_first() else {
                break;
            };
            self.consuming.insert(offset, message.clone());
            taken.push(message);
        }
        if taken.is_empty() {
            self.orderly_busy = false;
        }
        self.check_invariants();
        taken
    }

    /// Orderly success: the taken messages are consumed. Returns the offset to commit (one past
    /// the highest taken), or −1 when nothing was taken.
    pub fn commit(&mut self) -> i64 {
        let Some(highest) = self.consuming.keys().next_back().copied() else {
            return -1;
        };
        for message in std::mem::take(&mut self.consuming).into_values() {
            self.cached_bytes -= message.size_bytes();
        }
        self.check_invariants();
        highest + 1
    }

    /// Orderly failure: puts `messages` back to be taken again, in order, ahead of the rest.
    pub fn requeue<M: Into<Arc<MessageExt>>>(&mut self, messages: impl IntoIterator<Item = M>) {
        for message in messages {
            let message = message.into();
            // The caller's copy replaces the held one: it carries the new reconsume count.
            if self.consuming.remove(&message.queue_offset).is_some() {
                self.waiting.insert(message.queue_offset, message);
            }
        }
        self.check_invariants();
    }

    /// Orderly: lets the next put (or the caller) start a consume task again.
    pub fn mark_orderly_idle(&mut self) {
        self.orderly_busy = false;
    }

    pub fn set_locked(&mut self, locked: bool, now: Instant) {
        self.locked = locked;
        if locked {
            self.last_lock = Some(now);
        }
    }

    pub fn is_locked(&self) -> bool {
        self.locked
    }

    /// The queue as a consumer reports it to an operator (ProcessQueueInfo; mqadmin
    /// `consumerStatus`): `now` and `now_ms` are the same moment, to turn instants into epoch
    /// milliseconds.
    pub fn running_info(&self, commit_offset: i64, now: Instant, now_ms: i64) -> ProcessQueueInfo {
        let epoch = |at: Instant| {
            let ago = now.saturating_duration_since(at).as_millis();
            now_ms.saturating_sub(i64::try_from(ago).unwrap_or(i64::MAX))
        };
        let bounds = |map: &BTreeMap<i64, Arc<MessageExt>>| {
            (
                map.keys().next().copied().unwrap_or(0),
                map.keys().next_back().copied().unwrap_or(0),
            )
        };
        let (cached_min, cached_max) = bounds(&self.waiting);
        let (taken_min, taken_max) = bounds(&self.consuming);
        ProcessQueueInfo {
            commit_offset,
            cached_msg_min_offset: cached_min,
            cached_msg_max_offset: cached_max,
            cached_msg_count: i32::try_from(self.waiting.len()).unwrap_or(i32::MAX),
            cached_msg_size_in_mib: i32::try_from(self.cached_bytes / (1024 * 1024))
                .unwrap_or(i32::MAX),
            transaction_msg_min_offset: taken_min,
            transaction_msg_max_offset: taken_max,
            transaction_msg_count: i32::try_from(self.consuming.len()).unwrap_or(i32::MAX),
            locked: self.locked,
            try_unlock_times: 0,
            last_lock_timestamp: self.last_lock.map_or(0, epoch),
            dropped: self.dropped,
            last_pull_timestamp: epoch(self.last_pull),
            last_consume_timestamp: epoch(self.last_consume),
        }
    }

    /// Whether the broker lock has not been renewed for [`LOCK_MAX_LIVE`].
    pub fn is_lock_expired(&self, now: Instant) -> bool {
        match self.last_lock {
            Some(at) => now.saturating_duration_since(at) > LOCK_MAX_LIVE,
            None => true,
        }
    }

    fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            let bytes: u64 = self
                .waiting
                .values()
                .chain(self.consuming.values())
                .map(|message| message.size_bytes())
                .sum();
            debug_assert_eq!(bytes, self.cached_bytes, "cached bytes drifted");
            debug_assert!(
                self.waiting
                    .keys()
                    .all(|offset| !self.consuming.contains_key(offset)),
                "a message is both waiting and being consumed"
            );
            let highest = self
                .waiting
                .keys()
                .chain(self.consuming.keys())
                .copied()
                .max()
                .unwrap_or(-1);
            debug_assert!(
                highest <= self.highest_offset,
                "highest offset went backwards"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tidemark_protocol::body::MessageQueue;
    use tidemark_protocol::message::MessageRecord;

    pub(crate) fn message(offset: i64, size: usize) -> MessageExt {
        let record = MessageRecord {
            topic: "T".into(),
            queue_offset: offset,
            body: vec![b'x'; size].into(),
            ..MessageRecord::default()
        };
        MessageExt::from_record(record, &MessageQueue::new("T", "b", 0)).expect("valid record")
    }

    fn queue_with(offsets: &[i64]) -> ProcessQueue {
        let mut queue = ProcessQueue::new(Instant::now());
        queue.put(offsets.iter().map(|&offset| message(offset, 10)));
        queue
    }

    #[test]
    fn commit_point_is_the_lowest_offset_still_in_flight() {
        let mut queue = queue_with(&[5, 6, 7, 8]);
        assert_eq!(queue.remove([6, 8]), 5, "5 is still in flight");
        assert_eq!(queue.remove([5]), 7);
        assert_eq!(queue.remove([7]), 9, "empty: one past the highest taken in");
        assert_eq!(queue.remove([7]), -1, "already empty: nothing to commit");
    }

    #[test]
    fn what_is_done_above_the_commit_point_becomes_acknowledged_ranges() {
        let mut queue = queue_with(&[5, 6, 7, 8, 9, 10, 12]);
        // 11 never arrived (filtered out): done as far as the group is concerned.
        let commit = queue.remove([6, 7, 9]);
        assert_eq!(commit, 5);
        assert_eq!(
            queue.acked_above(commit),
            AckedRanges::from_ranges([(6, 8), (9, 10), (11, 12)])
        );
        let commit = queue.remove([5, 8, 10, 12]);
        assert_eq!(commit, 13);
        assert!(queue.acked_above(commit).is_empty());
    }

    #[test]
    fn what_an_earlier_owner_acknowledged_is_skipped_and_passed_by_the_commit_point() {
        let mut queue = ProcessQueue::new(Instant::now());
        queue.set_acknowledged(AckedRanges::from_ranges([(3, 5), (8, 20)]));
        let pulled: Vec<Arc<MessageExt>> = (2..10)
            .map(|offset| Arc::new(message(offset, 10)))
            .collect();
        let (kept, skipped) = queue.drop_acknowledged(pulled);
        assert_eq!(skipped, 4, "3, 4, 8 and 9");
        let kept: Vec<i64> = kept.iter().map(|m| m.queue_offset).collect();
        assert_eq!(kept, vec![2, 5, 6, 7]);
        queue.put(kept.iter().map(|&offset| message(offset, 10)));
        assert_eq!(queue.commit_point(), 2);
        // Still acknowledged above: what was skipped and what lies beyond the pull.
        assert_eq!(
            queue.acked_above(2),
            AckedRanges::from_ranges([(3, 5), (8, 20)])
        );
        assert_eq!(queue.remove([2, 5, 6, 7]), 10);
        assert_eq!(queue.acked_above(10), AckedRanges::from_ranges([(11, 20)]));
        queue.clear();
        assert!(queue.acked_above(0).is_empty(), "a reset forgets them");
    }

    #[test]
    fn counters_follow_puts_and_removes_and_duplicates_are_ignored() {
        let mut queue = queue_with(&[1, 2, 3]);
        queue.put([message(2, 10), message(4, 30)]);
        assert_eq!(queue.message_count(), 4);
        assert_eq!(queue.cached_bytes(), 60);
        assert_eq!(queue.max_span(), 3);
        queue.remove([1, 4]);
        assert_eq!(queue.message_count(), 2);
        assert_eq!(queue.cached_bytes(), 20);
        assert_eq!(queue.highest_offset(), 4);
    }

    #[test]
    fn flow_control_trips_on_count_bytes_and_span() {
        let limits = FlowLimits {
            max_messages: 2,
            max_bytes: 25,
            max_span: 5,
        };
        let queue = queue_with(&[1, 2, 3]);
        assert_eq!(
            queue.flow_control(&limits, true),
            Some(FlowControl::TooManyMessages(3))
        );
        let queue = queue_with(&[1, 2]);
        assert_eq!(queue.flow_control(&limits, true), None);
        let mut queue = queue_with(&[1]);
        queue.put([message(2, 20)]);
        assert_eq!(
            queue.flow_control(&limits, true),
            Some(FlowControl::TooManyBytes(30))
        );
        let queue = queue_with(&[1, 10]);
        assert_eq!(
            queue.flow_control(&limits, true),
            Some(FlowControl::SpanTooWide(9))
        );
        assert_eq!(queue.flow_control(&limits, false), None);
    }

    #[test]
    fn orderly_take_commit_and_requeue() {
        let mut queue = ProcessQueue::new(Instant::now());
        assert!(queue.put([message(0, 1), message(1, 1), message(2, 1)]));
        assert!(!queue.put([message(3, 1)]), "a task is already busy");
        let taken = queue.take(2);
        assert_eq!(
            taken.iter().map(|m| m.queue_offset).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(queue.remove([]), 0, "taken messages still pin the offset");
        queue.requeue(taken);
        let again = queue.take(2);
        assert_eq!(
            again.iter().map(|m| m.queue_offset).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(queue.commit(), 2);
        assert_eq!(queue.message_count(), 2);
        assert_eq!(queue.take(10).len(), 2);
        assert_eq!(queue.commit(), 4);
        assert!(queue.take(1).is_empty());
        assert!(
            queue.put([message(4, 1)]),
            "idle again: the next put starts a task"
        );
        assert_eq!(queue.commit(), -1, "nothing taken");
    }

    #[test]
    fn lock_expires_without_renewal() {
        let start = Instant::now();
        let mut queue = ProcessQueue::new(start);
        assert!(queue.is_lock_expired(start));
        queue.set_locked(true, start);
        assert!(!queue.is_lock_expired(start + Duration::from_secs(29)));
        assert!(queue.is_lock_expired(start + Duration::from_secs(31)));
    }

    proptest! {
        /// Against a model: the commit point never passes an offset that is still held, and
        /// equals one past the highest offset when nothing is held.
        #[test]
        fn commit_point_never_passes_a_held_message(
            batches in proptest::collection::vec(
                (proptest::collection::btree_set(0i64..200, 0..20), any::<u64>()), 1..30)
        ) {
            let mut queue = ProcessQueue::new(Instant::now());
            let mut held = std::collections::BTreeSet::new();
            let mut highest = -1;
            for (offsets, seed) in batches {
                queue.put(offsets.iter().map(|&o| message(o, 3)));
                held.extend(offsets.iter().copied());
                highest = offsets.iter().copied().fold(highest, i64::max);
                let removing: Vec<i64> = held
                    .iter()
                    .copied()
                    .filter(|o| (seed >> (o % 64)) & 1 == 1)
                    .collect();
                let was_empty = held.is_empty();
                let commit = queue.remove(removing.iter().copied());
                for o in &removing { held.remove(o); }
                let expected = if was_empty { -1 } else { held.first().copied().unwrap_or(highest + 1) };
                prop_assert_eq!(commit, expected);
                prop_assert_eq!(queue.message_count(), held.len());
            }
        }
    }
}
