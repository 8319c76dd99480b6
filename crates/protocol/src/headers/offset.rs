//! Consumer offsets and queue positions: QUERY/UPDATE_CONSUMER_OFFSET (14/15), GET_MAX/MIN_OFFSET
//! (30/31), SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32).

use crate::command_header;

command_header! {
    /// `QueryConsumerOffsetRequestHeader`.
    pub struct QueryConsumerOffsetRequestHeader {
        required consumer_group: String = "consumerGroup",
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        /// 5.x: `false` asks for QUERY_NOT_FOUND instead of the young-queue offset 0.
        optional set_zero_if_not_found: bool = "setZeroIfNotFound",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `UpdateConsumerOffsetRequestHeader`; usually sent oneway and never answered then.
    pub struct UpdateConsumerOffsetRequestHeader {
        required consumer_group: String = "consumerGroup",
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        /// The next offset to consume.
        required commit_offset: i64 = "commitOffset",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// The one-field response of QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET and
    /// SEARCH_OFFSET_BY_TIMESTAMP (Java has a class for each, all with just `offset`).
    pub struct OffsetResponseHeader {
        required offset: i64 = "offset",
    }
}

command_header! {
    /// `GetMaxOffsetRequestHeader`.
    pub struct GetMaxOffsetRequestHeader {
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        /// 5.x; Java defaults it to true.
        optional committed: bool = "committed",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `GetMinOffsetRequestHeader`.
    pub struct GetMinOffsetRequestHeader {
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `SearchOffsetRequestHeader`.
    pub struct SearchOffsetRequestHeader {
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        required timestamp: i64 = "timestamp",
        /// 5.x: `LOWER` or `UPPER`.
        optional boundary_type: String = "boundaryType",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `GetEarliestMsgStoretimeRequestHeader`.
    pub struct GetEarliestMsgStoretimeRequestHeader {
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `GetEarliestMsgStoretimeResponseHeader`: −1 when the queue is empty.
    pub struct GetEarliestMsgStoretimeResponseHeader {
        required timestamp: i64 = "timestamp",
    }
}
