//! `RouteTable`: who serves which topic (RocketMQ's `RouteInfoManager`), as a plain state type.
//! No I/O and no clock of its own: callers pass `now_ms`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tidemark_protocol::body::{
    perm, BrokerData, ClusterInfo, DataVersion, QueueData, TopicConfigSerializeWrapper,
    TopicRouteData, MASTER_ID,
};

/// A broker's REGISTER_BROKER call, decoded.
#[derive(Debug, Clone)]
pub struct Registration {
    pub cluster_name: String,
    pub broker_name: String,
    pub broker_addr: String,
    pub broker_id: i64,
    pub ha_server_addr: String,
    pub topics: TopicConfigSerializeWrapper,
    /// The connection it came on, so a closed connection unregisters the broker at once.
    pub channel_id: Option<u64>,
}

/// What the name server answers a registration with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistrationReply {
    /// For a slave: the master's HA address.
    pub ha_server_addr: Option<String>,
    /// For a slave whose master is registered and alive.
    pub master_addr: Option<String>,
}

#[derive(Debug, Clone)]
struct LiveBroker {
    last_update_ms: i64,
    data_version: DataVersion,
    ha_server_addr: String,
    channel_id: Option<u64>,
    cluster_name: String,
    broker_name: String,
    broker_id: i64,
}

/// Routes, clusters and live brokers.
///
/// Invariants: every broker name in a cluster has a `BrokerData`; every queue entry of a topic
/// names a broker that has a `BrokerData`; a topic with no queue entries is not listed.
#[derive(Debug, Default)]
pub struct RouteTable {
    clusters: BTreeMap<String, BTreeSet<String>>,
    brokers: BTreeMap<String, BrokerData>,
    topics: BTreeMap<String, BTreeMap<String, QueueData>>,
    live: HashMap<String, LiveBroker>,
}

impl RouteTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or refreshes a broker. Only a master's (id 0) topic table updates routes, and only
    /// when its data version changed or it registers for the first time.
    pub fn register_broker(
        &mut self,
        registration: Registration,
        now_ms: i64,
    ) -> RegistrationReply {
        let Registration {
            cluster_name,
            broker_name,
            broker_addr,
            broker_id,
            ha_server_addr,
            topics,
            channel_id,
        } = registration;
        if self.outranked(&broker_name, broker_id, &broker_addr, &topics.data_version) {
            // A deposed master still registering as master (controller mode: its state
            // version is its master epoch, lower than the new master's). RocketMQ ignores it
            // the same way, so routes do not flap between the two.
            self.live.remove(&broker_addr);
            return RegistrationReply::default();
        }
        self.clusters
            .entry(cluster_name.clone())
            .or_default()
            .insert(broker_name.clone());
        let broker = self
            .brokers
            .entry(broker_name.clone())
            .or_insert_with(|| BrokerData {
                cluster: cluster_name.clone(),
                broker_name: broker_name.clone(),
                ..BrokerData::default()
            });
        // One address serves one role: drop an old id that pointed at this address (a slave
        // promoted to master, or the other way round).
        broker
            .broker_addrs
            .retain(|id, addr| *addr != broker_addr || *id == broker_id);
        let first_registration = broker
            .broker_addrs
            .insert(broker_id, broker_addr.clone())
            .is_none();

        let previous_version = self
            .live
            .get(&broker_addr)
            .map(|live| live.data_version.clone());
        let version_changed = previous_version.as_ref() != Some(&topics.data_version);
        if broker_id == MASTER_ID && (version_changed || first_registration) {
            for (name, config) in &topics.topic_config_table {
                let queue = QueueData {
                    broker_name: broker_name.clone(),
                    read_queue_nums: config.read_queue_nums,
                    write_queue_nums: config.write_queue_nums,
                    perm: config.perm,
                    topic_sys_flag: config.topic_sys_flag,
                };
                self.topics
                    .entry(name.clone())
                    .or_default()
                    .insert(broker_name.clone(), queue);
            }
        }
        self.live.insert(
            broker_addr,
            LiveBroker {
                last_update_ms: now_ms,
                data_version: topics.data_version,
                ha_server_addr,
                channel_id,
                cluster_name,
                broker_name: broker_name.clone(),
                broker_id,
            },
        );
        let mut reply = RegistrationReply::default();
        if broker_id != MASTER_ID {
            if let Some(master) = self
                .brokers
                .get(&broker_name)
                .and_then(|broker| broker.master_addr())
            {
                if let Some(live) = self.live.get(master) {
                    reply.master_addr = Some(master.to_owned());
                    reply.ha_server_addr = Some(live.ha_server_addr.clone());
                }
            }
        }
        reply
    }

    /// Whether another live address holds `broker_id` of `broker_name` with a higher state
    /// version than this registration's.
    fn outranked(
        &self,
        broker_name: &str,
        broker_id: i64,
        broker_addr: &str,
        version: &DataVersion,
    ) -> bool {
        let Some(holder) = self
            .brokers
            .get(broker_name)
            .and_then(|broker| broker.broker_addrs.get(&broker_id))
            .filter(|holder| holder.as_str() != broker_addr)
        else {
            return false;
        };
        self.live.get(holder).is_some_and(|live| {
            live.data_version.state_version.unwrap_or(0) > version.state_version.unwrap_or(0)
        })
    }

    /// Removes one broker address (UNREGISTER_BROKER, a closed connection, or expiry). The
    /// broker name and its routes go only when no address is left.
    pub fn unregister_broker(&mut self, broker_addr: &str) -> bool {
        let Some(live) = self.live.remove(broker_addr) else {
            return false;
        };
        let mut name_gone = false;
        if let Some(broker) = self.brokers.get_mut(&live.broker_name) {
            broker
                .broker_addrs
                .retain(|id, addr| !(addr == broker_addr && *id == live.broker_id));
            name_gone = broker.broker_addrs.is_empty();
        }
        if name_gone {
            self.brokers.remove(&live.broker_name);
            if let Some(names) = self.clusters.get_mut(&live.cluster_name) {
                names.remove(&live.broker_name);
                if names.is_empty() {
                    self.clusters.remove(&live.cluster_name);
                }
            }
            for queues in self.topics.values_mut() {
                queues.remove(&live.broker_name);
            }
            self.topics.retain(|_, queues| !queues.is_empty());
        }
        true
    }

    /// Unregisters every broker that registered over a connection that closed.
    pub fn channel_closed(&mut self, channel_id: u64) -> Vec<String> {
        let gone: Vec<String> = self
            .live
            .iter()
            .filter(|(_, live)| live.channel_id == Some(channel_id))
            .map(|(addr, _)| addr.clone())
            .collect();
        for addr in &gone {
            self.unregister_broker(addr);
        }
        gone
    }

    /// Drops brokers not heard from for `timeout_ms`.
    pub fn expire_inactive(&mut self, now_ms: i64, timeout_ms: i64) -> Vec<String> {
        let stale: Vec<String> = self
            .live
            .iter()
            .filter(|(_, live)| now_ms - live.last_update_ms > timeout_ms)
            .map(|(addr, _)| addr.clone())
            .collect();
        for addr in &stale {
            self.unregister_broker(addr);
        }
        stale
    }

    /// The route of a topic; `None` when no broker serves it (TOPIC_NOT_EXIST).
    pub fn topic_route(&self, topic: &str) -> Option<TopicRouteData> {
        let queues = self.topics.get(topic)?;
        let queue_datas: Vec<QueueData> = queues.values().cloned().collect();
        let broker_datas: Vec<BrokerData> = queues
            .keys()
            .filter_map(|name| self.brokers.get(name))
            .cloned()
            .collect();
        if queue_datas.is_empty() || broker_datas.is_empty() {
            return None;
        }
        Some(TopicRouteData {
            queue_datas,
            broker_datas,
            ..TopicRouteData::default()
        })
    }

    pub fn cluster_info(&self) -> ClusterInfo {
        ClusterInfo {
            broker_addr_table: self.brokers.clone(),
            cluster_addr_table: self
                .clusters
                .iter()
                .map(|(cluster, names)| (cluster.clone(), names.iter().cloned().collect()))
                .collect(),
        }
    }

    pub fn topics(&self) -> Vec<String> {
        self.topics.keys().cloned().collect()
    }

    /// Topics served by any broker of `cluster`.
    pub fn topics_of_cluster(&self, cluster: &str) -> Vec<String> {
        let Some(names) = self.clusters.get(cluster) else {
            return Vec::new();
        };
        self.topics
            .iter()
            .filter(|(_, queues)| queues.keys().any(|name| names.contains(name)))
            .map(|(topic, _)| topic.clone())
            .collect()
    }

    /// Whether a broker's registered data version differs from `version` (QUERY_DATA_VERSION).
    pub fn data_version_changed(&self, broker_addr: &str, version: &DataVersion) -> bool {
        self.live
            .get(broker_addr)
            .is_none_or(|live| live.data_version != *version)
    }

    pub fn refresh(&mut self, broker_addr: &str, now_ms: i64) {
        if let Some(live) = self.live.get_mut(broker_addr) {
            live.last_update_ms = now_ms;
        }
    }

    /// Clears (WIPE) or restores (ADD) the write permission of a broker name's queues; returns
    /// how many topics changed.
    pub fn set_write_permission(&mut self, broker_name: &str, writable: bool) -> usize {
        let mut changed = 0;
        for queues in self.topics.values_mut() {
            if let Some(queue) = queues.get_mut(broker_name) {
                queue.perm = if writable {
                    queue.perm | perm::WRITE
                } else {
                    queue.perm & !perm::WRITE
                };
                changed += 1;
            }
        }
        changed
    }

    /// Removes a topic from every broker's routes (DELETE_TOPIC_IN_NAMESRV).
    pub fn delete_topic(&mut self, topic: &str) -> bool {
        self.topics.remove(topic).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_protocol::body::TopicConfig;

    fn wrapper(counter: i64, topics: &[(&str, i32)]) -> TopicConfigSerializeWrapper {
        TopicConfigSerializeWrapper {
            data_version: DataVersion {
                counter,
                timestamp: 1,
                state_version: None,
            },
            topic_config_table: topics
                .iter()
                .map(|(name, queues)| {
                    (
                        (*name).to_owned(),
                        TopicConfig {
                            topic_name: (*name).to_owned(),
                            read_queue_nums: *queues,
                            write_queue_nums: *queues,
                            ..TopicConfig::default()
                        },
                    )
                })
                .collect(),
        }
    }

    fn registration(
        name: &str,
        addr: &str,
        id: i64,
        topics: TopicConfigSerializeWrapper,
    ) -> Registration {
        Registration {
            cluster_name: "DefaultCluster".into(),
            broker_name: name.into(),
            broker_addr: addr.into(),
            broker_id: id,
            ha_server_addr: format!("{addr}-ha"),
            topics,
            channel_id: Some(id as u64 + 100),
        }
    }

    #[test]
    fn masters_publish_routes_and_slaves_learn_their_master() {
        let mut table = RouteTable::new();
        table.register_broker(
            registration("broker-a", "10.0.0.1:10911", 0, wrapper(1, &[("T", 4)])),
            0,
        );
        let reply = table.register_broker(
            registration("broker-a", "10.0.0.2:10911", 1, wrapper(1, &[("T", 8)])),
            0,
        );
        assert_eq!(reply.master_addr.as_deref(), Some("10.0.0.1:10911"));
        assert_eq!(reply.ha_server_addr.as_deref(), Some("10.0.0.1:10911-ha"));
        let route = table.topic_route("T").expect("routed");
        assert_eq!(route.queue_datas.len(), 1);
        assert_eq!(
            route.queue_datas[0].write_queue_nums, 4,
            "a slave's topic table does not change routes"
        );
        assert_eq!(route.broker_datas[0].broker_addrs.len(), 2);
        assert!(table.topic_route("Other").is_none());
    }

    #[test]
    fn a_deposed_master_cannot_take_id_0_back_from_a_newer_epoch() {
        let mut table = RouteTable::new();
        let epoch = |epoch: i64| {
            let mut topics = wrapper(1, &[("T", 4)]);
            topics.data_version.state_version = Some(epoch);
            topics
        };
        table.register_broker(registration("broker-a", "a:1", 0, epoch(1)), 0);
        // The slave elected at epoch 2 takes id 0.
        table.register_broker(registration("broker-a", "b:1", 0, epoch(2)), 10);
        // The old master, cut off from the controllers, still registers as master at epoch 1.
        let reply = table.register_broker(registration("broker-a", "a:1", 0, epoch(1)), 20);
        assert_eq!(reply, RegistrationReply::default());
        let route = table.topic_route("T").expect("routed");
        assert_eq!(
            route.broker_datas[0]
                .broker_addrs
                .get(&0)
                .map(String::as_str),
            Some("b:1")
        );
        // Once it follows the new master it registers as a slave and is listed again.
        let reply = table.register_broker(registration("broker-a", "a:1", 1, epoch(2)), 30);
        assert_eq!(reply.master_addr.as_deref(), Some("b:1"));
        // Without state versions (4.x brokers) the latest registration still wins.
        table.register_broker(registration("broker-c", "c:1", 0, wrapper(1, &[])), 40);
        table.register_broker(registration("broker-c", "d:1", 0, wrapper(1, &[])), 50);
        let info = table.cluster_info();
        assert_eq!(
            info.broker_addr_table["broker-c"]
                .broker_addrs
                .get(&0)
                .map(String::as_str),
            Some("d:1")
        );
    }

    #[test]
    fn routes_update_only_when_the_data_version_changes() {
        let mut table = RouteTable::new();
        table.register_broker(
            registration("broker-a", "a:1", 0, wrapper(1, &[("T", 4)])),
            0,
        );
        table.register_broker(
            registration("broker-a", "a:1", 0, wrapper(1, &[("T", 4), ("U", 2)])),
            10,
        );
        assert!(
            table.topic_route("U").is_none(),
            "same version: the table is not reread"
        );
        table.register_broker(
            registration("broker-a", "a:1", 0, wrapper(2, &[("T", 4), ("U", 2)])),
            20,
        );
        assert!(table.topic_route("U").is_some());
        assert!(!table.data_version_changed(
            "a:1",
            &DataVersion {
                counter: 2,
                timestamp: 1,
                state_version: None
            }
        ));
    }

    #[test]
    fn expiry_and_closed_channels_remove_brokers_and_their_routes() {
        let mut table = RouteTable::new();
        table.register_broker(
            registration("broker-a", "a:1", 0, wrapper(1, &[("T", 4)])),
            0,
        );
        table.register_broker(
            registration("broker-b", "b:1", 0, wrapper(1, &[("T", 2)])),
            100_000,
        );
        assert_eq!(
            table.expire_inactive(130_000, 120_000),
            vec!["a:1".to_owned()]
        );
        let route = table.topic_route("T").expect("broker-b still serves T");
        assert_eq!(route.broker_datas.len(), 1);
        assert!(table.unregister_broker("b:1"));
        assert!(!table.unregister_broker("b:1"), "only once");
        assert!(table.topic_route("T").is_none());
        assert!(table.cluster_info().cluster_addr_table.is_empty());
    }

    #[test]
    fn a_master_keeps_routes_while_its_slave_leaves() {
        let mut table = RouteTable::new();
        table.register_broker(
            registration("broker-a", "a:1", 0, wrapper(1, &[("T", 4)])),
            0,
        );
        table.register_broker(
            registration("broker-a", "a:2", 1, wrapper(1, &[("T", 4)])),
            0,
        );
        assert_eq!(table.channel_closed(101), vec!["a:2".to_owned()]);
        let route = table.topic_route("T").expect("master still serves");
        assert_eq!(route.broker_datas[0].broker_addrs.len(), 1);
        assert_eq!(table.set_write_permission("broker-a", false), 1);
        assert_eq!(
            table.topic_route("T").expect("routed").queue_datas[0].perm,
            perm::READ
        );
    }
}
