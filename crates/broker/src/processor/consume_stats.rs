//! Consumer lag as mqadmin shows it: GET_CONSUME_STATS for one group (`consumerProgress`) and
//! GET_BROKER_CONSUME_STATS for every group of the broker (`brokerConsumeStats`).

use std::collections::BTreeMap;

use tidemark_protocol::body::{ConsumeStats, ConsumeStatsList, MessageQueue, OffsetWrapper};
use tidemark_protocol::headers::{GetConsumeStatsInBrokerHeader, GetConsumeStatsRequestHeader};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::RemotingCommand;

use super::{bad_header, success};
use crate::state::BrokerState;

pub(super) fn consume_stats(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<GetConsumeStatsRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let group = header.consumer_group;
    let topics = match header.topic.filter(|topic| !topic.is_empty()) {
        Some(topic) => vec![topic],
        None => state.progress.offsets.topics_of_group(&group),
    };
    let mut offset_table = BTreeMap::new();
    for topic in topics {
        offset_table.extend(topic_stats(state, &group, &topic, false));
    }
    success().with_body(
        ConsumeStats {
            consume_tps: 0.0,
            offset_table,
        }
        .to_json_bytes(),
    )
}

/// Every subscription group's stats per topic it has progress in, and the sum of all lag, as
/// RocketMQ's `fetchAllConsumeStatsInBroker` (`isOrder`: only orderly topics).
pub(super) fn broker_consume_stats(
    state: &BrokerState,
    request: &RemotingCommand,
) -> RemotingCommand {
    let header = match request.decode_header::<GetConsumeStatsInBrokerHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let mut consume_stats_list = Vec::new();
    let mut total_diff = 0;
    for group in state
        .metadata
        .groups
        .snapshot()
        .1
        .subscription_group_table
        .into_keys()
    {
        let mut per_topic = Vec::new();
        for topic in state.progress.offsets.topics_of_group(&group) {
            let offset_table = topic_stats(state, &group, &topic, header.is_order);
            if offset_table.is_empty() {
                continue;
            }
            total_diff += offset_table
                .values()
                .map(|offsets| offsets.broker_offset - offsets.consumer_offset)
                .sum::<i64>();
            per_topic.push(ConsumeStats {
                consume_tps: 0.0,
                offset_table,
            });
        }
        consume_stats_list.push(BTreeMap::from([(group, per_topic)]));
    }
    success().with_body(
        ConsumeStatsList {
            broker_addr: state.config.broker_addr(),
            consume_stats_list,
            total_diff,
        }
        .to_json_bytes(),
    )
}

/// One group's offsets in one topic's queues; empty when the topic is gone, is not orderly
/// while `only_order` asks for that, or the group is online without subscribing to it.
fn topic_stats(
    state: &BrokerState,
    group: &str,
    topic: &str,
    only_order: bool,
) -> BTreeMap<MessageQueue, OffsetWrapper> {
    let mut offset_table = BTreeMap::new();
    let Some(config) = state.metadata.topics.get(topic) else {
        return offset_table;
    };
    if only_order && !config.order {
        return offset_table;
    }
    // An online group that subscribes to other topics but not this one is skipped, as
    // Java does; one that subscribes to nothing (assign-mode lite pull) is not.
    if state
        .clients
        .group_subscription(group, topic)
        .is_some_and(|online| online.subscribes_anything && online.subscription.is_none())
    {
        return offset_table;
    }
    for queue_id in 0..config.read_queue_nums {
        let broker_offset = state.log().max_offset(topic, queue_id).max(0);
        let consumer_offset = state
            .progress
            .offsets
            .query(topic, group, queue_id)
            .unwrap_or(0)
            .max(0);
        let last_timestamp = if consumer_offset > 0 {
            state
                .log()
                .store_timestamp_at(topic, queue_id, consumer_offset - 1)
                .ok()
                .flatten()
                .unwrap_or(0)
        } else {
            0
        };
        offset_table.insert(
            MessageQueue::new(topic.to_owned(), state.config.broker_name.clone(), queue_id),
            OffsetWrapper {
                broker_offset,
                consumer_offset,
                last_timestamp,
                pull_offset: None,
            },
        );
    }
    offset_table
}
