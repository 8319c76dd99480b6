//! What was delivered, between a master and its replicas (`progress_stream`): the master's
//! deliveries and whole copies in, so a replica elected master does not deliver again what its
//! predecessor delivered.

use std::sync::Arc;

use tidemark_storage::journal::JournalCodec;
use tracing::{debug, warn};

use super::progress::{delivered_offset, DeliveredCodec};
use super::Timers;
use crate::progress_record::{ProgressOutbox, STREAM_TIMERS, STREAM_TIMERS_WHOLE};

impl Timers {
    /// Every delivery journaled from now on is also queued in `outbox` for the replicas.
    pub fn publish_to(&mut self, outbox: Arc<ProgressOutbox>) {
        self.outbox = Some(outbox);
    }

    /// Queues the whole delivered set for the replicas (one record in its snapshot form: a
    /// low mark and the ranges above it), under the lock so it sits where the set was.
    pub fn publish_whole(&self) {
        if let Some(outbox) = &self.outbox {
            let inner = self.lock();
            outbox.push(
                STREAM_TIMERS_WHOLE,
                DeliveredCodec.snapshot(&inner.delivered),
            );
        }
    }

    /// Applies the master's deliveries and whole copies — a union: the set only grows —
    /// journaling them here (a copy by compacting the journal into a snapshot); pending
    /// messages now delivered are dropped. Returns how many records could not be read
    /// (skipped). Blocking.
    pub fn apply_replicated(&self, records: &[(u8, Vec<u8>)]) -> usize {
        let mut skipped = 0;
        let (mut grew, mut copied) = (false, false);
        let mut inner = self.lock();
        for (stream, bytes) in records {
            let applied = match *stream {
                STREAM_TIMERS => delivered_offset(bytes).map(|offset| {
                    if inner.delivered.insert(offset) {
                        grew = true;
                        if let Err(failure) = self.journal.append(bytes) {
                            warn!(%failure, offset, "replicated timer delivery not journaled");
                        }
                    }
                }),
                STREAM_TIMERS_WHOLE => DeliveredCodec.restore(bytes).map(|whole| {
                    inner.delivered.merge(&whole);
                    copied = true;
                }),
                other => Err(format!("not a timer stream: {other}")),
            };
            if let Err(error) = applied {
                debug!(%error, "unreadable timer progress record");
                skipped += 1;
            }
        }
        if grew || copied {
            let pending = &mut *inner;
            let delivered = &pending.delivered;
            pending
                .due
                .retain(|(_, offset)| !delivered.contains(*offset));
        }
        drop(inner);
        if copied {
            let compacted = self.journal.compact(|cut| {
                let inner = self.lock();
                cut.cut();
                DeliveredCodec.snapshot(&inner.delivered)
            });
            if let Err(failure) = compacted {
                warn!(%failure, "the master's timer deliveries are applied but not journaled");
            }
        }
        skipped
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tidemark_storage::io::FsStorage;
    use tidemark_storage::journal::JournalOptions;

    use super::*;

    fn open(dir: &std::path::Path) -> Timers {
        Timers::open(Arc::new(FsStorage), dir, JournalOptions::default())
            .expect("opens")
            .0
    }

    #[test]
    fn a_replica_knows_what_its_master_delivered_across_its_restart() {
        let (master_dir, replica_dir) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let outbox = Arc::new(ProgressOutbox::default());
        let mut master = open(master_dir.path());
        master.publish_to(outbox.clone());
        for offset in [0, 1, 2, 7] {
            master.mark_delivered(offset, true);
        }
        let _ = outbox.take_all();
        master.publish_whole();
        master.mark_delivered(9, true);
        let replica = open(replica_dir.path());
        replica.mark_delivered(4, true);
        replica.lock().due.insert((1_000, 9));
        let records = outbox.take_all();
        assert_eq!(records.len(), 2, "a whole copy, then one delivery");
        assert_eq!(replica.apply_replicated(&records), 0);
        assert_eq!(replica.apply_replicated(&[(STREAM_TIMERS, vec![1])]), 1);
        let delivered = replica.lock().delivered.clone();
        for offset in [0, 1, 2, 4, 7, 9] {
            assert!(delivered.contains(offset), "{offset} delivered");
        }
        assert!(!delivered.contains(3) && !delivered.contains(8));
        assert!(
            replica.lock().due.is_empty(),
            "a pending message delivered by the master is dropped"
        );
        drop(replica);
        let replica = open(replica_dir.path());
        assert_eq!(replica.lock().delivered, delivered, "journaled");
    }
}
