//! Replication: a master serves its commit log in chunks; a slave writes them at the same
//! offsets and indexes every record they complete, as the master did.

use std::sync::PoisonError;

use bytes::Bytes;
use tidemark_protocol::message::{
    magic_code_of, total_size_of, DecodeOptions, MessageRecord, BLANK_MAGIC_CODE,
};

use super::{AppendState, Inner, MessageStore};
use crate::commit_log::END_OF_SEGMENT_MIN_BYTES;
use crate::dispatch::DispatchRequest;
use crate::error::{Result, StoreError};

impl MessageStore {
    /// Replication, master side: up to `max_bytes` of the commit log from `from`, never across
    /// a segment end (a slave writes them at the same offsets). `None` when nothing is new;
    /// an error when `from` is no longer retained.
    pub fn replication_chunk(&self, from: u64, max_bytes: usize) -> Result<Option<Bytes>> {
        let log = &self.inner.commit_log;
        let end = log.written();
        if from >= end {
            return Ok(None);
        }
        let segment_end = from - from % log.segment_bytes() + log.segment_bytes();
        let length = (end.min(segment_end) - from).min(max_bytes as u64) as usize;
        log.read(from, length)?
            .map(Some)
            .ok_or_else(|| StoreError::ReplicationGap {
                expected: log.min_offset(),
                got: from,
            })
    }

    /// Replication, slave side: appends bytes copied from the master's commit log at `offset`
    /// — the end of this log, or anywhere when this log is empty — and puts every record they
    /// complete into its consume queue, exactly as the master did. Returns the new end.
    pub fn append_replicated(&self, offset: u64, bytes: &[u8]) -> Result<u64> {
        let inner = &self.inner;
        if !inner.lifecycle.is_running() {
            return Err(StoreError::Closed);
        }
        let mut state = inner.append_lock();
        let end = inner.commit_log.written();
        let empty = inner.commit_log.segments().is_empty();
        if offset != end && !empty {
            return Err(StoreError::ReplicationGap {
                expected: end,
                got: offset,
            });
        }
        if empty {
            state.replica_dispatched = offset;
        }
        let new_end = inner.commit_log.write_replicated(offset, bytes)?;
        inner.dispatch_replicated(&mut state)?;
        drop(state);
        inner.ask_for_prefault(new_end);
        Ok(new_end)
    }

    /// Controller mode, a slave about to take writes as master: cuts the record the old
    /// master's stream left half-copied at the end of this log (if any), so the first append
    /// of the new epoch starts on a record boundary. Returns the bytes cut.
    pub fn cut_partial_record(&self) -> Result<u64> {
        let whole = self.inner.append_lock().replica_dispatched;
        if whole >= self.inner.commit_log.written() {
            return Ok(0);
        }
        self.truncate_to(whole)
    }

    /// Controller mode, before following a master whose epoch history is `master`: cuts this
    /// log back to where the two histories agree ([`crate::epochs::consistent_point`]) and
    /// takes the master's history as its own. An empty log has nothing to cut, so it only takes
    /// the history — its own may end in an epoch that wrote nothing, which the master has
    /// replaced since. Returns the bytes cut; refused when a log with records shares no epoch
    /// with the master's (following would lose them).
    pub fn follow_history(&self, master: &[crate::epochs::EpochSpan]) -> Result<u64> {
        let written = self.inner.commit_log.written();
        let local = self
            .epochs()
            .spans(i64::try_from(written).unwrap_or(i64::MAX));
        let mut cut = 0;
        if written > 0 && !local.is_empty() {
            let point = match crate::epochs::consistent_point(&local, master) {
                Some(point) => point,
                // The master was elected on an empty log: the epoch it replaced at 0 wrote
                // nothing there, so none of this log's older epochs is on the master.
                None if master.first().is_some_and(|first| {
                    first.start_offset == 0 && local.iter().all(|mine| mine.epoch < first.epoch)
                }) =>
                {
                    0
                }
                None => {
                    return Err(StoreError::Unrecoverable {
                        reason: format!(
                            "this log shares no epoch with the master's ({local:?} against \
                             {master:?}); following it would lose records: move the store away"
                        ),
                    })
                }
            };
            cut = self.truncate_to(u64::try_from(point).unwrap_or(0))?;
        }
        self.epochs().replace(master)?;
        Ok(cut)
    }

    /// Controller mode: cuts this log back to `offset` — a record boundary where it stops
    /// agreeing with the new master's (see [`crate::epochs::consistent_point`]) — so that
    /// replication resumes there and no record the new master never had survives. Queue
    /// entries, destroyed-queue marks, the index position and epochs past the cut go too.
    /// Returns the bytes cut. Appends wait meanwhile; the broker calls this only while it
    /// neither takes sends nor follows a master.
    ///
    /// Crash safety: the checkpoint's durable offsets are lowered first and the log is cut
    /// before the queue files, so a crash part way through recovers at most part of the old
    /// tail again (and the broker cuts it again), never zeroed bytes as records.
    pub fn truncate_to(&self, offset: u64) -> Result<u64> {
        let inner = &self.inner;
        if !inner.lifecycle.is_running() {
            return Err(StoreError::Closed);
        }
        let mut state = inner.append_lock();
        let end = inner.commit_log.written();
        if offset >= end {
            return Ok(0);
        }
        if offset < inner.commit_log.min_offset() {
            return Err(StoreError::Unrecoverable {
                reason: format!(
                    "cannot cut the log back to {offset}: it starts at {}",
                    inner.commit_log.min_offset()
                ),
            });
        }
        inner.lower_checkpoint(offset)?;
        // Readers stop seeing the entries first, so none reads bytes that are about to go;
        // the files lose them only after the log, so a crash in between leaves queue files
        // that recovery cuts back to whatever log it finds.
        let queues = inner.queues.all();
        let mut hidden = Vec::with_capacity(queues.len());
        for queue in &queues {
            hidden.push(queue.hide_past(offset, &|slot, entry| {
                inner
                    .commit_log
                    .holds_record(entry.commit_log_offset, queue.queue_id, slot)
            })?);
        }
        let cut = inner.commit_log.truncate(offset)?;
        for (queue, old_end) in queues.iter().zip(hidden) {
            queue.clear_hidden(old_end)?;
        }
        inner.destroyed.clamp_to(offset)?;
        inner.commit_log.forget_prefault();
        state.replica_dispatched = offset;
        {
            let mut cursor = inner
                .index_cursor
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            cursor.next = cursor.next.min(offset);
        }
        inner
            .epochs
            .truncate_from(i64::try_from(offset).unwrap_or(i64::MAX))?;
        drop(state);
        inner.flush_all()?;
        Ok(cut)
    }
}

impl Inner {
    /// Indexes the replicated records that are complete: from the dispatch cursor to the last
    /// whole record below the log's end. Blank records end their segment.
    fn dispatch_replicated(&self, state: &mut AppendState) -> Result<()> {
        let log = &self.commit_log;
        let end = log.written();
        let segment_bytes = log.segment_bytes();
        let mut position = state.replica_dispatched;
        while position < end {
            let left_in_segment = segment_bytes - position % segment_bytes;
            // A segment's padding counts as dispatched only once all of it is here: a log that
            // ends inside it ends after the last whole record, which is where a slave elected
            // now must begin (`cut_partial_record`).
            let segment_end = position + left_in_segment;
            if left_in_segment < END_OF_SEGMENT_MIN_BYTES {
                if segment_end > end {
                    break;
                }
                position = segment_end;
                continue;
            }
            let Some((size, magic)) = log
                .read(position, 8)?
                .and_then(|head| Some((total_size_of(&head)?, magic_code_of(&head)?)))
            else {
                break;
            };
            if magic == BLANK_MAGIC_CODE {
                if segment_end > end {
                    break;
                }
                position = segment_end;
                continue;
            }
            if size < 8 || size as u64 > left_in_segment {
                return Err(StoreError::Unrecoverable {
                    reason: format!("replicated record at {position} has size {size}"),
                });
            }
            let Some(bytes) = log.read(position, size as usize)? else {
                break;
            };
            let (record, _) = MessageRecord::decode(&bytes, 0, DecodeOptions::default())?;
            if record.physical_offset != position as i64 {
                return Err(StoreError::Unrecoverable {
                    reason: format!(
                        "replicated record at {position} names offset {}",
                        record.physical_offset
                    ),
                });
            }
            let mut queue = self.queues.get_or_create(&record.topic, record.queue_id)?;
            if record.queue_offset < queue.write_end() {
                // The master destroyed this queue and began it again at 0 (a deleted or
                // cleaned-up topic): so does this slave, or it would mix the two.
                let key = (record.topic.clone(), record.queue_id);
                self.destroyed.record(&[key], position, log.min_offset())?;
                self.destroy_queues(&[queue])?;
                queue = self.queues.get_or_create(&record.topic, record.queue_id)?;
            }
            let request = DispatchRequest::of_record(&record, position, size as u32);
            queue.put(record.queue_offset, request.queue_entry(&self.config))?;
            queue.publish(record.queue_offset + 1);
            state.last_store_timestamp = state.last_store_timestamp.max(record.store_timestamp);
            position += size as u64;
        }
        state.replica_dispatched = position;
        Ok(())
    }
}
