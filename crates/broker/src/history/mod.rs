//! Progress history: every change of a group's committed progress that is not a routine
//! commit — an operator's reset, skip or clone, a deliberate rewind, a group or topic deleted —
//! with when, who (account, address, client), the request, and each queue's offset before and
//! after; plus checkpoints of routine progress, at most one an interval for each queue that
//! moved, so where a group stood at any time the history covers is known to within that
//! interval. Journaled in its own journal (`config/progressHistory/`, crash-safe like the offset
//! journal's), bounded by size and age.
//!
//! RocketMQ records none of this: a reset is irreversible and leaves no trace but a log line.
//!
//! Lock order: the history's lock, then the journal's queue lock (inside [`Journal::append`]).
//! It is a table lock of its own, never taken under the offset table's: callers change the
//! offsets first, then record what changed.

mod actor;
pub use actor::GATEWAY_ACCOUNT;
mod entry;
mod log;
mod replica;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tidemark_storage::io::Storage;
use tidemark_storage::journal::{Journal, JournalError, JournalOptions, RecoveryReport};
use tracing::warn;

pub use entry::{Actor, ChangeKind, HistoryEntry, QueueMove};
pub use log::{HistoryBounds, HistoryCodec, HistoryLog};

use crate::lock_rank::{self, Rank, Ranked};
use crate::offsets::{CommittedOffset, Journaled};
use crate::progress_record::ProgressOutbox;

/// Queues one checkpoint entry names at most.
const CHECKPOINT_QUEUES_MAX: usize = 4096;

/// The broker's progress history: a [`HistoryLog`] behind its own lock, journaled.
#[derive(Debug)]
pub struct ProgressHistory {
    inner: Mutex<Kept>,
    /// `None` for a history that need not survive (tests).
    journal: Option<Journal>,
    /// Where every entry also goes, for the replicas (see [`replica`]).
    outbox: Option<Arc<ProgressOutbox>>,
}

#[derive(Debug)]
struct Kept {
    log: HistoryLog,
    bounds: HistoryBounds,
    /// How often routine progress is checkpointed.
    checkpoint_interval_ms: i64,
    /// When the last checkpoint was written.
    last_checkpoint_ms: i64,
    /// Changes recorded here since the broker started, per group and kind (metrics).
    changes: BTreeMap<(String, ChangeKind), u64>,
    /// Messages resent or replayed since the broker started, per group and kind (metrics).
    resent: BTreeMap<(String, ChangeKind), u64>,
}

impl ProgressHistory {
    /// A history kept only in memory, checkpointing every `checkpoint_interval_ms`.
    pub fn in_memory(bounds: HistoryBounds, checkpoint_interval_ms: i64) -> Self {
        Self {
            inner: Mutex::new(Kept {
                log: HistoryLog::default(),
                bounds,
                checkpoint_interval_ms,
                last_checkpoint_ms: i64::MIN,
                changes: BTreeMap::new(),
                resent: BTreeMap::new(),
            }),
            journal: None,
            outbox: None,
        }
    }

    /// Recovers the history journaled in `dir`. Blocking.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        options: JournalOptions,
        bounds: HistoryBounds,
        checkpoint_interval_ms: i64,
    ) -> Result<(Self, RecoveryReport), JournalError> {
        let codec = HistoryCodec { bounds };
        let (journal, log, report) = Journal::open(storage, dir, "history", options, &codec)?;
        Ok((
            Self {
                inner: Mutex::new(Kept {
                    log,
                    bounds,
                    checkpoint_interval_ms,
                    last_checkpoint_ms: i64::MIN,
                    changes: BTreeMap::new(),
                    resent: BTreeMap::new(),
                }),
                journal: Some(journal),
                outbox: None,
            },
            report,
        ))
    }

    fn lock(&self) -> Ranked<'_, Kept> {
        lock_rank::lock(&self.inner, Rank::Table)
    }

    /// Records one change; returns its id and where its record stands in the journal. A change
    /// that moved no queue is recorded too: someone asked for it.
    pub fn record(
        &self,
        time_ms: i64,
        group: &str,
        kind: ChangeKind,
        request_code: i32,
        actor: Actor,
        queues: Vec<QueueMove>,
    ) -> (u64, Journaled) {
        self.record_with_detail(
            time_ms,
            group,
            kind,
            request_code,
            actor,
            queues,
            String::new(),
        )
    }

    /// [`record`](Self::record) with a detail (what a resend sent, and where).
    #[allow(clippy::too_many_arguments)]
    pub fn record_with_detail(
        &self,
        time_ms: i64,
        group: &str,
        kind: ChangeKind,
        request_code: i32,
        actor: Actor,
        queues: Vec<QueueMove>,
        detail: String,
    ) -> (u64, Journaled) {
        let mut kept = self.lock();
        let entry = HistoryEntry {
            id: kept.log.next_id(),
            time_ms,
            group: group.to_owned(),
            kind,
            request_code,
            actor,
            queues,
            detail,
        };
        let id = entry.id;
        *kept.changes.entry((group.to_owned(), kind)).or_default() += 1;
        let journaled = self.append(&entry);
        let bounds = kept.bounds;
        kept.log.push(entry, &bounds);
        (id, journaled)
    }

    /// Records offsets a deletion removed: one entry for each group they belonged to. Returns
    /// where the last one stands (its ticket covers the others).
    pub fn record_removed(
        &self,
        time_ms: i64,
        kind: ChangeKind,
        request_code: i32,
        actor: &Actor,
        removed: &[CommittedOffset],
    ) -> Journaled {
        let mut by_group: BTreeMap<&str, Vec<QueueMove>> = BTreeMap::new();
        for queue in removed {
            by_group.entry(&queue.group).or_default().push(QueueMove {
                topic: queue.topic.clone(),
                queue_id: queue.queue_id,
                before: Some(queue.offset),
                after: None,
            });
        }
        let mut journaled = Journaled::Nothing;
        for (group, queues) in by_group {
            journaled = self
                .record(time_ms, group, kind, request_code, actor.clone(), queues)
                .1;
        }
        journaled
    }

    /// Journals an entry and queues it for the replicas; called under the lock, so entries
    /// reach the stream in id order.
    fn append(&self, entry: &HistoryEntry) -> Journaled {
        let record = entry.record();
        self.publish(&record);
        let Some(journal) = &self.journal else {
            return Journaled::Nothing;
        };
        match journal.append(&record) {
            Ok(ticket) => Journaled::Pending(ticket),
            Err(failure) => {
                warn!(%failure, group = %entry.group, kind = entry.kind.name(), "progress history entry not journaled; it is kept in memory only until a restart");
                Journaled::Failed(failure)
            }
        }
    }

    /// Counts `messages` a resend or replay (`kind`) of `group`'s stored (metrics).
    pub fn count_resent(&self, group: &str, kind: ChangeKind, messages: u64) {
        *self
            .lock()
            .resent
            .entry((group.to_owned(), kind))
            .or_default() += messages;
    }

    /// Operator changes recorded on this broker since it started: (group, kind, count).
    pub fn changes_counted(&self) -> Vec<(String, &'static str, u64)> {
        let kept = self.lock();
        kept.changes
            .iter()
            .map(|((group, kind), count)| (group.clone(), kind.name(), *count))
            .collect()
    }

    /// Messages resent or replayed on this broker since it started: (group, kind, count).
    pub fn resent_counted(&self) -> Vec<(String, &'static str, u64)> {
        let kept = self.lock();
        kept.resent
            .iter()
            .map(|((group, kind), count)| (group.clone(), kind.name(), *count))
            .collect()
    }

    /// Whether [`checkpoint`](Self::checkpoint) would write now (so callers copy the offsets
    /// only then).
    pub fn checkpoint_due(&self, now_ms: i64) -> bool {
        let kept = self.lock();
        now_ms.saturating_sub(kept.last_checkpoint_ms) >= kept.checkpoint_interval_ms
    }

    /// Writes a checkpoint of every queue in `committed` whose offset moved since the history
    /// last named it, one entry per group (per 4,096 of its queues), once the checkpoint
    /// interval passed since the last one; returns how many entries it wrote.
    pub fn checkpoint(&self, now_ms: i64, committed: &[CommittedOffset]) -> usize {
        let mut kept = self.lock();
        if now_ms.saturating_sub(kept.last_checkpoint_ms) < kept.checkpoint_interval_ms {
            return 0;
        }
        kept.last_checkpoint_ms = now_ms;
        let bounds = kept.bounds;
        kept.log.expire(now_ms, &bounds);
        let mut moved: BTreeMap<&str, Vec<QueueMove>> = BTreeMap::new();
        for queue in committed {
            let known = kept
                .log
                .last_known(&queue.group, &queue.topic, queue.queue_id);
            if known == Some(Some(queue.offset)) {
                continue;
            }
            moved.entry(&queue.group).or_default().push(QueueMove {
                topic: queue.topic.clone(),
                queue_id: queue.queue_id,
                before: known.flatten(),
                after: Some(queue.offset),
            });
        }
        let mut written = 0;
        // A group with very many queues checkpoints in several entries: each stays small enough
        // for a progress message to its replicas (checkpoints are never undone by id).
        let chunks = moved.into_iter().flat_map(|(group, queues)| {
            let mut queues = queues.into_iter().peekable();
            std::iter::from_fn(move || {
                queues.peek()?;
                Some((
                    group,
                    queues
                        .by_ref()
                        .take(CHECKPOINT_QUEUES_MAX)
                        .collect::<Vec<_>>(),
                ))
            })
        });
        for (group, queues) in chunks {
            written += 1;
            let entry = HistoryEntry {
                id: kept.log.next_id(),
                time_ms: now_ms,
                group: group.to_owned(),
                kind: ChangeKind::Checkpoint,
                request_code: 0,
                actor: Actor {
                    account: "broker".to_owned(),
                    ..Actor::default()
                },
                queues,
                detail: String::new(),
            };
            self.append(&entry);
            kept.log.push(entry, &bounds);
        }
        written
    }

    /// `group`'s entries at or after `since_ms`, oldest first; checkpoints only if asked.
    pub fn entries(&self, group: &str, since_ms: i64, checkpoints: bool) -> Vec<HistoryEntry> {
        self.lock()
            .log
            .entries()
            .filter(|entry| entry.group == group && entry.time_ms >= since_ms)
            .filter(|entry| checkpoints || entry.kind != ChangeKind::Checkpoint)
            .cloned()
            .collect()
    }

    /// The entry with this id, if the history still keeps it.
    pub fn entry(&self, id: u64) -> Option<HistoryEntry> {
        self.lock()
            .log
            .entries()
            .find(|entry| entry.id == id)
            .cloned()
    }

    /// [`HistoryLog::position_at`].
    pub fn position_at(
        &self,
        group: &str,
        topic: Option<&str>,
        time_ms: i64,
    ) -> BTreeMap<(String, i32), Option<i64>> {
        self.lock().log.position_at(group, topic, time_ms)
    }

    /// Resolves once `journaled` is durable.
    pub async fn durable(&self, journaled: Journaled) -> Result<(), JournalError> {
        match (journaled, &self.journal) {
            (Journaled::Pending(ticket), Some(journal)) => journal.durable(ticket).await,
            (Journaled::Failed(failure), _) => Err(failure),
            _ => Ok(()),
        }
    }

    /// Drops what is past the age bound and compacts the journal when due. Blocking.
    pub fn compact_if_due(&self, now_ms: i64) -> Result<bool, JournalError> {
        let Some(journal) = &self.journal else {
            return Ok(false);
        };
        if !journal.compaction_due() {
            return Ok(false);
        }
        journal.compact(|cut| {
            let mut kept = self.lock();
            let bounds = kept.bounds;
            kept.log.expire(now_ms, &bounds);
            cut.cut();
            use tidemark_storage::journal::JournalCodec;
            HistoryCodec { bounds }.snapshot(&kept.log)
        })?;
        Ok(true)
    }

    /// Makes every entry journaled so far durable and stops the journal. Blocking.
    pub fn close(&self) {
        if let Some(journal) = &self.journal {
            journal.close();
        }
    }
}

#[cfg(test)]
mod tests;
