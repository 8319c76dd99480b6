//! The Raft log and vote, kept in a [`Journal`]: each change (a vote, an entry, a truncation, a
//! purge, the commit point) is one journal record, and Raft hears an append is done only once
//! its records are synced. Compaction writes the whole retained log as the journal's snapshot;
//! Raft purges entries its own snapshots cover, so that stays small.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError};
use serde::{Deserialize, Serialize};
use tidemark_storage::io::Storage;
use tidemark_storage::journal::{
    Journal, JournalCodec, JournalError, JournalOptions, RecoveryReport, Ticket,
};
use tracing::warn;

use super::{LogId, RaftEntry, StorageError, TypeConfig, Vote};

/// What the journal's snapshot holds and its records change.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct LogContents {
    vote: Option<Vote>,
    committed: Option<LogId>,
    last_purged: Option<LogId>,
    entries: BTreeMap<u64, RaftEntry>,
}

/// One journal record.
#[derive(Debug, Serialize, Deserialize)]
enum LogChange {
    Vote(Vote),
    Committed(Option<LogId>),
    Append(RaftEntry),
    /// Removes the entries from this index on (a leader overwrote them).
    TruncateFrom(u64),
    /// Removes the entries up to this one, included (a snapshot covers them).
    PurgeThrough(LogId),
}

impl LogContents {
    fn change(&mut self, change: LogChange) {
        match change {
            LogChange::Vote(vote) => self.vote = Some(vote),
            LogChange::Committed(committed) => self.committed = committed,
            LogChange::Append(entry) => {
                self.entries.insert(entry.log_id.index, entry);
            }
            LogChange::TruncateFrom(index) => {
                self.entries.split_off(&index);
            }
            LogChange::PurgeThrough(log_id) => {
                self.entries = self.entries.split_off(&(log_id.index + 1));
                self.last_purged = Some(log_id);
            }
        }
    }
}

#[derive(Debug)]
struct LogCodec;

impl JournalCodec for LogCodec {
    type State = LogContents;

    fn fresh(&self) -> Result<LogContents, String> {
        Ok(LogContents::default())
    }

    fn restore(&self, snapshot: &[u8]) -> Result<LogContents, String> {
        serde_json::from_slice(snapshot).map_err(|error| error.to_string())
    }

    fn apply(&self, state: &mut LogContents, record: &[u8]) -> Result<(), String> {
        let change: LogChange =
            serde_json::from_slice(record).map_err(|error| error.to_string())?;
        state.change(change);
        Ok(())
    }

    fn snapshot(&self, state: &LogContents) -> Vec<u8> {
        // Integer-keyed maps of serde-derived types always encode; if that ever changed, the
        // controller must stop here rather than compact its log into an empty snapshot.
        serde_json::to_vec(state)
            .expect("the Raft log's contents encode as JSON (integer-keyed maps of derived types)")
    }
}

#[derive(Debug)]
struct Shared {
    journal: Journal,
    /// Changed only together with a journal append, so the journal's order is this order.
    contents: Mutex<LogContents>,
}

/// The controllers' Raft log (cheap to clone: readers share it).
#[derive(Debug, Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
}

impl LogStore {
    /// Opens (or creates) the log in `dir`. Blocking.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
    ) -> Result<(LogStore, RecoveryReport), JournalError> {
        let options = JournalOptions {
            compact_min_bytes: 1 << 20,
            ..JournalOptions::default()
        };
        let (journal, contents, report) =
            Journal::open(storage, dir, "raft-log", options, &LogCodec)?;
        Ok((
            LogStore {
                shared: Arc::new(Shared {
                    journal,
                    contents: Mutex::new(contents),
                }),
            },
            report,
        ))
    }

    /// Writes what is queued and stops the journal's writer.
    pub fn close(&self) {
        self.shared.journal.close();
    }

    fn contents(&self) -> MutexGuard<'_, LogContents> {
        self.shared
            .contents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Journals `changes` and applies them, in one critical section.
    fn record(&self, changes: Vec<LogChange>) -> Result<Ticket, JournalError> {
        let mut contents = self.contents();
        let mut ticket = self.shared.journal.last_ticket();
        for change in changes {
            let bytes = serde_json::to_vec(&change).map_err(|error| JournalError::Io {
                op: "encode",
                path: self.shared.journal.dir().to_path_buf(),
                source: Arc::new(io::Error::other(error)),
            })?;
            ticket = self.shared.journal.append(&bytes)?;
            contents.change(change);
        }
        Ok(ticket)
    }

    async fn record_durably(&self, changes: Vec<LogChange>) -> Result<(), JournalError> {
        let ticket = self.record(changes)?;
        self.shared.journal.durable(ticket).await?;
        self.compact_if_due();
        Ok(())
    }

    fn compact_if_due(&self) {
        if !self.shared.journal.compaction_due() {
            return;
        }
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            let result = store.shared.journal.compact(|cut| {
                let contents = store.contents();
                cut.cut();
                LogCodec.snapshot(&contents)
            });
            if let Err(error) = result {
                warn!(%error, "raft log compaction failed; the journal keeps growing until one works");
            }
        });
    }
}

fn write_error(error: JournalError) -> StorageError {
    StorageIOError::write_logs(&error).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<RaftEntry>, StorageError> {
        Ok(self
            .contents()
            .entries
            .range(range)
            .map(|(_, entry)| entry.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let contents = self.contents();
        let last_log_id = contents
            .entries
            .values()
            .next_back()
            .map(|entry| entry.log_id)
            .or(contents.last_purged);
        Ok(LogState {
            last_purged_log_id: contents.last_purged,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.record_durably(vec![LogChange::Vote(*vote)])
            .await
            .map_err(|error| StorageIOError::write_vote(&error).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.contents().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not waited for: a commit point lost in a crash is learnt again from the leader.
        self.record(vec![LogChange::Committed(committed)])
            .map(|_| ())
            .map_err(write_error)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.contents().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = RaftEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let changes = entries.into_iter().map(LogChange::Append).collect();
        match self.record_durably(changes).await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(error) => {
                callback.log_io_completed(Err(io::Error::other(error.to_string())));
                Err(write_error(error))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.record_durably(vec![LogChange::TruncateFrom(log_id.index)])
            .await
            .map_err(write_error)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.record_durably(vec![LogChange::PurgeThrough(log_id)])
            .await
            .map_err(write_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replicas::Command;
    use openraft::{CommittedLeaderId, EntryPayload};
    use tidemark_storage::io::FsStorage;

    fn entry(term: u64, index: u64) -> RaftEntry {
        RaftEntry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(Command::CleanBrokerData {
                broker_name: format!("b{index}"),
                broker_ids: None,
            }),
        }
    }

    #[tokio::test]
    async fn votes_entries_truncations_and_purges_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage: Arc<dyn Storage> = Arc::new(FsStorage);
        {
            let (mut log, _) = LogStore::open(storage.clone(), dir.path()).expect("open");
            log.save_vote(&Vote::new(3, 2)).await.expect("vote");
            let changes = (1..=6)
                .map(|index| LogChange::Append(entry(1, index)))
                .collect();
            log.record_durably(changes).await.expect("append");
            log.truncate(LogId::new(CommittedLeaderId::new(1, 1), 5))
                .await
                .expect("truncate");
            log.purge(LogId::new(CommittedLeaderId::new(1, 1), 2))
                .await
                .expect("purge");
            log.save_committed(Some(LogId::new(CommittedLeaderId::new(1, 1), 4)))
                .await
                .expect("commit");
            log.close();
        }
        let (mut log, report) = LogStore::open(storage, dir.path()).expect("reopen");
        assert!(report.damage.is_none(), "{report:?}");
        assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(3, 2)));
        let state = log.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id.map(|id| id.index), Some(2));
        assert_eq!(state.last_log_id.map(|id| id.index), Some(4));
        let indexes: Vec<u64> = log
            .try_get_log_entries(0..100)
            .await
            .expect("entries")
            .iter()
            .map(|entry| entry.log_id.index)
            .collect();
        assert_eq!(indexes, vec![3, 4]);
        assert_eq!(
            log.read_committed()
                .await
                .expect("committed")
                .map(|id| id.index),
            Some(4)
        );
    }
}
