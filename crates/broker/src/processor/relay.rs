//! Admin requests answered by a consumer: GET_CONSUMER_RUNNING_INFO (mqadmin `consumerStatus`)
//! and CONSUME_MESSAGE_DIRECTLY (`consumeMessageDirectly`, the dashboard's resend). The broker
//! finds the client's connection in the group and passes the request on, as RocketMQ's
//! `callConsumer` does; the client's answer is the admin's answer.

use std::time::Duration;

use tidemark_protocol::headers::{
    ConsumeMessageDirectlyResultRequestHeader, GetConsumerRunningInfoRequestHeader,
};
use tidemark_protocol::message::decode_offset_msg_id;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingError;

use super::{bad_header, error};
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
        .map(|offset| state.store.read_record(offset))
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
            ResponseCode::SystemError,
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
