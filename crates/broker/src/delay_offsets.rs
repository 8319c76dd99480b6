//! Where each delay level's delivery has got to (`delayOffset.json`): the schedule service
//! advances it, slave sync replaces it, the persister writes it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tidemark_protocol::body::DelayOffsetWrapper;

use crate::lock_rank::{self, Rank, Ranked};

/// Where each delay level's delivery has got to: level → next schedule-queue offset. Owns its
/// lock; a revision moves on every change (persistence writes when it moved).
#[derive(Debug, Default)]
pub struct DelayOffsets {
    inner: Mutex<(BTreeMap<i32, i64>, u64)>,
}

impl DelayOffsets {
    pub fn new(table: BTreeMap<i32, i64>) -> Self {
        Self {
            inner: Mutex::new((table, 0)),
        }
    }

    fn lock(&self) -> Ranked<'_, (BTreeMap<i32, i64>, u64)> {
        lock_rank::lock(&self.inner, Rank::Table)
    }

    /// The next schedule-queue offset of `level` (0 when it never delivered).
    pub fn get(&self, level: i32) -> i64 {
        self.lock().0.get(&level).copied().unwrap_or(0)
    }

    pub fn set(&self, level: i32, next: i64) {
        let mut inner = self.lock();
        inner.0.insert(level, next);
        inner.1 += 1;
    }

    /// A slave takes its master's table whole.
    pub fn replace(&self, table: BTreeMap<i32, i64>) {
        let mut inner = self.lock();
        if inner.0 != table {
            inner.0 = table;
            inner.1 += 1;
        }
    }

    pub fn revision(&self) -> u64 {
        self.lock().1
    }

    /// The `delayOffset.json` / GET_ALL_DELAY_OFFSET form, and the revision it shows.
    pub fn snapshot(&self) -> (u64, DelayOffsetWrapper) {
        let inner = self.lock();
        (
            inner.1,
            DelayOffsetWrapper {
                data_version: None,
                offset_table: inner.0.clone(),
            },
        )
    }
}
