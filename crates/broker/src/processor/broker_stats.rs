//! VIEW_BROKER_STATS_DATA and QUERY_TOPIC_CONSUME_BY_WHO: what mqadmin `statsAll` and
//! `exportMetrics` read per topic and group.

use tidemark_protocol::body::{BrokerStatsData, BrokerStatsItem, GroupList, TopicList};
use tidemark_protocol::headers::{
    QueryTopicConsumeByWhoRequestHeader, ViewBrokerStatsDataRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::now_ms;

use super::{bad_header, error, success};
use crate::state::BrokerState;
use crate::stats_history::WindowStats;

pub(super) fn view_stats(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<ViewBrokerStatsDataRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let history = &state.stats.history;
    // An item RocketMQ has from its first message may not be sampled yet: a sample now gives
    // it its first one (items sampled already keep their 10 s spacing).
    let stats = history
        .item(&header.stats_name, &header.stats_key)
        .or_else(|| {
            history.sample(
                now_ms(),
                &state.config.broker_cluster_name,
                &state.stats.traffic.snapshot(),
            );
            history.item(&header.stats_name, &header.stats_key)
        });
    let Some(stats) = stats else {
        return error(
            ResponseCode::SystemError,
            format!(
                "The stats <{}> <{}> not exist",
                header.stats_name, header.stats_key
            ),
        );
    };
    let item = |window: WindowStats| BrokerStatsItem {
        sum: window.sum,
        tps: window.tps,
        avgpt: window.avgpt,
    };
    success().with_body(
        BrokerStatsData {
            stats_minute: item(stats.minute),
            stats_hour: item(stats.hour),
            stats_day: item(stats.day),
        }
        .to_json_bytes(),
    )
}

/// The groups consuming a topic: online subscribers and groups with progress in it.
pub(super) fn consumed_by(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<QueryTopicConsumeByWhoRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let mut groups = state.clients.groups_subscribing(&header.topic);
    groups.extend(state.progress.offsets.groups_of_topic(&header.topic));
    groups.sort();
    groups.dedup();
    success().with_body(GroupList { group_list: groups }.to_json_bytes())
}

/// GET_SYSTEM_TOPIC_LIST_FROM_BROKER: the broker's own topics (mqadmin `exportMetrics` leaves
/// them out of its figures).
pub(super) fn system_topics(state: &BrokerState) -> RemotingCommand {
    success().with_body(
        TopicList {
            topic_list: state.metadata.topics.system_topics(),
            broker_addr: None,
        }
        .to_json_bytes(),
    )
}
