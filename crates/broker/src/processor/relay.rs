//! Admin requests answered by consumers: GET_CONSUMER_RUNNING_INFO (mqadmin `consumerStatus`),
//! CONSUME_MESSAGE_DIRECTLY (`consumeMessageDirectly`, the dashboard's resend) and
//! INVOKE_BROKER_TO_GET_CONSUMER_STATUS (`getConsumerStatus`). The broker finds the client's
//! connection in the group and passes the request on, as RocketMQ's `callConsumer` does; the
//! client's answer is the admin's answer (for the status, every client's answer, collected).

use std::time::Duration;

use std::collections::BTreeMap;

use tidemark_protocol::body::GetConsumerStatusBody;
use tidemark_protocol::headers::{
    ConsumeMessageDirectlyResultRequestHeader, GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::message::decode_offset_msg_id;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingError;

use super::{bad_header, error, success};
use crate::state::BrokerState;

/// How long the client gets to answer (RocketMQ's broker-to-client call timeout).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) async fn consumer_running_info(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<GetConsumerRunningInfoRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let relayed = relayed(request, RequestCode::GetConsumerRunningInfo);
    call_consumer(state, &header.consumer_group, &header.client_id, relayed).await
}

/// The message (named by its offset id) goes to the client as the body, with this broker's
/// name, as RocketMQ sends it.
pub(super) async fn consume_message_directly(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<ConsumeMessageDirectlyResultRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let record = match decode_offset_msg_id(&header.msg_id)
        .ok()
        .and_then(|(_, offset)| u64::try_from(offset).ok())
        .map(|offset| state.log().read_record(offset))
    {
        Some(Ok(Some(record))) => record,
        Some(Err(failure)) => {
            return error(ResponseCode::SystemError, format!("read failed: {failure}"))
        }
        _ => {
            return error(
                ResponseCode::SystemError,
                format!("can not find message by the id, {}", header.msg_id),
            )
        }
    };
    let mut relayed = relayed(request, RequestCode::ConsumeMessageDirectly);
    relayed
        .ext_fields
        .insert("brokerName", state.config.broker_name.clone());
    let relayed = relayed.with_body(record);
    call_consumer(state, &header.consumer_group, &header.client_id, relayed).await
}

/// Every consumer of the group (or the one named) reports its offsets of the topic; the
/// answers are collected by client id. A client that does not answer is left out, as RocketMQ
/// leaves it.
pub(super) async fn consumer_status(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<GetConsumerStatusRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let only = header
        .client_addr
        .clone()
        .filter(|client| !client.is_empty());
    let asked = GetConsumerStatusRequestHeader {
        client_addr: None,
        ..header.clone()
    };
    let mut consumer_table = BTreeMap::new();
    for client in state.clients.group_clients(&header.group) {
        if client.version < tidemark_protocol::code::version::V3_0_7_SNAPSHOT {
            return error(
                ResponseCode::SystemError,
                format!(
                    "the client does not support this feature. version={}",
                    client.version
                ),
            );
        }
        if only.as_ref().is_some_and(|only| *only != client.client_id) {
            continue;
        }
        let request =
            RemotingCommand::request_with_header(RequestCode::GetConsumerStatusFromClient, &asked);
        match client.channel.request(request, STATUS_TIMEOUT).await {
            Ok(answer) if answer.response_code() == ResponseCode::Success => {
                if let Ok(body) = GetConsumerStatusBody::from_json_bytes(&answer.body) {
                    consumer_table.insert(client.client_id.clone(), body.message_queue_table);
                }
            }
            Ok(answer) => {
                tracing::debug!(client = %client.client_id, code = ?answer.response_code(), "a consumer did not report its status")
            }
            Err(failure) => {
                tracing::debug!(client = %client.client_id, %failure, "a consumer did not report its status")
            }
        }
        if only.is_some() {
            break;
        }
    }
    success().with_body(
        GetConsumerStatusBody {
            consumer_table,
            message_queue_table: BTreeMap::new(),
        }
        .to_json_bytes(),
    )
}

/// How long each client gets to report its status (RocketMQ's 5 s).
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// The request as it goes to the client: same code, fields and body, a fresh opaque.
fn relayed(request: &RemotingCommand, code: RequestCode) -> RemotingCommand {
    let mut relayed = RemotingCommand::request(code).with_body(request.body.clone());
    relayed.ext_fields = request.ext_fields.clone();
    relayed
}

async fn call_consumer(
    state: &BrokerState,
    group: &str,
    client_id: &str,
    request: RemotingCommand,
) -> RemotingCommand {
    let Some(client) = state.clients.consumer_channel(group, client_id) else {
        return error(
            ResponseCode::SystemError,
            format!("The Consumer <{group}> <{client_id}> not online"),
        );
    };
    match client.channel.request(request, CLIENT_TIMEOUT).await {
        Ok(answer) => answer,
        Err(RemotingError::Timeout { .. }) => error(
            ResponseCode::ConsumeMsgTimeout,
            format!(
                "consumer <{group}> <{client_id}> Timeout: no answer within {} s",
                CLIENT_TIMEOUT.as_secs()
            ),
        ),
        Err(failure) => error(
            ResponseCode::SystemError,
            format!("invoke consumer <{group}> <{client_id}> Exception: {failure}"),
        ),
    }
}
