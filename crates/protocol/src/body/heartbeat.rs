//! `HeartbeatData` (HEART_BEAT body) and the subscription types inside it.

use crate::{json_enum, json_object};

json_enum! {
    /// `ConsumeType`.
    pub enum ConsumeType {
        /// Pull and lite-pull consumers.
        ConsumeActively = "CONSUME_ACTIVELY",
        /// Push consumers.
        ConsumePassively = "CONSUME_PASSIVELY",
        /// 5.x.
        ConsumePop = "CONSUME_POP",
    }
    default ConsumePassively
}

json_enum! {
    /// `MessageModel`.
    pub enum MessageModel {
        Broadcasting = "BROADCASTING",
        Clustering = "CLUSTERING",
    }
    default Clustering
}

json_enum! {
    /// `ConsumeFromWhere`: where a queue with no stored offset starts.
    pub enum ConsumeFromWhere {
        ConsumeFromLastOffset = "CONSUME_FROM_LAST_OFFSET",
        /// Deprecated; behaves as LAST.
        ConsumeFromLastOffsetAndFromMinWhenBootFirst = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        /// Deprecated; behaves as LAST.
        ConsumeFromMinOffset = "CONSUME_FROM_MIN_OFFSET",
        /// Deprecated; behaves as LAST.
        ConsumeFromMaxOffset = "CONSUME_FROM_MAX_OFFSET",
        ConsumeFromFirstOffset = "CONSUME_FROM_FIRST_OFFSET",
        ConsumeFromTimestamp = "CONSUME_FROM_TIMESTAMP",
    }
    default ConsumeFromLastOffset
}

json_object! {
    /// `HeartbeatData`.
    pub struct HeartbeatData {
        /// `clientIP@instanceName[@unitName]`.
        "clientID" => client_id: String,
        "consumerDataSet" => consumer_data_set: Vec<ConsumerData>,
        /// 5.x heartbeat V2; 0 means V1 semantics.
        "heartbeatFingerprint" => heartbeat_fingerprint: Option<i32>,
        "producerDataSet" => producer_data_set: Vec<ProducerData>,
        /// 5.x heartbeat V2: subscriptions omitted because unchanged.
        "withoutSub" => without_sub: Option<bool>,
    }
}

json_object! {
    /// `ProducerData`.
    pub struct ProducerData {
        "groupName" => group_name: String,
    }
}

json_object! {
    /// `ConsumerData`: one consumer group of a client.
    pub struct ConsumerData {
        "consumeFromWhere" => consume_from_where: ConsumeFromWhere,
        "consumeType" => consume_type: ConsumeType,
        "groupName" => group_name: String,
        "messageModel" => message_model: MessageModel,
        "subscriptionDataSet" => subscription_data_set: Vec<SubscriptionData>,
        "unitMode" => unit_mode: bool,
    }
}

json_object! {
    /// `CheckClientRequestBody`: CHECK_CLIENT_CONFIG's body, a consumer's subscription checked
    /// before it starts (a SQL92 selector the broker cannot compile fails the start).
    pub struct CheckClientRequestBody {
        "clientId" => client_id: String,
        "group" => group: String,
        "subscriptionData" => subscription_data: Option<SubscriptionData>,
    }
}

json_object! {
    /// `SubscriptionData`: one topic subscription (`filterClassSource` is never serialised).
    pub struct SubscriptionData {
        "classFilterMode" => class_filter_mode: bool,
        /// Java hash codes of `tags_set`.
        "codeSet" => code_set: Vec<i32>,
        /// `TAG` or `SQL92`; C++ clients omit it (TAG).
        "expressionType" => expression_type: String = String::from("TAG"),
        "subString" => sub_string: String,
        /// Client subscription version, a ms timestamp.
        "subVersion" => sub_version: i64,
        "tagsSet" => tags_set: Vec<String>,
        "topic" => topic: String,
    }
}

impl SubscriptionData {
    /// A TAG subscription as `FilterAPI.buildSubscriptionData` builds it.
    pub fn from_expression(topic: &str, expression: &str, sub_version: i64) -> Self {
        let parsed = crate::message::SubscriptionExpression::parse(expression);
        Self {
            topic: topic.to_owned(),
            sub_string: parsed.expression,
            tags_set: parsed.tags,
            code_set: parsed.codes,
            sub_version,
            ..Self::default()
        }
    }
}
