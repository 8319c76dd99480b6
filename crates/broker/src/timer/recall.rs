//! Recalling a timer message before it is due (RocketMQ 5.3.2+'s RECALL_MESSAGE).
//!
//! A recall settles the pending message the way a delivery does: its timer-topic offset is
//! journaled as needing no delivery, under the table's lock, and queued for the replicas on
//! the same stream. So a recall answered after that record is durable (and on the replicas a
//! SYNC send waits for) is never undone: not by a crash before the due time, which rebuilds the
//! pending set skipping settled offsets, nor by a failover, whose new master holds the record.
//!
//! Where Tidemark differs: RocketMQ writes a marker into the timer topic and drops the message
//! when its slot comes due; it answers success for any well-formed handle. Tidemark finds the
//! message first, so a recall that comes too late — the message taken for delivery meanwhile —
//! is told so instead of being acknowledged.

use tidemark_protocol::message::{property, DecodeOptions, MessageRecord, RecallHandle};
use tidemark_storage::journal::{JournalError, Ticket};
use tidemark_store::{StoreError, TIMER_TOPIC};

use super::{apache::APACHE_SLOT_MS, Timers};
use crate::message_log::LogHandle;

/// Why a recall could not be carried out; the message may still be delivered.
#[derive(Debug, thiserror::Error)]
pub enum RecallFailure {
    #[error("timer message unreadable: {0}")]
    Store(#[from] StoreError),
    #[error("recall not journaled: {0}")]
    Journal(#[from] JournalError),
}

/// What a recall found.
#[derive(Debug)]
pub enum Recalled {
    /// Settled now; the record saying so is journaled under this ticket.
    Cancelled(Ticket),
    /// No pending message by that name: recalled before, or never held here.
    NothingPending,
    /// Due already: delivered, or being delivered.
    AlreadyDue,
    /// Timer messages stored before `end` (the timer queue's end when the recall came) are not
    /// all taken in yet; the recall waits for the service and asks again.
    NotScannedYet { end: i64 },
}

impl Timers {
    /// Settles the pending message `handle` names if it is not due by `now`. Blocking: reads
    /// the records of the messages pending at the handle's due time.
    pub fn recall(
        &self,
        log: &LogHandle,
        handle: &RecallHandle,
        now: i64,
    ) -> Result<Recalled, RecallFailure> {
        let due = handle.due_ms();
        if due <= now {
            return Ok(Recalled::AlreadyDue);
        }
        // The message was stored before its send was answered with the handle, so below the
        // queue's end now; every entry below it must have been looked at.
        let end = log.log().max_offset(TIMER_TOPIC, 0);
        if self.scanned_up_to() < end {
            return Ok(Recalled::NotScannedYet { end });
        }
        // A Tidemark handle names the due time exactly; one an Apache broker wrote on this store
        // names its slot, and the time asked for lies within it.
        let candidates: Vec<(i64, i64)> = self
            .lock()
            .due
            .range((due, i64::MIN)..(due.saturating_add(APACHE_SLOT_MS), i64::MIN))
            .copied()
            .collect();
        for (pending_due, offset) in candidates {
            if !names(log, offset, handle)? {
                continue;
            }
            let mut inner = self.lock();
            if !inner.due.remove(&(pending_due, offset)) {
                // Taken for delivery since: its due time passed while the records were read.
                return Ok(Recalled::AlreadyDue);
            }
            inner.topics.remove(offset, false);
            return Ok(match self.settle(&mut inner, offset)? {
                Some(ticket) => Recalled::Cancelled(ticket),
                // Settled before (a scan found it gone): nothing of it will be delivered.
                None => Recalled::NothingPending,
            });
        }
        Ok(Recalled::NothingPending)
    }

    /// Resolves once the record under `ticket` is durable.
    pub async fn durable(&self, ticket: Ticket) -> Result<(), JournalError> {
        self.journal.durable(ticket).await
    }
}

/// Whether the timer message at `offset` is the one `handle` names: its real topic and unique
/// id. An unreadable or vanished record names nothing.
fn names(log: &LogHandle, offset: i64, handle: &RecallHandle) -> Result<bool, StoreError> {
    let Some(entry) = log.log().queue_entry(TIMER_TOPIC, 0, offset)? else {
        return Ok(false);
    };
    let Some(bytes) = log.log().read_record(entry.commit_log_offset as u64)? else {
        return Ok(false);
    };
    let Ok((record, _)) = MessageRecord::decode(&bytes, 0, DecodeOptions::default()) else {
        return Ok(false);
    };
    let properties = &record.properties;
    Ok(
        properties.get(property::REAL_TOPIC) == Some(handle.topic.as_str())
            && properties.get(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                == Some(handle.message_id.as_str()),
    )
}
