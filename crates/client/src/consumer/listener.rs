//! What the application plugs into a push consumer, and the pure rules for what a consume
//! result means.

use std::borrow::Borrow;
use std::future::Future;

use crate::message::MessageExt;
use crate::BoxFuture;

/// A concurrent listener's verdict on a batch (Java `ConsumeConcurrentlyStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeStatus {
    /// Every message up to `ack_index` is consumed.
    Success,
    /// The whole batch is to be delivered again later.
    ReconsumeLater,
}

/// A concurrent listener's full answer: the status plus Java's `ConsumeConcurrentlyContext`
/// knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumeResult {
    pub status: ConsumeStatus,
    /// With `Success`: the index of the last consumed message; the ones after it are retried.
    /// `None` means the whole batch.
    pub ack_index: Option<usize>,
    /// Delay level of the retry: 0 lets the broker choose (3 + reconsume times), −1 sends the
    /// messages straight to the dead-letter queue, > 0 is that level.
    pub delay_level: i32,
}

impl ConsumeResult {
    pub fn success() -> Self {
        ConsumeStatus::Success.into()
    }

    pub fn reconsume_later() -> Self {
        ConsumeStatus::ReconsumeLater.into()
    }

    /// Messages `0..=ack_index` are consumed; the rest are retried.
    pub fn success_up_to(ack_index: usize) -> Self {
        Self {
            ack_index: Some(ack_index),
            ..Self::success()
        }
    }

    pub fn with_delay_level(mut self, level: i32) -> Self {
        self.delay_level = level;
        self
    }

    /// Index of the first message of a batch of `len` that must be retried (`len`: none).
    /// Java `processConsumeResult`: success clamps `ackIndex` to the batch; reconsume-later
    /// retries everything.
    pub fn first_failed(&self, len: usize) -> usize {
        match self.status {
            ConsumeStatus::Success => match self.ack_index {
                Some(index) => (index + 1).min(len),
                None => len,
            },
            ConsumeStatus::ReconsumeLater => 0,
        }
    }
}

impl From<ConsumeStatus> for ConsumeResult {
    fn from(status: ConsumeStatus) -> Self {
        Self {
            status,
            ack_index: None,
            delay_level: 0,
        }
    }
}

/// How a consumed batch is settled (Java `processConsumeResult`, concurrent), decided without I/O:
/// which messages go back to the broker, and — once the send-backs are done — which offset the
/// queue may commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// Messages counted as consumed.
    pub ok: usize,
    /// Messages to retry: `first_failed..len` of the batch.
    pub first_failed: usize,
    /// Clustering: failed messages go back to the broker; broadcasting: they are dropped.
    pub send_back: bool,
}

impl Settlement {
    pub fn plan(result: &ConsumeResult, len: usize, clustering: bool) -> Self {
        let first_failed = result.first_failed(len);
        Self {
            ok: first_failed,
            first_failed,
            send_back: clustering,
        }
    }

    /// Removes the batch from the process queue, except the messages whose send-back failed
    /// (they are consumed again locally and keep pinning the offset). Returns the offset to
    /// commit, or `None` when nothing may be committed (the queue was empty or is dropped).
    /// `batch` holds the messages themselves or shared ones (`Arc<MessageExt>`).
    pub fn finish<M: Borrow<MessageExt>>(
        &self,
        process: &mut crate::process_queue::ProcessQueue,
        batch: &[M],
        send_back_failed: &[i64],
    ) -> Option<i64> {
        let done = batch
            .iter()
            .map(|message| message.borrow().queue_offset)
            .filter(|offset| !send_back_failed.contains(offset));
        let commit = process.remove(done);
        (commit >= 0 && !process.is_dropped()).then_some(commit)
    }
}

/// An orderly listener's verdict (Java `ConsumeOrderlyStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderlyStatus {
    Success,
    /// Stop this queue for a moment and deliver the same messages again.
    SuspendCurrentQueueAMoment,
}

/// Consumes batches from many queues at once (Java `MessageListenerConcurrently`).
pub trait ConcurrentListener: Send + Sync + 'static {
    fn consume(&self, messages: Vec<MessageExt>) -> BoxFuture<'static, ConsumeResult>;
}

/// Consumes each queue's messages in queue order, one batch at a time (Java
/// `MessageListenerOrderly`).
pub trait OrderlyListener: Send + Sync + 'static {
    fn consume(&self, messages: Vec<MessageExt>) -> BoxFuture<'static, OrderlyStatus>;
}

struct ConcurrentFn<F>(F);

impl<F, Fut, R> ConcurrentListener for ConcurrentFn<F>
where
    F: Fn(Vec<MessageExt>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: Into<ConsumeResult>,
{
    fn consume(&self, messages: Vec<MessageExt>) -> BoxFuture<'static, ConsumeResult> {
        let future = (self.0)(messages);
        Box::pin(async move { future.await.into() })
    }
}

/// A concurrent listener from an async closure returning [`ConsumeStatus`] or [`ConsumeResult`].
pub fn concurrent_fn<F, Fut, R>(function: F) -> impl ConcurrentListener
where
    F: Fn(Vec<MessageExt>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: Into<ConsumeResult>,
{
    ConcurrentFn(function)
}

struct OrderlyFn<F>(F);

impl<F, Fut> OrderlyListener for OrderlyFn<F>
where
    F: Fn(Vec<MessageExt>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = OrderlyStatus> + Send + 'static,
{
    fn consume(&self, messages: Vec<MessageExt>) -> BoxFuture<'static, OrderlyStatus> {
        Box::pin((self.0)(messages))
    }
}

/// An orderly listener from an async closure.
pub fn orderly_fn<F, Fut>(function: F) -> impl OrderlyListener
where
    F: Fn(Vec<MessageExt>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = OrderlyStatus> + Send + 'static,
{
    OrderlyFn(function)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process_queue::ProcessQueue;
    use std::time::Instant;
    use tidemark_protocol::body::MessageQueue;
    use tidemark_protocol::message::MessageRecord;

    fn batch(offsets: std::ops::Range<i64>) -> Vec<MessageExt> {
        offsets
            .map(|offset| {
                let record = MessageRecord {
                    topic: "T".into(),
                    queue_offset: offset,
                    body: "b".into(),
                    ..MessageRecord::default()
                };
                MessageExt::from_record(record, &MessageQueue::new("T", "b", 0)).expect("record")
            })
            .collect()
    }

    #[test]
    fn settlement_commits_past_sent_back_messages_but_not_past_local_retries() {
        let mut process = ProcessQueue::new(Instant::now());
        let messages = batch(10..14);
        process.put(messages.iter().cloned());
        // ack_index 1: 12 and 13 are retried; 13's send-back fails.
        let plan = Settlement::plan(&ConsumeResult::success_up_to(1), messages.len(), true);
        assert_eq!((plan.ok, plan.first_failed, plan.send_back), (2, 2, true));
        assert_eq!(
            plan.finish(&mut process, &messages, &[13]),
            Some(13),
            "13 pins the offset"
        );
        assert_eq!(process.message_count(), 1);
        // The local retry of 13 succeeds later.
        let retry = batch(13..14);
        let plan = Settlement::plan(&ConsumeResult::success(), 1, true);
        assert_eq!(plan.finish(&mut process, &retry, &[]), Some(14));
    }

    #[test]
    fn settlement_of_a_dropped_queue_commits_nothing() {
        let mut process = ProcessQueue::new(Instant::now());
        let messages = batch(0..3);
        process.put(messages.iter().cloned());
        process.drop_queue();
        let plan = Settlement::plan(&ConsumeResult::success(), 3, true);
        assert_eq!(plan.finish(&mut process, &messages, &[]), None);
    }

    #[test]
    fn broadcasting_drops_failures_and_commits_past_them() {
        let mut process = ProcessQueue::new(Instant::now());
        let messages = batch(5..7);
        process.put(messages.iter().cloned());
        let plan = Settlement::plan(&ConsumeResult::reconsume_later(), 2, false);
        assert_eq!((plan.ok, plan.send_back), (0, false));
        assert_eq!(plan.finish(&mut process, &messages, &[]), Some(7));
    }

    #[test]
    fn first_failed_follows_javas_ack_index_rules() {
        assert_eq!(ConsumeResult::success().first_failed(4), 4);
        assert_eq!(ConsumeResult::success_up_to(1).first_failed(4), 2);
        assert_eq!(ConsumeResult::success_up_to(0).first_failed(4), 1);
        assert_eq!(
            ConsumeResult::success_up_to(99).first_failed(4),
            4,
            "clamped to the batch"
        );
        assert_eq!(ConsumeResult::reconsume_later().first_failed(4), 0);
        assert_eq!(
            ConsumeResult {
                ack_index: Some(2),
                ..ConsumeResult::reconsume_later()
            }
            .first_failed(4),
            0,
            "reconsume-later ignores the ack index"
        );
    }
}
