//! QUERY_CONSUME_QUEUE (mqadmin `queryCq`): a queue's raw index entries, and whether a group's
//! subscription takes each.

use tidemark_protocol::body::{ConsumeQueueData, QueryConsumeQueueResponseBody, SubscriptionData};
use tidemark_protocol::headers::QueryConsumeQueueRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, ResponseCode};

use super::{bad_header, error, success};
use crate::state::BrokerState;

/// At most this many entries per answer, whatever `count` asks for.
const ENTRIES_MAX: i64 = 1024;

/// `count` entries from `index` on (RocketMQ steps its loop by entry bytes while comparing with
/// `count`, so it returns a twentieth of what was asked; this returns what was asked).
pub(super) fn query(state: &BrokerState, request: &RemotingCommand) -> RemotingCommand {
    let header = match request.decode_header::<QueryConsumeQueueRequestHeader>() {
        Ok(header) => header,
        Err(failure) => return bad_header(failure),
    };
    let (topic, queue_id) = (&header.topic, header.queue_id);
    let exists = state.metadata.topics.get(topic).is_some_and(|config| {
        queue_id >= 0 && queue_id < config.read_queue_nums.max(config.write_queue_nums)
    });
    if !exists {
        return error(
            ResponseCode::SystemError,
            format!("{queue_id}@{topic} is not exist!"),
        );
    }
    let mut body = QueryConsumeQueueResponseBody {
        max_queue_index: state.log().max_offset(topic, queue_id),
        min_queue_index: state.log().min_offset(topic, queue_id),
        ..QueryConsumeQueueResponseBody::default()
    };
    let subscription = header.consumer_group.as_deref().and_then(|group| {
        let found = state
            .clients
            .group_subscription(group, topic)
            .and_then(|online| online.subscription);
        if found.is_none() {
            body.filter_data = Some(format!("{group}@{topic} is not online!"));
        }
        found
    });
    body.subscription_data = subscription.clone();
    let count = i64::from(header.count.max(0)).min(ENTRIES_MAX);
    let first = header.index.max(body.min_queue_index);
    for offset in first..first.saturating_add(count).min(body.max_queue_index) {
        let entry = match state.log().queue_entry(topic, queue_id, offset) {
            Ok(Some(entry)) => entry,
            Ok(None) => break,
            Err(failure) => {
                return error(
                    ResponseCode::SystemError,
                    format!("reading {queue_id}@{topic} at {offset} failed: {failure}"),
                )
            }
        };
        body.queue_data.push(ConsumeQueueData {
            physic_offset: entry.commit_log_offset,
            physic_size: entry.size,
            tags_code: entry.tags_code,
            eval: subscription
                .as_ref()
                .is_none_or(|subscription| takes(subscription, entry.tags_code)),
            ..ConsumeQueueData::default()
        });
    }
    let mut response = success().with_body(body.to_json_bytes());
    if body.queue_data.is_empty() {
        response.remark = Some(format!(
            "Index {} of {queue_id}@{topic} is not exist!",
            header.index
        ));
    }
    response
}

/// Whether a subscription takes an entry by its tag hash alone (SQL92 needs the message: taken
/// here, decided when pulled).
fn takes(subscription: &SubscriptionData, tags_code: i64) -> bool {
    if !subscription.expression_type.eq_ignore_ascii_case("TAG") {
        return true;
    }
    let all = subscription.sub_string.trim().is_empty() || subscription.sub_string.trim() == "*";
    all || subscription
        .code_set
        .iter()
        .any(|code| i64::from(*code) == tags_code)
}
