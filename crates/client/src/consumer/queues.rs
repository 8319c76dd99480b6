//! The queues assigned to a consumer: one [`QueueSlot`] each, kept in a [`QueueTable`].

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_protocol::body::MessageQueue;
use tokio_util::sync::CancellationToken;

use crate::instance::lock;
use crate::process_queue::ProcessQueue;

/// One assigned queue: its process queue and the token that stops its pull loop.
pub(crate) struct QueueSlot {
    pub(crate) queue: MessageQueue,
    process: Mutex<ProcessQueue>,
    cancel: CancellationToken,
    /// Orderly: one consume task per queue at a time, and a release waits for the batch in
    /// progress so its commit is not lost.
    consume_turn: tokio::sync::Mutex<()>,
    /// Concurrent hand-off: set while the queue is being given up — no new listener call
    /// starts, the running ones finish and commit.
    releasing: AtomicBool,
    /// Listener calls running on this queue's messages.
    running: AtomicUsize,
    /// Woken whenever a listener call on this queue ends.
    call_ended: tokio::sync::Notify,
}

/// A listener call in progress on a queue (see [`QueueSlot::begin_call`]).
pub(crate) struct RunningCall<'a>(&'a QueueSlot);

impl Drop for RunningCall<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
        self.0.call_ended.notify_waiters();
    }
}

impl QueueSlot {
    pub(super) fn new(queue: MessageQueue) -> Arc<Self> {
        Arc::new(Self {
            queue,
            process: Mutex::new(ProcessQueue::new(Instant::now())),
            cancel: CancellationToken::new(),
            consume_turn: tokio::sync::Mutex::new(()),
            releasing: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            call_ended: tokio::sync::Notify::new(),
        })
    }

    /// Counts a listener call on this queue; `None` when none may start (the queue is given up
    /// or being handed off). Counted before the check, so a release that saw no running call
    /// cannot miss one that starts.
    pub(crate) fn begin_call(&self) -> Option<RunningCall<'_>> {
        self.running.fetch_add(1, Ordering::SeqCst);
        let call = RunningCall(self);
        if self.releasing.load(Ordering::SeqCst) || self.is_dropped() {
            return None;
        }
        Some(call)
    }

    /// Starts handing the queue off: its pull loop stops and no new listener call starts.
    pub(super) fn begin_release(&self) {
        self.releasing.store(true, Ordering::SeqCst);
        self.cancel.cancel();
    }

    /// Waits until no listener call runs on this queue, for at most `limit`; whether it got
    /// there.
    pub(super) async fn calls_finished(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ended = self.call_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.running.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return false;
            }
        }
    }

    /// Runs `change` on the queue's process queue; the lock is held only meanwhile.
    pub(crate) fn with_process<R>(&self, change: impl FnOnce(&mut ProcessQueue) -> R) -> R {
        change(&mut lock(&self.process))
    }

    pub(crate) fn is_dropped(&self) -> bool {
        self.with_process(|process| process.is_dropped())
    }

    /// Gives the queue up: its results are no longer committed and its pull loop stops.
    pub(crate) fn drop_queue(&self) {
        self.with_process(ProcessQueue::drop_queue);
        self.cancel.cancel();
    }

    pub(super) fn is_stopped(&self) -> bool {
        self.cancel.is_cancelled()
    }

    pub(super) async fn stopped(&self) {
        self.cancel.cancelled().await;
    }

    /// Sleeps for `wait`, or less when the queue is stopped meanwhile.
    pub(super) async fn pause(&self, wait: Duration) {
        tokio::select! {
            _ = self.cancel.cancelled() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }

    /// Orderly: runs `work` as the queue's only consume task.
    pub(super) async fn consume_exclusively<R>(&self, work: impl Future<Output = R>) -> R {
        let _turn = self.consume_turn.lock().await;
        work.await
    }

    /// Runs `work` once no consume task holds the queue, waiting at most `wait` for one;
    /// `None` when it did not finish in time (and `work` did not run).
    pub(super) async fn after_consuming<R>(
        &self,
        wait: Duration,
        work: impl Future<Output = R>,
    ) -> Option<R> {
        let _turn = tokio::time::timeout(wait, self.consume_turn.lock())
            .await
            .ok()?;
        Some(work.await)
    }
}

/// The assigned queues by queue; the lock is never held across an await.
#[derive(Default)]
pub(super) struct QueueTable {
    slots: Mutex<BTreeMap<MessageQueue, Arc<QueueSlot>>>,
}

impl QueueTable {
    pub(super) fn get(&self, queue: &MessageQueue) -> Option<Arc<QueueSlot>> {
        lock(&self.slots).get(queue).cloned()
    }

    pub(super) fn contains(&self, queue: &MessageQueue) -> bool {
        lock(&self.slots).contains_key(queue)
    }

    /// Adds `slot`, replacing the slot its queue had.
    pub(super) fn insert(&self, slot: Arc<QueueSlot>) {
        lock(&self.slots).insert(slot.queue.clone(), slot);
    }

    pub(super) fn remove(&self, queue: &MessageQueue) {
        lock(&self.slots).remove(queue);
    }

    /// The assigned queues, sorted.
    pub(super) fn queues(&self) -> BTreeSet<MessageQueue> {
        lock(&self.slots).keys().cloned().collect()
    }

    /// The slots `pick` selects (called with the table locked).
    pub(super) fn slots_where(&self, pick: impl Fn(&QueueSlot) -> bool) -> Vec<Arc<QueueSlot>> {
        lock(&self.slots)
            .values()
            .filter(|slot| pick(slot))
            .cloned()
            .collect()
    }

    pub(super) fn slots(&self) -> Vec<Arc<QueueSlot>> {
        self.slots_where(|_| true)
    }
}
