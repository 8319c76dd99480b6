//! Which queues are this consumer's: the periodic rebalance (20 s, on notice, after a reset),
//! queue assignment and release, where a new queue starts, the broker's offset resets, and the
//! lite pull consumer's manual `assign` and `seek`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_protocol::body::{ConsumeFromWhere, MessageQueue, MASTER_ID};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use super::core::ConsumerCore;
use super::queues::QueueSlot;
use crate::error::{ClientError, Result};
use crate::message::RETRY_TOPIC_PREFIX;
use crate::route::subscribe_queues;

/// How long a release waits for an orderly batch in progress before trying again next round.
const RELEASE_WAIT_FOR_CONSUME: Duration = Duration::from_secs(1);

/// The first wait before a round that left something undone (a topic with no route yet, a
/// queue whose start could not be read or whose lock was refused) runs again; it doubles up to
/// the rebalance interval. Java only tries again at the next interval (20 s), which leaves a
/// consumer started just before its topic idle for that long.
const UNSETTLED_RETRY_FIRST: Duration = Duration::from_secs(1);

/// How a rebalance round ended: everything assigned as computed, or something left for a retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    Settled,
    Unsettled,
}

/// A queue whose release took this long is checked against the members again before it is
/// taken (a release that was already there costs no extra request).
const RECHECK_AFTER_WAITING: Duration = Duration::from_millis(100);

/// A consumer's share of a topic's queues, as the route and the group's members say now.
enum Allocation {
    Mine(BTreeSet<MessageQueue>),
    /// The group's retry topic, before anything was sent back: nothing to consume yet.
    NoRetryTopicYet,
    /// No route, or no broker to ask for the members: try again later.
    Unknown,
}

/// When and whether the rebalance runs.
#[derive(Default)]
pub(super) struct RebalanceState {
    /// Wakes the rebalance task before its interval.
    now: Notify,
    /// Set while an offset reset is being applied.
    paused: AtomicBool,
    /// Serialises changes to the assignment (timer, notices, resets, assign, seek).
    serial: tokio::sync::Mutex<()>,
    /// Lite pull `assign` mode: the application picks the queues; no rebalance.
    manual: AtomicBool,
}

impl RebalanceState {
    pub(super) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }
}

impl ConsumerCore {
    pub(super) fn spawn_rebalance_task(self: &Arc<Self>) {
        let core = Arc::downgrade(self);
        let token = self.token.clone();
        let interval = self.settings.rebalance_interval;
        tokio::spawn(async move {
            let mut retry = UNSETTLED_RETRY_FIRST;
            loop {
                let Some(strong) = core.upgrade() else { break };
                let wait = if strong.rebalance().await == Round::Settled {
                    retry = UNSETTLED_RETRY_FIRST;
                    interval
                } else {
                    let wait = retry.min(interval);
                    retry = retry.saturating_mul(2);
                    wait
                };
                let notified = async { strong.rebalance.now.notified().await };
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(wait) => {}
                    _ = notified => {}
                }
            }
        });
    }

    pub(crate) fn request_rebalance(&self) {
        self.rebalance.now.notify_one();
    }

    async fn rebalance(self: &Arc<Self>) -> Round {
        if self.rebalance.is_paused()
            || self.token.is_cancelled()
            || self.rebalance.manual.load(Ordering::Acquire)
        {
            return Round::Settled;
        }
        let _serial = self.rebalance.serial.lock().await;
        let mut round = Round::Settled;
        for topic in self.subscriptions.keys() {
            let mut outcome = self.rebalance_topic(topic).await;
            if let Err(ClientError::Broker { remark, .. }) = &outcome {
                if remark.starts_with("no consumer for this group") {
                    // The broker lost this consumer (a restart): register again, then retry.
                    self.instance.heartbeat_now().await;
                    outcome = self.rebalance_topic(topic).await;
                }
            }
            match outcome {
                Ok(Round::Settled) => {}
                Ok(Round::Unsettled) => round = Round::Unsettled,
                Err(error) => {
                    warn!(group = %self.settings.group, %topic, %error, "rebalance failed");
                    round = Round::Unsettled;
                }
            }
        }
        round
    }

    async fn rebalance_topic(self: &Arc<Self>, topic: &str) -> Result<Round> {
        match self.allocation(topic).await? {
            Allocation::Mine(mine) => Ok(self.update_queue_table(topic, mine).await),
            Allocation::NoRetryTopicYet => Ok(Round::Settled),
            Allocation::Unknown => Ok(Round::Unsettled),
        }
    }

    /// This consumer's share of `topic`'s queues, from the route and the group's members now.
    async fn allocation(&self, topic: &str) -> Result<Allocation> {
        let Some(route) = self.instance.update_route(topic).await? else {
            // A group's retry topic exists only once something was sent back: nothing to wait for.
            if topic.starts_with(RETRY_TOPIC_PREFIX) {
                return Ok(Allocation::NoRetryTopicYet);
            }
            warn!(group = %self.settings.group, %topic, "topic does not exist");
            return Ok(Allocation::Unknown);
        };
        let all = subscribe_queues(topic, &route);
        if !self.is_clustering() {
            return Ok(Allocation::Mine(all.into_iter().collect()));
        }
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
            return Ok(Allocation::Unknown);
        };
        let consumers = self
            .instance
            .consumer_ids(&addr, &self.settings.group)
            .await?;
        Ok(Allocation::Mine(
            self.settings
                .allocate_strategy
                .allocate(self.client_id(), &all, &consumers)
                .into_iter()
                .collect(),
        ))
    }

    /// After the previous owner of `queue` did not release it in time: whether this consumer
    /// should still take it. The share was computed from the member list at the round's start;
    /// a consumer that joined with others may have read it before they all registered, and
    /// then waits for a queue another member rightly holds. Asked again, the members say.
    async fn still_assigned(&self, queue: &MessageQueue) -> bool {
        match self.allocation(&queue.topic).await {
            Ok(Allocation::Mine(mine)) => mine.contains(queue),
            // Nothing better known: the owner is taken to be gone, as before.
            Ok(Allocation::NoRetryTopicYet | Allocation::Unknown) | Err(_) => true,
        }
    }

    async fn update_queue_table(
        self: &Arc<Self>,
        topic: &str,
        mine: BTreeSet<MessageQueue>,
    ) -> Round {
        let now = Instant::now();
        let mut round = Round::Settled;
        let leaving = self.queues.slots_where(|slot| {
            slot.queue.topic == topic
                && (!mine.contains(&slot.queue)
                    // A queue not pulled for long has a stuck pull loop: restart it (Java
                    // does for push consumers; a lite pull application may just not poll).
                    || (self.rules.restart_idle_queues
                        && slot.with_process(|process| process.is_pull_expired(now))))
        });
        if self.rules.report_acked {
            // All at once, so their running listener calls finish in parallel.
            for slot in &leaving {
                slot.begin_release();
            }
        }
        for slot in leaving {
            if self.release_queue(&slot).await {
                self.queues.remove(&slot.queue);
                info!(group = %self.settings.group, queue = ?slot.queue, "queue released");
            } else {
                round = Round::Unsettled;
            }
        }
        // Queues taken over wait, together, for their previous owners to release them.
        let take_over_deadline =
            tokio::time::Instant::now() + 2 * self.settings.client.hand_off_timeout;
        for queue in mine {
            if self.queues.contains(&queue) {
                continue;
            }
            if self.rules.report_acked {
                let left =
                    take_over_deadline.saturating_duration_since(tokio::time::Instant::now());
                let waiting_since = tokio::time::Instant::now();
                let released = self.offsets.wait_released(&queue, left).await;
                // A queue that had to be waited for: the members may have changed meanwhile
                // (this share may come from a list read before others registered), so the
                // share is asked again before two consumers pull the same queue.
                if (!released || waiting_since.elapsed() >= RECHECK_AFTER_WAITING)
                    && !self.still_assigned(&queue).await
                {
                    info!(group = %self.settings.group, ?queue, "the queue is another member's now; not taken");
                    round = Round::Unsettled;
                    continue;
                }
                if !released {
                    warn!(group = %self.settings.group, ?queue, "the previous owner did not release the queue in time; taking it over anyway");
                }
            }
            if self.rules.lock_queues && !self.lock_one(&queue).await {
                debug!(
                    ?queue,
                    "queue lock not granted; the rebalance tries again soon"
                );
                round = Round::Unsettled;
                continue;
            }
            // A value left over from an earlier assignment may be stale.
            self.offsets.remove(&queue);
            let start = match self.compute_start_offset(&queue).await {
                Ok(offset) => offset,
                Err(error) => {
                    warn!(?queue, %error, "cannot tell where to start; skipped this round");
                    round = Round::Unsettled;
                    continue;
                }
            };
            let slot = QueueSlot::new(queue.clone());
            if self.rules.report_acked {
                // Read from the broker with the offset: what an earlier owner consumed above it.
                let acked = self.offsets.acked(&queue);
                if !acked.is_empty() {
                    debug!(
                        ?queue,
                        start,
                        ranges = acked.len(),
                        "earlier owner's acknowledged ranges will be skipped"
                    );
                    slot.with_process(|process| process.set_acknowledged(acked));
                }
            }
            if self.rules.lock_queues {
                slot.with_process(|process| process.set_locked(true, Instant::now()));
            }
            info!(group = %self.settings.group, ?queue, start, "queue assigned");
            self.start_pulling(slot, start);
        }
        round
    }

    /// Gives a queue up: stop it, persist its offset, forget it (Java
    /// `removeUnnecessaryMessageQueue`). Locked queues are also unlocked at the broker, after
    /// the batch in progress has committed; `false` when that batch did not finish in time.
    async fn release_queue(&self, slot: &Arc<QueueSlot>) -> bool {
        if self.rules.report_acked {
            // Hand-off: the running listener calls finish and commit, then the final progress
            // (offset and acknowledged ranges) is committed as a release, which lets the next
            // owner start.
            slot.begin_release();
            if !slot
                .calls_finished(self.settings.client.hand_off_timeout)
                .await
            {
                warn!(queue = ?slot.queue, "listener calls still running at hand-off; their messages go to the next owner");
            }
            slot.drop_queue();
            if let Err(error) = self.offsets.persist_released(&slot.queue).await {
                warn!(queue = ?slot.queue, %error, "committing a released queue's progress failed");
            }
            self.offsets.remove(&slot.queue);
            return true;
        }
        slot.drop_queue();
        let forget = async {
            if let Err(error) = self.offsets.persist(&slot.queue).await {
                warn!(queue = ?slot.queue, %error, "persisting a released queue's offset failed");
            }
            self.offsets.remove(&slot.queue);
            if self.rules.lock_queues {
                self.unlock_one(&slot.queue).await;
            }
        };
        if self.rules.lock_queues {
            slot.after_consuming(RELEASE_WAIT_FOR_CONSUME, forget)
                .await
                .is_some()
        } else {
            forget.await;
            true
        }
    }

    /// Where a newly assigned queue starts (Java `computePullFromWhereWithException`).
    async fn compute_start_offset(&self, queue: &MessageQueue) -> Result<i64> {
        if let Some(offset) = self
            .offsets
            .read(queue, self.rules.start_offset_from)
            .await?
        {
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

    pub(super) async fn broker_addr(&self, queue: &MessageQueue) -> Result<String> {
        Ok(self
            .instance
            .subscribe_addr_refreshing(&queue.topic, &queue.broker_name, MASTER_ID)
            .await?
            .0)
    }

    /// RESET_CONSUMER_CLIENT_OFFSET: the queues of `topic` restart from the given offsets.
    pub(super) async fn reset_offsets(
        self: Arc<Self>,
        topic: &str,
        offsets: BTreeMap<MessageQueue, i64>,
    ) {
        info!(group = %self.settings.group, %topic, queues = offsets.len(), "offset reset from the broker");
        self.rebalance.paused.store(true, Ordering::Release);
        let _serial = self.rebalance.serial.lock().await;
        let affected = self
            .queues
            .slots_where(|slot| slot.queue.topic == topic && offsets.contains_key(&slot.queue));
        for slot in &affected {
            slot.drop_queue();
            slot.with_process(|process| process.clear());
        }
        for slot in affected {
            if let Some(offset) = offsets.get(&slot.queue) {
                self.offsets.update(&slot.queue, *offset, false);
                if let Err(error) = self.offsets.persist(&slot.queue).await {
                    warn!(queue = ?slot.queue, %error, "persisting a reset offset failed");
                }
                self.offsets.remove(&slot.queue);
            }
            self.queues.remove(&slot.queue);
        }
        self.rebalance.paused.store(false, Ordering::Release);
        drop(_serial);
        self.request_rebalance();
    }

    /// Lite pull `assign`: from now on exactly `queues` are consumed, no rebalance.
    pub(crate) async fn assign(self: &Arc<Self>, queues: BTreeSet<MessageQueue>) {
        self.rebalance.manual.store(true, Ordering::Release);
        let _serial = self.rebalance.serial.lock().await;
        let mut topics: BTreeSet<String> = queues.iter().map(|queue| queue.topic.clone()).collect();
        topics.extend(self.queues.queues().into_iter().map(|queue| queue.topic));
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
        let _serial = self.rebalance.serial.lock().await;
        let Some(old) = self.queues.get(queue) else {
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
        self.start_pulling(QueueSlot::new(queue.clone()), offset);
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
}
