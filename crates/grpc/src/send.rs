//! SendMessage: each message becomes one remoting SEND_MESSAGE for the broker's send path, so
//! everything a remoting send gets — topic creation, timers, size limits, durability under
//! SYNC_FLUSH — a gRPC send gets too. Answers have one entry per message, in order.
//!
//! As RocketMQ's proxy does, the gateway picks the queue, across every broker of the topic: the
//! next one in turn, or for a message group (FIFO) always the same one by the group's hash. (A
//! client's own queue choice names no broker, so it cannot be honoured in a cluster.)

use tidemark_protocol::headers::{
    SendMessageRequestHeader, SendMessageRequestHeaderV2, SendMessageResponseHeader,
};
use tidemark_protocol::message::{decode_offset_msg_id, property, sys_flag};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};

use crate::convert::{full_name, outgoing, Refused};
use crate::gateway::{Caller, Gateway, FORWARD_TIMEOUT};
use crate::proto::{Code, MessageType, SendMessageRequest, SendMessageResponse, SendResultEntry};
use crate::route::accepted_types;
use crate::status::{combined, from_response, ok, status};
use crate::transaction::transaction_id;

fn entry(code_status: crate::proto::Status, message_id: String, offset: i64) -> SendResultEntry {
    SendResultEntry {
        status: Some(code_status),
        message_id,
        transaction_id: String::new(),
        offset,
        recall_handle: String::new(),
    }
}

impl Gateway {
    pub async fn send_message(
        &self,
        caller: &Caller,
        request: SendMessageRequest,
    ) -> SendMessageResponse {
        if request.messages.is_empty() {
            return SendMessageResponse {
                status: Some(status(Code::BadRequest, "no message to send")),
                entries: Vec::new(),
            };
        }
        let mut entries = Vec::with_capacity(request.messages.len());
        for message in request.messages {
            entries.push(self.send_one(caller, message).await);
        }
        SendMessageResponse {
            status: Some(combined(
                entries.iter().filter_map(|entry| entry.status.as_ref()),
            )),
            entries,
        }
    }

    async fn send_one(&self, caller: &Caller, message: crate::proto::Message) -> SendResultEntry {
        let topic = full_name(message.topic.as_ref());
        let system = message.system_properties.as_ref();
        let message_id = system
            .map(|system| system.message_id.clone())
            .unwrap_or_default();
        let refuse = |code: Code, text: String| entry(status(code, text), message_id.clone(), 0);
        if topic.is_empty() {
            return refuse(Code::IllegalTopic, "the topic name is empty".into());
        }
        let max_body = self.state.config.max_message_size;
        if message.body.len() > max_body {
            return refuse(
                Code::MessageBodyTooLarge,
                format!(
                    "the body is {} bytes, at most {max_body}",
                    message.body.len()
                ),
            );
        }
        let kind = system
            .and_then(|system| MessageType::try_from(system.message_type).ok())
            .unwrap_or(MessageType::Normal);
        let recovery = system
            .and_then(|system| system.orphaned_transaction_recovery_duration.as_ref())
            .map(|recovery| recovery.seconds);
        let outgoing = match outgoing(message) {
            Ok(outgoing) => outgoing,
            Err(Refused::NoMessageId) => {
                return refuse(Code::IllegalMessageId, "the message id is empty".into())
            }
            Err(Refused::BadTag(tag)) => {
                return refuse(
                    Code::IllegalMessageTag,
                    format!("tag {tag:?} is not allowed"),
                )
            }
            Err(Refused::ReservedProperty(name)) => {
                return refuse(
                    Code::IllegalMessagePropertyKey,
                    format!("property {name} is reserved"),
                )
            }
            Err(Refused::BadBody(why)) => return refuse(Code::BadRequest, why),
        };
        let mut outgoing = outgoing;
        if outgoing.transactional {
            // The topic is the producer group (any client publishing it answers check-backs).
            outgoing
                .properties
                .insert(property::PRODUCER_GROUP, topic.clone());
            if let Some(seconds) = recovery {
                outgoing.properties.insert(
                    property::CHECK_IMMUNITY_TIME_IN_SECONDS,
                    seconds.max(1).to_string(),
                );
            }
        }
        let (brokers, config) = match self.topic_brokers(&topic).await {
            Ok(found) => found,
            Err(failure) => return entry(failure, message_id, 0),
        };
        if let Some(config) = &config {
            let accepted = accepted_types(config.attributes.as_ref());
            if kind != MessageType::Unspecified && !accepted.contains(&kind) {
                return refuse(
                    Code::MessagePropertyConflictWithType,
                    format!(
                        "topic {topic} accepts {:?} messages, not {kind:?}",
                        accepted
                    ),
                );
            }
        }
        let Some((broker, queue_id)) = self
            .cluster
            .pick_queue(&brokers, outgoing.message_group.as_deref())
        else {
            return refuse(
                Code::Forbidden,
                format!("topic {topic} has no writable queue"),
            );
        };
        let header = SendMessageRequestHeaderV2::from(SendMessageRequestHeader {
            producer_group: if outgoing.transactional {
                topic.clone()
            } else {
                format!("GRPC_PRODUCER_{}", caller.session.client_id)
            },
            topic: topic.clone(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: self.state.config.default_topic_queue_nums,
            queue_id,
            sys_flag: if outgoing.transactional {
                sys_flag::TRANSACTION_PREPARED_TYPE
            } else {
                0
            },
            born_timestamp: outgoing.born_timestamp,
            flag: 0,
            properties: Some(outgoing.properties.encode()),
            reconsume_times: Some(0),
            unit_mode: false,
            batch: false,
            max_reconsume_times: None,
            broker_name: Some(broker.clone()),
        });
        let request = RemotingCommand::request_with_header(RequestCode::SendMessageV2, &header)
            .with_body(outgoing.body);
        let response = self
            .invoke_at(caller, &topic, &broker, request, FORWARD_TIMEOUT)
            .await;
        if response.response_code() != ResponseCode::Success {
            return entry(from_response(&response), message_id, 0);
        }
        let Ok(header) = response.decode_header::<SendMessageResponseHeader>() else {
            return entry(ok(), message_id, 0);
        };
        let mut sent = entry(ok(), message_id, header.queue_offset);
        sent.recall_handle = header.recall_handle.unwrap_or_default();
        if outgoing.transactional {
            if let Ok((_, commit_log_offset)) = decode_offset_msg_id(&header.msg_id) {
                sent.transaction_id =
                    transaction_id(&broker, commit_log_offset, header.queue_offset);
            }
        }
        sent
    }
}
