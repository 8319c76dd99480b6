//! The replicated state machine: [`ReplicaSets`] plus what Raft needs to know about it (the
//! last applied entry and membership). It lives in memory; its snapshots are written to one
//! file, replaced atomically, and a restart loads that file and has Raft apply the rest of the
//! log again.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};
use tidemark_storage::atomic_file::{self, PersistError};
use tidemark_storage::io::Storage;

use super::{LogId, Membership, NodeId, RaftEntry, StorageError, TypeConfig};
use crate::replicas::{Applied, ReplicaSets};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct MachineState {
    last_applied: Option<LogId>,
    membership: Membership,
    replicas: ReplicaSets,
}

/// A snapshot as written to the file and sent to peers.
#[derive(Debug, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, openraft::BasicNode>,
    state: MachineState,
}

#[derive(Debug)]
struct Shared {
    storage: Arc<dyn Storage>,
    snapshot_path: PathBuf,
    state: Mutex<MachineState>,
    snapshots_built: AtomicU64,
}

/// The state machine (cheap to clone; the server reads through [`read`](Self::read)).
#[derive(Debug, Clone)]
pub struct StateMachineStore {
    shared: Arc<Shared>,
}

impl StateMachineStore {
    /// Loads the last snapshot in `dir`, if any. Blocking.
    pub fn open(storage: Arc<dyn Storage>, dir: &Path) -> Result<StateMachineStore, PersistError> {
        let snapshot_path = dir.join("state-machine.snapshot");
        let loaded = atomic_file::load(storage.as_ref(), &snapshot_path, |bytes| {
            serde_json::from_slice::<StoredSnapshot>(bytes)
        })?;
        let state = loaded.map(|stored| stored.state).unwrap_or_default();
        Ok(StateMachineStore {
            shared: Arc::new(Shared {
                storage,
                snapshot_path,
                state: Mutex::new(state),
                snapshots_built: AtomicU64::new(0),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, MachineState> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `read` on the current replica sets (under the lock: keep it short).
    pub fn read<R>(&self, read: impl FnOnce(&ReplicaSets) -> R) -> R {
        read(&self.state().replicas)
    }

    /// The last entry applied, for tests and status pages.
    pub fn last_applied(&self) -> Option<LogId> {
        self.state().last_applied
    }

    async fn write_snapshot(&self, bytes: Vec<u8>) -> Result<(), SnapshotWriteFailed> {
        let shared = self.shared.clone();
        let written = tokio::task::spawn_blocking(move || {
            atomic_file::write_atomically(
                shared.storage.as_ref(),
                &shared.snapshot_path,
                &bytes,
                true,
            )
        })
        .await;
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(SnapshotWriteFailed(error.to_string())),
            Err(join) => Err(SnapshotWriteFailed(join.to_string())),
        }
    }
}

/// Writing the snapshot file failed (kept small; openraft's error is built at the boundary).
#[derive(Debug, thiserror::Error)]
#[error("writing the state machine snapshot: {0}")]
struct SnapshotWriteFailed(String);

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let state = self.state().clone();
        let built = self.shared.snapshots_built.fetch_add(1, Ordering::Relaxed) + 1;
        let snapshot_id = match state.last_applied {
            Some(log_id) => format!("{}-{}-{built}", log_id.leader_id, log_id.index),
            None => format!("none-{built}"),
        };
        let stored = StoredSnapshot {
            meta: SnapshotMeta {
                last_log_id: state.last_applied,
                last_membership: state.membership.clone(),
                snapshot_id,
            },
            state,
        };
        let signature = Some(stored.meta.signature());
        let bytes = serde_json::to_vec(&stored)
            .map_err(|error| StorageIOError::write_snapshot(signature.clone(), &error))?;
        self.write_snapshot(bytes.clone())
            .await
            .map_err(|error| StorageIOError::write_snapshot(signature, &error))?;
        Ok(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, Membership), StorageError> {
        let state = self.state();
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>, StorageError>
    where
        I: IntoIterator<Item = RaftEntry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut state = self.state();
        let mut answers = Vec::new();
        for entry in entries {
            state.last_applied = Some(entry.log_id);
            answers.push(match entry.payload {
                EntryPayload::Blank => Applied::NoCommand,
                EntryPayload::Normal(command) => state.replicas.apply(&command),
                EntryPayload::Membership(membership) => {
                    state.membership = Membership::new(Some(entry.log_id), membership);
                    Applied::NoCommand
                }
            });
        }
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> StateMachineStore {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let bytes = snapshot.into_inner();
        let stored: StoredSnapshot = serde_json::from_slice(&bytes)
            .map_err(|error| StorageIOError::read_snapshot(Some(meta.signature()), &error))?;
        // What the leader says the snapshot is wins over what the bytes say about themselves.
        let state = MachineState {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
            replicas: stored.state.replicas,
        };
        let rewritten = serde_json::to_vec(&StoredSnapshot {
            meta: meta.clone(),
            state: state.clone(),
        })
        .map_err(|error| StorageIOError::write_snapshot(Some(meta.signature()), &error))?;
        self.write_snapshot(rewritten)
            .await
            .map_err(|error| StorageIOError::write_snapshot(Some(meta.signature()), &error))?;
        *self.state() = state;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let shared = self.shared.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            atomic_file::load(shared.storage.as_ref(), &shared.snapshot_path, |bytes| {
                serde_json::from_slice::<StoredSnapshot>(bytes)
                    .map(|stored| (stored, bytes.to_vec()))
            })
        })
        .await;
        match loaded {
            Ok(Ok(Some((stored, bytes)))) => Ok(Some(Snapshot {
                meta: stored.meta,
                snapshot: Box::new(Cursor::new(bytes)),
            })),
            Ok(Ok(None)) => Ok(None),
            Ok(Err(error)) => Err(StorageIOError::read_snapshot(None, &error).into()),
            Err(join) => Err(StorageIOError::read_snapshot(None, &join).into()),
        }
    }
}
