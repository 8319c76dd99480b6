//! One pull loop per assigned queue: long-polls the broker (15 s), respects flow control and
//! pauses, filters by tag, and hands what it found to the consumption mode.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tidemark_protocol::acked::{ACKED_RANGES_FIELD, HAND_OFF_FIELD};
use tidemark_protocol::ResponseCode;

/// A pull refused because the broker did not know the consumer is retried this soon after the
/// heartbeat that told it.
const PULL_DELAY_AFTER_HEARTBEAT: std::time::Duration = std::time::Duration::from_millis(200);

use tidemark_protocol::body::{SubscriptionData, MASTER_ID};
use tidemark_protocol::headers::{pull_sys_flag, PullMessageRequestHeader};
use tidemark_remoting::now_ms;
use tracing::{debug, warn};

use super::core::ConsumerCore;
use super::queues::QueueSlot;
use crate::instance::{
    PullStatus, HELD_PULL_PROBE_AFTER, PULL_SUSPEND, PULL_TIMEOUT_WHEN_SUSPENDED,
};
use crate::message::MessageExt;

/// Pause after a failed pull (`pullTimeDelayMillsWhenException`).
pub(super) const PULL_DELAY_ON_ERROR: Duration = Duration::from_secs(3);
/// Pause while a queue is over its flow limits (`PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL`).
const PULL_DELAY_ON_FLOW_CONTROL: Duration = Duration::from_millis(50);
/// Pause while the consumer is suspended (`PULL_TIME_DELAY_MILLS_WHEN_SUSPEND`).
const PULL_DELAY_ON_PAUSE: Duration = Duration::from_secs(1);

impl ConsumerCore {
    /// Makes `slot` the queue's slot and starts its pull loop at `start`.
    pub(super) fn start_pulling(self: &Arc<Self>, slot: Arc<QueueSlot>, start: i64) {
        self.queues.insert(slot.clone());
        let core = self.clone();
        tokio::spawn(async move { core.pull_loop(slot, start).await });
    }

    async fn pull_loop(self: Arc<Self>, slot: Arc<QueueSlot>, start: i64) {
        let queue = slot.queue.clone();
        let mut next_offset = start;
        let mut broker_id = MASTER_ID;
        let subscription = self.subscriptions.get(&queue.topic).cloned();
        loop {
            if slot.is_stopped() || self.token.is_cancelled() {
                break;
            }
            if let Some(wait) = self.pull_wait(&slot) {
                slot.pause(wait).await;
                continue;
            }
            let commit_offset = if self.is_clustering() && self.rules.piggyback_commit {
                self.offsets.read_memory(&queue).unwrap_or(0)
            } else {
                0
            };
            let (addr, from_slave) = match self
                .instance
                .subscribe_addr_refreshing(&queue.topic, &queue.broker_name, broker_id)
                .await
            {
                Ok(found) => found,
                Err(error) => {
                    debug!(?queue, %error, "no broker to pull from");
                    slot.pause(PULL_DELAY_ON_ERROR).await;
                    continue;
                }
            };
            let with_expression = self.rules.pull_with_expression;
            let header = PullMessageRequestHeader {
                consumer_group: self.settings.group.clone(),
                topic: queue.topic.clone(),
                queue_id: queue.queue_id,
                queue_offset: next_offset,
                max_msg_nums: self.settings.pull_batch_size,
                // A slave never stores piggy-backed commits; do not offer them.
                sys_flag: pull_sys_flag::build(
                    commit_offset > 0 && !from_slave,
                    true,
                    with_expression,
                    false,
                ),
                commit_offset,
                suspend_timeout_millis: PULL_SUSPEND.as_millis() as i64,
                subscription: with_expression.then(|| {
                    subscription
                        .as_ref()
                        .map_or_else(|| "*".to_owned(), |sub| sub.sub_string.clone())
                }),
                sub_version: subscription.as_ref().map_or(0, |sub| sub.sub_version),
                expression_type: Some("TAG".into()),
                max_msg_bytes: None,
                broker_name: Some(queue.broker_name.clone()),
            };
            // Tidemark's extensions (ignored by Apache brokers): this consumer hands its queues
            // off explicitly, and its commit carries the acknowledged ranges above it.
            let mut extra = Vec::new();
            if self.rules.report_acked {
                extra.push((HAND_OFF_FIELD, "1".to_owned()));
                let acked = self.offsets.acked(&queue).encode(commit_offset);
                if commit_offset > 0 && !acked.is_empty() {
                    extra.push((ACKED_RANGES_FIELD, acked));
                }
            }
            let pull_started = Instant::now();
            let outcome = tokio::select! {
                _ = slot.stopped() => break,
                // A failover moved the broker name while the pull was held: pull from the new
                // master rather than wait out the old one's silence.
                _ = self.instance.until_moved_from(&addr, &queue.broker_name, broker_id, HELD_PULL_PROBE_AFTER) => {
                    debug!(?queue, %addr, "pull abandoned: the routes name another broker now");
                    continue;
                }
                outcome = self.instance.pull(&addr, &header, &queue, PULL_TIMEOUT_WHEN_SUSPENDED, &extra) => outcome,
            };
            if let Ok(outcome) = &outcome {
                let found = match &outcome.status {
                    PullStatus::Found(messages) => messages.len(),
                    _ => 0,
                };
                let rt_ms = u64::try_from(pull_started.elapsed().as_millis()).unwrap_or(u64::MAX);
                self.rates.pulled(&queue.topic, rt_ms, found, now_ms());
            }
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(error) => {
                    debug!(?queue, %error, "pull failed");
                    if matches!(
                        error.response_code(),
                        Some(
                            ResponseCode::SubscriptionNotExist
                                | ResponseCode::SubscriptionNotLatest
                        )
                    ) {
                        // The broker lost this consumer (a restart): register again now and
                        // pull again soon.
                        self.instance.heartbeat_now().await;
                        slot.pause(PULL_DELAY_AFTER_HEARTBEAT).await;
                        continue;
                    }
                    // A broker that died may have been replaced already: ask, and go there as
                    // soon as the routes name another (the pause ends early then).
                    self.instance.probe_broker(&addr).await;
                    tokio::select! {
                        _ = slot.pause(PULL_DELAY_ON_ERROR) => {}
                        _ = self.instance.until_moved_from(&addr, &queue.broker_name, broker_id, HELD_PULL_PROBE_AFTER) => {}
                    }
                    continue;
                }
            };
            broker_id = outcome.suggest_which_broker_id;
            slot.with_process(|process| process.record_pull(Instant::now()));
            match outcome.status {
                PullStatus::Found(messages) => {
                    next_offset = outcome.next_begin_offset;
                    // Shared from here on: the process queue, the consume task and settlement
                    // all hold the same message.
                    let messages: Vec<Arc<MessageExt>> = messages
                        .into_iter()
                        .filter(|message| matches_tags(subscription.as_ref(), message))
                        .map(Arc::new)
                        .collect();
                    // What an earlier owner of the queue already consumed is not delivered again.
                    let (messages, skipped) = if self.rules.report_acked {
                        slot.with_process(|process| process.drop_acknowledged(messages))
                    } else {
                        (messages, 0)
                    };
                    if skipped > 0 {
                        let progress = slot.with_process(|process| {
                            let commit = process.commit_point();
                            (commit, process.acked_above(commit))
                        });
                        if progress.0 >= 0 {
                            self.offsets
                                .update_with_acked(&queue, progress.0, progress.1);
                        }
                        debug!(
                            ?queue,
                            skipped, "skipped messages an earlier owner consumed"
                        );
                    }
                    if messages.is_empty() {
                        continue;
                    }
                    let start_orderly =
                        slot.with_process(|process| process.put(messages.iter().cloned()));
                    if !self.hand_over(&slot, messages, start_orderly).await {
                        break;
                    }
                }
                PullStatus::NoNewMessage | PullStatus::NoMatchedMessage => {
                    next_offset = outcome.next_begin_offset;
                    // Filtered-out ranges become committed progress when nothing is in flight.
                    if slot.with_process(|process| process.is_empty()) {
                        self.offsets.update(&queue, next_offset, true);
                    }
                }
                PullStatus::OffsetIllegal => {
                    warn!(
                        ?queue,
                        requested = next_offset,
                        corrected = outcome.next_begin_offset,
                        "pull offset out of range; correcting it"
                    );
                    slot.drop_queue();
                    self.offsets
                        .update(&queue, outcome.next_begin_offset, false);
                    if let Err(error) = self.offsets.persist(&queue).await {
                        warn!(?queue, %error, "persisting the corrected offset failed");
                    }
                    self.offsets.remove(&queue);
                    self.queues.remove(&queue);
                    self.request_rebalance();
                    break;
                }
            }
        }
        debug!(?queue, "pull loop ended");
    }

    /// Why the next pull of `slot` has to wait, and how long.
    fn pull_wait(&self, slot: &QueueSlot) -> Option<Duration> {
        if self.rebalance.is_paused() {
            return Some(PULL_DELAY_ON_PAUSE);
        }
        slot.with_process(|process| {
            if process
                .flow_control(&self.settings.flow_limits, self.rules.limit_span)
                .is_some()
            {
                Some(PULL_DELAY_ON_FLOW_CONTROL)
            } else if self.rules.lock_queues && !process.is_locked() {
                Some(PULL_DELAY_ON_ERROR)
            } else {
                None
            }
        })
    }
}

/// Whether `message` passes the subscription's tag filter (the broker filters by tag hash only).
fn matches_tags(subscription: Option<&SubscriptionData>, message: &MessageExt) -> bool {
    match subscription {
        Some(sub) if !sub.tags_set.is_empty() => message
            .tags()
            .is_some_and(|tag| sub.tags_set.iter().any(|t| t == tag)),
        _ => true,
    }
}
