use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Result, StoreError};
use crate::tuning::StoreTuning;

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

/// Room a stored record may take beyond its body: the fixed header, topic and properties
/// (RocketMQ 4.9.4+ reserves the same 64 KiB; properties alone are limited to 32767 bytes).
pub const RECORD_OVERHEAD_MAX: usize = 64 * 1024;

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
    /// `maxMessageSize`: the largest message body, 4 MiB. A stored record may be up to
    /// [`RECORD_OVERHEAD_MAX`] larger (header, topic, properties), as in RocketMQ 4.9.4+.
    pub message_size_max_bytes: usize,
    /// `fileReservedTime`: segments older than this may be deleted (72 h). This and the
    /// retention fields below are the values the store opens with; a [`TuningSource`]
    /// (see [`MessageStore::open_tuned`]) may change them while it runs.
    ///
    /// [`TuningSource`]: crate::TuningSource
    /// [`MessageStore::open_tuned`]: crate::MessageStore::open_tuned
    pub file_reserved_hours: u64,
    /// `deleteWhen`: the hour of day (local to the caller's clock, UTC here) when expired
    /// segments are deleted (4).
    pub delete_when_hour: u32,
    /// `diskMaxUsedSpaceRatio`: above this disk usage, expired segments go at once instead of
    /// waiting for the delete hour (0.75).
    pub disk_usage_ratio_max: f64,
    /// `diskSpaceCleanForciblyRatio`: above this, segments go even before they expire, oldest
    /// first, each deletion logged at WARN (0.85). Only with `clean_file_forcibly`.
    pub disk_usage_ratio_clean_forcibly: f64,
    /// `diskSpaceWarningLevelRatio`: above this the store refuses appends until usage falls
    /// back below `disk_usage_ratio_clean_forcibly` (0.90).
    pub disk_usage_ratio_warning: f64,
    /// `cleanFileForciblyEnable`: whether unexpired segments may be deleted at all (true).
    pub clean_file_forcibly: bool,
    /// Sync interval of consume queues and checkpoint under `FlushPolicy::Sync`.
    pub consume_queue_flush_interval_ms: u64,
    /// How often the background task runs a retention pass (`cleanResourceInterval`, 10 s).
    pub retention_check_interval_ms: u64,
    /// Delay of each level (`messageDelayLevel`), index = queue id in the schedule topic: queue
    /// entries there carry the due time instead of a tag hash.
    pub delay_levels_ms: Vec<i64>,
    /// The message index by key (`messageIndexEnable`, `maxHashSlotNum`, `maxIndexNum`).
    pub index: crate::index::IndexConfig,
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
            disk_usage_ratio_clean_forcibly: 0.85,
            disk_usage_ratio_warning: 0.90,
            clean_file_forcibly: true,
            consume_queue_flush_interval_ms: 1000,
            retention_check_interval_ms: 10_000,
            delay_levels_ms: Vec::new(),
            // Off unless asked for: the broker turns it on with RocketMQ's sizes.
            index: crate::index::IndexConfig {
                enabled: false,
                ..crate::index::IndexConfig::default()
            },
        }
    }

    /// Checks the settings; messages name the fields and the values involved.
    pub fn validate(&self) -> Result<()> {
        let invalid = |message: String| Err(StoreError::Config(message));
        if self.commit_log_segment_bytes < 4096 {
            return invalid(format!(
                "commit_log_segment_bytes = {} is below the minimum of 4096",
                self.commit_log_segment_bytes
            ));
        }
        // Records with large properties may still not fit; such an append is refused on its own.
        if self.message_size_max_bytes as u64 + 8 > self.commit_log_segment_bytes {
            return invalid(format!(
                "commit_log_segment_bytes = {} cannot hold a message body of \
                 message_size_max_bytes = {} (plus an 8-byte end marker)",
                self.commit_log_segment_bytes, self.message_size_max_bytes
            ));
        }
        if self.consume_queue_entries_per_file == 0 {
            return invalid("consume_queue_entries_per_file = 0 must be positive".into());
        }
        if self.delete_when_hour > 23 {
            return invalid(format!(
                "delete_when_hour = {} is not an hour of the day (0-23)",
                self.delete_when_hour
            ));
        }
        for (name, ratio) in [
            ("disk_usage_ratio_max", self.disk_usage_ratio_max),
            (
                "disk_usage_ratio_clean_forcibly",
                self.disk_usage_ratio_clean_forcibly,
            ),
            ("disk_usage_ratio_warning", self.disk_usage_ratio_warning),
        ] {
            if !(0.0..=1.0).contains(&ratio) {
                return invalid(format!("{name} = {ratio} is not a ratio between 0 and 1"));
            }
        }
        Ok(())
    }

    /// The largest stored record a message within `message_size_max_bytes` can make.
    pub fn record_size_max(&self) -> usize {
        self.message_size_max_bytes
            .saturating_add(RECORD_OVERHEAD_MAX)
    }

    /// The settings above that may change while the store runs, as it opens with them.
    pub fn tuning(&self) -> StoreTuning {
        StoreTuning {
            file_reserved_hours: self.file_reserved_hours,
            delete_when_hour: self.delete_when_hour,
            disk_usage_ratio_max: self.disk_usage_ratio_max,
            disk_usage_ratio_clean_forcibly: self.disk_usage_ratio_clean_forcibly,
            disk_usage_ratio_warning: self.disk_usage_ratio_warning,
            clean_file_forcibly: self.clean_file_forcibly,
            retention_check_interval_ms: self.retention_check_interval_ms,
            flush_interval_ms: match self.flush {
                FlushPolicy::Async { interval_ms } => interval_ms,
                FlushPolicy::Sync => self.consume_queue_flush_interval_ms,
            },
        }
    }

    /// How long the flush thread waits between rounds: the live interval under `Async`; under
    /// `Sync` (appends sync themselves) the consume queues' interval, fixed.
    pub(crate) fn background_flush_interval(&self, tuning: &StoreTuning) -> Duration {
        match self.flush {
            FlushPolicy::Async { .. } => Duration::from_millis(tuning.flush_interval_ms.max(1)),
            FlushPolicy::Sync => Duration::from_millis(self.consume_queue_flush_interval_ms.max(1)),
        }
    }
}
