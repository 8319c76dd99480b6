//! The message log as the broker's services see it: the one door every message goes through
//! into the store. What follows an append happens here, once, for every caller — sends,
//! retries, transactions, POP revives, due timer and delay-level messages, the progress stream
//! and system events: put statistics (for client traffic), replication woken, the timer
//! service woken for a timer message, and held pulls of every queue written woken once the
//! messages are durable. (Apache RocketMQ spreads this over `DefaultMessageStore.putMessage`,
//! `ReputMessageService` and the HA service's own wake-ups.)

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tidemark_protocol::message::property;
use tidemark_store::{
    Appended, Durable, MessageStore, NewMessage, StoreError, SCHEDULE_TOPIC, TIMER_TOPIC,
};

use crate::broker_stats::BrokerStats;
use crate::ha_progress::HaState;
use crate::live_config::LiveConfig;
use crate::long_poll::HeldPulls;
use crate::role::Role;
use crate::stats::MessageKind;
use tokio::sync::Notify;

mod reads;
mod upkeep;

/// Runs `work` on the blocking pool; a task that panicked reports as an I/O failure of `op`.
pub(crate) async fn off_the_workers<T: Send + 'static>(
    store: &Arc<MessageStore>,
    op: &'static str,
    work: impl FnOnce(&MessageStore) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || work(&store))
        .await
        .map_err(|failure| StoreError::io(op, "", std::io::Error::other(failure)))?
}

/// Whose messages an append stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Messages clients read: counted in the put statistics and their topics' traffic.
    Traffic,
    /// Client traffic that arrived earlier and reaches its topic only now (a due timer or
    /// delay-level message, a transaction's resolution): counted like [`Origin::Traffic`],
    /// except as arriving, which it was when it was first stored.
    Due,
    /// The broker's own records (the progress stream, transaction op records, system events):
    /// replicated and readable like any other, but not client traffic, so not counted.
    Bookkeeping,
}

/// The broker's handle on the message log: the store and what every append must wake.
#[derive(Clone, Copy)]
pub struct MessageLog<'a> {
    /// The store, reached by services only through this type (`reads.rs`, `upkeep.rs`).
    store: &'a Arc<MessageStore>,
    pub(crate) stats: &'a BrokerStats,
    pub(crate) ha: &'a HaState,
    pub(crate) held_pulls: &'a HeldPulls,
    /// Wakes the timer service (`Timers::waker`).
    pub(crate) timer_wake: &'a Notify,
    pub(crate) role: &'a Role,
    pub(crate) live: &'a LiveConfig,
}

/// Messages now in the log. Held pulls learn of them when they are durable — await
/// [`Stored::durable`] (or [`Stored::durable_blocking`]) — or at once with
/// [`Stored::without_waiting`] for a record no reply depends on.
#[must_use = "held pulls learn of stored messages only through `durable` or `without_waiting`"]
pub(crate) struct Stored<'a> {
    log: MessageLog<'a>,
    appended: Vec<Appended>,
    durable: Durable,
    queues: Vec<(String, i32)>,
}

impl Stored<'_> {
    /// Where each message went, in order.
    pub(crate) fn appended(&self) -> &[Appended] {
        &self.appended
    }

    /// Waits (holding no thread) until the messages are durable, then wakes their readers.
    pub(crate) async fn durable(self) -> Result<Vec<Appended>, StoreError> {
        self.durable.await?;
        self.log.arrived(&self.queues);
        Ok(self.appended)
    }

    /// [`Stored::durable`] for callers on a blocking thread.
    pub(crate) fn durable_blocking(self) -> Result<Vec<Appended>, StoreError> {
        self.durable.wait()?;
        self.log.arrived(&self.queues);
        Ok(self.appended)
    }

    /// [`Stored::durable_blocking`], and on a master that waits for its slaves also replicated
    /// before readers learn of the messages: what a SYNC send's acknowledgement waits for,
    /// applied to a message the broker delivers itself (a due timer or delay-level message),
    /// so that no consumer takes one that a failover could lose. A slave that does not confirm
    /// within `slave_timeout` delays the delivery by that much, no more.
    pub(crate) fn replicated_blocking(self) -> Result<Vec<Appended>, StoreError> {
        self.durable.wait()?;
        if self.log.role.now().waits_for_slaves() {
            let end = self
                .appended
                .iter()
                .map(|one| one.commit_log_offset + u64::from(one.size))
                .max()
                .unwrap_or(0);
            let live = self.log.live.get();
            let waiting = self.log.ha.wait_replicated(
                end,
                self.log.store.commit_log_positions().1,
                live.ha_slave_fallbehind_max,
                std::time::Duration::from_millis(live.slave_timeout),
            );
            let _ = tokio::runtime::Handle::current().block_on(waiting);
        }
        self.log.arrived(&self.queues);
        Ok(self.appended)
    }

    /// Wakes the readers now, without waiting for durability.
    pub(crate) fn without_waiting(self) -> (Vec<Appended>, Durable) {
        self.log.arrived(&self.queues);
        (self.appended, self.durable)
    }
}

/// The message log for a background service: owns what [`MessageLog`] borrows, so the service
/// holds the log's parts rather than the broker.
#[derive(Clone)]
pub struct LogHandle {
    pub(crate) store: Arc<MessageStore>,
    pub(crate) stats: Arc<BrokerStats>,
    pub(crate) ha: Arc<HaState>,
    pub(crate) held_pulls: Arc<HeldPulls>,
    pub(crate) timer_wake: Arc<Notify>,
    pub(crate) role: Arc<Role>,
    pub(crate) live: Arc<LiveConfig>,
}

impl LogHandle {
    /// The door, for one operation.
    pub fn log(&self) -> MessageLog<'_> {
        MessageLog::new(
            &self.store,
            &self.stats,
            &self.ha,
            &self.held_pulls,
            &self.timer_wake,
            &self.role,
            &self.live,
        )
    }

    /// This broker's role now.
    pub fn role(&self) -> &Role {
        &self.role
    }
}

impl std::fmt::Debug for LogHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.log().fmt(f)
    }
}

impl std::fmt::Debug for MessageLog<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageLog")
            .field("positions", &self.store.commit_log_positions())
            .finish_non_exhaustive()
    }
}

impl<'a> MessageLog<'a> {
    /// The door over `store`, with what every append must count and wake.
    pub(crate) fn new(
        store: &'a Arc<MessageStore>,
        stats: &'a BrokerStats,
        ha: &'a HaState,
        held_pulls: &'a HeldPulls,
        timer_wake: &'a Notify,
        role: &'a Role,
        live: &'a LiveConfig,
    ) -> MessageLog<'a> {
        MessageLog {
            store,
            stats,
            ha,
            held_pulls,
            timer_wake,
            role,
            live,
        }
    }

    /// Appends `messages` (one topic and queue, or runs of them) and does what follows an
    /// append; the position in the log is taken when this returns.
    pub(crate) fn append(
        self,
        messages: &[NewMessage],
        origin: Origin,
    ) -> Result<Stored<'a>, StoreError> {
        let (appended, durable) = self.store.append_batch(messages)?;
        if origin != Origin::Bookkeeping {
            self.count(messages);
        }
        if origin == Origin::Traffic {
            self.count_arrivals(messages, &appended);
        }
        self.ha.notify_new_data();
        if messages.iter().any(|message| message.topic == TIMER_TOPIC) {
            self.timer_wake.notify_one();
        }
        let mut queues: Vec<(String, i32)> = Vec::new();
        for message in messages {
            if !queues
                .iter()
                .any(|(topic, queue)| *topic == message.topic && *queue == message.queue_id)
            {
                queues.push((message.topic.clone(), message.queue_id));
            }
        }
        Ok(Stored {
            log: self,
            appended,
            durable,
            queues,
        })
    }

    /// Appends client traffic and waits (holding no thread) until it is durable.
    pub(crate) async fn put(self, messages: Vec<NewMessage>) -> Result<Vec<Appended>, StoreError> {
        let started = Instant::now();
        let appended = self.append(&messages, Origin::Traffic)?.durable().await?;
        self.stats
            .store_latency
            .observe(started.elapsed().as_secs_f64());
        Ok(appended)
    }

    /// Delivers a message that became due (a timer or delay-level message) from a blocking
    /// thread: client traffic, readers told once it is durable and replicated
    /// ([`Stored::replicated_blocking`]).
    pub(crate) fn deliver_blocking(self, message: &NewMessage) -> Result<Appended, StoreError> {
        self.append(std::slice::from_ref(message), Origin::Due)?
            .replicated_blocking()?
            .pop()
            .ok_or(StoreError::Closed)
    }

    /// Wakes the pulls held on `queues`, and the POP requests held on their topics — behind a
    /// read fence, once the fence passes what was just written.
    fn arrived(&self, queues: &[(String, i32)]) {
        let written_end = self.store.commit_log_positions().1;
        for (topic, queue_id) in queues {
            self.held_pulls.notify(topic, *queue_id, written_end);
        }
    }

    /// What clients sent, by the topic and kind they sent it as, with each record's size.
    fn count_arrivals(&self, messages: &[NewMessage], appended: &[Appended]) {
        let arrivals: Vec<(&str, MessageKind, u64)> = messages
            .iter()
            .zip(appended)
            .filter_map(|(message, stored)| {
                arrival(message).map(|(topic, kind)| (topic, kind, u64::from(stored.size)))
            })
            .collect();
        self.stats.traffic.arrived(&arrivals);
    }

    /// The put statistics: the total, and per topic the messages and bytes stored and the
    /// redeliveries (retry and dead-letter topics, and delayed messages bound for them).
    fn count(&self, messages: &[NewMessage]) {
        let stats = self.stats;
        stats
            .messages_put_total
            .fetch_add(messages.len() as u64, Ordering::Relaxed);
        // A batch is one topic's (or a few runs of one topic): one count per run.
        for run in messages.chunk_by(|a, b| a.topic == b.topic) {
            let bytes = run.iter().map(|message| message.body.len() as u64).sum();
            let topic = run[0].topic.as_str();
            stats.traffic.stored(topic, run.len() as u64, bytes);
            if is_redelivery(topic) {
                stats.traffic.redelivered(topic, run.len() as u64);
                if let Some(group) = topic.strip_prefix("%DLQ%") {
                    // Each dead letter by the topic it was first sent to.
                    for message in run {
                        let origin = message.properties.get(property::RETRY_TOPIC);
                        stats.traffic.dead_lettered(group, origin.unwrap_or(""));
                    }
                }
            } else if topic == SCHEDULE_TOPIC || topic == TIMER_TOPIC {
                // A delayed message: where it goes once its delay ends.
                for message in run {
                    if let Some(real) = message
                        .properties
                        .get(property::REAL_TOPIC)
                        .filter(|real| is_redelivery(real))
                    {
                        stats.traffic.redelivered(real, 1);
                    }
                }
            }
        }
    }
}

/// The topic a client sent a message to and its kind, for RocketMQ 5's incoming-message
/// metrics: a delayed message counts under its real topic, a transaction's half too; retries
/// and dead letters are not arrivals (`None`).
fn arrival(message: &NewMessage) -> Option<(&str, MessageKind)> {
    let real = || message.properties.get(property::REAL_TOPIC);
    let (topic, kind) = if message.topic == SCHEDULE_TOPIC || message.topic == TIMER_TOPIC {
        (real()?, MessageKind::Delay)
    } else if message.properties.get(property::TRANSACTION_PREPARED) == Some("true") {
        // A half: stored under the half topic, its real topic in a property, and no
        // transaction bits left in its flag (the property stays until it is committed).
        (real().unwrap_or(&message.topic), MessageKind::Transaction)
    } else if message.properties.get(SHARDING_KEY).is_some() {
        (message.topic.as_str(), MessageKind::Fifo)
    } else {
        (message.topic.as_str(), MessageKind::Normal)
    };
    (!is_redelivery(topic)).then_some((topic, kind))
}

/// The property a FIFO message's group travels in (RocketMQ 5's `__SHARDINGKEY`).
const SHARDING_KEY: &str = "__SHARDINGKEY";

/// A retry or dead-letter topic.
fn is_redelivery(topic: &str) -> bool {
    topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use bytes::Bytes;
    use proptest::prelude::*;
    use tidemark_protocol::message::Properties;
    use tidemark_storage::io::FsStorage;
    use tidemark_store::StoreConfig;

    use super::*;
    use crate::config::{BrokerConfig, BrokerRole};

    /// What a log needs, owned, as the broker's state owns it.
    struct Parts {
        store: Arc<MessageStore>,
        stats: BrokerStats,
        ha: HaState,
        held_pulls: HeldPulls,
        timer_wake: Notify,
        role: Role,
        live: LiveConfig,
        _dir: tempfile::TempDir,
    }

    impl Parts {
        fn new() -> Parts {
            let dir = tempfile::tempdir().expect("temp dir");
            let (store, _) =
                MessageStore::open(StoreConfig::new(dir.path().join("store"))).expect("store");
            Parts {
                store: Arc::new(store),
                stats: BrokerStats::default(),
                ha: HaState::default(),
                held_pulls: HeldPulls::default(),
                timer_wake: Notify::new(),
                role: Role::new(BrokerRole::AsyncMaster, 0),
                live: LiveConfig::new(&BrokerConfig::default(), Arc::new(FsStorage), 0),
                _dir: dir,
            }
        }

        fn log(&self) -> MessageLog<'_> {
            MessageLog {
                store: &self.store,
                stats: &self.stats,
                ha: &self.ha,
                held_pulls: &self.held_pulls,
                timer_wake: &self.timer_wake,
                role: &self.role,
                live: &self.live,
            }
        }
    }

    /// The kinds of message the broker's callers store.
    const KINDS: [(&str, Option<&str>); 6] = [
        ("Orders", None),
        ("%RETRY%billing", None),
        ("%DLQ%billing", None),
        (SCHEDULE_TOPIC, Some("%RETRY%billing")),
        (SCHEDULE_TOPIC, Some("Orders")),
        (TIMER_TOPIC, Some("Orders")),
    ];

    fn message(kind: usize, queue_id: i32, size: usize) -> NewMessage {
        let (topic, real) = KINDS[kind];
        let mut properties = Properties::default();
        if let Some(real) = real {
            properties.insert(property::REAL_TOPIC, real);
        }
        let host = "127.0.0.1:10911".parse().expect("address");
        NewMessage {
            topic: topic.to_owned(),
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: host,
            store_host: host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Bytes::from(vec![b'x'; size]),
            properties,
        }
    }

    #[test]
    fn a_transactions_half_and_a_fifo_message_arrive_as_their_kind() {
        let mut half = message(0, 0, 8);
        half.topic = "RMQ_SYS_TRANS_HALF_TOPIC".to_owned();
        half.properties.insert(property::REAL_TOPIC, "Payments");
        half.properties
            .insert(property::TRANSACTION_PREPARED, "true");
        assert_eq!(arrival(&half), Some(("Payments", MessageKind::Transaction)));
        let mut fifo = message(0, 0, 8);
        fifo.properties.insert(SHARDING_KEY, "order-7");
        assert_eq!(arrival(&fifo), Some(("Orders", MessageKind::Fifo)));
        assert_eq!(arrival(&message(1, 0, 8)), None, "a retry");
        assert_eq!(arrival(&message(3, 0, 8)), None, "a delayed retry");
    }

    /// Whether `notified` was woken already.
    fn woken(notified: std::pin::Pin<&mut impl std::future::Future>) -> bool {
        notified
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
            .is_ready()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever a caller stores, in whatever batches and for whomever: client traffic is
        /// counted (per topic, redeliveries by where they go) and bookkeeping is not; what
        /// clients sent counts as arriving (a delayed message under its real topic, retries
        /// and dead letters not), a due delivery does not;
        /// replication is woken by every append, the timer service by every timer message,
        /// and the pulls held on each queue written once the messages are durable.
        #[test]
        fn every_append_counts_and_wakes_the_same_way(
            batches in proptest::collection::vec(
                (
                    0..KINDS.len(),
                    0..3i32,
                    proptest::collection::vec(1usize..64, 1..5),
                    0..3u8,
                ),
                1..12,
            )
        ) {
            let parts = Parts::new();
            let mut put_total = 0u64;
            let mut stored: HashMap<String, (u64, u64)> = HashMap::new();
            let mut redelivered: HashMap<String, u64> = HashMap::new();
            let mut arrived: HashMap<(String, usize), u64> = HashMap::new();
            // A batch is one queue's (the store's rule for a single append).
            for (kind, queue, sizes, origin) in &batches {
                let messages: Vec<NewMessage> = sizes
                    .iter()
                    .map(|size| message(*kind, *queue, *size))
                    .collect();
                let held: Vec<_> = messages
                    .iter()
                    .map(|one| parts.held_pulls.hold(&one.topic, one.queue_id))
                    .collect();
                let replication = parts.ha.new_data();
                tokio::pin!(replication);
                replication.as_mut().enable();
                let timer_wake = parts.timer_wake.notified();
                tokio::pin!(timer_wake);
                timer_wake.as_mut().enable();
                let origin = [Origin::Traffic, Origin::Due, Origin::Bookkeeping][*origin as usize];
                let stored_now = parts.log().append(&messages, origin).expect("append");
                prop_assert!(woken(replication), "replication not woken");
                let has_timer = messages.iter().any(|one| one.topic == TIMER_TOPIC);
                prop_assert_eq!(woken(timer_wake), has_timer, "timer service woken");
                prop_assert_eq!(stored_now.appended().len(), messages.len());
                stored_now.durable_blocking().expect("durable");
                for mut waiter in held {
                    prop_assert!(waiter.try_recv().is_ok(), "a held pull was not woken");
                }
                if origin == Origin::Traffic {
                    for one in &messages {
                        let (topic, delayed) = match one.properties.get(property::REAL_TOPIC) {
                            Some(real) => (real, true),
                            None => (one.topic.as_str(), false),
                        };
                        if !is_redelivery(topic) {
                            let kind = if delayed { MessageKind::Delay } else { MessageKind::Normal };
                            *arrived.entry((topic.to_owned(), kind as usize)).or_default() += 1;
                        }
                    }
                }
                if origin != Origin::Bookkeeping {
                    put_total += messages.len() as u64;
                    for one in &messages {
                        let entry = stored.entry(one.topic.clone()).or_default();
                        entry.0 += 1;
                        entry.1 += one.body.len() as u64;
                        let bound = one.properties.get(property::REAL_TOPIC).unwrap_or(&one.topic);
                        if is_redelivery(bound) {
                            *redelivered.entry(bound.to_owned()).or_default() += 1;
                        }
                    }
                }
            }
            prop_assert_eq!(parts.stats.messages_put_total.load(Ordering::Relaxed), put_total);
            let table = parts.stats.traffic.snapshot();
            let counted: HashMap<String, (u64, u64)> = table
                .stored
                .iter()
                .map(|(topic, flow)| (topic.clone(), (flow.messages, flow.bytes)))
                .collect();
            prop_assert_eq!(counted, stored);
            prop_assert_eq!(table.redelivered, redelivered);
            let counted_arrivals: HashMap<(String, usize), u64> = table
                .arrived
                .iter()
                .flat_map(|(topic, kinds)| {
                    kinds.iter().enumerate().filter(|(_, one)| one.messages > 0).map(
                        move |(kind, one)| ((topic.clone(), kind), one.messages),
                    )
                })
                .collect();
            prop_assert_eq!(counted_arrivals, arrived);
        }
    }
}
