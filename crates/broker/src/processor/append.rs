//! Appending what a request produced: the one place a handler's messages reach the store, and
//! how a refused append is answered.

use tidemark_protocol::message::property;
use tidemark_protocol::RemotingCommand;
use tidemark_protocol::ResponseCode;
use tidemark_store::{Appended, NewMessage, StoreError, SCHEDULE_TOPIC, TIMER_TOPIC};

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

/// A retry or dead-letter topic.
fn is_redelivery(topic: &str) -> bool {
    topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%")
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
        let topic = run[0].topic.as_str();
        state.stats.traffic.stored(topic, run.len() as u64, bytes);
        if is_redelivery(topic) {
            state.stats.traffic.redelivered(topic, run.len() as u64);
        } else if topic == SCHEDULE_TOPIC || topic == TIMER_TOPIC {
            // A delayed message: where it goes once its delay ends.
            for message in run {
                if let Some(real) = message
                    .properties
                    .get(property::REAL_TOPIC)
                    .filter(|real| is_redelivery(real))
                {
                    state.stats.traffic.redelivered(real, 1);
                }
            }
        }
    }
    state.ha.notify_new_data();
    Ok((appended, durable))
}
