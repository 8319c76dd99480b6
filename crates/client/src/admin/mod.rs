//! [`Admin`]: what operators ask the brokers and name servers (the subset of Java's
//! `DefaultMQAdminExt` that Tidemark's tools and tests need): consumer progress here, the
//! daily cluster, topic, group and message requests in `operator`.

pub mod controllers;
mod dead_letters;
mod operator;

pub use controllers::ControllerAnswer;
pub use dead_letters::ResendRequest;
pub use operator::{BrokerMaster, ProgressMove, RestoreRequest};

use std::collections::BTreeMap;
use std::sync::Arc;

use tidemark_protocol::body::{
    ConsumeStats, ConsumerProgress, MessageQueue, QueueProgressView, TopicStatsTable,
};
use tidemark_protocol::headers::{
    pull_sys_flag, GetConsumeStatsRequestHeader, GetTopicStatsInfoRequestHeader,
    PullMessageRequestHeader, ViewMessageRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::message::{decode_offset_msg_id, DecodeOptions, MessageRecord};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};

use crate::config::{unique_instance_name, ClientConfig};
use crate::error::{ClientError, Result};
use crate::instance::{bad_response, broker_error, ClientInstance, PullStatus};
use crate::message::{retry_topic, MessageExt};

/// Admin requests to the brokers of a cluster.
#[derive(Debug)]
pub struct Admin {
    instance: Arc<ClientInstance>,
}

impl Admin {
    pub async fn connect(config: ClientConfig) -> Result<Admin> {
        let instance_name = config
            .instance_name
            .clone()
            .unwrap_or_else(unique_instance_name);
        let instance = ClientInstance::new(config, instance_name);
        instance.start().await?;
        Ok(Admin { instance })
    }

    /// Master addresses of the brokers serving `topic`.
    pub(crate) async fn masters_of(&self, topic: &str) -> Result<Vec<String>> {
        let Some(route) = self.instance.update_route(topic).await? else {
            return Ok(Vec::new());
        };
        Ok(route
            .broker_datas
            .iter()
            .filter_map(|broker| broker.master_addr().map(str::to_owned))
            .collect())
    }

    /// The broker address that answers reads for each broker of `topic`: its master, or while
    /// the master is away a slave (the lowest id), as Java's `BrokerData.selectBrokerAddr`
    /// picks one for `examineConsumeStats`.
    pub async fn readers_of(&self, topic: &str) -> Result<Vec<BrokerReader>> {
        let Some(route) = self.instance.update_route(topic).await? else {
            return Ok(Vec::new());
        };
        Ok(route
            .broker_datas
            .iter()
            .filter_map(|broker| {
                let (id, addr) = match broker.master_addr() {
                    Some(addr) => (0, addr),
                    None => broker
                        .broker_addrs
                        .iter()
                        .min_by_key(|(id, _)| **id)
                        .map(|(id, addr)| (*id, addr.as_str()))?,
                };
                Some(BrokerReader {
                    broker_name: broker.broker_name.clone(),
                    addr: addr.to_owned(),
                    is_master: id == 0,
                })
            })
            .collect())
    }

    /// The brokers that answer for a group's progress: those of its retry topic, plus those of
    /// `topic` (each broker once, master or standing-in slave).
    pub async fn readers_for_group(
        &self,
        group: &str,
        topic: Option<&str>,
    ) -> Result<Vec<BrokerReader>> {
        let mut readers = self.readers_of(&retry_topic(group)).await?;
        if let Some(topic) = topic {
            readers.extend(self.readers_of(topic).await?);
        }
        Ok(one_per_broker(readers))
    }

    /// The client ids of the group's online consumers (Java `examineConsumerConnectionInfo`,
    /// ids only), from every broker of the group's retry topic; empty when none is online.
    pub async fn consumer_ids(&self, group: &str) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        for broker in self.masters_of(&retry_topic(group)).await? {
            match self.instance.consumer_ids(&broker, group).await {
                Ok(found) => ids.extend(found),
                // Both RocketMQ and Tidemark answer an empty group with this error.
                Err(ClientError::Broker {
                    code: ResponseCode::SystemError,
                    ref remark,
                    ..
                }) if remark.starts_with("no consumer for this group") => {}
                Err(error) => return Err(error),
            }
        }
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    /// A group's progress per queue on every broker that knows the group (Java
    /// `examineConsumeStats`): the brokers of the group's retry topic, plus those of `topic`.
    /// Includes the group's retry (and dead-letter) queues, so their depth is visible.
    /// While a master is away its slave answers.
    pub async fn consume_stats(&self, group: &str, topic: Option<&str>) -> Result<ConsumeStats> {
        let brokers: Vec<String> = self
            .readers_for_group(group, topic)
            .await?
            .into_iter()
            .map(|reader| reader.addr)
            .collect();
        if brokers.is_empty() {
            return Err(ClientError::NoRoute {
                topic: retry_topic(group),
                reason: "no broker knows this consumer group".into(),
            });
        }
        let mut merged = ConsumeStats::default();
        for addr in brokers {
            let header = GetConsumeStatsRequestHeader {
                consumer_group: group.to_owned(),
                topic: topic.map(str::to_owned),
                topic_list: None,
            };
            let request =
                RemotingCommand::request_with_header(RequestCode::GetConsumeStats, &header);
            let response = self.instance.call(&addr, request).await?;
            if response.response_code() != ResponseCode::Success {
                return Err(broker_error(&addr, response.response_code(), &response));
            }
            let stats = ConsumeStats::from_json_bytes(&response.body)
                .map_err(|error| bad_response(&addr, error))?;
            merged.consume_tps += stats.consume_tps;
            merged.offset_table.extend(stats.offset_table);
        }
        Ok(merged)
    }

    /// Tidemark's view of a group's progress per queue (TIDEMARK_GET_CONSUMER_PROGRESS): time
    /// lag, acknowledged ranges and stuck messages, from every broker that knows the group.
    /// Brokers that do not serve it (Apache RocketMQ) are left out.
    pub async fn consumer_progress(
        &self,
        group: &str,
        topic: Option<&str>,
    ) -> Result<BTreeMap<MessageQueue, QueueProgressView>> {
        let brokers: Vec<String> = self
            .readers_for_group(group, topic)
            .await?
            .into_iter()
            .map(|reader| reader.addr)
            .collect();
        let header = GetConsumeStatsRequestHeader {
            consumer_group: group.to_owned(),
            topic: topic.map(str::to_owned),
            topic_list: None,
        };
        let answers: Vec<ConsumerProgress> = self
            .ask_each(brokers, || {
                RemotingCommand::request_with_header(RequestCode::GetConsumerProgress, &header)
            })
            .await?;
        let mut merged = BTreeMap::new();
        for line in answers.into_iter().flat_map(|body| body.queues) {
            let queue =
                MessageQueue::new(line.topic.clone(), line.broker_name.clone(), line.queue_id);
            merged.insert(queue, line);
        }
        Ok(merged)
    }

    /// Min and max offsets of every queue of `topic` (from a slave while its master is away).
    pub async fn topic_stats(&self, topic: &str) -> Result<TopicStatsTable> {
        let mut merged = TopicStatsTable::default();
        for BrokerReader { addr, .. } in self.readers_of(topic).await? {
            let header = GetTopicStatsInfoRequestHeader {
                topic: topic.to_owned(),
            };
            let request =
                RemotingCommand::request_with_header(RequestCode::GetTopicStatsInfo, &header);
            let response = self.instance.call(&addr, request).await?;
            if response.response_code() != ResponseCode::Success {
                return Err(broker_error(&addr, response.response_code(), &response));
            }
            let stats = TopicStatsTable::from_json_bytes(&response.body)
                .map_err(|error| bad_response(&addr, error))?;
            merged.offset_table.extend(stats.offset_table);
        }
        Ok(merged)
    }

    /// Moves a group's progress in `topic` to the first message stored at or after
    /// `timestamp_ms` (−1: the end of each queue) on every master of the topic
    /// (INVOKE_BROKER_TO_RESET_OFFSET; Java `resetOffsetByTimestamp`). Without `force` a queue
    /// only moves backwards. The brokers tell the group's online consumers. Returns the new
    /// offsets.
    pub async fn reset_offset_by_timestamp(
        &self,
        topic: &str,
        group: &str,
        timestamp_ms: i64,
        force: bool,
    ) -> Result<std::collections::BTreeMap<tidemark_protocol::body::MessageQueue, i64>> {
        let mut offsets = std::collections::BTreeMap::new();
        let masters = self.masters_of(topic).await?;
        if masters.is_empty() {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
                reason: "no master serves it".into(),
            });
        }
        for addr in masters {
            let header = tidemark_protocol::headers::ResetOffsetRequestHeader {
                topic: topic.to_owned(),
                group: group.to_owned(),
                timestamp: timestamp_ms,
                is_force: force,
                queue_id: None,
                offset: None,
            };
            let request = RemotingCommand::request_with_header(
                RequestCode::InvokeBrokerToResetOffset,
                &header,
            );
            let response = self.instance.call(&addr, request).await?;
            if response.response_code() != ResponseCode::Success {
                return Err(broker_error(&addr, response.response_code(), &response));
            }
            let body =
                tidemark_protocol::body::MessageQueueOffsets::from_json_bytes(&response.body)
                    .map_err(|error| bad_response(&addr, error))?;
            offsets.extend(body.offset_table);
        }
        Ok(offsets)
    }

    /// The message an offset message id names (VIEW_MESSAGE_BY_ID to the broker the id names;
    /// Java `viewMessage`).
    pub async fn view_message(&self, offset_msg_id: &str) -> Result<MessageExt> {
        let (store_host, offset) = decode_offset_msg_id(offset_msg_id)?;
        let addr = store_host.to_string();
        let request = RemotingCommand::request_with_header(
            RequestCode::ViewMessageById,
            &ViewMessageRequestHeader {
                offset,
                topic: None,
            },
        );
        let response = self.instance.call(&addr, request).await?;
        if response.response_code() != ResponseCode::Success {
            return Err(broker_error(&addr, response.response_code(), &response));
        }
        let (record, _) = MessageRecord::decode(&response.body, 0, DecodeOptions::default())?;
        let queue = MessageQueue::new(record.topic.clone(), String::new(), record.queue_id);
        Ok(MessageExt::from_record(record, &queue)?)
    }

    /// Reads `topic` from the first message stored at or after `since_ms`, on every master
    /// and queue, handing each message to `visit`, until the queues' ends or `limit`
    /// messages; returns how many were read. Nothing is committed (Java tools read as
    /// `TOOLS_CONSUMER`).
    pub async fn scan_topic(
        &self,
        topic: &str,
        since_ms: i64,
        limit: usize,
        mut visit: impl FnMut(&MessageExt),
    ) -> Result<usize> {
        let Some(route) = self.instance.update_route(topic).await? else {
            return Ok(0);
        };
        let mut read = 0;
        for broker in &route.broker_datas {
            let Some(addr) = broker.master_addr() else {
                continue;
            };
            let queues = route
                .queue_datas
                .iter()
                .filter(|data| data.broker_name == broker.broker_name)
                .map(|data| data.read_queue_nums)
                .max()
                .unwrap_or(0);
            for queue_id in 0..queues {
                let queue = MessageQueue::new(topic, broker.broker_name.clone(), queue_id);
                let mut offset = self.instance.search_offset(addr, &queue, since_ms).await?;
                let end = self.instance.max_offset(addr, &queue).await?;
                while offset < end && read < limit {
                    let header = tools_pull(&queue, offset, 32);
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
                    match outcome.status {
                        PullStatus::Found(messages) => {
                            for message in messages.iter().take(limit - read) {
                                visit(message);
                                read += 1;
                            }
                        }
                        PullStatus::NoNewMessage => break,
                        PullStatus::NoMatchedMessage | PullStatus::OffsetIllegal => {}
                    }
                    if outcome.next_begin_offset <= offset {
                        break;
                    }
                    offset = outcome.next_begin_offset;
                }
            }
        }
        Ok(read)
    }

    pub async fn shutdown(&self) {
        self.instance.shutdown(None, None).await;
    }
}

/// Which address answered for a broker (see [`Admin::readers_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerReader {
    pub broker_name: String,
    pub addr: String,
    /// `false`: the master is away and a slave stands in (its view lags by up to one slave
    /// sync).
    pub is_master: bool,
}

/// One reader per broker name, its master where either route named it: the two routes are
/// fetched one after the other, and during a failover one may name the new master while the
/// other still has only a slave standing in, whose progress may be older.
fn one_per_broker(mut readers: Vec<BrokerReader>) -> Vec<BrokerReader> {
    readers.sort_by(|a, b| {
        a.broker_name
            .cmp(&b.broker_name)
            .then(b.is_master.cmp(&a.is_master))
            .then(a.addr.cmp(&b.addr))
    });
    readers.dedup_by(|later, kept| later.broker_name == kept.broker_name);
    readers
}

/// The group admin tools read messages as (Java's `MixAll.TOOLS_CONSUMER_GROUP`).
const TOOLS_CONSUMER_GROUP: &str = "TOOLS_CONSUMER";

/// A tool's read of up to `max` messages of `queue` from `offset`: no commit, no waiting.
fn tools_pull(queue: &MessageQueue, offset: i64, max: i32) -> PullMessageRequestHeader {
    PullMessageRequestHeader {
        consumer_group: TOOLS_CONSUMER_GROUP.to_owned(),
        topic: queue.topic.clone(),
        queue_id: queue.queue_id,
        queue_offset: offset,
        max_msg_nums: max,
        sys_flag: pull_sys_flag::build(false, false, true, false),
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: Some("*".to_owned()),
        sub_version: 0,
        expression_type: Some("TAG".to_owned()),
        max_msg_bytes: None,
        broker_name: Some(queue.broker_name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(broker: &str, addr: &str, is_master: bool) -> BrokerReader {
        BrokerReader {
            broker_name: broker.into(),
            addr: addr.into(),
            is_master,
        }
    }

    #[test]
    fn a_broker_is_read_on_its_master_when_either_route_names_it() {
        let readers = one_per_broker(vec![
            // The retry topic's route: a slave standing in (its address sorts first).
            reader("a", "10.0.0.1:10911", false),
            reader("b", "10.0.0.9:10911", true),
            // The topic's route: the new master.
            reader("a", "10.0.0.2:10911", true),
            reader("b", "10.0.0.9:10911", true),
        ]);
        assert_eq!(
            readers,
            vec![
                reader("a", "10.0.0.2:10911", true),
                reader("b", "10.0.0.9:10911", true)
            ]
        );
        let only_slave = one_per_broker(vec![reader("a", "10.0.0.1:10911", false)]);
        assert_eq!(only_slave, vec![reader("a", "10.0.0.1:10911", false)]);
    }
}
