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

/// What [`Timers::cancel_named`] did.
#[derive(Debug)]
pub(super) enum Cancel {
    Cancelled(Ticket),
    NotPending,
    /// Taken for delivery while the records were read.
    Taken,
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
        Ok(
            match self.cancel_named(log, &handle.topic, &handle.message_id, due)? {
                Cancel::Cancelled(ticket) => Recalled::Cancelled(ticket),
                Cancel::NotPending => Recalled::NothingPending,
                Cancel::Taken => Recalled::AlreadyDue,
            },
        )
    }

    /// Settles the pending message of `topic` with unique id `id` due at `due` (or within the
    /// slot that starts there: a handle or marker an Apache broker wrote names its slot, and
    /// the time asked for lies within it). Candidates are told apart by topic and id, so the
    /// window may be generous. Blocking: reads the candidates' records.
    pub(super) fn cancel_named(
        &self,
        log: &LogHandle,
        topic: &str,
        id: &str,
        due: i64,
    ) -> Result<Cancel, RecallFailure> {
        // A slot either side besides: the time asked for is resolved from the store time
        // and a delay, which may fall a millisecond past the slot the sender resolved.
        let (from, to) = (
            due.saturating_sub(APACHE_SLOT_MS),
            due.saturating_add(2 * APACHE_SLOT_MS),
        );
        let candidates: Vec<(i64, i64)> = self
            .lock()
            .due
            .range((from, i64::MIN)..(to, i64::MIN))
            .copied()
            .collect();
        for (pending_due, offset) in candidates {
            if !names(log, offset, topic, id)? {
                continue;
            }
            let mut inner = self.lock();
            if !inner.due.remove(&(pending_due, offset)) {
                // Taken for delivery since: its due time passed while the records were read.
                return Ok(Cancel::Taken);
            }
            inner.topics.remove(offset, false);
            return Ok(match self.settle(&mut inner, offset)? {
                Some(ticket) => Cancel::Cancelled(ticket),
                // Settled before (a scan found it gone): nothing of it will be delivered.
                None => Cancel::NotPending,
            });
        }
        Ok(Cancel::NotPending)
    }

    /// Resolves once the record under `ticket` is durable.
    pub async fn durable(&self, ticket: Ticket) -> Result<(), JournalError> {
        self.journal.durable(ticket).await
    }
}

/// Whether the timer message at `offset` is `topic`'s with unique id `id`. An unreadable or
/// vanished record names nothing.
fn names(log: &LogHandle, offset: i64, topic: &str, id: &str) -> Result<bool, StoreError> {
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
    Ok(properties.get(property::REAL_TOPIC) == Some(topic)
        && properties.get(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == Some(id))
}
