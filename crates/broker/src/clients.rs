//! Who is connected: consumer groups with their channels and subscriptions, producer groups,
//! and the orderly-consumption locks (RocketMQ's `ConsumerManager`, `ProducerManager` and
//! `RebalanceLockManager`). Each owns its lock; the broker sends notifications from what they
//! return. A client's liveness and a lock's age are measured on the monotonic clock, unlike
//! RocketMQ's: a wall clock stepped forward past the lock's time (60 s) or the expiry (120 s)
//! must not hand an orderly queue to a second consumer or drop every client at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tidemark_protocol::body::{
    Connection, ConsumeFromWhere, ConsumeType, ConsumerConnection, ConsumerData, MessageModel,
    MessageQueue, ProducerConnection, ProducerInfo, ProducerTableInfo, SubscriptionData,
};
use tidemark_protocol::LanguageCode;
use tidemark_remoting::Channel;

/// One client connection of a group.
#[derive(Debug, Clone)]
pub struct ClientChannel {
    pub channel: Channel,
    pub client_id: String,
    pub language: LanguageCode,
    pub version: i32,
    /// When its last heartbeat came, as shown to operators (wall clock).
    pub last_update_ms: i64,
    /// The same moment on the monotonic clock, which expiry reads.
    pub last_seen: Instant,
}

/// What RocketMQ 5's connection metrics tell connections apart by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ConnectionKind {
    /// The consumer's group; `None` for a producer.
    pub consumer_group: Option<String>,
    pub consume_type: Option<ConsumeType>,
    /// [`LanguageCode::name`].
    pub language: &'static str,
    /// The client's `MQVersion` ordinal.
    pub version: i32,
    /// A gRPC client's session (the gateway's in-process connection) rather than a socket.
    pub in_process: bool,
}

/// A consumer group as its heartbeats describe it.
#[derive(Debug, Clone)]
struct ConsumerGroup {
    pub channels: HashMap<u64, ClientChannel>,
    pub subscriptions: BTreeMap<String, SubscriptionData>,
    pub consume_type: ConsumeType,
    pub message_model: MessageModel,
    pub consume_from_where: ConsumeFromWhere,
    /// When the broker last asked each connection for its subscriptions (see
    /// [`ClientRegistry::member_to_ask`]).
    subscriptions_asked_ms: HashMap<u64, i64>,
}

/// How often one connection is asked for its subscriptions at most: a client that cannot
/// answer is not asked again on every pull it retries.
pub const SUBSCRIPTION_ASK_INTERVAL_MS: i64 = 3_000;

/// What a consumer group's heartbeats say about one topic: how it consumes, and its
/// subscription to the topic if it has one.
#[derive(Debug, Clone)]
pub struct GroupSubscription {
    pub message_model: MessageModel,
    pub subscription: Option<SubscriptionData>,
    /// Whether the group subscribes to anything (an assign-mode lite pull consumer does not).
    pub subscribes_anything: bool,
}

/// Connected clients. Owns its lock; every operation is atomic and returns copies.
#[derive(Debug, Default)]
pub struct ClientRegistry {
    inner: Mutex<Clients>,
}

#[derive(Debug, Default)]
struct Clients {
    consumers: HashMap<String, ConsumerGroup>,
    producers: HashMap<String, HashMap<u64, ClientChannel>>,
}

impl ClientRegistry {
    fn lock(&self) -> MutexGuard<'_, Clients> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a consumer's heartbeat; returns whether the group's set of clients or
    /// subscriptions changed (members are then told to rebalance).
    pub fn register_consumer(&self, data: &ConsumerData, client: ClientChannel) -> bool {
        self.lock().register_consumer(data, client)
    }

    /// Removes one channel from a consumer group; returns whether it was there.
    pub fn unregister_consumer(&self, group: &str, channel_id: u64) -> bool {
        self.lock().unregister_consumer(group, channel_id)
    }

    pub fn register_producer(&self, group: &str, client: ClientChannel) {
        self.lock().register_producer(group, client)
    }

    pub fn unregister_producer(&self, group: &str, channel_id: u64) {
        self.lock().unregister_producer(group, channel_id)
    }

    /// An open channel of a producer of `group`, a different one on each call while the group
    /// has several (RocketMQ's `ProducerManager.getAvailableChannel`); `None` when none is
    /// online.
    pub fn producer_channel(&self, group: &str, turn: usize) -> Option<Channel> {
        let clients = self.lock();
        let mut open: Vec<&ClientChannel> = clients
            .producers
            .get(group)?
            .values()
            .filter(|client| !client.channel.is_closed())
            .collect();
        if open.is_empty() {
            return None;
        }
        open.sort_by_key(|client| client.channel.id());
        Some(open[turn % open.len()].channel.clone())
    }

    /// The connection of consumer `client_id` in `group`, if online.
    pub fn consumer_channel(&self, group: &str, client_id: &str) -> Option<ClientChannel> {
        self.lock()
            .consumers
            .get(group)?
            .channels
            .values()
            .find(|client| client.client_id == client_id && !client.channel.is_closed())
            .cloned()
    }

    /// GET_PRODUCER_CONNECTION_LIST's body; `None` when no producer of the group is online.
    pub fn producer_connection(&self, group: &str) -> Option<ProducerConnection> {
        let clients = self.lock();
        let producers = clients
            .producers
            .get(group)
            .filter(|group| !group.is_empty())?;
        let mut connection_set: Vec<Connection> = producers
            .values()
            .map(|client| Connection {
                client_addr: client.channel.peer_addr().to_string(),
                client_id: client.client_id.clone(),
                language: client.language.name().to_owned(),
                version: client.version,
            })
            .collect();
        connection_set.sort_by(|a, b| a.client_id.cmp(&b.client_id));
        Some(ProducerConnection { connection_set })
    }

    /// GET_ALL_PRODUCER_INFO's body: every online producer channel, by group.
    pub fn producer_table(&self) -> ProducerTableInfo {
        let clients = self.lock();
        let data = clients
            .producers
            .iter()
            .filter(|(_, channels)| !channels.is_empty())
            .map(|(group, channels)| {
                let mut infos: Vec<ProducerInfo> = channels
                    .values()
                    .map(|client| ProducerInfo {
                        client_id: client.client_id.clone(),
                        remote_ip: client.channel.peer_addr().to_string(),
                        language: client.language.name().to_owned(),
                        version: client.version,
                        last_update_timestamp: client.last_update_ms,
                    })
                    .collect();
                infos.sort_by(|a, b| a.client_id.cmp(&b.client_id));
                (group.clone(), infos)
            })
            .collect();
        ProducerTableInfo { data }
    }

    /// Online connections per group: (`"producer"` or `"consumer"`, group, connections).
    pub fn group_connections(&self) -> Vec<(&'static str, String, usize)> {
        let clients = self.lock();
        let producers = clients
            .producers
            .iter()
            .filter(|(_, channels)| !channels.is_empty())
            .map(|(group, channels)| ("producer", group.clone(), channels.len()));
        let consumers = clients
            .consumers
            .iter()
            .filter(|(_, entry)| !entry.channels.is_empty())
            .map(|(group, entry)| ("consumer", group.clone(), entry.channels.len()));
        let mut all: Vec<_> = producers.chain(consumers).collect();
        all.sort();
        all
    }

    /// Forgets a closed channel everywhere; returns the consumer groups it belonged to.
    pub fn channel_closed(&self, channel_id: u64) -> Vec<String> {
        self.lock().channel_closed(channel_id)
    }

    /// Online connections counted by the client's kind, as RocketMQ 5's connection metrics
    /// count them: producers across their groups, consumers per group.
    pub fn connection_kinds(&self) -> BTreeMap<ConnectionKind, usize> {
        self.lock().connection_kinds()
    }

    /// Drops channels silent for `timeout`; returns (group, channel) of removed consumers.
    pub fn expire(&self, now: Instant, timeout: Duration) -> Vec<(String, Channel)> {
        self.lock().expire(now, timeout)
    }

    /// How an online group consumes `topic`; `None` when no client of the group is online.
    pub fn group_subscription(&self, group: &str, topic: &str) -> Option<GroupSubscription> {
        let clients = self.lock();
        let entry = clients.consumers.get(group)?;
        Some(GroupSubscription {
            message_model: entry.message_model,
            subscription: entry.subscriptions.get(topic).cloned(),
            subscribes_anything: !entry.subscriptions.is_empty(),
        })
    }

    /// The online groups that subscribe to `topic`.
    pub fn groups_subscribing(&self, topic: &str) -> Vec<String> {
        let clients = self.lock();
        let mut groups: Vec<String> = clients
            .consumers
            .iter()
            .filter(|(_, group)| group.subscriptions.contains_key(topic))
            .map(|(name, _)| name.clone())
            .collect();
        groups.sort();
        groups
    }

    /// Client ids of a group, sorted (what rebalancing clients expect).
    pub fn consumer_ids(&self, group: &str) -> Vec<String> {
        self.lock().consumer_ids(group)
    }

    /// Whether the connection belongs to a consumer of the group (its heartbeats said so).
    pub fn is_member(&self, group: &str, channel_id: u64) -> bool {
        self.lock()
            .consumers
            .get(group)
            .is_some_and(|entry| entry.channels.contains_key(&channel_id))
    }

    pub fn group_channels(&self, group: &str) -> Vec<Channel> {
        self.lock().group_channels(group)
    }

    /// The group's online clients.
    pub fn group_clients(&self, group: &str) -> Vec<ClientChannel> {
        self.lock()
            .consumers
            .get(group)
            .map(|group| group.channels.values().cloned().collect())
            .unwrap_or_default()
    }

    /// GET_CONSUMER_CONNECTION_LIST's body; `None` when the group has no client online.
    pub fn consumer_connection(&self, group: &str) -> Option<ConsumerConnection> {
        self.lock().consumer_connection(group)
    }

    /// The member of `group` behind `channel_id`, if the broker may ask it for its
    /// subscriptions now (once per [`SUBSCRIPTION_ASK_INTERVAL_MS`]); the ask is recorded.
    pub fn member_to_ask(
        &self,
        group: &str,
        channel_id: u64,
        now_ms: i64,
    ) -> Option<ClientChannel> {
        let mut clients = self.lock();
        let entry = clients.consumers.get_mut(group)?;
        let member = entry.channels.get(&channel_id)?.clone();
        let asked = entry
            .subscriptions_asked_ms
            .entry(channel_id)
            .or_insert(i64::MIN);
        if now_ms.saturating_sub(*asked) < SUBSCRIPTION_ASK_INTERVAL_MS {
            return None;
        }
        *asked = now_ms;
        Some(member)
    }

    /// Takes the subscriptions a member of `group` reported about itself where they are newer
    /// than the group's, by the rule a heartbeat follows; only for topics the group already
    /// subscribes to (a heartbeat adds and drops topics). Returns how many were taken.
    pub fn refresh_subscriptions(
        &self,
        group: &str,
        channel_id: u64,
        reported: &[SubscriptionData],
    ) -> usize {
        let mut clients = self.lock();
        let Some(entry) = clients.consumers.get_mut(group) else {
            return 0;
        };
        if !entry.channels.contains_key(&channel_id) {
            return 0;
        }
        let mut taken = 0;
        for subscription in reported {
            if let Some(held) = entry.subscriptions.get_mut(&subscription.topic) {
                if held.sub_version < subscription.sub_version {
                    *held = subscription.clone();
                    taken += 1;
                }
            }
        }
        taken
    }
}

impl Clients {
    /// Registers a consumer's heartbeat; returns whether the group's set of clients or
    /// subscriptions changed (members are then told to rebalance).
    fn register_consumer(&mut self, data: &ConsumerData, client: ClientChannel) -> bool {
        let group = self
            .consumers
            .entry(data.group_name.clone())
            .or_insert_with(|| ConsumerGroup {
                channels: HashMap::new(),
                subscriptions: BTreeMap::new(),
                consume_type: data.consume_type,
                message_model: data.message_model,
                consume_from_where: data.consume_from_where,
                subscriptions_asked_ms: HashMap::new(),
            });
        group.consume_type = data.consume_type;
        group.message_model = data.message_model;
        group.consume_from_where = data.consume_from_where;
        let id = client.channel.id();
        let new_client = match group.channels.get_mut(&id) {
            Some(existing) => {
                let changed = existing.client_id != client.client_id;
                *existing = client;
                changed
            }
            None => {
                group.channels.insert(id, client);
                true
            }
        };
        let mut subscriptions_changed = false;
        for subscription in &data.subscription_data_set {
            match group.subscriptions.get(&subscription.topic) {
                Some(old) if old.sub_version >= subscription.sub_version => {}
                Some(_) => {
                    group
                        .subscriptions
                        .insert(subscription.topic.clone(), subscription.clone());
                }
                None => {
                    group
                        .subscriptions
                        .insert(subscription.topic.clone(), subscription.clone());
                    subscriptions_changed = true;
                }
            }
        }
        let before = group.subscriptions.len();
        group.subscriptions.retain(|topic, _| {
            data.subscription_data_set
                .iter()
                .any(|subscription| subscription.topic == *topic)
        });
        subscriptions_changed |= group.subscriptions.len() != before;
        new_client || subscriptions_changed
    }

    /// Removes one channel from a consumer group; returns whether it was there.
    fn unregister_consumer(&mut self, group: &str, channel_id: u64) -> bool {
        let Some(entry) = self.consumers.get_mut(group) else {
            return false;
        };
        let removed = entry.channels.remove(&channel_id).is_some();
        entry.subscriptions_asked_ms.remove(&channel_id);
        if entry.channels.is_empty() {
            self.consumers.remove(group);
        }
        removed
    }

    fn register_producer(&mut self, group: &str, client: ClientChannel) {
        self.producers
            .entry(group.to_owned())
            .or_default()
            .insert(client.channel.id(), client);
    }

    fn unregister_producer(&mut self, group: &str, channel_id: u64) {
        if let Some(channels) = self.producers.get_mut(group) {
            channels.remove(&channel_id);
            if channels.is_empty() {
                self.producers.remove(group);
            }
        }
    }

    /// Online connections counted by the client's kind, as RocketMQ 5's connection metrics
    /// count them: producers across their groups, consumers per group.
    fn connection_kinds(&self) -> BTreeMap<ConnectionKind, usize> {
        let clients = self;
        let mut counted = BTreeMap::new();
        let kind =
            |client: &ClientChannel, consumer: Option<(&String, ConsumeType)>| ConnectionKind {
                consumer_group: consumer.map(|(group, _)| group.clone()),
                consume_type: consumer.map(|(_, consume_type)| consume_type),
                language: client.language.name(),
                version: client.version,
                in_process: client.channel.is_in_process(),
            };
        for channels in clients.producers.values() {
            for client in channels.values() {
                *counted.entry(kind(client, None)).or_default() += 1;
            }
        }
        for (group, entry) in &clients.consumers {
            for client in entry.channels.values() {
                *counted
                    .entry(kind(client, Some((group, entry.consume_type))))
                    .or_default() += 1;
            }
        }
        counted
    }

    /// Forgets a closed channel everywhere; returns the consumer groups it belonged to.
    fn channel_closed(&mut self, channel_id: u64) -> Vec<String> {
        let groups: Vec<String> = self
            .consumers
            .iter()
            .filter(|(_, group)| group.channels.contains_key(&channel_id))
            .map(|(name, _)| name.clone())
            .collect();
        for group in &groups {
            self.unregister_consumer(group, channel_id);
        }
        let producers: Vec<String> = self.producers.keys().cloned().collect();
        for group in producers {
            self.unregister_producer(&group, channel_id);
        }
        groups
    }

    /// Drops channels silent for `timeout`; returns (group, channel) of removed consumers.
    fn expire(&mut self, now: Instant, timeout: Duration) -> Vec<(String, Channel)> {
        let alive =
            |client: &ClientChannel| now.saturating_duration_since(client.last_seen) <= timeout;
        let mut expired = Vec::new();
        for (name, group) in &mut self.consumers {
            group.channels.retain(|_, client| {
                let keep = alive(client);
                if !keep {
                    expired.push((name.clone(), client.channel.clone()));
                }
                keep
            });
            let channels = &group.channels;
            group
                .subscriptions_asked_ms
                .retain(|id, _| channels.contains_key(id));
        }
        self.consumers.retain(|_, group| !group.channels.is_empty());
        for channels in self.producers.values_mut() {
            channels.retain(|_, client| alive(client));
        }
        self.producers.retain(|_, channels| !channels.is_empty());
        expired
    }

    /// Client ids of a group, sorted (what rebalancing clients expect).
    fn consumer_ids(&self, group: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .consumers
            .get(group)
            .map(|group| {
                group
                    .channels
                    .values()
                    .map(|client| client.client_id.clone())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids.dedup();
        ids
    }

    fn group_channels(&self, group: &str) -> Vec<Channel> {
        self.consumers
            .get(group)
            .map(|group| {
                group
                    .channels
                    .values()
                    .map(|client| client.channel.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// GET_CONSUMER_CONNECTION_LIST's body; `None` when the group has no client online.
    fn consumer_connection(&self, group: &str) -> Option<ConsumerConnection> {
        let entry = self.consumers.get(group)?;
        Some(ConsumerConnection {
            connection_set: entry
                .channels
                .values()
                .map(|client| Connection {
                    client_addr: client.channel.peer_addr().to_string(),
                    client_id: client.client_id.clone(),
                    language: client.language.name().to_owned(),
                    version: client.version,
                })
                .collect(),
            consume_from_where: Some(entry.consume_from_where),
            consume_type: Some(entry.consume_type),
            message_model: Some(entry.message_model),
            subscription_table: entry.subscriptions.clone(),
        })
    }
}

/// Locks of orderly consumers on queues: (group, queue) → owner client id and last renewal.
/// A lock not renewed for `lock_ttl` (60 s) is free again.
/// Owns its lock.
#[derive(Debug, Default)]
pub struct QueueLocks {
    locks: Mutex<HashMap<(String, MessageQueue), (String, Instant)>>,
}

impl QueueLocks {
    /// Locks (or renews) every queue free or already the client's; returns those it holds now.
    pub fn lock(
        &self,
        group: &str,
        client_id: &str,
        queues: &[MessageQueue],
        now: Instant,
        lock_ttl: Duration,
    ) -> Vec<MessageQueue> {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        let mut locked = Vec::new();
        for queue in queues {
            let key = (group.to_owned(), queue.clone());
            let free = match locks.get(&key) {
                None => true,
                Some((owner, renewed)) => {
                    owner == client_id || now.saturating_duration_since(*renewed) > lock_ttl
                }
            };
            if free {
                locks.insert(key, (client_id.to_owned(), now));
                locked.push(queue.clone());
            }
        }
        locked
    }

    /// Releases the client's locks on these queues.
    pub fn unlock(&self, group: &str, client_id: &str, queues: &[MessageQueue]) {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        for queue in queues {
            let key = (group.to_owned(), queue.clone());
            if locks.get(&key).is_some_and(|(owner, _)| owner == client_id) {
                locks.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member_of(group: &str, topic: &str, sub_version: i64) -> (ClientRegistry, Channel) {
        let registry = ClientRegistry::default();
        let channel = Channel::in_process(
            "127.0.0.1:20001".parse().expect("address"),
            "127.0.0.1:10911".parse().expect("address"),
        );
        let data = ConsumerData {
            group_name: group.to_owned(),
            subscription_data_set: vec![SubscriptionData::from_expression(topic, "*", sub_version)],
            ..ConsumerData::default()
        };
        let client = ClientChannel {
            channel: channel.clone(),
            client_id: "c1".to_owned(),
            language: LanguageCode::Java,
            version: 0,
            last_update_ms: 0,
            last_seen: Instant::now(),
        };
        registry.register_consumer(&data, client);
        (registry, channel)
    }

    #[test]
    fn a_member_is_asked_for_its_subscriptions_at_most_once_per_interval() {
        let (registry, channel) = member_of("g", "T", 1);
        assert!(registry.member_to_ask("g", channel.id(), 1_000).is_some());
        assert!(registry.member_to_ask("g", channel.id(), 2_000).is_none());
        let later = 1_000 + SUBSCRIPTION_ASK_INTERVAL_MS;
        assert!(registry.member_to_ask("g", channel.id(), later).is_some());
        assert!(
            registry
                .member_to_ask("g", channel.id() + 1, later)
                .is_none(),
            "no member"
        );
        assert!(
            registry
                .member_to_ask("other", channel.id(), later)
                .is_none(),
            "no group"
        );
    }

    #[test]
    fn only_newer_subscriptions_of_subscribed_topics_are_taken_from_a_member() {
        let (registry, channel) = member_of("g", "T", 5);
        let version = |registry: &ClientRegistry| {
            registry
                .group_subscription("g", "T")
                .and_then(|online| online.subscription)
                .map(|subscription| subscription.sub_version)
        };
        let report = |topic: &str, sub_version: i64| {
            vec![SubscriptionData::from_expression(topic, "*", sub_version)]
        };
        assert_eq!(
            registry.refresh_subscriptions("g", channel.id(), &report("T", 4)),
            0
        );
        assert_eq!(version(&registry), Some(5));
        assert_eq!(
            registry.refresh_subscriptions("g", channel.id() + 1, &report("T", 9)),
            0
        );
        assert_eq!(
            registry.refresh_subscriptions("g", channel.id(), &report("U", 9)),
            0
        );
        assert!(registry
            .group_subscription("g", "U")
            .and_then(|o| o.subscription)
            .is_none());
        assert_eq!(
            registry.refresh_subscriptions("g", channel.id(), &report("T", 7)),
            1
        );
        assert_eq!(version(&registry), Some(7));
    }

    #[test]
    fn locks_are_exclusive_until_they_expire() {
        let locks = QueueLocks::default();
        let queue = MessageQueue::new("T", "broker-a", 0);
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let lock = |client: &str, ms: u64| {
            locks
                .lock(
                    "g",
                    client,
                    std::slice::from_ref(&queue),
                    at(ms),
                    Duration::from_secs(60),
                )
                .len()
        };
        assert_eq!(lock("c1", 0), 1);
        assert_eq!(lock("c2", 1_000), 0);
        assert_eq!(lock("c1", 2_000), 1, "renewal");
        assert_eq!(lock("c2", 63_000), 1, "expired");
        locks.unlock("g", "c1", std::slice::from_ref(&queue));
        assert_eq!(lock("c1", 63_500), 0, "c1 cannot unlock c2's lock");
    }

    #[test]
    fn a_client_expires_after_its_time_on_the_monotonic_clock() {
        let (registry, _) = member_of("g", "T", 1);
        let seen = Instant::now();
        let timeout = Duration::from_secs(120);
        assert!(registry.expire(seen, timeout).is_empty());
        assert!(registry
            .expire(seen + Duration::from_secs(119), timeout)
            .is_empty());
        let expired = registry.expire(seen + Duration::from_secs(121), timeout);
        assert_eq!(expired.len(), 1, "silent for longer than the expiry");
    }
}
