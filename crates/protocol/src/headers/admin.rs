//! Admin and master→slave requests: topics, subscription groups, stats, resets, message lookup.

use crate::command_header;

command_header! {
    /// `CreateTopicRequestHeader` (UPDATE_AND_CREATE_TOPIC, 17).
    pub struct CreateTopicRequestHeader {
        required topic: String = "topic",
        required default_topic: String = "defaultTopic",
        required read_queue_nums: i32 = "readQueueNums",
        required write_queue_nums: i32 = "writeQueueNums",
        /// `PermName` bits.
        required perm: i32 = "perm",
        /// `SINGLE_TAG` or `MULTI_TAG`.
        required topic_filter_type: String = "topicFilterType",
        optional topic_sys_flag: i32 = "topicSysFlag",
        required order: bool = "order",
        optional attributes: String = "attributes",
        optional force: bool = "force",
    }
}

command_header! {
    /// 5.x paging of GET_ALL_TOPIC_CONFIG (21); 4.9 callers send no header at all.
    pub struct GetAllTopicConfigRequestHeader {
        optional topic_seq: i32 = "topicSeq",
        optional data_version: String = "dataVersion",
        optional max_topic_num: i32 = "maxTopicNum",
    }
}

command_header! {
    /// 5.x response header of GET_ALL_TOPIC_CONFIG.
    pub struct GetAllTopicConfigResponseHeader {
        optional total_topic_num: i32 = "totalTopicNum",
    }
}

command_header! {
    /// 5.x paging of GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201); 4.9 sends no header.
    pub struct GetAllSubscriptionGroupRequestHeader {
        optional group_seq: i32 = "groupSeq",
        optional data_version: String = "dataVersion",
        optional max_group_num: i32 = "maxGroupNum",
    }
}

command_header! {
    /// `DeleteSubscriptionGroupRequestHeader` (DELETE_SUBSCRIPTIONGROUP, 207).
    pub struct DeleteSubscriptionGroupRequestHeader {
        required group_name: String = "groupName",
        /// 4.9 name of the "drop its offsets too" switch.
        optional remove_offset: bool = "removeOffset",
        /// 5.x name of the same switch.
        optional clean_offset: bool = "cleanOffset",
    }
}

command_header! {
    /// `GetConsumeStatsRequestHeader` (GET_CONSUME_STATS, 208).
    pub struct GetConsumeStatsRequestHeader {
        required consumer_group: String = "consumerGroup",
        /// Absent: every topic the group has offsets for.
        optional topic: String = "topic",
        /// 5.x: semicolon-separated topics.
        optional topic_list: String = "topicList",
    }
}

command_header! {
    /// `GetConsumerConnectionListRequestHeader` (GET_CONSUMER_CONNECTION_LIST, 203).
    pub struct GetConsumerConnectionListRequestHeader {
        required consumer_group: String = "consumerGroup",
    }
}

command_header! {
    /// `GetProducerConnectionListRequestHeader` (GET_PRODUCER_CONNECTION_LIST, 204).
    pub struct GetProducerConnectionListRequestHeader {
        required producer_group: String = "producerGroup",
    }
}

command_header! {
    /// `GetConsumeStatsInBrokerHeader` (GET_BROKER_CONSUME_STATS, 317).
    pub struct GetConsumeStatsInBrokerHeader {
        /// Only topics marked orderly.
        required is_order: bool = "isOrder",
    }
}

command_header! {
    /// `QueryConsumeQueueRequestHeader` (QUERY_CONSUME_QUEUE, 321; mqadmin `queryCq`).
    pub struct QueryConsumeQueueRequestHeader {
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        /// The first queue offset to show.
        required index: i64 = "index",
        required count: i32 = "count",
        optional consumer_group: String = "consumerGroup",
    }
}

command_header! {
    /// `GetConsumerRunningInfoRequestHeader` (GET_CONSUMER_RUNNING_INFO, 307): admin to broker,
    /// and broker to the client.
    pub struct GetConsumerRunningInfoRequestHeader {
        required consumer_group: String = "consumerGroup",
        required client_id: String = "clientId",
        optional jstack_enable: bool = "jstackEnable",
    }
}

command_header! {
    /// `ConsumeMessageDirectlyResultRequestHeader` (CONSUME_MESSAGE_DIRECTLY, 309): admin to
    /// broker (the message named by its offset id), and broker to the client (the message as
    /// the body).
    pub struct ConsumeMessageDirectlyResultRequestHeader {
        required consumer_group: String = "consumerGroup",
        required client_id: String = "clientId",
        required msg_id: String = "msgId",
        optional broker_name: String = "brokerName",
    }
}

command_header! {
    /// `ViewBrokerStatsDataRequestHeader` (VIEW_BROKER_STATS_DATA, 315).
    pub struct ViewBrokerStatsDataRequestHeader {
        /// `TOPIC_PUT_NUMS`, `GROUP_GET_NUMS`, ...
        required stats_name: String = "statsName",
        /// A topic, `topic@group`, or the cluster name for broker totals.
        required stats_key: String = "statsKey",
    }
}

command_header! {
    /// `QueryTopicConsumeByWhoRequestHeader` (QUERY_TOPIC_CONSUME_BY_WHO, 300).
    pub struct QueryTopicConsumeByWhoRequestHeader {
        required topic: String = "topic",
    }
}

command_header! {
    /// `GetTopicStatsInfoRequestHeader` (GET_TOPIC_STATS_INFO, 202).
    pub struct GetTopicStatsInfoRequestHeader {
        required topic: String = "topic",
    }
}

command_header! {
    /// `ResetOffsetRequestHeader` (INVOKE_BROKER_TO_RESET_OFFSET, 222); the broker sends the
    /// same fields with RESET_CONSUMER_CLIENT_OFFSET (220).
    pub struct ResetOffsetRequestHeader {
        required topic: String = "topic",
        required group: String = "group",
        /// −1: the queue's max offset.
        required timestamp: i64 = "timestamp",
        /// The key is literally `isForce`.
        required is_force: bool = "isForce",
        /// 5.x: −1 for every queue.
        optional queue_id: i32 = "queueId",
        /// 5.x: an explicit target offset.
        optional offset: i64 = "offset",
    }
}

command_header! {
    /// `ViewMessageRequestHeader` (VIEW_MESSAGE_BY_ID, 33).
    pub struct ViewMessageRequestHeader {
        /// Commit-log offset decoded from an offset message id.
        required offset: i64 = "offset",
        optional topic: String = "topic",
    }
}

command_header! {
    /// `QueryMessageRequestHeader` (QUERY_MESSAGE, 12).
    pub struct QueryMessageRequestHeader {
        required topic: String = "topic",
        required key: String = "key",
        required max_num: i32 = "maxNum",
        required begin_timestamp: i64 = "beginTimestamp",
        required end_timestamp: i64 = "endTimestamp",
        /// Set by the client to look the key up as a `UNIQ_KEY`.
        optional unique_key_query: bool = "_UNIQUE_KEY_QUERY",
    }
}

command_header! {
    /// `QueryMessageResponseHeader`.
    pub struct QueryMessageResponseHeader {
        required index_last_update_timestamp: i64 = "indexLastUpdateTimestamp",
        required index_last_update_phyoffset: i64 = "indexLastUpdatePhyoffset",
    }
}

command_header! {
    /// `DeleteTopicRequestHeader` (DELETE_TOPIC_IN_BROKER 215, DELETE_TOPIC_IN_NAMESRV 216).
    pub struct DeleteTopicRequestHeader {
        required topic: String = "topic",
    }
}

command_header! {
    /// `CloneGroupOffsetRequestHeader` (CLONE_GROUP_OFFSET, 314).
    pub struct CloneGroupOffsetRequestHeader {
        required src_group: String = "srcGroup",
        required dest_group: String = "destGroup",
        /// Absent: every topic the source group has offsets for.
        optional topic: String = "topic",
        /// `false`: a topic the source group is online for but does not subscribe is skipped.
        required offline: bool = "offline",
    }
}

command_header! {
    /// `GetConsumerStatusRequestHeader`: admin to broker (INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
    /// 223; mqadmin `getConsumerStatus`) and broker to client (GET_CONSUMER_STATUS_FROM_CLIENT,
    /// 221).
    pub struct GetConsumerStatusRequestHeader {
        required topic: String = "topic",
        required group: String = "group",
        /// Only this client (its client id); absent: every consumer of the group.
        optional client_addr: String = "clientAddr",
    }
}

command_header! {
    /// Tidemark's TIDEMARK_GET_PROGRESS_HISTORY (31003).
    pub struct GetProgressHistoryRequestHeader {
        required consumer_group: String = "consumerGroup",
        /// Only entries at or after this time (epoch ms); absent: all the broker keeps.
        optional since_ms: i64 = "sinceMs",
        /// Also the checkpoints of routine progress (absent: only changes someone asked for).
        optional checkpoints: bool = "checkpoints",
    }
}

command_header! {
    /// Tidemark's TIDEMARK_GET_DEAD_LETTERS (31006).
    pub struct GetDeadLettersRequestHeader {
        required consumer_group: String = "consumerGroup",
        /// Only dead letters of this original topic.
        optional topic: String = "topic",
        /// The dead-letter queue offset to start from (absent: its first message).
        optional offset: i64 = "offset",
        /// At most this many (absent: 32; never more than 1024).
        optional max_count: i32 = "maxCount",
    }
}

command_header! {
    /// Tidemark's TIDEMARK_RESEND_DEAD_LETTERS (31007).
    pub struct ResendDeadLettersRequestHeader {
        required consumer_group: String = "consumerGroup",
        /// The dead-letter queue offsets to resend, comma-separated; absent: every dead letter
        /// (of `topic`, if given).
        optional offsets: String = "offsets",
        /// With no `offsets`: only dead letters of this original topic.
        optional topic: String = "topic",
        /// `retry` (default): back to the group through its retry topic with a fresh count;
        /// `origin`: to the original topic, for every group subscribed to it.
        optional destination: String = "destination",
        /// Only answer what would be sent (each message's id is then the dead letter's own).
        optional dry_run: bool = "dryRun",
    }
}

command_header! {
    /// Tidemark's TIDEMARK_REPLAY_RETRIES (31008).
    pub struct ReplayRetriesRequestHeader {
        required consumer_group: String = "consumerGroup",
        /// The original topic whose retry messages are replayed.
        required topic: String = "topic",
        /// Retry messages stored at or after this time (epoch ms).
        required since_ms: i64 = "sinceMs",
        /// Only answer what would be put back (each message's id is then the retry message's
        /// own).
        optional dry_run: bool = "dryRun",
    }
}

command_header! {
    /// Tidemark's TIDEMARK_PLAN_PROGRESS_MOVE (31005): the plan of a reset (`timestamp`, with
    /// `isForce` as INVOKE_BROKER_TO_RESET_OFFSET takes them; -1 is a skip to the end) or, with
    /// `srcGroup`, of a clone (`offline` as CLONE_GROUP_OFFSET takes it).
    pub struct PlanProgressMoveRequestHeader {
        required consumer_group: String = "consumerGroup",
        /// The reset's topic, or the only topic a clone copies (absent: every topic).
        optional topic: String = "topic",
        optional timestamp: i64 = "timestamp",
        optional is_force: bool = "isForce",
        /// Plan a clone of this group's offsets to `consumerGroup`.
        optional src_group: String = "srcGroup",
        optional offline: bool = "offline",
    }
}

command_header! {
    /// Tidemark's TIDEMARK_RESTORE_PROGRESS (31004): either `atMs` or `undoEntry`.
    pub struct RestoreProgressRequestHeader {
        required consumer_group: String = "consumerGroup",
        /// Only this topic's queues (absent: every topic the history names for the group).
        optional topic: String = "topic",
        /// Put each queue back where the group stood at this time (epoch ms).
        optional at_ms: i64 = "atMs",
        /// Put each queue back where it stood before this history entry of the broker.
        optional undo_entry: i64 = "undoEntry",
        /// Only answer the plan; change nothing.
        optional dry_run: bool = "dryRun",
    }
}
