//! What a topic route means to a client: the queues it may send to, the queues it may consume,
//! and where each broker name lives. Pure functions over [`TopicRouteData`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use tidemark_protocol::body::{perm, BrokerData, MessageQueue, TopicRouteData, MASTER_ID};

/// The queues a producer may send a topic's messages to (Java `TopicPublishInfo`).
#[derive(Debug, Default)]
pub struct PublishQueues {
    queues: Vec<MessageQueue>,
    /// Set when the name server holds an order configuration for the topic.
    pub order_topic: bool,
    next: AtomicUsize,
}

impl PublishQueues {
    /// Writable queues of masters, by broker name; for an order topic the name server's
    /// `brokerName:count;…` configuration decides instead.
    pub fn from_route(topic: &str, route: &TopicRouteData) -> Self {
        let mut queues = Vec::new();
        let order_conf = route
            .order_topic_conf
            .as_deref()
            .filter(|conf| !conf.is_empty());
        if let Some(conf) = order_conf {
            for item in conf.split(';') {
                let Some((broker_name, count)) = item.split_once(':') else {
                    continue;
                };
                let count: i32 = count.trim().parse().unwrap_or(0);
                queues.extend((0..count).map(|id| MessageQueue::new(topic, broker_name, id)));
            }
        } else {
            let mut datas: Vec<_> = route.queue_datas.iter().collect();
            datas.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
            for data in datas {
                if !perm::is_writeable(data.perm) {
                    continue;
                }
                let has_master = route.broker_datas.iter().any(|broker| {
                    broker.broker_name == data.broker_name && broker.master_addr().is_some()
                });
                if !has_master {
                    continue;
                }
                queues.extend(
                    (0..data.write_queue_nums)
                        .map(|id| MessageQueue::new(topic, data.broker_name.clone(), id)),
                );
            }
        }
        Self {
            queues,
            order_topic: order_conf.is_some(),
            next: AtomicUsize::new(start_index()),
        }
    }

    /// Queues of a topic the name server does not know yet, sent through the auto-create
    /// template topic (`TBW102`): at most `default_queue_count` queues per broker (bounded by
    /// the template's read queue count, as Java does).
    pub fn for_new_topic(topic: &str, template: &TopicRouteData, default_queue_count: i32) -> Self {
        let mut route = template.clone();
        for data in &mut route.queue_datas {
            let count = default_queue_count.min(data.read_queue_nums);
            data.write_queue_nums = count;
            data.read_queue_nums = count;
        }
        Self::from_route(topic, &route)
    }

    pub fn queues(&self) -> &[MessageQueue] {
        &self.queues
    }

    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Round robin over the queues, skipping `avoid_broker` (the broker of a failed attempt)
    /// when another broker has queues.
    pub fn select(&self, avoid_broker: Option<&str>) -> Option<&MessageQueue> {
        if self.queues.is_empty() {
            return None;
        }
        let len = self.queues.len();
        if let Some(avoid) = avoid_broker {
            for _ in 0..len {
                let queue = &self.queues[self.next.fetch_add(1, Ordering::Relaxed) % len];
                if queue.broker_name != avoid {
                    return Some(queue);
                }
            }
        }
        Some(&self.queues[self.next.fetch_add(1, Ordering::Relaxed) % len])
    }
}

/// Spreads the first queue chosen by different producers (Java starts from a random index).
fn start_index() -> usize {
    let nanos = tidemark_remoting::since_epoch().subsec_nanos();
    (nanos as usize) ^ (std::process::id() as usize)
}

/// Readable queues of a topic, sorted as every consumer of a group must sort them.
pub fn subscribe_queues(topic: &str, route: &TopicRouteData) -> Vec<MessageQueue> {
    let mut queues: Vec<MessageQueue> = route
        .queue_datas
        .iter()
        .filter(|data| perm::is_readable(data.perm))
        .flat_map(|data| {
            (0..data.read_queue_nums)
                .map(move |id| MessageQueue::new(topic, data.broker_name.clone(), id))
        })
        .collect();
    queues.sort();
    queues.dedup();
    queues
}

/// What merging a route changed in a [`BrokerAddressTable`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Merged {
    /// An address not known before.
    pub added: bool,
    /// Some broker name's addresses differ from before (a new master, say).
    pub changed: bool,
}

/// Broker addresses by broker name and broker id, merged from every route fetched.
#[derive(Debug, Default, Clone)]
pub struct BrokerAddressTable {
    brokers: BTreeMap<String, BTreeMap<i64, String>>,
}

impl BrokerAddressTable {
    /// Replaces what is known of each broker in `brokers` (a route is the current truth for the
    /// broker names it lists).
    pub fn merge(&mut self, brokers: &[BrokerData]) -> Merged {
        let mut merged = Merged::default();
        for broker in brokers {
            let before = self
                .brokers
                .insert(broker.broker_name.clone(), broker.broker_addrs.clone());
            merged.changed |= before.as_ref() != Some(&broker.broker_addrs);
            merged.added |= broker.broker_addrs.values().any(|addr| {
                !before
                    .as_ref()
                    .is_some_and(|old| old.values().any(|known| known == addr))
            });
        }
        merged
    }

    /// Keeps only broker names still present in some route.
    pub fn retain(&mut self, mut still_routed: impl FnMut(&str) -> bool) {
        self.brokers.retain(|name, _| still_routed(name));
    }

    pub fn master(&self, broker_name: &str) -> Option<&str> {
        self.brokers
            .get(broker_name)
            .and_then(|addrs| addrs.get(&MASTER_ID))
            .map(String::as_str)
    }

    /// The address of `broker_id`, else (unless `only_this`) any address of the broker name,
    /// master first (Java `findBrokerAddressInSubscribe`). The flag says whether it is a slave.
    pub fn for_subscribe(
        &self,
        broker_name: &str,
        broker_id: i64,
        only_this: bool,
    ) -> Option<(&str, bool)> {
        let addrs = self.brokers.get(broker_name)?;
        if let Some(addr) = addrs.get(&broker_id) {
            return Some((addr.as_str(), broker_id != MASTER_ID));
        }
        if only_this {
            return None;
        }
        addrs
            .iter()
            .next()
            .map(|(id, addr)| (addr.as_str(), *id != MASTER_ID))
    }

    /// Every known broker address (heartbeats go to all of them).
    pub fn all_addresses(&self) -> impl Iterator<Item = (&str, i64, &str)> {
        self.brokers.iter().flat_map(|(name, addrs)| {
            addrs
                .iter()
                .map(move |(id, addr)| (name.as_str(), *id, addr.as_str()))
        })
    }

    pub fn is_empty(&self) -> bool {
        self.brokers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_protocol::body::QueueData;

    fn route(brokers: &[(&str, bool, i32, i32)]) -> TopicRouteData {
        TopicRouteData {
            queue_datas: brokers
                .iter()
                .map(|(name, _, queues, perm)| QueueData {
                    broker_name: (*name).into(),
                    read_queue_nums: *queues,
                    write_queue_nums: *queues,
                    perm: *perm,
                    ..QueueData::default()
                })
                .collect(),
            broker_datas: brokers
                .iter()
                .map(|(name, has_master, _, _)| BrokerData {
                    broker_name: (*name).into(),
                    broker_addrs: if *has_master {
                        [(0, format!("{name}:10911")), (1, format!("{name}:10921"))].into()
                    } else {
                        [(1, format!("{name}:10921"))].into()
                    },
                    ..BrokerData::default()
                })
                .collect(),
            ..TopicRouteData::default()
        }
    }

    #[test]
    fn publish_queues_skip_read_only_and_masterless_brokers() {
        let route = route(&[
            ("b", true, 2, 6),
            ("a", true, 1, 6),
            ("c", true, 4, 4),
            ("d", false, 3, 6),
        ]);
        let publish = PublishQueues::from_route("T", &route);
        let names: Vec<_> = publish
            .queues()
            .iter()
            .map(|q| format!("{}{}", q.broker_name, q.queue_id))
            .collect();
        assert_eq!(names, ["a0", "b0", "b1"]);
    }

    #[test]
    fn order_topic_configuration_decides_the_queues() {
        let mut route = route(&[("a", true, 8, 6)]);
        route.order_topic_conf = Some("a:2;b:1".into());
        let publish = PublishQueues::from_route("T", &route);
        assert!(publish.order_topic);
        assert_eq!(publish.queues().len(), 3);
    }

    #[test]
    fn select_round_robins_and_avoids_the_failed_broker() {
        let publish =
            PublishQueues::from_route("T", &route(&[("a", true, 2, 6), ("b", true, 2, 6)]));
        let picks: Vec<_> = (0..4)
            .filter_map(|_| publish.select(None))
            .cloned()
            .collect();
        assert_eq!(
            picks
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            4
        );
        for _ in 0..10 {
            assert_eq!(
                publish.select(Some("a")).map(|q| q.broker_name.as_str()),
                Some("b")
            );
        }
        let single = PublishQueues::from_route("T", &route(&[("a", true, 2, 6)]));
        assert_eq!(
            single.select(Some("a")).map(|q| q.broker_name.as_str()),
            Some("a")
        );
    }

    #[test]
    fn new_topic_takes_at_most_the_default_queue_count() {
        let template = route(&[("a", true, 8, 7)]);
        let publish = PublishQueues::for_new_topic("New", &template, 4);
        assert_eq!(publish.queues().len(), 4);
        assert!(publish.queues().iter().all(|q| q.topic == "New"));
    }

    #[test]
    fn subscribe_queues_are_readable_and_sorted() {
        let queues = subscribe_queues("T", &route(&[("b", true, 2, 6), ("a", true, 1, 2)]));
        let names: Vec<_> = queues
            .iter()
            .map(|q| format!("{}{}", q.broker_name, q.queue_id))
            .collect();
        assert_eq!(names, ["b0", "b1"]);
    }

    #[test]
    fn merging_tells_a_moved_master_from_an_unchanged_route() {
        let mut table = BrokerAddressTable::default();
        let first = table.merge(&route(&[("a", true, 1, 6)]).broker_datas);
        assert_eq!(
            first,
            Merged {
                added: true,
                changed: true
            }
        );
        assert_eq!(
            table.merge(&route(&[("a", true, 1, 6)]).broker_datas),
            Merged::default()
        );
        // The slave took over: the same addresses, one of them now the master's.
        let mut failed_over = route(&[("a", true, 1, 6)]);
        failed_over.broker_datas[0].broker_addrs = [(0, "a:10921".to_owned())].into();
        assert_eq!(
            table.merge(&failed_over.broker_datas),
            Merged {
                added: false,
                changed: true
            }
        );
        assert_eq!(table.master("a"), Some("a:10921"));
    }

    #[test]
    fn subscribe_address_falls_back_to_any_address() {
        let mut table = BrokerAddressTable::default();
        table.merge(&route(&[("a", true, 1, 6), ("d", false, 1, 6)]).broker_datas);
        assert_eq!(table.for_subscribe("a", 0, true), Some(("a:10911", false)));
        assert_eq!(table.for_subscribe("a", 1, false), Some(("a:10921", true)));
        assert_eq!(table.for_subscribe("d", 0, true), None);
        assert_eq!(table.for_subscribe("d", 0, false), Some(("d:10921", true)));
        assert_eq!(table.master("d"), None);
    }
}
