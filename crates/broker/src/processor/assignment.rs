//! Server-side assignment (RocketMQ 5): QUERY_ASSIGNMENT (400), by which a consumer that lets
//! the broker rebalance asks which queues to read and how (PULL or POP), and
//! SET_MESSAGE_REQUEST_MODE (401), by which an operator switches a group's topic between them.

use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::body::{
    perm, MessageModel, MessageQueue, MessageQueueAssignment, MessageRequestMode,
    QueryAssignmentRequestBody, QueryAssignmentResponseBody, SetMessageRequestModeRequestBody,
    TopicRouteData,
};
use tidemark_protocol::headers::GetRouteInfoRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingClient;

use super::{error, success};
use crate::persister::{ConfigFile, Persister};
use crate::state::BrokerState;

/// How long the route lookup may take (the client waits 3 s for the whole answer).
const ROUTE_TIMEOUT: Duration = Duration::from_millis(1_000);

/// Every readable queue of the topic in the cluster, sorted: from the name servers' route, or —
/// when none answers — this broker's own queues.
async fn all_queues(state: &BrokerState, topic: &str) -> Vec<MessageQueue> {
    let client = RemotingClient::new(state.remoting_client_config(), None);
    let mut route = None;
    for namesrv in state.config.name_servers() {
        let request = RemotingCommand::request_with_header(
            RequestCode::GetRouteInfoByTopic,
            &GetRouteInfoRequestHeader {
                topic: topic.to_owned(),
                accept_standard_json_only: None,
            },
        );
        let Ok(response) = client.invoke(&namesrv, request, ROUTE_TIMEOUT).await else {
            continue;
        };
        if response.response_code() != ResponseCode::Success {
            continue;
        }
        if let Ok(found) = TopicRouteData::from_json_bytes(&response.body) {
            route = Some(found);
            break;
        }
    }
    client.shutdown();
    let mut queues: Vec<MessageQueue> = match route {
        Some(route) => route
            .queue_datas
            .iter()
            .filter(|data| perm::is_readable(data.perm))
            .flat_map(|data| {
                (0..data.read_queue_nums).map(move |queue_id| {
                    MessageQueue::new(topic, data.broker_name.clone(), queue_id)
                })
            })
            .collect(),
        None => state
            .metadata
            .topics
            .get(topic)
            .map(|config| {
                (0..config.read_queue_nums)
                    .map(|queue_id| {
                        MessageQueue::new(topic, state.config.broker_name.clone(), queue_id)
                    })
                    .collect()
            })
            .unwrap_or_default(),
    };
    queues.sort();
    queues.dedup();
    queues
}

/// RocketMQ's `AllocateMessageQueueAveragely` (`AVG`) and `…ByCircle` (`AVG_BY_CIRCLE`); `None`
/// for a strategy the broker does not allocate by.
fn allocate(
    strategy: &str,
    queues: &[MessageQueue],
    clients: &[String],
    index: usize,
) -> Option<Vec<MessageQueue>> {
    let (count, members) = (queues.len(), clients.len());
    if members == 0 || index >= members {
        return Some(Vec::new());
    }
    match strategy {
        "AVG" => {
            let remainder = count % members;
            let size = if count <= members {
                1
            } else if remainder > 0 && index < remainder {
                count / members + 1
            } else {
                count / members
            };
            let start = if remainder > 0 && index < remainder {
                index * size
            } else {
                index * size + remainder
            };
            let range = size.min(count.saturating_sub(start));
            Some(
                (0..range)
                    .map(|step| queues[(start + step) % count].clone())
                    .collect(),
            )
        }
        "AVG_BY_CIRCLE" => Some(
            queues
                .iter()
                .skip(index)
                .step_by(members)
                .cloned()
                .collect(),
        ),
        _ => None,
    }
}

/// POP allocation (RocketMQ's `allocate4Pop`): with no sharing limit every consumer pops every
/// broker's queues at once (queue id −1); otherwise each consumer gets its own share plus the
/// shares of the next `share` consumers, so each queue is popped by `share + 1` consumers.
fn allocate_for_pop(
    strategy: &str,
    queues: &[MessageQueue],
    clients: &[String],
    index: usize,
    share: i32,
) -> Option<Vec<MessageQueue>> {
    let members = clients.len();
    if share <= 0 || share as usize >= members.saturating_sub(1) {
        let mut brokers: Vec<MessageQueue> = queues
            .iter()
            .map(|queue| MessageQueue::new(queue.topic.clone(), queue.broker_name.clone(), -1))
            .collect();
        brokers.sort();
        brokers.dedup();
        return Some(brokers);
    }
    if members > queues.len() {
        return Some(
            queues
                .get(index % queues.len().max(1))
                .cloned()
                .into_iter()
                .collect(),
        );
    }
    let mut out = Vec::new();
    for step in 0..=share as usize {
        for queue in allocate(strategy, queues, clients, (index + step) % members)? {
            if !out.contains(&queue) {
                out.push(queue);
            }
        }
    }
    Some(out)
}

pub(super) async fn query_assignment(
    state: &Arc<BrokerState>,
    request: &RemotingCommand,
) -> RemotingCommand {
    let body = match QueryAssignmentRequestBody::from_json_bytes(&request.body) {
        Ok(body) => body,
        Err(failure) => {
            return error(
                ResponseCode::SystemError,
                format!("bad QUERY_ASSIGNMENT body: {failure}"),
            )
        }
    };
    let stored = state
        .metadata
        .request_modes
        .get(&body.topic, &body.consumer_group);
    let (mode, share) = match stored {
        Some(stored) => (stored.mode, stored.pop_share_queue_num),
        None => (MessageRequestMode::Pull, -1),
    };
    let mode = if body.topic.starts_with("%RETRY%") {
        MessageRequestMode::Pull
    } else {
        mode
    };
    let queues = all_queues(state, &body.topic).await;
    let clients = state.clients.consumer_ids(&body.consumer_group);
    let assigned = if body.message_model == MessageModel::Broadcasting {
        Some(queues.clone())
    } else {
        match clients.iter().position(|client| *client == body.client_id) {
            // Not a member yet (no heartbeat seen): nothing until it is.
            None => Some(Vec::new()),
            Some(index) => match mode {
                MessageRequestMode::Pop => {
                    allocate_for_pop(&body.strategy_name, &queues, &clients, index, share)
                }
                MessageRequestMode::Pull => allocate(&body.strategy_name, &queues, &clients, index),
            },
        }
    };
    let answer = QueryAssignmentResponseBody {
        message_queue_assignments: assigned.map(|queues| {
            queues
                .into_iter()
                .map(|message_queue| MessageQueueAssignment {
                    attachments: None,
                    message_queue,
                    mode,
                })
                .collect()
        }),
    };
    let mut response = RemotingCommand::response(ResponseCode::Success, None);
    response.body = answer.to_json_bytes().into();
    response
}

pub(super) async fn set_message_request_mode(
    state: &Arc<BrokerState>,
    request: &RemotingCommand,
) -> RemotingCommand {
    let body = match SetMessageRequestModeRequestBody::from_json_bytes(&request.body) {
        Ok(body) => body,
        Err(failure) => {
            return error(
                ResponseCode::SystemError,
                format!("bad SET_MESSAGE_REQUEST_MODE body: {failure}"),
            )
        }
    };
    if body.topic.starts_with("%RETRY%") {
        return error(
            ResponseCode::NoPermission,
            "retry topics are always read by PULL",
        );
    }
    if state.metadata.topics.get(&body.topic).is_none() {
        return error(
            ResponseCode::TopicNotExist,
            format!("topic[{}] not exist", body.topic),
        );
    }
    if state.metadata.groups.get(&body.consumer_group).is_none() {
        return error(
            ResponseCode::SubscriptionGroupNotExist,
            format!(
                "subscription group [{}] does not exist",
                body.consumer_group
            ),
        );
    }
    state.metadata.request_modes.set(body);
    if let Err(failure) = Persister::flush(
        &state.persisted_tables(),
        &[ConfigFile::MessageRequestModes],
    )
    .await
    {
        return error(
            ResponseCode::SystemError,
            format!("request mode set but not persisted: {failure}"),
        );
    }
    success()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(count: i32) -> Vec<MessageQueue> {
        (0..count)
            .map(|id| MessageQueue::new("T", "b", id))
            .collect()
    }

    fn ids(queues: &[MessageQueue]) -> Vec<i32> {
        queues.iter().map(|queue| queue.queue_id).collect()
    }

    #[test]
    fn averaging_strategies_match_rocketmqs() {
        let clients: Vec<String> = ["a", "b", "c"].iter().map(|c| c.to_string()).collect();
        let all = queues(8);
        let avg: Vec<Vec<i32>> = (0..3)
            .map(|index| ids(&allocate("AVG", &all, &clients, index).expect("known")))
            .collect();
        assert_eq!(avg, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]);
        let circle = ids(&allocate("AVG_BY_CIRCLE", &all, &clients, 1).expect("known"));
        assert_eq!(circle, vec![1, 4, 7]);
        assert_eq!(allocate("CONSISTENT_HASH", &all, &clients, 0), None);
    }

    #[test]
    fn pop_allocation_shares_queues() {
        let clients: Vec<String> = ["a", "b", "c", "d"].iter().map(|c| c.to_string()).collect();
        let all = queues(8);
        let everything = allocate_for_pop("AVG", &all, &clients, 0, -1).expect("known");
        assert_eq!(
            ids(&everything),
            vec![-1],
            "one pop covers every queue of the broker"
        );
        let shared = allocate_for_pop("AVG", &all, &clients, 3, 1).expect("known");
        assert_eq!(
            ids(&shared),
            vec![6, 7, 0, 1],
            "own share plus the next consumer's"
        );
        let crowded = allocate_for_pop("AVG", &queues(2), &clients, 3, 1).expect("known");
        assert_eq!(ids(&crowded), vec![1]);
    }
}
