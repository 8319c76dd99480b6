//! The pull and offset RPCs (PullMessage, GetOffset, UpdateOffset, QueryOffset): a consumer
//! that keeps its own position reads queues by offset and commits progress, mapped onto the
//! broker's PULL_MESSAGE and consumer offsets — the same progress remoting consumers share.

use tidemark_protocol::headers::{
    pull_sys_flag, GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, OffsetResponseHeader,
    PullMessageRequestHeader, PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use tidemark_protocol::message::{decode_records, DecodeOptions};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};

use crate::convert::{duration_ms, epoch_ms, filter_of, full_name, incoming};
use crate::gateway::{Caller, Gateway, FORWARD_TIMEOUT};
use crate::proto::{
    pull_message_response::Content, Code, GetOffsetRequest, GetOffsetResponse, MessageQueue,
    PullMessageRequest, PullMessageResponse, QueryOffsetPolicy, QueryOffsetRequest,
    QueryOffsetResponse, Status, UpdateOffsetRequest, UpdateOffsetResponse,
};
use crate::status::{from_response, ok, status};

/// The queue a call is about: its topic, id, and the broker holding it (empty: this one).
struct QueueRef {
    topic: String,
    queue_id: i32,
    broker: String,
    queue: MessageQueue,
}

fn queue_of(queue: Option<&MessageQueue>) -> Result<QueueRef, Status> {
    let queue = queue.cloned().unwrap_or_default();
    let topic = full_name(queue.topic.as_ref());
    if topic.is_empty() {
        return Err(status(Code::IllegalTopic, "the topic name is empty"));
    }
    if queue.id < 0 {
        return Err(status(
            Code::BadRequest,
            format!("queue id {} is not a queue", queue.id),
        ));
    }
    Ok(QueueRef {
        topic,
        queue_id: queue.id,
        broker: queue
            .broker
            .as_ref()
            .map(|broker| broker.name.clone())
            .unwrap_or_default(),
        queue,
    })
}

fn offset_of(response: &RemotingCommand) -> Result<i64, Status> {
    if response.response_code() != ResponseCode::Success {
        return Err(from_response(response));
    }
    response
        .decode_header::<OffsetResponseHeader>()
        .map(|header| header.offset)
        .map_err(|failure| {
            status(
                Code::InternalServerError,
                format!("unreadable answer: {failure}"),
            )
        })
}

impl Gateway {
    pub async fn get_offset(
        &self,
        caller: &Caller,
        request: GetOffsetRequest,
    ) -> GetOffsetResponse {
        let group = full_name(request.group.as_ref());
        let QueueRef {
            topic,
            queue_id,
            broker,
            ..
        } = match queue_of(request.message_queue.as_ref()) {
            Ok(found) => found,
            Err(failure) => {
                return GetOffsetResponse {
                    status: Some(failure),
                    offset: 0,
                }
            }
        };
        let header = QueryConsumerOffsetRequestHeader {
            consumer_group: group,
            topic: topic.clone(),
            queue_id,
            set_zero_if_not_found: Some(false),
            broker_name: None,
        };
        let response = self
            .invoke_at(
                caller,
                &topic,
                &broker,
                RemotingCommand::request_with_header(RequestCode::QueryConsumerOffset, &header),
                FORWARD_TIMEOUT,
            )
            .await;
        if response.response_code() == ResponseCode::QueryNotFound {
            return GetOffsetResponse {
                status: Some(status(
                    Code::OffsetNotFound,
                    "the group has no offset for this queue",
                )),
                offset: 0,
            };
        }
        match offset_of(&response) {
            Ok(offset) => GetOffsetResponse {
                status: Some(ok()),
                offset,
            },
            Err(failure) => GetOffsetResponse {
                status: Some(failure),
                offset: 0,
            },
        }
    }

    pub async fn update_offset(
        &self,
        caller: &Caller,
        request: UpdateOffsetRequest,
    ) -> UpdateOffsetResponse {
        let group = full_name(request.group.as_ref());
        let QueueRef {
            topic,
            queue_id,
            broker,
            ..
        } = match queue_of(request.message_queue.as_ref()) {
            Ok(found) => found,
            Err(failure) => {
                return UpdateOffsetResponse {
                    status: Some(failure),
                }
            }
        };
        if request.offset < 0 {
            return UpdateOffsetResponse {
                status: Some(status(
                    Code::IllegalOffset,
                    format!("offset {} is negative", request.offset),
                )),
            };
        }
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: group,
            topic: topic.clone(),
            queue_id,
            commit_offset: request.offset,
            broker_name: None,
        };
        let response = self
            .invoke_at(
                caller,
                &topic,
                &broker,
                RemotingCommand::request_with_header(RequestCode::UpdateConsumerOffset, &header),
                FORWARD_TIMEOUT,
            )
            .await;
        UpdateOffsetResponse {
            status: Some(from_response(&response)),
        }
    }

    pub async fn query_offset(
        &self,
        caller: &Caller,
        request: QueryOffsetRequest,
    ) -> QueryOffsetResponse {
        let QueueRef {
            topic,
            queue_id,
            broker,
            ..
        } = match queue_of(request.message_queue.as_ref()) {
            Ok(found) => found,
            Err(failure) => {
                return QueryOffsetResponse {
                    status: Some(failure),
                    offset: 0,
                }
            }
        };
        let policy = QueryOffsetPolicy::try_from(request.query_offset_policy)
            .unwrap_or(QueryOffsetPolicy::Beginning);
        let command = match policy {
            QueryOffsetPolicy::Beginning => RemotingCommand::request_with_header(
                RequestCode::GetMinOffset,
                &GetMinOffsetRequestHeader {
                    topic: topic.clone(),
                    queue_id,
                    broker_name: None,
                },
            ),
            QueryOffsetPolicy::End => RemotingCommand::request_with_header(
                RequestCode::GetMaxOffset,
                &GetMaxOffsetRequestHeader {
                    topic: topic.clone(),
                    queue_id,
                    committed: Some(true),
                    broker_name: None,
                },
            ),
            QueryOffsetPolicy::Timestamp => {
                let Some(at) = request.timestamp.as_ref() else {
                    return QueryOffsetResponse {
                        status: Some(status(
                            Code::BadRequest,
                            "a timestamp query needs a timestamp",
                        )),
                        offset: 0,
                    };
                };
                RemotingCommand::request_with_header(
                    RequestCode::SearchOffsetByTimestamp,
                    &SearchOffsetRequestHeader {
                        topic: topic.clone(),
                        queue_id,
                        timestamp: epoch_ms(at),
                        boundary_type: None,
                        broker_name: None,
                    },
                )
            }
        };
        let response = self
            .invoke_at(caller, &topic, &broker, command, FORWARD_TIMEOUT)
            .await;
        match offset_of(&response) {
            Ok(offset) => QueryOffsetResponse {
                status: Some(ok()),
                offset,
            },
            Err(failure) => QueryOffsetResponse {
                status: Some(failure),
                offset: 0,
            },
        }
    }

    pub async fn pull_message(
        &self,
        caller: &Caller,
        request: PullMessageRequest,
    ) -> Vec<PullMessageResponse> {
        let frame = |content: Content| PullMessageResponse {
            content: Some(content),
        };
        let group = full_name(request.group.as_ref());
        let QueueRef {
            topic,
            queue_id,
            broker,
            queue,
        } = match queue_of(request.message_queue.as_ref()) {
            Ok(found) => found,
            Err(failure) => return vec![frame(Content::Status(failure))],
        };
        let (expression_type, expression) = filter_of(request.filter_expression.as_ref());
        let suspend_ms = request
            .long_polling_timeout
            .as_ref()
            .map_or(0, duration_ms)
            .clamp(0, 20_000);
        let header = PullMessageRequestHeader {
            consumer_group: group,
            topic: topic.clone(),
            queue_id,
            queue_offset: request.offset,
            max_msg_nums: request.batch_size.clamp(1, 32),
            sys_flag: pull_sys_flag::build(false, suspend_ms > 0, true, false),
            commit_offset: 0,
            suspend_timeout_millis: suspend_ms,
            subscription: Some(expression),
            sub_version: 0,
            expression_type: Some(expression_type.into()),
            max_msg_bytes: None,
            broker_name: None,
        };
        let response = self
            .invoke_at(
                caller,
                &topic,
                &broker,
                RemotingCommand::request_with_header(RequestCode::PullMessage, &header),
                FORWARD_TIMEOUT + std::time::Duration::from_millis(suspend_ms.unsigned_abs()),
            )
            .await;
        let next = response
            .decode_header::<PullMessageResponseHeader>()
            .map_or(request.offset, |header| header.next_begin_offset);
        let mut frames = Vec::new();
        match response.response_code() {
            ResponseCode::Success => {
                frames.push(frame(Content::Status(ok())));
                let resource = queue.topic.clone().unwrap_or_default();
                match decode_records(&response.body, DecodeOptions::default()) {
                    Ok(records) => {
                        for record in records {
                            frames.push(frame(Content::Message(incoming(
                                record, &resource, None, None,
                            ))));
                        }
                    }
                    Err(failure) => {
                        return vec![frame(Content::Status(status(
                            Code::InternalServerError,
                            format!("unreadable messages: {failure}"),
                        )))]
                    }
                }
            }
            ResponseCode::PullNotFound | ResponseCode::PullRetryImmediately => {
                frames.push(frame(Content::Status(status(
                    Code::MessageNotFound,
                    "no new message",
                ))));
            }
            ResponseCode::PullOffsetMoved => {
                frames.push(frame(Content::Status(status(
                    Code::IllegalOffset,
                    format!(
                        "offset {} is not in the queue; start at {next}",
                        request.offset
                    ),
                ))));
            }
            _ => frames.push(frame(Content::Status(from_response(&response)))),
        }
        frames.push(frame(Content::NextOffset(next)));
        frames
    }
}
