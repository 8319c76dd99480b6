//! What happens to pulled messages: the consumption mode, chosen once by the builder.
//!
//! - `concurrent` — a push consumer's [`ConcurrentListener`]: batches from many queues at once,
//!   failures sent back to the broker's retry topic;
//! - `orderly` — a push consumer's [`OrderlyListener`]: one task per queue, queues locked at the
//!   broker in clustering mode, failures retried in place;
//! - `poll` — a lite pull consumer: batches wait in a bounded buffer until the application polls.
//!
//! What a mode asks of the rest of the engine is worked out once, as [`Rules`], so the
//! rebalance and the pull loops follow data rather than asking which mode they serve.

mod concurrent;
mod orderly;
mod poll;
mod redelivery;

use std::sync::Arc;

use tidemark_protocol::body::{ConsumeType, MessageModel};
use tidemark_protocol::message::property;

use super::core::ConsumerCore;
use super::listener::{ConcurrentListener, OrderlyListener};
use super::queues::QueueSlot;
use super::ConsumerSettings;
use crate::message::MessageExt;
use crate::offset_store::ReadOffsetType;
use crate::BoxFuture;
use tidemark_remoting::now_ms;

pub(crate) use poll::{poll_buffer, PollBuffer, Polled, PolledBatch};

/// Default maximum deliveries of a concurrently consumed message (`maxReconsumeTimes` −1).
const DEFAULT_MAX_RECONSUME_TIMES: i32 = 16;

/// How a consumer consumes what its pull loops fetch.
pub(crate) enum ConsumeMode {
    Concurrent(Arc<dyn ConcurrentListener>),
    Orderly(Arc<dyn OrderlyListener>),
    /// Lite pull: the application takes batches with `poll`.
    Poll(PollBuffer),
}

/// What the consumption mode (with the message model) asks of the rebalance and the pull
/// loops, fixed when the consumer starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// How the consumer introduces itself in heartbeats.
    pub(crate) consume_type: ConsumeType,
    /// Push consumers in clustering mode also consume their group's retry topic; lite pull has
    /// none.
    pub(crate) consume_retries: bool,
    /// Where a newly assigned queue's offset is looked up first.
    pub(crate) start_offset_from: ReadOffsetType,
    /// A push queue not pulled for long has a stuck pull loop and is restarted (Java does);
    /// a lite pull queue may just have an application that is not polling.
    pub(crate) restart_idle_queues: bool,
    /// Concurrent consumption bounds the offset span of a queue's messages in flight; orderly
    /// consumption takes them in order anyway.
    pub(crate) limit_span: bool,
    /// Push consumers piggy-back their progress on pulls; lite pull commits only by persisting.
    pub(crate) piggyback_commit: bool,
    /// Lite pull names its expression in each pull; push consumers rely on their heartbeat.
    pub(crate) pull_with_expression: bool,
    /// Orderly in clustering mode: a queue is consumed only while locked at the broker.
    pub(crate) lock_queues: bool,
    /// Concurrent push consumers in clustering mode report the offsets consumed above their
    /// commit offset (acknowledged ranges) and skip those an earlier owner reported.
    pub(crate) report_acked: bool,
    /// Deliveries before a message is dead-lettered.
    pub(crate) max_reconsume_times: i32,
}

impl ConsumeMode {
    pub(crate) fn rules(&self, settings: &ConsumerSettings) -> Rules {
        let push = !matches!(self, ConsumeMode::Poll(_));
        let orderly = matches!(self, ConsumeMode::Orderly(_));
        Rules {
            consume_type: if push {
                ConsumeType::ConsumePassively
            } else {
                ConsumeType::ConsumeActively
            },
            consume_retries: push,
            start_offset_from: if push {
                ReadOffsetType::Store
            } else {
                ReadOffsetType::MemoryThenStore
            },
            restart_idle_queues: push,
            limit_span: !orderly,
            piggyback_commit: push,
            pull_with_expression: !push,
            lock_queues: orderly && settings.message_model == MessageModel::Clustering,
            report_acked: push && !orderly && settings.message_model == MessageModel::Clustering,
            max_reconsume_times: match settings.max_reconsume_times {
                Some(times) if times >= 0 => times,
                _ if orderly => i32::MAX,
                _ => DEFAULT_MAX_RECONSUME_TIMES,
            },
        }
    }
}

impl ConsumerCore {
    /// Hands messages just pulled from `slot` (and already in its process queue) to the
    /// consumption mode. `false` when the pull loop has to stop.
    pub(super) async fn hand_over(
        self: &Arc<Self>,
        slot: &Arc<QueueSlot>,
        messages: Vec<Arc<MessageExt>>,
        start_orderly: bool,
    ) -> bool {
        match &self.mode {
            ConsumeMode::Concurrent(listener) => {
                self.dispatch_concurrently(listener, slot, messages);
                true
            }
            ConsumeMode::Orderly(listener) => {
                if start_orderly {
                    self.spawn_orderly(listener, slot);
                }
                true
            }
            // Waits while the buffer is full: backpressure on pulling.
            ConsumeMode::Poll(buffer) => buffer.push(slot, messages).await,
        }
    }

    /// One listener call over `messages`, bounded by `consume_timeout` (`None`: it timed out).
    /// Also returns the consume-start stamp the listener's copies carry, so failures can be
    /// settled as they were delivered.
    pub(super) async fn call_listener<T>(
        &self,
        messages: &[Arc<MessageExt>],
        consume: impl FnOnce(Vec<MessageExt>) -> BoxFuture<'static, T>,
    ) -> (Option<T>, String) {
        let started_ms = now_ms();
        let started = started_ms.to_string();
        let delivered = messages
            .iter()
            .map(|message| self.delivered(message, &started))
            .collect();
        let outcome = tokio::time::timeout(self.settings.consume_timeout, consume(delivered))
            .await
            .ok();
        if let Some(first) = messages.first() {
            let ended = now_ms();
            let rt_ms = u64::try_from(ended - started_ms).unwrap_or(0);
            self.rates.consumed(&first.topic, rt_ms, ended);
        }
        (outcome, started)
    }

    /// The listener's own copy of `message`, as the Java client hands it over: the original
    /// topic of a retried message restored, and the time consumption started (`started`, ms).
    /// This is the one deep copy a message gets on its way to a listener, which takes its
    /// messages by value.
    pub(super) fn delivered(&self, message: &MessageExt, started: &str) -> MessageExt {
        let mut delivered = message.clone();
        delivered.restore_retry_topic(&self.settings.group);
        delivered
            .properties
            .insert(property::CONSUME_START_TIME, started);
        delivered
    }
}
