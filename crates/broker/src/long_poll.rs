//! Held pulls (RocketMQ's `PullRequestHoldService`): a pull that finds nothing waits until a
//! message arrives for its queue or its suspend time runs out.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;

use crate::lock_rank::{self, Rank};

/// Pulls waiting on one queue, woken by sending.
type Waiters = Vec<oneshot::Sender<()>>;

/// Waiters by (topic, queue id); POP requests (which read any queue of a topic) by topic.
///
/// Behind a read fence (see [`HeldPulls::set_fence`]) an arrival is not news yet: its wake-up
/// waits until the fence passes the log end it was written at.
#[derive(Debug, Default)]
pub struct HeldPulls {
    waiters: Mutex<HashMap<(String, i32), Waiters>>,
    topic_waiters: Mutex<HashMap<String, Waiters>>,
    fence: Mutex<Fence>,
}

/// Wake-ups held back by the read fence. Invariant: with no fence, nothing is deferred;
/// with one, every deferred end lies beyond it.
#[derive(Debug, Default)]
struct Fence {
    limit: Option<u64>,
    /// Per queue, the log end its newest unseen arrival was written at.
    deferred: HashMap<(String, i32), u64>,
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

    /// A message arrived for the queue, written while the log ended at `written_end`: wakes
    /// every pull held on the queue and every POP request held on its topic — now, or once
    /// the read fence reaches `written_end`.
    pub fn notify(&self, topic: &str, queue_id: i32, written_end: u64) {
        {
            let mut fence = lock_rank::lock(&self.fence, Rank::ReadFence);
            if fence.limit.is_some_and(|limit| written_end > limit) {
                let end = fence
                    .deferred
                    .entry((topic.to_owned(), queue_id))
                    .or_default();
                *end = (*end).max(written_end);
                return;
            }
        }
        self.wake(topic, queue_id);
    }

    /// Moves the read fence (`None`: no fence) and wakes the queues whose arrivals it now
    /// shows. Set it after the store's fence, so a woken reader finds what it was woken for.
    pub fn set_fence(&self, limit: Option<u64>) {
        let due: Vec<(String, i32)> = {
            let mut fence = lock_rank::lock(&self.fence, Rank::ReadFence);
            fence.limit = limit;
            let mut due = Vec::new();
            fence.deferred.retain(|queue, end| {
                let shown = limit.is_none_or(|limit| *end <= limit);
                if shown {
                    due.push(queue.clone());
                }
                !shown
            });
            debug_assert!(limit.is_some() || fence.deferred.is_empty());
            due
        };
        for (topic, queue_id) in due {
            self.wake(&topic, queue_id);
        }
    }

    fn wake(&self, topic: &str, queue_id: i32) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_behind_the_fence_wake_when_it_passes_them() {
        let held = HeldPulls::default();
        held.set_fence(Some(100));
        let mut early = held.hold("T", 0);
        let mut popping = held.hold_topic("T");
        held.notify("T", 0, 150);
        assert!(
            early.try_recv().is_err(),
            "not woken before the fence passes 150"
        );
        assert!(popping.try_recv().is_err());
        held.set_fence(Some(149));
        assert!(early.try_recv().is_err());
        held.set_fence(Some(150));
        assert!(early.try_recv().is_ok());
        assert!(popping.try_recv().is_ok());

        // Below the fence an arrival wakes at once; lifting the fence releases the rest.
        let mut now = held.hold("T", 1);
        held.notify("T", 1, 120);
        assert!(now.try_recv().is_ok());
        let mut later = held.hold("T", 2);
        held.notify("T", 2, 900);
        assert!(later.try_recv().is_err());
        held.set_fence(None);
        assert!(later.try_recv().is_ok());
    }
}
