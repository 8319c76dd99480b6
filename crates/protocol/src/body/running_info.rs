//! `ConsumerRunningInfo`: what a consumer reports about itself when an operator asks through
//! the broker (GET_CONSUMER_RUNNING_INFO, mqadmin `consumerStatus`).

use std::collections::BTreeMap;

use super::{MessageQueue, SubscriptionData};
use crate::json_object;

/// Property keys the Java client sets (`ConsumerRunningInfo.PROP_*`); note the orderly one's
/// value has no underscore between CONSUME and ORDERLY.
pub mod running_info_property {
    pub const NAMESRV_ADDR: &str = "PROP_NAMESERVER_ADDR";
    pub const THREADPOOL_CORE_SIZE: &str = "PROP_THREADPOOL_CORE_SIZE";
    pub const CONSUME_ORDERLY: &str = "PROP_CONSUMEORDERLY";
    /// A `ConsumeType` name; mqadmin's analysis fails without it.
    pub const CONSUME_TYPE: &str = "PROP_CONSUME_TYPE";
    pub const CLIENT_VERSION: &str = "PROP_CLIENT_VERSION";
    /// Epoch ms; mqadmin's analysis fails unless it parses as a number.
    pub const CONSUMER_START_TIMESTAMP: &str = "PROP_CONSUMER_START_TIMESTAMP";
}

json_object! {
    /// `ProcessQueueInfo`: one queue a consumer holds messages of. Timestamps are epoch ms.
    pub struct ProcessQueueInfo {
        "cachedMsgCount" => cached_msg_count: i32,
        "cachedMsgMaxOffset" => cached_msg_max_offset: i64,
        "cachedMsgMinOffset" => cached_msg_min_offset: i64,
        "cachedMsgSizeInMiB" => cached_msg_size_in_mib: i32,
        "commitOffset" => commit_offset: i64,
        /// RocketMQ's spelling.
        "droped" => dropped: bool,
        "lastConsumeTimestamp" => last_consume_timestamp: i64,
        "lastLockTimestamp" => last_lock_timestamp: i64,
        "lastPullTimestamp" => last_pull_timestamp: i64,
        "locked" => locked: bool,
        /// Orderly consumption: messages taken but not yet committed.
        "transactionMsgCount" => transaction_msg_count: i32,
        "transactionMsgMaxOffset" => transaction_msg_max_offset: i64,
        "transactionMsgMinOffset" => transaction_msg_min_offset: i64,
        "tryUnlockTimes" => try_unlock_times: i64,
    }
}

json_object! {
    /// `PopProcessQueueInfo`: one queue a POP consumer has messages of in flight (RocketMQ 5's
    /// POP consumers report these instead of `ProcessQueueInfo`).
    pub struct PopProcessQueueInfo {
        /// RocketMQ's spelling.
        "droped" => dropped: bool,
        "lastPopTimestamp" => last_pop_timestamp: i64,
        "waitAckCount" => wait_ack_count: i32,
    }
}

json_object! {
    /// `ConsumeStatus`: a topic's pull and consume rates (per-minute averages).
    pub struct ConsumeStatus {
        "consumeFailedMsgs" => consume_failed_msgs: i64,
        "consumeFailedTPS" => consume_failed_tps: f64,
        "consumeOKTPS" => consume_ok_tps: f64,
        "consumeRT" => consume_rt: f64,
        "pullRT" => pull_rt: f64,
        "pullTPS" => pull_tps: f64,
    }
}

json_object! {
    /// `ConsumerRunningInfo`, with 5.x's table of POP queues.
    pub struct ConsumerRunningInfo {
        "jstack" => jstack: Option<String>,
        "mqPopTable" => mq_pop_table: BTreeMap<MessageQueue, PopProcessQueueInfo>,
        "mqTable" => mq_table: BTreeMap<MessageQueue, ProcessQueueInfo>,
        "properties" => properties: BTreeMap<String, String>,
        "statusTable" => status_table: BTreeMap<String, ConsumeStatus>,
        "subscriptionSet" => subscription_set: Vec<SubscriptionData>,
    }
}

json_object! {
    /// `GetConsumerStatusBody`: a client's offsets of one topic (`messageQueueTable`, its answer
    /// to GET_CONSUMER_STATUS_FROM_CLIENT), and the broker's collection of them by client id
    /// (`consumerTable`, its answer to INVOKE_BROKER_TO_GET_CONSUMER_STATUS).
    pub struct GetConsumerStatusBody {
        "consumerTable" => consumer_table: BTreeMap<String, BTreeMap<MessageQueue, i64>>,
        "messageQueueTable" => message_queue_table: BTreeMap<MessageQueue, i64>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::JsonBody;

    #[test]
    fn queue_keys_are_written_as_fastjson_objects_and_read_back() {
        let mut info = ConsumerRunningInfo::default();
        info.properties.insert(
            running_info_property::CONSUME_TYPE.to_owned(),
            "CONSUME_PASSIVELY".to_owned(),
        );
        info.mq_table.insert(
            MessageQueue::new("T", "broker-a", 1),
            ProcessQueueInfo {
                commit_offset: 7,
                locked: true,
                ..ProcessQueueInfo::default()
            },
        );
        let bytes = info.to_json_bytes();
        let text = String::from_utf8(bytes.to_vec()).expect("utf-8");
        assert!(
            text.contains(r#""mqTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"#),
            "{text}"
        );
        assert!(text.contains(r#""droped":false"#), "{text}");
        let back = ConsumerRunningInfo::from_json_bytes(&bytes).expect("decode");
        assert_eq!(back, info);
    }

    #[test]
    fn consumer_status_tables_nest_queue_keys_under_client_ids() {
        let queue = MessageQueue::new("T", "broker-a", 2);
        let mut body = GetConsumerStatusBody::default();
        body.consumer_table
            .insert("client-1".to_owned(), BTreeMap::from([(queue.clone(), 42)]));
        let bytes = body.to_json_bytes();
        let text = String::from_utf8(bytes.to_vec()).expect("utf-8");
        assert!(
            text.contains(r#""client-1":{{"brokerName":"broker-a","queueId":2,"topic":"T"}:42}"#),
            "{text}"
        );
        assert_eq!(
            GetConsumerStatusBody::from_json_bytes(&bytes).expect("decode"),
            body
        );
    }
}
