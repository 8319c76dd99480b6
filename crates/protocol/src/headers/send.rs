//! SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and their response.

use crate::command_header;
use crate::error::HeaderError;
use crate::{RemotingCommand, RequestCode};

command_header! {
    /// `SendMessageRequestHeader`, the long-key form of SEND_MESSAGE (10).
    pub struct SendMessageRequestHeader {
        required producer_group: String = "producerGroup",
        required topic: String = "topic",
        /// Template for topic auto-creation, normally `TBW102`.
        required default_topic: String = "defaultTopic",
        required default_topic_queue_nums: i32 = "defaultTopicQueueNums",
        /// Negative: the broker picks a writable queue.
        required queue_id: i32 = "queueId",
        required sys_flag: i32 = "sysFlag",
        required born_timestamp: i64 = "bornTimestamp",
        required flag: i32 = "flag",
        optional properties: String = "properties",
        optional reconsume_times: i32 = "reconsumeTimes",
        defaulted unit_mode: bool = "unitMode" (false),
        defaulted batch: bool = "batch" (false),
        optional max_reconsume_times: i32 = "maxReconsumeTimes",
        /// 5.x: the target broker name.
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `SendMessageRequestHeaderV2`: the same fields under one-letter keys, used by Java
    /// clients for SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).
    pub struct SendMessageRequestHeaderV2 {
        required producer_group: String = "a",
        required topic: String = "b",
        required default_topic: String = "c",
        required default_topic_queue_nums: i32 = "d",
        required queue_id: i32 = "e",
        required sys_flag: i32 = "f",
        required born_timestamp: i64 = "g",
        required flag: i32 = "h",
        optional properties: String = "i",
        optional reconsume_times: i32 = "j",
        defaulted unit_mode: bool = "k" (false),
        optional max_reconsume_times: i32 = "l",
        defaulted batch: bool = "m" (false),
        optional broker_name: String = "n",
    }
}

impl SendMessageRequestHeader {
    /// The header of a send in the form its request code carries: SEND_MESSAGE (10) and
    /// SEND_REPLY_MESSAGE (324) use the long keys; SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE
    /// (320) and SEND_REPLY_MESSAGE_V2 (325) the one-letter keys, whatever long keys sit beside
    /// them. The broker's send handler and the ACL both read a send through here, so the topic
    /// that is checked is the topic that is written.
    pub fn decode_request(request: &RemotingCommand) -> Result<Self, HeaderError> {
        match request.request_code() {
            RequestCode::SendMessage | RequestCode::SendReplyMessage => request.decode_header(),
            _ => request
                .decode_header::<SendMessageRequestHeaderV2>()
                .map(Self::from),
        }
    }
}

impl From<SendMessageRequestHeaderV2> for SendMessageRequestHeader {
    fn from(v2: SendMessageRequestHeaderV2) -> Self {
        Self {
            producer_group: v2.producer_group,
            topic: v2.topic,
            default_topic: v2.default_topic,
            default_topic_queue_nums: v2.default_topic_queue_nums,
            queue_id: v2.queue_id,
            sys_flag: v2.sys_flag,
            born_timestamp: v2.born_timestamp,
            flag: v2.flag,
            properties: v2.properties,
            reconsume_times: v2.reconsume_times,
            unit_mode: v2.unit_mode,
            batch: v2.batch,
            max_reconsume_times: v2.max_reconsume_times,
            broker_name: v2.broker_name,
        }
    }
}

impl From<SendMessageRequestHeader> for SendMessageRequestHeaderV2 {
    fn from(v1: SendMessageRequestHeader) -> Self {
        Self {
            producer_group: v1.producer_group,
            topic: v1.topic,
            default_topic: v1.default_topic,
            default_topic_queue_nums: v1.default_topic_queue_nums,
            queue_id: v1.queue_id,
            sys_flag: v1.sys_flag,
            born_timestamp: v1.born_timestamp,
            flag: v1.flag,
            properties: v1.properties,
            reconsume_times: v1.reconsume_times,
            unit_mode: v1.unit_mode,
            batch: v1.batch,
            max_reconsume_times: v1.max_reconsume_times,
            broker_name: v1.broker_name,
        }
    }
}

command_header! {
    /// `SendMessageResponseHeader`, plus the two fields Java producers read from every send
    /// response (an absent map makes them throw).
    pub struct SendMessageResponseHeader {
        /// Offset message id; comma-joined for a batch.
        required msg_id: String = "msgId",
        required queue_id: i32 = "queueId",
        /// Consume-queue offset of the (first) message.
        required queue_offset: i64 = "queueOffset",
        optional transaction_id: String = "transactionId",
        optional batch_uniq_id: String = "batchUniqId",
        /// The broker's `regionId`.
        defaulted msg_region: String = "MSG_REGION" (String::from("DefaultRegion")),
        /// The broker's `traceOn`.
        defaulted trace_on: bool = "TRACE_ON" (true),
        /// 5.3.2+: for a timer message, what recalls it ([`RecallHandle`](crate::message::RecallHandle)).
        optional recall_handle: String = "recallHandle",
    }
}

command_header! {
    /// `RecallMessageRequestHeader` (RECALL_MESSAGE, 5.3.2+).
    pub struct RecallMessageRequestHeader {
        required topic: String = "topic",
        /// As the send's answer gave it: encoded [`RecallHandle`](crate::message::RecallHandle).
        required recall_handle: String = "recallHandle",
        optional producer_group: String = "producerGroup",
        /// The broker the handle names (clients set it; a proxy routes by it).
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `RecallMessageResponseHeader`: the recalled message's unique (client) id.
    pub struct RecallMessageResponseHeader {
        required msg_id: String = "msgId",
    }
}
