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

json_object! {
    /// `BatchAck`: acknowledgements of messages one pop handed out from one queue, with
    /// RocketMQ's short keys. `b` is the set of acknowledged offsets relative to `so`, as
    /// Java's `BitSet.toByteArray` in base64.
    pub struct BatchAck {
        "b" => bit_set: String,
        "c" => consumer_group: String,
        "it" => invisible_time: i64,
        "pt" => pop_time: i64,
        "q" => queue_id: i32,
        /// `0` the topic, `1` / `2` its POP retry topic (v1 / v2 naming).
        "r" => retry: String,
        "rq" => revive_queue_id: i32,
        "so" => start_offset: i64,
        /// The topic popped (not the retry topic: `r` says that).
        "t" => topic: String,
    }
}

json_object! {
    /// `BatchAckMessageRequestBody` (BATCH_ACK_MESSAGE's body; the request has no header).
    pub struct BatchAckMessageRequestBody {
        "acks" => acks: Vec<BatchAck>,
        "brokerName" => broker_name: Option<String>,
    }
}

impl BatchAck {
    /// The acknowledged queue offsets (an unreadable bit set acknowledges nothing).
    pub fn acked_offsets(&self) -> Vec<i64> {
        let Some(bytes) = base64_decode(&self.bit_set) else {
            return Vec::new();
        };
        let mut offsets = Vec::new();
        for (index, byte) in bytes.iter().enumerate() {
            for bit in 0..8 {
                if byte & (1 << bit) != 0 {
                    offsets.push(self.start_offset + (index * 8 + bit) as i64);
                }
            }
        }
        offsets
    }

    /// Sets the acknowledged offsets (each at or above `start_offset`).
    pub fn set_acked_offsets(&mut self, offsets: &[i64]) {
        let mut bytes: Vec<u8> = Vec::new();
        for offset in offsets {
            let Ok(bit) = usize::try_from(offset - self.start_offset) else {
                continue;
            };
            if bytes.len() <= bit / 8 {
                bytes.resize(bit / 8 + 1, 0);
            }
            bytes[bit / 8] |= 1 << (bit % 8);
        }
        self.bit_set = base64_encode(&bytes);
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let value = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for index in 0..4 {
            if index <= chunk.len() {
                out.push(BASE64[(value >> (18 - 6 * index) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut value = 0u32;
    let mut bits = 0;
    for byte in text.bytes().filter(|byte| *byte != b'=') {
        let digit = BASE64.iter().position(|candidate| *candidate == byte)? as u32;
        value = (value << 6) | digit;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((value >> bits) as u8);
            value &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod batch_ack_tests {
    use super::*;
    use crate::json::JsonBody;

    #[test]
    fn bit_sets_read_as_java_writes_them() {
        // Java: BitSet with bits 0, 2 and 9 → toByteArray [0x05, 0x02] → "BQI=".
        let body = BatchAckMessageRequestBody::from_json_bytes(
            br#"{"acks":[{"c":"G","t":"T","r":"1","so":100,"q":0,"rq":3,"pt":1700000000000,"it":60000,"b":"BQI="}],"brokerName":"b"}"#,
        )
        .expect("parses");
        assert_eq!(body.acks[0].acked_offsets(), vec![100, 102, 109]);
        assert_eq!(body.acks[0].retry, "1");
        let mut again = body.acks[0].clone();
        again.set_acked_offsets(&[100, 102, 109]);
        assert_eq!(again.bit_set, "BQI=");
        for sample in [&b""[..], b"a", b"ab", b"abc", b"abcd"] {
            assert_eq!(
                base64_decode(&base64_encode(sample)).as_deref(),
                Some(sample)
            );
        }
        assert_eq!(base64_decode("*"), None);
    }
}
