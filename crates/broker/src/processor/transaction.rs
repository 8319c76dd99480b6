//! Transactional sends and END_TRANSACTION: a half message stored in the half topic, then
//! committed or rolled back by its producer (`crate::transaction`).

use std::sync::Arc;

use tidemark_protocol::headers::{EndTransactionRequestHeader, SendMessageRequestHeader};
use tidemark_protocol::message::{property, sys_flag, Properties};
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::Channel;
use tidemark_store::NewMessage;
use tracing::{debug, info};

use super::append::store_error_response;
use super::{bad_header, error, success};
use crate::metadata_change::Announce;
use crate::state::BrokerState;
use crate::transaction::resolve::{self, Claim, Decision, ResolveError};

/// Whether a send is a half message. RocketMQ's one exception is kept: a consumed
/// transactional message sent back for a retry (reconsume times and a delay level set) is an
/// ordinary message again, its prepared flag cleared.
pub(super) fn is_half(header: &mut SendMessageRequestHeader, properties: &Properties) -> bool {
    let prepared_flag =
        header.sys_flag & sys_flag::TRANSACTION_MASK == sys_flag::TRANSACTION_PREPARED_TYPE;
    let prepared_property = properties
        .get(property::TRANSACTION_PREPARED)
        .is_some_and(|value| value.eq_ignore_ascii_case("true"));
    if !prepared_flag && !prepared_property {
        return false;
    }
    let retried = header.reconsume_times.unwrap_or(0) > 0
        && properties
            .get(property::DELAY_TIME_LEVEL)
            .and_then(|level| level.parse::<i32>().ok())
            .is_some_and(|level| level > 0);
    if retried {
        header.sys_flag &= !sys_flag::TRANSACTION_MASK;
        return false;
    }
    true
}

/// Stores a half message and records it pending; the answer names the half (offset message
/// id, half-queue offset) as RocketMQ's does, which END_TRANSACTION then quotes.
pub(super) async fn send_half(
    state: &Arc<BrokerState>,
    message: NewMessage,
    queue_id: i32,
    producer_waits: bool,
) -> RemotingCommand {
    if state.live.get().reject_transaction_message {
        return error(
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] sending transaction message is forbidden",
                state.config.broker_ip1
            ),
        );
    }
    let mut message = message;
    resolve::into_half(&mut message);
    if resolve::ensure_topics(&state.metadata) {
        if let Err(failure) = state.topic_changes().publish(Announce::Soon).await {
            return super::metadata_not_durable(&failure);
        }
    }
    let appended = match state.log().put(vec![message.clone()]).await {
        Ok(appended) => appended,
        Err(failure) => return store_error_response(&failure),
    };
    let Some(first) = appended.first() else {
        return error(ResponseCode::SystemError, "nothing appended");
    };
    let half = resolve::pending_half(&state.live, &message, first);
    let transaction_id = (!half.unique_key.is_empty()).then(|| half.unique_key.clone());
    state.transactions.add(half);
    super::append::acknowledge(
        state,
        queue_id,
        &appended,
        producer_waits,
        super::append::AnswerExtras {
            transaction_id,
            recall_handle: None,
        },
    )
    .await
}

/// The refusal of a transactional batch (RocketMQ's remark).
pub(super) fn batch_refused() -> RemotingCommand {
    error(
        ResponseCode::MessageIllegal,
        "batch message does not support transaction",
    )
}

/// END_TRANSACTION (oneway from producers, so the answer is mostly for logs and tests):
/// commit or rollback applied once; unknown (0) leaves the half to the check-back.
pub(super) async fn end_transaction(
    state: &Arc<BrokerState>,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<EndTransactionRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    if state.role.is_slave() {
        return error(
            ResponseCode::SlaveNotAvailable,
            "Can't process end transaction on slave",
        );
    }
    let decision = match header.commit_or_rollback & sys_flag::TRANSACTION_MASK {
        sys_flag::TRANSACTION_COMMIT_TYPE => Decision::Commit,
        sys_flag::TRANSACTION_ROLLBACK_TYPE => Decision::Rollback,
        _ => {
            debug!(msg_id = %header.msg_id, "END_TRANSACTION unknown: the half waits for its check-back");
            return success();
        }
    };
    let claim = Claim {
        producer_group: &header.producer_group,
        queue_offset: header.tran_state_table_offset,
        commit_log_offset: header.commit_log_offset,
    };
    match resolve::resolve(&state.transaction_log(), claim, decision).await {
        Ok(()) => {
            debug!(msg_id = %header.msg_id, ?decision, from_check = header.from_transaction_check.unwrap_or(false), "transaction resolved");
            success()
        }
        Err(ResolveError::Store(failure)) => store_error_response(&failure),
        Err(failure) => {
            info!(%failure, msg_id = %header.msg_id, ?decision, peer = %channel.peer_addr(), from_check = header.from_transaction_check.unwrap_or(false), "END_TRANSACTION changed nothing");
            error(ResponseCode::SystemError, failure.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(sys_flag: i32, properties: &str, reconsume_times: i32) -> SendMessageRequestHeader {
        SendMessageRequestHeader {
            producer_group: "P".into(),
            topic: "T".into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id: 0,
            sys_flag,
            born_timestamp: 0,
            flag: 0,
            properties: Some(properties.into()),
            reconsume_times: Some(reconsume_times),
            unit_mode: false,
            batch: false,
            max_reconsume_times: None,
            broker_name: None,
        }
    }

    #[test]
    fn half_messages_are_known_by_flag_or_property() {
        for (flag, properties) in [
            (sys_flag::TRANSACTION_PREPARED_TYPE, ""),
            (0, "TRAN_MSG\u{1}true\u{2}"),
            (
                sys_flag::TRANSACTION_PREPARED_TYPE | sys_flag::COMPRESSED,
                "TRAN_MSG\u{1}true\u{2}PGROUP\u{1}P\u{2}",
            ),
        ] {
            let parsed = Properties::parse(properties);
            assert!(
                is_half(&mut header(flag, properties, 0), &parsed),
                "{flag} {properties:?}"
            );
        }
        for (flag, properties) in [
            (0, ""),
            (sys_flag::COMPRESSED, "TRAN_MSG\u{1}false\u{2}"),
            (sys_flag::TRANSACTION_COMMIT_TYPE, ""),
        ] {
            let parsed = Properties::parse(properties);
            assert!(
                !is_half(&mut header(flag, properties, 0), &parsed),
                "{flag} {properties:?}"
            );
        }
    }

    /// A consumed transactional message sent back for a retry keeps TRAN_MSG; as in RocketMQ it
    /// is an ordinary message then, stored without the prepared flag.
    #[test]
    fn a_retried_transactional_message_is_an_ordinary_one() {
        let properties = "TRAN_MSG\u{1}true\u{2}DELAY\u{1}3\u{2}";
        let parsed = Properties::parse(properties);
        let mut retried = header(sys_flag::TRANSACTION_PREPARED_TYPE, properties, 1);
        assert!(!is_half(&mut retried, &parsed));
        assert_eq!(retried.sys_flag & sys_flag::TRANSACTION_MASK, 0);
        assert!(is_half(&mut header(0, properties, 0), &parsed));
    }
}
