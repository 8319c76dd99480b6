//! Consumer offsets (RocketMQ's `ConsumerOffsetManager`): [`ConsumerOffsetTable`] holds one
//! [`QueueProgress`] record per (topic, group, queue) and the rules below; [`ConsumerOffsets`]
//! is the broker's one instance of it, behind its own lock, with the revision persistence
//! watches.
//!
//! The stored value is the next offset the group will consume in that queue.
//!
//! Rules:
//! - [`commit`](ConsumerOffsetTable::commit) (the offset a pull carries, and
//!   UPDATE_CONSUMER_OFFSET from a member of the group that no longer pulls the queue):
//!   progress only moves forward. Java stores a smaller value and logs a warning; Tidemark keeps
//!   the larger one, because such a smaller commit is stale (a late oneway sent before a
//!   rebalance, a consumer that has not yet seen another's progress). The one exception is a
//!   stored offset past the end of the queue (the log lost its tail in a crash): then the commit
//!   corrects it downwards, otherwise the group would skip messages written after the crash.
//! - [`commit_by`](ConsumerOffsetTable::commit_by) a [`Committer`] that means it: a lower
//!   UPDATE_CONSUMER_OFFSET from an admin tool (a connection that is not a consumer of the
//!   group: `updateConsumeOffset`) or from the queue's current consumer (the connection that
//!   last pulled it: a lite pull consumer that sought back) is a deliberate rewind, stored as
//!   RocketMQ stores it, with the reset epoch raised so slaves take it.
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

use std::collections::{BTreeMap, HashMap};

use tidemark_protocol::acked::AckedRanges;
use tidemark_protocol::body::{split_topic_at_group, topic_at_group, ConsumerOffsetWrapper};
use tracing::warn;

mod journal;
mod merge;
mod shared;

pub use shared::{ConsumerOffsets, Journaled};

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
    /// A deliberate rewind (an admin tool, or the queue's current consumer) moved it back.
    Rewound { previous: i64 },
}

/// Who a commit comes from, as far as moving progress back is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committer {
    /// A pull's piggy-backed commit, a slave passing on progress, or a member of the group
    /// that is not the queue's current consumer (a former owner): forward only.
    Progress,
    /// UPDATE_CONSUMER_OFFSET from the connection that last pulled the queue for the group:
    /// a lower value is a deliberate rewind (a lite pull consumer that sought back).
    CurrentConsumer,
    /// UPDATE_CONSUMER_OFFSET from a connection that is not a consumer of the group (an admin
    /// tool's `updateConsumeOffset`): a lower value is a deliberate rewind, even while a reset
    /// is unconfirmed.
    Admin,
}

impl CommitOutcome {
    /// Whether the commit stored anything (and so the table must be persisted again).
    pub fn stored(self) -> bool {
        matches!(
            self,
            CommitOutcome::Created
                | CommitOutcome::Advanced { .. }
                | CommitOutcome::Corrected { .. }
                | CommitOutcome::Rewound { .. }
        )
    }
}

/// How long a reset's fence lasts at most.
pub const RESET_FENCE_MS: i64 = 300_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fence {
    offset: i64,
    until_ms: i64,
}

/// One queue's committed offset, copied out of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub group: String,
    pub topic: String,
    pub queue_id: i32,
    pub offset: i64,
}

/// One group's progress in one queue: everything the broker knows about it, in one place.
///
/// Invariant: every acknowledged range lies above `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueProgress {
    /// The next offset the group will consume.
    pub offset: i64,
    /// Offsets above `offset` that are already consumed (reported by Tidemark clients; empty
    /// for others). Persisted in the journal and sent to slaves.
    pub acked: AckedRanges,
    /// When `offset` last moved (0: not since the broker started). Not persisted.
    pub offset_moved_ms: i64,
    /// Epoch of the queue's last operator reset (0: never reset). Persisted, and sent to
    /// slaves with the offsets.
    pub reset_epoch: i64,
    /// Up after a reset until a client confirms it. Not persisted: after a restart clients
    /// re-read the stored (reset) offset anyway.
    fence: Option<Fence>,
    /// Set by a reset until the group's next pull of the queue, which is sent to the reset
    /// offset if it asked for another: clients that ignore RESET_CONSUMER_CLIENT_OFFSET (lite
    /// pull) follow a reset this way, as they do on Apache 5 (`useServerSideResetOffset`). Not
    /// persisted.
    pull_redirect: Option<i64>,
    /// The connection that last pulled the queue for the group: its current consumer. Not
    /// persisted (connections do not outlive the broker).
    last_puller: Option<u64>,
    /// Whether that puller hands the queue off explicitly (a Tidemark consumer): then a new
    /// owner waits for its release.
    puller_hands_off: bool,
    /// The stuck offset already logged, so one stuck episode is logged once.
    stuck_logged: Option<i64>,
    /// Where the group's last pull that found messages told it to go on from: everything
    /// below was handed out (RocketMQ's pull offset; what the consumer holds is between the
    /// committed offset and this). Not persisted.
    pub pulled: Option<i64>,
}

impl QueueProgress {
    fn new(offset: i64) -> Self {
        Self {
            offset,
            acked: AckedRanges::new(),
            offset_moved_ms: 0,
            reset_epoch: 0,
            fence: None,
            pull_redirect: None,
            last_puller: None,
            puller_hands_off: false,
            stuck_logged: None,
            pulled: None,
        }
    }

    /// Since when the offset has been held back by one message while later ones are done
    /// (acknowledged ranges above it) and has not moved for `threshold_ms`; `None` when it is
    /// not. An offset that has not moved since the broker started counts from `started_ms`.
    pub fn stuck_since(&self, now_ms: i64, threshold_ms: i64, started_ms: i64) -> Option<i64> {
        if self.acked.is_empty() {
            return None;
        }
        let since = if self.offset_moved_ms > 0 {
            self.offset_moved_ms
        } else {
            started_ms
        };
        (now_ms - since >= threshold_ms).then_some(since)
    }

    /// A deliberate move (reset or rewind) raises the epoch, so slaves take the value.
    fn raise_epoch(&mut self, now_ms: i64) {
        self.reset_epoch = if self.reset_epoch == 0 {
            now_ms
        } else {
            now_ms.max(self.reset_epoch + 1)
        };
    }
}

type QueueMap = BTreeMap<i32, QueueProgress>;

/// Progress of every (topic, group) per queue: topic → group → queue, so lookups by `&str`
/// allocate nothing. Hashed, not ordered, above the queue level: every commit looks its entry
/// up, and among a million entries an ordered map's string comparisons cost more than the
/// rest of the commit; what is listed for people is sorted where it is listed. Plain state
/// with the rules; [`ConsumerOffsets`] owns one behind its lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerOffsetTable {
    topics: HashMap<String, HashMap<String, QueueMap>>,
    /// A replica's place in its master's progress stream: the next queue offset of the
    /// progress topic to apply (`progress_stream`). Journaled with the changes it applied, so
    /// a restart resumes where they end; not part of the exported offsets.
    replica_position: i64,
}

/// A queue whose group is held back by one message while later ones are done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckQueue {
    pub topic: String,
    pub group: String,
    pub queue_id: i32,
    /// The offset holding the group back (the stuck message).
    pub offset: i64,
    /// Since when it has not moved.
    pub since_ms: i64,
    /// How many later offsets are already consumed.
    pub acked_above: i64,
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

    fn progress(&self, topic: &str, group: &str, queue_id: i32) -> Option<&QueueProgress> {
        self.topics.get(topic)?.get(group)?.get(&queue_id)
    }

    fn queues_mut(&mut self, topic: &str, group: &str) -> &mut QueueMap {
        // Owned keys only when the (topic, group) is new.
        if !self.topics.contains_key(topic) {
            self.topics.insert(topic.to_owned(), HashMap::new());
        }
        let groups = self.topics.get_mut(topic).expect("inserted above");
        if !groups.contains_key(group) {
            groups.insert(group.to_owned(), QueueMap::new());
        }
        groups.get_mut(group).expect("inserted above")
    }

    /// A commit — UPDATE_CONSUMER_OFFSET from a client (any role may store it, as Java does),
    /// or the offset a pull carries with its COMMIT bit (first pass only, never on a slave).
    /// `queue_max_offset` is the queue's current max offset (the next offset to be written),
    /// used only to recognise an invalid stored offset.
    pub fn commit(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        offset: i64,
        queue_max_offset: i64,
        now_ms: i64,
    ) -> CommitOutcome {
        self.commit_by(
            topic,
            group,
            queue_id,
            offset,
            queue_max_offset,
            now_ms,
            Committer::Progress,
        )
    }

    /// [`commit`](Self::commit), where a lower value from `committer` may be a deliberate
    /// rewind (see [`Committer`]): stored, and the queue's reset epoch raised so slaves take it.
    #[allow(clippy::too_many_arguments)]
    pub fn commit_by(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        offset: i64,
        queue_max_offset: i64,
        now_ms: i64,
        committer: Committer,
    ) -> CommitOutcome {
        if offset < 0 {
            return CommitOutcome::Rejected;
        }
        let existing = self
            .topics
            .get_mut(topic)
            .and_then(|groups| groups.get_mut(group))
            .and_then(|queues| queues.get_mut(&queue_id));
        let Some(progress) = existing else {
            let mut progress = QueueProgress::new(offset);
            progress.offset_moved_ms = now_ms;
            self.queues_mut(topic, group).insert(queue_id, progress);
            return CommitOutcome::Created;
        };
        if let Some(fence) = progress.fence {
            if now_ms < fence.until_ms && offset != fence.offset && committer != Committer::Admin {
                return CommitOutcome::IgnoredDuringReset {
                    reset_offset: fence.offset,
                };
            }
            // Confirmed (or expired): ordinary rules from here on.
            progress.fence = None;
        }
        let previous = progress.offset;
        if offset >= previous {
            if offset > previous {
                progress.offset = offset;
                progress.offset_moved_ms = now_ms;
                progress.acked = progress.acked.above(offset);
            }
            return CommitOutcome::Advanced { previous };
        }
        if previous > queue_max_offset {
            progress.offset = offset;
            progress.offset_moved_ms = now_ms;
            // Offsets past the queue's new end were never consumed from this log.
            progress.acked = progress.acked.above(offset).below(queue_max_offset);
            return CommitOutcome::Corrected { previous };
        }
        if committer != Committer::Progress {
            progress.offset = offset;
            progress.offset_moved_ms = now_ms;
            progress.acked = AckedRanges::new();
            progress.fence = None;
            progress.raise_epoch(now_ms);
            return CommitOutcome::Rewound { previous };
        }
        CommitOutcome::IgnoredBackwards { stored: previous }
    }

    /// An operator's reset: sets the offset, backwards if need be, raises the queue's reset
    /// epoch, and fences the queue until a client confirms it.
    pub fn reset(&mut self, topic: &str, group: &str, queue_id: i32, offset: i64, now_ms: i64) {
        let offset = offset.max(0);
        let progress = self
            .queues_mut(topic, group)
            .entry(queue_id)
            .or_insert(QueueProgress::new(offset));
        progress.raise_epoch(now_ms);
        progress.offset = offset;
        progress.offset_moved_ms = now_ms;
        progress.acked = AckedRanges::new();
        progress.fence = Some(Fence {
            offset,
            until_ms: now_ms + RESET_FENCE_MS,
        });
        progress.pull_redirect = Some(offset);
    }

    /// Where the group's pull of a queue from `requested` must go instead: the offset of a
    /// reset no pull has seen yet, when the pull asks for another. Once per reset.
    pub fn take_pull_redirect(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        requested: i64,
    ) -> Option<i64> {
        let progress = self
            .topics
            .get_mut(topic)
            .and_then(|groups| groups.get_mut(group))
            .and_then(|queues| queues.get_mut(&queue_id))?;
        progress
            .pull_redirect
            .take()
            .filter(|offset| *offset != requested)
    }

    pub fn query(&self, topic: &str, group: &str, queue_id: i32) -> Option<i64> {
        self.progress(topic, group, queue_id)
            .map(|progress| progress.offset)
    }

    /// Queues that became stuck (see [`QueueProgress::stuck_since`]) since the last call, each
    /// reported once per stuck offset.
    pub fn newly_stuck(
        &mut self,
        now_ms: i64,
        threshold_ms: i64,
        started_ms: i64,
    ) -> Vec<StuckQueue> {
        let mut found = Vec::new();
        for (topic, groups) in &mut self.topics {
            for (group, queues) in groups {
                for (&queue_id, progress) in queues {
                    let Some(since_ms) = progress.stuck_since(now_ms, threshold_ms, started_ms)
                    else {
                        continue;
                    };
                    if progress.stuck_logged == Some(progress.offset) {
                        continue;
                    }
                    progress.stuck_logged = Some(progress.offset);
                    found.push(StuckQueue {
                        topic: topic.clone(),
                        group: group.clone(),
                        queue_id,
                        offset: progress.offset,
                        since_ms,
                        acked_above: progress.acked.count(),
                    });
                }
            }
        }
        found.sort_unstable_by(|a, b| {
            (&a.topic, &a.group, a.queue_id).cmp(&(&b.topic, &b.group, b.queue_id))
        });
        found
    }

    /// The whole stored progress of a queue.
    pub fn queue_progress(&self, topic: &str, group: &str, queue_id: i32) -> Option<QueueProgress> {
        self.progress(topic, group, queue_id).cloned()
    }

    /// Adds acknowledged ranges reported with a commit that was not refused (an offset anyone
    /// acknowledged stays acknowledged; only a reset or rewind forgets them). Returns whether
    /// the stored ranges changed.
    pub fn note_acked(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        acked: &AckedRanges,
    ) -> bool {
        let Some(progress) = self
            .topics
            .get_mut(topic)
            .and_then(|groups| groups.get_mut(group))
            .and_then(|queues| queues.get_mut(&queue_id))
        else {
            return false;
        };
        let merged = progress.acked.union(acked).above(progress.offset);
        if merged == progress.acked {
            return false;
        }
        progress.acked = merged;
        true
    }

    /// Records the connection that pulled the queue for the group (only where the group has
    /// progress: before that, no commit can be lower than anything, and there is nothing to
    /// hand off), and whether it hands queues off explicitly.
    ///
    /// A puller that hands off does not displace another live one that does (`is_live` tells
    /// which connections are still members of the group): that is a pull the previous owner
    /// sent before it released the queue, or a new owner that stopped waiting for the release;
    /// either way the holder keeps the queue until it releases it.
    pub fn note_puller(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        connection: u64,
        hands_off: bool,
        is_live: impl Fn(u64) -> bool,
    ) {
        if let Some(progress) = self.progress_mut(topic, group, queue_id) {
            let held_by_another = progress.puller_hands_off
                && progress
                    .last_puller
                    .is_some_and(|holder| holder != connection && is_live(holder));
            if hands_off && held_by_another {
                return;
            }
            progress.last_puller = Some(connection);
            progress.puller_hands_off = hands_off;
        }
    }

    /// A pull of the queue for the group found messages and told the consumer to go on from
    /// `next` (only where the group has progress, as [`Self::note_puller`]).
    pub fn note_pulled(&mut self, topic: &str, group: &str, queue_id: i32, next: i64) {
        if let Some(progress) = self.progress_mut(topic, group, queue_id) {
            progress.pulled = Some(next);
        }
    }

    /// A consumer about to take the queue over asks for it: the other live holder when there
    /// is one (the asker waits for its release), otherwise the asker holds it from now on, so
    /// two consumers whose rebalances overlap never both start on it (the second waits for
    /// the first to release). Where the group has no progress there is nothing to hold.
    pub fn claim(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
        connection: u64,
        is_live: impl Fn(u64) -> bool,
    ) -> Option<u64> {
        let progress = self.progress_mut(topic, group, queue_id)?;
        if progress.puller_hands_off {
            if let Some(holder) = progress.last_puller {
                if holder != connection && is_live(holder) {
                    return Some(holder);
                }
            }
        }
        progress.last_puller = Some(connection);
        progress.puller_hands_off = true;
        None
    }

    /// `connection` gave the queue up (its final commit is stored): nobody holds it now.
    pub fn release(&mut self, topic: &str, group: &str, queue_id: i32, connection: u64) {
        if let Some(progress) = self.progress_mut(topic, group, queue_id) {
            if progress.last_puller == Some(connection) {
                progress.last_puller = None;
            }
        }
    }

    /// The connection that consumes the queue and will release it explicitly, if any.
    pub fn holder(&self, topic: &str, group: &str, queue_id: i32) -> Option<u64> {
        self.progress(topic, group, queue_id)
            .filter(|progress| progress.puller_hands_off)
            .and_then(|progress| progress.last_puller)
    }

    fn progress_mut(
        &mut self,
        topic: &str,
        group: &str,
        queue_id: i32,
    ) -> Option<&mut QueueProgress> {
        self.topics
            .get_mut(topic)
            .and_then(|groups| groups.get_mut(group))
            .and_then(|queues| queues.get_mut(&queue_id))
    }

    /// Whether `connection` is the last to have pulled the queue for the group.
    pub fn is_current_consumer(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        connection: u64,
    ) -> bool {
        self.progress(topic, group, queue_id)
            .is_some_and(|progress| progress.last_puller == Some(connection))
    }

    /// The epoch of the queue's last reset (0: never reset).
    pub fn reset_epoch(&self, topic: &str, group: &str, queue_id: i32) -> i64 {
        self.progress(topic, group, queue_id)
            .map_or(0, |progress| progress.reset_epoch)
    }

    /// All queues' offsets of a (topic, group).
    pub fn queue_offsets(&self, topic: &str, group: &str) -> Option<BTreeMap<i32, i64>> {
        let queues = self.topics.get(topic)?.get(group)?;
        Some(
            queues
                .iter()
                .map(|(&queue_id, progress)| (queue_id, progress.offset))
                .collect(),
        )
    }

    /// Topics a group has progress in.
    pub fn topics_of_group(&self, group: &str) -> Vec<String> {
        let mut topics: Vec<String> = self
            .topics
            .iter()
            .filter(|(_, groups)| groups.contains_key(group))
            .map(|(topic, _)| topic.clone())
            .collect();
        topics.sort_unstable();
        topics
    }

    /// Groups with progress in a topic.
    pub fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        let mut groups: Vec<String> = self
            .topics
            .get(topic)
            .map(|groups| groups.keys().cloned().collect())
            .unwrap_or_default();
        groups.sort_unstable();
        groups
    }

    /// Forgets a deleted group; returns how many (topic, group) entries went.
    pub fn drop_group(&mut self, group: &str) -> usize {
        let mut dropped = 0;
        for groups in self.topics.values_mut() {
            dropped += usize::from(groups.remove(group).is_some());
        }
        self.topics.retain(|_, groups| !groups.is_empty());
        dropped
    }

    /// Forgets a deleted topic.
    pub fn drop_topic(&mut self, topic: &str) -> usize {
        self.topics.remove(topic).map_or(0, |groups| groups.len())
    }

    /// The next queue offset of the master's progress stream this replica applies.
    pub fn replica_position(&self) -> i64 {
        self.replica_position
    }

    /// The `consumerOffset.json` / GET_ALL_CONSUMER_OFFSET form.
    pub fn to_wrapper(&self) -> ConsumerOffsetWrapper {
        let mut offset_table = BTreeMap::new();
        let mut reset_epoch_table = BTreeMap::new();
        let mut acked_ranges_table = BTreeMap::new();
        for (topic, groups) in &self.topics {
            for (group, queues) in groups {
                let key = topic_at_group(topic, group);
                let acked: BTreeMap<i32, String> = queues
                    .iter()
                    .filter(|(_, progress)| !progress.acked.is_empty())
                    .map(|(&queue_id, progress)| (queue_id, progress.acked.encode(progress.offset)))
                    .collect();
                if !acked.is_empty() {
                    acked_ranges_table.insert(key.clone(), acked);
                }
                let epochs: BTreeMap<i32, i64> = queues
                    .iter()
                    .filter(|(_, progress)| progress.reset_epoch != 0)
                    .map(|(&queue_id, progress)| (queue_id, progress.reset_epoch))
                    .collect();
                if !epochs.is_empty() {
                    reset_epoch_table.insert(key.clone(), epochs);
                }
                offset_table.insert(
                    key,
                    queues
                        .iter()
                        .map(|(&queue_id, progress)| (queue_id, progress.offset))
                        .collect(),
                );
            }
        }
        ConsumerOffsetWrapper {
            data_version: None,
            offset_table,
            reset_epoch_table: (!reset_epoch_table.is_empty()).then_some(reset_epoch_table),
            acked_ranges_table: (!acked_ranges_table.is_empty()).then_some(acked_ranges_table),
        }
    }

    /// Reads the persisted form; keys that are not `topic@group` are skipped with a warning,
    /// as Java skips them, and so is an epoch without an offset.
    pub fn from_wrapper(wrapper: &ConsumerOffsetWrapper) -> Self {
        let mut table = Self::new();
        for (key, queues) in &wrapper.offset_table {
            match split_topic_at_group(key) {
                Some((topic, group)) => {
                    let map = table.queues_mut(topic, group);
                    for (&queue_id, &offset) in queues {
                        map.insert(queue_id, QueueProgress::new(offset));
                    }
                }
                None => warn!(%key, "consumer offset key is not topic@group; skipped"),
            }
        }
        for (key, queues) in wrapper.reset_epoch_table.iter().flatten() {
            let Some((topic, group)) = split_topic_at_group(key) else {
                continue;
            };
            for (&queue_id, &epoch) in queues {
                match table
                    .topics
                    .get_mut(topic)
                    .and_then(|groups| groups.get_mut(group))
                    .and_then(|queues| queues.get_mut(&queue_id))
                {
                    Some(progress) => progress.reset_epoch = epoch,
                    None => warn!(%key, queue_id, "reset epoch without an offset; skipped"),
                }
            }
        }
        for (key, queues) in wrapper.acked_ranges_table.iter().flatten() {
            let Some((topic, group)) = split_topic_at_group(key) else {
                continue;
            };
            for (&queue_id, text) in queues {
                let Some(progress) = table
                    .topics
                    .get_mut(topic)
                    .and_then(|groups| groups.get_mut(group))
                    .and_then(|queues| queues.get_mut(&queue_id))
                else {
                    continue;
                };
                match AckedRanges::decode(progress.offset, text) {
                    Ok(acked) => progress.acked = acked,
                    Err(reason) => {
                        warn!(%key, queue_id, %reason, "acknowledged ranges unreadable; skipped")
                    }
                }
            }
        }
        table
    }

    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    /// How many (topic, group, queue) entries there are.
    pub fn entry_count(&self) -> usize {
        self.topics
            .values()
            .flat_map(|groups| groups.values())
            .map(BTreeMap::len)
            .sum()
    }

    /// The stored form of one queue's progress (what the journal records after a change).
    fn entry<'a>(
        &self,
        topic: &'a str,
        group: &'a str,
        queue_id: i32,
    ) -> Option<journal::ProgressEntry<'a>> {
        self.progress(topic, group, queue_id)
            .map(|progress| journal::ProgressEntry {
                topic,
                group,
                queue_id,
                offset: progress.offset,
                reset_epoch: progress.reset_epoch,
                acked: progress.acked.clone(),
            })
    }

    fn for_each_entry(&self, mut visit: impl FnMut(journal::ProgressEntry<'_>)) {
        for (topic, groups) in &self.topics {
            for (group, queues) in groups {
                for (&queue_id, progress) in queues {
                    visit(journal::ProgressEntry {
                        topic,
                        group,
                        queue_id,
                        offset: progress.offset,
                        reset_epoch: progress.reset_epoch,
                        acked: progress.acked.clone(),
                    });
                }
            }
        }
    }

    /// Sets one queue's stored progress as recovery read it (no rules: the journal holds
    /// results).
    fn restore_queue(&mut self, entry: &journal::ProgressEntry<'_>) {
        let progress = self
            .queues_mut(entry.topic, entry.group)
            .entry(entry.queue_id)
            .or_insert(QueueProgress::new(entry.offset));
        progress.offset = entry.offset;
        progress.reset_epoch = entry.reset_epoch;
        progress.acked = entry.acked.above(entry.offset);
    }
}

#[cfg(test)]
mod tests;
