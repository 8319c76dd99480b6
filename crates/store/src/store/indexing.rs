//! The index thread: it follows the commit log and adds each record's keys to the message index
//! (see [`crate::index`]); lookups by key.

use std::sync::PoisonError;

use bytes::Bytes;
use tidemark_protocol::message::{DecodeOptions, MessageRecord, BLANK_MAGIC_CODE};
use tracing::warn;

use super::{Inner, MessageStore, IDLE_WAIT};
use crate::error::{io_error, Result};

/// Bytes read from the commit log per step.
const STEP_BYTES: u64 = 4 << 20;
/// How often the newest index file is made durable while messages come in.
const SYNC_EVERY_MS: i64 = 1000;

impl Inner {
    /// Indexes records from the cursor on, up to `STEP_BYTES`; whether it got anywhere.
    pub(super) fn index_step(&self) -> Result<bool> {
        if !self.index.enabled() {
            return Ok(false);
        }
        let mut cursor = self
            .index_cursor
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let end = self.commit_log.written();
        let segment = self.commit_log.segment_bytes();
        let mut position = cursor.next.max(self.commit_log.min_offset());
        if position >= end {
            return Ok(false);
        }
        let segment_end = (position / segment + 1) * segment;
        let length = (end.min(segment_end) - position).min(STEP_BYTES);
        let Some(chunk) = self.commit_log.read(position, length as usize)? else {
            // Deleted under us: retention moved the log's start.
            cursor.next = self.commit_log.min_offset().max(position + 1);
            return Ok(true);
        };
        let now = (self.clock)();
        let mut at = 0usize;
        let mut progressed = false;
        while at + 8 <= chunk.len() {
            let size = read_i32(&chunk, at) as usize;
            let magic = read_i32(&chunk, at + 4) as u32;
            if magic == BLANK_MAGIC_CODE {
                position = segment_end;
                at = chunk.len();
                progressed = true;
                break;
            }
            if size < 8 || at + size > chunk.len() {
                // A record larger than what is left of this read: read again from it (a
                // record never crosses a segment and fits in one step).
                if at == 0 && size > chunk.len() && (position + size as u64) <= end {
                    cursor.next = position;
                    return self.index_large(&mut cursor, position, size, now);
                }
                break;
            }
            let offset = position + at as u64;
            if offset as i64 > cursor.skip_through {
                match MessageRecord::decode(&chunk, at, DecodeOptions::default()) {
                    Ok((record, _)) => self
                        .index
                        .add(&record, offset as i64, now)
                        .map_err(io_error("index", self.index.dir()))?,
                    Err(error) => {
                        warn!(offset, %error, "record not indexed: it does not decode");
                    }
                }
            }
            at += size;
            progressed = true;
        }
        if at == chunk.len() || position == segment_end {
            cursor.next = if position == segment_end {
                segment_end
            } else {
                position + at as u64
            };
        } else {
            cursor.next = position + at as u64;
        }
        if now - cursor.synced_ms >= SYNC_EVERY_MS {
            self.index
                .flush(true)
                .map_err(io_error("sync", self.index.dir()))?;
            cursor.synced_ms = now;
        }
        Ok(progressed)
    }

    fn index_large(
        &self,
        cursor: &mut IndexCursor,
        position: u64,
        size: usize,
        now: i64,
    ) -> Result<bool> {
        let Some(record) = self.commit_log.read(position, size)? else {
            cursor.next = position + size as u64;
            return Ok(true);
        };
        if position as i64 > cursor.skip_through {
            match MessageRecord::decode(&record, 0, DecodeOptions::default()) {
                Ok((record, _)) => self
                    .index
                    .add(&record, position as i64, now)
                    .map_err(io_error("index", self.index.dir()))?,
                Err(error) => {
                    warn!(offset = position, %error, "record not indexed: it does not decode")
                }
            }
        }
        cursor.next = position + size as u64;
        Ok(true)
    }

    /// Indexes everything written so far and makes the index durable (shutdown, tests).
    pub(super) fn index_catch_up(&self) -> Result<()> {
        while self.index_step()? {}
        self.index
            .flush(true)
            .map_err(io_error("sync", self.index.dir()))
    }

    pub(super) fn index_loop(&self) {
        let mut failing = false;
        while self.lifecycle.is_running() {
            match self.index_step() {
                Ok(true) => {
                    failing = false;
                    continue;
                }
                Ok(false) => failing = false,
                Err(error) if !failing => {
                    failing = true;
                    warn!(%error, "indexing message keys failed; will retry");
                }
                Err(_) => {}
            }
            std::thread::park_timeout(IDLE_WAIT / 10);
        }
    }
}

fn read_i32(bytes: &Bytes, at: usize) -> i32 {
    i32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Where the index thread is in the commit log.
#[derive(Debug, Default)]
pub(super) struct IndexCursor {
    /// The next commit-log offset to read.
    pub next: u64,
    /// Records at or below this offset are indexed already (the index's end at open).
    pub skip_through: i64,
    pub synced_ms: i64,
}

impl MessageStore {
    /// Records of `topic` with `key` (one of its `KEYS`, or its unique key) stored within
    /// `[begin_ms, end_ms]`, newest first, at most `max` (QUERY_MESSAGE). Keys are matched by
    /// hash, so a caller that must be exact checks the records' keys.
    pub fn query_message(
        &self,
        topic: &str,
        key: &str,
        max: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<Bytes>> {
        let inner = &self.inner;
        let offsets = inner
            .index
            .query(topic, key, max, begin_ms, end_ms)
            .map_err(io_error("read", inner.index.dir()))?;
        let mut records = Vec::with_capacity(offsets.len());
        for offset in offsets {
            if let Some(record) = u64::try_from(offset)
                .ok()
                .map(|offset| inner.commit_log.read_record(offset))
                .transpose()?
                .flatten()
            {
                records.push(record);
            }
        }
        Ok(records)
    }

    /// (store timestamp, commit-log offset) of the last record indexed (QUERY_MESSAGE's
    /// `indexLastUpdateTimestamp` / `indexLastUpdatePhyoffset`).
    pub fn index_last_update(&self) -> (i64, i64) {
        self.inner.index.last_update()
    }

    /// Indexes everything stored so far now, instead of within the index thread's next steps.
    pub fn index_now(&self) -> Result<()> {
        self.inner.index_catch_up()
    }
}
