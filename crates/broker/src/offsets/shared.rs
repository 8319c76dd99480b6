//! The broker's one instance of the offset table, behind its own lock, with the offset journal
//! that makes every change durable, the revision the `consumerOffset.json` export watches, and
//! the log lines a commit's outcome deserves.
//!
//! Lock order: the table's lock, then the journal's queue lock (inside [`Journal::append`]),
//! so the journal holds changes in the order they were applied. Nothing else is taken inside.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tidemark_storage::io::Storage;
use tidemark_storage::journal::{Journal, JournalError, JournalOptions, RecoveryReport, Ticket};
use tracing::{debug, info, warn};

use super::journal::{
    decode_record, encode_snapshot, group_removed_record, queue_progress_record,
    replica_position_record, topic_removed_record, OffsetJournalCodec, Record,
};
use super::merge::Incoming;
use super::{
    AheadOfMaster, CommitOutcome, CommittedOffset, Committer, ConsumerOffsetTable, QueueProgress,
    StuckQueue,
};
use crate::lock_rank::{self, Rank, Ranked};
use crate::progress_record::{ProgressOutbox, STREAM_CONSUMER_OFFSETS};
use tidemark_protocol::acked::AckedRanges;

/// The broker's consumer offsets: a [`ConsumerOffsetTable`] behind its own lock, journaled.
/// Every operation is atomic and returns copies.
#[derive(Debug)]
pub struct ConsumerOffsets {
    inner: Mutex<Revised>,
    /// `None` only for tables that need not survive (tests of the rules).
    journal: Option<Journal>,
    /// Where every journaled change is also queued for the replicas (`progress_stream`);
    /// `None` for tables without replicas to tell (tests of the rules).
    outbox: Option<Arc<ProgressOutbox>>,
}

#[derive(Debug, Default)]
struct Revised {
    table: ConsumerOffsetTable,
    /// Moves whenever a stored value changes; the JSON export is rewritten when it moved.
    revision: u64,
}

/// Where a change stands in the journal: what a caller that must answer only once it is durable
/// waits on with [`ConsumerOffsets::durable`].
#[derive(Debug, Clone)]
pub enum Journaled {
    /// Nothing to wait for (no journal).
    Nothing,
    /// Durable once this ticket is: the change's own record, or — for a change that stored
    /// nothing new — the last record appended before it, which holds the value it confirmed.
    Pending(Ticket),
    /// The change is applied in memory but could not be journaled.
    Failed(JournalError),
}

impl ConsumerOffsets {
    /// A table kept only in memory.
    pub fn in_memory(table: ConsumerOffsetTable) -> Self {
        Self {
            inner: Mutex::new(Revised { table, revision: 0 }),
            journal: None,
            outbox: None,
        }
    }

    /// Recovers the table from the offset journal in `dir` (snapshot + later records). A
    /// directory with no journal yet starts from `import` (the `consumerOffset.json` of an
    /// Apache store or of an older Tidemark). Blocking.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        options: JournalOptions,
        import: &dyn Fn() -> Result<ConsumerOffsetTable, String>,
    ) -> Result<(Self, RecoveryReport), JournalError> {
        let codec = OffsetJournalCodec { import };
        let (journal, table, report) = Journal::open(storage, dir, "offsets", options, &codec)?;
        Ok((
            Self {
                inner: Mutex::new(Revised { table, revision: 0 }),
                journal: Some(journal),
                outbox: None,
            },
            report,
        ))
    }

    /// Every change journaled from now on is also queued in `outbox` for the replicas.
    pub fn publish_to(&mut self, outbox: Arc<ProgressOutbox>) {
        self.outbox = Some(outbox);
    }

    fn lock(&self) -> Ranked<'_, Revised> {
        lock_rank::lock(&self.inner, Rank::Table)
    }

    /// Journals a record and queues it for the replicas (under the table's lock, so both
    /// orders are the table's).
    fn journal(&self, record: Option<Vec<u8>>) -> Journaled {
        if let (Some(outbox), Some(record)) = (&self.outbox, &record) {
            outbox.push(STREAM_CONSUMER_OFFSETS, record.clone());
        }
        self.journal_here(record)
    }

    /// Journals a record that is this broker's alone (what it applied of its master's stream).
    fn journal_here(&self, record: Option<Vec<u8>>) -> Journaled {
        let Some(journal) = &self.journal else {
            return Journaled::Nothing;
        };
        let appended = match record {
            Some(record) => journal.append(&record),
            None => Ok(journal.last_ticket()),
        };
        match appended {
            Ok(ticket) => Journaled::Pending(ticket),
            Err(failure) => {
                warn!(%failure, "consumer progress change not journaled; it holds in memory only, and a restart before a later change or compaction records it loses it");
                Journaled::Failed(failure)
            }
        }
    }

    /// Records one queue's progress as it is now.
    fn journal_queue(&self, inner: &Revised, topic: &str, group: &str, queue_id: i32) -> Journaled {
        let record = inner
            .table
            .entry(topic, group, queue_id)
            .map(|entry| queue_progress_record(&entry));
        self.journal(record)
    }

    /// Resolves once `journaled` is durable.
    pub async fn durable(&self, journaled: Journaled) -> Result<(), JournalError> {
        match (journaled, &self.journal) {
            (Journaled::Pending(ticket), Some(journal)) => journal.durable(ticket).await,
            (Journaled::Failed(failure), _) => Err(failure),
            _ => Ok(()),
        }
    }

    /// The one way a commit is applied, from UPDATE_CONSUMER_OFFSET and from a pull alike:
    /// [`ConsumerOffsetTable::commit_by`], then the acknowledged ranges it carries unless the
    /// commit was refused; a stored change is journaled and moves the revision.
    #[allow(clippy::too_many_arguments)]
    pub fn commit(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        offset: i64,
        queue_max_offset: i64,
        now_ms: i64,
        committer: Committer,
        acked: Option<&AckedRanges>,
    ) -> (CommitOutcome, Journaled) {
        let mut inner = self.lock();
        let outcome = inner.table.commit_by(
            topic,
            group,
            queue_id,
            offset,
            queue_max_offset,
            now_ms,
            committer,
        );
        let mut changed = match outcome {
            CommitOutcome::Advanced { previous } => previous != offset,
            other => other.stored(),
        };
        let refused = matches!(
            outcome,
            CommitOutcome::IgnoredBackwards { .. }
                | CommitOutcome::IgnoredDuringReset { .. }
                | CommitOutcome::Rejected
        );
        if let Some(acked) = acked.filter(|acked| !refused && !acked.is_empty()) {
            changed |= inner.table.note_acked(topic, group, queue_id, acked);
        }
        let journaled = if changed {
            inner.revision += 1;
            self.journal_queue(&inner, topic, group, queue_id)
        } else {
            self.journal(None)
        };
        drop(inner);
        match outcome {
            CommitOutcome::IgnoredBackwards { stored } => {
                debug!(%group, %topic, queue = queue_id, commit = offset, stored, "backwards commit from a former consumer ignored");
            }
            CommitOutcome::Rewound { previous } => {
                info!(%group, %topic, queue = queue_id, from = previous, to = offset, ?committer, "consumer offset rewound deliberately");
            }
            _ => {}
        }
        (outcome, journaled)
    }

    pub fn note_puller(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        connection: u64,
        hands_off: bool,
        is_live: impl Fn(u64) -> bool,
    ) {
        self.lock()
            .table
            .note_puller(topic, group, queue_id, connection, hands_off, is_live);
    }

    /// [`ConsumerOffsetTable::note_pulled`].
    pub fn note_pulled(&self, topic: &str, group: &str, queue_id: i32, next: i64) {
        self.lock().table.note_pulled(topic, group, queue_id, next);
    }

    /// [`ConsumerOffsetTable::take_pull_redirect`].
    pub fn take_pull_redirect(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        requested: i64,
    ) -> Option<i64> {
        self.lock()
            .table
            .take_pull_redirect(topic, group, queue_id, requested)
    }

    /// [`ConsumerOffsetTable::claim`].
    pub fn claim(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        connection: u64,
        is_live: impl Fn(u64) -> bool,
    ) -> Option<u64> {
        self.lock()
            .table
            .claim(topic, group, queue_id, connection, is_live)
    }

    /// [`ConsumerOffsetTable::release`].
    pub fn release(&self, topic: &str, group: &str, queue_id: i32, connection: u64) {
        self.lock()
            .table
            .release(topic, group, queue_id, connection);
    }

    /// [`ConsumerOffsetTable::holder`].
    pub fn holder(&self, topic: &str, group: &str, queue_id: i32) -> Option<u64> {
        self.lock().table.holder(topic, group, queue_id)
    }

    pub fn is_current_consumer(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        connection: u64,
    ) -> bool {
        self.lock()
            .table
            .is_current_consumer(topic, group, queue_id, connection)
    }

    /// An operator's move of one queue (either way, fenced against stale commits); returns the
    /// offset it replaced.
    pub fn reset(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        offset: i64,
        now_ms: i64,
    ) -> (Option<i64>, Journaled) {
        let mut inner = self.lock();
        let previous = inner.table.query(topic, group, queue_id);
        inner.table.reset(topic, group, queue_id, offset, now_ms);
        inner.revision += 1;
        (previous, self.journal_queue(&inner, topic, group, queue_id))
    }

    pub fn query(&self, topic: &str, group: &str, queue_id: i32) -> Option<i64> {
        self.lock().table.query(topic, group, queue_id)
    }

    /// [`ConsumerOffsetTable::newly_stuck`].
    pub fn newly_stuck(&self, now_ms: i64, threshold_ms: i64, started_ms: i64) -> Vec<StuckQueue> {
        self.lock()
            .table
            .newly_stuck(now_ms, threshold_ms, started_ms)
    }

    /// A copy of a queue's whole stored progress (offset, acknowledged ranges, epochs).
    pub fn queue_progress(&self, topic: &str, group: &str, queue_id: i32) -> Option<QueueProgress> {
        self.lock().table.queue_progress(topic, group, queue_id)
    }

    pub fn queue_offsets(&self, topic: &str, group: &str) -> Option<BTreeMap<i32, i64>> {
        self.lock().table.queue_offsets(topic, group)
    }

    pub fn topics_of_group(&self, group: &str) -> Vec<String> {
        self.lock().table.topics_of_group(group)
    }

    pub fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        self.lock().table.groups_of_topic(topic)
    }

    /// Removes `group`'s offsets; returns what they were.
    pub fn drop_group(&self, group: &str) -> (Vec<CommittedOffset>, Journaled) {
        let mut inner = self.lock();
        let dropped = committed_where(&inner.table, |_, entry_group| entry_group == group);
        inner.table.drop_group(group);
        inner.revision += 1;
        (dropped, self.journal(Some(group_removed_record(group))))
    }

    /// Removes every group's offsets in `topic`; returns what they were.
    pub fn drop_topic(&self, topic: &str) -> (Vec<CommittedOffset>, Journaled) {
        let mut inner = self.lock();
        let dropped = committed_where(&inner.table, |entry_topic, _| entry_topic == topic);
        inner.table.drop_topic(topic);
        inner.revision += 1;
        (dropped, self.journal(Some(topic_removed_record(topic))))
    }

    /// Every queue's committed offset (for a history checkpoint).
    pub fn committed(&self) -> Vec<CommittedOffset> {
        committed_where(&self.lock().table, |_, _| true)
    }

    /// [`ConsumerOffsetTable::merge_from_master`]; every value it changed is journaled.
    pub fn merge_from_master(&self, master: &ConsumerOffsetTable) -> Vec<AheadOfMaster> {
        self.merge_journaled(master).0
    }

    /// [`ConsumerOffsetTable::ahead_of`].
    pub fn ahead_of(&self, master: &ConsumerOffsetTable) -> Vec<AheadOfMaster> {
        self.lock().table.ahead_of(master)
    }

    /// [`ConsumerOffsetTable::merge`] under the lock, journaling every queue it changed.
    fn merge_journaled(&self, other: &ConsumerOffsetTable) -> (Vec<AheadOfMaster>, usize) {
        let mut inner = self.lock();
        let (ahead, changed) = inner.table.merge(other);
        if !changed.is_empty() {
            inner.revision += 1;
            for (topic, group, queue_id) in &changed {
                self.journal_queue(&inner, topic, group, *queue_id);
            }
        }
        (ahead, changed.len())
    }

    /// A returning master takes a slave's progress: the same merge as
    /// [`merge_from_master`](Self::merge_from_master), the other way round; returns how many
    /// queue entries changed (each journaled).
    pub fn merge_from_peer(&self, peer: &ConsumerOffsetTable) -> usize {
        self.merge_journaled(peer).1
    }

    /// Applies records of the master's progress stream by the merge rule (removals as they
    /// come) and moves the replica position to `next_position`, journaling what changed but
    /// queuing none of it for replicas. Returns how many records could not be read (skipped).
    pub fn apply_replicated(&self, records: &[Vec<u8>], next_position: i64, now_ms: i64) -> usize {
        let mut inner = self.lock();
        let mut skipped = 0;
        let mut changed = false;
        for bytes in records {
            let record = match decode_record(bytes) {
                Ok(record) => record,
                Err(error) => {
                    debug!(%error, "unreadable progress record");
                    skipped += 1;
                    continue;
                }
            };
            match record {
                Record::QueueProgress(entry) => {
                    let incoming = Incoming {
                        offset: entry.offset,
                        reset_epoch: entry.reset_epoch,
                        acked: &entry.acked,
                        offset_moved_ms: now_ms,
                    };
                    let (topic, group, queue_id) = (entry.topic, entry.group, entry.queue_id);
                    if inner.table.merge_entry(topic, group, queue_id, incoming) {
                        changed = true;
                        let mine = inner.table.entry(topic, group, queue_id);
                        self.journal_here(mine.map(|entry| queue_progress_record(&entry)));
                    }
                }
                Record::GroupRemoved(group) => {
                    changed |= inner.table.drop_group(group) > 0;
                    self.journal_here(Some(group_removed_record(group)));
                }
                Record::TopicRemoved(topic) => {
                    changed |= inner.table.drop_topic(topic) > 0;
                    self.journal_here(Some(topic_removed_record(topic)));
                }
                // Not something a master publishes.
                Record::ReplicaPosition(_) => skipped += 1,
            }
        }
        if changed {
            inner.revision += 1;
        }
        self.move_replica_position(&mut inner, next_position);
        skipped
    }

    fn move_replica_position(&self, inner: &mut Revised, position: i64) {
        if inner.table.replica_position != position {
            inner.table.replica_position = position;
            self.journal_here(Some(replica_position_record(position)));
        }
    }

    /// Where this replica is in its master's progress stream.
    pub fn replica_position(&self) -> i64 {
        self.lock().table.replica_position()
    }

    /// Moves the replica position without applying anything (the log was cut back, or
    /// retention removed messages before they were applied).
    pub fn set_replica_position(&self, position: i64) {
        let mut inner = self.lock();
        self.move_replica_position(&mut inner, position);
    }

    /// [`ConsumerOffsetTable::forfeit_rewinds`], journaled: before a replica follows a master
    /// (controller mode), so the master's whole tables, published when it connects, decide.
    /// Returns how many queues changed. Blocking (journal appends).
    pub fn forfeit_rewinds(&self) -> usize {
        let mut inner = self.lock();
        let changed = inner.table.forfeit_rewinds();
        for (topic, group, queue_id) in &changed {
            let record = inner
                .table
                .entry(topic, group, *queue_id)
                .map(|entry| queue_progress_record(&entry));
            self.journal_here(record);
        }
        if !changed.is_empty() {
            inner.revision += 1;
        }
        changed.len()
    }

    /// Queues every queue's progress for the replicas, under the table's lock so the copy sits
    /// in the stream where the table was; returns how many entries. A replica merges them like
    /// any change (what it holds and the master does not stays).
    pub fn publish_whole(&self) -> usize {
        let Some(outbox) = &self.outbox else {
            return 0;
        };
        let inner = self.lock();
        inner.table.for_each_entry(|entry| {
            outbox.push(STREAM_CONSUMER_OFFSETS, queue_progress_record(&entry));
        });
        inner.table.entry_count()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().table.is_empty()
    }

    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// A copy of the table and the revision it shows; converting and encoding it happen after
    /// the lock is released.
    pub fn snapshot(&self) -> (u64, ConsumerOffsetTable) {
        let inner = self.lock();
        (inner.revision, inner.table.clone())
    }

    /// Compacts the journal into a snapshot when enough was appended since the last one;
    /// returns whether it did. The table is encoded under its lock (about as fast as copying
    /// it), at the cut. Blocking.
    pub fn compact_if_due(&self) -> Result<bool, JournalError> {
        let Some(journal) = &self.journal else {
            return Ok(false);
        };
        if !journal.compaction_due() {
            return Ok(false);
        }
        journal.compact(|cut| {
            let inner = self.lock();
            cut.cut();
            encode_snapshot(&inner.table)
        })?;
        Ok(true)
    }

    /// Makes everything journaled so far durable and stops the journal's writer. Blocking.
    pub fn close(&self) {
        if let Some(journal) = &self.journal {
            journal.close();
        }
    }
}

/// The committed offsets of the (topic, group) pairs `matches` takes.
fn committed_where(
    table: &ConsumerOffsetTable,
    matches: impl Fn(&str, &str) -> bool,
) -> Vec<CommittedOffset> {
    let mut found = Vec::new();
    table.for_each_entry(|entry| {
        if matches(entry.topic, entry.group) {
            found.push(CommittedOffset {
                group: entry.group.to_owned(),
                topic: entry.topic.to_owned(),
                queue_id: entry.queue_id,
                offset: entry.offset,
            });
        }
    });
    found
}
