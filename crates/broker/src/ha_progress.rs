//! Replication progress as a master sees it: the highest commit-log offset a slave confirmed,
//! and the wait a SYNC_MASTER send makes on it. Shared by the HA transfer (`ha`) and the send
//! path; depends on neither.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// Replication progress as a master sees it.
#[derive(Debug, Default)]
pub struct HaState {
    /// The highest commit-log offset any slave has confirmed (Java `push2SlaveMaxOffset`;
    /// never lowered, not even when the slave goes away).
    acked: AtomicU64,
    /// Live slave connections.
    connections: AtomicUsize,
    /// Woken when `acked` moves.
    acked_changed: Notify,
    /// Woken when the log grows (a put), so transfers need not poll.
    new_data: Notify,
}

/// How a SYNC_MASTER send's wait for the slave ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaWait {
    Replicated,
    /// No slave connected, or the slave is too far behind to wait for.
    SlaveNotAvailable,
    /// The slave did not confirm within `slave_timeout`.
    Timeout,
}

impl HaState {
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Acquire)
    }

    /// Called after every put: transfers have something new to send.
    pub fn notify_new_data(&self) {
        self.new_data.notify_waiters();
    }

    pub(crate) fn slave_connected(&self) {
        self.connections.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn slave_disconnected(&self) {
        self.connections.fetch_sub(1, Ordering::AcqRel);
    }

    /// Resolves at the next [`notify_new_data`](Self::notify_new_data).
    pub(crate) fn new_data(&self) -> tokio::sync::futures::Notified<'_> {
        self.new_data.notified()
    }

    /// A slave confirmed everything below `offset`.
    pub(crate) fn confirm(&self, offset: u64) {
        if self.acked.fetch_max(offset, Ordering::AcqRel) < offset {
            self.acked_changed.notify_waiters();
        }
    }

    /// Waits until a slave has everything below `end`.
    pub async fn wait_replicated(
        &self,
        end: u64,
        log_end: u64,
        fallbehind_max: u64,
        timeout: Duration,
    ) -> ReplicaWait {
        if self.connections() == 0 || log_end.saturating_sub(self.acked()) >= fallbehind_max {
            return ReplicaWait::SlaveNotAvailable;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.acked_changed.notified();
            if self.acked() >= end {
                return ReplicaWait::Replicated;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return if self.acked() >= end {
                    ReplicaWait::Replicated
                } else {
                    ReplicaWait::Timeout
                };
            }
        }
    }
}
