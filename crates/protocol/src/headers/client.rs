//! Client management: UNREGISTER_CLIENT (35), CONSUMER_SEND_MSG_BACK (36),
//! GET_CONSUMER_LIST_BY_GROUP (38), NOTIFY_CONSUMER_IDS_CHANGED (40), END_TRANSACTION (37), CHECK_TRANSACTION_STATE (39).

use crate::command_header;

command_header! {
    /// `UnregisterClientRequestHeader`.
    pub struct UnregisterClientRequestHeader {
        required client_id: String = "clientID",
        optional producer_group: String = "producerGroup",
        optional consumer_group: String = "consumerGroup",
    }
}

command_header! {
    /// `ConsumerSendMsgBackRequestHeader`.
    pub struct ConsumerSendMsgBackRequestHeader {
        /// Commit-log offset of the failed message.
        required offset: i64 = "offset",
        required group: String = "group",
        /// 0: the broker picks `3 + reconsumeTimes`; negative: straight to the DLQ.
        required delay_level: i32 = "delayLevel",
        /// The client's message id (`UNIQ_KEY`).
        optional origin_msg_id: String = "originMsgId",
        optional origin_topic: String = "originTopic",
        defaulted unit_mode: bool = "unitMode" (false),
        optional max_reconsume_times: i32 = "maxReconsumeTimes",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `GetConsumerListByGroupRequestHeader`.
    pub struct GetConsumerListByGroupRequestHeader {
        required consumer_group: String = "consumerGroup",
    }
}

command_header! {
    /// `NotifyConsumerIdsChangedRequestHeader`, sent oneway by the broker to a group's clients.
    pub struct NotifyConsumerIdsChangedRequestHeader {
        required consumer_group: String = "consumerGroup",
    }
}

command_header! {
    /// `EndTransactionRequestHeader`, sent oneway by transactional producers.
    pub struct EndTransactionRequestHeader {
        required producer_group: String = "producerGroup",
        required tran_state_table_offset: i64 = "tranStateTableOffset",
        required commit_log_offset: i64 = "commitLogOffset",
        /// 0 unknown, 8 commit, 12 rollback.
        required commit_or_rollback: i32 = "commitOrRollback",
        optional from_transaction_check: bool = "fromTransactionCheck",
        required msg_id: String = "msgId",
        optional transaction_id: String = "transactionId",
    }
}

command_header! {
    /// `CheckTransactionStateRequestHeader`, sent oneway by the broker to a producer of the
    /// half message's group; the body is the half message as a record, in its real topic.
    pub struct CheckTransactionStateRequestHeader {
        /// The half message's offset in the half topic's queue.
        required tran_state_table_offset: i64 = "tranStateTableOffset",
        required commit_log_offset: i64 = "commitLogOffset",
        /// The client's message id (`UNIQ_KEY`).
        optional msg_id: String = "msgId",
        optional transaction_id: String = "transactionId",
        optional offset_msg_id: String = "offsetMsgId",
        /// The broker that holds the half (RocketMQ 5 adds it).
        optional broker_name: String = "brokerName",
    }
}
