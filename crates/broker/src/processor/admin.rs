//! Queue positions and admin requests.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tidemark_protocol::body::{
    ConsumerProgress, EpochEntry, EpochEntryCache, KvTable, MessageQueue, SubscriptionGroupConfig,
    TopicConfig, TopicFilterType, TopicOffset, TopicStatsTable,
};
use tidemark_protocol::headers::{
    CreateTopicRequestHeader, DeleteSubscriptionGroupRequestHeader, GetConsumeStatsRequestHeader,
    GetConsumerConnectionListRequestHeader, GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader, GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader,
    GetProducerConnectionListRequestHeader, GetTopicStatsInfoRequestHeader, OffsetResponseHeader,
    SearchOffsetRequestHeader, ViewMessageRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::message::topic_of;
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::{now_ms, Channel};

use super::{bad_header, error, success};
use crate::history::{Actor, ChangeKind};
use crate::metadata::is_valid_topic_name;
use crate::metadata_change::Announce;
use crate::persister::{ConfigFile, Persister};
use crate::state::BrokerState;
use crate::stats::human_bytes;

pub(super) fn max_offset(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    match request.decode_header::<GetMaxOffsetRequestHeader>() {
        Ok(header) => success().with_header(&OffsetResponseHeader {
            offset: state.log().max_offset(&header.topic, header.queue_id),
        }),
        Err(failure) => bad_header(failure),
    }
}

pub(super) fn min_offset(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    match request.decode_header::<GetMinOffsetRequestHeader>() {
        Ok(header) => success().with_header(&OffsetResponseHeader {
            offset: state.log().min_offset(&header.topic, header.queue_id),
        }),
        Err(failure) => bad_header(failure),
    }
}

pub(super) fn search_offset(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<SearchOffsetRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    match state
        .log()
        .offset_by_timestamp(&header.topic, header.queue_id, header.timestamp)
    {
        Ok(offset) => success().with_header(&OffsetResponseHeader { offset }),
        Err(failure) => error(
            ResponseCode::SystemError,
            format!("search failed: {failure}"),
        ),
    }
}

pub(super) fn earliest_store_time(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<GetEarliestMsgStoretimeRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    match state
        .log()
        .earliest_store_timestamp(&header.topic, header.queue_id)
    {
        Ok(timestamp) => success().with_header(&GetEarliestMsgStoretimeResponseHeader {
            timestamp: timestamp.unwrap_or(-1),
        }),
        Err(failure) => error(ResponseCode::SystemError, format!("read failed: {failure}")),
    }
}

pub(super) async fn create_topic(
    state: &Arc<BrokerState>,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<CreateTopicRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    if !is_valid_topic_name(&header.topic) {
        return error(
            ResponseCode::SystemError,
            format!("the specified topic[{}] is not valid", header.topic),
        );
    }
    if header.topic == header.default_topic {
        return error(
            ResponseCode::SystemError,
            format!(
                "the topic[{}] is conflict with system reserved words.",
                header.topic
            ),
        );
    }
    if !(0..8).contains(&header.perm) || header.read_queue_nums <= 0 || header.write_queue_nums <= 0
    {
        return error(
            ResponseCode::SystemError,
            "perm must be 0-7 and queue numbers positive",
        );
    }
    let attributes = match apply_attributes(
        state
            .metadata
            .topics
            .get(&header.topic)
            .and_then(|existing| existing.attributes),
        header.attributes.as_deref().unwrap_or(""),
    ) {
        Ok(attributes) => attributes,
        Err(problem) => return error(ResponseCode::InvalidParameter, problem),
    };
    let config = TopicConfig {
        topic_name: header.topic.clone(),
        read_queue_nums: header.read_queue_nums,
        write_queue_nums: header.write_queue_nums,
        perm: header.perm,
        topic_filter_type: if header.topic_filter_type == "MULTI_TAG" {
            TopicFilterType::MultiTag
        } else {
            TopicFilterType::SingleTag
        },
        topic_sys_flag: header.topic_sys_flag.unwrap_or(0),
        order: header.order,
        attributes,
    };
    if state.metadata.topics.upsert(config, now_ms()) {
        if let Err(failure) = state.topic_changes().publish(Announce::BeforeAnswer).await {
            return error(
                ResponseCode::SystemError,
                format!("topic created but not persisted: {failure}"),
            );
        }
    }
    success()
}

/// RocketMQ 5's topic attributes as UPDATE_AND_CREATE_TOPIC carries them (`+key=value` sets,
/// `-key` removes, comma-separated) applied to what the topic had. `message.type` must be one of
/// RocketMQ's message types.
pub(super) fn apply_attributes(
    existing: Option<std::collections::BTreeMap<String, String>>,
    changes: &str,
) -> Result<Option<std::collections::BTreeMap<String, String>>, String> {
    let mut attributes = existing.unwrap_or_default();
    for change in changes.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        if let Some(set) = change.strip_prefix('+') {
            let (key, value) = set
                .split_once('=')
                .ok_or_else(|| format!("attribute {change:?} is not +key=value"))?;
            if key == "message.type"
                && !["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"].contains(&value)
            {
                return Err(format!(
                    "message.type {value:?} is not NORMAL, FIFO, DELAY, TRANSACTION or MIXED"
                ));
            }
            attributes.insert(key.to_owned(), value.to_owned());
        } else if let Some(key) = change.strip_prefix('-') {
            attributes.remove(key);
        } else {
            return Err(format!("attribute {change:?} starts with neither + nor -"));
        }
    }
    Ok((!attributes.is_empty()).then_some(attributes))
}

pub(super) async fn delete_topic(
    state: &Arc<BrokerState>,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let Some(topic) = request.ext_fields.get("topic").map(str::to_owned) else {
        return error(
            ResponseCode::SystemError,
            "missing required header field `topic`",
        );
    };
    state.metadata.topics.remove(&topic, now_ms());
    state.stats.traffic.drop_topic(&topic);
    state.stats.history.drop_topic(&topic);
    // Its messages go with it, as in RocketMQ (a topic made again starts at offset 0).
    if !super::cleanup::is_internal_topic(state, &topic) {
        if let Err(failure) = super::cleanup::destroy_topic_queues(state, &topic).await {
            return error(
                ResponseCode::SystemError,
                format!("topic deleted but its queues not removed: {failure}"),
            );
        }
    }
    let (removed, journaled) = state.progress.offsets.drop_topic(&topic);
    let actor = Actor::of_request(state.security.acl.as_deref(), channel, request);
    let recorded = state.progress.history.record_removed(
        now_ms(),
        ChangeKind::TopicDeleted,
        request.code,
        &actor,
        &removed,
    );
    if let Err(failure) = state.progress.durable(journaled, recorded).await {
        return error(
            ResponseCode::SystemError,
            format!("topic deleted but its consumer offsets' removal not durable: {failure}"),
        );
    }
    let files = [ConfigFile::Topics, ConfigFile::ConsumerOffsets];
    if let Err(failure) = state
        .topic_changes()
        .publish_files(&files, Announce::BeforeAnswer)
        .await
    {
        return error(
            ResponseCode::SystemError,
            format!("topic deleted but not persisted: {failure}"),
        );
    }
    success()
}

/// GET_TOPIC_CONFIG (5.x): one topic's config, as RocketMQ 5's `TopicConfigAndQueueMapping`
/// without a static-topic mapping (Tidemark has none).
pub(super) fn topic_config(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let Some(topic) = request.ext_fields.get("topic") else {
        return error(
            ResponseCode::SystemError,
            "missing required header field `topic`",
        );
    };
    match state.metadata.topics.get(topic) {
        Some(config) => success().with_body(config.to_json_bytes()),
        None => error(
            ResponseCode::TopicNotExist,
            format!("No topic in this broker. topic: {topic}"),
        ),
    }
}

pub(super) fn all_topic_config(state: &BrokerState) -> RemotingCommand {
    success().with_body(state.metadata.topics.snapshot().1.to_json_bytes())
}

pub(super) fn all_consumer_offsets(state: &BrokerState) -> RemotingCommand {
    let (_, offsets) = state.progress.offsets.snapshot();
    if offsets.is_empty() {
        return error(
            ResponseCode::SystemError,
            "No consumer offset in this broker",
        );
    }
    success().with_body(offsets.to_wrapper().to_json_bytes())
}

/// TIDEMARK_GET_ALL_POP_STATE: what slaves copy (see `slave_sync`).
pub(super) fn all_pop_state(state: &BrokerState) -> RemotingCommand {
    success().with_body(state.pop.replica())
}

pub(super) fn all_delay_offsets(state: &BrokerState) -> RemotingCommand {
    success().with_body(state.progress.delay_offsets.snapshot().1.to_json_bytes())
}

pub(super) fn all_subscription_groups(state: &BrokerState) -> RemotingCommand {
    success().with_body(state.metadata.groups.snapshot().1.to_json_bytes())
}

pub(super) async fn create_subscription_group(
    state: &Arc<BrokerState>,
    request: &RemotingCommand,
) -> RemotingCommand {
    match SubscriptionGroupConfig::from_json_bytes(&request.body) {
        Ok(config) if !config.group_name.is_empty() => {
            state.metadata.groups.upsert(config, now_ms());
            match state.persist_metadata_now().await {
                Ok(()) => success(),
                Err(failure) => error(
                    ResponseCode::SystemError,
                    format!("group saved but not persisted: {failure}"),
                ),
            }
        }
        Ok(_) => error(
            ResponseCode::SystemError,
            "subscription group without a name",
        ),
        Err(failure) => error(
            ResponseCode::SystemError,
            format!("bad subscription group body: {failure}"),
        ),
    }
}

pub(super) async fn delete_subscription_group(
    state: &Arc<BrokerState>,
    channel: &Channel,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<DeleteSubscriptionGroupRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    state.metadata.groups.remove(&header.group_name, now_ms());
    if header.remove_offset.unwrap_or(false) || header.clean_offset.unwrap_or(false) {
        let (removed, journaled) = state.progress.offsets.drop_group(&header.group_name);
        let actor = Actor::of_request(state.security.acl.as_deref(), channel, request);
        let recorded = state.progress.history.record_removed(
            now_ms(),
            ChangeKind::GroupDeleted,
            request.code,
            &actor,
            &removed,
        );
        if let Err(failure) = state.progress.durable(journaled, recorded).await {
            return error(
                ResponseCode::SystemError,
                format!("group deleted but its consumer offsets' removal not durable: {failure}"),
            );
        }
    }
    match Persister::flush(
        &state.persisted_tables(),
        &[ConfigFile::SubscriptionGroups, ConfigFile::ConsumerOffsets],
    )
    .await
    {
        Ok(()) => success(),
        Err(failure) => error(
            ResponseCode::SystemError,
            format!("group deleted but not persisted: {failure}"),
        ),
    }
}

/// TIDEMARK_GET_CONSUMER_PROGRESS: GET_CONSUME_STATS' queues with what only Tidemark knows —
/// the age of the oldest unconsumed message, the acknowledged ranges above the offset, and the
/// offset one stuck message holds the group at (see `QueueProgress::stuck_since`).
pub(super) fn consumer_progress(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<GetConsumeStatsRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let queues = crate::progress::group_progress(
        state,
        &header.consumer_group,
        header.topic.as_deref().filter(|topic| !topic.is_empty()),
        now_ms(),
    );
    success().with_body(ConsumerProgress { queues }.to_json_bytes())
}

pub(super) fn consumer_connections(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<GetConsumerConnectionListRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    match state.clients.consumer_connection(&header.consumer_group) {
        Some(connection) => success().with_body(connection.to_json_bytes()),
        None => error(
            ResponseCode::ConsumerNotOnline,
            format!("the consumer group[{}] not online", header.consumer_group),
        ),
    }
}

pub(super) fn producer_connections(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<GetProducerConnectionListRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    match state.clients.producer_connection(&header.producer_group) {
        Some(connection) => success().with_body(connection.to_json_bytes()),
        None => error(ResponseCode::SystemError, "the producer group not exist"),
    }
}

/// DELETE_EXPIRED_COMMITLOG (mqadmin `deleteExpiredCommitLog`): expired commit-log segments
/// are deleted now rather than at `deleteWhen`.
pub(super) async fn delete_expired_commit_log(state: &BrokerState) -> RemotingCommand {
    match state.log().delete_expired_now().await {
        Ok(report) => {
            tracing::info!(?report, "expired commit-log segments deleted on request");
            success()
        }
        Err(failure) => error(
            ResponseCode::SystemError,
            format!("deleting failed: {failure}"),
        ),
    }
}

/// GET_ALL_PRODUCER_INFO (mqadmin `producer`).
pub(super) fn all_producers(state: &BrokerState) -> RemotingCommand {
    success().with_body(state.clients.producer_table().to_json_bytes())
}

pub(super) fn topic_stats(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<GetTopicStatsInfoRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let queue_ids: Vec<i32> = match state.metadata.topics.get(&header.topic) {
        Some(config) => (0..config.write_queue_nums).collect(),
        // A slave learns topics with its slave sync, which pauses while the master is away; a
        // topic created shortly before the master went has replicated queues but no config
        // here yet. Those queues are what it has.
        None if state.role.is_slave() => state
            .log()
            .queues()
            .into_iter()
            .filter(|(topic, _)| *topic == header.topic)
            .map(|(_, queue_id)| queue_id)
            .collect(),
        None => Vec::new(),
    };
    if queue_ids.is_empty() && state.metadata.topics.get(&header.topic).is_none() {
        return error(
            ResponseCode::TopicNotExist,
            format!("topic[{}] not exist", header.topic),
        );
    }
    let mut offset_table = BTreeMap::new();
    for queue_id in queue_ids {
        let max_offset = state.log().max_offset(&header.topic, queue_id);
        let last_update_timestamp = if max_offset > 0 {
            state
                .log()
                .store_timestamp_at(&header.topic, queue_id, max_offset - 1)
                .ok()
                .flatten()
                .unwrap_or(0)
        } else {
            0
        };
        offset_table.insert(
            MessageQueue::new(
                header.topic.clone(),
                state.config.broker_name.clone(),
                queue_id,
            ),
            TopicOffset {
                min_offset: state.log().min_offset(&header.topic, queue_id),
                max_offset,
                last_update_timestamp,
            },
        );
    }
    success().with_body(TopicStatsTable { offset_table }.to_json_bytes())
}

pub(super) fn view_message(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<ViewMessageRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    match u64::try_from(header.offset)
        .ok()
        .map(|offset| state.log().read_record(offset))
    {
        // A named topic is what the ACL checked: a record of another topic is not served.
        Some(Ok(Some(record)))
            if header
                .topic
                .as_deref()
                .is_none_or(|topic| topic.is_empty() || topic_of(&record) == Some(topic)) =>
        {
            success().with_body(record)
        }
        Some(Err(failure)) => error(ResponseCode::SystemError, format!("read failed: {failure}")),
        _ => error(
            ResponseCode::SystemError,
            format!("can not find message by the offset, {}", header.offset),
        ),
    }
}

/// GET_BROKER_EPOCH_CACHE: which master epoch wrote which part of this broker's commit log
/// (empty until the broker has been master in controller mode); the last epoch ends at the
/// log's end, as RocketMQ answers.
pub(super) fn epoch_cache(state: &BrokerState) -> RemotingCommand {
    let (_, written, _) = state.log().positions();
    let max_offset = i64::try_from(written).unwrap_or(i64::MAX);
    let epoch_list = state
        .log()
        .epochs()
        .spans(max_offset)
        .into_iter()
        .map(|span| EpochEntry {
            end_offset: span.end_offset,
            epoch: span.epoch,
            start_offset: span.start_offset,
        })
        .collect();
    success().with_body(
        EpochEntryCache {
            broker_id: state.role.now().broker_id,
            broker_name: state.config.broker_name.clone(),
            cluster_name: state.config.broker_cluster_name.clone(),
            epoch_list,
            max_offset,
        }
        .to_json_bytes(),
    )
}

pub(super) fn runtime_info(state: &BrokerState) -> RemotingCommand {
    let (min, written, _) = state.log().positions();
    let (put_total, got_total) = (
        state.stats.messages_put_total.load(Ordering::Relaxed),
        state.stats.messages_got_total.load(Ordering::Relaxed),
    );
    let (put_tps, get_tps, (yesterday, today)) = state.stats.with_throughput(|throughput| {
        (
            throughput.put_tps(),
            throughput.get_tps(),
            throughput.mornings(),
        )
    });
    let earliest = state
        .log()
        .read_record(min)
        .ok()
        .flatten()
        .and_then(|record| tidemark_store::store_timestamp_of(&record))
        .unwrap_or(-1);
    // Free as RocketMQ counts it (blocks reserved for root included), matching the ratio.
    let capacity = match fs4::statvfs(&state.config.store_path_root_dir) {
        Ok(stats) => format!(
            "Total : {}, Free : {}.",
            human_bytes(stats.total_space()),
            human_bytes(stats.free_space())
        ),
        Err(failure) => format!("unknown: {failure}"),
    };
    let disk_ratio = tidemark_store::disk_usage_ratio(&state.config.store_path_root_dir)
        .map_or_else(|_| "-1".to_owned(), |ratio| ratio.to_string());
    let mut table = BTreeMap::new();
    table.insert(
        "brokerVersion".to_owned(),
        tidemark_protocol::code::version::CURRENT.to_string(),
    );
    table.insert(
        "brokerVersionDesc".to_owned(),
        format!("Tidemark {}", env!("CARGO_PKG_VERSION")),
    );
    // RocketMQ's "TodayNow" is the running total, as its "Morning" figures are: mqadmin
    // `clusterList -m` subtracts them.
    for (key, value) in [
        ("msgPutTotalTodayNow", put_total),
        ("msgGetTotalTodayNow", got_total),
        ("msgPutTotalYesterdayMorning", yesterday.0),
        ("msgGetTotalYesterdayMorning", yesterday.1),
        ("msgPutTotalTodayMorning", today.0),
        ("msgGetTotalTodayMorning", today.1),
    ] {
        table.insert(key.to_owned(), value.to_string());
    }
    // Requests are handled on the connection's task as they arrive: there is no send, pull or
    // query thread pool with a queue in front of it, so nothing waits in one; and an append
    // holds the commit log's lock only while copying bytes (flushes happen outside it).
    for key in [
        "sendThreadPoolQueueSize",
        "sendThreadPoolQueueHeadWaitTimeMills",
        "pullThreadPoolQueueSize",
        "pullThreadPoolQueueHeadWaitTimeMills",
        "queryThreadPoolQueueSize",
        "queryThreadPoolQueueHeadWaitTimeMills",
        "pageCacheLockTimeMills",
    ] {
        table.insert(key.to_owned(), "0".to_owned());
    }
    table.insert("putTps".to_owned(), put_tps);
    // 4.x spells it Transfered; 5.x tools read Transferred.
    table.insert("getTransferredTps".to_owned(), get_tps.clone());
    table.insert("getTransferedTps".to_owned(), get_tps);
    table.insert("earliestMessageTimeStamp".to_owned(), earliest.to_string());
    table.insert("commitLogMinOffset".to_owned(), min.to_string());
    table.insert("commitLogMaxOffset".to_owned(), written.to_string());
    table.insert("commitLogDirCapacity".to_owned(), capacity);
    // The commit log and the consume queues share the store root, so one figure serves both.
    table.insert("commitLogDiskRatio".to_owned(), disk_ratio.clone());
    table.insert("consumeQueueDiskRatio".to_owned(), disk_ratio);
    // The live values: retention follows them, so the figures shown must too.
    let config = state.live.get();
    for (key, percent) in [
        ("diskMaxUsedSpaceRatio", config.disk_max_used_space_ratio),
        (
            "diskSpaceCleanForciblyRatio",
            config.disk_space_clean_forcibly_ratio,
        ),
        (
            "diskSpaceWarningLevelRatio",
            config.disk_space_warning_level_ratio,
        ),
    ] {
        table.insert(key.to_owned(), (f64::from(percent) / 100.0).to_string());
    }
    table.insert(
        "diskWritesRefused".to_owned(),
        state.log().disk_usage().writes_refused.to_string(),
    );
    // Queue entries are written with every append; only the key index follows behind.
    table.insert(
        "dispatchBehindBytes".to_owned(),
        state.log().index_behind_bytes().to_string(),
    );
    table.insert(
        "bootTimestamp".to_owned(),
        state.boot_timestamp_ms.to_string(),
    );
    table.insert(
        "brokerRole".to_owned(),
        state.role.now().java_name().to_owned(),
    );
    // Tidemark's own keys (controller mode): the epoch this log is in, and on a master the
    // replicas the controllers hold in sync with it, by controller-given id.
    if let Some(epoch) = state.log().epochs().last_epoch() {
        table.insert("masterEpoch".to_owned(), epoch.to_string());
    }
    let in_sync = state.ha.sync_state_set();
    if !in_sync.is_empty() {
        let ids: Vec<String> = in_sync.iter().map(i64::to_string).collect();
        table.insert("syncStateSet".to_owned(), ids.join(","));
    }
    success().with_body(KvTable { table }.to_json_bytes())
}

#[cfg(test)]
mod tests {
    use super::apply_attributes;

    #[test]
    fn topic_attributes_are_set_removed_and_checked_as_rocketmq_5_sends_them() {
        let fifo = apply_attributes(None, "+message.type=FIFO").expect("accepted");
        assert_eq!(
            fifo.as_ref()
                .and_then(|a| a.get("message.type"))
                .map(String::as_str),
            Some("FIFO")
        );
        let more = apply_attributes(fifo, "+queue.type=BatchCQ, -message.type").expect("accepted");
        assert_eq!(more.as_ref().map(|a| a.len()), Some(1));
        assert_eq!(apply_attributes(None, ""), Ok(None));
        assert!(apply_attributes(None, "+message.type=WEIRD").is_err());
        assert!(apply_attributes(None, "message.type=FIFO").is_err());
        assert!(apply_attributes(None, "+message.type").is_err());
    }
}
