//! RocketMQ 5's batch forms of topic and group creation: UPDATE_AND_CREATE_TOPIC_LIST
//! (mqadmin `updateTopicList`) and UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST
//! (`updateSubGroupList`). Every entry is checked before any is applied: a bad one refuses the
//! whole request and changes nothing.

use std::sync::Arc;

use tidemark_protocol::body::{CreateTopicListRequestBody, SubscriptionGroupList, TopicConfig};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::now_ms;
use tracing::info;

use super::admin::apply_attributes;
use super::{error, success};
use crate::metadata::{has_only_name_characters, is_valid_topic_name, AUTO_CREATE_TOPIC_KEY_TOPIC};
use crate::metadata_change::Announce;
use crate::state::BrokerState;

/// The longest group name RocketMQ accepts.
const GROUP_NAME_MAX: usize = 255;

pub(super) async fn create_topics(
    state: &Arc<BrokerState>,
    request: &RemotingCommand,
) -> RemotingCommand {
    let body = match CreateTopicListRequestBody::from_json_bytes(&request.body) {
        Ok(body) => body,
        Err(failure) => {
            return error(
                ResponseCode::InvalidParameter,
                format!("bad topic list body: {failure}"),
            )
        }
    };
    let mut checked = Vec::with_capacity(body.topic_config_list.len());
    for config in body.topic_config_list {
        match check_topic(state, config) {
            Ok(config) => checked.push(config),
            Err(refusal) => return refusal,
        }
    }
    let now = now_ms();
    let mut changed = false;
    for config in &checked {
        changed |= state.metadata.topics.upsert(config.clone(), now);
    }
    if changed {
        if let Err(failure) = state.topic_changes().publish(Announce::BeforeAnswer).await {
            return error(
                ResponseCode::SystemError,
                format!("topics created but not persisted: {failure}"),
            );
        }
    }
    info!(topics = checked.len(), "topic list created or updated");
    success()
}

/// The config to store for one entry, or the refusal RocketMQ gives.
fn check_topic(state: &BrokerState, config: TopicConfig) -> Result<TopicConfig, RemotingCommand> {
    let topic = config.topic_name.clone();
    if !is_valid_topic_name(&topic) {
        return Err(error(
            ResponseCode::InvalidParameter,
            format!(
                "The specified topic[{topic}] contains illegal characters, allowing only \
                 ^[%|a-zA-Z0-9_-]+$"
            ),
        ));
    }
    if topic == AUTO_CREATE_TOPIC_KEY_TOPIC || super::cleanup::is_internal_topic(state, &topic) {
        return Err(error(
            ResponseCode::InvalidParameter,
            format!("The topic[{topic}] is conflict with system topic."),
        ));
    }
    if !(0..8).contains(&config.perm) || config.read_queue_nums <= 0 || config.write_queue_nums <= 0
    {
        return Err(error(
            ResponseCode::InvalidParameter,
            format!("topic[{topic}]: perm must be 0-7 and queue numbers positive"),
        ));
    }
    // RocketMQ's list form carries attribute changes as map keys: `+key` → value, `-key`.
    let changes: Vec<String> = config
        .attributes
        .iter()
        .flatten()
        .map(|(key, value)| {
            if key.starts_with('-') {
                key.clone()
            } else {
                format!("{key}={value}")
            }
        })
        .collect();
    if let Some(unsigned) = changes
        .iter()
        .find(|change| !change.starts_with('+') && !change.starts_with('-'))
    {
        return Err(error(
            ResponseCode::InvalidParameter,
            format!("topic[{topic}]: attribute {unsigned:?} starts with neither + nor -"),
        ));
    }
    let attributes = apply_attributes(
        state
            .metadata
            .topics
            .get(&topic)
            .and_then(|existing| existing.attributes),
        &changes.join(","),
    )
    .map_err(|problem| error(ResponseCode::InvalidParameter, problem))?;
    Ok(TopicConfig {
        attributes,
        ..config
    })
}

pub(super) async fn create_groups(
    state: &Arc<BrokerState>,
    request: &RemotingCommand,
) -> RemotingCommand {
    let body = match SubscriptionGroupList::from_json_bytes(&request.body) {
        Ok(body) => body,
        Err(failure) => {
            return error(
                ResponseCode::InvalidParameter,
                format!("bad subscription group list body: {failure}"),
            )
        }
    };
    for config in &body.group_config_list {
        if let Some(problem) = group_name_problem(&config.group_name) {
            return error(ResponseCode::InvalidParameter, problem);
        }
    }
    let now = now_ms();
    for config in &body.group_config_list {
        state.metadata.groups.upsert(config.clone(), now);
    }
    if let Err(failure) = state.persist_metadata_now().await {
        return error(
            ResponseCode::SystemError,
            format!("groups saved but not persisted: {failure}"),
        );
    }
    info!(
        groups = body.group_config_list.len(),
        "subscription group list created or updated"
    );
    success()
}

/// RocketMQ's group-name rules, with its wording.
fn group_name_problem(group: &str) -> Option<String> {
    if group.trim().is_empty() {
        return Some("the specified group is blank".to_owned());
    }
    if group.len() > GROUP_NAME_MAX {
        return Some(format!(
            "the specified group is longer than group max length {GROUP_NAME_MAX}."
        ));
    }
    if !has_only_name_characters(group) {
        return Some(format!(
            "the specified group[{group}] contains illegal characters, allowing only \
             ^[%|a-zA-Z0-9_-]+$"
        ));
    }
    None
}
