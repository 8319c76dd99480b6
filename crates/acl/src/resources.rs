//! What each request needs: the topics and groups it touches, with the permission, and whether
//! only admin accounts may send it.

use tidemark_protocol::body::HeartbeatData;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode};

use crate::perm::Perm;

const RETRY_PREFIX: &str = "%RETRY%";

/// A topic or a group. A `%RETRY%group` topic is its group, as in RocketMQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    Topic(String),
    Group(String),
}

impl Resource {
    pub fn topic(name: &str) -> Resource {
        match name.strip_prefix(RETRY_PREFIX) {
            Some(group) => Resource::Group(group.to_owned()),
            None => Resource::Topic(name.to_owned()),
        }
    }

    /// How RocketMQ names it in a refusal (`topic:orders`, `group:billing`).
    pub fn describe(&self) -> String {
        match self {
            Resource::Topic(name) => format!("topic:{name}"),
            Resource::Group(name) => format!("group:{name}"),
        }
    }
}

/// Request codes only admin accounts may send: RocketMQ's five (topic and group creation and
/// deletion, broker config updates) and the others that change what a broker, name server or
/// controller serves: progress resets, write permission, cleanup, routes, ACL itself, the POP
/// state slaves copy (every group's receipts), and the controllers' state (brokers and
/// controllers sign as admin accounts, as for REGISTER_BROKER).
pub fn admin_only(code: RequestCode) -> bool {
    use RequestCode::*;
    matches!(
        code,
        UpdateAndCreateTopic
            | UpdateAndCreateTopicList
            | UpdateBrokerConfig
            | DeleteTopicInBroker
            | UpdateAndCreateSubscriptionGroup
            | UpdateAndCreateSubscriptionGroupList
            | DeleteSubscriptionGroup
            | InvokeBrokerToResetOffset
            | ResetConsumerClientOffset
            | CloneGroupOffset
            | WipeWritePermOfBroker
            | AddWritePermOfBroker
            | CleanExpiredConsumeQueue
            | CleanUnusedTopic
            | DeleteExpiredCommitLog
            | PutKvConfig
            | DeleteKvConfig
            | DeleteTopicInNamesrv
            | UpdateNamesrvConfig
            | RegisterBroker
            | UnregisterBroker
            | UpdateAndCreateAclConfig
            | DeleteAclConfig
            | UpdateGlobalWhiteAddrsConfig
            // A master's whole POP state (every group's in-flight receipts), for its slaves.
            | GetAllPopState
            // Controllers: what brokers and controllers change (and a broker's role).
            | BrokerHeartbeat
            | ControllerAlterSyncStateSet
            | ControllerElectMaster
            | ControllerRegisterBroker
            | ControllerApplyBrokerId
            | CleanBrokerData
            | UpdateControllerConfig
            | NotifyBrokerRoleChanged
            | RaftAppendEntries
            | RaftVote
            | RaftInstallSnapshot
    )
}

/// The resources `request` touches and the permission each needs. A header or body that cannot
/// be read yields what could be read; the handler refuses the request itself afterwards.
pub fn needed(request: &RemotingCommand) -> Vec<(Resource, Perm)> {
    use RequestCode::*;
    let field = |name: &str| request.ext_fields.get(name).filter(|v| !v.is_empty());
    let mut needs = Vec::new();
    let topic = |name: Option<&str>, perm: Perm, needs: &mut Vec<(Resource, Perm)>| {
        if let Some(name) = name {
            needs.push((Resource::topic(name), perm));
        }
    };
    let group = |name: Option<&str>, needs: &mut Vec<(Resource, Perm)>| {
        if let Some(name) = name {
            needs.push((Resource::Group(name.to_owned()), Perm::SUB));
        }
    };
    match request.request_code() {
        SendMessage | SendBatchMessage | SendReplyMessage => send_needs(field("topic"), &mut needs),
        SendMessageV2 | SendReplyMessageV2 => send_needs(field("b"), &mut needs),
        ConsumerSendMsgBack => group(field("group"), &mut needs),
        PullMessage
        | LitePullMessage
        | PopMessage
        | PeekMessage
        | Notification
        | QueryConsumerOffset
        | UpdateConsumerOffset
        | AckMessage
        | ChangeMessageInvisibleTime => {
            topic(field("topic"), Perm::SUB, &mut needs);
            group(field("consumerGroup"), &mut needs);
        }
        QueryMessage | ViewMessageById if field("topic").is_some() => {
            topic(field("topic"), Perm::SUB, &mut needs);
        }
        HeartBeat => {
            if let Ok(heartbeat) = HeartbeatData::from_json_bytes(&request.body) {
                for consumer in &heartbeat.consumer_data_set {
                    group(Some(&consumer.group_name), &mut needs);
                    for subscription in &consumer.subscription_data_set {
                        topic(Some(&subscription.topic), Perm::SUB, &mut needs);
                    }
                }
            }
        }
        UnregisterClient | GetConsumerListByGroup | LockBatchMq | UnlockBatchMq => {
            group(field("consumerGroup"), &mut needs);
        }
        _ => {}
    }
    needs
}

fn send_needs(topic: Option<&str>, needs: &mut Vec<(Resource, Perm)>) {
    let Some(topic) = topic else { return };
    match Resource::topic(topic) {
        // A consumer sending a failed message back to its retry topic needs its group, not a
        // topic permission.
        group @ Resource::Group(_) => needs.push((group, Perm::SUB)),
        resource => needs.push((resource, Perm::PUB)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_need_pub_on_the_topic_and_retry_sends_need_the_group() {
        let mut send = RemotingCommand::request(RequestCode::SendMessageV2);
        send.ext_fields.insert("a", "producers");
        send.ext_fields.insert("b", "orders");
        assert_eq!(
            needed(&send),
            vec![(Resource::Topic("orders".into()), Perm::PUB)]
        );
        send.ext_fields.insert("a", "billing");
        send.ext_fields.insert("b", "%RETRY%billing");
        assert_eq!(
            needed(&send),
            vec![(Resource::Group("billing".into()), Perm::SUB)]
        );
    }

    #[test]
    fn pulls_need_sub_on_topic_and_group() {
        let mut pull = RemotingCommand::request(RequestCode::PullMessage);
        pull.ext_fields.insert("topic", "orders");
        pull.ext_fields.insert("consumerGroup", "billing");
        assert_eq!(
            needed(&pull),
            vec![
                (Resource::Topic("orders".into()), Perm::SUB),
                (Resource::Group("billing".into()), Perm::SUB)
            ]
        );
    }

    #[test]
    fn a_heartbeat_needs_every_group_and_subscribed_topic() {
        let body = br#"{"clientID":"c","consumerDataSet":[{"groupName":"billing","subscriptionDataSet":[{"topic":"orders","subString":"*"},{"topic":"%RETRY%billing","subString":"*"}]}],"producerDataSet":[]}"#;
        let heartbeat = RemotingCommand::request(RequestCode::HeartBeat).with_body(&body[..]);
        assert_eq!(
            needed(&heartbeat),
            vec![
                (Resource::Group("billing".into()), Perm::SUB),
                (Resource::Topic("orders".into()), Perm::SUB),
                (Resource::Group("billing".into()), Perm::SUB)
            ]
        );
    }
}
