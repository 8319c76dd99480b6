//! The store's lifecycle: one state that appenders, the background threads and durability
//! waiters all read, so "stop" means the same thing to each of them.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// Where a store is in its life. It only moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Lifecycle {
    /// Appends are accepted; the background threads work.
    Running = 0,
    /// `shutdown` (or dropping the store) has begun: appends are refused with `Closed`, the
    /// background threads exit, and a durability waiter syncs its own bytes, since the
    /// group-commit thread may be gone.
    Stopping = 1,
    /// The background threads have exited.
    Closed = 2,
}

impl Lifecycle {
    fn from_bits(bits: u8) -> Lifecycle {
        match bits {
            0 => Lifecycle::Running,
            1 => Lifecycle::Stopping,
            _ => Lifecycle::Closed,
        }
    }
}

/// The current [`Lifecycle`]. Appenders read it without a lock; the flush thread sleeps on it.
pub(super) struct LifecycleCell {
    state: AtomicU8,
    /// Held while the state changes, so a thread about to wait on `changed` cannot miss it.
    lock: Mutex<()>,
    changed: Condvar,
}

impl LifecycleCell {
    pub fn new() -> Self {
        LifecycleCell {
            state: AtomicU8::new(Lifecycle::Running as u8),
            lock: Mutex::new(()),
            changed: Condvar::new(),
        }
    }

    pub fn get(&self) -> Lifecycle {
        Lifecycle::from_bits(self.state.load(Ordering::Acquire))
    }

    pub fn is_running(&self) -> bool {
        self.get() == Lifecycle::Running
    }

    /// Moves to `to` unless the store is there or past it already; returns where it was.
    pub fn advance(&self, to: Lifecycle) -> Lifecycle {
        let before = {
            let _changing = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.state.fetch_max(to as u8, Ordering::AcqRel)
        };
        self.changed.notify_all();
        Lifecycle::from_bits(before)
    }

    /// Sleeps for `timeout`, or less if the store stops running meanwhile (or the wait wakes
    /// spuriously); returns whether it is still running.
    pub fn sleep_while_running(&self, timeout: Duration) -> bool {
        let changing = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if !self.is_running() {
            return false;
        }
        drop(
            self.changed
                .wait_timeout(changing, timeout)
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.is_running()
    }
}
