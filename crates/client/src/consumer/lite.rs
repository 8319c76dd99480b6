//! [`LitePullConsumer`]: the application polls (Java `DefaultLitePullConsumer`).
//!
//! Pull loops fill a bounded buffer; `poll` takes one pulled batch and marks it consumed in the
//! queue's process queue, which yields the queue's *consumed offset*. Committing copies consumed
//! offsets into the offset store (memory), from where the periodic persist, queue release and
//! shutdown take them to the broker — exactly as the Java client does. With auto-commit on,
//! `poll` commits every `auto_commit_interval`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tidemark_client::ClientError> {
//! use tidemark_client::LitePullConsumer;
//!
//! let consumer = LitePullConsumer::builder("audit")
//!     .namesrv_addr("127.0.0.1:9876")
//!     .subscribe("Orders", "*")
//!     .auto_commit(false)
//!     .start()
//!     .await?;
//! let messages = consumer.poll().await;
//! // ... handle them, then
//! consumer.commit_sync();
//! consumer.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_protocol::body::MessageQueue;

use super::consume::{poll_buffer, ConsumeMode, Polled, PolledBatch};
use super::core::ConsumerCore;
use super::ConsumerSettings;
use crate::builder::{client_setters, consumer_setters};
use crate::error::{ClientError, Result};
use crate::instance::lock;
use crate::message::MessageExt;
use crate::offset_store::{CommitDelivery, OffsetTable, ReadOffsetType};
use crate::route::subscribe_queues;

/// Builds and starts a [`LitePullConsumer`].
#[derive(Debug, Clone)]
pub struct LitePullConsumerBuilder {
    settings: ConsumerSettings,
    auto_commit: bool,
    auto_commit_interval: Duration,
    poll_timeout: Duration,
}

impl LitePullConsumerBuilder {
    client_setters!();
    consumer_setters!();

    /// Commit on `poll` every `auto_commit_interval` (default on, 5 s).
    pub fn auto_commit(mut self, on: bool) -> Self {
        self.auto_commit = on;
        self
    }

    /// At least one second, as Java enforces.
    pub fn auto_commit_interval(mut self, interval: Duration) -> Self {
        self.auto_commit_interval = interval.max(Duration::from_secs(1));
        self
    }

    /// How long `poll` waits for messages (default 5 s).
    pub fn poll_timeout(mut self, timeout: Duration) -> Self {
        self.poll_timeout = timeout;
        self
    }

    pub async fn start(self) -> Result<LitePullConsumer> {
        self.settings.validate_lite()?;
        let (buffer, polled) = poll_buffer();
        let core = ConsumerCore::start(self.settings, ConsumeMode::Poll(buffer)).await?;
        Ok(LitePullConsumer {
            core,
            polled,
            consumed: Mutex::new(BTreeMap::new()),
            auto_commit: self.auto_commit,
            auto_commit_interval: self.auto_commit_interval,
            next_auto_commit: Mutex::new(Instant::now() + self.auto_commit_interval),
            poll_timeout: self.poll_timeout,
        })
    }
}

/// A running lite pull consumer.
#[derive(Debug)]
pub struct LitePullConsumer {
    core: Arc<ConsumerCore>,
    polled: Polled,
    /// Per queue: the offset up to which polled messages count as consumed.
    consumed: Mutex<BTreeMap<MessageQueue, i64>>,
    auto_commit: bool,
    auto_commit_interval: Duration,
    next_auto_commit: Mutex<Instant>,
    poll_timeout: Duration,
}

impl LitePullConsumer {
    pub fn builder(group: impl Into<String>) -> LitePullConsumerBuilder {
        let mut settings = ConsumerSettings::new(group);
        settings.pull_batch_size = 10;
        LitePullConsumerBuilder {
            settings,
            auto_commit: true,
            auto_commit_interval: Duration::from_secs(5),
            poll_timeout: Duration::from_secs(5),
        }
    }

    pub fn client_id(&self) -> &str {
        self.core.client_id()
    }

    /// The readable queues of `topic` (for [`LitePullConsumer::assign`]).
    pub async fn fetch_message_queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        let route = self
            .core
            .instance()
            .update_route(topic)
            .await?
            .ok_or_else(|| ClientError::NoRoute {
                topic: topic.to_owned(),
                reason: "the name server does not know it".into(),
            })?;
        Ok(subscribe_queues(topic, &route))
    }

    /// Assign mode: consume exactly these queues from now on (no rebalance).
    pub async fn assign(&self, queues: impl IntoIterator<Item = MessageQueue>) {
        self.core.assign(queues.into_iter().collect()).await;
    }

    pub fn assigned_queues(&self) -> Vec<MessageQueue> {
        self.core.assigned_queues()
    }

    /// Waits up to the poll timeout for messages.
    pub async fn poll(&self) -> Vec<MessageExt> {
        self.poll_for(self.poll_timeout).await
    }

    /// Waits up to `timeout` for one pulled batch; marks it consumed.
    pub async fn poll_for(&self, timeout: Duration) -> Vec<MessageExt> {
        self.maybe_auto_commit();
        let deadline = tokio::time::Instant::now() + timeout;
        let Some(PolledBatch {
            queue,
            consumed,
            messages,
        }) = self.polled.next(deadline, self.core.group()).await
        else {
            return Vec::new();
        };
        if consumed >= 0 {
            lock(&self.consumed).insert(queue, consumed);
        }
        messages
    }

    fn maybe_auto_commit(&self) {
        if !self.auto_commit {
            return;
        }
        let mut next = lock(&self.next_auto_commit);
        if Instant::now() >= *next {
            *next = Instant::now() + self.auto_commit_interval;
            drop(next);
            self.commit_sync();
        }
    }

    /// Records the consumed offset of every assigned queue in the offset store; the broker gets
    /// it with the next periodic persist (or at shutdown, or when the queue is released).
    pub fn commit_sync(&self) {
        let consumed = lock(&self.consumed).clone();
        for (queue, offset) in consumed {
            let live = self
                .core
                .slot(&queue)
                .is_some_and(|slot| !slot.is_dropped());
            if live {
                self.core.offsets().update(&queue, offset, false);
            }
        }
    }

    /// Commits the given offsets and sends them to the broker now.
    pub async fn commit_and_persist(&self, offsets: BTreeMap<MessageQueue, i64>) -> Result<()> {
        for (queue, offset) in &offsets {
            self.core.offsets().update(queue, *offset, false);
        }
        self.core
            .offsets()
            .persist_all(
                &offsets.into_keys().collect::<BTreeSet<_>>(),
                CommitDelivery::Acknowledged,
            )
            .await
    }

    /// The committed offset of `queue` (memory, else the broker or file).
    pub async fn committed(&self, queue: &MessageQueue) -> Result<Option<i64>> {
        self.core
            .offsets()
            .read(queue, ReadOffsetType::MemoryThenStore)
            .await
    }

    /// Restarts `queue`'s pull at `offset` (within the queue's bounds). Nothing is committed.
    pub async fn seek(&self, queue: &MessageQueue, offset: i64) -> Result<()> {
        self.core.seek(queue, offset).await?;
        lock(&self.consumed).insert(queue.clone(), offset);
        Ok(())
    }

    pub async fn seek_to_begin(&self, queue: &MessageQueue) -> Result<()> {
        let (min, _) = self.core.queue_bounds(queue).await?;
        self.seek(queue, min).await
    }

    pub async fn seek_to_end(&self, queue: &MessageQueue) -> Result<()> {
        let (_, max) = self.core.queue_bounds(queue).await?;
        self.seek(queue, max).await
    }

    /// The offset store's in-memory table.
    pub fn offsets(&self) -> OffsetTable {
        self.core.offset_snapshot()
    }

    /// Commits (if auto-commit is on), persists every offset, unregisters. A consumer dropped
    /// without it is shut down the same way in the background.
    pub async fn shutdown(&self) {
        if self.auto_commit {
            self.commit_sync();
        }
        self.core.shutdown().await;
    }
}

impl Drop for LitePullConsumer {
    fn drop(&mut self) {
        if self.core.is_shut_down() {
            return;
        }
        if self.auto_commit {
            self.commit_sync();
        }
        self.core.shutdown_in_background();
    }
}
