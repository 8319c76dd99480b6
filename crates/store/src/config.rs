use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Result, StoreError};

/// When an append counts as stored, and so what survives a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Acknowledge once the record is in the page cache; a background task syncs every
    /// `interval_ms`. Survives a process crash; an OS crash or power loss may lose up to the
    /// last interval. RocketMQ's ASYNC_FLUSH (500 ms).
    Async { interval_ms: u64 },
    /// Acknowledge only after the fsync that covers the record (group commit: concurrent
    /// appends share one fsync). Survives power loss. RocketMQ's SYNC_FLUSH.
    Sync,
}

impl Default for FlushPolicy {
    fn default() -> Self {
        FlushPolicy::Async { interval_ms: 500 }
    }
}

/// Store settings, with RocketMQ's defaults.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `storePathRootDir`: holds `commitlog/`, `consumequeue/`, `checkpoint`, `abort`, `lock`.
    pub root: PathBuf,
    /// `mappedFileSizeCommitLog`: 1 GiB.
    pub commit_log_segment_bytes: u64,
    /// `mappedFileSizeConsumeQueue` / 20: 300 000 entries per file.
    pub consume_queue_entries_per_file: u64,
    pub flush: FlushPolicy,
    /// `maxMessageSize`: 4 MiB.
    pub message_size_max_bytes: usize,
    /// `fileReservedTime`: segments older than this may be deleted (72 h).
    pub file_reserved_hours: u64,
    /// `deleteWhen`: the hour of day (local to the caller's clock, UTC here) when expired
    /// segments are deleted (4).
    pub delete_when_hour: u32,
    /// `diskMaxUsedSpaceRatio`: above this disk usage expired-or-not segments go early (0.75).
    pub disk_usage_ratio_max: f64,
    /// Sync interval of consume queues and checkpoint under `FlushPolicy::Sync`.
    pub consume_queue_flush_interval_ms: u64,
    /// How often the background task runs a retention pass (`cleanResourceInterval`, 10 s).
    pub retention_check_interval_ms: u64,
    /// Delay of each level (`messageDelayLevel`), index = queue id in the schedule topic: queue
    /// entries there carry the due time instead of a tag hash.
    pub delay_levels_ms: Vec<i64>,
}

impl StoreConfig {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            commit_log_segment_bytes: 1 << 30,
            consume_queue_entries_per_file: 300_000,
            flush: FlushPolicy::default(),
            message_size_max_bytes: 4 * 1024 * 1024,
            file_reserved_hours: 72,
            delete_when_hour: 4,
            disk_usage_ratio_max: 0.75,
            consume_queue_flush_interval_ms: 1000,
            retention_check_interval_ms: 10_000,
            delay_levels_ms: Vec::new(),
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.commit_log_segment_bytes < 4096 {
            return Err(StoreError::Config(
                "commit_log_segment_bytes must be at least 4096".into(),
            ));
        }
        if self.message_size_max_bytes as u64 + 8 > self.commit_log_segment_bytes {
            return Err(StoreError::Config(
                "a message of message_size_max_bytes must fit in a segment".into(),
            ));
        }
        if self.consume_queue_entries_per_file == 0 {
            return Err(StoreError::Config(
                "consume_queue_entries_per_file must be positive".into(),
            ));
        }
        if self.delete_when_hour > 23 {
            return Err(StoreError::Config(
                "delete_when_hour is an hour of the day (0-23)".into(),
            ));
        }
        if !(0.0..=1.0).contains(&self.disk_usage_ratio_max) {
            return Err(StoreError::Config(
                "disk_usage_ratio_max is a ratio between 0 and 1".into(),
            ));
        }
        Ok(())
    }

    pub(crate) fn background_flush_interval(&self) -> Duration {
        match self.flush {
            FlushPolicy::Async { interval_ms } => Duration::from_millis(interval_ms.max(1)),
            FlushPolicy::Sync => Duration::from_millis(self.consume_queue_flush_interval_ms.max(1)),
        }
    }
}
