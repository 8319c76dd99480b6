//! The read fence: a commit-log offset past which readers are shown nothing.
//!
//! A controller-mode master may hold records its SyncStateSet has not confirmed yet. Should it
//! lose its role, the new master never had them and stores other messages at the same queue
//! offsets; a consumer that had read the unconfirmed ones would then commit past messages it
//! never saw. So, like RocketMQ 5's confirm offset, queue reads stop at the fence: an entry is
//! visible when its whole record lies below it. Replication and reads by commit-log offset
//! ignore the fence; only reads by queue offset honour it.

use std::sync::atomic::Ordering;

use super::MessageStore;
use crate::consume_queue::ConsumeQueue;

/// No fence: every written record is visible.
pub(super) const UNFENCED: u64 = u64::MAX;

impl MessageStore {
    /// Shows queue readers only records that end at or below `fence`; `None` shows all.
    pub fn set_read_fence(&self, fence: Option<u64>) {
        self.inner
            .read_fence
            .store(fence.unwrap_or(UNFENCED), Ordering::Release);
    }

    /// The fence set by [`MessageStore::set_read_fence`].
    pub fn read_fence(&self) -> Option<u64> {
        let fence = self.inner.read_fence.load(Ordering::Acquire);
        (fence != UNFENCED).then_some(fence)
    }

    /// The next offset to be written in a queue, fence or not (0 for an unknown queue).
    pub fn written_max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner
            .queues
            .get(topic, queue_id)
            .map_or(0, |queue| queue.max_offset())
    }

    /// One past the last entry of `queue` a reader may see: the queue's end, or the first
    /// entry whose record crosses the fence. Entries are in commit-log order and the hidden
    /// ones are the newest few, so the search gallops back from the end (entries still in
    /// memory) before it bisects; with nothing hidden it reads one entry.
    pub(super) fn visible_max(&self, queue: &ConsumeQueue) -> i64 {
        let max = queue.max_offset();
        let fence = self.inner.read_fence.load(Ordering::Acquire);
        if fence == UNFENCED {
            return max;
        }
        let visible = |offset: i64| match queue.read(offset, 1) {
            Ok(Some(entries)) => entries.first().is_none_or(|entry| {
                (entry.commit_log_offset.max(0) as u64).saturating_add(entry.size.max(0) as u64)
                    <= fence
            }),
            // A deleted or unreadable entry lies far behind any fence.
            _ => true,
        };
        let min = queue.min_offset();
        if max <= min || visible(max - 1) {
            return max;
        }
        // Invariant: the entry at `hidden` is not visible; every one below `low` is.
        let mut hidden = max - 1;
        let mut step = 1i64;
        let mut low = loop {
            let probe = hidden.saturating_sub(step).max(min);
            if visible(probe) {
                break probe + 1;
            }
            hidden = probe;
            if probe == min {
                return min;
            }
            step = step.saturating_mul(2);
        };
        while low < hidden {
            let middle = low + (hidden - low) / 2;
            if visible(middle) {
                low = middle + 1;
            } else {
                hidden = middle;
            }
        }
        hidden
    }
}
