//! Reads: messages by queue offset with RocketMQ's status table, records by commit-log
//! offset, queue bounds and entries, and store times (by offset, and offsets by time).

use bytes::Bytes;
use tidemark_protocol::message::store_timestamp_of;

use super::MessageStore;
use crate::consume_queue::QueueEntry;
use crate::error::Result;

/// The outcome of a read by queue offset (RocketMQ's `GetMessageStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetStatus {
    Found,
    /// Entries were scanned but none matched the filter.
    NoMatchedMessage,
    /// The entries point at commit-log data already deleted.
    MessageWasRemoving,
    /// The consume-queue file holding the offset is gone.
    OffsetFoundNull,
    /// `offset > max`.
    OffsetOverflowBadly,
    /// `offset == max`: nothing new yet.
    OffsetOverflowOne,
    /// `offset < min`.
    OffsetTooSmall,
    /// The queue has no consume queue at all.
    NoMatchedLogicQueue,
    /// The queue exists but is empty (`max == 0`).
    NoMessageInQueue,
}

/// Messages read from a queue, as raw stored records.
#[derive(Debug, Clone)]
pub struct GetResult {
    pub status: GetStatus,
    /// Where the next read of this queue should start.
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub messages: Vec<Bytes>,
}

/// Consume-queue entries scanned per read at most when filtering (Java: 16000 bytes of units).
const FILTER_SCAN_ENTRIES_MAX: usize = 800;

impl MessageStore {
    /// Reads up to `max_count` messages (and, past the first, at most `max_bytes`) from a
    /// queue, keeping those whose tags code passes `filter`.
    pub fn get(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        filter: impl Fn(i64) -> bool,
    ) -> Result<GetResult> {
        self.get_matching(
            topic,
            queue_id,
            offset,
            max_count,
            max_bytes,
            filter,
            |_| true,
        )
    }

    /// [`MessageStore::get`] with a second test on each stored record that passed `filter`
    /// (a SQL92 selector on its properties). Records it refuses are skipped like unmatched
    /// tags: scanned, not returned, and the next read starts after them.
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
    ) -> Result<GetResult> {
        let inner = &self.inner;
        let Some(queue) = inner.queues.get(topic, queue_id) else {
            return Ok(GetResult {
                status: GetStatus::NoMatchedLogicQueue,
                next_begin_offset: 0,
                min_offset: 0,
                max_offset: 0,
                messages: Vec::new(),
            });
        };
        let written = queue.max_offset();
        let (min, max) = (queue.min_offset(), self.visible_max(&queue));
        let result = |status, next| GetResult {
            status,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
            messages: Vec::new(),
        };
        if max < written && offset >= max.max(min) && offset <= written {
            // Entries are written here, their records not confirmed yet: nothing new to show,
            // and the reader keeps its offset (it may have read up to here before the fence
            // moved back when a replica rejoined).
            return Ok(result(GetStatus::OffsetOverflowOne, offset));
        }
        if max == 0 {
            return Ok(result(GetStatus::NoMessageInQueue, 0));
        }
        if offset < min {
            return Ok(result(GetStatus::OffsetTooSmall, min));
        }
        if offset == max {
            return Ok(result(GetStatus::OffsetOverflowOne, offset));
        }
        if offset > max {
            // Java sends a consumer past the end of a queue that starts at 0 back to 0.
            return Ok(result(
                GetStatus::OffsetOverflowBadly,
                if min == 0 { min } else { max },
            ));
        }
        let scan = max_count
            .max(FILTER_SCAN_ENTRIES_MAX)
            .min(usize::try_from(max - offset).unwrap_or(usize::MAX));
        let Some(entries) = queue.read(offset, scan)? else {
            return Ok(result(
                GetStatus::OffsetFoundNull,
                queue.next_file_offset(offset),
            ));
        };
        let commit_log_min = inner.commit_log.min_offset();
        let mut messages = Vec::new();
        let mut bytes = 0usize;
        let mut scanned = 0i64;
        let mut removed = false;
        let mut entries = entries.into_iter().peekable();
        // Rounds: choose the next records the tags filter keeps, read them together, keep
        // those the record filter passes; another round only if that one refused some.
        let mut full = false;
        while !full && messages.len() < max_count && entries.peek().is_some() {
            let mut wanted: Vec<(u64, usize)> = Vec::new();
            while messages.len() + wanted.len() < max_count {
                let Some(entry) = entries.peek() else { break };
                if entry.is_hole() || entry.size <= 0 {
                    scanned += 1;
                    entries.next();
                    continue;
                }
                let size = entry.size as usize;
                if (!messages.is_empty() || !wanted.is_empty()) && bytes + size > max_bytes {
                    full = true;
                    break;
                }
                scanned += 1;
                let (commit_log_offset, tags_code) = (entry.commit_log_offset, entry.tags_code);
                entries.next();
                if (commit_log_offset as u64) < commit_log_min {
                    removed = true;
                    continue;
                }
                if !filter(tags_code) {
                    continue;
                }
                bytes += size;
                wanted.push((commit_log_offset as u64, size));
            }
            for (record, (_, size)) in inner
                .commit_log
                .read_many(&wanted)?
                .into_iter()
                .zip(&wanted)
            {
                match record {
                    Some(record) if record_filter(&record) => messages.push(record),
                    Some(_) => bytes -= size,
                    None => {
                        bytes -= size;
                        removed = true;
                    }
                }
            }
        }
        let status = if !messages.is_empty() {
            GetStatus::Found
        } else if removed {
            GetStatus::MessageWasRemoving
        } else {
            GetStatus::NoMatchedMessage
        };
        Ok(GetResult {
            status,
            next_begin_offset: offset + scanned,
            min_offset: min,
            max_offset: max,
            messages,
        })
    }

    /// The record stored at a commit-log offset.
    pub fn read_record(&self, commit_log_offset: u64) -> Result<Option<Bytes>> {
        self.inner.commit_log.read_record(commit_log_offset)
    }

    /// `length` bytes of the commit log at `offset` (within one segment); `None` when they
    /// were deleted, are not written yet, or cross a segment's end. For reading a record's
    /// header without the rest.
    pub fn read_commit_log(&self, offset: u64, length: usize) -> Result<Option<Bytes>> {
        self.inner.commit_log.read(offset, length)
    }

    /// The size of a commit-log segment (records never cross one).
    pub fn commit_log_segment_bytes(&self) -> u64 {
        self.inner.commit_log.segment_bytes()
    }

    pub fn min_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner
            .queues
            .get(topic, queue_id)
            .map_or(0, |queue| queue.min_offset())
    }

    /// One past the last entry readers may see: the next offset to be written unless a read
    /// fence hides the newest entries (see [`MessageStore::set_read_fence`]); 0 for an
    /// unknown queue.
    pub fn max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner
            .queues
            .get(topic, queue_id)
            .map_or(0, |queue| self.visible_max(&queue))
    }

    /// Every queue the store has, as (topic, queue id).
    pub fn queues(&self) -> Vec<(String, i32)> {
        let mut keys: Vec<(String, i32)> = self
            .inner
            .queues
            .all()
            .iter()
            .map(|queue| (queue.topic.clone(), queue.queue_id))
            .collect();
        keys.sort();
        keys
    }

    /// The consume-queue entry at `offset`, if published.
    pub fn queue_entry(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
    ) -> Result<Option<QueueEntry>> {
        let Some(queue) = self.inner.queues.get(topic, queue_id) else {
            return Ok(None);
        };
        Ok(queue
            .read(offset, 1)?
            .and_then(|entries| entries.first().copied()))
    }

    /// The store time of the message at a queue offset.
    pub fn store_timestamp_at(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
    ) -> Result<Option<i64>> {
        let Some(entry) = self.queue_entry(topic, queue_id, offset)? else {
            return Ok(None);
        };
        if entry.is_hole() {
            return Ok(None);
        }
        let Some(record) = self
            .inner
            .commit_log
            .read(entry.commit_log_offset as u64, entry.size as usize)?
        else {
            return Ok(None);
        };
        Ok(store_timestamp_of(&record))
    }

    /// The first offset whose message was stored at or after `timestamp` (5.x's LOWER
    /// boundary); the max offset when every message is older, the min offset when every
    /// message is newer.
    pub fn offset_by_timestamp(&self, topic: &str, queue_id: i32, timestamp: i64) -> Result<i64> {
        let (mut low, mut high) = (
            self.min_offset(topic, queue_id),
            self.max_offset(topic, queue_id),
        );
        // Invariant: messages below `low` are older than `timestamp`, those at or above `high` are not.
        while low < high {
            let middle = low + (high - low) / 2;
            match self.store_timestamp_at(topic, queue_id, middle)? {
                Some(stored) if stored < timestamp => low = middle + 1,
                Some(_) => high = middle,
                // A hole or a removed record: step over it.
                None => low = middle + 1,
            }
        }
        Ok(low)
    }

    /// Store time of the oldest message still in a queue, if any.
    pub fn earliest_store_timestamp(&self, topic: &str, queue_id: i32) -> Result<Option<i64>> {
        let (min, max) = (
            self.min_offset(topic, queue_id),
            self.max_offset(topic, queue_id),
        );
        for offset in min..max.min(min + 16) {
            if let Some(stored) = self.store_timestamp_at(topic, queue_id, offset)? {
                return Ok(Some(stored));
            }
        }
        Ok(None)
    }

    /// Commit-log positions: (min, end of written data, durable end).
    /// Which master epoch wrote which part of the commit log (controller mode).
    pub fn epochs(&self) -> &crate::epochs::EpochHistory {
        &self.inner.epochs
    }

    pub fn commit_log_positions(&self) -> (u64, u64, u64) {
        let log = &self.inner.commit_log;
        (log.min_offset(), log.written(), log.flushed())
    }

    /// Commit-log bytes the key index has not taken in yet (0 with the index off). Queue
    /// entries are written with each append, so this is all the store has to catch up on.
    pub fn index_behind_bytes(&self) -> u64 {
        if !self.inner.index.enabled() {
            return 0;
        }
        let next = self
            .inner
            .index_cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .next;
        let log = &self.inner.commit_log;
        log.written().saturating_sub(next.max(log.min_offset()))
    }

    /// How long making the commit log durable has taken, sync by sync.
    pub fn commit_log_sync_times(&self) -> crate::sync_times::SyncTimesSnapshot {
        self.inner.commit_log.sync_times()
    }
}
