//! ARCHITECTURE.md's lock order, checked where it can be: each lock of the process that nests
//! with another — the broker's, a journal's, the store's append lock — has a [`Rank`], and in
//! debug builds (every test run) taking a ranked lock while the thread holds one of the same or
//! a later rank panics, naming both. Release builds keep only the guard. The ranks live here,
//! in the crate every other depends on, so one list orders locks of several crates; the table
//! in ARCHITECTURE.md places the rest, and `broker/tests/broker/lock_map.rs` keeps it whole.

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Where a lock stands in the order: a lock may only be taken while every ranked lock the
/// thread holds ranks before it. Locks of one rank never nest with each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// `Persister.written`: the persister copies tables under it.
    PersisterWritten,
    /// `Transactions.resolving`: one resolution at a time.
    TransactionResolution,
    /// `Transactions.pending`.
    TransactionPending,
    /// `Journal.snapshots` (a journal's compaction): the owner's table is taken under it.
    JournalSnapshots,
    /// `HaState.publishing`: a new confirm offset published in order.
    HaPublishing,
    /// A table: `ConsumerOffsets`, `PopTable`, `Timers`, `DelayOffsets`, `TopicTable`,
    /// `SubscriptionGroupTable`, `RequestModes` — one operation at a time, never two at once.
    Table,
    /// `HaState.in_sync` and `HaState.replicas`.
    HaReplicas,
    /// `ProgressOutbox.pending`: filled under a table's lock.
    ProgressOutbox,
    /// A journal's `Shared.queue`: changes queued under their table's lock.
    JournalQueue,
    /// `HeldPulls.fence`: moved under `HaState.publishing`.
    ReadFence,
    /// The store's `Inner.append`: taken under a transaction's resolution; the store's own
    /// locks (segments, queue tails and files, the index cursor) are taken under it.
    StoreAppend,
}

#[cfg(debug_assertions)]
thread_local! {
    static HELD: std::cell::RefCell<Vec<Rank>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A held ranked lock: the guard, and in debug builds the thread's note that it holds it.
#[derive(Debug)]
pub struct Ranked<'a, T> {
    guard: MutexGuard<'a, T>,
    #[cfg(debug_assertions)]
    rank: Rank,
}

/// Takes `mutex`, which stands at `rank` in the order (a poisoned lock is taken as is: every
/// ranked table keeps its invariants across a panic of another thread).
pub fn lock<T>(mutex: &Mutex<T>, rank: Rank) -> Ranked<'_, T> {
    #[cfg(debug_assertions)]
    enter(rank);
    let _ = rank;
    Ranked {
        guard: mutex.lock().unwrap_or_else(PoisonError::into_inner),
        #[cfg(debug_assertions)]
        rank,
    }
}

#[cfg(debug_assertions)]
fn enter(rank: Rank) {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        if let Some(latest) = held.iter().max() {
            assert!(
                rank > *latest,
                "lock order broken: {rank:?} taken while {latest:?} is held \
                 (ARCHITECTURE.md, \"Lock order\")"
            );
        }
        held.push(rank);
    });
}

#[cfg(debug_assertions)]
impl<T> Drop for Ranked<'_, T> {
    fn drop(&mut self) {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(at) = held.iter().rposition(|rank| *rank == self.rank) {
                held.remove(at);
            }
        });
    }
}

impl<T> Deref for Ranked<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for Ranked<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn locks_taken_in_order_pass_and_a_reversal_panics() {
        let (outer, inner) = (Mutex::new(1), Mutex::new(2));
        {
            let _outer = lock(&outer, Rank::PersisterWritten);
            let _inner = lock(&inner, Rank::Table);
        }
        // Released: the same locks may be taken again in order, one at a time.
        drop(lock(&inner, Rank::Table));
        let reversed = std::panic::catch_unwind(|| {
            let _inner = lock(&inner, Rank::Table);
            let _outer = lock(&outer, Rank::PersisterWritten);
        });
        assert!(reversed.is_err(), "a reversed nesting is caught");
        let twins = std::panic::catch_unwind(|| {
            let _one = lock(&outer, Rank::Table);
            let _other = lock(&inner, Rank::Table);
        });
        assert!(twins.is_err(), "two tables never nest");
    }
}
