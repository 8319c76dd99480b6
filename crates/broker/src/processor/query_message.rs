//! QUERY_MESSAGE: messages of a topic by key or unique key through the store's index (mqadmin
//! `queryMsgByKey` / `queryMsgByUniqueKey`, the client's `queryMessage` / `viewMessage` by
//! client id).

use bytes::BytesMut;
use tidemark_protocol::headers::{QueryMessageRequestHeader, QueryMessageResponseHeader};
use tidemark_protocol::{RemotingCommand, ResponseCode};

use super::{bad_header, error, success};
use crate::state::BrokerState;

/// RocketMQ's `maxMsgsNumBatch`: the most records one query returns.
const QUERY_MAX: usize = 64;
/// RocketMQ's `defaultQueryMaxNum`, used for a unique-key query whatever it asks.
const UNIQUE_KEY_QUERY_MAX: usize = 32;

pub(super) async fn query(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<QueryMessageRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let unique = request.ext_fields.get("_UNIQUE_KEY_QUERY") == Some("true");
    let max = if unique {
        UNIQUE_KEY_QUERY_MAX
    } else {
        usize::try_from(header.max_num).unwrap_or(0).min(QUERY_MAX)
    };
    let found = state
        .log()
        .query_message(
            header.topic.clone(),
            header.key.clone(),
            max,
            (header.begin_timestamp, header.end_timestamp),
        )
        .await;
    let records = match found {
        Ok(records) => records,
        Err(failure) => {
            return error(
                ResponseCode::SystemError,
                format!("query failed: {failure}"),
            )
        }
    };
    let (last_timestamp, last_offset) = state.log().index_last_update();
    let answer = QueryMessageResponseHeader {
        index_last_update_timestamp: last_timestamp,
        index_last_update_phyoffset: last_offset,
    };
    if records.is_empty() {
        return error(
            ResponseCode::QueryNotFound,
            "can not find message, maybe time range not correct",
        )
        .with_header(&answer);
    }
    let mut body = BytesMut::with_capacity(records.iter().map(|record| record.len()).sum());
    for record in &records {
        body.extend_from_slice(record);
    }
    success().with_header(&answer).with_body(body.freeze())
}
