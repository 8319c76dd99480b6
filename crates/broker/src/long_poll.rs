//! Held pulls (RocketMQ's `PullRequestHoldService`): a pull that finds nothing waits until a
//! message arrives for its queue or its suspend time runs out.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;

/// Pulls waiting on one queue, woken by sending.
type Waiters = Vec<oneshot::Sender<()>>;

/// Waiters by (topic, queue id); POP requests (which read any queue of a topic) by topic.
#[derive(Debug, Default)]
pub struct HeldPulls {
    waiters: Mutex<HashMap<(String, i32), Waiters>>,
    topic_waiters: Mutex<HashMap<String, Waiters>>,
}

impl HeldPulls {
    /// Registers a waiter; the receiver completes when a message arrives for the queue.
    pub fn hold(&self, topic: &str, queue_id: i32) -> oneshot::Receiver<()> {
        let (sender, receiver) = oneshot::channel();
        let mut waiters = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        let queue = waiters.entry((topic.to_owned(), queue_id)).or_default();
        // Waiters whose pull already timed out are dropped here, bounding the list.
        queue.retain(|waiter| !waiter.is_closed());
        queue.push(sender);
        receiver
    }

    /// Registers a waiter for anything new in any queue of `topic` (a POP request).
    pub fn hold_topic(&self, topic: &str) -> oneshot::Receiver<()> {
        let (sender, receiver) = oneshot::channel();
        let mut waiters = self
            .topic_waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let held = waiters.entry(topic.to_owned()).or_default();
        held.retain(|waiter| !waiter.is_closed());
        held.push(sender);
        receiver
    }

    /// Wakes every pull held on the queue, and every POP request held on its topic.
    pub fn notify(&self, topic: &str, queue_id: i32) {
        let woken = self
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(topic.to_owned(), queue_id));
        for waiter in woken.into_iter().flatten() {
            let _ = waiter.send(());
        }
        self.notify_topic(topic);
    }

    /// Wakes every POP request held on `topic` (a retry copy or an unblocked orderly queue
    /// made something poppable).
    pub fn notify_topic(&self, topic: &str) {
        let woken = self
            .topic_waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(topic);
        for waiter in woken.into_iter().flatten() {
            let _ = waiter.send(());
        }
    }

    /// Wakes everything (shutdown).
    pub fn notify_all(&self) {
        let all = std::mem::take(&mut *self.waiters.lock().unwrap_or_else(PoisonError::into_inner));
        for waiter in all.into_values().flatten() {
            let _ = waiter.send(());
        }
        let all = std::mem::take(
            &mut *self
                .topic_waiters
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for waiter in all.into_values().flatten() {
            let _ = waiter.send(());
        }
    }
}

/// POP requests suspended now, per (topic, group, queue id) — RocketMQ's `topic@group@queueId`
/// key — and in all.
#[derive(Debug, Default)]
pub struct SuspendedPops {
    counts: Mutex<Counts>,
}

/// Suspended requests per key, and the total.
type Counts = (HashMap<(String, String, i32), usize>, usize);

/// One suspended POP request; counted until dropped.
#[derive(Debug)]
pub struct Suspended<'a> {
    pops: &'a SuspendedPops,
    key: (String, String, i32),
}

impl SuspendedPops {
    /// Counts a request in, unless this key already holds `per_key_max` or all keys `total_max`
    /// (the request is then answered POLLING_FULL).
    pub fn suspend(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        per_key_max: usize,
        total_max: usize,
    ) -> Option<Suspended<'_>> {
        let key = (topic.to_owned(), group.to_owned(), queue_id);
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let held = counts.0.get(&key).copied().unwrap_or(0);
        if held >= per_key_max || counts.1 >= total_max {
            return None;
        }
        counts.0.insert(key.clone(), held + 1);
        counts.1 += 1;
        Some(Suspended { pops: self, key })
    }

    /// Requests suspended on the key now (POLLING_INFO).
    pub fn count(&self, topic: &str, group: &str, queue_id: i32) -> usize {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts
            .0
            .get(&(topic.to_owned(), group.to_owned(), queue_id))
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for Suspended<'_> {
    fn drop(&mut self) {
        let mut counts = self
            .pops
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = counts.0.get_mut(&self.key) {
            *held -= 1;
            if *held == 0 {
                counts.0.remove(&self.key);
            }
        }
        counts.1 = counts.1.saturating_sub(1);
    }
}
