//! RecallMessage: a producer takes back a timer message before it is due, with the recall
//! handle its SendMessage entry carried. The handle names the broker, so the gateway forwards
//! one RECALL_MESSAGE there; the broker decides (see the broker's `processor/recall.rs`).
//!
//! Where Tidemark differs from RocketMQ's proxy: an unreadable handle and a recall the broker
//! refuses as an illegal operation (too late, another topic's or broker's handle) are
//! BAD_REQUEST, not INTERNAL_SERVER_ERROR, so a client can tell its mistake from an outage.

use std::time::Duration;

use tidemark_protocol::headers::{RecallMessageRequestHeader, RecallMessageResponseHeader};
use tidemark_protocol::message::RecallHandle;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};

use crate::convert::full_name;
use crate::gateway::{Caller, Gateway};
use crate::proto::{Code, MessageType, RecallMessageRequest, RecallMessageResponse};
use crate::route::accepted_types;
use crate::status::{from_response, ok, status};

/// A broker may wait for its timer service to catch up and for its replicas before answering.
const RECALL_TIMEOUT: Duration = Duration::from_secs(8);

fn answer(status: crate::proto::Status, message_id: String) -> RecallMessageResponse {
    RecallMessageResponse {
        status: Some(status),
        message_id,
    }
}

impl Gateway {
    pub async fn recall_message(
        &self,
        caller: &Caller,
        request: RecallMessageRequest,
    ) -> RecallMessageResponse {
        let topic = full_name(request.topic.as_ref());
        let handle = match RecallHandle::decode(&request.recall_handle) {
            Ok(handle) => handle,
            Err(failure) => {
                return answer(status(Code::BadRequest, failure.to_string()), String::new())
            }
        };
        let config = match self.topic_brokers(&topic).await {
            Ok((_, config)) => config,
            Err(failure) => return answer(failure, String::new()),
        };
        if let Some(config) = config {
            let accepted = accepted_types(config.attributes.as_ref());
            if !accepted.contains(&MessageType::Delay) {
                return answer(
                    status(
                        Code::MessagePropertyConflictWithType,
                        format!("topic {topic} takes no delay messages: {accepted:?}"),
                    ),
                    String::new(),
                );
            }
        }
        let command = RemotingCommand::request_with_header(
            RequestCode::RecallMessage,
            &RecallMessageRequestHeader {
                topic: topic.clone(),
                recall_handle: request.recall_handle,
                producer_group: None,
                broker_name: Some(handle.broker_name.clone()),
            },
        );
        let response = self
            .invoke_at(caller, &topic, &handle.broker_name, command, RECALL_TIMEOUT)
            .await;
        match response.response_code() {
            ResponseCode::Success => {
                let id = response
                    .decode_header::<RecallMessageResponseHeader>()
                    .map(|header| header.msg_id)
                    .unwrap_or(handle.message_id);
                answer(ok(), id)
            }
            ResponseCode::IllegalOperation => answer(
                status(Code::BadRequest, response.remark.unwrap_or_default()),
                String::new(),
            ),
            _ => answer(from_response(&response), String::new()),
        }
    }
}
