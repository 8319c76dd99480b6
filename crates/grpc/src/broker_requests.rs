//! Requests brokers send to the gateway's clients over their in-process connections: a
//! transaction check-back becomes a Telemetry command; GET_CONSUMER_RUNNING_INFO is answered
//! from the client's activity ([`crate::client_status`]); anything else (rebalance notices) has
//! no gRPC counterpart and is dropped.

use tidemark_protocol::headers::GetConsumerRunningInfoRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tokio::sync::mpsc;

use crate::gateway::Gateway;

/// Serves the broker requests queued for the gateway's clients until the queue closes.
pub async fn serve_broker_requests(
    gateway: std::sync::Arc<Gateway>,
    mut queue: mpsc::Receiver<RemotingCommand>,
) {
    while let Some(request) = queue.recv().await {
        match request.request_code() {
            RequestCode::CheckTransactionState => gateway.recover_orphaned(&request),
            RequestCode::GetConsumerRunningInfo => answer_running_info(&gateway, &request),
            _ => {}
        }
    }
}

/// Answers on the client's connection, where the broker waits for the client's answer.
fn answer_running_info(gateway: &Gateway, request: &RemotingCommand) {
    let Ok(header) = request.decode_header::<GetConsumerRunningInfoRequestHeader>() else {
        return;
    };
    let Some(session) = gateway.sessions.get(&header.client_id) else {
        return;
    };
    let info = session
        .activity
        .running_info(session.settings().as_ref(), tidemark_remoting::now_ms());
    let mut response =
        RemotingCommand::response(ResponseCode::Success, None).with_body(info.to_json_bytes());
    response.opaque = request.opaque;
    session.channel.answer(response);
}
