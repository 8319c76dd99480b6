//! Topic and subscription-group configuration: `topics.json`, `subscriptionGroup.json`,
//! GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG and the REGISTER_BROKER body.

use std::collections::BTreeMap;

use super::route::perm;
use crate::{json_enum, json_object};

json_object! {
    /// `DataVersion`: equal when timestamp and counter (5.x: and state version) are equal.
    pub struct DataVersion {
        "counter" => counter: i64,
        /// 5.x.
        "stateVersion" => state_version: Option<i64>,
        "timestamp" => timestamp: i64,
    }
}

impl DataVersion {
    /// `nextVersion()`: a new timestamp and the next counter.
    pub fn next(&self, now_ms: i64) -> Self {
        Self {
            counter: self.counter + 1,
            timestamp: now_ms,
            state_version: self.state_version,
        }
    }
}

json_enum! {
    /// `TopicFilterType`.
    pub enum TopicFilterType {
        SingleTag = "SINGLE_TAG",
        MultiTag = "MULTI_TAG",
    }
    default SingleTag
}

json_object! {
    /// `TopicConfig`.
    pub struct TopicConfig {
        /// 5.x.
        "attributes" => attributes: Option<BTreeMap<String, String>>,
        "order" => order: bool,
        "perm" => perm: i32 = perm::READ | perm::WRITE,
        "readQueueNums" => read_queue_nums: i32 = 16,
        "topicFilterType" => topic_filter_type: TopicFilterType,
        "topicName" => topic_name: String,
        "topicSysFlag" => topic_sys_flag: i32,
        "writeQueueNums" => write_queue_nums: i32 = 16,
    }
}

json_object! {
    /// `TopicConfigSerializeWrapper`: `topics.json`, GET_ALL_TOPIC_CONFIG, and inside
    /// [`RegisterBrokerBody`].
    pub struct TopicConfigSerializeWrapper {
        "dataVersion" => data_version: DataVersion,
        "topicConfigTable" => topic_config_table: BTreeMap<String, TopicConfig>,
    }
}

json_object! {
    /// `RegisterBrokerBody` (uncompressed form; brokers default to `compressedRegister=false`).
    pub struct RegisterBrokerBody {
        "filterServerList" => filter_server_list: Vec<String>,
        "topicConfigSerializeWrapper" => topic_config_serialize_wrapper: TopicConfigSerializeWrapper,
    }
}

json_object! {
    /// `SubscriptionGroupConfig` with 4.9's defaults.
    pub struct SubscriptionGroupConfig {
        "brokerId" => broker_id: i64,
        "consumeBroadcastEnable" => consume_broadcast_enable: bool = true,
        "consumeEnable" => consume_enable: bool = true,
        "consumeFromMinEnable" => consume_from_min_enable: bool = true,
        /// 5.x: the group consumes in order (FIFO; gRPC consumers learn it from the broker).
        "consumeMessageOrderly" => consume_message_orderly: Option<bool>,
        "groupName" => group_name: String,
        "notifyConsumerIdsChangedEnable" => notify_consumer_ids_changed_enable: bool = true,
        "retryMaxTimes" => retry_max_times: i32 = 16,
        "retryQueueNums" => retry_queue_nums: i32 = 1,
        "whichBrokerWhenConsumeSlowly" => which_broker_when_consume_slowly: i64 = 1,
    }
}

json_object! {
    /// `subscriptionGroup.json` and the GET_ALL_SUBSCRIPTIONGROUP_CONFIG body.
    pub struct SubscriptionGroupWrapper {
        "dataVersion" => data_version: DataVersion,
        "subscriptionGroupTable" => subscription_group_table: BTreeMap<String, SubscriptionGroupConfig>,
    }
}

json_object! {
    /// `CreateTopicListRequestBody` (UPDATE_AND_CREATE_TOPIC_LIST, 5.x `updateTopicList`):
    /// topic configs whose `attributes` keys carry RocketMQ's `+` (set) or `-` (remove) sign.
    pub struct CreateTopicListRequestBody {
        "topicConfigList" => topic_config_list: Vec<TopicConfig>,
    }
}

json_object! {
    /// `SubscriptionGroupList` (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, 5.x
    /// `updateSubGroupList`).
    pub struct SubscriptionGroupList {
        "groupConfigList" => group_config_list: Vec<SubscriptionGroupConfig>,
    }
}
