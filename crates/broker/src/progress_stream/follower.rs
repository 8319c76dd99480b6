//! A replica's side: applies the progress messages its log received from the master, from the
//! position its offset table keeps (journaled with what it applied, so a restart resumes there).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::message::{DecodeOptions, MessageRecord};
use tidemark_store::{GetStatus, StoreError};
use tracing::{debug, warn};

use super::ProgressReplication;
use crate::progress_record::{
    decode_batch, PROGRESS_TOPIC, STREAM_BARRIER, STREAM_CONSUMER_OFFSETS, STREAM_HISTORY,
    STREAM_HISTORY_WHOLE, STREAM_POP, STREAM_POP_WHOLE, STREAM_TIMERS, STREAM_TIMERS_WHOLE,
};

/// Messages read per store call.
const MESSAGES_PER_READ: usize = 64;
const BYTES_PER_READ: usize = 8 << 20;
/// A replica looks at its log this often even when no replicated append woke it.
const LOOK_EVERY: Duration = Duration::from_secs(1);

pub(crate) async fn run(parts: ProgressReplication, stop: impl Future<Output = ()>) {
    let parts = Arc::new(parts);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = parts.stream.appended() => {}
            _ = tokio::time::sleep(LOOK_EVERY) => {}
        }
        if !parts.log.role().is_slave() {
            continue;
        }
        if let Err(error) = apply_available(&parts).await {
            warn!(%error, "applying the master's progress stream failed; trying again");
        }
    }
}

/// The log was cut back (a replica reconciling with a new master): progress messages past the
/// cut are gone, and the ones copied next take their queue offsets, so the position must not
/// stay past the cut. Blocking (journal append).
pub(crate) fn after_log_cut(parts: &ProgressReplication) {
    let written = parts.log.log().written_max_offset(PROGRESS_TOPIC, 0);
    if parts.progress.offsets.replica_position() > written {
        parts.progress.offsets.set_replica_position(written);
    }
}

/// [`catch_up`] off the async threads.
async fn apply_available(parts: &Arc<ProgressReplication>) -> Result<usize, String> {
    let applying = parts.clone();
    tokio::task::spawn_blocking(move || catch_up(&applying))
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| error.to_string())
}

/// What a replica about to become master awaits first: everything its log holds applied, and
/// the POP deadlines rebuilt for the revive service it is about to run.
pub(crate) async fn drain(parts: &Arc<ProgressReplication>) -> Result<usize, String> {
    let read = apply_available(parts).await?;
    let rebuilding = parts.clone();
    tokio::task::spawn_blocking(move || rebuilding.pop.after_replication())
        .await
        .map_err(|error| error.to_string())?;
    Ok(read)
}

/// Applies every progress message the local log holds past the table's replica position;
/// returns how many it read. Blocking (store reads, journal appends).
pub(crate) fn catch_up(parts: &ProgressReplication) -> Result<usize, StoreError> {
    let mut read = 0;
    loop {
        let position = parts.progress.offsets.replica_position();
        let written = parts.log.log().written_max_offset(PROGRESS_TOPIC, 0);
        if position > written {
            // The log was cut back below what was applied: what follows the cut is new.
            parts.progress.offsets.set_replica_position(written);
            continue;
        }
        if position == written {
            return Ok(read);
        }
        let got = parts.log.log().get(
            PROGRESS_TOPIC,
            0,
            position,
            MESSAGES_PER_READ,
            BYTES_PER_READ,
            |_| true,
        )?;
        match got.status {
            GetStatus::Found if got.next_begin_offset > position => {}
            GetStatus::OffsetTooSmall
            | GetStatus::MessageWasRemoving
            | GetStatus::OffsetFoundNull
                if got.next_begin_offset > position =>
            {
                // Retention removed messages not applied yet: what they held is lost to this
                // replica (the periodic sync's first round gave it a base to start from).
                warn!(
                    from = position,
                    to = got.next_begin_offset,
                    "progress messages removed before this replica applied them"
                );
                parts
                    .progress
                    .offsets
                    .set_replica_position(got.next_begin_offset);
                continue;
            }
            // Nothing readable yet (behind a read fence, or a queue still being built).
            _ => return Ok(read),
        }
        let mut offsets = Vec::new();
        let mut pop = Vec::new();
        let mut timers = Vec::new();
        let mut history = Vec::new();
        for raw in &got.messages {
            match MessageRecord::decode(raw, 0, DecodeOptions::default()) {
                Ok((record, _)) => match decode_batch(&record.body) {
                    Ok(batch) => {
                        for (stream, bytes) in batch {
                            match stream {
                                STREAM_CONSUMER_OFFSETS => offsets.push(bytes.to_vec()),
                                STREAM_POP | STREAM_POP_WHOLE => pop.push((stream, bytes.to_vec())),
                                STREAM_TIMERS | STREAM_TIMERS_WHOLE => {
                                    timers.push((stream, bytes.to_vec()))
                                }
                                STREAM_HISTORY | STREAM_HISTORY_WHOLE => {
                                    history.push((stream, bytes.to_vec()))
                                }
                                STREAM_BARRIER => {}
                                other => debug!(
                                    stream = other,
                                    "progress stream this broker does not know; skipped"
                                ),
                            }
                        }
                    }
                    Err(error) => warn!(%error, "progress message unreadable; skipped"),
                },
                Err(error) => warn!(%error, "progress record unreadable; skipped"),
            }
        }
        // The tables are independent, each in its own order; the position moves with the
        // offsets, last, so a crash in between applies these POP, timer and history records
        // again rather than skipping any (a POP message in flight may count one delivery
        // more; a history entry applied again replaces itself).
        let mut skipped = parts.pop.apply_replicated(&pop);
        skipped += parts.timers.apply_replicated(&timers);
        skipped += parts.progress.history.apply_replicated(&history);
        skipped += parts.progress.offsets.apply_replicated(
            &offsets,
            got.next_begin_offset,
            tidemark_remoting::now_ms(),
        );
        if skipped > 0 {
            warn!(
                skipped,
                "progress records this broker cannot read were skipped"
            );
        }
        read += got.messages.len();
        debug!(
            messages = got.messages.len(),
            offsets = offsets.len(),
            pop = pop.len(),
            timers = timers.len(),
            history = history.len(),
            next = got.next_begin_offset,
            "applied the master's progress"
        );
    }
}
