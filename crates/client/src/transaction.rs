//! Transactional producer (Java `TransactionMQProducer`): a half message is sent, the local
//! transaction runs, and its outcome commits or rolls the message back (END_TRANSACTION,
//! oneway). An outcome the broker never got — unknown, lost, or the producer died — is asked
//! for again by the broker (CHECK_TRANSACTION_STATE), which the listener answers.

use std::collections::BTreeMap;
use std::sync::Arc;

use tidemark_protocol::body::MessageQueue;
use tidemark_protocol::headers::{CheckTransactionStateRequestHeader, EndTransactionRequestHeader};
use tidemark_protocol::message::{
    decode_offset_msg_id, property, sys_flag, DecodeOptions, MessageRecord,
};
use tidemark_protocol::{RemotingCommand, RequestCode};
use tidemark_remoting::Channel;
use tracing::{debug, warn};

use crate::error::{ClientError, Result};
use crate::instance::BrokerRequests;
use crate::message::{Message, MessageExt};
use crate::producer::{sync_result, Mode, SendCore, SendResult, SendStatus};
use crate::BoxFuture;

/// What a local transaction came to (Java `LocalTransactionState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalTransactionState {
    CommitMessage,
    RollbackMessage,
    /// Not decided yet: the broker checks back later.
    Unknown,
}

impl LocalTransactionState {
    /// END_TRANSACTION's `commitOrRollback`.
    fn wire_value(self) -> i32 {
        match self {
            LocalTransactionState::CommitMessage => sys_flag::TRANSACTION_COMMIT_TYPE,
            LocalTransactionState::RollbackMessage => sys_flag::TRANSACTION_ROLLBACK_TYPE,
            LocalTransactionState::Unknown => sys_flag::TRANSACTION_NOT_TYPE,
        }
    }
}

/// Runs local transactions and answers check-backs (Java `TransactionListener`).
pub trait TransactionListener: Send + Sync + 'static {
    /// Runs the local transaction of a half message the broker has stored.
    fn execute(
        &self,
        message: &Message,
        sent: &SendResult,
    ) -> BoxFuture<'static, LocalTransactionState>;
    /// The broker asks what became of a half message's transaction.
    fn check(&self, message: &MessageExt) -> BoxFuture<'static, LocalTransactionState>;
}

/// The outcome of [`TransactionProducer::send_in_transaction`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionSendResult {
    pub send: SendResult,
    /// What the local transaction answered (ROLLBACK without running it when the half was
    /// not stored as durably as asked).
    pub state: LocalTransactionState,
}

/// A producer of transactional messages; check-backs for its group reach its listener.
#[derive(Clone)]
pub struct TransactionProducer {
    core: Arc<SendCore>,
    checker: Arc<Checker>,
}

impl std::fmt::Debug for TransactionProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionProducer")
            .field("group", &self.core.group())
            .finish_non_exhaustive()
    }
}

struct Checker {
    group: String,
    listener: Arc<dyn TransactionListener>,
}

impl crate::producer::ProducerBuilder {
    /// Starts a transactional producer: `listener` runs each local transaction and answers
    /// the broker's check-backs.
    pub async fn start_transactional(
        self,
        listener: Arc<dyn TransactionListener>,
    ) -> Result<TransactionProducer> {
        let producer = self.start().await?;
        Ok(TransactionProducer::new(producer.core(), listener))
    }
}

/// Sends a transactional half message: flagged prepared, in the producer's group.
async fn send_half(core: &SendCore, mut message: Message) -> Result<SendResult> {
    // A half cannot be delayed (Java's client drops the level too).
    let properties = message.properties_mut();
    properties.remove(property::DELAY_TIME_LEVEL);
    properties.insert(property::TRANSACTION_PREPARED, "true");
    properties.insert(property::PRODUCER_GROUP, core.group().to_owned());
    core.send_flagged(
        message,
        None,
        Mode::Sync,
        sys_flag::TRANSACTION_PREPARED_TYPE,
    )
    .await
    .and_then(sync_result)
}

impl TransactionProducer {
    pub(crate) fn new(core: Arc<SendCore>, listener: Arc<dyn TransactionListener>) -> Self {
        let checker = Arc::new(Checker {
            group: core.group().to_owned(),
            listener,
        });
        let target: Arc<dyn BrokerRequests> = checker.clone();
        core.instance.serve_broker_requests(Arc::downgrade(&target));
        Self { core, checker }
    }

    /// `ip@instanceName`.
    pub fn client_id(&self) -> &str {
        self.core.instance.client_id()
    }

    /// Sends `message` as a half, runs the local transaction, and tells the broker its
    /// outcome. Errors only when the half was not stored; a lost outcome is recovered by the
    /// broker's check-back.
    pub async fn send_in_transaction(&self, message: Message) -> Result<TransactionSendResult> {
        let sent = send_half(&self.core, message.clone()).await?;
        if let Some(addr) = self.core.instance.master_addr(&sent.queue.broker_name) {
            // Before the local transaction: should its outcome be lost, the broker asks us.
            self.core.instance.make_known_to(&addr).await;
        }
        let state = if sent.status == SendStatus::SendOk {
            self.checker.listener.execute(&message, &sent).await
        } else {
            LocalTransactionState::RollbackMessage
        };
        if let Err(failure) = self.end(&sent, state).await {
            // The broker checks back: the transaction is not lost, only decided later.
            warn!(%failure, msg_id = %sent.msg_id, ?state, "END_TRANSACTION not sent");
        }
        Ok(TransactionSendResult { send: sent, state })
    }

    async fn end(&self, sent: &SendResult, state: LocalTransactionState) -> Result<()> {
        let (_, commit_log_offset) = decode_offset_msg_id(&sent.offset_msg_id)?;
        let addr = self
            .core
            .instance
            .master_addr(&sent.queue.broker_name)
            .ok_or_else(|| ClientError::BrokerNotFound {
                broker_name: sent.queue.broker_name.clone(),
            })?;
        let request = end_request(
            &self.checker.group,
            sent.queue_offset,
            commit_log_offset,
            state,
            false,
            &sent.msg_id,
        );
        self.core.instance.oneway(&addr, request).await
    }

    /// Stops heartbeats and closes connections; the group's other producers answer
    /// check-backs from then on.
    pub async fn shutdown(&self) {
        self.core
            .instance
            .shutdown(Some(&self.checker.group), None)
            .await;
    }
}

fn end_request(
    group: &str,
    queue_offset: i64,
    commit_log_offset: i64,
    state: LocalTransactionState,
    from_check: bool,
    msg_id: &str,
) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::EndTransaction,
        &EndTransactionRequestHeader {
            producer_group: group.to_owned(),
            tran_state_table_offset: queue_offset,
            commit_log_offset,
            commit_or_rollback: state.wire_value(),
            from_transaction_check: Some(from_check),
            msg_id: msg_id.to_owned(),
            transaction_id: Some(msg_id.to_owned()),
        },
    )
}

impl BrokerRequests for Checker {
    fn consumer_ids_changed(&self, _group: &str) {}

    fn reset_offsets(
        &self,
        _group: &str,
        _topic: &str,
        _offsets: BTreeMap<MessageQueue, i64>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }

    fn check_transaction(
        &self,
        channel: Channel,
        request: RemotingCommand,
    ) -> BoxFuture<'static, ()> {
        let group = self.group.clone();
        let listener = self.listener.clone();
        Box::pin(async move {
            let checked = match checked_message(&request) {
                Ok(checked) => checked,
                Err(failure) => {
                    warn!(%failure, "a transaction check-back could not be read");
                    return;
                }
            };
            let (header, message) = checked;
            if message.property(property::PRODUCER_GROUP) != Some(group.as_str()) {
                debug!(group = ?message.property(property::PRODUCER_GROUP), "check-back for another group ignored");
                return;
            }
            // The listener may take its time; the broker's connection is not held up.
            tokio::spawn(async move {
                let state = listener.check(&message).await;
                let reply = end_request(
                    &group,
                    header.tran_state_table_offset,
                    header.commit_log_offset,
                    state,
                    true,
                    &message.msg_id,
                );
                if let Err(failure) = channel.oneway(reply).await {
                    debug!(%failure, "the answer to a check-back was not sent");
                }
            });
        })
    }
}

/// The check-back's header and the half message it asks about.
fn checked_message(
    request: &RemotingCommand,
) -> Result<(CheckTransactionStateRequestHeader, MessageExt)> {
    let header: CheckTransactionStateRequestHeader = request.decode_header()?;
    let (record, _) = MessageRecord::decode(&request.body, 0, DecodeOptions::default())?;
    let queue = MessageQueue::new(record.topic.clone(), String::new(), record.queue_id);
    Ok((header, MessageExt::from_record(record, &queue)?))
}
