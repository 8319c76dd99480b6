//! Taking another copy's progress without losing our own: the rule a slave applies to its
//! master's offsets (the periodic sync and the replicated progress stream alike) and a
//! returning master to a slave's. Per queue, a newer reset epoch wins outright (an operator
//! reset, even backwards) and brings the reset's fence and pull redirect while they would still
//! stand; the same epoch keeps the larger offset and the union of the acknowledged ranges above
//! it (a larger one lifts the fence: the reset was confirmed where it was made); an older epoch
//! (a copy that lost a reset) changes nothing.

use tidemark_protocol::acked::AckedRanges;

use super::{AheadOfMaster, ConsumerOffsetTable, QueueProgress};

impl ConsumerOffsetTable {
    /// A slave takes its master's offsets (see the module rules) and reports the queues where
    /// it is ahead under the same epoch. Entries only the slave has are kept.
    pub fn merge_from_master(&mut self, master: &ConsumerOffsetTable) -> Vec<AheadOfMaster> {
        self.merge(master).0
    }

    /// The merge, and the (topic, group, queue)s whose stored value it changed.
    pub(super) fn merge(
        &mut self,
        master: &ConsumerOffsetTable,
    ) -> (Vec<AheadOfMaster>, Vec<(String, String, i32)>) {
        let mut changed = Vec::new();
        for (topic, groups) in &master.topics {
            for (group, queues) in groups {
                for (&queue_id, theirs) in queues {
                    let incoming = Incoming {
                        offset: theirs.offset,
                        reset_epoch: theirs.reset_epoch,
                        acked: &theirs.acked,
                        offset_moved_ms: theirs.offset_moved_ms,
                    };
                    if self.merge_entry(topic, group, queue_id, incoming) {
                        changed.push((topic.clone(), group.clone(), queue_id));
                    }
                }
            }
        }
        (self.ahead_of(master), changed)
    }

    /// A replica about to follow a master gives up what made its own rewinds win: every
    /// queue's reset epoch goes back to 0, and a reset's fence and pull redirect go with it.
    /// A master deposed while paused may apply a reset queued meanwhile after the election
    /// (it answers it with an error, but the change stands in its table), stamped later than
    /// anything the new master did; kept, it would outrank the new master's offsets in every
    /// merge, and the replica elected again would answer that unconfirmed rewind. After this,
    /// the master's copies decide: a newer epoch wins, the same (0) keeps the larger offset.
    /// Returns the queues changed.
    pub(super) fn forfeit_rewinds(&mut self) -> Vec<(String, String, i32)> {
        let mut changed = Vec::new();
        for (topic, groups) in &mut self.topics {
            for (group, queues) in groups {
                for (&queue_id, progress) in queues {
                    if progress.reset_epoch == 0
                        && progress.fence.is_none()
                        && progress.pull_redirect.is_none()
                    {
                        continue;
                    }
                    progress.reset_epoch = 0;
                    progress.fence = None;
                    progress.pull_redirect = None;
                    changed.push((topic.clone(), group.clone(), queue_id));
                }
            }
        }
        changed
    }

    /// The queues where this table is ahead of `master` under the same reset epoch (or has an
    /// entry the master lacks), sorted.
    pub fn ahead_of(&self, master: &ConsumerOffsetTable) -> Vec<AheadOfMaster> {
        let mut ahead = Vec::new();
        for (topic, groups) in &self.topics {
            for (group, queues) in groups {
                for (&queue_id, ours) in queues {
                    let theirs = master.progress(topic, group, queue_id);
                    let same_epoch =
                        theirs.map_or(0, |theirs| theirs.reset_epoch) == ours.reset_epoch;
                    if same_epoch && theirs.is_none_or(|theirs| ours.offset > theirs.offset) {
                        ahead.push(AheadOfMaster {
                            topic: topic.clone(),
                            group: group.clone(),
                            queue_id,
                            offset: ours.offset,
                        });
                    }
                }
            }
        }
        ahead.sort_unstable_by(|a, b| {
            (&a.topic, &a.group, a.queue_id).cmp(&(&b.topic, &b.group, b.queue_id))
        });
        ahead
    }

    /// Merges one queue's progress from another copy; returns whether the stored value
    /// (offset, epoch or acknowledged ranges) changed.
    pub(super) fn merge_entry(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        theirs: Incoming<'_>,
    ) -> bool {
        let ours = self.progress(topic, group, queue_id);
        let merged = match ours {
            None => (theirs.offset, theirs.reset_epoch, theirs.acked.clone()),
            Some(ours) if theirs.reset_epoch > ours.reset_epoch => {
                (theirs.offset, theirs.reset_epoch, theirs.acked.clone())
            }
            Some(ours) if theirs.reset_epoch == ours.reset_epoch => {
                let offset = ours.offset.max(theirs.offset);
                let acked = ours.acked.union(theirs.acked).above(offset);
                (offset, ours.reset_epoch, acked)
            }
            Some(_) => return false,
        };
        let (offset, reset_epoch, acked) = merged;
        let acked = acked.above(offset);
        if ours.is_some_and(|ours| {
            (ours.offset, ours.reset_epoch, &ours.acked) == (offset, reset_epoch, &acked)
        }) {
            return false;
        }
        let taken_reset = ours.is_none_or(|ours| theirs.reset_epoch > ours.reset_epoch);
        let progress = self
            .queues_mut(topic, group)
            .entry(queue_id)
            .or_insert(QueueProgress::new(offset));
        if progress.offset != offset {
            progress.offset_moved_ms = theirs.offset_moved_ms;
        }
        if taken_reset && theirs.reset_epoch > 0 {
            fence_taken_reset(progress, offset, theirs);
        } else if offset > progress.offset {
            // The other copy moved on under the same reset: a client confirmed it there.
            progress.fence = None;
            progress.pull_redirect = None;
        }
        progress.offset = offset;
        progress.reset_epoch = reset_epoch;
        progress.acked = acked;
        true
    }
}

/// A reset (or rewind) taken from another copy brings its fence and its pull redirect, as the
/// copy that made it put them up: were this copy elected before a client heard of the reset,
/// the client's commits of where it was would otherwise undo it, and its pulls would go on
/// from there. Only while the reset's fence would still stand (its epoch is its time); a copy
/// whose offset has moved on since clears them again with its next progress.
fn fence_taken_reset(progress: &mut QueueProgress, offset: i64, theirs: Incoming<'_>) {
    let until_ms = theirs.reset_epoch.saturating_add(super::RESET_FENCE_MS);
    if theirs.offset_moved_ms >= until_ms {
        progress.fence = None;
        progress.pull_redirect = None;
        return;
    }
    progress.fence = Some(super::Fence { offset, until_ms });
    progress.pull_redirect = Some(offset);
}

/// One queue's progress as another copy holds it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Incoming<'a> {
    pub offset: i64,
    pub reset_epoch: i64,
    pub acked: &'a AckedRanges,
    /// When the other copy's offset last moved (0: unknown).
    pub offset_moved_ms: i64,
}
