//! The lite pull consumer's consumption mode: pull loops put each pulled batch into a bounded
//! buffer ([`PollBuffer`]), and the application's `poll` takes it out ([`Polled`]), which marks
//! it consumed in its queue's process queue.

use std::sync::Arc;

use tidemark_protocol::body::MessageQueue;
use tokio::sync::mpsc;

use crate::consumer::queues::QueueSlot;
use crate::message::MessageExt;

/// Pulled batches buffered for `poll` (Java `pullThresholdForAll` counts messages; this counts
/// pull results of up to `pull_batch_size` each).
const POLL_BUFFER_BATCHES: usize = 1000;

/// A pulled batch with the queue it came from.
type Batch = (Arc<QueueSlot>, Vec<Arc<MessageExt>>);

/// The pull loops' end of the buffer.
pub(crate) struct PollBuffer(mpsc::Sender<Batch>);

/// The application's end of the buffer.
#[derive(Debug)]
pub(crate) struct Polled(tokio::sync::Mutex<mpsc::Receiver<Batch>>);

/// A batch taken by `poll`.
pub(crate) struct PolledBatch {
    pub(crate) queue: MessageQueue,
    /// The queue's consumed offset once this batch counts as consumed (−1: nothing to commit).
    pub(crate) consumed: i64,
    pub(crate) messages: Vec<MessageExt>,
}

pub(crate) fn poll_buffer() -> (PollBuffer, Polled) {
    let (sender, receiver) = mpsc::channel(POLL_BUFFER_BATCHES);
    (
        PollBuffer(sender),
        Polled(tokio::sync::Mutex::new(receiver)),
    )
}

impl PollBuffer {
    /// Waits while the buffer is full. `false` when the queue was stopped meanwhile or the
    /// consumer is gone.
    pub(super) async fn push(&self, slot: &Arc<QueueSlot>, messages: Vec<Arc<MessageExt>>) -> bool {
        tokio::select! {
            _ = slot.stopped() => false,
            sent = self.0.send((slot.clone(), messages)) => sent.is_ok(),
        }
    }
}

impl Polled {
    /// Waits until `deadline` for a batch of a queue still assigned, and marks it consumed.
    /// Retried messages get their original topic back (`group`'s retry topic is restored).
    pub(crate) async fn next(
        &self,
        deadline: tokio::time::Instant,
        group: &str,
    ) -> Option<PolledBatch> {
        let mut polled = self.0.lock().await;
        loop {
            let (slot, messages) = tokio::time::timeout_at(deadline, polled.recv())
                .await
                .ok()??;
            // Batches of queues given up or seeked away from are stale.
            if slot.is_dropped() {
                continue;
            }
            let consumed = slot.with_process(|process| {
                process.remove(messages.iter().map(|message| message.queue_offset))
            });
            // The process queue let go of them just now: usually the last holder, so no copy.
            let messages = messages
                .into_iter()
                .map(|message| {
                    let mut message = Arc::unwrap_or_clone(message);
                    message.restore_retry_topic(group);
                    message
                })
                .collect();
            return Some(PolledBatch {
                queue: slot.queue.clone(),
                consumed,
                messages,
            });
        }
    }
}
