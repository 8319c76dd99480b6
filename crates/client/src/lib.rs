//! `tidemark-client` is Tidemark's RocketMQ client: a [`Producer`], a push consumer
//! ([`PushConsumer`], concurrent or orderly), a lite pull consumer ([`LitePullConsumer`]), a
//! RocketMQ 5 POP consumer ([`SimpleConsumer`]: receive, ack, change invisibility) and the
//! two offset stores, speaking RocketMQ's 4.x remoting protocol to Tidemark or to an Apache
//! RocketMQ cluster.
//!
//! Consumer progress follows RocketMQ exactly: a queue's committed offset is the smallest offset
//! still being consumed (see [`ProcessQueue`]), it only moves forward in memory, and it reaches
//! the broker every five seconds, piggy-backed on pulls, before a queue is given up, and at
//! shutdown (see [`OffsetStore`]).

use std::future::Future;
use std::pin::Pin;

mod admin;
mod allocate;
mod broker_requests;
mod builder;
mod config;
mod consumer;
mod error;
mod instance;
mod message;
mod offset_store;
mod process_queue;
mod producer;
mod recall;
mod route;
mod transaction;

pub use admin::controllers;
pub use admin::{
    Admin, BrokerMaster, BrokerReader, ControllerAnswer, ProgressMove, ResendRequest,
    RestoreRequest,
};
pub use allocate::{AllocateStrategy, ConsistentHashRing};
pub use config::ClientConfig;
pub use consumer::{
    concurrent_fn, orderly_fn, ConcurrentListener, ConsumeResult, ConsumeStatus, ConsumerSettings,
    LitePullConsumer, LitePullConsumerBuilder, OrderlyListener, OrderlyStatus, PushConsumer,
    PushConsumerBuilder, ReceivedMessage, Settlement, SimpleConsumer, SimpleConsumerBuilder,
};
pub use error::{ClientError, Result};
pub use message::{
    dlq_topic, retry_topic, Message, MessageExt, DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX,
};
pub use offset_store::{CommitDelivery, OffsetBroker, OffsetStore, OffsetTable, ReadOffsetType};
pub use process_queue::{FlowControl, FlowLimits, ProcessQueue};
pub use producer::{
    select_by_key, Producer, ProducerBuilder, ProducerSettings, SendResult, SendStatus,
};
pub use route::{subscribe_queues, BrokerAddressTable, PublishQueues};
pub use tidemark_protocol::body::{
    ConsumeFromWhere, ConsumeStats, MessageModel, MessageQueue, OffsetWrapper, TopicOffset,
    TopicStatsTable,
};
pub use transaction::{
    LocalTransactionState, TransactionListener, TransactionProducer, TransactionSendResult,
};

/// A boxed, sendable future (listeners and the offset broker are trait objects).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs `tick` every `period` (the first time after one period) for as long as `owner` is alive
/// and `stop` is not cancelled. The task holds `owner` only while a tick runs.
pub(crate) fn every<T, F, Fut>(
    owner: &std::sync::Arc<T>,
    stop: tokio_util::sync::CancellationToken,
    period: std::time::Duration,
    tick: F,
) where
    T: Send + Sync + 'static,
    F: Fn(std::sync::Arc<T>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let owner = std::sync::Arc::downgrade(owner);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(period) => {}
            }
            let Some(owner) = owner.upgrade() else { break };
            tick(owner).await;
        }
    });
}
