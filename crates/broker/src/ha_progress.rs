//! Replication progress as a master sees it: the highest commit-log offset a slave confirmed,
//! and the wait a SYNC_MASTER send makes on it. Shared by the HA transfer (`ha`) and the send
//! path; depends on neither.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::lock_rank::{self, Rank, Ranked};

/// Replication progress as a master sees it.
#[derive(Debug, Default)]
pub struct HaState {
    /// The highest commit-log offset any slave has confirmed (Java `push2SlaveMaxOffset`;
    /// never lowered, not even when the slave goes away).
    acked: AtomicU64,
    /// Live slave connections.
    connections: AtomicUsize,
    /// Whether any slave ever connected since the broker started.
    ever_connected: std::sync::atomic::AtomicBool,
    /// Woken when `acked` moves.
    acked_changed: Notify,
    /// Woken when the log grows (a put), so transfers need not poll.
    new_data: Notify,
    /// Woken when a slave reports less than it had: the SyncStateSet must drop it now.
    replica_fell_back: Notify,
    /// Controller mode: each identified slave's progress, by its controller-given id.
    replicas: Mutex<HashMap<i64, Replica>>,
    /// Controller mode: the slaves in the SyncStateSet the controllers hold (this master
    /// excluded). When not empty, a SYNC send waits for every one of them, not for any slave.
    in_sync: Mutex<Vec<i64>>,
    /// Controller mode: this master's own controller-given id (0 until it is master).
    own_id: std::sync::atomic::AtomicI64,
    /// Controller mode: moves each time `own_id` does (this broker became master, or stopped
    /// being one). A wait begun in one term never succeeds in another: once deposed, what a
    /// slave confirmed to this broker says nothing of the new master's log.
    term: AtomicU64,
    /// Held while a read fence is computed and published, so a slower publication never
    /// lays an older fence over a newer one.
    publishing: Mutex<()>,
}

/// One slave's progress, for the SyncStateSet.
#[derive(Debug, Clone, Copy)]
pub struct Replica {
    /// Everything below this the slave has.
    pub offset: u64,
    /// The last time it had everything this log held at its previous report.
    pub caught_up_at: Instant,
    pub connected: bool,
    /// This log's end at its previous report.
    log_end_before: u64,
    /// The most it ever reported in this master's term. Reporting less means it cut its log:
    /// it may lack records this master acknowledged, so it is not in sync until it has this
    /// much again.
    highest: u64,
}

impl Replica {
    /// Whether it reports less than it once had (it truncated its log since).
    pub fn fell_back(&self) -> bool {
        self.offset < self.highest
    }
}

/// How a SYNC_MASTER send's wait for the slave ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaWait {
    Replicated,
    /// No slave connected, or the slave is too far behind to wait for.
    SlaveNotAvailable,
    /// The slave did not confirm within `slave_timeout`.
    Timeout,
    /// Controller mode: this broker stopped being master (or became master again) before the
    /// in-sync replicas confirmed. The record may be cut when it follows the new master, so it
    /// is not acknowledged.
    Deposed,
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
        self.ever_connected.store(true, Ordering::Release);
    }

    /// Whether any slave connected since the broker started (and so may come back).
    pub fn ever_had_slave(&self) -> bool {
        self.ever_connected.load(Ordering::Acquire)
    }

    pub(crate) fn slave_disconnected(&self) {
        self.connections.fetch_sub(1, Ordering::AcqRel);
    }

    /// Resolves at the next [`notify_new_data`](Self::notify_new_data).
    pub(crate) fn new_data(&self) -> tokio::sync::futures::Notified<'_> {
        self.new_data.notified()
    }

    fn replicas(&self) -> Ranked<'_, HashMap<i64, Replica>> {
        lock_rank::lock(&self.replicas, Rank::HaReplicas)
    }

    /// An identified slave reports `offset` while this log ends at `log_end`.
    pub(crate) fn replica_reported(&self, id: i64, offset: u64, log_end: u64) {
        let now = Instant::now();
        let mut replicas = self.replicas();
        let replica = replicas.entry(id).or_insert(Replica {
            offset,
            caught_up_at: now,
            connected: true,
            log_end_before: log_end,
            highest: offset,
        });
        if offset >= replica.log_end_before {
            replica.caught_up_at = now;
        }
        let fell_back = offset < replica.offset;
        replica.offset = offset;
        replica.highest = replica.highest.max(offset);
        replica.connected = true;
        replica.log_end_before = log_end;
        drop(replicas);
        self.acked_changed.notify_waiters();
        if fell_back {
            self.replica_fell_back.notify_waiters();
        }
    }

    /// Resolves when a slave next reports less than it had before.
    pub(crate) fn replica_fell_back(&self) -> tokio::sync::futures::Notified<'_> {
        self.replica_fell_back.notified()
    }

    /// Controller mode: the slaves the controllers count in this master's SyncStateSet
    /// (`own_id` is the master's id; 0 with no slaves when this broker is not master, which
    /// also forgets what slaves reported: a new term measures them against its own log).
    pub(crate) fn set_in_sync(&self, own_id: i64, slaves: Vec<i64>) {
        if own_id <= 0 {
            self.replicas().clear();
        }
        if self.own_id.swap(own_id, Ordering::AcqRel) != own_id {
            self.term.fetch_add(1, Ordering::AcqRel);
        }
        *lock_rank::lock(&self.in_sync, Rank::HaReplicas) = slaves;
        self.acked_changed.notify_waiters();
    }

    /// Controller mode, on a master: its SyncStateSet, itself first; empty otherwise.
    pub fn sync_state_set(&self) -> Vec<i64> {
        let own = self.own_id.load(Ordering::Acquire);
        if own <= 0 {
            return Vec::new();
        }
        let mut set = vec![own];
        set.extend(lock_rank::lock(&self.in_sync, Rank::HaReplicas).iter());
        set
    }

    /// Everything below this the replicas a SYNC send waits for have: every in-sync slave in
    /// controller mode (RocketMQ's `allAckInSyncStateSet`), otherwise the furthest slave.
    fn confirmed(&self) -> u64 {
        let in_sync = lock_rank::lock(&self.in_sync, Rank::HaReplicas).clone();
        if in_sync.is_empty() {
            return self.acked();
        }
        let replicas = self.replicas();
        in_sync
            .iter()
            .map(|id| replicas.get(id).map_or(0, |replica| replica.offset))
            .min()
            .unwrap_or(0)
    }

    /// Controller mode, on a master: computes the read fence — what every slave of the
    /// SyncStateSet confirmed, or no fence when the master is alone in it — and hands it to
    /// `publish`. Not a master: nothing is published, and the fence stays where it was until
    /// the broker, now a slave, has reconciled its log with the new master's.
    pub(crate) fn publish_read_fence(&self, publish: impl FnOnce(Option<u64>)) {
        let _publishing = lock_rank::lock(&self.publishing, Rank::HaPublishing);
        if self.own_id.load(Ordering::Acquire) <= 0 {
            return;
        }
        let alone = lock_rank::lock(&self.in_sync, Rank::HaReplicas).is_empty();
        publish((!alone).then(|| self.confirmed()));
    }

    /// Hands `fence` to `publish`, in turn with [`HaState::publish_read_fence`].
    pub(crate) fn publish_fence_value(
        &self,
        fence: Option<u64>,
        publish: impl FnOnce(Option<u64>),
    ) {
        let _publishing = lock_rank::lock(&self.publishing, Rank::HaPublishing);
        publish(fence);
    }

    /// Whether this broker, once master in controller mode, is not master now (or is master in
    /// another term than `term`).
    fn deposed_since(&self, term: u64) -> bool {
        let now = self.term.load(Ordering::Acquire);
        now != term || (now > 0 && self.own_id.load(Ordering::Acquire) <= 0)
    }

    /// Whether a SYNC send has anyone to wait for.
    fn waits_for_someone(&self) -> bool {
        self.connections() > 0 || !lock_rank::lock(&self.in_sync, Rank::HaReplicas).is_empty()
    }

    pub(crate) fn replica_gone(&self, id: i64) {
        if let Some(replica) = self.replicas().get_mut(&id) {
            replica.connected = false;
        }
    }

    /// Every identified slave's progress.
    pub fn replica_progress(&self) -> HashMap<i64, Replica> {
        self.replicas().clone()
    }

    /// A slave confirmed everything below `offset`.
    pub(crate) fn confirm(&self, offset: u64) {
        if self.acked.fetch_max(offset, Ordering::AcqRel) < offset {
            self.acked_changed.notify_waiters();
        }
    }

    /// Waits until the replicas a SYNC send needs have everything below `end`: a slave, or in
    /// controller mode every slave of the SyncStateSet — a master cut off from one of them
    /// does not acknowledge until the controllers agree to drop it from the set.
    pub async fn wait_replicated(
        &self,
        end: u64,
        log_end: u64,
        fallbehind_max: u64,
        timeout: Duration,
    ) -> ReplicaWait {
        let term = self.term.load(Ordering::Acquire);
        // A deposed master's slaves may still confirm what it streamed them, but the new
        // master never had it: that must not count (checked before every other answer).
        if self.deposed_since(term) {
            return ReplicaWait::Deposed;
        }
        if !self.waits_for_someone() || log_end.saturating_sub(self.confirmed()) >= fallbehind_max {
            return ReplicaWait::SlaveNotAvailable;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.acked_changed.notified();
            if self.deposed_since(term) {
                return ReplicaWait::Deposed;
            }
            if self.confirmed() >= end {
                return ReplicaWait::Replicated;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return if self.deposed_since(term) {
                    ReplicaWait::Deposed
                } else if self.confirmed() >= end {
                    ReplicaWait::Replicated
                } else {
                    ReplicaWait::Timeout
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn in_sync_slaves_must_all_confirm() {
        let ha = HaState::default();
        ha.replica_reported(2, 100, 100);
        ha.replica_reported(3, 40, 100);
        ha.set_in_sync(1, vec![2, 3]);
        assert_eq!(ha.sync_state_set(), vec![1, 2, 3]);
        let wait = Duration::from_millis(50);
        // One in-sync slave has it, the other not: no acknowledgement.
        assert_eq!(
            ha.wait_replicated(100, 100, u64::MAX, wait).await,
            ReplicaWait::Timeout
        );
        ha.replica_reported(3, 100, 100);
        assert_eq!(
            ha.wait_replicated(100, 100, u64::MAX, wait).await,
            ReplicaWait::Replicated
        );
        // A slave the controllers dropped is no longer waited for.
        ha.set_in_sync(1, vec![2]);
        ha.replica_reported(2, 150, 150);
        assert_eq!(
            ha.wait_replicated(150, 150, u64::MAX, wait).await,
            ReplicaWait::Replicated
        );
    }

    #[tokio::test]
    async fn a_deposed_master_acknowledges_nothing_its_slaves_confirm_afterwards() {
        let ha = HaState::default();
        ha.set_in_sync(1, vec![2, 3]);
        ha.replica_reported(2, 50, 50);
        ha.replica_reported(3, 50, 50);
        let wait = Duration::from_secs(5);
        let waiting = ha.wait_replicated(100, 100, u64::MAX, wait);
        tokio::pin!(waiting);
        assert!(!futures_ready(waiting.as_mut()));
        // Replica 3 was elected: this broker steps down while replica 2 still streams from it
        // and confirms the record, which the new master never had.
        ha.set_in_sync(0, Vec::new());
        ha.replica_reported(2, 100, 100);
        ha.confirm(100);
        assert_eq!(waiting.await, ReplicaWait::Deposed);
        // A send that begins its wait after the step-down is not acknowledged either.
        assert_eq!(
            ha.wait_replicated(100, 100, u64::MAX, wait).await,
            ReplicaWait::Deposed
        );
        // Master again, in a new term: waits count once more.
        ha.set_in_sync(1, vec![2]);
        ha.replica_reported(2, 120, 120);
        assert_eq!(
            ha.wait_replicated(120, 120, u64::MAX, wait).await,
            ReplicaWait::Replicated
        );
    }

    #[test]
    fn a_slave_that_cut_its_log_has_fallen_back_until_it_has_as_much_again() {
        let ha = HaState::default();
        ha.replica_reported(2, 100, 100);
        let fell_back = |ha: &HaState| ha.replica_progress()[&2].fell_back();
        assert!(!fell_back(&ha));
        let notified = ha.replica_fell_back();
        tokio::pin!(notified);
        notified.as_mut().enable();
        ha.replica_reported(2, 60, 120);
        assert!(fell_back(&ha));
        assert!(futures_ready(notified));
        ha.replica_reported(2, 99, 120);
        assert!(fell_back(&ha));
        ha.replica_reported(2, 100, 120);
        assert!(!fell_back(&ha));
        // A new term forgets the old one's reports.
        ha.replica_reported(2, 50, 120);
        ha.set_in_sync(0, Vec::new());
        ha.replica_reported(2, 50, 120);
        assert!(!fell_back(&ha));
    }

    fn futures_ready(future: std::pin::Pin<&mut impl std::future::Future>) -> bool {
        let waker = std::task::Waker::noop();
        future
            .poll(&mut std::task::Context::from_waker(waker))
            .is_ready()
    }

    #[tokio::test]
    async fn an_in_sync_slave_that_vanished_is_still_waited_for() {
        let ha = HaState::default();
        ha.set_in_sync(1, vec![7]);
        // No connection and no report at all: the send times out rather than being acknowledged.
        assert_eq!(
            ha.wait_replicated(10, 10, u64::MAX, Duration::from_millis(30))
                .await,
            ReplicaWait::Timeout
        );
        assert_eq!(
            ha.wait_replicated(10, 10, 5, Duration::from_millis(30))
                .await,
            ReplicaWait::SlaveNotAvailable
        );
    }
}
