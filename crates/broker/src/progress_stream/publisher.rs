//! The master's side: the outbox's records, batched into messages of the progress topic.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use tidemark_protocol::message::Properties;
use tidemark_store::NewMessage;
use tracing::{debug, info, warn};

use super::ProgressReplication;
use crate::progress_record::{encode_batch, PROGRESS_TOPIC};

/// Record bytes per message at most (a message may hold up to 4 MiB).
const BATCH_BYTES_MAX: usize = 1 << 20;
/// How long a failed append waits before it is tried again.
const RETRY_AFTER: Duration = Duration::from_millis(200);

enum Round {
    Published,
    Idle,
    Failed,
}

pub(crate) async fn run(parts: ProgressReplication, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        let wait = match publish_one(&parts).await {
            Round::Published => Duration::ZERO,
            Round::Failed => RETRY_AFTER,
            Round::Idle => Duration::MAX,
        };
        tokio::select! {
            biased;
            _ = &mut stop => break,
            _ = parts.stream.outbox().queued() => {}
            _ = tokio::time::sleep(wait.min(Duration::from_secs(3600))) => {}
        }
    }
    // What is queued at a graceful stop still reaches the log (and the replicas).
    while matches!(publish_one(&parts).await, Round::Published) {}
}

async fn publish_one(parts: &ProgressReplication) -> Round {
    let outbox = parts.stream.outbox();
    // A slave's own changes (commits consumers send it while the master is away) are not the
    // stream's: the master learns them through the periodic sync. A master that never had a
    // replica (a broker on its own, `tidemark dev`) writes nothing nobody reads; every replica
    // that connects gets whole copies of the tables first (see `ha::serve_slave`).
    let has_replicas = parts.controller_mode || parts.log.ha.ever_had_slave();
    if parts.log.role().is_slave() || !has_replicas {
        outbox.discard_all();
        return Round::Idle;
    }
    if outbox.take_resync() {
        let (offsets, pop) = (
            parts.progress.offsets.publish_whole(),
            parts.pop.publish_whole(),
        );
        parts.timers.publish_whole();
        let history = parts.progress.history.publish_whole();
        info!(
            offsets,
            pop, history, "publishing whole progress tables for the replicas"
        );
    }
    let Some(batch) = outbox.take(BATCH_BYTES_MAX) else {
        return Round::Idle;
    };
    let records = &batch.records;
    let message = message(parts, Bytes::from(encode_batch(records)));
    // Straight to the store, not through the send path: progress is not traffic, and the
    // put counters operators read stay the clients' messages.
    match parts.log.log().append(
        std::slice::from_ref(&message),
        crate::message_log::Origin::Bookkeeping,
    ) {
        Ok(stored) => {
            let end = stored
                .appended()
                .first()
                .map_or(0, |one| one.commit_log_offset + u64::from(one.size));
            outbox.published(batch.through, end);
            debug!(records = batch.records.len(), end, "progress published");
            if let Err(failure) = stored.durable().await {
                warn!(%failure, "progress message not flushed");
            }
            Round::Published
        }
        Err(failure) => {
            warn!(%failure, records = batch.records.len(), "progress message not stored; trying again");
            outbox.put_back(batch);
            Round::Failed
        }
    }
}

fn message(parts: &ProgressReplication, body: Bytes) -> NewMessage {
    NewMessage::broker_record(
        PROGRESS_TOPIC,
        parts.store_host,
        tidemark_remoting::now_ms(),
        body,
        Properties::default(),
    )
}
