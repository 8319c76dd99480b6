//! How an append is answered: a send acknowledged (once the slaves have it, when the producer
//! waits for them) or refused. Appends themselves go through [`crate::message_log::MessageLog`].

use tidemark_protocol::headers::SendMessageResponseHeader;
use tidemark_protocol::message::encode_offset_msg_id;
use tidemark_protocol::RemotingCommand;
use tidemark_protocol::ResponseCode;
use tidemark_store::{Appended, StoreError};

use super::error;
use crate::ha_progress::ReplicaWait;
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

/// The SEND response: offset message ids, and — a SYNC_MASTER's promise — whether a slave has
/// the messages (they are stored either way). The role is read once the messages are in the
/// log: in controller mode a replica joins the SyncStateSet counting from what the log held
/// after it was counted, so a send must not skip the wait on a role read before its append.
pub(super) async fn acknowledge(
    state: &BrokerState,
    queue_id: i32,
    appended: &[Appended],
    producer_waits: bool,
    extras: AnswerExtras,
) -> RemotingCommand {
    let Some(first) = appended.first() else {
        return error(ResponseCode::SystemError, "nothing appended");
    };
    let store_host = state.store_host();
    let message_ids: Vec<String> = appended
        .iter()
        .map(|one| encode_offset_msg_id(store_host, one.commit_log_offset as i64))
        .collect();
    let mut code = ResponseCode::Success;
    if producer_waits && state.role.now().waits_for_slaves() {
        let end = appended
            .iter()
            .map(|one| one.commit_log_offset + u64::from(one.size))
            .max()
            .unwrap_or(0);
        let waited = state
            .ha
            .wait_replicated(
                end,
                state.log().positions().1,
                state.live.get().ha_slave_fallbehind_max,
                std::time::Duration::from_millis(state.live.get().slave_timeout),
            )
            .await;
        code = match waited {
            ReplicaWait::Replicated => ResponseCode::Success,
            ReplicaWait::SlaveNotAvailable => ResponseCode::SlaveNotAvailable,
            ReplicaWait::Timeout => ResponseCode::FlushSlaveTimeout,
            ReplicaWait::Deposed => ResponseCode::SlaveNotAvailable,
        };
    }
    RemotingCommand::response(code, None).with_header(&SendMessageResponseHeader {
        msg_id: message_ids.join(","),
        queue_id,
        queue_offset: first.queue_offset,
        transaction_id: extras.transaction_id,
        batch_uniq_id: None,
        msg_region: state.live.get().region_id.clone(),
        trace_on: state.live.get().trace_on,
        recall_handle: extras.recall_handle,
    })
}

/// What a send's answer carries for some messages only.
#[derive(Debug, Default)]
pub(super) struct AnswerExtras {
    /// A transaction's half: its id, for the producer's END_TRANSACTION.
    pub transaction_id: Option<String>,
    /// A timer message: what recalls it ([`RecallHandle`](tidemark_protocol::message::RecallHandle)).
    pub recall_handle: Option<String>,
}
