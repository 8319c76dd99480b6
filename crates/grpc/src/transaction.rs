//! Transactions over gRPC: EndTransaction, and the broker's check-backs delivered to a client
//! as a Telemetry RecoverOrphanedTransactionCommand.
//!
//! A transactional send stores a half message as a remoting producer's would, in the topic's
//! producer group (the topic's name, as RocketMQ's proxy names it), so any client publishing
//! the topic can answer its check-back. The transaction id handed to the client names the half
//! itself — its broker, commit-log offset and half-queue offset — so EndTransaction needs no
//! table in the gateway (the proxy keeps one in memory for 30 s) and works through any gateway,
//! before and after a restart.

use std::sync::atomic::{AtomicUsize, Ordering};

use tidemark_protocol::body::{HeartbeatData, ProducerData};
use tidemark_protocol::headers::{CheckTransactionStateRequestHeader, EndTransactionRequestHeader};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::message::{sys_flag, DecodeOptions, MessageRecord};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tracing::debug;

use crate::cluster::Target;
use crate::convert::{full_name, incoming};
use crate::gateway::{Caller, Gateway, FORWARD_TIMEOUT};
use crate::proto::{
    telemetry_command::Command, Code, EndTransactionRequest, EndTransactionResponse,
    RecoverOrphanedTransactionCommand, Resource, TelemetryCommand, TransactionResolution,
    TransactionSource,
};
use crate::status::{from_response, ok, status};

/// The transaction id of a half: `<commit-log offset>:<half-queue offset>:<broker name>`.
pub fn transaction_id(broker: &str, commit_log_offset: i64, queue_offset: i64) -> String {
    format!("{commit_log_offset}:{queue_offset}:{broker}")
}

/// (broker, commit-log offset, half-queue offset) of a transaction id; `None` if it is not one
/// of ours.
pub fn parse_transaction_id(id: &str) -> Option<(String, i64, i64)> {
    let mut parts = id.splitn(3, ':');
    let commit_log_offset = parts.next()?.parse().ok()?;
    let queue_offset = parts.next()?.parse().ok()?;
    let broker = parts.next()?;
    (!broker.is_empty()).then(|| (broker.to_owned(), commit_log_offset, queue_offset))
}

impl Gateway {
    pub async fn end_transaction(
        &self,
        caller: &Caller,
        request: EndTransactionRequest,
    ) -> EndTransactionResponse {
        let answer = |code: Code, text: String| EndTransactionResponse {
            status: Some(status(code, text)),
        };
        let topic = full_name(request.topic.as_ref());
        if topic.is_empty() {
            return answer(Code::IllegalTopic, "the topic name is empty".into());
        }
        let Some((broker, commit_log_offset, queue_offset)) =
            parse_transaction_id(&request.transaction_id)
        else {
            return answer(
                Code::InvalidTransactionId,
                format!(
                    "{:?} is not a transaction id this cluster gave out",
                    request.transaction_id
                ),
            );
        };
        let commit_or_rollback = match TransactionResolution::try_from(request.resolution) {
            Ok(TransactionResolution::Commit) => sys_flag::TRANSACTION_COMMIT_TYPE,
            Ok(TransactionResolution::Rollback) => sys_flag::TRANSACTION_ROLLBACK_TYPE,
            // Unknown: the broker keeps checking back.
            _ => return EndTransactionResponse { status: Some(ok()) },
        };
        let header = EndTransactionRequestHeader {
            producer_group: topic.clone(),
            tran_state_table_offset: queue_offset,
            commit_log_offset,
            commit_or_rollback,
            from_transaction_check: Some(
                request.source == TransactionSource::SourceServerCheck as i32,
            ),
            msg_id: request.message_id.clone(),
            transaction_id: Some(request.message_id.clone()),
        };
        let command = RemotingCommand::request_with_header(RequestCode::EndTransaction, &header);
        let response = self
            .invoke_at(caller, &topic, &broker, command, FORWARD_TIMEOUT)
            .await;
        if response.response_code() == ResponseCode::Success {
            return EndTransactionResponse { status: Some(ok()) };
        }
        let remark = response.remark.clone().unwrap_or_default();
        if remark.contains("no pending half message") {
            // Resolved already (or discarded): nothing was changed, and the client is told.
            return answer(Code::InvalidTransactionId, remark);
        }
        EndTransactionResponse {
            status: Some(from_response(&response)),
        }
    }

    /// Delivers a broker's CHECK_TRANSACTION_STATE to one client publishing the half's topic,
    /// over its Telemetry stream; dropped (the broker asks again next round) when none has one.
    pub(crate) fn recover_orphaned(&self, request: &RemotingCommand) {
        let Ok(header) = request.decode_header::<CheckTransactionStateRequestHeader>() else {
            return;
        };
        let Ok((record, _)) = MessageRecord::decode(&request.body, 0, DecodeOptions::default())
        else {
            return;
        };
        let broker = header
            .broker_name
            .clone()
            .unwrap_or_else(|| self.cluster.own_name().to_owned());
        let topic = record.topic.clone();
        let candidates: Vec<_> = self
            .sessions
            .all()
            .into_iter()
            .filter(|session| session.publishes(&topic))
            .filter_map(|session| session.telemetry())
            .collect();
        if candidates.is_empty() {
            debug!(%topic, "transaction check-back: no gRPC client publishing the topic has a Telemetry stream");
            return;
        }
        static TURN: AtomicUsize = AtomicUsize::new(0);
        let outbound = &candidates[TURN.fetch_add(1, Ordering::Relaxed) % candidates.len()];
        let resource = Resource {
            resource_namespace: String::new(),
            name: topic,
        };
        let command = TelemetryCommand {
            status: Some(ok()),
            command: Some(Command::RecoverOrphanedTransactionCommand(
                RecoverOrphanedTransactionCommand {
                    message: Some(incoming(record, &resource, None, None)),
                    transaction_id: transaction_id(
                        &broker,
                        header.commit_log_offset,
                        header.tran_state_table_offset,
                    ),
                },
            )),
        };
        // A client that does not read its stream loses this check, not the gateway's time.
        if outbound.try_send(Ok(command)).is_err() {
            debug!("transaction check-back dropped: the client's Telemetry stream is full");
        }
    }

    /// Registers, with every other broker of the topics gRPC clients publish, this gateway's
    /// connection as a producer of those topics' groups, so their check-backs come here.
    pub async fn register_producers_elsewhere(&self) {
        let mut topics: Vec<String> = self
            .sessions
            .all()
            .iter()
            .flat_map(|session| session.published_topics())
            .collect();
        topics.sort();
        topics.dedup();
        let mut by_address: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for topic in &topics {
            for broker in self.cluster.brokers(topic, None).await {
                if let Target::Remote(address) =
                    self.cluster.target(topic, &broker.broker_name).await
                {
                    by_address.entry(address).or_default().push(topic.clone());
                }
            }
        }
        for (address, groups) in by_address {
            let data = HeartbeatData {
                client_id: format!("tidemark-grpc-gateway@{}", self.cluster.own_name()),
                producer_data_set: groups
                    .into_iter()
                    .map(|group_name| ProducerData { group_name })
                    .collect(),
                ..HeartbeatData::default()
            };
            let request =
                RemotingCommand::request(RequestCode::HeartBeat).with_body(data.to_json_bytes());
            if let Err(failure) = self
                .cluster
                .forward(&address, request, FORWARD_TIMEOUT)
                .await
            {
                debug!(%address, %failure, "could not register gRPC producers with a broker");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_ids_name_the_half() {
        let id = transaction_id("broker-a", 4_096, 7);
        assert_eq!(
            parse_transaction_id(&id),
            Some(("broker-a".to_owned(), 4_096, 7))
        );
        assert_eq!(
            parse_transaction_id("1:2:name:with:colons"),
            Some(("name:with:colons".to_owned(), 1, 2))
        );
        for bad in ["", "7F000001", "1:2:", "x:2:b", "1:y:b", "1"] {
            assert_eq!(parse_transaction_id(bad), None, "{bad:?}");
        }
    }
}
