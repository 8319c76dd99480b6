//! Concurrent consumption (Java `ConsumeMessageConcurrentlyService`): each pulled batch is cut
//! into listener-sized batches consumed in parallel, bounded by the consumer's permits; failed
//! messages go back to the broker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_remoting::now_ms;
use tracing::warn;

use crate::consumer::core::ConsumerCore;
use crate::consumer::listener::{ConcurrentListener, ConsumeResult, Settlement};
use crate::consumer::queues::QueueSlot;
use crate::message::MessageExt;

/// Messages whose send-back failed are consumed again locally after this long.
const LOCAL_RETRY_DELAY: Duration = Duration::from_secs(5);

impl ConsumerCore {
    pub(super) fn dispatch_concurrently(
        self: &Arc<Self>,
        listener: &Arc<dyn ConcurrentListener>,
        slot: &Arc<QueueSlot>,
        messages: Vec<Arc<MessageExt>>,
    ) {
        for batch in messages.chunks(self.settings.consume_batch_max_size) {
            let core = self.clone();
            let slot = slot.clone();
            let listener = listener.clone();
            let batch = batch.to_vec();
            tokio::spawn(async move { core.consume_concurrently(listener, slot, batch).await });
        }
    }

    async fn consume_concurrently(
        self: Arc<Self>,
        listener: Arc<dyn ConcurrentListener>,
        slot: Arc<QueueSlot>,
        batch: Vec<Arc<MessageExt>>,
    ) {
        let Ok(_permit) = self.permits.clone().acquire_owned().await else {
            return;
        };
        // A queue given up or being handed off starts no more listener calls; its messages are
        // the next owner's.
        let Some(_call) = slot.begin_call() else {
            return;
        };
        let (result, started) = self
            .call_listener(&batch, |messages| listener.consume(messages))
            .await;
        let result = result.unwrap_or_else(|| {
            warn!(queue = ?slot.queue, "listener timed out; the batch counts as consume-later (retried, or dropped in broadcasting)");
            ConsumeResult::reconsume_later()
        });
        slot.with_process(|process| process.record_consume(Instant::now()));
        // A queue given up meanwhile belongs to someone else now: commit nothing.
        if slot.is_dropped() {
            return;
        }
        self.settle_concurrent(&listener, &slot, batch, &started, result)
            .await;
    }

    /// Java `processConsumeResult` (concurrent): failed messages go back to the broker (or are
    /// dropped in broadcasting mode); what cannot be sent back is consumed again here later and
    /// keeps pinning the offset meanwhile. Failed messages are settled as the listener was
    /// handed them (consumption started at `started`).
    async fn settle_concurrent(
        self: &Arc<Self>,
        listener: &Arc<dyn ConcurrentListener>,
        slot: &Arc<QueueSlot>,
        batch: Vec<Arc<MessageExt>>,
        started: &str,
        result: ConsumeResult,
    ) {
        let plan = Settlement::plan(&result, batch.len(), self.is_clustering());
        self.rates.settled(
            &slot.queue.topic,
            plan.first_failed,
            batch.len() - plan.first_failed,
            now_ms(),
        );
        let mut retry_here = Vec::new();
        for message in &batch[plan.first_failed..] {
            if !plan.send_back {
                warn!(msg_id = %message.msg_id, "broadcasting: a failed message is dropped");
                continue;
            }
            let message = self.delivered(message, started);
            if let Err(error) = self.send_back(&message, result.delay_level).await {
                warn!(msg_id = %message.msg_id, %error, "send-back failed; retrying locally in 5 s");
                let mut again = message;
                again.reconsume_times += 1;
                retry_here.push(Arc::new(again));
            }
        }
        let failed: Vec<i64> = retry_here
            .iter()
            .map(|message| message.queue_offset)
            .collect();
        let report_acked = self.rules.report_acked;
        let settled = slot.with_process(|process| {
            let commit = plan.finish(process, &batch, &failed)?;
            let acked = report_acked.then(|| process.acked_above(commit));
            Some((commit, acked))
        });
        match settled {
            Some((commit, Some(acked))) => {
                self.offsets.update_with_acked(&slot.queue, commit, acked)
            }
            Some((commit, None)) => self.offsets.update(&slot.queue, commit, true),
            None => {}
        }
        if !retry_here.is_empty() {
            let core = self.clone();
            let listener = listener.clone();
            let slot = slot.clone();
            // They are still in the process queue (pinning the offset); only consume them again.
            tokio::spawn(async move {
                tokio::select! {
                    _ = slot.stopped() => {}
                    _ = tokio::time::sleep(LOCAL_RETRY_DELAY) => {
                        core.dispatch_concurrently(&listener, &slot, retry_here);
                    }
                }
            });
        }
    }
}
