//! The history between a master and its replicas (`progress_stream`): a master queues every
//! entry it records, and a whole copy when a replica connects; a replica applies them to its
//! own history and journal, so the history survives a failover with the offsets it explains.
//!
//! A replica keeps no history of its own meanwhile: it writes no checkpoints, and an entry it
//! recorded while a slave gives way to its master's entry of the same id.

use std::sync::Arc;

use tidemark_storage::journal::JournalCodec;
use tracing::{debug, warn};

use super::{HistoryCodec, HistoryEntry, ProgressHistory, ProgressOutbox};
use crate::progress_record::{STREAM_HISTORY, STREAM_HISTORY_WHOLE};

/// An entry's record past this size is not copied (a progress message holds 4 MiB): only an
/// entry naming some hundred thousand queues comes near it.
const RECORD_BYTES_MAX: usize = 3 << 20;

impl ProgressHistory {
    /// Every entry recorded from now on is also queued in `outbox` for the replicas.
    pub fn publish_to(&mut self, outbox: Arc<ProgressOutbox>) {
        self.outbox = Some(outbox);
    }

    /// Queues one entry's record; called under the lock.
    pub(super) fn publish(&self, record: &[u8]) {
        let Some(outbox) = &self.outbox else {
            return;
        };
        if record.len() > RECORD_BYTES_MAX {
            warn!(
                bytes = record.len(),
                "progress history entry too large to copy to the replicas; it is kept on this broker only"
            );
            return;
        }
        outbox.push(STREAM_HISTORY, record.to_vec());
    }

    /// Queues the whole history for the replicas: a marker that empties theirs, then every
    /// kept entry, under the lock so nothing recorded meanwhile lands out of order. Returns how
    /// many entries it queued.
    pub fn publish_whole(&self) -> usize {
        let Some(outbox) = &self.outbox else {
            return 0;
        };
        let kept = self.lock();
        outbox.push(
            STREAM_HISTORY_WHOLE,
            kept.log.next_id().to_be_bytes().to_vec(),
        );
        let mut queued = 0;
        for entry in kept.log.entries() {
            self.publish(&entry.record());
            queued += 1;
        }
        queued
    }

    /// Applies the master's entries and whole-copy markers in order, journaling them here (a
    /// marker by compacting the journal into a snapshot of what follows it in the batch).
    /// Returns how many records could not be read (skipped). Blocking.
    pub fn apply_replicated(&self, records: &[(u8, Vec<u8>)]) -> usize {
        let mut skipped = 0;
        let mut copied = false;
        let mut kept = self.lock();
        let bounds = kept.bounds;
        for (stream, bytes) in records {
            let applied = match *stream {
                STREAM_HISTORY => HistoryEntry::from_record(bytes).map(|entry| {
                    if let Some(journal) = &self.journal {
                        if let Err(failure) = journal.append(bytes) {
                            warn!(%failure, id = entry.id, "replicated progress history entry not journaled");
                        }
                    }
                    kept.log.push(entry, &bounds);
                }),
                STREAM_HISTORY_WHOLE => whole_marker(bytes).map(|next_id| {
                    kept.log.clear(next_id);
                    copied = true;
                }),
                other => Err(format!("not a history stream: {other}")),
            };
            if let Err(error) = applied {
                debug!(%error, "unreadable progress history record");
                skipped += 1;
            }
        }
        drop(kept);
        if copied {
            self.journal_whole();
        }
        skipped
    }

    /// After a whole copy: the journal restarts from a snapshot of the history as it is now,
    /// so what the replica had before the copy does not come back at a restart.
    fn journal_whole(&self) {
        let Some(journal) = &self.journal else {
            return;
        };
        let compacted = journal.compact(|cut| {
            let kept = self.lock();
            cut.cut();
            HistoryCodec {
                bounds: kept.bounds,
            }
            .snapshot(&kept.log)
        });
        if let Err(failure) = compacted {
            warn!(%failure, "the master's progress history is applied but not journaled");
        }
    }
}

fn whole_marker(bytes: &[u8]) -> Result<u64, String> {
    let array: [u8; 8] = bytes
        .try_into()
        .map_err(|_| format!("history copy marker of {} bytes", bytes.len()))?;
    Ok(u64::from_be_bytes(array))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use tidemark_storage::journal::JournalOptions;
    use tidemark_storage::sim::SimStorage;

    use super::*;
    use crate::history::{Actor, ChangeKind, HistoryBounds, QueueMove};

    const BOUNDS: HistoryBounds = HistoryBounds {
        max_bytes: 1 << 20,
        max_age_ms: i64::MAX / 2,
    };

    fn open(storage: &SimStorage, name: &str) -> ProgressHistory {
        ProgressHistory::open(
            Arc::new(storage.clone()),
            &Path::new("/").join(name),
            JournalOptions {
                group_commit_window: std::time::Duration::ZERO,
                compact_min_bytes: 1 << 20,
            },
            BOUNDS,
            60_000,
        )
        .expect("opens")
        .0
    }

    fn reset(history: &ProgressHistory, time_ms: i64, after: i64) -> u64 {
        history
            .record(
                time_ms,
                "g",
                ChangeKind::Reset,
                222,
                Actor::default(),
                vec![QueueMove {
                    topic: "T".to_owned(),
                    queue_id: 0,
                    before: None,
                    after: Some(after),
                }],
            )
            .0
    }

    /// What `outbox` holds, in order, taken out.
    fn drain(outbox: &ProgressOutbox) -> Vec<(u8, Vec<u8>)> {
        let mut records = Vec::new();
        while let Some(batch) = outbox.take(usize::MAX) {
            records.extend(batch.records.into_iter().map(|r| (r.stream, r.bytes)));
        }
        records
    }

    fn ids(history: &ProgressHistory) -> Vec<(u64, Option<i64>)> {
        history
            .entries("g", 0, true)
            .iter()
            .map(|entry| (entry.id, entry.queues[0].after))
            .collect()
    }

    #[test]
    fn a_replica_keeps_its_masters_history_across_its_restart() {
        let storage = SimStorage::new();
        let outbox = Arc::new(ProgressOutbox::default());
        let mut master = open(&storage, "master");
        master.publish_to(outbox.clone());
        reset(&master, 1_000, 10);
        reset(&master, 2_000, 20);
        let replica = open(&storage, "replica");
        assert_eq!(replica.apply_replicated(&drain(&outbox)), 0);
        assert_eq!(ids(&replica), ids(&master));
        replica.close();
        let reopened = open(&storage, "replica");
        assert_eq!(ids(&reopened), vec![(0, Some(10)), (1, Some(20))]);
    }

    #[test]
    fn a_whole_copy_replaces_what_the_replica_had_and_its_own_entries_give_way() {
        let storage = SimStorage::new();
        let outbox = Arc::new(ProgressOutbox::default());
        let mut master = open(&storage, "master");
        master.publish_to(outbox.clone());
        reset(&master, 1_000, 10);
        drain(&outbox);
        // The replica recorded entries of its own (it was master once) with the same ids.
        let replica = open(&storage, "replica");
        reset(&replica, 500, 99);
        reset(&replica, 600, 98);
        reset(&replica, 700, 97);
        // The master's next entry takes id 1: the replica's 1 and 2 give way.
        reset(&master, 2_000, 20);
        replica.apply_replicated(&drain(&outbox));
        assert_eq!(ids(&replica), vec![(0, Some(99)), (1, Some(20))]);
        assert_eq!(master.publish_whole(), 2);
        assert_eq!(replica.apply_replicated(&drain(&outbox)), 0);
        assert_eq!(ids(&replica), ids(&master));
        replica.close();
        let reopened = open(&storage, "replica");
        assert_eq!(ids(&reopened), vec![(0, Some(10)), (1, Some(20))]);
        // Ids go on where the master's did.
        assert_eq!(reset(&reopened, 3_000, 30), 2);
    }

    #[test]
    fn damaged_records_are_skipped_not_applied() {
        let replica = open(&SimStorage::new(), "replica");
        let skipped = replica.apply_replicated(&[
            (STREAM_HISTORY, vec![1, 2, 3]),
            (STREAM_HISTORY_WHOLE, vec![0; 3]),
            (99, Vec::new()),
        ]);
        assert_eq!(skipped, 3);
        assert!(replica.entries("g", 0, true).is_empty());
    }
}
