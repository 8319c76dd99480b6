//! [`ConsumerCore`], the engine of both consumers: what they share, start-up and shutdown.
//!
//! Each job lives in its own module as an `impl ConsumerCore` block: `rebalance` (which queues
//! are ours), `pull` (one loop per assigned queue), `consume` (what happens to pulled messages,
//! in the [`ConsumeMode`] chosen by the builder).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};

use tidemark_protocol::body::{
    ConsumerData, ConsumerRunningInfo, MessageModel, MessageQueue, SubscriptionData,
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::consume::{ConsumeMode, Rules};
use super::queues::{QueueSlot, QueueTable};
use super::rebalance::RebalanceState;
use super::ConsumerSettings;
use crate::config::unique_instance_name;
use crate::error::Result;
use crate::instance::{
    BrokerRequests, ClientInstance, InstanceOffsetBroker, CLIENT_INNER_PRODUCER_GROUP,
};
use crate::message::retry_topic;
use crate::offset_store::{CommitDelivery, OffsetStore, OffsetTable};
use crate::producer::{ProducerSettings, SendCore};
use crate::BoxFuture;
use tidemark_remoting::now_ms;

pub(crate) struct ConsumerCore {
    pub(super) settings: ConsumerSettings,
    pub(super) instance: Arc<ClientInstance>,
    pub(super) offsets: OffsetStore,
    /// Subscribed topics (with the group's retry topic when the mode consumes retries).
    pub(super) subscriptions: BTreeMap<String, SubscriptionData>,
    pub(super) queues: QueueTable,
    pub(super) rebalance: RebalanceState,
    pub(super) mode: ConsumeMode,
    pub(super) rules: Rules,
    /// Listener calls running at once (`consume_concurrency`); shutdown waits for them.
    pub(super) permits: Arc<Semaphore>,
    /// Sends messages back as ordinary messages when CONSUMER_SEND_MSG_BACK fails, and for
    /// orderly dead-lettering.
    pub(super) sender: SendCore,
    pub(super) token: CancellationToken,
    /// What the instance's broker-request router points to (weakly).
    broker_target: OnceLock<Arc<dyn BrokerRequests>>,
    /// Pull and consume figures per topic, for operators.
    pub(super) rates: super::rates::ConsumeRates,
    /// When the consumer started, epoch ms.
    pub(super) started_ms: i64,
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

    fn consumer_status(&self, group: &str, topic: &str) -> Option<BTreeMap<MessageQueue, i64>> {
        self.0
            .upgrade()
            .filter(|core| core.settings.group == group)
            .map(|core| core.offsets.of_topic(topic))
    }

    fn running_info(&self, group: &str) -> Option<ConsumerRunningInfo> {
        self.0
            .upgrade()
            .filter(|core| core.settings.group == group)
            .map(|core| core.running_info())
    }
}

impl ConsumerCore {
    pub(crate) async fn start(settings: ConsumerSettings, mode: ConsumeMode) -> Result<Arc<Self>> {
        let rules = mode.rules(&settings);
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
        if !broadcasting && rules.consume_retries {
            let retry = retry_topic(&settings.group);
            subscriptions.insert(
                retry.clone(),
                SubscriptionData::from_expression(&retry, "*", sub_version),
            );
        }
        instance.register_consumer(ConsumerData {
            group_name: settings.group.clone(),
            consume_type: rules.consume_type,
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
            queues: QueueTable::default(),
            rebalance: RebalanceState::default(),
            mode,
            rules,
            sender,
            token: instance.shutdown_token().child_token(),
            instance,
            broker_target: OnceLock::new(),
            rates: super::rates::ConsumeRates::default(),
            started_ms: sub_version,
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
        self.spawn_rebalance_task();
        crate::every(
            self,
            self.token.clone(),
            self.settings.client.persist_offset_interval,
            |core| async move { core.persist_all(CommitDelivery::Oneway).await },
        );
        let report_every = self.settings.client.progress_report_interval;
        if self.is_clustering() && !report_every.is_zero() {
            crate::every(self, self.token.clone(), report_every, |core| async move {
                core.report_progress().await
            });
        }
        if self.rules.lock_queues {
            self.spawn_lock_renewal();
        }
    }

    pub(crate) fn client_id(&self) -> &str {
        self.instance.client_id()
    }

    pub(super) fn is_clustering(&self) -> bool {
        self.settings.message_model == MessageModel::Clustering
    }

    pub(crate) fn assigned_queues(&self) -> Vec<MessageQueue> {
        self.queues.queues().into_iter().collect()
    }

    pub(crate) fn offset_snapshot(&self) -> OffsetTable {
        self.offsets.snapshot()
    }

    pub(crate) fn offsets(&self) -> &OffsetStore {
        &self.offsets
    }

    pub(crate) fn instance(&self) -> &Arc<ClientInstance> {
        &self.instance
    }

    pub(crate) fn slot(&self, queue: &MessageQueue) -> Option<Arc<QueueSlot>> {
        self.queues.get(queue)
    }

    pub(crate) fn group(&self) -> &str {
        &self.settings.group
    }

    async fn persist_all(&self, delivery: CommitDelivery) {
        let assigned = self.queues.queues();
        if let Err(error) = self.offsets.persist_all(&assigned, delivery).await {
            warn!(group = %self.settings.group, %error, "persisting offsets failed");
        }
    }

    /// Sends the offsets that moved since they were last sent (debug-level on failure: the
    /// next tick or the periodic persist sends them again).
    async fn report_progress(&self) {
        let assigned = self.queues.queues();
        if let Err(error) = self.offsets.report_changes(&assigned).await {
            debug!(group = %self.settings.group, %error, "progress report failed");
        }
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
        for slot in self.queues.slots() {
            // No listener call starts any more (what has not started is the next owner's),
            // and the pull loop stops.
            slot.begin_release();
        }
        // Let listener calls in progress finish so their progress is committed; the permits
        // are held until that commit, so no call still queued for one completes a message
        // after it (the next owner would get that message again).
        let all = u32::try_from(self.settings.consume_concurrency).unwrap_or(u32::MAX);
        let _quiet =
            tokio::time::timeout(self.settings.shutdown_wait, self.permits.acquire_many(all)).await;
        self.persist_all(CommitDelivery::Acknowledged).await;
        if self.rules.lock_queues {
            self.unlock_all().await;
        }
        self.instance
            .shutdown(None, Some(&self.settings.group))
            .await;
        info!(group = %self.settings.group, "push consumer stopped");
    }
}

/// `~/.rocketmq_offsets`, RocketMQ's default directory of broadcasting offset files.
fn default_offset_dir() -> std::path::PathBuf {
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    home.join(".rocketmq_offsets")
}
