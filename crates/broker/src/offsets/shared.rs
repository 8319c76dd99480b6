//! The broker's one instance of the offset table, behind its own lock, with the revision the
//! persister watches and the log lines a commit's outcome deserves.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tracing::{debug, info};

use super::{AheadOfMaster, CommitOutcome, Committer, ConsumerOffsetTable};

/// The broker's consumer offsets: a [`ConsumerOffsetTable`] behind its own lock, with a
/// revision that moves whenever a stored value changes (persistence writes when it moved).
/// Every operation is atomic and returns copies.
#[derive(Debug, Default)]
pub struct ConsumerOffsets {
    inner: Mutex<Revised>,
}

#[derive(Debug, Default)]
struct Revised {
    table: ConsumerOffsetTable,
    revision: u64,
}

impl ConsumerOffsets {
    pub fn new(table: ConsumerOffsetTable) -> Self {
        Self {
            inner: Mutex::new(Revised { table, revision: 0 }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Revised> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The one way a commit is applied, from UPDATE_CONSUMER_OFFSET and from a pull alike:
    /// [`ConsumerOffsetTable::commit`]; a stored value moves the revision.
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
    ) -> CommitOutcome {
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
        if outcome.stored() {
            inner.revision += 1;
        }
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
        outcome
    }

    pub fn note_puller(&self, topic: &str, group: &str, queue_id: i32, connection: u64) {
        self.lock()
            .table
            .note_puller(topic, group, queue_id, connection);
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

    pub fn reset(&self, topic: &str, group: &str, queue_id: i32, offset: i64, now_ms: i64) {
        let mut inner = self.lock();
        inner.table.reset(topic, group, queue_id, offset, now_ms);
        inner.revision += 1;
    }

    pub fn query(&self, topic: &str, group: &str, queue_id: i32) -> Option<i64> {
        self.lock().table.query(topic, group, queue_id)
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

    pub fn drop_group(&self, group: &str) -> usize {
        let mut inner = self.lock();
        let dropped = inner.table.drop_group(group);
        inner.revision += 1;
        dropped
    }

    pub fn drop_topic(&self, topic: &str) -> usize {
        let mut inner = self.lock();
        let dropped = inner.table.drop_topic(topic);
        inner.revision += 1;
        dropped
    }

    /// [`ConsumerOffsetTable::merge_from_master`].
    pub fn merge_from_master(&self, master: &ConsumerOffsetTable) -> Vec<AheadOfMaster> {
        let mut inner = self.lock();
        let (ahead, changed) = inner.table.merge(master);
        if changed {
            inner.revision += 1;
        }
        ahead
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
}
