//! Orderly consumption (Java `ConsumeMessageOrderlyService`): one task per queue takes its
//! messages in offset order; in clustering mode a queue is consumed only while this client holds
//! its lock at the broker (taken on assignment, renewed every 20 s, given back on release and at
//! shutdown). A failed batch is retried in place, and dead-lettered past the maximum.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_protocol::body::MessageQueue;
use tracing::{debug, warn};

use crate::consumer::core::ConsumerCore;
use crate::consumer::listener::{OrderlyListener, OrderlyStatus};
use crate::consumer::queues::QueueSlot;
use crate::message::MessageExt;

/// How often queue locks are renewed (`REBALANCE_LOCK_INTERVAL`).
const LOCK_RENEW_INTERVAL: Duration = Duration::from_secs(20);
/// Pause before asking again for a lock the broker did not grant.
const LOCK_RETRY_DELAY: Duration = Duration::from_millis(500);

impl ConsumerCore {
    pub(super) fn spawn_orderly(
        self: &Arc<Self>,
        listener: &Arc<dyn OrderlyListener>,
        slot: &Arc<QueueSlot>,
    ) {
        let core = self.clone();
        let listener = listener.clone();
        let slot = slot.clone();
        tokio::spawn(async move {
            slot.consume_exclusively(core.consume_orderly(&listener, &slot))
                .await;
        });
    }

    /// Consumes `slot` until nothing waits in it (or it is dropped).
    async fn consume_orderly(&self, listener: &Arc<dyn OrderlyListener>, slot: &QueueSlot) {
        loop {
            if slot.is_dropped() || self.token.is_cancelled() {
                return;
            }
            if self.rules.lock_queues && !self.hold_lock(slot).await {
                slot.pause(LOCK_RETRY_DELAY).await;
                continue;
            }
            let taken =
                slot.with_process(|process| process.take(self.settings.consume_batch_max_size));
            if taken.is_empty() {
                return;
            }
            let Ok(permit) = self.permits.clone().acquire_owned().await else {
                return;
            };
            let (status, started) = self
                .call_listener(&taken, |messages| listener.consume(messages))
                .await;
            let status = status.unwrap_or_else(|| {
                warn!(queue = ?slot.queue, "orderly listener timed out; suspending the queue");
                OrderlyStatus::SuspendCurrentQueueAMoment
            });
            if slot.is_dropped() {
                return;
            }
            let (ok, failed) = match status {
                OrderlyStatus::Success => (taken.len(), 0),
                OrderlyStatus::SuspendCurrentQueueAMoment => (0, taken.len()),
            };
            self.rates
                .settled(&slot.queue.topic, ok, failed, tidemark_remoting::now_ms());
            let commit = match status {
                OrderlyStatus::Success => slot.with_process(|process| process.commit()),
                OrderlyStatus::SuspendCurrentQueueAMoment => {
                    let (suspend, again) = self.check_reconsume_times(taken, &started).await;
                    if suspend {
                        slot.with_process(|process| process.requeue(again));
                        drop(permit);
                        slot.pause(self.settings.suspend_current_queue_time).await;
                        continue;
                    }
                    slot.with_process(|process| process.commit())
                }
            };
            if commit >= 0 && !slot.is_dropped() {
                self.offsets.update(&slot.queue, commit, false);
            }
        }
    }

    /// Whether this client holds `slot`'s broker lock, asking for it again when it is not
    /// held or has not been renewed for too long.
    async fn hold_lock(&self, slot: &QueueSlot) -> bool {
        let now = Instant::now();
        let held =
            slot.with_process(|process| process.is_locked() && !process.is_lock_expired(now));
        if held {
            return true;
        }
        let granted = self.lock_one(&slot.queue).await;
        slot.with_process(|process| process.set_locked(granted, Instant::now()));
        granted
    }

    /// Java `checkReconsumeTimes`: messages past the maximum are handed to the broker's
    /// dead-letter path; the rest (and any that could not be handed over) are retried here.
    /// Returns whether the queue must be suspended, and the messages to put back (as they were
    /// delivered at `started`, with their delivery counted).
    async fn check_reconsume_times(
        &self,
        taken: Vec<Arc<MessageExt>>,
        started: &str,
    ) -> (bool, Vec<Arc<MessageExt>>) {
        let max = self.rules.max_reconsume_times;
        let mut suspend = false;
        let mut again = Vec::with_capacity(taken.len());
        for message in taken {
            let mut message = self.delivered(&message, started);
            if message.reconsume_times >= max {
                let delay_level = 3 + message.reconsume_times;
                if let Err(error) = self.send_to_retry_topic(&message, delay_level).await {
                    warn!(msg_id = %message.msg_id, %error, "dead-lettering failed; retrying locally");
                    suspend = true;
                    message.reconsume_times += 1;
                }
            } else {
                suspend = true;
                message.reconsume_times += 1;
            }
            again.push(Arc::new(message));
        }
        (suspend, again)
    }

    // --- broker locks ------------------------------------------------------------------------

    pub(in crate::consumer) fn spawn_lock_renewal(self: &Arc<Self>) {
        crate::every(
            self,
            self.token.clone(),
            LOCK_RENEW_INTERVAL,
            |core| async move { core.lock_all().await },
        );
    }

    pub(in crate::consumer) async fn lock_one(&self, queue: &MessageQueue) -> bool {
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
        for slot in self.queues.slots() {
            by_broker
                .entry(slot.queue.broker_name.clone())
                .or_default()
                .push(slot);
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
                        let granted = locked.contains(&slot.queue);
                        slot.with_process(|process| process.set_locked(granted, now));
                    }
                }
                Err(error) => debug!(%broker, %error, "lock renewal failed"),
            }
        }
    }

    pub(in crate::consumer) async fn unlock_one(&self, queue: &MessageQueue) {
        if let Some(addr) = self.instance.master_addr(&queue.broker_name) {
            let _ = self
                .instance
                .unlock_queues(&addr, &self.settings.group, vec![queue.clone()])
                .await;
        }
    }

    /// At shutdown: every assigned queue's lock, one request per broker.
    pub(in crate::consumer) async fn unlock_all(&self) {
        let mut by_broker: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
        for queue in self.queues.queues() {
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
}
