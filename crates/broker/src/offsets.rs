//! `ConsumerOffsetTable`: each consumer group's progress per queue (RocketMQ's
//! `ConsumerOffsetManager`), a plain type with named transitions. Persistence lives in
//! `persist`; the broker calls these methods under one lock.
//!
//! The stored value is the next offset the group will consume in that queue.
//!
//! Rules:
//! - [`commit`](ConsumerOffsetTable::commit) (UPDATE_CONSUMER_OFFSET, and the offset a pull
//!   carries): progress only moves forward. Java stores a smaller value and logs a warning;
//!   Tidemark keeps the larger one, because a smaller commit from a client is always stale (a
//!   late oneway sent before a rebalance, a consumer that has not yet seen another's progress) and
//!   clients never move their own progress back. The one exception is a stored offset past the
//!   end of the queue (the log lost its tail in a crash): then the commit corrects it downwards,
//!   otherwise the group would skip messages written after the crash.
//! - [`reset`](ConsumerOffsetTable::reset) (an operator's INVOKE_BROKER_TO_RESET_OFFSET): may move
//!   backwards; it is the only way to. A reset also puts up a *fence* on the queue: until a
//!   client commits exactly the reset offset (which every RocketMQ client does once it has
//!   applied the reset, through its next persist or pull), or [`RESET_FENCE_MS`] pass, every
//!   other commit is ignored — so a commit sent before the client heard of the reset cannot undo
//!   it. Clients carry no epoch on the wire; the reset offset itself serves as one.
//! - [`drop_group`](ConsumerOffsetTable::drop_group) / [`drop_topic`](ConsumerOffsetTable::drop_topic):
//!   forget everything of a deleted group or topic.
//! - Every reset also raises the queue's *reset epoch* (persisted, and sent to slaves with the
//!   offsets). [`merge_from_master`](ConsumerOffsetTable::merge_from_master) is how a slave
//!   takes the master's offsets — where RocketMQ replaces the slave's values, so commits made on
//!   the slave while the master was away are lost — : per queue, a newer epoch wins outright
//!   (an operator reset, even backwards), the same epoch keeps the larger offset, and an older
//!   epoch (a master that lost a reset) keeps the slave's value.

use std::collections::BTreeMap;

use tidemark_protocol::body::{split_topic_at_group, topic_at_group, ConsumerOffsetWrapper};
use tracing::warn;

/// What a commit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitOutcome {
    /// First offset for this queue.
    Created,
    /// Moved forward (or stayed equal).
    Advanced { previous: i64 },
    /// Lower than the stored offset and the stored offset is valid: kept the stored one.
    IgnoredBackwards { stored: i64 },
    /// The stored offset was past the end of the queue; the commit replaced it.
    Corrected { previous: i64 },
    /// A negative offset is never stored.
    Rejected,
    /// The queue was reset and no client has confirmed the reset offset yet: ignored.
    IgnoredDuringReset { reset_offset: i64 },
}

/// How long a reset's fence lasts at most.
pub const RESET_FENCE_MS: i64 = 300_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fence {
    offset: i64,
    until_ms: i64,
}

type GroupOffsets = BTreeMap<i32, i64>;

/// Progress of every (topic, group) per queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerOffsetTable {
    entries: BTreeMap<(String, String), GroupOffsets>,
    /// Queues reset and not yet confirmed, by (topic, group, queue id). Not persisted: after a
    /// restart clients re-read the stored (reset) offset anyway.
    fences: BTreeMap<(String, String, i32), Fence>,
    /// Epoch of each queue's last reset (absent: never reset, epoch 0).
    epochs: BTreeMap<(String, String), GroupOffsets>,
}

/// A slave's offset that is ahead of its master's under the same reset epoch: the master should
/// learn it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AheadOfMaster {
    pub topic: String,
    pub group: String,
    pub queue_id: i32,
    pub offset: i64,
}

impl ConsumerOffsetTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// UPDATE_CONSUMER_OFFSET from a client (any role may store it, as Java does).
    pub fn commit_from_client(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        offset: i64,
        queue_max_offset: i64,
        now_ms: i64,
    ) -> CommitOutcome {
        self.commit(topic, group, queue_id, offset, queue_max_offset, now_ms)
    }

    /// The offset a pull carries with its COMMIT bit. The broker calls this on the first pass of
    /// a pull only, and never on a slave.
    pub fn commit_from_pull(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        offset: i64,
        queue_max_offset: i64,
        now_ms: i64,
    ) -> CommitOutcome {
        self.commit(topic, group, queue_id, offset, queue_max_offset, now_ms)
    }

    /// The rule both kinds of commit follow. `queue_max_offset` is the queue's current max offset (the
    /// next offset to be written), used only to recognise an invalid stored offset.
    pub fn commit(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        offset: i64,
        queue_max_offset: i64,
        now_ms: i64,
    ) -> CommitOutcome {
        if offset < 0 {
            return CommitOutcome::Rejected;
        }
        let fence_key = (topic.to_owned(), group.to_owned(), queue_id);
        if let Some(fence) = self.fences.get(&fence_key).copied() {
            if now_ms < fence.until_ms && offset != fence.offset {
                return CommitOutcome::IgnoredDuringReset {
                    reset_offset: fence.offset,
                };
            }
            // Confirmed (or expired): ordinary rules from here on.
            self.fences.remove(&fence_key);
        }
        let queues = self
            .entries
            .entry((topic.to_owned(), group.to_owned()))
            .or_default();
        let Some(stored) = queues.get_mut(&queue_id) else {
            queues.insert(queue_id, offset);
            return CommitOutcome::Created;
        };
        let previous = *stored;
        if offset >= previous {
            *stored = offset;
            return CommitOutcome::Advanced { previous };
        }
        if previous > queue_max_offset {
            *stored = offset;
            return CommitOutcome::Corrected { previous };
        }
        debug_assert!(
            *stored == previous && offset < previous,
            "a backwards commit leaves the stored offset alone"
        );
        CommitOutcome::IgnoredBackwards { stored: previous }
    }

    /// An operator's reset: sets the offset, backwards if need be, and fences the queue until a
    /// client confirms it.
    pub fn reset(&mut self, topic: &str, group: &str, queue_id: i32, offset: i64, now_ms: i64) {
        let offset = offset.max(0);
        let epochs = self
            .epochs
            .entry((topic.to_owned(), group.to_owned()))
            .or_default();
        let epoch = epochs
            .get(&queue_id)
            .map_or(now_ms, |previous| now_ms.max(previous + 1));
        epochs.insert(queue_id, epoch);
        self.entries
            .entry((topic.to_owned(), group.to_owned()))
            .or_default()
            .insert(queue_id, offset);
        self.fences.insert(
            (topic.to_owned(), group.to_owned(), queue_id),
            Fence {
                offset,
                until_ms: now_ms + RESET_FENCE_MS,
            },
        );
    }

    pub fn query(&self, topic: &str, group: &str, queue_id: i32) -> Option<i64> {
        self.entries
            .get(&(topic.to_owned(), group.to_owned()))?
            .get(&queue_id)
            .copied()
    }

    /// The epoch of the queue's last reset (0: never reset).
    pub fn reset_epoch(&self, topic: &str, group: &str, queue_id: i32) -> i64 {
        self.epochs
            .get(&(topic.to_owned(), group.to_owned()))
            .and_then(|queues| queues.get(&queue_id))
            .copied()
            .unwrap_or(0)
    }

    /// A slave takes its master's offsets (see the module rules) and reports the queues where
    /// it is ahead under the same epoch. Entries only the slave has are kept.
    pub fn merge_from_master(&mut self, master: &ConsumerOffsetTable) -> Vec<AheadOfMaster> {
        for (key, queues) in &master.entries {
            for (&queue_id, &theirs) in queues {
                let their_epoch = master.reset_epoch(&key.0, &key.1, queue_id);
                let our_epoch = self.reset_epoch(&key.0, &key.1, queue_id);
                let ours = self
                    .entries
                    .get(key)
                    .and_then(|queues| queues.get(&queue_id))
                    .copied();
                let merged = match ours {
                    None => Some(theirs),
                    Some(_) if their_epoch > our_epoch => Some(theirs),
                    Some(ours) if their_epoch == our_epoch => Some(ours.max(theirs)),
                    Some(_) => None,
                };
                if let Some(value) = merged {
                    self.entries
                        .entry(key.clone())
                        .or_default()
                        .insert(queue_id, value);
                    if their_epoch > our_epoch {
                        self.epochs
                            .entry(key.clone())
                            .or_default()
                            .insert(queue_id, their_epoch);
                    }
                }
            }
        }
        let mut ahead = Vec::new();
        for (key, queues) in &self.entries {
            for (&queue_id, &ours) in queues {
                let theirs = master.query(&key.0, &key.1, queue_id);
                let same_epoch = master.reset_epoch(&key.0, &key.1, queue_id)
                    == self.reset_epoch(&key.0, &key.1, queue_id);
                if same_epoch && theirs.is_none_or(|theirs| ours > theirs) {
                    ahead.push(AheadOfMaster {
                        topic: key.0.clone(),
                        group: key.1.clone(),
                        queue_id,
                        offset: ours,
                    });
                }
            }
        }
        ahead
    }

    /// All queues of a (topic, group).
    pub fn queue_offsets(&self, topic: &str, group: &str) -> Option<&GroupOffsets> {
        self.entries.get(&(topic.to_owned(), group.to_owned()))
    }

    /// Topics a group has progress in.
    pub fn topics_of_group(&self, group: &str) -> Vec<String> {
        self.entries
            .keys()
            .filter(|(_, name)| name == group)
            .map(|(topic, _)| topic.clone())
            .collect()
    }

    /// Groups with progress in a topic.
    pub fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        self.entries
            .keys()
            .filter(|(name, _)| name == topic)
            .map(|(_, group)| group.clone())
            .collect()
    }

    /// Forgets a deleted group; returns how many (topic, group) entries went.
    pub fn drop_group(&mut self, group: &str) -> usize {
        let before = self.entries.len();
        self.entries.retain(|(_, name), _| name != group);
        self.fences.retain(|(_, name, _), _| name != group);
        self.epochs.retain(|(_, name), _| name != group);
        before - self.entries.len()
    }

    /// Forgets a deleted topic.
    pub fn drop_topic(&mut self, topic: &str) -> usize {
        let before = self.entries.len();
        self.entries.retain(|(name, _), _| name != topic);
        self.fences.retain(|(name, _, _), _| name != topic);
        self.epochs.retain(|(name, _), _| name != topic);
        before - self.entries.len()
    }

    /// The `consumerOffset.json` / GET_ALL_CONSUMER_OFFSET form.
    pub fn to_wrapper(&self) -> ConsumerOffsetWrapper {
        ConsumerOffsetWrapper {
            data_version: None,
            offset_table: self
                .entries
                .iter()
                .map(|((topic, group), queues)| (topic_at_group(topic, group), queues.clone()))
                .collect(),
            reset_epoch_table: (!self.epochs.is_empty()).then(|| {
                self.epochs
                    .iter()
                    .map(|((topic, group), queues)| (topic_at_group(topic, group), queues.clone()))
                    .collect()
            }),
        }
    }

    /// Reads the persisted form; keys that are not `topic@group` are skipped with a warning,
    /// as Java skips them.
    pub fn from_wrapper(wrapper: &ConsumerOffsetWrapper) -> Self {
        let mut table = Self::new();
        for (key, queues) in &wrapper.offset_table {
            match split_topic_at_group(key) {
                Some((topic, group)) => {
                    table
                        .entries
                        .insert((topic.to_owned(), group.to_owned()), queues.clone());
                }
                None => warn!(%key, "consumer offset key is not topic@group; skipped"),
            }
        }
        for (key, queues) in wrapper.reset_epoch_table.iter().flatten() {
            if let Some((topic, group)) = split_topic_at_group(key) {
                table
                    .epochs
                    .insert((topic.to_owned(), group.to_owned()), queues.clone());
            }
        }
        table
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_only_move_forward_unless_the_stored_offset_is_past_the_queue() {
        let mut table = ConsumerOffsetTable::new();
        assert_eq!(
            table.commit("T", "g", 0, 10, 100, 0),
            CommitOutcome::Created
        );
        assert_eq!(
            table.commit("T", "g", 0, 15, 100, 0),
            CommitOutcome::Advanced { previous: 10 }
        );
        assert_eq!(
            table.commit("T", "g", 0, 12, 100, 0),
            CommitOutcome::IgnoredBackwards { stored: 15 }
        );
        assert_eq!(table.query("T", "g", 0), Some(15));
        // The log lost its tail: the queue now ends at 13, the stored 15 points nowhere.
        assert_eq!(
            table.commit("T", "g", 0, 13, 13, 0),
            CommitOutcome::Corrected { previous: 15 }
        );
        assert_eq!(
            table.commit("T", "g", 0, -1, 13, 0),
            CommitOutcome::Rejected
        );
        assert_eq!(table.query("T", "g", 0), Some(13));
        table.reset("T", "g", 0, 2, 0);
        assert_eq!(
            table.query("T", "g", 0),
            Some(2),
            "an operator may move backwards"
        );
    }

    #[test]
    fn a_reset_is_fenced_until_a_client_confirms_it() {
        let mut table = ConsumerOffsetTable::new();
        table.commit("T", "g", 0, 50, 100, 0);
        table.reset("T", "g", 0, 10, 1_000);
        // A commit sent before the client heard of the reset must not undo it.
        assert_eq!(
            table.commit("T", "g", 0, 52, 100, 1_500),
            CommitOutcome::IgnoredDuringReset { reset_offset: 10 }
        );
        assert_eq!(table.query("T", "g", 0), Some(10));
        // The client applied the reset: it commits exactly the reset offset, then moves on.
        assert_eq!(
            table.commit("T", "g", 0, 10, 100, 2_000),
            CommitOutcome::Advanced { previous: 10 }
        );
        assert_eq!(
            table.commit("T", "g", 0, 12, 100, 2_500),
            CommitOutcome::Advanced { previous: 10 }
        );
        // A fence nobody confirms lapses.
        table.reset("T", "g", 0, 5, 10_000);
        assert!(matches!(
            table.commit("T", "g", 0, 7, 100, 10_000 + RESET_FENCE_MS - 1),
            CommitOutcome::IgnoredDuringReset { .. }
        ));
        assert_eq!(
            table.commit("T", "g", 0, 7, 100, 10_000 + RESET_FENCE_MS),
            CommitOutcome::Advanced { previous: 5 }
        );
    }

    #[test]
    fn a_slave_merge_keeps_newer_progress_and_obeys_resets() {
        let mut master = ConsumerOffsetTable::new();
        master.commit("T", "g", 0, 10, 100, 0);
        master.commit("T", "g", 1, 30, 100, 0);
        let mut slave = ConsumerOffsetTable::new();
        slave.merge_from_master(&master);
        // While the master was away, consumers committed to the slave.
        slave.commit("T", "g", 0, 25, 100, 0);
        slave.commit("T", "g", 2, 5, 100, 0);
        // The master came back with its older values (and learned one queue from a client).
        master.commit("T", "g", 1, 35, 100, 0);
        let ahead = slave.merge_from_master(&master);
        assert_eq!(
            slave.query("T", "g", 0),
            Some(25),
            "never overwritten by an older value"
        );
        assert_eq!(
            slave.query("T", "g", 1),
            Some(35),
            "newer master values are taken"
        );
        assert_eq!(slave.query("T", "g", 2), Some(5), "slave-only entries stay");
        let pushed: Vec<_> = ahead.iter().map(|a| (a.queue_id, a.offset)).collect();
        assert_eq!(
            pushed,
            vec![(0, 25), (2, 5)],
            "the master is told what it is behind on"
        );

        // An operator reset on the master moves the slave back, once.
        master.reset("T", "g", 0, 3, 1_000);
        let ahead = slave.merge_from_master(&master);
        assert_eq!(slave.query("T", "g", 0), Some(3));
        assert!(
            ahead.iter().all(|a| a.queue_id != 0),
            "a reset queue is not pushed back"
        );
        assert_eq!(
            slave.reset_epoch("T", "g", 0),
            master.reset_epoch("T", "g", 0)
        );
        // Progress after the reset merges by the larger value again.
        slave.commit("T", "g", 0, 4, 100, 2_000);
        slave.merge_from_master(&master);
        assert_eq!(slave.query("T", "g", 0), Some(4));

        // A master that lost its reset (older epoch) does not undo the slave's.
        let mut forgetful = ConsumerOffsetTable::new();
        forgetful.commit("T", "g", 0, 60, 100, 0);
        slave.merge_from_master(&forgetful);
        assert_eq!(slave.query("T", "g", 0), Some(4));
    }

    #[test]
    fn reset_epochs_survive_the_wrapper_and_increase() {
        let mut table = ConsumerOffsetTable::new();
        table.reset("T", "g", 0, 1, 500);
        table.reset("T", "g", 0, 1, 400);
        assert_eq!(
            table.reset_epoch("T", "g", 0),
            501,
            "epochs never go backwards"
        );
        let wrapper = table.to_wrapper();
        assert_eq!(
            ConsumerOffsetTable::from_wrapper(&wrapper).reset_epoch("T", "g", 0),
            501
        );
    }

    #[test]
    fn wrapper_round_trip_and_drops() {
        let mut table = ConsumerOffsetTable::new();
        table.commit("T", "g1", 0, 5, 10, 0);
        table.commit("%RETRY%g1", "g1", 0, 1, 10, 0);
        table.commit("T", "g2", 1, 7, 10, 0);
        let wrapper = table.to_wrapper();
        assert_eq!(wrapper.offset_table["T@g1"][&0], 5);
        assert_eq!(ConsumerOffsetTable::from_wrapper(&wrapper), table);
        assert_eq!(
            table.topics_of_group("g1"),
            vec!["%RETRY%g1".to_owned(), "T".to_owned()]
        );
        assert_eq!(
            table.groups_of_topic("T"),
            vec!["g1".to_owned(), "g2".to_owned()]
        );
        assert_eq!(table.drop_group("g1"), 2);
        assert_eq!(table.drop_topic("T"), 1);
        assert!(table.is_empty());
    }
}
