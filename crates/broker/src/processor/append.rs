//! Appending what a request produced: the one place a handler's messages reach the store, and
//! how a refused append is answered.

use tidemark_protocol::RemotingCommand;
use tidemark_protocol::ResponseCode;
use tidemark_store::{Appended, NewMessage, StoreError};

use super::error;
use crate::state::BrokerState;

/// The response code a failed append maps to.
pub(super) fn store_error_response(failure: &StoreError) -> RemotingCommand {
    let code = match failure {
        StoreError::MessageTooLarge { .. } | StoreError::Message(_) => ResponseCode::MessageIllegal,
        StoreError::DiskFull { .. }
        | StoreError::DiskNearlyFull { .. }
        | StoreError::SyncFailed { .. }
        | StoreError::Closed => ResponseCode::ServiceNotAvailable,
        _ => ResponseCode::SystemError,
    };
    error(code, format!("message not stored: {failure}"))
}

/// Appends; under Sync flush the reply waits (awaits, holding no thread) for the group commit
/// that covers the messages.
pub(crate) async fn put(
    state: &BrokerState,
    messages: Vec<NewMessage>,
) -> Result<Vec<Appended>, StoreError> {
    let started = std::time::Instant::now();
    let (appended, durable) = append(state, &messages)?;
    durable.await?;
    state
        .stats
        .store_latency
        .observe(started.elapsed().as_secs_f64());
    Ok(appended)
}

/// Appends and counts, without waiting for durability: the position in the log is taken when
/// this returns (what a caller ordering its appends needs); await the `Durable` before
/// acknowledging anything.
pub(crate) fn append(
    state: &BrokerState,
    messages: &[NewMessage],
) -> Result<(Vec<Appended>, tidemark_store::Durable), StoreError> {
    let (appended, durable) = state.store.append_batch(messages)?;
    state
        .stats
        .messages_put_total
        .fetch_add(messages.len() as u64, std::sync::atomic::Ordering::Relaxed);
    // A batch is one topic's (or a few runs of one topic): one count per run.
    for run in messages.chunk_by(|a, b| a.topic == b.topic) {
        let bytes = run.iter().map(|message| message.body.len() as u64).sum();
        state
            .stats
            .traffic
            .stored(&run[0].topic, run.len() as u64, bytes);
    }
    state.ha.notify_new_data();
    Ok((appended, durable))
}
