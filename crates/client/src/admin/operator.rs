//! The requests behind an operator's daily commands: the cluster as the name server sees it,
//! topics and groups created and deleted on brokers, broker configuration and status, who is
//! connected, offsets cloned, and messages looked up by key or queue offset (the matching
//! parts of Java's `DefaultMQAdminExt`).

use std::collections::BTreeMap;

use tidemark_protocol::body::{
    ClusterInfo, Connection, ConsumerConnection, ConsumerRunningInfo, GroupList, KvTable,
    MessageQueue, ProducerConnection, ProgressHistory, ProgressPlan, SubscriptionGroupConfig,
    SubscriptionGroupWrapper, TopicConfig, TopicList, TopicRouteData,
};
use tidemark_protocol::headers::{
    CloneGroupOffsetRequestHeader, CreateTopicRequestHeader, DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader, GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader, GetProducerConnectionListRequestHeader,
    GetProgressHistoryRequestHeader, PlanProgressMoveRequestHeader, QueryMessageRequestHeader,
    QueryTopicConsumeByWhoRequestHeader, RestoreProgressRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::message::{decode_records, DecodeOptions};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};

use super::{tools_pull, Admin};
use crate::error::{ClientError, Result};
use crate::instance::{bad_response, broker_error, PullStatus};
use crate::message::{retry_topic, MessageExt};

/// What [`Admin::restore_progress`] puts back: a group (one topic of it, if given) to where it
/// stood at a time, or before a history entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreRequest {
    pub group: String,
    pub topic: Option<String>,
    pub at_ms: Option<i64>,
    pub undo_entry: Option<i64>,
    pub dry_run: bool,
}

/// A broker's master as the name server lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerMaster {
    pub cluster: String,
    pub broker_name: String,
    pub addr: String,
}

/// A move of a group's progress that [`Admin::plan_progress_move`] plans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressMove {
    /// To the first message at or after `timestamp_ms` (−1: the end, a skip); without `force`
    /// a queue only moves backwards — as [`Admin::reset_offset_by_timestamp`] does.
    Reset {
        topic: String,
        timestamp_ms: i64,
        force: bool,
    },
    /// The source group's offsets copied — as [`Admin::clone_group_offset`] does.
    Clone {
        src_group: String,
        topic: Option<String>,
        offline: bool,
    },
}

impl Admin {
    /// Sends the request `build` makes to each of `addrs` and reads each answer's body; a
    /// broker that does not know the request (Apache's) is left out.
    pub(super) async fn ask_each<T: JsonBody>(
        &self,
        addrs: impl IntoIterator<Item = String>,
        build: impl Fn() -> RemotingCommand,
    ) -> Result<Vec<T>> {
        let mut answers = Vec::new();
        for addr in addrs {
            let response = self.instance.call(&addr, build()).await?;
            match response.response_code() {
                ResponseCode::Success => {}
                ResponseCode::RequestCodeNotSupported => continue,
                code => return Err(broker_error(&addr, code, &response)),
            }
            answers.push(
                T::from_json_bytes(&response.body).map_err(|error| bad_response(&addr, error))?,
            );
        }
        Ok(answers)
    }

    async fn expect_success(
        &self,
        addr: &str,
        request: RemotingCommand,
    ) -> Result<RemotingCommand> {
        let response = self.instance.call(addr, request).await?;
        match response.response_code() {
            ResponseCode::Success => Ok(response),
            code => Err(broker_error(addr, code, &response)),
        }
    }

    /// Every cluster, its brokers and their addresses (GET_BROKER_CLUSTER_INFO).
    pub async fn cluster_info(&self) -> Result<ClusterInfo> {
        let request = RemotingCommand::request(RequestCode::GetBrokerClusterInfo);
        let (addr, response) = self.instance.call_namesrv(request).await?;
        ClusterInfo::from_json_bytes(&response.body).map_err(|error| bad_response(&addr, error))
    }

    /// The masters of `cluster` (every cluster: `None`), by broker name.
    pub async fn masters(&self, cluster: Option<&str>) -> Result<Vec<BrokerMaster>> {
        let info = self.cluster_info().await?;
        let mut masters = Vec::new();
        for (cluster_name, brokers) in &info.cluster_addr_table {
            if cluster.is_some_and(|wanted| wanted != cluster_name) {
                continue;
            }
            for broker_name in brokers {
                let Some(addr) = info
                    .broker_addr_table
                    .get(broker_name)
                    .and_then(|data| data.master_addr())
                else {
                    continue;
                };
                masters.push(BrokerMaster {
                    cluster: cluster_name.clone(),
                    broker_name: broker_name.clone(),
                    addr: addr.to_owned(),
                });
            }
        }
        masters.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
        if masters.is_empty() {
            if let Some(cluster) = cluster {
                if !info.cluster_addr_table.contains_key(cluster) {
                    return Err(ClientError::InvalidArgument(format!(
                        "the name server knows no cluster {cluster:?}"
                    )));
                }
            }
        }
        Ok(masters)
    }

    /// A group's progress history (Tidemark's TIDEMARK_GET_PROGRESS_HISTORY) from every
    /// master the name server knows: who moved the group's committed offsets, when, from where
    /// to where, oldest first on each broker; with `checkpoints`, routine progress too.
    /// Brokers that keep none (Apache's) are left out.
    pub async fn progress_history(
        &self,
        group: &str,
        since_ms: Option<i64>,
        checkpoints: bool,
    ) -> Result<Vec<ProgressHistory>> {
        let header = GetProgressHistoryRequestHeader {
            consumer_group: group.to_owned(),
            since_ms,
            checkpoints: Some(checkpoints),
        };
        let masters = self.masters(None).await?;
        self.ask_each(masters.into_iter().map(|master| master.addr), || {
            RemotingCommand::request_with_header(RequestCode::GetProgressHistory, &header)
        })
        .await
    }

    /// Puts a group's queues back where they stood (Tidemark's TIDEMARK_RESTORE_PROGRESS) on
    /// every master, or only on `broker_name`'s: to where the progress history says they were
    /// at `at_ms`, or before history entry `undo_entry` (entry ids are each broker's own, so
    /// an undo names its broker). With `dry_run` nothing moves: the answer is the plan.
    pub async fn restore_progress(
        &self,
        request: &RestoreRequest,
        broker_name: Option<&str>,
    ) -> Result<Vec<ProgressPlan>> {
        let addrs = self.masters_named(broker_name).await?;
        let header = RestoreProgressRequestHeader {
            consumer_group: request.group.clone(),
            topic: request.topic.clone(),
            at_ms: request.at_ms,
            undo_entry: request.undo_entry,
            dry_run: Some(request.dry_run),
        };
        self.ask_each(addrs, || {
            RemotingCommand::request_with_header(RequestCode::RestoreProgress, &header)
        })
        .await
    }

    /// What `movement` would do to `group`'s queues on each broker it reaches (Tidemark's
    /// TIDEMARK_PLAN_PROGRESS_MOVE): each queue's committed offset now and where it would go,
    /// worked out by the code the move runs; nothing changes. Brokers that cannot plan
    /// (Apache's) are left out: an empty answer means no plan, not an empty move.
    pub async fn plan_progress_move(
        &self,
        group: &str,
        movement: &ProgressMove,
    ) -> Result<Vec<ProgressPlan>> {
        let (addrs, header) = match movement {
            ProgressMove::Reset {
                topic,
                timestamp_ms,
                force,
            } => (
                self.masters_of(topic).await?,
                PlanProgressMoveRequestHeader {
                    consumer_group: group.to_owned(),
                    topic: Some(topic.clone()),
                    timestamp: Some(*timestamp_ms),
                    is_force: Some(*force),
                    src_group: None,
                    offline: None,
                },
            ),
            ProgressMove::Clone {
                src_group,
                topic,
                offline,
            } => (
                self.clone_masters(src_group, topic.as_deref()).await?,
                PlanProgressMoveRequestHeader {
                    consumer_group: group.to_owned(),
                    topic: topic.clone(),
                    timestamp: None,
                    is_force: None,
                    src_group: Some(src_group.clone()),
                    offline: Some(*offline),
                },
            ),
        };
        self.ask_each(addrs, || {
            RemotingCommand::request_with_header(RequestCode::PlanProgressMove, &header)
        })
        .await
    }

    /// Every topic the name server knows (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), sorted.
    pub async fn topic_list(&self) -> Result<Vec<String>> {
        let request = RemotingCommand::request(RequestCode::GetAllTopicListFromNameserver);
        let (addr, response) = self.instance.call_namesrv(request).await?;
        let mut topics = TopicList::from_json_bytes(&response.body)
            .map_err(|error| bad_response(&addr, error))?
            .topic_list;
        topics.sort();
        Ok(topics)
    }

    /// `topic`'s route as the name server has it now; `None` when it has none.
    pub async fn topic_route(&self, topic: &str) -> Result<Option<TopicRouteData>> {
        self.instance.fetch_route(topic).await
    }

    /// A broker's runtime figures (GET_BROKER_RUNTIME_INFO: versions, TPS, offsets, disk).
    pub async fn broker_runtime_info(&self, addr: &str) -> Result<BTreeMap<String, String>> {
        let request = RemotingCommand::request(RequestCode::GetBrokerRuntimeInfo);
        let response = self.expect_success(addr, request).await?;
        Ok(KvTable::from_json_bytes(&response.body)
            .map_err(|error| bad_response(addr, error))?
            .table)
    }

    /// A broker's configuration (GET_BROKER_CONFIG), as its `key=value` lines say, sorted.
    pub async fn broker_config(&self, addr: &str) -> Result<BTreeMap<String, String>> {
        let request = RemotingCommand::request(RequestCode::GetBrokerConfig);
        let response = self.expect_success(addr, request).await?;
        let text = String::from_utf8_lossy(&response.body);
        Ok(text
            .lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .filter_map(|line| line.split_once('='))
            .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
            .collect())
    }

    /// Changes one key of a broker's configuration (UPDATE_BROKER_CONFIG); the broker refuses
    /// keys it cannot change while running.
    pub async fn update_broker_config(&self, addr: &str, key: &str, value: &str) -> Result<()> {
        if key.contains(['=', '\n']) || value.contains('\n') {
            return Err(ClientError::InvalidArgument(format!(
                "{key:?} = {value:?} cannot be written as one key=value line"
            )));
        }
        let request = RemotingCommand::request(RequestCode::UpdateBrokerConfig)
            .with_body(format!("{key}={value}\n").into_bytes());
        self.expect_success(addr, request).await.map(|_| ())
    }

    /// Creates or updates a topic on one broker (UPDATE_AND_CREATE_TOPIC); the broker tells
    /// the name server. `config.attributes` are sent as RocketMQ 5's `+key=value` settings.
    pub async fn create_topic(&self, addr: &str, config: &TopicConfig) -> Result<()> {
        let attributes = config.attributes.as_ref().map(|attributes| {
            attributes
                .iter()
                .map(|(key, value)| format!("+{key}={value}"))
                .collect::<Vec<_>>()
                .join(",")
        });
        let header = CreateTopicRequestHeader {
            topic: config.topic_name.clone(),
            default_topic: "TBW102".to_owned(),
            read_queue_nums: config.read_queue_nums,
            write_queue_nums: config.write_queue_nums,
            perm: config.perm,
            topic_filter_type: config.topic_filter_type.java_name().to_owned(),
            topic_sys_flag: Some(config.topic_sys_flag),
            order: config.order,
            attributes,
            force: None,
        };
        let request =
            RemotingCommand::request_with_header(RequestCode::UpdateAndCreateTopic, &header);
        self.expect_success(addr, request).await.map(|_| ())
    }

    /// Deletes `topic` from the masters of `cluster`, then from the name servers (Java
    /// `deleteTopic`); returns the brokers it was deleted from.
    pub async fn delete_topic(&self, cluster: &str, topic: &str) -> Result<Vec<BrokerMaster>> {
        let masters = self.masters(Some(cluster)).await?;
        let header = DeleteTopicRequestHeader {
            topic: topic.to_owned(),
        };
        for master in &masters {
            let request =
                RemotingCommand::request_with_header(RequestCode::DeleteTopicInBroker, &header);
            self.expect_success(&master.addr, request).await?;
        }
        let request =
            RemotingCommand::request_with_header(RequestCode::DeleteTopicInNamesrv, &header);
        let (addr, response) = self.instance.call_namesrv(request).await?;
        if response.response_code() != ResponseCode::Success {
            return Err(broker_error(&addr, response.response_code(), &response));
        }
        Ok(masters)
    }

    /// The groups consuming `topic` on any of its brokers: online subscribers and groups with
    /// progress in it (QUERY_TOPIC_CONSUME_BY_WHO, asked of each master), sorted.
    pub async fn groups_consuming(&self, topic: &str) -> Result<Vec<String>> {
        let header = QueryTopicConsumeByWhoRequestHeader {
            topic: topic.to_owned(),
        };
        let mut groups = Vec::new();
        for master in self.masters_of(topic).await? {
            let request =
                RemotingCommand::request_with_header(RequestCode::QueryTopicConsumeByWho, &header);
            let response = self.expect_success(&master, request).await?;
            groups.extend(
                GroupList::from_json_bytes(&response.body)
                    .map_err(|error| bad_response(&master, error))?
                    .group_list,
            );
        }
        groups.sort();
        groups.dedup();
        Ok(groups)
    }

    /// The subscription groups a broker knows (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), by name.
    pub async fn subscription_groups(&self, addr: &str) -> Result<Vec<SubscriptionGroupConfig>> {
        let request = RemotingCommand::request(RequestCode::GetAllSubscriptionGroupConfig);
        let response = self.expect_success(addr, request).await?;
        let wrapper = SubscriptionGroupWrapper::from_json_bytes(&response.body)
            .map_err(|error| bad_response(addr, error))?;
        Ok(wrapper.subscription_group_table.into_values().collect())
    }

    /// Creates or updates a subscription group on one broker
    /// (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP).
    pub async fn create_group(&self, addr: &str, config: &SubscriptionGroupConfig) -> Result<()> {
        let request = RemotingCommand::request(RequestCode::UpdateAndCreateSubscriptionGroup)
            .with_body(config.to_json_bytes());
        self.expect_success(addr, request).await.map(|_| ())
    }

    /// Deletes a subscription group from one broker, with its offsets when `remove_offsets`
    /// (DELETE_SUBSCRIPTIONGROUP).
    pub async fn delete_group(&self, addr: &str, group: &str, remove_offsets: bool) -> Result<()> {
        let header = DeleteSubscriptionGroupRequestHeader {
            group_name: group.to_owned(),
            remove_offset: Some(remove_offsets),
            clean_offset: Some(remove_offsets),
        };
        let request =
            RemotingCommand::request_with_header(RequestCode::DeleteSubscriptionGroup, &header);
        self.expect_success(addr, request).await.map(|_| ())
    }

    /// The group's online consumers, merged over every broker of its retry topic (Java asks one
    /// broker; a client missing from one broker still shows).
    pub async fn consumer_connection(&self, group: &str) -> Result<ConsumerConnection> {
        let readers = self.readers_of(&retry_topic(group)).await?;
        if readers.is_empty() {
            return Err(ClientError::NoRoute {
                topic: retry_topic(group),
                reason: "no broker knows this consumer group".into(),
            });
        }
        let header = GetConsumerConnectionListRequestHeader {
            consumer_group: group.to_owned(),
        };
        let mut merged: Option<ConsumerConnection> = None;
        let mut last_error = None;
        for reader in readers {
            let request = RemotingCommand::request_with_header(
                RequestCode::GetConsumerConnectionList,
                &header,
            );
            let response = match self.expect_success(&reader.addr, request).await {
                Ok(response) => response,
                Err(error) => {
                    last_error = Some(error);
                    continue;
                }
            };
            let found = ConsumerConnection::from_json_bytes(&response.body)
                .map_err(|error| bad_response(&reader.addr, error))?;
            match &mut merged {
                None => merged = Some(found),
                Some(merged) => {
                    merge_connections(&mut merged.connection_set, found.connection_set);
                    for (topic, subscription) in found.subscription_table {
                        merged
                            .subscription_table
                            .entry(topic)
                            .or_insert(subscription);
                    }
                }
            }
        }
        match (merged, last_error) {
            (Some(mut merged), _) => {
                merged
                    .connection_set
                    .sort_by(|a, b| a.client_id.cmp(&b.client_id));
                Ok(merged)
            }
            (None, Some(error)) => Err(error),
            (None, None) => Ok(ConsumerConnection::default()),
        }
    }

    /// The producer group's connections on the brokers of `topic`, merged.
    pub async fn producer_connection(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<ProducerConnection> {
        let masters = self.masters_of(topic).await?;
        if masters.is_empty() {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
                reason: "no master serves it".into(),
            });
        }
        let header = GetProducerConnectionListRequestHeader {
            producer_group: group.to_owned(),
        };
        let mut merged = ProducerConnection::default();
        let mut last_error = None;
        for addr in masters {
            let request = RemotingCommand::request_with_header(
                RequestCode::GetProducerConnectionList,
                &header,
            );
            match self.expect_success(&addr, request).await {
                Ok(response) => {
                    let found = ProducerConnection::from_json_bytes(&response.body)
                        .map_err(|error| bad_response(&addr, error))?;
                    merge_connections(&mut merged.connection_set, found.connection_set);
                }
                Err(error) => last_error = Some(error),
            }
        }
        match last_error {
            Some(error) if merged.connection_set.is_empty() => Err(error),
            _ => {
                merged
                    .connection_set
                    .sort_by(|a, b| a.client_id.cmp(&b.client_id));
                Ok(merged)
            }
        }
    }

    /// What one online consumer of `group` reports about itself (GET_CONSUMER_RUNNING_INFO,
    /// relayed by a broker of the group's retry topic; Java `getConsumerRunningInfo`).
    pub async fn consumer_running_info(
        &self,
        group: &str,
        client_id: &str,
    ) -> Result<ConsumerRunningInfo> {
        let readers = self.readers_of(&retry_topic(group)).await?;
        let Some(reader) = readers.first() else {
            return Err(ClientError::NoRoute {
                topic: retry_topic(group),
                reason: "no broker knows this consumer group".into(),
            });
        };
        let header = GetConsumerRunningInfoRequestHeader {
            consumer_group: group.to_owned(),
            client_id: client_id.to_owned(),
            jstack_enable: Some(false),
        };
        let request =
            RemotingCommand::request_with_header(RequestCode::GetConsumerRunningInfo, &header);
        let response = self.expect_success(&reader.addr, request).await?;
        ConsumerRunningInfo::from_json_bytes(&response.body)
            .map_err(|error| bad_response(&reader.addr, error))
    }

    /// Copies `src`'s committed offsets to `dest` on every master of the source group's retry
    /// topic, and of `topic` when given (CLONE_GROUP_OFFSET); `offline`: also topics the
    /// online source group does not subscribe. Returns the brokers asked.
    pub async fn clone_group_offset(
        &self,
        src: &str,
        dest: &str,
        topic: Option<&str>,
        offline: bool,
    ) -> Result<Vec<String>> {
        let masters = self.clone_masters(src, topic).await?;
        if masters.is_empty() {
            return Err(ClientError::NoRoute {
                topic: retry_topic(src),
                reason: "no broker knows the source group".into(),
            });
        }
        let header = CloneGroupOffsetRequestHeader {
            src_group: src.to_owned(),
            dest_group: dest.to_owned(),
            topic: topic.map(str::to_owned),
            offline,
        };
        for addr in &masters {
            let request =
                RemotingCommand::request_with_header(RequestCode::CloneGroupOffset, &header);
            self.expect_success(addr, request).await?;
        }
        Ok(masters)
    }

    /// The masters a clone of `src`'s offsets goes to: those of its retry topic (every broker
    /// it consumed on) and of `topic`.
    async fn clone_masters(&self, src: &str, topic: Option<&str>) -> Result<Vec<String>> {
        let mut masters = self.masters_of(&retry_topic(src)).await?;
        if let Some(topic) = topic {
            masters.extend(self.masters_of(topic).await?);
        }
        masters.sort();
        masters.dedup();
        Ok(masters)
    }

    /// Messages of `topic` whose key (or with `unique` whose client message id) is `key`,
    /// stored between `begin_ms` and `end_ms`, from every master's index (QUERY_MESSAGE), at
    /// most `max` per broker.
    pub async fn query_messages_by_key(
        &self,
        topic: &str,
        key: &str,
        unique: bool,
        max: i32,
        (begin_ms, end_ms): (i64, i64),
    ) -> Result<Vec<MessageExt>> {
        let Some(route) = self.instance.update_route(topic).await? else {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
                reason: "the name server has no route for it".into(),
            });
        };
        let mut found = Vec::new();
        for broker in &route.broker_datas {
            let Some(addr) = broker.master_addr() else {
                continue;
            };
            let header = QueryMessageRequestHeader {
                topic: topic.to_owned(),
                key: key.to_owned(),
                max_num: max,
                begin_timestamp: begin_ms,
                end_timestamp: end_ms,
                unique_key_query: unique.then_some(true),
            };
            let request = RemotingCommand::request_with_header(RequestCode::QueryMessage, &header);
            let response = self.instance.call(addr, request).await?;
            match response.response_code() {
                ResponseCode::Success => {}
                // Nothing indexed under the key on this broker.
                ResponseCode::QueryNotFound => continue,
                code => return Err(broker_error(addr, code, &response)),
            }
            for record in decode_records(&response.body, DecodeOptions::default())? {
                let queue = MessageQueue::new(
                    record.topic.clone(),
                    broker.broker_name.clone(),
                    record.queue_id,
                );
                let message = MessageExt::from_record(record, &queue)?;
                let matches = if unique {
                    message.msg_id == key
                } else {
                    message.keys().any(|candidate| candidate == key)
                };
                if matches {
                    found.push(message);
                }
            }
        }
        found.sort_by_key(|message| message.store_timestamp);
        Ok(found)
    }

    /// The message at `offset` of one queue; `None` when the queue has nothing there (any
    /// more).
    pub async fn message_at(
        &self,
        topic: &str,
        broker_name: &str,
        queue_id: i32,
        offset: i64,
    ) -> Result<Option<MessageExt>> {
        let Some(route) = self.instance.update_route(topic).await? else {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
                reason: "the name server has no route for it".into(),
            });
        };
        let Some(addr) = route
            .broker_datas
            .iter()
            .find(|broker| broker.broker_name == broker_name)
            .and_then(|broker| broker.master_addr())
        else {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
                reason: format!("no master of broker {broker_name} serves it"),
            });
        };
        let queue = MessageQueue::new(topic, broker_name, queue_id);
        let header = tools_pull(&queue, offset, 1);
        let outcome = self
            .instance
            .pull(
                addr,
                &header,
                &queue,
                std::time::Duration::from_secs(10),
                &[],
            )
            .await?;
        Ok(match outcome.status {
            PullStatus::Found(messages) => messages
                .into_iter()
                .find(|message| message.queue_offset == offset),
            _ => None,
        })
    }
}

/// Adds the connections `found` on one more broker to those `merged` so far, each client once.
fn merge_connections(merged: &mut Vec<Connection>, found: Vec<Connection>) {
    for connection in found {
        if !merged
            .iter()
            .any(|known| known.client_id == connection.client_id)
        {
            merged.push(connection);
        }
    }
}
