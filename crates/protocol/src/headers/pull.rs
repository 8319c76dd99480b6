//! PULL_MESSAGE (11) / LITE_PULL_MESSAGE (361).

use crate::command_header;

/// `PullSysFlag` bits of [`PullMessageRequestHeader::sys_flag`].
pub mod pull_sys_flag {
    /// The request carries the consumer's progress in `commitOffset`.
    pub const COMMIT_OFFSET: i32 = 0x1;
    /// The broker may hold the request (long polling).
    pub const SUSPEND: i32 = 0x2;
    /// The request carries its subscription expression.
    pub const SUBSCRIPTION: i32 = 0x4;
    pub const CLASS_FILTER: i32 = 0x8;
    /// Sent by lite pull consumers.
    pub const LITE_PULL_MESSAGE: i32 = 0x10;

    /// Builds the flag as `PullSysFlag.buildSysFlag` does.
    pub fn build(
        commit_offset: bool,
        suspend: bool,
        subscription: bool,
        class_filter: bool,
    ) -> i32 {
        let mut flag = 0;
        if commit_offset {
            flag |= COMMIT_OFFSET;
        }
        if suspend {
            flag |= SUSPEND;
        }
        if subscription {
            flag |= SUBSCRIPTION;
        }
        if class_filter {
            flag |= CLASS_FILTER;
        }
        flag
    }
}

command_header! {
    /// `PullMessageRequestHeader`.
    pub struct PullMessageRequestHeader {
        required consumer_group: String = "consumerGroup",
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        /// Logical offset to read from.
        required queue_offset: i64 = "queueOffset",
        required max_msg_nums: i32 = "maxMsgNums",
        /// [`pull_sys_flag`] bits.
        required sys_flag: i32 = "sysFlag",
        /// Consumer progress, meaningful only with [`pull_sys_flag::COMMIT_OFFSET`].
        required commit_offset: i64 = "commitOffset",
        /// How long the broker may hold the request.
        required suspend_timeout_millis: i64 = "suspendTimeoutMillis",
        /// Only with [`pull_sys_flag::SUBSCRIPTION`].
        optional subscription: String = "subscription",
        required sub_version: i64 = "subVersion",
        /// `TAG` when absent.
        optional expression_type: String = "expressionType",
        /// 5.x: client `pullBatchSizeInBytes`.
        optional max_msg_bytes: i32 = "maxMsgBytes",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `PullMessageResponseHeader`; the four required fields go on every pull response the
    /// client accepts (SUCCESS, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED).
    pub struct PullMessageResponseHeader {
        required suggest_which_broker_id: i64 = "suggestWhichBrokerId",
        required next_begin_offset: i64 = "nextBeginOffset",
        required min_offset: i64 = "minOffset",
        required max_offset: i64 = "maxOffset",
        optional offset_delta: i64 = "offsetDelta",
        optional topic_sys_flag: i32 = "topicSysFlag",
        optional group_sys_flag: i32 = "groupSysFlag",
        optional forbidden_type: i32 = "forbiddenType",
    }
}
