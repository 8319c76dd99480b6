//! A group's committed offset as one broker's own table holds it (QUERY_CONSUMER_OFFSET sent
//! to that broker, not to whichever master a route names).

use std::time::Duration;

use tidemark_protocol::headers::{OffsetResponseHeader, QueryConsumerOffsetRequestHeader};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingClient;

/// The offset `broker` holds for `group` on `topic`'s queue `queue_id`: `Ok(None)` when it has
/// none (QUERY_NOT_FOUND or another refusal), `Err` when it did not answer within `wait`.
pub async fn stored_offset(
    client: &RemotingClient,
    broker: &str,
    group: &str,
    topic: &str,
    queue_id: i32,
    wait: Duration,
) -> Result<Option<i64>, String> {
    let request = RemotingCommand::request_with_header(
        RequestCode::QueryConsumerOffset,
        &QueryConsumerOffsetRequestHeader {
            consumer_group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
            set_zero_if_not_found: Some(false),
            broker_name: None,
        },
    );
    let response = client
        .invoke(broker, request, wait)
        .await
        .map_err(|error| format!("{broker}: {error}"))?;
    if response.response_code() != ResponseCode::Success {
        return Ok(None);
    }
    response
        .decode_header::<OffsetResponseHeader>()
        .map(|header| Some(header.offset))
        .map_err(|error| format!("{broker}: offset header: {error}"))
}
