//! Group commit: [`Durable`], what an append waits on under `Sync` flush; the waiters; the
//! group-commit thread that syncs for them; and the fan-out that wakes them.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::Thread;

use tracing::error;

use super::{Inner, IDLE_WAIT};
use crate::error::{Result, StoreError};

/// How many more durable appenders each woken appender wakes (see
/// `GroupCommit::synced_unwoken`).
const WAKE_FAN_OUT: usize = 2;

/// Durability of an append: under `Sync` flush, done when the fsync covering the appended
/// bytes is; under `Async`, at once. [`wait`](Self::wait) blocks the thread; awaiting it (it is
/// a future) lets an async caller hold thousands of appends in flight on a few threads, which
/// is what makes group commit cheap.
#[must_use = "an append is not durable until its Durable resolves"]
pub struct Durable {
    /// `None` when nothing needs waiting for.
    inner: Option<Arc<Inner>>,
    end: u64,
}

impl Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("end", &self.end)
            .field("waits", &self.inner.is_some())
            .finish()
    }
}

impl Durable {
    /// Durability of bytes ending at `end`, waited for on `inner` (`None`: nothing to wait for).
    pub(super) fn new(inner: Option<Arc<Inner>>, end: u64) -> Durable {
        Durable { inner, end }
    }

    /// Blocks until the appended bytes are durable (or the sync failed).
    pub fn wait(self) -> Result<()> {
        match &self.inner {
            Some(inner) => inner.wait_durable(self.end),
            None => Ok(()),
        }
    }
}

impl Future for Durable {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let Some(inner) = &self.inner else {
            return Poll::Ready(Ok(()));
        };
        if let Some(outcome) = inner.durable_outcome(self.end) {
            return Poll::Ready(outcome);
        }
        inner.register_sync_waiter(self.end, SyncWaiter::Task(cx.waker().clone()));
        // The sync may have finished between the check and registering.
        match inner.durable_outcome(self.end) {
            Some(outcome) => Poll::Ready(outcome),
            None => Poll::Pending,
        }
    }
}

/// Who waits for the commit log to be durable up to an offset.
enum SyncWaiter {
    /// A thread blocked in [`Durable::wait`].
    Thread(Thread),
    /// A task awaiting [`Durable`].
    Task(Waker),
}

/// Group-commit state, shared by appenders, their [`Durable`]s and the group-commit thread.
#[derive(Default)]
pub(super) struct GroupCommit {
    /// Why a commit-log sync failed, once one has: nothing is acknowledged after it.
    failure: Mutex<Option<String>>,
    /// Appenders parked until the commit log is durable up to their end offset. Parking (not a
    /// condition variable) lets the group-commit thread wake exactly the satisfied appenders
    /// without them queueing on a mutex on the way out.
    waiters: Mutex<Vec<(u64, SyncWaiter)>>,
    /// Appenders whose bytes are durable but who have not been woken yet. Waking a thread costs
    /// a system call and an inter-processor interrupt; the group-commit thread wakes one and
    /// goes back to syncing, and every woken appender wakes [`WAKE_FAN_OUT`] more on its way
    /// out, so the wake-ups of a large group run in parallel with the next sync.
    synced_unwoken: Mutex<Vec<Thread>>,
    /// The group-commit thread, unparked by appenders with bytes to sync.
    pub(super) thread: OnceLock<Thread>,
}

impl GroupCommit {
    fn failure(&self) -> MutexGuard<'_, Option<String>> {
        self.failure.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    /// The error appends get once a commit-log sync has failed.
    pub(super) fn sync_failed(&self) -> Option<StoreError> {
        let reason = self.group_commit.failure().clone()?;
        Some(StoreError::SyncFailed { reason })
    }

    /// Whether the commit log is durable up to `end`: `Some` when the wait is over (durable,
    /// or a failed sync), `None` to keep waiting. At shutdown the group-commit thread may be
    /// gone, so the caller's bytes are synced here.
    fn durable_outcome(&self, end: u64) -> Option<Result<()>> {
        let failure = self.group_commit.failure();
        if let Some(reason) = &*failure {
            return Some(Err(StoreError::SyncFailed {
                reason: reason.clone(),
            }));
        }
        if self.commit_log.flushed() >= end {
            return Some(Ok(()));
        }
        if !self.lifecycle.is_running() {
            drop(failure);
            return Some(self.commit_log.sync_to(end));
        }
        None
    }

    /// Registers a waiter for durability up to `end` and makes sure the group-commit thread
    /// is awake to sync it.
    fn register_sync_waiter(&self, end: u64, waiter: SyncWaiter) {
        self.group_commit
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((end, waiter));
        if let Some(thread) = self.group_commit.thread.get() {
            thread.unpark();
        }
    }

    /// Blocks until the commit log is durable up to `end` (Sync flush). The group-commit
    /// thread syncs whatever was written while its previous sync ran, so concurrent appends
    /// share one fsync.
    fn wait_durable(&self, end: u64) -> Result<()> {
        loop {
            if let Some(outcome) = self.durable_outcome(end) {
                return outcome;
            }
            self.register_sync_waiter(end, SyncWaiter::Thread(std::thread::current()));
            // Re-checked on wake-up: parking can return early, and the sync may have finished
            // between the check above and registering.
            if self.commit_log.flushed() < end {
                std::thread::park_timeout(IDLE_WAIT);
            }
            if self.commit_log.flushed() >= end {
                self.wake_unwoken(WAKE_FAN_OUT);
            }
        }
    }

    /// Wakes up to `count` appenders whose bytes are durable.
    fn wake_unwoken(&self, count: usize) {
        let threads: Vec<Thread> = {
            let mut unwoken = self
                .group_commit
                .synced_unwoken
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let keep = unwoken.len().saturating_sub(count);
            unwoken.split_off(keep)
        };
        for thread in threads {
            thread.unpark();
        }
    }

    /// Wakes the appenders whose bytes are now durable; all of them after a failure or at
    /// shutdown (they find out which on waking).
    pub(super) fn wake_synced(&self, wake_all: bool) {
        let flushed = self.commit_log.flushed();
        let mut satisfied = Vec::new();
        let mut tasks = Vec::new();
        self.group_commit
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(end, waiter)| {
                let done = wake_all || *end <= flushed;
                if done {
                    match waiter {
                        SyncWaiter::Thread(thread) => satisfied.push(thread.clone()),
                        SyncWaiter::Task(waker) => tasks.push(waker.clone()),
                    }
                }
                !done
            });
        // A task wake-up only queues the task on its runtime: cheap enough to do them all.
        for waker in tasks {
            waker.wake();
        }
        if satisfied.is_empty() {
            return;
        }
        self.group_commit
            .synced_unwoken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .append(&mut satisfied);
        // Each woken appender wakes more (see `synced_unwoken`); after a failure or at
        // shutdown nobody may be left asleep, so wake them all here.
        self.wake_unwoken(if wake_all { usize::MAX } else { 1 });
    }

    pub(super) fn group_commit_loop(&self) {
        // How far the waiters have been woken for. The flush loop syncs the commit log too
        // (under Sync, with the queues and checkpoint); a waiter its sync covered must not wait
        // for the next append to be woken.
        let mut woken_up_to = self.commit_log.flushed();
        loop {
            let failed = self.group_commit.failure().is_some();
            let stopping = !self.lifecycle.is_running();
            let target = self.commit_log.written();
            if !failed && target > self.commit_log.flushed() {
                if let Err(error) = self.commit_log.sync_to(target) {
                    // After a failed fsync the page cache may have dropped the data
                    // (fsyncgate): nothing can be promised durable until the store is reopened.
                    error!(%error, "commit-log sync failed; refusing further writes");
                    *self.group_commit.failure() = Some(error.to_string());
                    self.wake_synced(true);
                    continue;
                }
                self.wake_synced(false);
                woken_up_to = self.commit_log.flushed();
                continue;
            }
            let flushed = self.commit_log.flushed();
            if flushed > woken_up_to {
                self.wake_synced(false);
                woken_up_to = flushed;
            }
            if stopping {
                // Waiters left are synced by themselves (see `durable_outcome`).
                self.wake_synced(true);
                break;
            }
            std::thread::park_timeout(IDLE_WAIT);
        }
    }
}
