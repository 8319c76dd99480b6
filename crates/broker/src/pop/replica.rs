//! POP state between a master and its replicas: the whole state for an older Tidemark slave
//! that asks for it (TIDEMARK_GET_ALL_POP_STATE), and the progress stream's side — the
//! master's changes and whole copies in, the replica's state out, in the master's order.

use std::collections::BTreeMap;

use tidemark_storage::journal::JournalCodec;
use tracing::debug;

use super::state::{PopCodec, PopState};
use super::{PopTable, ReplicaError, REPLICA_FORMAT};
use crate::progress_record::{STREAM_POP, STREAM_POP_WHOLE};

/// Queues per whole-copy record, so no record comes near a message's size limit.
const QUEUES_PER_COPY_RECORD: usize = 512;

impl PopTable {
    /// The whole state as a master hands it to its slaves (TIDEMARK_GET_ALL_POP_STATE): the
    /// format byte, then the journal's snapshot form.
    pub fn replica(&self) -> Vec<u8> {
        let inner = self.lock();
        let mut body = vec![REPLICA_FORMAT];
        body.extend_from_slice(&PopCodec.snapshot(&inner.state));
        body
    }

    /// A slave takes its master's state ([`replica`](Self::replica)) in place of its own,
    /// durably: the journal is compacted into a snapshot of it. Returns whether anything
    /// changed. Only for a slave: nothing pops or acknowledges there, so the copy is the whole
    /// truth until this broker becomes master. Blocking.
    pub fn replace_from_master(&self, replica: &[u8]) -> Result<bool, ReplicaError> {
        let snapshot = match replica.split_first() {
            Some((&REPLICA_FORMAT, snapshot)) => snapshot,
            Some((&format, _)) => return Err(ReplicaError::Format(format)),
            None => return Err(ReplicaError::Format(0)),
        };
        let master = PopCodec
            .restore(snapshot)
            .map_err(ReplicaError::Unreadable)?;
        if self.lock().state == master {
            return Ok(false);
        }
        self.journal
            .compact(|cut| {
                let mut inner = self.lock();
                inner.state = master;
                inner.reviving.clear();
                inner.attempts.clear();
                inner.index();
                cut.cut();
                PopCodec.snapshot(&inner.state)
            })
            .map_err(ReplicaError::Journal)?;
        self.wake.notify_one();
        Ok(true)
    }

    /// Queues the whole state for the replicas, under the table's lock so the copy sits in
    /// the stream where the state was: records of [`STREAM_POP_WHOLE`], each a flag byte (1 on
    /// the first: the replica starts from nothing) and the snapshot form of some queues (the
    /// first also holds the copy ends). Returns how many queues.
    pub fn publish_whole(&self) -> usize {
        let Some(outbox) = &self.outbox else {
            return 0;
        };
        let inner = self.lock();
        let keys: Vec<_> = inner.state.queues.keys().collect();
        let mut first = true;
        for chunk in keys.chunks(QUEUES_PER_COPY_RECORD).chain(
            // An empty state still tells the replica to start from nothing.
            keys.is_empty().then_some(&[][..]),
        ) {
            let part = PopState {
                queues: chunk
                    .iter()
                    .filter_map(|key| Some(((*key).clone(), inner.state.queues.get(*key)?.clone())))
                    .collect(),
                copies_end: if first {
                    inner.state.copies_end.clone()
                } else {
                    BTreeMap::new()
                },
            };
            let mut record = vec![u8::from(first)];
            record.extend_from_slice(&PopCodec.snapshot(&part));
            outbox.push(STREAM_POP_WHOLE, record);
            first = false;
        }
        keys.len()
    }

    /// Applies records of the master's stream ([`STREAM_POP`] changes, [`STREAM_POP_WHOLE`]
    /// copies) in order, journaling them here but queuing none for replicas; a copy is made
    /// durable by compacting the journal into a snapshot. Returns how many records could not
    /// be read (skipped). Blocking.
    pub fn apply_replicated(&self, records: &[(u8, Vec<u8>)]) -> usize {
        let mut skipped = 0;
        let mut copied = false;
        let mut inner = self.lock();
        for (stream, bytes) in records {
            let applied = match *stream {
                STREAM_POP => PopCodec
                    .apply(&mut inner.state, bytes)
                    .map(|()| drop(self.journal_here(bytes))),
                STREAM_POP_WHOLE => match bytes.split_first() {
                    Some((&first, snapshot)) => PopCodec.restore(snapshot).map(|part| {
                        if first == 1 {
                            inner.state = PopState::default();
                        }
                        inner.state.queues.extend(part.queues);
                        for (topic, end) in part.copies_end {
                            inner.state.apply_copied(&topic, end);
                        }
                        copied = true;
                    }),
                    None => Err("empty whole-state record".to_owned()),
                },
                other => Err(format!("not a POP stream: {other}")),
            };
            if let Err(error) = applied {
                debug!(%error, "unreadable POP progress record");
                skipped += 1;
            }
        }
        inner.deadlines_stale = true;
        drop(inner);
        if copied {
            let compacted = self.journal.compact(|cut| {
                let inner = self.lock();
                cut.cut();
                PopCodec.snapshot(&inner.state)
            });
            if let Err(failure) = compacted {
                tracing::warn!(%failure, "the master's POP state is applied but not journaled");
            }
        }
        skipped
    }

    /// Before a replica acts as master: the deadlines the revive service works from are
    /// rebuilt from what the stream applied.
    pub fn after_replication(&self) {
        let mut inner = self.lock();
        if std::mem::take(&mut inner.deadlines_stale) {
            inner.reviving.clear();
            inner.attempts.clear();
            inner.index();
            drop(inner);
            self.wake.notify_one();
        }
    }
}
