//! AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue: a receipt handle
//! (Tidemark's is RocketMQ's nine-field receipt) names the popped message; each call becomes
//! the broker's ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME or CONSUMER_SEND_MSG_BACK, served by
//! the broker the receipt names.
//!
//! As RocketMQ's proxy answers: a handle whose invisibility already ended is
//! INVALID_RECEIPT_HANDLE (the message is someone else's now), a handle that does not parse too.

use tidemark_protocol::body::MessageQueue;
use tidemark_protocol::headers::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
    ConsumerSendMsgBackRequestHeader, PopReceipt,
};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};

use crate::convert::{duration_ms, full_name};
use crate::gateway::{Caller, Gateway, FORWARD_TIMEOUT};
use crate::proto::{
    AckMessageRequest, AckMessageResponse, AckMessageResultEntry, ChangeInvisibleDurationRequest,
    ChangeInvisibleDurationResponse, ClientType, Code, ForwardMessageToDeadLetterQueueRequest,
    ForwardMessageToDeadLetterQueueResponse, Status,
};
use crate::status::{combined, from_response, ok, status};

const INVISIBLE_MAX_MS: i64 = 12 * 3_600_000;

/// What an acknowledgement finished, for the client's activity.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Consumed,
    DeadLettered,
}

/// The message a receipt names, as the client's activity keys it: its queue (the retry topic's
/// for a retry) and offset.
fn message_key(group: &str, topic: &str, receipt: &PopReceipt) -> (MessageQueue, i64) {
    (
        MessageQueue::new(
            receipt.source.real_topic(group, topic),
            receipt.broker_name.clone(),
            receipt.queue_id,
        ),
        receipt.queue_offset,
    )
}

impl Gateway {
    /// The broker's current receipt behind a handle a client holds (renewed ones are
    /// translated), if it is still valid now, and that receipt's text (for an ack or a change
    /// of invisibility, which name it to the broker).
    fn receipt(&self, handle: &str) -> Result<(PopReceipt, String), Status> {
        let (receipt, text) = match self.renewals.current(handle) {
            Some(current) => {
                let text = current.encode();
                (current, text)
            }
            None => {
                let receipt = PopReceipt::decode(handle).map_err(|problem| {
                    status(
                        Code::InvalidReceiptHandle,
                        format!("receipt handle unreadable: {problem}"),
                    )
                })?;
                // The handle is the broker's receipt text as it was handed out.
                (receipt, handle.to_owned())
            }
        };
        if receipt.visible_again_at() <= tidemark_remoting::now_ms() {
            return Err(status(
                Code::InvalidReceiptHandle,
                "receipt handle is expired",
            ));
        }
        Ok((receipt, text))
    }

    /// Acknowledges the message behind `handle` at its broker; `outcome` says what it was for
    /// the client's activity (consumed, or sent to the dead letters first).
    async fn ack_one(
        &self,
        caller: &Caller,
        group: &str,
        topic: &str,
        handle: &str,
        outcome: Outcome,
    ) -> Status {
        let (receipt, text) = match self.receipt(handle) {
            Ok(held) => held,
            Err(status) => return status,
        };
        let header = AckMessageRequestHeader {
            consumer_group: group.to_owned(),
            topic: receipt.source.real_topic(group, topic),
            queue_id: receipt.queue_id,
            extra_info: text,
            offset: receipt.queue_offset,
            broker_name: None,
        };
        let response = self
            .invoke_at(
                caller,
                topic,
                &receipt.broker_name,
                RemotingCommand::request_with_header(RequestCode::AckMessage, &header),
                FORWARD_TIMEOUT,
            )
            .await;
        if response.response_code() == ResponseCode::Success {
            self.renewals.remove(handle);
            let key = message_key(group, topic, &receipt);
            let now = tidemark_remoting::now_ms();
            let activity = &caller.session.activity;
            match outcome {
                Outcome::Consumed => activity.acked(topic, key.0, key.1, now),
                Outcome::DeadLettered => activity.dead_lettered(topic, key, now),
            }
        }
        from_response(&response)
    }

    pub async fn ack_message(
        &self,
        caller: &Caller,
        request: AckMessageRequest,
    ) -> AckMessageResponse {
        let group = full_name(request.group.as_ref());
        let topic = full_name(request.topic.as_ref());
        if group.is_empty() || topic.is_empty() {
            return AckMessageResponse {
                status: Some(status(Code::BadRequest, "group and topic are required")),
                entries: Vec::new(),
            };
        }
        let mut entries = Vec::with_capacity(request.entries.len());
        for entry in request.entries {
            let result = self
                .ack_one(
                    caller,
                    &group,
                    &topic,
                    &entry.receipt_handle,
                    Outcome::Consumed,
                )
                .await;
            entries.push(AckMessageResultEntry {
                message_id: entry.message_id,
                receipt_handle: entry.receipt_handle,
                status: Some(result),
            });
        }
        AckMessageResponse {
            status: Some(combined(
                entries.iter().filter_map(|entry| entry.status.as_ref()),
            )),
            entries,
        }
    }

    pub async fn change_invisible_duration(
        &self,
        caller: &Caller,
        request: ChangeInvisibleDurationRequest,
    ) -> ChangeInvisibleDurationResponse {
        let answer = |status: Status, handle: String| ChangeInvisibleDurationResponse {
            status: Some(status),
            receipt_handle: handle,
        };
        let group = full_name(request.group.as_ref());
        let topic = full_name(request.topic.as_ref());
        let invisible_ms = request.invisible_duration.as_ref().map_or(-1, duration_ms);
        if !(0..=INVISIBLE_MAX_MS).contains(&invisible_ms) {
            return answer(
                status(
                    Code::IllegalInvisibleTime,
                    "the invisible duration must be 0 to 12 h",
                ),
                String::new(),
            );
        }
        let (receipt, text) = match self.receipt(&request.receipt_handle) {
            Ok(held) => held,
            Err(failure) => return answer(failure, String::new()),
        };
        let header = ChangeInvisibleTimeRequestHeader {
            consumer_group: group.clone(),
            topic: receipt.source.real_topic(&group, &topic),
            queue_id: receipt.queue_id,
            extra_info: text,
            offset: receipt.queue_offset,
            invisible_time: invisible_ms,
            broker_name: None,
        };
        let response = self
            .invoke_at(
                caller,
                &topic,
                &receipt.broker_name,
                RemotingCommand::request_with_header(
                    RequestCode::ChangeMessageInvisibleTime,
                    &header,
                ),
                FORWARD_TIMEOUT,
            )
            .await;
        if response.response_code() != ResponseCode::Success {
            return answer(from_response(&response), String::new());
        }
        // Put back (or kept) by the client: no more automatic renewal of this one.
        self.renewals.remove(&request.receipt_handle);
        match response.decode_header::<ChangeInvisibleTimeResponseHeader>() {
            Ok(changed) => {
                let next = PopReceipt {
                    start_offset: receipt.queue_offset,
                    pop_time: changed.pop_time,
                    invisible_time: changed.invisible_time,
                    revive_qid: changed.revive_qid,
                    ..receipt
                };
                // A push consumer puts a message back when its listener failed; a simple
                // consumer may only be taking more time.
                let failed = caller.session.settings().is_some_and(|settings| {
                    settings.client_type == Some(ClientType::PushConsumer as i32)
                });
                caller.session.activity.invisibility_changed(
                    &topic,
                    message_key(&group, &topic, &next),
                    next.visible_again_at(),
                    failed,
                    tidemark_remoting::now_ms(),
                );
                answer(ok(), next.encode())
            }
            Err(failure) => answer(
                status(
                    Code::InternalServerError,
                    format!("unreadable answer: {failure}"),
                ),
                String::new(),
            ),
        }
    }

    /// The message goes to the group's dead-letter topic now, and is finished here.
    pub async fn forward_to_dead_letter_queue(
        &self,
        caller: &Caller,
        request: ForwardMessageToDeadLetterQueueRequest,
    ) -> ForwardMessageToDeadLetterQueueResponse {
        let answer = |status: Status| ForwardMessageToDeadLetterQueueResponse {
            status: Some(status),
        };
        let group = full_name(request.group.as_ref());
        let topic = full_name(request.topic.as_ref());
        let receipt = match self.receipt(&request.receipt_handle) {
            Ok((receipt, _)) => receipt,
            Err(failure) => return answer(failure),
        };
        let Some(commit_log_offset) = receipt.commit_log_offset else {
            return answer(status(
                Code::InvalidReceiptHandle,
                "the receipt handle does not name the stored message",
            ));
        };
        let header = ConsumerSendMsgBackRequestHeader {
            offset: commit_log_offset,
            group: group.clone(),
            delay_level: -1,
            origin_msg_id: Some(request.message_id.clone()),
            origin_topic: Some(topic.clone()),
            unit_mode: false,
            max_reconsume_times: Some(request.max_delivery_attempts.max(0)),
            broker_name: None,
        };
        let response = self
            .invoke_at(
                caller,
                &topic,
                &receipt.broker_name,
                RemotingCommand::request_with_header(RequestCode::ConsumerSendMsgBack, &header),
                FORWARD_TIMEOUT,
            )
            .await;
        if response.response_code() != ResponseCode::Success {
            return answer(from_response(&response));
        }
        answer(
            self.ack_one(
                caller,
                &group,
                &topic,
                &request.receipt_handle,
                Outcome::DeadLettered,
            )
            .await,
        )
    }
}
