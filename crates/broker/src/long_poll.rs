//! Held pulls (RocketMQ's `PullRequestHoldService`): a pull that finds nothing waits until a
//! message arrives for its queue or its suspend time runs out.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;

/// Pulls waiting on one queue, woken by sending.
type Waiters = Vec<oneshot::Sender<()>>;

/// Waiters by (topic, queue id).
#[derive(Debug, Default)]
pub struct HeldPulls {
    waiters: Mutex<HashMap<(String, i32), Waiters>>,
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

    /// Wakes every pull held on the queue.
    pub fn notify(&self, topic: &str, queue_id: i32) {
        let woken = self
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(topic.to_owned(), queue_id));
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
    }
}
