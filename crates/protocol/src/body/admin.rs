//! Admin and coordination bodies: message queues, consume stats, locks, connections, KV tables.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::heartbeat::{ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData};
use crate::error::JsonError;
use crate::json::{self, FromJson, JsonKey, ToJson, Value};
use crate::json_object;

json_object! {
    /// `MessageQueue`: one queue of a topic on one broker name.
    #[derive(Eq, Hash)]
    pub struct MessageQueue {
        "brokerName" => broker_name: String,
        "queueId" => queue_id: i32,
        "topic" => topic: String,
    }
}

impl MessageQueue {
    pub fn new(topic: impl Into<String>, broker_name: impl Into<String>, queue_id: i32) -> Self {
        Self {
            topic: topic.into(),
            broker_name: broker_name.into(),
            queue_id,
        }
    }
}

/// Java's `MessageQueue.compareTo`: topic, then broker name, then queue id. Rebalancing
/// depends on every client sorting queues the same way.
impl Ord for MessageQueue {
    fn cmp(&self, other: &Self) -> Ordering {
        (&self.topic, &self.broker_name, self.queue_id).cmp(&(
            &other.topic,
            &other.broker_name,
            other.queue_id,
        ))
    }
}

impl PartialOrd for MessageQueue {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// fastjson writes a `MessageQueue` map key as an object; a quoted key holding the object's
/// JSON (what a standard-JSON writer produces) is read too.
impl JsonKey for MessageQueue {
    fn to_key(&self) -> Value {
        self.to_json()
    }

    fn from_key(key: &Value) -> Result<Self, JsonError> {
        match key {
            Value::String(text) => MessageQueue::from_json(&json::parse(text.as_bytes())?),
            other => MessageQueue::from_json(other),
        }
    }
}

json_object! {
    /// `OffsetMovedEvent`: the body of a message in the `OFFSET_MOVED_EVENT` topic, written when
    /// a pull moved a group off an offset the queue no longer (or never) held.
    pub struct OffsetMovedEvent {
        "consumerGroup" => consumer_group: String,
        "messageQueue" => message_queue: MessageQueue,
        "offsetNew" => offset_new: i64,
        "offsetRequest" => offset_request: i64,
    }
}

json_object! {
    /// `OffsetWrapper`: one queue's line in [`ConsumeStats`].
    pub struct OffsetWrapper {
        /// The queue's max offset.
        "brokerOffset" => broker_offset: i64,
        /// The group's stored offset (0 when none).
        "consumerOffset" => consumer_offset: i64,
        /// Store time of the last consumed message, 0 if none.
        "lastTimestamp" => last_timestamp: i64,
        /// 5.x.
        "pullOffset" => pull_offset: Option<i64>,
    }
}

json_object! {
    /// `ConsumeStats` (GET_CONSUME_STATS).
    pub struct ConsumeStats {
        "consumeTps" => consume_tps: f64,
        "offsetTable" => offset_table: BTreeMap<MessageQueue, OffsetWrapper>,
    }
}

json_object! {
    /// One queue's line in [`ConsumerProgress`].
    pub struct QueueProgressView {
        "topic" => topic: String,
        "brokerName" => broker_name: String,
        "queueId" => queue_id: i32,
        /// The queue's max offset.
        "brokerOffset" => broker_offset: i64,
        /// The group's stored offset (0 when none).
        "consumerOffset" => consumer_offset: i64,
        /// How many offsets above the consumer offset are already consumed.
        "ackedAbove" => acked_above: i64,
        /// Those offsets, in [`AckedRanges`](crate::acked::AckedRanges)' text form.
        "ackedRanges" => acked_ranges: String,
        /// Age of the oldest unconsumed message (now − its store time), 0 when none.
        "timeLagMs" => time_lag_ms: i64,
        /// The offset holding the group back while later messages are done, −1 when none.
        "stuckOffset" => stuck_offset: i64,
        /// Since when (epoch ms) that offset has not moved; 0 when nothing is stuck.
        "stuckSinceMs" => stuck_since_ms: i64,
        /// POP (absent for groups that never popped the queue): messages handed out and not
        /// yet acknowledged.
        "popInFlight" => pop_in_flight: Option<i64>,
        /// POP: when the first of them becomes visible again (epoch ms).
        "popVisibleAgainAtMs" => pop_visible_again_at_ms: Option<i64>,
        /// POP: the next offset to hand out.
        "popNextOffset" => pop_next_offset: Option<i64>,
    }
}

json_object! {
    /// Tidemark's TIDEMARK_GET_CONSUMER_PROGRESS body.
    pub struct ConsumerProgress {
        "queues" => queues: Vec<QueueProgressView>,
    }
}

json_object! {
    /// One queue's offsets in a [`ProgressHistoryEntry`]; -1 for none (before: the group had
    /// no offset there; after: it was removed).
    pub struct ProgressMoveView {
        "topic" => topic: String,
        "queueId" => queue_id: i32,
        "before" => before: i64,
        "after" => after: i64,
    }
}

json_object! {
    /// One change of a group's committed progress, as a broker recorded it.
    pub struct ProgressHistoryEntry {
        /// Increases with every entry of the broker that recorded it.
        "id" => id: i64,
        "timeMs" => time_ms: i64,
        "group" => group: String,
        /// `reset`, `skip`, `clone`, `rewind`, `group-deleted`, `topic-deleted`, `restore`,
        /// `resend`, `retry-replay`, `checkpoint`.
        "kind" => kind: String,
        /// The request that made it (0 for a checkpoint).
        "requestCode" => request_code: i32,
        /// The ACL account that signed the request, `open` without ACL, `white-listed`, or
        /// `broker` for a checkpoint.
        "account" => account: String,
        "address" => address: String,
        /// The client's language and version.
        "client" => client: String,
        "queues" => queues: Vec<ProgressMoveView>,
        /// What the queues do not say: which messages a resend or replay sent, and where.
        "detail" => detail: Option<String>,
    }
}

json_object! {
    /// Tidemark's TIDEMARK_GET_PROGRESS_HISTORY body: a group's entries on one broker, oldest
    /// first.
    pub struct ProgressHistory {
        "brokerName" => broker_name: String,
        "entries" => entries: Vec<ProgressHistoryEntry>,
    }
}

json_object! {
    /// One queue of a [`ProgressPlan`]: its committed offset now and where it goes; -1 for none.
    pub struct ProgressPlanLine {
        "topic" => topic: String,
        "queueId" => queue_id: i32,
        "current" => current: i64,
        "target" => target: i64,
    }
}

impl ProgressPlanLine {
    /// What the move does to the group in this queue, as tools show it: `replays N`,
    /// `skips N`, `stays`, or `starts here` for a queue it had no offset in.
    pub fn effect(&self) -> String {
        match self.current {
            current if current < 0 => "starts here".to_owned(),
            current if self.target < current => format!("replays {}", current - self.target),
            current if self.target > current => format!("skips {}", self.target - current),
            _ => "stays".to_owned(),
        }
    }
}

json_object! {
    /// What a move of a group's progress changes (or changed) on one broker: the body of
    /// Tidemark's TIDEMARK_RESTORE_PROGRESS and TIDEMARK_PLAN_PROGRESS_MOVE.
    pub struct ProgressPlan {
        "brokerName" => broker_name: String,
        /// `false` for a dry run.
        "applied" => applied: bool,
        /// The history entry the move was recorded as (-1 for a plan).
        "entry" => entry: i64,
        "queues" => queues: Vec<ProgressPlanLine>,
        /// Set when the group's online consumers are broadcasting: they keep their offsets
        /// themselves, so a move of the broker's copy does not move them.
        "broadcasting" => broadcasting: Option<bool>,
    }
}

json_object! {
    /// One dead letter of a [`DeadLetterList`].
    pub struct DeadLetter {
        /// Where it sits in the group's dead-letter queue (what a resend names).
        "queueOffset" => queue_offset: i64,
        /// Its id in the dead-letter queue.
        "msgId" => msg_id: String,
        /// The id the message had when it was first stored.
        "originMsgId" => origin_msg_id: String,
        /// The id its producer gave it (UNIQ_KEY), if any.
        "uniqKey" => uniq_key: String,
        "originalTopic" => original_topic: String,
        "tags" => tags: String,
        "keys" => keys: String,
        /// How many times it was delivered again before it died.
        "reconsumeTimes" => reconsume_times: i32,
        /// When its producer sent it.
        "bornTimestamp" => born_timestamp: i64,
        /// When it reached the dead-letter queue.
        "diedTimestamp" => died_timestamp: i64,
        "bodySize" => body_size: i32,
    }
}

json_object! {
    /// Tidemark's TIDEMARK_GET_DEAD_LETTERS body: some of a group's dead letters on a broker.
    pub struct DeadLetterList {
        "brokerName" => broker_name: String,
        "messages" => messages: Vec<DeadLetter>,
        /// Where the next page starts; equal to `maxOffset` when this is the last.
        "nextOffset" => next_offset: i64,
        "maxOffset" => max_offset: i64,
    }
}

json_object! {
    /// One message a resend or replay stored again.
    pub struct ResentMessage {
        /// Where the message it copies sits (its dead-letter or retry queue offset).
        "sourceOffset" => source_offset: i64,
        /// The copy's id.
        "msgId" => msg_id: String,
        /// Where the copy went.
        "topic" => topic: String,
    }
}

json_object! {
    /// The body of Tidemark's TIDEMARK_RESEND_DEAD_LETTERS and TIDEMARK_REPLAY_RETRIES.
    pub struct ResentMessages {
        "brokerName" => broker_name: String,
        "messages" => messages: Vec<ResentMessage>,
        /// The progress history entry it was recorded as (-1 when nothing was sent).
        "entry" => entry: i64,
    }
}

json_object! {
    /// `TopicOffset`: one queue's line in [`TopicStatsTable`].
    pub struct TopicOffset {
        "lastUpdateTimestamp" => last_update_timestamp: i64,
        "maxOffset" => max_offset: i64,
        "minOffset" => min_offset: i64,
    }
}

json_object! {
    /// `TopicStatsTable` (GET_TOPIC_STATS_INFO).
    pub struct TopicStatsTable {
        "offsetTable" => offset_table: BTreeMap<MessageQueue, TopicOffset>,
    }
}

json_object! {
    /// `LockBatchRequestBody` (LOCK_BATCH_MQ) and `UnlockBatchRequestBody` (UNLOCK_BATCH_MQ).
    pub struct LockBatchRequestBody {
        "clientId" => client_id: String,
        "consumerGroup" => consumer_group: String,
        "mqSet" => mq_set: Vec<MessageQueue>,
        "onlyThisBroker" => only_this_broker: bool,
    }
}

json_object! {
    /// `LockBatchResponseBody`: the queues now locked by the caller.
    pub struct LockBatchResponseBody {
        "lockOKMQSet" => lock_ok_mq_set: Vec<MessageQueue>,
    }
}

json_object! {
    /// `GetConsumerListByGroupResponseBody`.
    pub struct ConsumerListBody {
        "consumerIdList" => consumer_id_list: Vec<String>,
    }
}

json_object! {
    /// `Connection`: one client channel in [`ConsumerConnection`].
    pub struct Connection {
        "clientAddr" => client_addr: String,
        "clientId" => client_id: String,
        /// A `LanguageCode` name.
        "language" => language: String = String::from("JAVA"),
        "version" => version: i32,
    }
}

json_object! {
    /// `ConsumerConnection` (GET_CONSUMER_CONNECTION_LIST).
    pub struct ConsumerConnection {
        "connectionSet" => connection_set: Vec<Connection>,
        "consumeFromWhere" => consume_from_where: Option<ConsumeFromWhere>,
        "consumeType" => consume_type: Option<ConsumeType>,
        "messageModel" => message_model: Option<MessageModel>,
        "subscriptionTable" => subscription_table: BTreeMap<String, SubscriptionData>,
    }
}

json_object! {
    /// `ProducerConnection` (GET_PRODUCER_CONNECTION_LIST).
    pub struct ProducerConnection {
        "connectionSet" => connection_set: Vec<Connection>,
    }
}

json_object! {
    /// `ConsumeQueueData`: one consume-queue entry in [`QueryConsumeQueueResponseBody`].
    pub struct ConsumeQueueData {
        "physicOffset" => physic_offset: i64,
        "physicSize" => physic_size: i32,
        "tagsCode" => tags_code: i64,
        "extendDataJson" => extend_data_json: Option<String>,
        "bitMap" => bit_map: Option<String>,
        /// Whether the group's subscription takes the entry.
        "eval" => eval: bool,
        "msg" => msg: Option<String>,
    }
}

json_object! {
    /// `QueryConsumeQueueResponseBody` (QUERY_CONSUME_QUEUE).
    pub struct QueryConsumeQueueResponseBody {
        "subscriptionData" => subscription_data: Option<SubscriptionData>,
        "filterData" => filter_data: Option<String>,
        "queueData" => queue_data: Vec<ConsumeQueueData>,
        "maxQueueIndex" => max_queue_index: i64,
        "minQueueIndex" => min_queue_index: i64,
    }
}

json_object! {
    /// `BrokerStatsItem`: one window of [`BrokerStatsData`].
    pub struct BrokerStatsItem {
        "sum" => sum: i64,
        "tps" => tps: f64,
        "avgpt" => avgpt: f64,
    }
}

json_object! {
    /// `BrokerStatsData` (VIEW_BROKER_STATS_DATA): a stats item over the last minute, hour and
    /// day.
    pub struct BrokerStatsData {
        "statsMinute" => stats_minute: BrokerStatsItem,
        "statsHour" => stats_hour: BrokerStatsItem,
        "statsDay" => stats_day: BrokerStatsItem,
    }
}

json_object! {
    /// `GroupList` (QUERY_TOPIC_CONSUME_BY_WHO).
    pub struct GroupList {
        "groupList" => group_list: Vec<String>,
    }
}

json_object! {
    /// `ProducerInfo`: one producer channel in [`ProducerTableInfo`].
    pub struct ProducerInfo {
        "clientId" => client_id: String,
        "remoteIP" => remote_ip: String,
        /// A `LanguageCode` name.
        "language" => language: String = String::from("JAVA"),
        "version" => version: i32,
        "lastUpdateTimestamp" => last_update_timestamp: i64,
    }
}

json_object! {
    /// `ProducerTableInfo` (GET_ALL_PRODUCER_INFO): every online producer, by group.
    pub struct ProducerTableInfo {
        "data" => data: BTreeMap<String, Vec<ProducerInfo>>,
    }
}

json_object! {
    /// `ConsumeStatsList` (GET_BROKER_CONSUME_STATS): per group, the stats of each topic it
    /// has progress in; `totalDiff` sums every queue's lag.
    pub struct ConsumeStatsList {
        "brokerAddr" => broker_addr: String,
        "consumeStatsList" => consume_stats_list: Vec<BTreeMap<String, Vec<ConsumeStats>>>,
        "totalDiff" => total_diff: i64,
    }
}

json_object! {
    /// `KVTable`: GET_BROKER_RUNTIME_INFO, GET_KVLIST_BY_NAMESPACE, REGISTER_BROKER replies.
    pub struct KvTable {
        "table" => table: BTreeMap<String, String>,
    }
}

json_object! {
    /// `ResetOffsetBodyForC` entry: C++ clients cannot read object map keys.
    pub struct MessageQueueOffsetForC {
        "brokerName" => broker_name: String,
        "offset" => offset: i64,
        "queueId" => queue_id: i32,
        "topic" => topic: String,
    }
}

json_object! {
    /// `ResetOffsetBodyForC`, sent instead of the object-keyed body when the admin caller is C++.
    pub struct ResetOffsetBodyForC {
        "offsetTable" => offset_table: Vec<MessageQueueOffsetForC>,
    }
}

#[cfg(test)]
mod tests {
    use super::ProgressPlanLine;

    fn line(current: i64, target: i64) -> ProgressPlanLine {
        ProgressPlanLine {
            topic: "T".to_owned(),
            queue_id: 0,
            current,
            target,
        }
    }

    #[test]
    fn a_plan_line_says_what_the_move_does() {
        assert_eq!(line(100, 40).effect(), "replays 60");
        assert_eq!(line(40, 100).effect(), "skips 60");
        assert_eq!(line(40, 40).effect(), "stays");
        assert_eq!(line(-1, 40).effect(), "starts here");
    }
}
