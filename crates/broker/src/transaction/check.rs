//! The check-back service (RocketMQ's `TransactionalMessageCheckService`): every
//! `transaction_check_interval`, each half past its immunity is either checked back with one
//! producer of its group (CHECK_TRANSACTION_STATE, oneway; the producer answers with
//! END_TRANSACTION) or, checked `transaction_check_max` times already, discarded. Masters only.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tidemark_protocol::headers::CheckTransactionStateRequestHeader;
use tidemark_protocol::message::{encode_offset_msg_id, property};
use tidemark_protocol::{RemotingCommand, RequestCode};
use tidemark_remoting::now_ms;
use tracing::{debug, warn};

use super::resolve::{discard, read_half, record_check, TransactionLog};
use super::PendingHalf;
use crate::clients::ClientRegistry;

/// What the check-back service touches: the transactions' log and the producers it asks.
#[derive(Debug, Clone)]
pub struct TransactionChecker {
    pub log: TransactionLog,
    pub clients: Arc<ClientRegistry>,
    /// Named in each check-back.
    pub broker_name: String,
}

pub async fn run(checker: TransactionChecker, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        // Read before each wait: transactionCheckInterval is live. A round that overruns
        // delays the next one, never runs two back to back.
        let interval =
            Duration::from_millis(checker.log.log.live.get().transaction_check_interval.max(1));
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(interval) => {}
        }
        check_round(&checker).await;
    }
}

/// One round over the pending halves; none on a slave (its master checks back).
pub async fn check_round(checker: &TransactionChecker) {
    let tx = &checker.log;
    if tx.log.role().is_slave() || tx.transactions.is_empty() {
        return;
    }
    let due = tx
        .transactions
        .due(now_ms(), tx.log.live.get().transaction_check_max);
    for half in &due.discard {
        if let Err(failure) = discard(tx, half).await {
            warn!(%failure, clo = half.commit_log_offset, "could not discard a transaction checked back too often");
        }
    }
    for half in &due.check {
        match record_check(tx, half).await {
            Ok(true) => send_check(checker, half),
            Ok(false) => {}
            Err(failure) => {
                warn!(%failure, clo = half.commit_log_offset, "could not record a transaction check-back; it is tried next round");
            }
        }
    }
}

/// Sends CHECK_TRANSACTION_STATE for `half` to one of its group's producers, if one is online
/// (the check counts either way, as in RocketMQ).
fn send_check(checker: &TransactionChecker, half: &PendingHalf) {
    let Some(channel) = checker.clients.producer_channel(
        &half.producer_group,
        checker.log.transactions.next_check_turn(),
    ) else {
        warn!(group = %half.producer_group, msg_id = %half.unique_key, checks = half.checks + 1, "transaction check-back: no producer of the group is online");
        return;
    };
    let mut record = match read_half(&checker.log, half.commit_log_offset) {
        Ok(record) => record,
        Err(failure) => {
            warn!(%failure, "transaction check-back skipped");
            return;
        }
    };
    // The producer sees the message as it sent it: in its real topic and queue.
    record.topic = half.real_topic.clone();
    if let Some(queue) = record
        .properties
        .get(property::REAL_QUEUE_ID)
        .and_then(|queue| queue.parse().ok())
    {
        record.queue_id = queue;
    }
    let mut body = BytesMut::new();
    if let Err(failure) = record.encode(&mut body) {
        warn!(%failure, "transaction check-back skipped: the half cannot be encoded");
        return;
    }
    let unique_key = (!half.unique_key.is_empty()).then(|| half.unique_key.clone());
    let header = CheckTransactionStateRequestHeader {
        tran_state_table_offset: half.queue_offset,
        commit_log_offset: half.commit_log_offset,
        msg_id: unique_key.clone(),
        transaction_id: unique_key,
        offset_msg_id: Some(encode_offset_msg_id(
            record.store_host,
            half.commit_log_offset,
        )),
        broker_name: Some(checker.broker_name.clone()),
    };
    let request = RemotingCommand::request_with_header(RequestCode::CheckTransactionState, &header)
        .with_body(body.freeze());
    debug!(group = %half.producer_group, msg_id = %half.unique_key, peer = %channel.peer_addr(), "transaction check-back");
    tokio::spawn(async move {
        if let Err(failure) = channel.oneway(request).await {
            debug!(%failure, "could not send a transaction check-back");
        }
    });
}
