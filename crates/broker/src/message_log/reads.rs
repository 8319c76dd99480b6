//! What services read from the message log. Reads have no side effects, but they go through
//! the same door as appends so that the store is one field of [`MessageLog`] and no service
//! holds it: a change to what a read must respect (the read fence, a replica's reconcile) is
//! made here or in the store, not at each caller.

use bytes::Bytes;
use tidemark_store::{DiskUsage, GetResult, QueueEntry, StoreError};

use super::{off_the_workers, MessageLog};

impl MessageLog<'_> {
    /// Up to `max_count` messages (past the first, at most `max_bytes`) of a queue from
    /// `offset`, keeping those whose tags code passes `filter`; behind the read fence.
    pub fn get(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        filter: impl Fn(i64) -> bool,
    ) -> Result<GetResult, StoreError> {
        self.store
            .get(topic, queue_id, offset, max_count, max_bytes, filter)
    }

    /// [`MessageLog::get`] with a second test on each record that passed `filter` (SQL92).
    #[allow(clippy::too_many_arguments)]
    pub fn get_matching(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        filter: impl Fn(i64) -> bool,
        record_filter: impl Fn(&Bytes) -> bool,
    ) -> Result<GetResult, StoreError> {
        self.store.get_matching(
            topic,
            queue_id,
            offset,
            max_count,
            max_bytes,
            filter,
            record_filter,
        )
    }

    /// The next offset readers may see in a queue (the read fence applied).
    pub fn max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.store.max_offset(topic, queue_id)
    }

    /// The next offset written in a queue, fence or not.
    pub fn written_max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.store.written_max_offset(topic, queue_id)
    }

    /// The smallest offset a queue still holds.
    pub fn min_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.store.min_offset(topic, queue_id)
    }

    /// The log's (first offset, end written, end durable).
    pub fn positions(&self) -> (u64, u64, u64) {
        self.store.commit_log_positions()
    }

    /// Commit-log bytes the key index has yet to take in.
    pub fn index_behind_bytes(&self) -> u64 {
        self.store.index_behind_bytes()
    }

    /// When the oldest message the commit log still holds was stored; `None` when it holds none.
    /// Each segment starts with a record, so the log's first offset is one.
    pub fn oldest_store_timestamp(&self) -> Result<Option<i64>, StoreError> {
        let (first, written, _) = self.positions();
        if first >= written {
            return Ok(None);
        }
        Ok(self
            .store
            .read_record(first)?
            .and_then(|record| tidemark_protocol::message::store_timestamp_of(&record)))
    }

    /// The whole record at a commit-log offset.
    pub fn read_record(&self, commit_log_offset: u64) -> Result<Option<Bytes>, StoreError> {
        self.store.read_record(commit_log_offset)
    }

    /// A queue's entry at `offset`, if published.
    pub fn queue_entry(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
    ) -> Result<Option<QueueEntry>, StoreError> {
        self.store.queue_entry(topic, queue_id, offset)
    }

    /// When the message at a queue offset was stored.
    pub fn store_timestamp_at(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
    ) -> Result<Option<i64>, StoreError> {
        self.store.store_timestamp_at(topic, queue_id, offset)
    }

    /// When the oldest message a queue holds was stored.
    pub fn earliest_store_timestamp(
        &self,
        topic: &str,
        queue_id: i32,
    ) -> Result<Option<i64>, StoreError> {
        self.store.earliest_store_timestamp(topic, queue_id)
    }

    /// The first offset of a queue stored at or after `timestamp`.
    pub fn offset_by_timestamp(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp: i64,
    ) -> Result<i64, StoreError> {
        self.store.offset_by_timestamp(topic, queue_id, timestamp)
    }

    /// Every queue in the log, as (topic, queue id).
    pub fn queues(&self) -> Vec<(String, i32)> {
        self.store.queues()
    }

    /// Topics with queues in the log.
    pub fn queue_topics(&self) -> Vec<String> {
        self.store.queue_topics()
    }

    /// (store time, commit-log offset) of the last record indexed.
    pub fn index_last_update(&self) -> (i64, i64) {
        self.store.index_last_update()
    }

    /// How long making the log durable has taken, sync by sync.
    pub fn sync_times(&self) -> tidemark_store::SyncTimesSnapshot {
        self.store.commit_log_sync_times()
    }

    /// The disk usage the last retention pass measured.
    pub fn disk_usage(&self) -> DiskUsage {
        self.store.disk_usage()
    }

    /// Which master epoch wrote which part of the log (controller mode).
    pub fn epochs(&self) -> &tidemark_store::epochs::EpochHistory {
        self.store.epochs()
    }

    /// Records of `topic` with `key` stored within `[begin_ms, end_ms]`, newest first, at most
    /// `max` — off the async workers (the index is read from disk).
    pub async fn query_message(
        &self,
        topic: String,
        key: String,
        max: usize,
        (begin_ms, end_ms): (i64, i64),
    ) -> Result<Vec<Bytes>, StoreError> {
        off_the_workers(self.store, "query messages", move |store| {
            store.query_message(&topic, &key, max, begin_ms, end_ms)
        })
        .await
    }
}
