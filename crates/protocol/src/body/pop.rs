//! RocketMQ 5 server-side assignment bodies: QUERY_ASSIGNMENT (400), by which a consumer asks a
//! broker which queues to consume and how (PULL or POP), and SET_MESSAGE_REQUEST_MODE (401), by
//! which an operator switches a group's topic between PULL and POP.

use std::collections::BTreeMap;

use super::admin::MessageQueue;
use super::heartbeat::MessageModel;
use crate::{json_enum, json_object};

json_enum! {
    /// `MessageRequestMode`: how a consumer reads a queue.
    pub enum MessageRequestMode {
        Pull = "PULL",
        Pop = "POP",
    }
    default Pull
}

json_object! {
    /// `QueryAssignmentRequestBody`.
    pub struct QueryAssignmentRequestBody {
        "clientId" => client_id: String,
        "consumerGroup" => consumer_group: String,
        "messageModel" => message_model: MessageModel,
        /// `AVG` or `AVG_BY_CIRCLE` (the only names a RocketMQ broker allocates by).
        "strategyName" => strategy_name: String,
        "topic" => topic: String,
    }
}

json_object! {
    /// `MessageQueueAssignment`: one queue and how to read it. With POP and a shared queue
    /// count that spreads every queue to every consumer, the queue id is −1 (one pop covers all
    /// of the broker's queues of the topic).
    pub struct MessageQueueAssignment {
        "attachments" => attachments: Option<BTreeMap<String, String>>,
        "messageQueue" => message_queue: MessageQueue,
        "mode" => mode: MessageRequestMode,
    }
}

json_object! {
    /// `QueryAssignmentResponseBody`: `null` assignments mean "keep what you have", an empty
    /// list "consume nothing".
    pub struct QueryAssignmentResponseBody {
        "messageQueueAssignments" => message_queue_assignments: Option<Vec<MessageQueueAssignment>>,
    }
}

json_object! {
    /// `SetMessageRequestModeRequestBody`.
    pub struct SetMessageRequestModeRequestBody {
        "consumerGroup" => consumer_group: String,
        "mode" => mode: MessageRequestMode,
        /// How many other consumers share each queue a consumer is assigned (POP); ≤ 0, or
        /// at least the consumer count − 1, means every consumer pops every queue.
        "popShareQueueNum" => pop_share_queue_num: i32,
        "topic" => topic: String,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonBody;

    #[test]
    fn assignment_bodies_read_what_java_writes() {
        let request = QueryAssignmentRequestBody::from_json_bytes(
            br#"{"clientId":"127.0.0.1@1","consumerGroup":"G","messageModel":"CLUSTERING","strategyName":"AVG","topic":"T"}"#,
        )
        .expect("request");
        assert_eq!(request.strategy_name, "AVG");
        assert_eq!(request.message_model, MessageModel::Clustering);
        let response = QueryAssignmentResponseBody {
            message_queue_assignments: Some(vec![MessageQueueAssignment {
                attachments: None,
                message_queue: MessageQueue::new("T", "broker-a", -1),
                mode: MessageRequestMode::Pop,
            }]),
        };
        let text = String::from_utf8(response.to_json_bytes()).expect("utf-8");
        assert!(text.contains(r#""mode":"POP""#), "{text}");
        assert!(text.contains(r#""queueId":-1"#), "{text}");
        assert_eq!(
            QueryAssignmentResponseBody::from_json_bytes(text.as_bytes()).expect("round trip"),
            response
        );
        let mode = SetMessageRequestModeRequestBody::from_json_bytes(
            br#"{"consumerGroup":"G","mode":"POP","popShareQueueNum":0,"topic":"T"}"#,
        )
        .expect("mode");
        assert_eq!(mode.mode, MessageRequestMode::Pop);
        let defaulted = SetMessageRequestModeRequestBody::from_json_bytes(
            br#"{"consumerGroup":"G","topic":"T"}"#,
        )
        .expect("defaults");
        assert_eq!(
            (defaulted.mode, defaulted.pop_share_queue_num),
            (MessageRequestMode::Pull, 0)
        );
    }
}
