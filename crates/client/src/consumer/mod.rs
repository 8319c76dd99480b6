//! The push consumer (Java `DefaultMQPushConsumer`): rebalance, one pull loop per assigned
//! queue, concurrent or orderly consumption, retries through the broker, and progress kept in an
//! [`OffsetStore`](crate::OffsetStore).
//!
//! ```no_run
//! # async fn demo() -> Result<(), tidemark_client::ClientError> {
//! use tidemark_client::{concurrent_fn, ConsumeStatus, PushConsumer};
//!
//! let consumer = PushConsumer::builder("orders-consumer")
//!     .namesrv_addr("127.0.0.1:9876")
//!     .subscribe("Orders", "created || paid")
//!     .start_concurrently(concurrent_fn(|messages| async move {
//!         for message in &messages {
//!             println!("{} {:?}", message.msg_id, message.body);
//!         }
//!         ConsumeStatus::Success
//!     }))
//!     .await?;
//! // ... later
//! consumer.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod consume;
mod core;
mod listener;
mod lite;
mod pull;
mod queues;
mod rates;
mod rebalance;
mod running_info;
mod simple;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::body::{ConsumeFromWhere, MessageModel, MessageQueue};

use crate::allocate::AllocateStrategy;
use crate::builder::{client_setters, consumer_setters};
use crate::config::ClientConfig;
use crate::error::{ClientError, Result};
use crate::offset_store::OffsetTable;
use crate::process_queue::FlowLimits;

use self::consume::ConsumeMode;
use self::core::ConsumerCore;
pub use listener::{
    concurrent_fn, orderly_fn, ConcurrentListener, ConsumeResult, ConsumeStatus, OrderlyListener,
    OrderlyStatus, Settlement,
};
pub use lite::{LitePullConsumer, LitePullConsumerBuilder};
pub use simple::{ReceivedMessage, SimpleConsumer, SimpleConsumerBuilder};

/// Push consumer settings (Java `DefaultMQPushConsumer` fields, same defaults).
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub group: String,
    pub client: ClientConfig,
    /// `(topic, expression)`: `*` or `TagA || TagB`.
    pub subscriptions: Vec<(String, String)>,
    pub message_model: MessageModel,
    pub consume_from_where: ConsumeFromWhere,
    /// For [`ConsumeFromWhere::ConsumeFromTimestamp`]: ms since the epoch (Java: now − 30 min).
    pub consume_timestamp_ms: i64,
    pub allocate_strategy: AllocateStrategy,
    /// Messages per listener call (`consumeMessageBatchMaxSize`).
    pub consume_batch_max_size: usize,
    /// Messages per pull (`pullBatchSize`).
    pub pull_batch_size: i32,
    /// Listener calls running at once (`consumeThreadMax`).
    pub consume_concurrency: usize,
    pub flow_limits: FlowLimits,
    /// Deliveries before a message goes to the dead-letter queue; `None`: 16 concurrent,
    /// unlimited orderly (Java's −1).
    pub max_reconsume_times: Option<i32>,
    /// A listener call running longer is treated as reconsume-later (`consumeTimeout`).
    pub consume_timeout: Duration,
    /// Orderly: pause after a suspended batch (`suspendCurrentQueueTimeMillis`).
    pub suspend_current_queue_time: Duration,
    /// Period of the rebalance (`rocketmq.client.rebalance.waitInterval`).
    pub rebalance_interval: Duration,
    /// Broadcasting: directory of the offset files (`rocketmq.client.localOffsetStoreDir`).
    pub offset_store_dir: Option<PathBuf>,
    /// How long shutdown waits for listener calls in progress, so their progress is committed.
    pub shutdown_wait: Duration,
}

impl ConsumerSettings {
    pub fn new(group: impl Into<String>) -> Self {
        let now = tidemark_remoting::now_ms();
        Self {
            group: group.into(),
            client: ClientConfig::default(),
            subscriptions: Vec::new(),
            message_model: MessageModel::Clustering,
            consume_from_where: ConsumeFromWhere::ConsumeFromLastOffset,
            consume_timestamp_ms: now - 30 * 60 * 1000,
            allocate_strategy: AllocateStrategy::Averagely,
            consume_batch_max_size: 1,
            pull_batch_size: 32,
            consume_concurrency: 20,
            flow_limits: FlowLimits::default(),
            max_reconsume_times: None,
            consume_timeout: Duration::from_secs(15 * 60),
            suspend_current_queue_time: Duration::from_secs(1),
            rebalance_interval: Duration::from_secs(20),
            offset_store_dir: None,
            shutdown_wait: Duration::from_secs(5),
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.group.is_empty() || self.group.len() > 255 {
            return Err(ClientError::InvalidArgument(
                "a consumer group name has 1 to 255 characters".into(),
            ));
        }
        if self.subscriptions.is_empty() {
            return Err(ClientError::InvalidArgument(
                "subscribe to at least one topic".into(),
            ));
        }
        self.validate_lite()
    }

    /// A lite pull consumer may start without subscriptions (assign mode).
    pub(crate) fn validate_lite(&self) -> Result<()> {
        if self.group.is_empty() || self.group.len() > 255 {
            return Err(ClientError::InvalidArgument(
                "a consumer group name has 1 to 255 characters".into(),
            ));
        }
        for (topic, _) in &self.subscriptions {
            crate::producer::validate_topic(topic)?;
        }
        if self.consume_batch_max_size == 0
            || self.pull_batch_size <= 0
            || self.consume_concurrency == 0
        {
            return Err(ClientError::InvalidArgument(
                "batch sizes and concurrency must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// Builds and starts a [`PushConsumer`].
#[derive(Debug, Clone)]
pub struct PushConsumerBuilder {
    settings: ConsumerSettings,
}

impl PushConsumerBuilder {
    client_setters!();
    consumer_setters!();

    pub fn consume_timestamp_ms(mut self, timestamp_ms: i64) -> Self {
        self.settings.consume_timestamp_ms = timestamp_ms;
        self
    }

    pub fn consume_batch_max_size(mut self, size: usize) -> Self {
        self.settings.consume_batch_max_size = size;
        self
    }

    pub fn consume_concurrency(mut self, tasks: usize) -> Self {
        self.settings.consume_concurrency = tasks;
        self
    }

    pub fn flow_limits(mut self, limits: FlowLimits) -> Self {
        self.settings.flow_limits = limits;
        self
    }

    pub fn max_reconsume_times(mut self, times: i32) -> Self {
        self.settings.max_reconsume_times = Some(times);
        self
    }

    pub fn consume_timeout(mut self, timeout: Duration) -> Self {
        self.settings.consume_timeout = timeout;
        self
    }

    pub fn suspend_current_queue_time(mut self, pause: Duration) -> Self {
        self.settings.suspend_current_queue_time = pause;
        self
    }

    pub fn shutdown_wait(mut self, wait: Duration) -> Self {
        self.settings.shutdown_wait = wait;
        self
    }

    /// The settings as built so far.
    pub fn settings(&self) -> &ConsumerSettings {
        &self.settings
    }

    /// Starts consuming with a concurrent listener.
    pub async fn start_concurrently(
        self,
        listener: impl ConcurrentListener,
    ) -> Result<PushConsumer> {
        self.start(ConsumeMode::Concurrent(Arc::new(listener)))
            .await
    }

    /// Starts consuming with an orderly listener (queues locked at the broker in clustering mode).
    pub async fn start_orderly(self, listener: impl OrderlyListener) -> Result<PushConsumer> {
        self.start(ConsumeMode::Orderly(Arc::new(listener))).await
    }

    async fn start(self, mode: ConsumeMode) -> Result<PushConsumer> {
        self.settings.validate()?;
        let core = ConsumerCore::start(self.settings, mode).await?;
        Ok(PushConsumer { core })
    }
}

/// A running push consumer.
#[derive(Debug)]
pub struct PushConsumer {
    core: Arc<ConsumerCore>,
}

impl PushConsumer {
    pub fn builder(group: impl Into<String>) -> PushConsumerBuilder {
        PushConsumerBuilder {
            settings: ConsumerSettings::new(group),
        }
    }

    /// `ip@instanceName`.
    pub fn client_id(&self) -> &str {
        self.core.client_id()
    }

    /// The queues currently assigned to this consumer.
    pub fn assigned_queues(&self) -> Vec<MessageQueue> {
        self.core.assigned_queues()
    }

    /// The in-memory consumer progress.
    pub fn offsets(&self) -> OffsetTable {
        self.core.offset_snapshot()
    }

    /// Rebalances now instead of at the next interval.
    pub fn rebalance_now(&self) {
        self.core.request_rebalance();
    }

    /// Stops pulling, waits (bounded) for listener calls in progress, persists every offset,
    /// unlocks orderly queues, unregisters from the brokers. A consumer dropped without it is
    /// shut down the same way in the background.
    pub async fn shutdown(&self) {
        self.core.shutdown().await;
    }
}

impl Drop for PushConsumer {
    fn drop(&mut self) {
        self.core.shutdown_in_background();
    }
}
