//! What the broker does to its log besides appending messages: replication (both sides), the
//! cuts a controller-mode replica makes to follow a new master, retention on request, topic
//! and queue removal, and shutdown. Blocking store work runs off the async workers here, so
//! callers cannot forget to.

use std::collections::BTreeSet;

use bytes::Bytes;
use tidemark_store::epochs::EpochSpan;
use tidemark_store::{RetentionReport, StoreError};

use super::{off_the_workers, MessageLog};

impl MessageLog<'_> {
    /// Master: up to `max_bytes` of the log from `from` for a slave (`None`: nothing new).
    pub(crate) fn replication_chunk(
        &self,
        from: u64,
        max_bytes: usize,
    ) -> Result<Option<Bytes>, StoreError> {
        self.store.replication_chunk(from, max_bytes)
    }

    /// Slave: appends bytes copied from the master at `offset` and wakes the pulls held on
    /// this broker (a slave serves reads). Returns the log's new end.
    pub(crate) fn append_replicated(&self, offset: u64, bytes: &[u8]) -> Result<u64, StoreError> {
        let end = self.store.append_replicated(offset, bytes)?;
        self.held_pulls.notify_all();
        Ok(end)
    }

    /// Controller mode, a replica about to take writes: cuts a record the old master left
    /// half-copied. Returns the bytes cut.
    pub(crate) async fn cut_partial_record(&self) -> Result<u64, StoreError> {
        off_the_workers(self.store, "cut a partial record", |store| {
            store.cut_partial_record()
        })
        .await
    }

    /// Controller mode, before following a master: cuts the log back to where its epoch
    /// history agrees with `master`'s and takes that history. Blocking. Returns the bytes cut.
    pub(crate) fn follow_history(&self, master: &[EpochSpan]) -> Result<u64, StoreError> {
        self.store.follow_history(master)
    }

    /// Deletes expired log segments now (mqadmin `deleteExpiredCommitLog`).
    pub(crate) async fn delete_expired_now(&self) -> Result<RetentionReport, StoreError> {
        off_the_workers(self.store, "delete expired segments", |store| {
            store.delete_expired_now()
        })
        .await
    }

    /// Destroys every queue of `topic`; returns how many there were.
    pub(crate) async fn destroy_topic_queues(&self, topic: &str) -> Result<usize, StoreError> {
        let topic = topic.to_owned();
        off_the_workers(self.store, "destroy queues", move |store| {
            store.destroy_topic_queues(&topic)
        })
        .await
    }

    /// Destroys the queues whose messages all expired, except the topics `keep` names.
    pub(crate) async fn destroy_expired_queues(
        &self,
        keep: BTreeSet<String>,
    ) -> Result<Vec<(String, i32)>, StoreError> {
        off_the_workers(self.store, "destroy expired queues", move |store| {
            store.destroy_expired_queues(|topic| keep.contains(topic))
        })
        .await
    }

    /// Stops the flush thread and syncs everything. Blocking.
    pub(crate) fn shutdown(&self) -> Result<(), StoreError> {
        self.store.shutdown()
    }
}
