//! Storing a half message and resolving one (commit, rollback, discard), with the op records
//! that say so. Every resolution appends inside [`Transactions::exclusively`] (see the module
//! doc of `transaction`) and waits for durability after it.
//!
//! [`Transactions::exclusively`]: super::Transactions::exclusively

use std::sync::Arc;

use thiserror::Error;
use tidemark_protocol::body::perm;
use tidemark_protocol::message::{property, sys_flag, DecodeOptions, MessageRecord};
use tidemark_remoting::now_ms;
use tidemark_storage::atomic_file::PersistError;
use tidemark_store::{Appended, NewMessage, StoreError};
use tracing::{info, warn};

use super::{
    op_message, pending_of, PendingHalf, Step, HALF_TOPIC, OP_CHECKED_TAG, OP_REMOVED_TAG, OP_TOPIC,
};
use crate::live_config::LiveConfig;
use crate::message_log::{LogHandle, Origin, Stored};
use crate::metadata_change::{Announce, TopicChanges};
use crate::parts::Metadata;

/// What storing and resolving transactions touch: the log, the pending halves, the topics a
/// discard creates and the door that publishes them. END_TRANSACTION takes one from
/// `BrokerState::transaction_log`; the check-back service holds its own.
#[derive(Debug, Clone)]
pub struct TransactionLog {
    pub log: LogHandle,
    pub transactions: Arc<super::Transactions>,
    pub metadata: Arc<Metadata>,
    pub topic_changes: TopicChanges,
    /// Stamped on commits, op records and discarded copies.
    pub store_host: std::net::SocketAddr,
    /// How many delay levels are configured: a committed message keeps its level.
    pub delay_levels: i32,
}

/// What the producer decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Commit,
    Rollback,
}

/// Why a resolution changed nothing.
#[derive(Debug, Error)]
pub enum ResolveError {
    /// Resolved already (a retried END_TRANSACTION, or one answering a check-back after the
    /// producer's own), discarded, or never stored here.
    #[error("no pending half message at commit log offset {0}: already resolved, or not stored on this broker")]
    NotPending(i64),
    /// RocketMQ's remark for an END_TRANSACTION from another group.
    #[error("The producer group wrong: the half message belongs to {expected}, not {given}")]
    ProducerGroupWrong { expected: String, given: String },
    /// RocketMQ's remark for a half-queue offset that does not match.
    #[error(
        "The transaction state table offset wrong: {given}, the half message is at {expected}"
    )]
    QueueOffsetWrong { expected: i64, given: i64 },
    #[error("Find prepared transaction message failed: the half message at commit log offset {0} cannot be read")]
    HalfUnreadable(i64),
    #[error("message not stored: {0}")]
    Store(#[from] StoreError),
    #[error("topic created but not persisted: {0}")]
    TopicNotDurable(#[from] PersistError),
}

/// How an END_TRANSACTION names the half it resolves.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub producer_group: &'a str,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
}

/// Rewrites a producer's message into the half it is stored as: in the half topic's one
/// queue, its real topic and queue in properties, no transaction bits (RocketMQ stores halves
/// that way, so they are indexed like any message).
pub fn into_half(message: &mut NewMessage) {
    let properties = &mut message.properties;
    properties.insert(property::REAL_TOPIC, message.topic.clone());
    properties.insert(property::REAL_QUEUE_ID, message.queue_id.to_string());
    message.topic = HALF_TOPIC.to_owned();
    message.queue_id = 0;
    message.sys_flag &= !sys_flag::TRANSACTION_MASK;
}

/// Creates the half and op topics on first use; returns whether either was created (and must
/// be made durable before the half is acknowledged).
pub fn ensure_topics(metadata: &Metadata) -> bool {
    let mut created = false;
    for topic in [HALF_TOPIC, OP_TOPIC] {
        created |= metadata
            .topics
            .ensure(topic, 1, perm::READ | perm::WRITE, now_ms())
            .1;
    }
    created
}

/// The pending-table entry of a half just stored.
pub fn pending_half(live: &LiveConfig, message: &NewMessage, appended: &Appended) -> PendingHalf {
    pending_of(
        &message.properties,
        appended.commit_log_offset as i64,
        appended.queue_offset,
        appended.store_timestamp,
        live.get().transaction_timeout,
    )
}

/// Commits or rolls back the half `claim` names. A commit stores the message in its real
/// topic (a delay level still applies); both record the resolution in the op topic.
pub async fn resolve(
    tx: &TransactionLog,
    claim: Claim<'_>,
    decision: Decision,
) -> Result<(), ResolveError> {
    let clo = claim.commit_log_offset;
    let pending = tx
        .transactions
        .get(clo)
        .ok_or(ResolveError::NotPending(clo))?;
    if pending.producer_group != claim.producer_group {
        return Err(ResolveError::ProducerGroupWrong {
            expected: pending.producer_group,
            given: claim.producer_group.to_owned(),
        });
    }
    if pending.queue_offset != claim.queue_offset {
        return Err(ResolveError::QueueOffsetWrong {
            expected: pending.queue_offset,
            given: claim.queue_offset,
        });
    }
    // Built before taking the turn (reading the half twice is harmless if another wins).
    let message = match decision {
        Decision::Commit => Some(committed(tx, read_half(tx, clo)?)),
        Decision::Rollback => None,
    };
    let op = op_message(tx.store_host, OP_REMOVED_TAG, pending.queue_offset);
    let appended = tx.transactions.exclusively(clo, |_| {
        let Some(message) = &message else {
            // Until its op record is stored the half stays pending (and is checked back).
            return match append(tx, &op) {
                Ok(stored) => (Step::Resolved, Ok((stored, None))),
                Err(failure) => (Step::Unchanged, Err(failure)),
            };
        };
        match append(tx, message) {
            // From here the commit has happened: whatever becomes of the op record, the half
            // is not pending any more (recovery finds a commit whose op record was lost).
            Ok(stored) => (Step::Resolved, Ok((stored, Some(append(tx, &op))))),
            Err(failure) => (Step::Unchanged, Err(failure)),
        }
    });
    let (stored, op_appended) = appended.ok_or(ResolveError::NotPending(clo))??;
    stored.durable().await?;
    tx.log.stats.transactions.finished(
        &pending.real_topic,
        decision == Decision::Commit,
        now_ms() - pending.stored_at_ms,
    );
    let op_durable = match op_appended {
        Some(Ok(stored)) => stored.durable().await.map(drop),
        Some(Err(failure)) => Err(failure),
        None => Ok(()),
    };
    if let Err(failure) = op_durable {
        warn!(%failure, clo, "transaction committed but its op record was not stored; recovery will find the commit");
    }
    Ok(())
}

/// Records one check-back of a pending half; `false` when it was resolved meanwhile.
pub async fn record_check(tx: &TransactionLog, half: &PendingHalf) -> Result<bool, StoreError> {
    let op = op_message(tx.store_host, OP_CHECKED_TAG, half.queue_offset);
    let appended = tx
        .transactions
        .exclusively(half.commit_log_offset, |_| match append(tx, &op) {
            Ok(stored) => (Step::Checked, Ok(stored)),
            Err(failure) => (Step::Unchanged, Err(failure)),
        });
    match appended {
        None => Ok(false),
        Some(stored) => {
            stored?.durable().await?;
            Ok(true)
        }
    }
}

/// Gives up on a half checked back too often: copied to the discard topic (unless that is
/// configured empty), then recorded as resolved.
pub async fn discard(tx: &TransactionLog, half: &PendingHalf) -> Result<(), ResolveError> {
    let clo = half.commit_log_offset;
    let live = tx.log.live.get();
    let topic = &live.transaction_discard_topic;
    let copy = if topic.is_empty() {
        None
    } else {
        let record = read_half(tx, clo)?;
        if tx
            .metadata
            .topics
            .ensure(topic, 1, perm::READ | perm::WRITE, now_ms())
            .1
        {
            // Copies in a topic a crash would forget could not be read after it.
            tx.topic_changes.clone().publish(Announce::Soon).await?;
        }
        Some(NewMessage {
            topic: topic.clone(),
            queue_id: 0,
            flag: record.flag,
            sys_flag: record.sys_flag & !sys_flag::TRANSACTION_MASK,
            born_timestamp: record.born_timestamp,
            born_host: record.born_host,
            store_host: tx.store_host,
            reconsume_times: record.reconsume_times,
            prepared_transaction_offset: 0,
            body: record.body,
            properties: record.properties,
        })
    };
    let op = op_message(tx.store_host, OP_REMOVED_TAG, half.queue_offset);
    let appended = tx.transactions.exclusively(clo, |_| {
        let mut waits = Vec::new();
        for message in copy.iter().chain(std::iter::once(&op)) {
            match append(tx, message) {
                Ok(stored) => waits.push(stored),
                Err(failure) => return (Step::Unchanged, Err(failure)),
            }
        }
        (Step::Resolved, Ok(waits))
    });
    let Some(waits) = appended else {
        return Ok(());
    };
    for stored in waits? {
        stored.durable().await?;
    }
    info!(
        group = %half.producer_group,
        topic = %half.real_topic,
        msg_id = %half.unique_key,
        checks = half.checks,
        to = %topic,
        "transaction discarded: no producer resolved it after the maximum of check-backs"
    );
    Ok(())
}

/// Appends one message of a resolution (a commit, an op record, a discarded copy); counted
/// like any other put, as the records a transaction's sends produce, but not as arriving: the
/// half was, when the producer sent it.
fn append<'a>(tx: &'a TransactionLog, message: &NewMessage) -> Result<Stored<'a>, StoreError> {
    tx.log
        .log()
        .append(std::slice::from_ref(message), Origin::Due)
}

/// The stored half at `commit_log_offset`.
pub fn read_half(
    tx: &TransactionLog,
    commit_log_offset: i64,
) -> Result<MessageRecord, ResolveError> {
    let unreadable = || ResolveError::HalfUnreadable(commit_log_offset);
    let offset = u64::try_from(commit_log_offset).map_err(|_| unreadable())?;
    let bytes = tx.log.log().read_record(offset)?.ok_or_else(unreadable)?;
    let (record, _) =
        MessageRecord::decode(&bytes, 0, DecodeOptions::default()).map_err(|_| unreadable())?;
    if record.topic != HALF_TOPIC {
        return Err(unreadable());
    }
    Ok(record)
}

/// The committed message of a half: back in its real topic and queue, flagged COMMIT, naming
/// the half in PREPAREDTRANSACTIONOFFSET (RocketMQ's `endMessageTransaction`).
fn committed(tx: &TransactionLog, half: MessageRecord) -> NewMessage {
    let mut properties = half.properties;
    let topic = properties.remove(property::REAL_TOPIC).unwrap_or_default();
    let queue_id = properties
        .remove(property::REAL_QUEUE_ID)
        .and_then(|queue| queue.parse().ok())
        .unwrap_or(0);
    properties.remove(property::TRANSACTION_PREPARED);
    let delay = properties
        .get(property::DELAY_TIME_LEVEL)
        .and_then(|level| level.parse::<i32>().ok())
        .unwrap_or(0);
    let mut message = NewMessage {
        topic,
        queue_id,
        flag: half.flag,
        sys_flag: (half.sys_flag & !sys_flag::TRANSACTION_MASK) | sys_flag::TRANSACTION_COMMIT_TYPE,
        born_timestamp: half.born_timestamp,
        born_host: half.born_host,
        store_host: tx.store_host,
        reconsume_times: half.reconsume_times,
        prepared_transaction_offset: half.physical_offset,
        body: half.body,
        properties,
    };
    if delay > 0 {
        crate::schedule::to_schedule(tx.delay_levels, &mut message, delay);
    }
    message
}
