//! The push consumer's engine: rebalance, per-queue pull loops, consumption and settlement.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use tidemark_protocol::body::{
    ConsumeFromWhere, ConsumeType, ConsumerData, MessageModel, MessageQueue, SubscriptionData,
    MASTER_ID,
};
use tidemark_protocol::headers::pull_sys_flag;
use tidemark_protocol::headers::{ConsumerSendMsgBackRequestHeader, PullMessageRequestHeader};
use tidemark_protocol::message::property;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::listener::{
    ConcurrentListener, ConsumeResult, OrderlyListener, OrderlyStatus, Settlement,
};
use super::ConsumerSettings;
use crate::clock::now_ms;
use crate::config::unique_instance_name;
use crate::error::{ClientError, Result};
use crate::instance::{
    lock, BrokerRequests, ClientInstance, InstanceOffsetBroker, PullStatus,
    CLIENT_INNER_PRODUCER_GROUP, PULL_SUSPEND, PULL_TIMEOUT_WHEN_SUSPENDED,
};
use crate::message::{retry_topic, Message, MessageExt, RETRY_TOPIC_PREFIX};
use crate::offset_store::{CommitDelivery, OffsetStore, OffsetTable, ReadOffsetType};
use crate::process_queue::ProcessQueue;
use crate::producer::{ProducerSettings, SendCore};
use crate::route::subscribe_queues;
use crate::BoxFuture;

/// Pause after a failed pull (`pullTimeDelayMillsWhenException`).
const PULL_DELAY_ON_ERROR: Duration = Duration::from_secs(3);
/// Pause while a queue is over its flow limits (`PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL`).
const PULL_DELAY_ON_FLOW_CONTROL: Duration = Duration::from_millis(50);
/// Pause while the consumer is suspended (`PULL_TIME_DELAY_MILLS_WHEN_SUSPEND`).
const PULL_DELAY_ON_PAUSE: Duration = Duration::from_secs(1);
/// Messages whose send-back failed are consumed again locally after this long.
const LOCAL_RETRY_DELAY: Duration = Duration::from_secs(5);
/// Orderly: how often queue locks are renewed (`REBALANCE_LOCK_INTERVAL`).
const LOCK_RENEW_INTERVAL: Duration = Duration::from_secs(20);
/// Default maximum deliveries of a concurrently consumed message (`maxReconsumeTimes` −1).
const DEFAULT_MAX_RECONSUME_TIMES: i32 = 16;

/// Pulled messages waiting for a lite pull consumer's `poll`, with the queue they came from.
pub(crate) type LiteBatch = (Arc<QueueSlot>, Vec<MessageExt>);

/// Where pulled messages go: the application's listener (push), or the poll buffer (lite pull).
#[derive(Clone)]
pub(crate) enum Listener {
    Concurrent(Arc<dyn ConcurrentListener>),
    Orderly(Arc<dyn OrderlyListener>),
    Lite(tokio::sync::mpsc::Sender<LiteBatch>),
}

impl Listener {
    fn is_orderly(&self) -> bool {
        matches!(self, Listener::Orderly(_))
    }

    fn is_lite(&self) -> bool {
        matches!(self, Listener::Lite(_))
    }
}

/// One assigned queue: its process queue and the token that stops its pull loop.
pub(crate) struct QueueSlot {
    pub(crate) queue: MessageQueue,
    pub(crate) process: Mutex<ProcessQueue>,
    cancel: CancellationToken,
    /// Orderly: one consume task per queue at a time.
    consume_lock: tokio::sync::Mutex<()>,
}

impl QueueSlot {
    fn new(queue: MessageQueue) -> Arc<Self> {
        Arc::new(Self {
            queue,
            process: Mutex::new(ProcessQueue::new(Instant::now())),
            cancel: CancellationToken::new(),
            consume_lock: tokio::sync::Mutex::new(()),
        })
    }

    pub(crate) fn is_dropped(&self) -> bool {
        lock(&self.process).is_dropped()
    }

    pub(crate) fn drop_queue(&self) {
        lock(&self.process).drop_queue();
        self.cancel.cancel();
    }
}

pub(crate) struct ConsumerCore {
    settings: ConsumerSettings,
    instance: Arc<ClientInstance>,
    offsets: OffsetStore,
    /// Subscribed topics (with the group's retry topic in clustering mode).
    subscriptions: BTreeMap<String, SubscriptionData>,
    queues: Mutex<BTreeMap<MessageQueue, Arc<QueueSlot>>>,
    listener: Listener,
    permits: Arc<Semaphore>,
    /// Sends messages back as ordinary messages when CONSUMER_SEND_MSG_BACK fails, and for
    /// orderly dead-lettering.
    sender: SendCore,
    rebalance_now: Notify,
    /// Set while an offset reset is being applied.
    paused: AtomicBool,
    /// Serialises rebalances (timer, notices, resets).
    rebalance_lock: tokio::sync::Mutex<()>,
    token: CancellationToken,
    /// Lite pull `assign` mode: the application picks the queues; no rebalance.
    manual_assignment: AtomicBool,
    /// What the instance's broker-request router points to (weakly).
    broker_target: OnceLock<Arc<dyn BrokerRequests>>,
}

impl std::fmt::Debug for ConsumerCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerCore")
            .field("group", &self.settings.group)
            .field("client_id", &self.instance.client_id())
            .finish_non_exhaustive()
    }
}

/// Lets the instance reach the consumer without keeping it alive.
struct BrokerRequestTarget(Weak<ConsumerCore>);

impl BrokerRequests for BrokerRequestTarget {
    fn consumer_ids_changed(&self, group: &str) {
        if let Some(core) = self.0.upgrade() {
            if core.settings.group == group {
                debug!(%group, "consumer ids changed; rebalancing");
                core.request_rebalance();
            }
        }
    }

    fn reset_offsets(
        &self,
        group: &str,
        topic: &str,
        offsets: BTreeMap<MessageQueue, i64>,
    ) -> BoxFuture<'static, ()> {
        let core = self.0.upgrade();
        let (group, topic) = (group.to_owned(), topic.to_owned());
        Box::pin(async move {
            if let Some(core) = core.filter(|core| core.settings.group == group) {
                // The broker sends this oneway; apply it off the connection's task.
                tokio::spawn(async move { core.reset_offsets(&topic, offsets).await });
            }
        })
    }
}

impl ConsumerCore {
    pub(crate) async fn start(settings: ConsumerSettings, listener: Listener) -> Result<Arc<Self>> {
        let broadcasting = settings.message_model == MessageModel::Broadcasting;
        let instance_name = settings.client.instance_name.clone().unwrap_or_else(|| {
            // Broadcasting consumers keep `DEFAULT` so their offset file is found again.
            if broadcasting {
                "DEFAULT".to_owned()
            } else {
                unique_instance_name()
            }
        });
        let instance = ClientInstance::new(settings.client.clone(), instance_name);

        let sub_version = now_ms();
        let mut subscriptions = BTreeMap::new();
        for (topic, expression) in &settings.subscriptions {
            subscriptions.insert(
                topic.clone(),
                SubscriptionData::from_expression(topic, expression, sub_version),
            );
        }
        // Push consumers in clustering mode also consume their retries; lite pull has none.
        if !broadcasting && !listener.is_lite() {
            let retry = retry_topic(&settings.group);
            subscriptions.insert(
                retry.clone(),
                SubscriptionData::from_expression(&retry, "*", sub_version),
            );
        }
        instance.register_consumer(ConsumerData {
            group_name: settings.group.clone(),
            consume_type: if listener.is_lite() {
                ConsumeType::ConsumeActively
            } else {
                ConsumeType::ConsumePassively
            },
            message_model: settings.message_model,
            consume_from_where: settings.consume_from_where,
            subscription_data_set: subscriptions.values().cloned().collect(),
            unit_mode: false,
        });
        instance.start().await?;

        let offsets = if broadcasting {
            let dir = settings
                .offset_store_dir
                .clone()
                .unwrap_or_else(default_offset_dir);
            let path = OffsetStore::default_local_path(&dir, instance.client_id(), &settings.group);
            OffsetStore::local_file(settings.group.clone(), path)
        } else {
            OffsetStore::remote(
                settings.group.clone(),
                Arc::new(InstanceOffsetBroker {
                    instance: instance.clone(),
                }),
            )
        };
        offsets.load()?;

        let mut inner_producer = ProducerSettings::new(CLIENT_INNER_PRODUCER_GROUP);
        inner_producer.client = settings.client.clone();
        let sender = SendCore::new(instance.clone(), inner_producer);
        let core = Arc::new(Self {
            permits: Arc::new(Semaphore::new(settings.consume_concurrency)),
            settings,
            offsets,
            subscriptions,
            queues: Mutex::new(BTreeMap::new()),
            listener,
            sender,
            rebalance_now: Notify::new(),
            paused: AtomicBool::new(false),
            rebalance_lock: tokio::sync::Mutex::new(()),
            token: instance.shutdown_token().child_token(),
            instance,
            manual_assignment: AtomicBool::new(false),
            broker_target: OnceLock::new(),
        });
        let target: Arc<dyn BrokerRequests> = Arc::new(BrokerRequestTarget(Arc::downgrade(&core)));
        // The router keeps a weak reference; the target lives as long as the consumer.
        core.instance.serve_broker_requests(Arc::downgrade(&target));
        let _ = core.broker_target.set(target);

        for topic in core.subscriptions.keys() {
            if let Err(error) = core.instance.update_route(topic).await {
                warn!(%topic, %error, "no route yet; the rebalance will retry");
            }
        }
        core.instance.send_heartbeats().await;
        core.spawn_services();
        core.instance
            .log_started("push consumer", &core.settings.group);
        Ok(core)
    }

    fn spawn_services(self: &Arc<Self>) {
        let core = Arc::downgrade(self);
        let token = self.token.clone();
        let interval = self.settings.rebalance_interval;
        tokio::spawn(async move {
            loop {
                let Some(strong) = core.upgrade() else { break };
                strong.rebalance().await;
                let notified = async { strong.rebalance_now.notified().await };
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(interval) => {}
                    _ = notified => {}
                }
            }
        });

        crate::every(
            self,
            self.token.clone(),
            self.settings.client.persist_offset_interval,
            |core| async move { core.persist_all(CommitDelivery::Oneway).await },
        );
        if self.listener.is_orderly() && self.is_clustering() {
            crate::every(
                self,
                self.token.clone(),
                LOCK_RENEW_INTERVAL,
                |core| async move { core.lock_all().await },
            );
        }
    }

    pub(crate) fn client_id(&self) -> &str {
        self.instance.client_id()
    }

    fn is_clustering(&self) -> bool {
        self.settings.message_model == MessageModel::Clustering
    }

    pub(crate) fn request_rebalance(&self) {
        self.rebalance_now.notify_one();
    }

    pub(crate) fn assigned_queues(&self) -> Vec<MessageQueue> {
        lock(&self.queues).keys().cloned().collect()
    }

    pub(crate) fn offset_snapshot(&self) -> OffsetTable {
        self.offsets.snapshot()
    }

    fn assigned_set(&self) -> BTreeSet<MessageQueue> {
        lock(&self.queues).keys().cloned().collect()
    }

    async fn persist_all(&self, delivery: CommitDelivery) {
        let assigned = self.assigned_set();
        if let Err(error) = self.offsets.persist_all(&assigned, delivery).await {
            warn!(group = %self.settings.group, %error, "persisting offsets failed");
        }
    }

    fn max_reconsume_times(&self) -> i32 {
        match self.settings.max_reconsume_times {
            Some(times) if times >= 0 => times,
            _ if self.listener.is_orderly() => i32::MAX,
            _ => DEFAULT_MAX_RECONSUME_TIMES,
        }
    }

    // --- rebalance ---------------------------------------------------------------------------

    async fn rebalance(self: &Arc<Self>) {
        if self.paused.load(Ordering::Acquire)
            || self.token.is_cancelled()
            || self.manual_assignment.load(Ordering::Acquire)
        {
            return;
        }
        let _serial = self.rebalance_lock.lock().await;
        for topic in self.subscriptions.keys() {
            if let Err(error) = self.rebalance_topic(topic).await {
                warn!(group = %self.settings.group, %topic, %error, "rebalance failed");
            }
        }
    }

    async fn rebalance_topic(self: &Arc<Self>, topic: &str) -> Result<()> {
        let Some(route) = self.instance.update_route(topic).await? else {
            if !topic.starts_with(RETRY_TOPIC_PREFIX) {
                warn!(group = %self.settings.group, %topic, "topic does not exist");
            }
            return Ok(());
        };
        let all = subscribe_queues(topic, &route);
        let mine: BTreeSet<MessageQueue> = if self.is_clustering() {
            let Some(addr) = route
                .broker_datas
                .iter()
                .find_map(|broker| {
                    broker
                        .master_addr()
                        .or_else(|| broker.broker_addrs.values().next().map(String::as_str))
                })
                .map(str::to_owned)
            else {
                return Ok(());
            };
            let consumers = self
                .instance
                .consumer_ids(&addr, &self.settings.group)
                .await?;
            self.settings
                .allocate_strategy
                .allocate(self.client_id(), &all, &consumers)
                .into_iter()
                .collect()
        } else {
            all.into_iter().collect()
        };
        self.update_queue_table(topic, mine).await;
        Ok(())
    }

    pub(crate) async fn update_queue_table(
        self: &Arc<Self>,
        topic: &str,
        mine: BTreeSet<MessageQueue>,
    ) {
        let now = Instant::now();
        let leaving: Vec<Arc<QueueSlot>> = lock(&self.queues)
            .values()
            .filter(|slot| slot.queue.topic == topic)
            .filter(|slot| {
                // A push queue not pulled for long has a stuck pull loop: restart it (Java
                // does; lite pull does not, its application may just not be polling).
                !mine.contains(&slot.queue)
                    || (!self.listener.is_lite() && lock(&slot.process).is_pull_expired(now))
            })
            .cloned()
            .collect();
        for slot in leaving {
            if self.release_queue(&slot).await {
                lock(&self.queues).remove(&slot.queue);
                info!(group = %self.settings.group, queue = ?slot.queue, "queue released");
            }
        }
        for queue in mine {
            if lock(&self.queues).contains_key(&queue) {
                continue;
            }
            let orderly_clustering = self.listener.is_orderly() && self.is_clustering();
            if orderly_clustering && !self.lock_one(&queue).await {
                debug!(?queue, "queue lock not granted; next rebalance tries again");
                continue;
            }
            // A value left over from an earlier assignment may be stale.
            self.offsets.remove(&queue);
            let start = match self.compute_start_offset(&queue).await {
                Ok(offset) => offset,
                Err(error) => {
                    warn!(?queue, %error, "cannot tell where to start; skipped this round");
                    continue;
                }
            };
            let slot = QueueSlot::new(queue.clone());
            if orderly_clustering {
                lock(&slot.process).set_locked(true, Instant::now());
            }
            lock(&self.queues).insert(queue.clone(), slot.clone());
            info!(group = %self.settings.group, ?queue, start, "queue assigned");
            let core = self.clone();
            tokio::spawn(async move { core.pull_loop(slot, start).await });
        }
    }

    /// Gives a queue up: stop it, persist its offset, forget it (Java
    /// `removeUnnecessaryMessageQueue`). Orderly queues are also unlocked at the broker.
    async fn release_queue(&self, slot: &Arc<QueueSlot>) -> bool {
        slot.drop_queue();
        let orderly_clustering = self.listener.is_orderly() && self.is_clustering();
        let _consuming = if orderly_clustering {
            // Wait briefly for a batch in progress so its commit is not lost.
            match tokio::time::timeout(Duration::from_secs(1), slot.consume_lock.lock()).await {
                Ok(guard) => Some(guard),
                Err(_) => return false,
            }
        } else {
            None
        };
        if let Err(error) = self.offsets.persist(&slot.queue).await {
            warn!(queue = ?slot.queue, %error, "persisting a released queue's offset failed");
        }
        self.offsets.remove(&slot.queue);
        if orderly_clustering {
            if let Some(addr) = self.instance.master_addr(&slot.queue.broker_name) {
                let _ = self
                    .instance
                    .unlock_queues(&addr, &self.settings.group, vec![slot.queue.clone()])
                    .await;
            }
        }
        true
    }

    /// Where a newly assigned queue starts (Java `computePullFromWhereWithException`).
    async fn compute_start_offset(&self, queue: &MessageQueue) -> Result<i64> {
        let from = if self.listener.is_lite() {
            ReadOffsetType::MemoryThenStore
        } else {
            ReadOffsetType::Store
        };
        if let Some(offset) = self.offsets.read(queue, from).await? {
            if offset >= 0 {
                return Ok(offset);
            }
        }
        let retry = queue.topic.starts_with(RETRY_TOPIC_PREFIX);
        match self.settings.consume_from_where {
            ConsumeFromWhere::ConsumeFromFirstOffset => Ok(0),
            ConsumeFromWhere::ConsumeFromTimestamp if !retry => {
                let addr = self.broker_addr(queue).await?;
                self.instance
                    .search_offset(&addr, queue, self.settings.consume_timestamp_ms)
                    .await
            }
            ConsumeFromWhere::ConsumeFromTimestamp => {
                let addr = self.broker_addr(queue).await?;
                self.instance.max_offset(&addr, queue).await
            }
            _ if retry => Ok(0),
            _ => {
                let addr = self.broker_addr(queue).await?;
                self.instance.max_offset(&addr, queue).await
            }
        }
    }

    async fn broker_addr(&self, queue: &MessageQueue) -> Result<String> {
        Ok(self
            .instance
            .subscribe_addr_refreshing(&queue.topic, &queue.broker_name, MASTER_ID)
            .await?
            .0)
    }

    // --- orderly locks -----------------------------------------------------------------------

    async fn lock_one(&self, queue: &MessageQueue) -> bool {
        let Some(addr) = self.instance.master_addr(&queue.broker_name) else {
            return false;
        };
        match self
            .instance
            .lock_queues(&addr, &self.settings.group, vec![queue.clone()])
            .await
        {
            Ok(locked) => locked.contains(queue),
            Err(error) => {
                debug!(?queue, %error, "lock request failed");
                false
            }
        }
    }

    async fn lock_all(&self) {
        let mut by_broker: BTreeMap<String, Vec<Arc<QueueSlot>>> = BTreeMap::new();
        for slot in lock(&self.queues).values() {
            by_broker
                .entry(slot.queue.broker_name.clone())
                .or_default()
                .push(slot.clone());
        }
        for (broker, slots) in by_broker {
            let Some(addr) = self.instance.master_addr(&broker) else {
                continue;
            };
            let queues = slots.iter().map(|slot| slot.queue.clone()).collect();
            match self
                .instance
                .lock_queues(&addr, &self.settings.group, queues)
                .await
            {
                Ok(locked) => {
                    let now = Instant::now();
                    for slot in slots {
                        lock(&slot.process).set_locked(locked.contains(&slot.queue), now);
                    }
                }
                Err(error) => debug!(%broker, %error, "lock renewal failed"),
            }
        }
    }

    // --- pulling -----------------------------------------------------------------------------

    async fn pull_loop(self: Arc<Self>, slot: Arc<QueueSlot>, start: i64) {
        let queue = slot.queue.clone();
        let mut next_offset = start;
        let mut broker_id = MASTER_ID;
        let orderly = self.listener.is_orderly();
        let subscription = self.subscriptions.get(&queue.topic).cloned();
        loop {
            if slot.cancel.is_cancelled() || self.token.is_cancelled() {
                break;
            }
            let wait = if self.paused.load(Ordering::Acquire) {
                Some(PULL_DELAY_ON_PAUSE)
            } else {
                let process = lock(&slot.process);
                if process
                    .flow_control(&self.settings.flow_limits, !orderly)
                    .is_some()
                {
                    Some(PULL_DELAY_ON_FLOW_CONTROL)
                } else if orderly && self.is_clustering() && !process.is_locked() {
                    Some(PULL_DELAY_ON_ERROR)
                } else {
                    None
                }
            };
            if let Some(wait) = wait {
                self.pause(&slot, wait).await;
                continue;
            }
            // Push consumers piggy-back their progress; lite pull commits only by persisting.
            let commit_offset = if self.is_clustering() && !self.listener.is_lite() {
                self.offsets.read_memory(&queue).unwrap_or(0)
            } else {
                0
            };
            let lite = self.listener.is_lite();
            let (addr, from_slave) = match self
                .instance
                .subscribe_addr_refreshing(&queue.topic, &queue.broker_name, broker_id)
                .await
            {
                Ok(found) => found,
                Err(error) => {
                    debug!(?queue, %error, "no broker to pull from");
                    self.pause(&slot, PULL_DELAY_ON_ERROR).await;
                    continue;
                }
            };
            let header = PullMessageRequestHeader {
                consumer_group: self.settings.group.clone(),
                topic: queue.topic.clone(),
                queue_id: queue.queue_id,
                queue_offset: next_offset,
                max_msg_nums: self.settings.pull_batch_size,
                // A slave never stores piggy-backed commits; do not offer them.
                sys_flag: pull_sys_flag::build(commit_offset > 0 && !from_slave, true, lite, false),
                commit_offset,
                suspend_timeout_millis: PULL_SUSPEND.as_millis() as i64,
                // Lite pull sends its expression; push consumers rely on their heartbeat.
                subscription: if lite {
                    Some(
                        subscription
                            .as_ref()
                            .map_or_else(|| "*".to_owned(), |sub| sub.sub_string.clone()),
                    )
                } else {
                    None
                },
                sub_version: subscription.as_ref().map_or(0, |sub| sub.sub_version),
                expression_type: Some("TAG".into()),
                max_msg_bytes: None,
                broker_name: Some(queue.broker_name.clone()),
            };
            let outcome = tokio::select! {
                _ = slot.cancel.cancelled() => break,
                outcome = self.instance.pull(&addr, &header, &queue, PULL_TIMEOUT_WHEN_SUSPENDED) => outcome,
            };
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(error) => {
                    debug!(?queue, %error, "pull failed");
                    self.pause(&slot, PULL_DELAY_ON_ERROR).await;
                    continue;
                }
            };
            broker_id = outcome.suggest_which_broker_id;
            lock(&slot.process).record_pull(Instant::now());
            match outcome.status {
                PullStatus::Found(messages) => {
                    next_offset = outcome.next_begin_offset;
                    let messages: Vec<MessageExt> = match &subscription {
                        Some(sub) if !sub.tags_set.is_empty() => messages
                            .into_iter()
                            .filter(|message| {
                                message
                                    .tags()
                                    .is_some_and(|tag| sub.tags_set.iter().any(|t| t == tag))
                            })
                            .collect(),
                        _ => messages,
                    };
                    if messages.is_empty() {
                        continue;
                    }
                    let start_orderly = lock(&slot.process).put(messages.iter().cloned());
                    if let Listener::Lite(buffer) = &self.listener {
                        // Waits while the poll buffer is full: backpressure on pulling.
                        tokio::select! {
                            _ = slot.cancel.cancelled() => break,
                            sent = buffer.send((slot.clone(), messages)) => if sent.is_err() { break },
                        }
                    } else {
                        self.dispatch(&slot, messages, start_orderly);
                    }
                }
                PullStatus::NoNewMessage | PullStatus::NoMatchedMessage => {
                    next_offset = outcome.next_begin_offset;
                    // Filtered-out ranges become committed progress when nothing is in flight.
                    if lock(&slot.process).is_empty() {
                        self.offsets.update(&queue, next_offset, true);
                    }
                }
                PullStatus::OffsetIllegal => {
                    warn!(
                        ?queue,
                        requested = next_offset,
                        corrected = outcome.next_begin_offset,
                        "pull offset out of range; correcting it"
                    );
                    slot.drop_queue();
                    self.offsets
                        .update(&queue, outcome.next_begin_offset, false);
                    if let Err(error) = self.offsets.persist(&queue).await {
                        warn!(?queue, %error, "persisting the corrected offset failed");
                    }
                    self.offsets.remove(&queue);
                    lock(&self.queues).remove(&queue);
                    self.request_rebalance();
                    break;
                }
            }
        }
        debug!(?queue, "pull loop ended");
    }

    async fn pause(&self, slot: &QueueSlot, wait: Duration) {
        tokio::select! {
            _ = slot.cancel.cancelled() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }

    // --- consuming ---------------------------------------------------------------------------

    fn dispatch(
        self: &Arc<Self>,
        slot: &Arc<QueueSlot>,
        messages: Vec<MessageExt>,
        start_orderly: bool,
    ) {
        match &self.listener {
            Listener::Concurrent(listener) => {
                for batch in messages.chunks(self.settings.consume_batch_max_size) {
                    let core = self.clone();
                    let slot = slot.clone();
                    let listener = listener.clone();
                    let batch = batch.to_vec();
                    tokio::spawn(
                        async move { core.consume_concurrently(listener, slot, batch).await },
                    );
                }
            }
            Listener::Orderly(listener) => {
                if start_orderly {
                    let core = self.clone();
                    let slot = slot.clone();
                    let listener = listener.clone();
                    tokio::spawn(async move { core.consume_orderly(listener, slot).await });
                }
            }
            Listener::Lite(_) => {}
        }
    }

    fn prepare_for_listener(&self, messages: &mut [MessageExt]) {
        let started = now_ms().to_string();
        for message in messages {
            message.restore_retry_topic(&self.settings.group);
            message
                .properties
                .insert(property::CONSUME_START_TIME, started.clone());
        }
    }

    async fn consume_concurrently(
        self: Arc<Self>,
        listener: Arc<dyn ConcurrentListener>,
        slot: Arc<QueueSlot>,
        mut batch: Vec<MessageExt>,
    ) {
        let Ok(_permit) = self.permits.clone().acquire_owned().await else {
            return;
        };
        if slot.is_dropped() {
            return;
        }
        self.prepare_for_listener(&mut batch);
        let result = match tokio::time::timeout(
            self.settings.consume_timeout,
            listener.consume(batch.clone()),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => {
                warn!(queue = ?slot.queue, "listener timed out; the batch is retried");
                ConsumeResult::reconsume_later()
            }
        };
        lock(&slot.process).record_consume(Instant::now());
        // A queue given up meanwhile belongs to someone else now: commit nothing.
        if slot.is_dropped() {
            return;
        }
        self.settle_concurrent(&slot, batch, result).await;
    }

    /// Java `processConsumeResult` (concurrent): failed messages go back to the broker (or are
    /// dropped in broadcasting mode); what cannot be sent back is consumed again here later and
    /// keeps pinning the offset meanwhile.
    async fn settle_concurrent(
        self: &Arc<Self>,
        slot: &Arc<QueueSlot>,
        batch: Vec<MessageExt>,
        result: ConsumeResult,
    ) {
        let plan = Settlement::plan(&result, batch.len(), self.is_clustering());
        let mut retry_here = Vec::new();
        for message in &batch[plan.first_failed..] {
            if !plan.send_back {
                warn!(msg_id = %message.msg_id, "broadcasting: a failed message is dropped");
                continue;
            }
            if let Err(error) = self.send_back(message, result.delay_level).await {
                warn!(msg_id = %message.msg_id, %error, "send-back failed; retrying locally in 5 s");
                let mut again = message.clone();
                again.reconsume_times += 1;
                retry_here.push(again);
            }
        }
        let failed: Vec<i64> = retry_here
            .iter()
            .map(|message| message.queue_offset)
            .collect();
        let commit = plan.finish(&mut lock(&slot.process), &batch, &failed);
        if let Some(commit) = commit {
            self.offsets.update(&slot.queue, commit, true);
        }
        if !retry_here.is_empty() {
            let core = self.clone();
            let slot = slot.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = slot.cancel.cancelled() => {}
                    _ = tokio::time::sleep(LOCAL_RETRY_DELAY) => core.dispatch(&slot, retry_here, false),
                }
            });
        }
    }

    /// CONSUMER_SEND_MSG_BACK, falling back to producing the message into the retry topic.
    async fn send_back(&self, message: &MessageExt, delay_level: i32) -> Result<()> {
        let header = ConsumerSendMsgBackRequestHeader {
            offset: message.commit_log_offset,
            group: self.settings.group.clone(),
            delay_level,
            origin_msg_id: Some(message.msg_id.clone()),
            origin_topic: Some(message.topic.clone()),
            unit_mode: false,
            max_reconsume_times: Some(self.max_reconsume_times()),
            broker_name: Some(message.queue.broker_name.clone()),
        };
        let direct = match self.instance.master_addr(&message.queue.broker_name) {
            Some(addr) => self.instance.send_back(&addr, &header).await,
            None => Err(ClientError::BrokerNotFound {
                broker_name: message.queue.broker_name.clone(),
            }),
        };
        match direct {
            Ok(()) => Ok(()),
            Err(error) => {
                debug!(msg_id = %message.msg_id, %error, "send-back refused; producing to the retry topic");
                self.sender
                    .send_plain(self.retry_message(message, 3 + message.reconsume_times))
                    .await
                    .map(|_| ())
            }
        }
    }

    /// The message a client itself puts into `%RETRY%group` (Java
    /// `sendMessageBackAsNormalMessage`); the broker dead-letters it past the maximum.
    fn retry_message(&self, message: &MessageExt, delay_level: i32) -> Message {
        let mut retry = Message::new(retry_topic(&self.settings.group), message.body.clone())
            .with_flag(message.flag);
        for (name, value) in message.properties.iter() {
            retry = retry.with_property(name, value);
        }
        let origin = message
            .property(property::ORIGIN_MESSAGE_ID)
            .unwrap_or(&message.msg_id)
            .to_owned();
        let original_topic = message
            .property(property::RETRY_TOPIC)
            .unwrap_or(&message.topic)
            .to_owned();
        let mut retry = retry
            .with_property(property::ORIGIN_MESSAGE_ID, origin)
            .with_property(property::RETRY_TOPIC, original_topic)
            .with_property(
                property::RECONSUME_TIME,
                (message.reconsume_times + 1).to_string(),
            )
            .with_property(
                property::MAX_RECONSUME_TIMES,
                self.max_reconsume_times().to_string(),
            )
            .with_delay_level(delay_level);
        retry
            .properties_mut()
            .remove(property::TRANSACTION_PREPARED);
        retry
            .properties_mut()
            .remove(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
        retry
    }

    async fn consume_orderly(
        self: Arc<Self>,
        listener: Arc<dyn OrderlyListener>,
        slot: Arc<QueueSlot>,
    ) {
        let _one_at_a_time = slot.consume_lock.lock().await;
        loop {
            if slot.is_dropped() || self.token.is_cancelled() {
                return;
            }
            if self.is_clustering() {
                let (locked, expired) = {
                    let process = lock(&slot.process);
                    (process.is_locked(), process.is_lock_expired(Instant::now()))
                };
                if !locked || expired {
                    let granted = self.lock_one(&slot.queue).await;
                    lock(&slot.process).set_locked(granted, Instant::now());
                    if !granted {
                        self.pause(&slot, Duration::from_millis(500)).await;
                        continue;
                    }
                }
            }
            let taken = lock(&slot.process).take(self.settings.consume_batch_max_size);
            if taken.is_empty() {
                return;
            }
            let Ok(_permit) = self.permits.clone().acquire_owned().await else {
                return;
            };
            let mut delivered = taken.clone();
            self.prepare_for_listener(&mut delivered);
            let status = match tokio::time::timeout(
                self.settings.consume_timeout,
                listener.consume(delivered.clone()),
            )
            .await
            {
                Ok(status) => status,
                Err(_) => {
                    warn!(queue = ?slot.queue, "orderly listener timed out; suspending the queue");
                    OrderlyStatus::SuspendCurrentQueueAMoment
                }
            };
            if slot.is_dropped() {
                return;
            }
            let commit = match status {
                OrderlyStatus::Success => lock(&slot.process).commit(),
                OrderlyStatus::SuspendCurrentQueueAMoment => {
                    let (suspend, again) = self.check_reconsume_times(delivered).await;
                    if suspend {
                        lock(&slot.process).requeue(again);
                        drop(_permit);
                        self.pause(&slot, self.settings.suspend_current_queue_time)
                            .await;
                        continue;
                    }
                    lock(&slot.process).commit()
                }
            };
            if commit >= 0 && !slot.is_dropped() {
                self.offsets.update(&slot.queue, commit, false);
            }
        }
    }

    /// Java `checkReconsumeTimes`: messages past the maximum are handed to the broker's
    /// dead-letter path; the rest (and any that could not be handed over) are retried here.
    /// Returns whether the queue must be suspended, and the messages to put back.
    async fn check_reconsume_times(&self, messages: Vec<MessageExt>) -> (bool, Vec<MessageExt>) {
        let max = self.max_reconsume_times();
        let mut suspend = false;
        let mut again = Vec::with_capacity(messages.len());
        for mut message in messages {
            if message.reconsume_times >= max {
                let retry = self.retry_message(&message, 3 + message.reconsume_times);
                if let Err(error) = self.sender.send_plain(retry).await {
                    warn!(msg_id = %message.msg_id, %error, "dead-lettering failed; retrying locally");
                    suspend = true;
                    message.reconsume_times += 1;
                }
            } else {
                suspend = true;
                message.reconsume_times += 1;
            }
            again.push(message);
        }
        (suspend, again)
    }

    // --- reset and shutdown ------------------------------------------------------------------

    /// RESET_CONSUMER_CLIENT_OFFSET: the queues of `topic` restart from the given offsets.
    async fn reset_offsets(self: Arc<Self>, topic: &str, offsets: BTreeMap<MessageQueue, i64>) {
        info!(group = %self.settings.group, %topic, queues = offsets.len(), "offset reset from the broker");
        self.paused.store(true, Ordering::Release);
        let _serial = self.rebalance_lock.lock().await;
        let affected: Vec<Arc<QueueSlot>> = lock(&self.queues)
            .values()
            .filter(|slot| slot.queue.topic == topic && offsets.contains_key(&slot.queue))
            .cloned()
            .collect();
        for slot in &affected {
            slot.drop_queue();
            lock(&slot.process).clear();
        }
        for slot in affected {
            if let Some(offset) = offsets.get(&slot.queue) {
                self.offsets.update(&slot.queue, *offset, false);
                if let Err(error) = self.offsets.persist(&slot.queue).await {
                    warn!(queue = ?slot.queue, %error, "persisting a reset offset failed");
                }
                self.offsets.remove(&slot.queue);
            }
            lock(&self.queues).remove(&slot.queue);
        }
        self.paused.store(false, Ordering::Release);
        drop(_serial);
        self.request_rebalance();
    }

    // --- lite pull ---------------------------------------------------------------------------

    pub(crate) fn offsets(&self) -> &OffsetStore {
        &self.offsets
    }

    pub(crate) fn instance(&self) -> &Arc<ClientInstance> {
        &self.instance
    }

    pub(crate) fn slot(&self, queue: &MessageQueue) -> Option<Arc<QueueSlot>> {
        lock(&self.queues).get(queue).cloned()
    }

    pub(crate) fn group(&self) -> &str {
        &self.settings.group
    }

    /// Lite pull `assign`: from now on exactly `queues` are consumed, no rebalance.
    pub(crate) async fn assign(self: &Arc<Self>, queues: BTreeSet<MessageQueue>) {
        self.manual_assignment.store(true, Ordering::Release);
        let _serial = self.rebalance_lock.lock().await;
        let mut topics: BTreeSet<String> = queues.iter().map(|queue| queue.topic.clone()).collect();
        topics.extend(self.assigned_queues().into_iter().map(|queue| queue.topic));
        for topic in topics {
            let mine = queues
                .iter()
                .filter(|queue| queue.topic == topic)
                .cloned()
                .collect();
            self.update_queue_table(&topic, mine).await;
        }
    }

    /// Lite pull `seek`: the queue's pull restarts at `offset`, discarding what was buffered.
    pub(crate) async fn seek(self: &Arc<Self>, queue: &MessageQueue, offset: i64) -> Result<()> {
        let _serial = self.rebalance_lock.lock().await;
        let Some(old) = self.slot(queue) else {
            return Err(ClientError::InvalidArgument(format!(
                "{queue:?} is not assigned to this consumer (it may be rebalancing)"
            )));
        };
        let addr = self.broker_addr(queue).await?;
        let max = self.instance.max_offset(&addr, queue).await?;
        let min = self.instance.min_offset(&addr, queue).await?;
        if offset < min || offset > max {
            return Err(ClientError::InvalidArgument(format!(
                "seek offset {offset} is outside {min}..={max} of {queue:?}"
            )));
        }
        old.drop_queue();
        let slot = QueueSlot::new(queue.clone());
        lock(&self.queues).insert(queue.clone(), slot.clone());
        let core = self.clone();
        tokio::spawn(async move { core.pull_loop(slot, offset).await });
        Ok(())
    }

    /// The queue's lowest and highest offsets at the broker.
    pub(crate) async fn queue_bounds(&self, queue: &MessageQueue) -> Result<(i64, i64)> {
        let addr = self.broker_addr(queue).await?;
        Ok((
            self.instance.min_offset(&addr, queue).await?,
            self.instance.max_offset(&addr, queue).await?,
        ))
    }

    /// For a consumer handle dropped without `shutdown`: the same shutdown, run in the
    /// background on the runtime the drop happens on. Without a runtime nothing of the
    /// consumer can run any more anyway; its tasks are told to stop, and progress since the
    /// last persist stays unsent.
    pub(crate) fn shutdown_in_background(self: &Arc<Self>) {
        if self.token.is_cancelled() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                info!(group = %self.settings.group, "consumer dropped without shutdown; shutting it down");
                let core = self.clone();
                runtime.spawn(async move { core.shutdown().await });
            }
            Err(_) => {
                warn!(group = %self.settings.group, "consumer dropped outside a runtime; its latest progress is not persisted");
                self.token.cancel();
            }
        }
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.token.is_cancelled()
    }

    pub(crate) async fn shutdown(&self) {
        if self.token.is_cancelled() {
            return;
        }
        self.token.cancel();
        for slot in lock(&self.queues).values() {
            slot.cancel.cancel();
        }
        // Let listener calls in progress finish so their progress is committed.
        let all = u32::try_from(self.settings.consume_concurrency).unwrap_or(u32::MAX);
        let _ =
            tokio::time::timeout(self.settings.shutdown_wait, self.permits.acquire_many(all)).await;
        self.persist_all(CommitDelivery::Acknowledged).await;
        if self.listener.is_orderly() && self.is_clustering() {
            let mut by_broker: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
            for queue in self.assigned_queues() {
                by_broker
                    .entry(queue.broker_name.clone())
                    .or_default()
                    .push(queue);
            }
            for (broker, queues) in by_broker {
                if let Some(addr) = self.instance.master_addr(&broker) {
                    let _ = self
                        .instance
                        .unlock_queues(&addr, &self.settings.group, queues)
                        .await;
                }
            }
        }
        self.instance
            .shutdown(None, Some(&self.settings.group))
            .await;
        info!(group = %self.settings.group, "push consumer stopped");
    }
}

/// `~/.rocketmq_offsets`, RocketMQ's default directory of broadcasting offset files.
pub(crate) fn default_offset_dir() -> std::path::PathBuf {
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".rocketmq_offsets")
}
