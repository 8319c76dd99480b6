//! What a gRPC consumer has been doing, kept by the gateway so that it can answer
//! GET_CONSUMER_RUNNING_INFO for the client (mqadmin `consumerStatus`, `tidemark admin
//! consumer-status`, the console's client view) as a remoting consumer answers for itself: the
//! messages it holds, per queue (RocketMQ 5's POP table); per topic its receive, acknowledge and
//! failure rates over the last minute and its failures over the last hour; its settings.
//!
//! RocketMQ's proxy answers with a thread dump only; a gRPC client keeps no more than this
//! about itself, so the gateway, which sees every call, is where the figures are
//! (`broker_requests` answers with them).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tidemark_protocol::body::{
    running_info_property as prop, ConsumeStatus, ConsumeType, ConsumerRunningInfo, MessageQueue,
    PopProcessQueueInfo,
};

use crate::proto::settings::PubSub;
use crate::proto::{ClientType, Settings};

/// Rates are over this many one-second slots.
const RATE_SLOTS: i64 = 60;
/// Failures are counted over this many one-minute slots.
const FAILURE_SLOTS: i64 = 60;

/// Sums and counts of what happened, in fixed time slots, over a sliding span.
#[derive(Debug)]
struct Window {
    slot_ms: i64,
    slots: i64,
    /// (slot number, sum of values, count), oldest first.
    entries: VecDeque<(i64, f64, u64)>,
}

impl Window {
    fn new(slot_ms: i64, slots: i64) -> Self {
        Self {
            slot_ms,
            slots,
            entries: VecDeque::new(),
        }
    }

    fn forget_before(&mut self, now_ms: i64) {
        let oldest = now_ms.div_euclid(self.slot_ms) - self.slots + 1;
        while self
            .entries
            .front()
            .is_some_and(|(slot, ..)| *slot < oldest)
        {
            self.entries.pop_front();
        }
    }

    fn record(&mut self, now_ms: i64, value: f64) {
        self.forget_before(now_ms);
        let slot = now_ms.div_euclid(self.slot_ms);
        match self.entries.back_mut() {
            Some((last, sum, count)) if *last == slot => {
                *sum += value;
                *count += 1;
            }
            _ => self.entries.push_back((slot, value, 1)),
        }
    }

    /// (sum, count) over the span ending at `now_ms`.
    fn totals(&mut self, now_ms: i64) -> (f64, u64) {
        self.forget_before(now_ms);
        self.entries
            .iter()
            .fold((0.0, 0), |(sum, count), (_, s, c)| (sum + s, count + c))
    }

    fn span_seconds(&self) -> f64 {
        (self.slot_ms * self.slots) as f64 / 1000.0
    }
}

/// One topic's figures.
#[derive(Debug)]
struct TopicActivity {
    /// A value per message received.
    received: Window,
    /// A receive call's duration (long polling included), per call.
    receive_calls: Window,
    /// Receipt to acknowledgement, per message acknowledged.
    acked: Window,
    /// A value per message failed (put back by a push consumer, or sent to the dead letters).
    failed: Window,
    failed_in_hour: Window,
}

impl TopicActivity {
    fn new() -> Self {
        Self {
            received: Window::new(1_000, RATE_SLOTS),
            receive_calls: Window::new(1_000, RATE_SLOTS),
            acked: Window::new(1_000, RATE_SLOTS),
            failed: Window::new(1_000, RATE_SLOTS),
            failed_in_hour: Window::new(60_000, FAILURE_SLOTS),
        }
    }

    fn status(&mut self, now_ms: i64) -> ConsumeStatus {
        let per_second =
            |window: &mut Window| window.totals(now_ms).1 as f64 / window.span_seconds();
        let average = |window: &mut Window| {
            let (sum, count) = window.totals(now_ms);
            if count == 0 {
                0.0
            } else {
                sum / count as f64
            }
        };
        ConsumeStatus {
            pull_tps: per_second(&mut self.received),
            pull_rt: average(&mut self.receive_calls),
            consume_ok_tps: per_second(&mut self.acked),
            consume_rt: average(&mut self.acked),
            consume_failed_tps: per_second(&mut self.failed),
            consume_failed_msgs: i64::try_from(self.failed_in_hour.totals(now_ms).1)
                .unwrap_or(i64::MAX),
        }
    }
}

/// A message the client holds: received, neither acknowledged nor failed, still invisible.
#[derive(Debug, Clone, Copy)]
struct Held {
    received_ms: i64,
    visible_again_at: i64,
}

/// Which message: its queue (the retry topic's for a retry) and offset.
type MessageKey = (MessageQueue, i64);

#[derive(Debug, Default)]
struct Activity {
    held: HashMap<MessageKey, Held>,
    topics: HashMap<String, TopicActivity>,
}

impl Activity {
    fn topic(&mut self, topic: &str) -> &mut TopicActivity {
        self.topics
            .entry(topic.to_owned())
            .or_insert_with(TopicActivity::new)
    }

    /// Messages whose invisibility ended are someone else's again.
    fn forget_visible(&mut self, now_ms: i64) {
        self.held.retain(|_, held| held.visible_again_at > now_ms);
    }
}

/// A consumer's activity as the gateway saw it. Owns its lock.
#[derive(Debug)]
pub struct ConsumerActivity {
    started_ms: i64,
    inner: Mutex<Activity>,
}

impl ConsumerActivity {
    pub fn new(started_ms: i64) -> Self {
        Self {
            started_ms,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Activity> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A receive call on `topic` that took `took_ms` handed out `messages`: each its queue,
    /// offset and when it becomes visible again.
    pub fn received(
        &self,
        topic: &str,
        took_ms: i64,
        messages: Vec<(MessageQueue, i64, i64)>,
        now_ms: i64,
    ) {
        let mut activity = self.lock();
        activity.forget_visible(now_ms);
        let figures = activity.topic(topic);
        figures.receive_calls.record(now_ms, took_ms as f64);
        for _ in &messages {
            figures.received.record(now_ms, 1.0);
        }
        for (queue, offset, visible_again_at) in messages {
            activity.held.insert(
                (queue, offset),
                Held {
                    received_ms: now_ms,
                    visible_again_at,
                },
            );
        }
    }

    /// The message at `offset` of `queue` was acknowledged.
    pub fn acked(&self, topic: &str, queue: MessageQueue, offset: i64, now_ms: i64) {
        let mut activity = self.lock();
        let held = activity.held.remove(&(queue, offset));
        let took = held.map_or(0, |held| now_ms - held.received_ms);
        activity.topic(topic).acked.record(now_ms, took as f64);
    }

    /// The client changed the message's invisibility: held until `visible_again_at` (or let go
    /// at once), and counted as a failure when `failed`.
    pub fn invisibility_changed(
        &self,
        topic: &str,
        key: (MessageQueue, i64),
        visible_again_at: i64,
        failed: bool,
        now_ms: i64,
    ) {
        let mut activity = self.lock();
        if let Some(held) = activity.held.get_mut(&key) {
            held.visible_again_at = visible_again_at;
        }
        activity.forget_visible(now_ms);
        if failed {
            let figures = activity.topic(topic);
            figures.failed.record(now_ms, 1.0);
            figures.failed_in_hour.record(now_ms, 1.0);
        }
    }

    /// The client sent the message to its group's dead letters.
    pub fn dead_lettered(&self, topic: &str, key: (MessageQueue, i64), now_ms: i64) {
        let mut activity = self.lock();
        activity.held.remove(&key);
        let figures = activity.topic(topic);
        figures.failed.record(now_ms, 1.0);
        figures.failed_in_hour.record(now_ms, 1.0);
    }

    /// What the client would report about itself, with `settings` it sent.
    pub fn running_info(&self, settings: Option<&Settings>, now_ms: i64) -> ConsumerRunningInfo {
        let mut info = ConsumerRunningInfo {
            properties: properties(settings, self.started_ms),
            ..ConsumerRunningInfo::default()
        };
        if let Some(PubSub::Subscription(subscription)) =
            settings.and_then(|settings| settings.pub_sub.as_ref())
        {
            info.subscription_set = crate::convert::subscriptions_of(subscription);
        }
        let mut activity = self.lock();
        activity.forget_visible(now_ms);
        let mut pop_table: BTreeMap<MessageQueue, PopProcessQueueInfo> = BTreeMap::new();
        for ((queue, _), held) in &activity.held {
            let entry = pop_table.entry(queue.clone()).or_default();
            entry.wait_ack_count += 1;
            entry.last_pop_timestamp = entry.last_pop_timestamp.max(held.received_ms);
        }
        info.mq_pop_table = pop_table;
        info.status_table = activity
            .topics
            .iter_mut()
            .map(|(topic, figures)| (topic.clone(), figures.status(now_ms)))
            .collect();
        info
    }
}

/// The properties a 5.x client reports, from its settings: how it consumes, its version and
/// language, since when.
fn properties(settings: Option<&Settings>, started_ms: i64) -> BTreeMap<String, String> {
    let mut properties = BTreeMap::new();
    properties.insert(
        prop::CONSUME_TYPE.to_owned(),
        ConsumeType::ConsumePop.java_name().to_owned(),
    );
    properties.insert(
        prop::CONSUMER_START_TIMESTAMP.to_owned(),
        started_ms.to_string(),
    );
    let Some(settings) = settings else {
        return properties;
    };
    if let Some(agent) = &settings.user_agent {
        properties.insert(prop::CLIENT_VERSION.to_owned(), agent.version.clone());
        properties.insert("language".to_owned(), language_name(agent.language));
        properties.insert("hostname".to_owned(), agent.hostname.clone());
    }
    let client_type = settings
        .client_type
        .and_then(|value| ClientType::try_from(value).ok())
        .unwrap_or(ClientType::Unspecified);
    properties.insert(
        "clientType".to_owned(),
        client_type.as_str_name().to_owned(),
    );
    properties.insert("protocol".to_owned(), "grpc".to_owned());
    if let Some(PubSub::Subscription(subscription)) = &settings.pub_sub {
        properties.insert(
            prop::CONSUME_ORDERLY.to_owned(),
            subscription.fifo.unwrap_or(false).to_string(),
        );
        if let Some(batch) = subscription.receive_batch_size {
            properties.insert("receiveBatchSize".to_owned(), batch.to_string());
        }
    }
    properties
}

fn language_name(language: i32) -> String {
    crate::proto::Language::try_from(language).map_or_else(
        |_| language.to_string(),
        |known| known.as_str_name().to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(id: i32) -> MessageQueue {
        MessageQueue::new("Orders", "broker-a", id)
    }

    #[test]
    fn rates_cover_the_last_minute_and_failures_the_last_hour() {
        let activity = ConsumerActivity::new(1_000);
        let start = 10_000_000;
        activity.received(
            "Orders",
            40,
            vec![
                (queue(0), 1, start + 60_000),
                (queue(0), 2, start + 60_000),
                (queue(1), 7, start + 60_000),
            ],
            start,
        );
        activity.acked("Orders", queue(0), 1, start + 500);
        activity.invisibility_changed("Orders", (queue(0), 2), start + 5_000, true, start + 600);
        let info = activity.running_info(None, start + 1_000);
        let status = &info.status_table["Orders"];
        assert_eq!(status.pull_tps, 3.0 / 60.0);
        assert_eq!(status.pull_rt, 40.0);
        assert_eq!(status.consume_ok_tps, 1.0 / 60.0);
        assert_eq!(status.consume_rt, 500.0);
        assert_eq!(status.consume_failed_msgs, 1);
        // Held: offset 2 of queue 0 (until start + 5 s) and offset 7 of queue 1.
        assert_eq!(info.mq_pop_table[&queue(0)].wait_ack_count, 1);
        assert_eq!(info.mq_pop_table[&queue(1)].wait_ack_count, 1);
        assert_eq!(info.properties[prop::CONSUME_TYPE], "CONSUME_POP");

        // Ten minutes on: nothing in the last minute, the failure still within the hour, and
        // what was held is visible again.
        let later = activity.running_info(None, start + 600_000);
        let status = &later.status_table["Orders"];
        assert_eq!((status.pull_tps, status.consume_ok_tps), (0.0, 0.0));
        assert_eq!(status.consume_failed_msgs, 1);
        assert!(later.mq_pop_table.is_empty());
        let much_later = activity.running_info(None, start + 2 * 3_600_000);
        assert_eq!(much_later.status_table["Orders"].consume_failed_msgs, 0);
    }
}
