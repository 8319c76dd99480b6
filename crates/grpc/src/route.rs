//! QueryRoute, QueryAssignment and Heartbeat: where a topic's queues are (on every broker of the
//! cluster, all reached through this gateway at the address the client dialled), which of them
//! a consumer group reads, and that a client is still there.

use tidemark_broker::metadata_change::Announce;
use tidemark_protocol::body::{perm, TopicConfig};
use tidemark_protocol::ResponseCode;

use crate::cluster::BrokerQueues;
use crate::convert::full_name;
use crate::gateway::{Caller, Gateway};
use crate::proto::Code;
use crate::proto::{
    Address, AddressScheme, Assignment, Broker, Endpoints, MessageQueue, MessageType, Permission,
    QueryAssignmentRequest, QueryAssignmentResponse, QueryRouteRequest, QueryRouteResponse, Status,
};
use crate::status::{ok, status};

/// The topic attribute RocketMQ 5's admin sets (`+message.type=FIFO` on UPDATE_AND_CREATE_TOPIC).
pub const MESSAGE_TYPE_ATTRIBUTE: &str = "message.type";

/// The message types a topic accepts: its `message.type` attribute (NORMAL, FIFO, DELAY,
/// TRANSACTION, or MIXED), every type when it has none (topics created on the fly and by
/// 4.x tools).
pub fn accepted_types(
    attributes: Option<&std::collections::BTreeMap<String, String>>,
) -> Vec<MessageType> {
    let all = vec![
        MessageType::Normal,
        MessageType::Fifo,
        MessageType::Delay,
        MessageType::Transaction,
    ];
    match attributes
        .and_then(|attributes| attributes.get(MESSAGE_TYPE_ATTRIBUTE))
        .map(|value| value.to_ascii_uppercase())
        .as_deref()
    {
        Some("NORMAL") => vec![MessageType::Normal],
        Some("FIFO") => vec![MessageType::Fifo],
        Some("DELAY") => vec![MessageType::Delay],
        Some("TRANSACTION") => vec![MessageType::Transaction],
        _ => all,
    }
}

fn permission(queue_id: i32, read: i32, write: i32, topic_perm: i32) -> Permission {
    let readable = queue_id < read && perm::is_readable(topic_perm);
    let writable = queue_id < write && perm::is_writeable(topic_perm);
    match (readable, writable) {
        (true, true) => Permission::ReadWrite,
        (true, false) => Permission::Read,
        (false, true) => Permission::Write,
        (false, false) => Permission::None,
    }
}

impl Gateway {
    fn endpoints(&self, dialled: Option<&Endpoints>) -> Endpoints {
        let address = dialled.and_then(|endpoints| endpoints.addresses.first());
        let host = self.endpoint_host(address.map(|address| address.host.as_str()));
        let scheme = if host.parse::<std::net::Ipv4Addr>().is_ok() {
            AddressScheme::IPv4
        } else if host.parse::<std::net::Ipv6Addr>().is_ok() {
            AddressScheme::IPv6
        } else {
            AddressScheme::DomainName
        };
        Endpoints {
            scheme: scheme as i32,
            addresses: vec![Address {
                host,
                port: i32::from(self.port),
            }],
        }
    }

    fn broker(&self, name: &str, dialled: Option<&Endpoints>) -> Broker {
        Broker {
            name: name.to_owned(),
            id: 0,
            endpoints: Some(self.endpoints(dialled)),
        }
    }

    /// The brokers holding a topic (every one of the cluster, see [`crate::cluster`]) and this
    /// broker's config of it; created here on first use where the broker auto-creates topics.
    pub(crate) async fn topic_brokers(
        &self,
        name: &str,
    ) -> Result<(Vec<BrokerQueues>, Option<TopicConfig>), Status> {
        if name.is_empty() {
            return Err(status(Code::IllegalTopic, "the topic name is empty"));
        }
        let local = self.state.metadata.topics.get(name);
        let brokers = self.cluster.brokers(name, local.as_ref()).await;
        if !brokers.is_empty() {
            return Ok((brokers, local));
        }
        if !self.state.config.auto_create_topic_enable || self.state.role.is_slave() {
            return Err(status(
                Code::TopicNotFound,
                format!("topic {name} does not exist"),
            ));
        }
        let created = self.state.metadata.topics.get_or_create_from_template(
            name,
            "TBW102",
            self.state.config.default_topic_queue_nums,
            tidemark_remoting::now_ms(),
        );
        match created {
            Some((config, fresh)) => {
                if fresh {
                    // Boxed: a topic is created once, but this state would sit in every
                    // send's future.
                    // The route it answers comes from the name servers too: as with a 4.x
                    // send that creates its topic, they must know it first.
                    let published = self.state.topic_changes().publish(Announce::BeforeAnswer);
                    if let Err(failure) = Box::pin(published).await {
                        return Err(status(
                            Code::InternalServerError,
                            format!("topic {name} created but not persisted: {failure}"),
                        ));
                    }
                }
                self.cluster.invalidate(name);
                let own = self.cluster.brokers(name, Some(&config)).await;
                Ok((own, Some(config)))
            }
            None => Err(status(
                Code::TopicNotFound,
                format!("topic {name} does not exist"),
            )),
        }
    }

    pub async fn query_route(
        &self,
        caller: &Caller,
        request: QueryRouteRequest,
    ) -> QueryRouteResponse {
        let resource = request.topic.clone().unwrap_or_default();
        let name = full_name(Some(&resource));
        if let Some(refusal) = self.route_refusal(caller, &name) {
            return QueryRouteResponse {
                status: Some(crate::status::from_response(&refusal)),
                message_queues: Vec::new(),
            };
        }
        let (brokers, config) = match self.topic_brokers(&name).await {
            Ok(found) => found,
            Err(status) => {
                return QueryRouteResponse {
                    status: Some(status),
                    message_queues: Vec::new(),
                }
            }
        };
        let types: Vec<i32> = accepted_types(config.as_ref().and_then(|c| c.attributes.as_ref()))
            .into_iter()
            .map(|kind| kind as i32)
            .collect();
        let mut message_queues = Vec::new();
        for queues in &brokers {
            let broker = self.broker(&queues.broker_name, request.endpoints.as_ref());
            let count = queues.read_queue_nums.max(queues.write_queue_nums).max(0);
            message_queues.extend((0..count).map(|queue_id| MessageQueue {
                topic: Some(resource.clone()),
                id: queue_id,
                permission: permission(
                    queue_id,
                    queues.read_queue_nums,
                    queues.write_queue_nums,
                    queues.perm,
                ) as i32,
                broker: Some(broker.clone()),
                accept_message_types: types.clone(),
            }));
        }
        QueryRouteResponse {
            status: Some(ok()),
            message_queues,
        }
    }

    /// Whether a group consumes in order (its 5.x `consumeMessageOrderly` flag).
    pub fn group_is_fifo(&self, group: &str) -> bool {
        self.state
            .metadata
            .groups
            .get(group)
            .and_then(|config| config.consume_message_orderly)
            .unwrap_or(false)
    }

    /// RocketMQ's proxy answer: every consumer gets each broker of the topic (queue −1: pop
    /// any of its queues); a FIFO group gets each readable queue, so each is popped in order.
    pub async fn query_assignment(
        &self,
        _caller: &Caller,
        request: QueryAssignmentRequest,
    ) -> QueryAssignmentResponse {
        let resource = request.topic.clone().unwrap_or_default();
        let name = full_name(Some(&resource));
        let group = full_name(request.group.as_ref());
        let (brokers, config) = match self.topic_brokers(&name).await {
            Ok(found) => found,
            Err(status) => {
                return QueryAssignmentResponse {
                    status: Some(status),
                    assignments: Vec::new(),
                }
            }
        };
        let readable: Vec<&BrokerQueues> = brokers.iter().filter(|b| b.readable()).collect();
        if readable.is_empty() {
            return QueryAssignmentResponse {
                status: Some(status(
                    Code::Forbidden,
                    format!("topic {name} has no readable queue"),
                )),
                assignments: Vec::new(),
            };
        }
        let types: Vec<i32> = accepted_types(config.as_ref().and_then(|c| c.attributes.as_ref()))
            .into_iter()
            .map(|kind| kind as i32)
            .collect();
        let fifo = self.group_is_fifo(&group);
        let mut assignments = Vec::new();
        for queues in readable {
            let broker = self.broker(&queues.broker_name, request.endpoints.as_ref());
            let queue = |id: i32| Assignment {
                message_queue: Some(MessageQueue {
                    topic: Some(resource.clone()),
                    id,
                    permission: Permission::ReadWrite as i32,
                    broker: Some(broker.clone()),
                    accept_message_types: types.clone(),
                }),
            };
            if fifo {
                assignments.extend((0..queues.read_queue_nums).map(queue));
            } else {
                assignments.push(queue(-1));
            }
        }
        QueryAssignmentResponse {
            status: Some(ok()),
            assignments,
        }
    }

    /// A heartbeat renews the client's registration (from the settings it sent).
    pub async fn heartbeat(&self, caller: &Caller) -> Status {
        let Some(settings) = caller.session.settings() else {
            // Not an error for the client: its settings are still on their way.
            return ok();
        };
        let response = self.register(caller, &settings).await;
        match response.response_code() {
            ResponseCode::Success => ok(),
            _ => crate::status::from_response(&response),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn topics_accept_their_message_type_or_every_type() {
        assert_eq!(accepted_types(None).len(), 4);
        let fifo = BTreeMap::from([(MESSAGE_TYPE_ATTRIBUTE.to_owned(), "FIFO".to_owned())]);
        assert_eq!(accepted_types(Some(&fifo)), vec![MessageType::Fifo]);
        let mixed = BTreeMap::from([(MESSAGE_TYPE_ATTRIBUTE.to_owned(), "MIXED".to_owned())]);
        assert_eq!(accepted_types(Some(&mixed)).len(), 4);
        assert_eq!(permission(0, 4, 4, 6), Permission::ReadWrite);
        assert_eq!(permission(5, 8, 4, 6), Permission::Read);
        assert_eq!(permission(0, 4, 4, 2), Permission::Write);
    }
}
