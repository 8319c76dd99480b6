//! What a master's progress tables changed and its log does not hold yet: filled under each
//! table's lock (so in the order the changes were applied), emptied by the publisher, and
//! watched by commits that wait until their change is in the log.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use super::StreamRecord;

use crate::lock_rank::{self, Rank, Ranked};

/// Pending bytes past which the outbox stops keeping records one by one and asks for whole
/// copies of the tables instead (a master that cannot append for a long while). Room for the
/// whole copies themselves: a million queue entries take about 60 MiB.
const PENDING_BYTES_MAX: usize = 256 << 20;

/// Where publication stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Published {
    /// Every record pushed up to this sequence number is dealt with.
    pub through: u64,
    /// The commit-log end covering them, or `None` when they were dropped because this broker
    /// is not a master (nothing of them is in the log).
    pub log_end: Option<u64>,
}

/// A batch taken for one message.
#[derive(Debug)]
pub struct Batch {
    pub records: Vec<StreamRecord>,
    /// The sequence number of the batch's last record.
    pub through: u64,
}

#[derive(Debug, Default)]
struct Pending {
    records: VecDeque<StreamRecord>,
    bytes: usize,
    /// Sequence number of the last record pushed (the first is 1).
    pushed: u64,
    /// The tables must publish whole copies of themselves (records were dropped for space,
    /// or a replica connected that may lack what came before).
    resync: bool,
}

/// The outbox of a broker's progress stream.
#[derive(Debug)]
pub struct ProgressOutbox {
    pending: Mutex<Pending>,
    queued: Notify,
    published: watch::Sender<Published>,
}

impl Default for ProgressOutbox {
    fn default() -> Self {
        Self {
            pending: Mutex::default(),
            queued: Notify::new(),
            published: watch::Sender::new(Published::default()),
        }
    }
}

impl ProgressOutbox {
    fn pending(&self) -> Ranked<'_, Pending> {
        lock_rank::lock(&self.pending, Rank::ProgressOutbox)
    }

    /// Queues a record; returns its sequence number.
    pub fn push(&self, stream: u8, bytes: Vec<u8>) -> u64 {
        let mut pending = self.pending();
        pending.pushed += 1;
        pending.bytes += bytes.len();
        pending.records.push_back(StreamRecord { stream, bytes });
        if pending.bytes > PENDING_BYTES_MAX {
            pending.records.clear();
            pending.bytes = 0;
            pending.resync = true;
        }
        let seq = pending.pushed;
        drop(pending);
        self.queued.notify_one();
        seq
    }

    /// The sequence number of the last record pushed: a commit that changed nothing waits for
    /// this, which covers the record that set the value it confirmed.
    pub fn last_pushed(&self) -> u64 {
        self.pending().pushed
    }

    /// Resolves when something was pushed since the last call (or before the first).
    pub async fn queued(&self) {
        self.queued.notified().await;
    }

    /// Asks the tables for whole copies of themselves: a replica connected, and what was
    /// published before may be missing from its log.
    pub fn request_resync(&self) {
        self.pending().resync = true;
        self.queued.notify_one();
    }

    /// Whether whole copies are due; clears the request. The tables push them under their own
    /// locks, so they land in the stream in order with every change.
    pub fn take_resync(&self) -> bool {
        std::mem::take(&mut self.pending().resync)
    }

    /// Takes records for one message, at most `max_bytes` of them (at least one).
    pub fn take(&self, max_bytes: usize) -> Option<Batch> {
        let mut pending = self.pending();
        if pending.records.is_empty() {
            return None;
        }
        let mut records = Vec::new();
        let mut bytes = 0;
        while let Some(record) = pending.records.front() {
            if !records.is_empty() && bytes + record.bytes.len() > max_bytes {
                break;
            }
            bytes += record.bytes.len();
            records.extend(pending.records.pop_front());
        }
        pending.bytes -= bytes;
        let through = pending.pushed - pending.records.len() as u64;
        Some(Batch { records, through })
    }

    /// A batch that could not be appended goes back to the front, to be tried again.
    pub fn put_back(&self, batch: Batch) {
        let mut pending = self.pending();
        pending.bytes += batch.records.iter().map(|r| r.bytes.len()).sum::<usize>();
        for record in batch.records.into_iter().rev() {
            pending.records.push_front(record);
        }
    }

    /// Everything pushed so far is dropped (this broker is not a master): waiters are told.
    pub fn discard_all(&self) {
        let mut pending = self.pending();
        pending.records.clear();
        pending.bytes = 0;
        pending.resync = false;
        let through = pending.pushed;
        drop(pending);
        self.mark(Published {
            through,
            log_end: None,
        });
    }

    /// Records through `through` are in the log, which ends at `log_end` after them.
    pub fn published(&self, through: u64, log_end: u64) {
        self.mark(Published {
            through,
            log_end: Some(log_end),
        });
    }

    fn mark(&self, now: Published) {
        self.published.send_if_modified(|published| {
            if now.through < published.through {
                return false;
            }
            *published = now;
            true
        });
    }

    /// Every queued record as (stream, bytes), emptying the outbox: what a replica would apply.
    #[cfg(test)]
    pub(crate) fn take_all(&self) -> Vec<(u8, Vec<u8>)> {
        let mut records = Vec::new();
        while let Some(batch) = self.take(usize::MAX) {
            records.extend(batch.records.into_iter().map(|r| (r.stream, r.bytes)));
        }
        records
    }

    /// Waits until the record `seq` is dealt with: `Some(Some(end))` in the log below `end`,
    /// `Some(None)` dropped, `None` when `timeout` passed first.
    pub async fn wait_published(&self, seq: u64, timeout: Duration) -> Option<Option<u64>> {
        let mut watching = self.published.subscribe();
        let reached = async {
            watching
                .wait_for(|p| p.through >= seq)
                .await
                .map(|published| published.log_end)
        };
        tokio::time::timeout(timeout, reached).await.ok()?.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn batches_keep_order_and_waiters_learn_where_their_record_went() {
        let outbox = ProgressOutbox::default();
        let first = outbox.push(1, vec![0; 10]);
        let second = outbox.push(1, vec![1; 10]);
        let third = outbox.push(1, vec![2; 10]);
        assert_eq!((first, second, third), (1, 2, 3));
        let batch = outbox.take(15).expect("a batch");
        assert_eq!(batch.records.len(), 1, "cut at the byte bound, never empty");
        assert_eq!(batch.through, 1);
        outbox.put_back(batch);
        let batch = outbox.take(25).expect("a batch");
        assert_eq!(batch.records[0].bytes, vec![0; 10], "put back in front");
        assert_eq!(batch.through, 2);
        outbox.published(batch.through, 500);
        let short = Duration::from_millis(20);
        assert_eq!(outbox.wait_published(2, short).await, Some(Some(500)));
        assert_eq!(outbox.wait_published(3, short).await, None);
        outbox.discard_all();
        assert_eq!(outbox.wait_published(3, short).await, Some(None));
        assert!(outbox.take(100).is_none());
        assert_eq!(outbox.last_pushed(), 3);
    }

    #[test]
    fn a_full_outbox_asks_for_whole_tables() {
        let outbox = ProgressOutbox::default();
        outbox.push(1, vec![0; PENDING_BYTES_MAX]);
        outbox.push(1, vec![0; 2]);
        assert!(
            outbox.take(usize::MAX).is_none(),
            "the records were dropped"
        );
        assert!(outbox.take_resync());
        assert!(!outbox.take_resync(), "asked once");
        outbox.request_resync();
        assert!(outbox.take_resync());
    }
}
