//! Background upkeep: starting and stopping the store's threads; the flush thread (periodic
//! flushes and retention passes); the prefault thread; and retention passes run by hand.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;

use tracing::warn;

use super::lifecycle::Lifecycle;
use super::{Inner, MessageStore, IDLE_WAIT};
use crate::checkpoint::{Checkpoint, DurableOffsets};
use crate::config::FlushPolicy;
use crate::error::{Result, StoreError};
use crate::retention::{self, DiskUsage, RetentionReport};

impl MessageStore {
    /// Stops the background threads (idempotent).
    pub(super) fn stop_threads(&self) {
        self.inner.lifecycle.advance(Lifecycle::Stopping);
        for thread in [
            self.inner.group_commit.thread.get(),
            self.inner.prefault_thread.get(),
        ]
        .into_iter()
        .flatten()
        {
            thread.unpark();
        }
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for thread in threads {
            let _ = thread.join();
        }
        self.inner.lifecycle.advance(Lifecycle::Closed);
    }

    /// One retention pass with an explicit time, hour of day and disk usage (tests and tools);
    /// the usage also moves the write refusal, as a measured one does. The store's background
    /// task runs one every `retention_check_interval_ms` with the store clock's UTC hour and
    /// the disk usage measured before and after every deletion.
    pub fn delete_expired(
        &self,
        now_ms: i64,
        hour_of_day: u32,
        disk_usage_ratio: f64,
    ) -> Result<RetentionReport> {
        let inner = &self.inner;
        let tuning = inner.tuning.store_tuning();
        inner.disk.record(disk_usage_ratio, &tuning);
        retention::delete_expired(
            &inner.commit_log,
            &tuning,
            inner.queues.all(),
            now_ms,
            hour_of_day,
            &mut || disk_usage_ratio,
        )
    }

    /// The disk usage the last retention pass measured, and whether appends are refused.
    pub fn disk_usage(&self) -> DiskUsage {
        self.inner.disk.usage()
    }
}

impl MessageStore {
    /// A retention pass now, as if it were the delete hour, with the disk usage measured
    /// (RocketMQ's `executeDeleteFilesManually`, mqadmin `deleteExpiredCommitLog`): expired
    /// segments go at once instead of at `deleteWhen`; unexpired ones stay unless the disk is
    /// past the forced-clean level, as in every pass.
    pub fn delete_expired_now(&self) -> Result<RetentionReport> {
        let inner = &self.inner;
        let now = (inner.clock)();
        let tuning = inner.tuning.store_tuning();
        let mut measure = || {
            let usage = retention::disk_usage_ratio(&inner.config.root).unwrap_or(0.0);
            inner.disk.record(usage, &tuning);
            usage
        };
        let report = retention::delete_expired(
            &inner.commit_log,
            &tuning,
            inner.queues.all(),
            now,
            tuning.delete_when_hour,
            &mut measure,
        )?;
        if let Err(error) = inner.index.delete_below(inner.commit_log.min_offset()) {
            warn!(%error, "deleting index files of deleted segments failed; will retry");
        }
        Ok(report)
    }
}

impl Inner {
    /// Starts the flush thread, and the prefault or the group-commit thread as the flush
    /// policy wants.
    pub(super) fn start_threads(inner: &Arc<Inner>) -> Result<Vec<JoinHandle<()>>> {
        let mut threads = Vec::new();
        let spawn = |name: &str, body: fn(&Inner)| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || body(&inner))
                .map_err(|error| StoreError::io("spawn thread", PathBuf::new(), error))
        };
        threads.push(spawn("tidemark-store-flush", Inner::flush_loop)?);
        if inner.index.enabled() {
            threads.push(spawn("tidemark-store-index", Inner::index_loop)?);
        }
        if let FlushPolicy::Async { .. } = inner.config.flush {
            // Not under Sync: every page faulted in ahead is a dirty page of zeros that the
            // next group commit has to write too, which costs more than the faults it saves.
            let thread = spawn("tidemark-store-prefault", Inner::prefault_loop)?;
            let _ = inner.prefault_thread.set(thread.thread().clone());
            threads.push(thread);
        }
        if inner.config.flush == FlushPolicy::Sync {
            let thread = spawn("tidemark-store-group-commit", Inner::group_commit_loop)?;
            let _ = inner.group_commit.thread.set(thread.thread().clone());
            threads.push(thread);
        }
        Ok(threads)
    }

    /// Wakes the prefault thread (if there is one) when appends ending at `end` are nearing
    /// the end of the write window.
    pub(super) fn ask_for_prefault(&self, end: u64) {
        if !self.commit_log.wants_prefault(end) {
            return;
        }
        if let Some(thread) = self.prefault_thread.get() {
            self.prefault_wanted.store(true, Ordering::Release);
            thread.unpark();
        }
    }

    /// Keeps the commit log's write window ahead of the appenders (see
    /// [`CommitLog::prefault`]) whenever they ask.
    fn prefault_loop(&self) {
        let mut failing = false;
        loop {
            std::thread::park_timeout(IDLE_WAIT);
            if !self.lifecycle.is_running() {
                break;
            }
            if !self.prefault_wanted.swap(false, Ordering::AcqRel) {
                continue;
            }
            match self.commit_log.prefault() {
                Ok(()) => failing = false,
                // Appends go on with pwrite, which reports a full disk to the caller; say it
                // here once, not on every wake-up.
                Err(error) if !failing => {
                    failing = true;
                    warn!(%error, "cannot get commit-log pages ready ahead of the writer");
                }
                Err(_) => {}
            }
        }
    }

    /// Lowers the checkpoint's durable offsets to at most `offset` (before a truncation).
    pub(super) fn lower_checkpoint(&self, offset: u64) -> Result<()> {
        let mut last = self
            .last_checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let lowered = Checkpoint {
            durable: Some(match last.durable {
                Some(durable) => DurableOffsets {
                    commit_log: durable.commit_log.min(offset),
                    consume_queues: durable.consume_queues.min(offset),
                },
                None => DurableOffsets {
                    commit_log: offset,
                    consume_queues: offset,
                },
            }),
            ..*last
        };
        if lowered != *last {
            self.checkpoint.write(&lowered)?;
            *last = lowered;
        }
        Ok(())
    }

    pub(super) fn flush_all(&self) -> Result<()> {
        self.commit_log.sync_to(self.commit_log.written())?;
        // Appenders this sync made durable are woken now, not when the group-commit thread
        // next syncs something itself (it would not, with nothing new written).
        self.wake_synced(false);
        // Every record below `dispatched` has its queue entry written (entries go first).
        let dispatched = self.commit_log.written();
        let queues = self.queues.all();
        for queue in queues {
            queue.sync()?;
        }
        let mut last = self
            .last_checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = (self.clock)();
        let checkpoint = Checkpoint {
            physic_msg_timestamp: now,
            logics_msg_timestamp: now,
            index_msg_timestamp: last.index_msg_timestamp,
            durable: Some(DurableOffsets {
                commit_log: self.commit_log.flushed(),
                consume_queues: dispatched,
            }),
        };
        if checkpoint.durable != last.durable {
            self.checkpoint.write(&checkpoint)?;
            *last = checkpoint;
        }
        Ok(())
    }

    /// Flushes and runs retention passes, each round with the tuning as it is then, so a
    /// changed interval or retention setting applies from the next round.
    fn flush_loop(&self) {
        let mut last_retention = (self.clock)();
        loop {
            let interval = self
                .config
                .background_flush_interval(&self.tuning.store_tuning());
            if !self.lifecycle.sleep_while_running(interval) {
                break;
            }
            if let Err(error) = self.flush_all() {
                warn!(%error, "background flush failed; will retry");
            }
            let now = (self.clock)();
            let tuning = self.tuning.store_tuning();
            let check_interval_ms =
                i64::try_from(tuning.retention_check_interval_ms).unwrap_or(i64::MAX);
            if now - last_retention >= check_interval_ms {
                last_retention = now;
                self.retention_pass(now, &tuning);
            }
        }
    }

    /// The periodic retention pass: UTC hour from the store clock, disk usage measured on the
    /// store's file system (0 where it cannot be measured, as on simulated storage).
    fn retention_pass(&self, now: i64, tuning: &crate::tuning::StoreTuning) {
        let mut measure = || {
            let usage = retention::disk_usage_ratio(&self.config.root).unwrap_or(0.0);
            self.disk.record(usage, tuning);
            usage
        };
        let queues = self.queues.all();
        if let Err(error) = retention::delete_expired(
            &self.commit_log,
            tuning,
            queues,
            now,
            retention::hour_of_day(now),
            &mut measure,
        ) {
            warn!(%error, "retention pass failed; will retry");
        }
        if let Err(error) = self.index.delete_below(self.commit_log.min_offset()) {
            warn!(%error, "deleting index files of deleted segments failed; will retry");
        }
    }
}
