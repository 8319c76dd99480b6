//! Retention: deleting old commit-log segments and the consume-queue files they leave behind
//! (RocketMQ's `CleanCommitLogService` and `CleanConsumeQueueService`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tidemark_protocol::message::store_timestamp_of;
use tracing::{error, info, warn};

use crate::commit_log::CommitLog;
use crate::consume_queue::ConsumeQueue;
use crate::error::{Result, StoreError};
use crate::tuning::{StoreTuning, TuningSource};

/// Segments one pass deletes at most (RocketMQ's `DELETE_FILES_BATCH_MAX`); the pass repeats
/// every `retention_check_interval_ms`.
const SEGMENTS_PER_PASS_MAX: usize = 10;

/// What a retention pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Start offsets of the deleted commit-log segments.
    pub segments_deleted: Vec<u64>,
    /// Those of them deleted before they expired, because disk usage was above
    /// `disk_usage_ratio_clean_forcibly`.
    pub segments_deleted_unexpired: Vec<u64>,
    pub queue_files_deleted: usize,
}

/// Share of the file system holding `path` that is in use: (total − free) / total, where free
/// counts the blocks reserved for root too. This is RocketMQ's
/// `getDiskPartitionSpaceUsedPercent` (Java's `getFreeSpace`); the space *available* to this
/// process reads far higher on file systems with reserved blocks or quotas.
pub fn disk_usage_ratio(path: &Path) -> std::io::Result<f64> {
    let stats = fs4::statvfs(path)?;
    Ok(used_ratio(stats.total_space(), stats.free_space()))
}

/// Bytes in use on the file system holding `path`, counted as [`disk_usage_ratio`] counts them.
pub fn disk_used_bytes(path: &Path) -> std::io::Result<u64> {
    let stats = fs4::statvfs(path)?;
    Ok(stats.total_space().saturating_sub(stats.free_space()))
}

pub(crate) fn used_ratio(total: u64, free: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    total.saturating_sub(free) as f64 / total as f64
}

/// The store's disk usage as last measured, and whether appends are refused because of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskUsage {
    /// Used share of the store's file system at the last retention pass (0 before the first,
    /// or where it cannot be measured).
    pub usage_ratio: f64,
    /// Set above `disk_usage_ratio_warning`, cleared again below
    /// `disk_usage_ratio_clean_forcibly` (RocketMQ's disk-full running flag).
    pub writes_refused: bool,
}

/// The disk-usage state appenders consult: written by retention passes, read by every append.
#[derive(Debug, Default)]
pub(crate) struct DiskGuard {
    usage_bits: AtomicU64,
    refusing: AtomicBool,
}

impl DiskGuard {
    /// Records a measurement and moves the write refusal with RocketMQ's hysteresis: refuse
    /// above the warning level, accept again at or below the forced-clean level, and keep the
    /// current state in between.
    pub(crate) fn record(&self, usage: f64, tuning: &StoreTuning) {
        self.usage_bits.store(usage.to_bits(), Ordering::Relaxed);
        if usage > tuning.disk_usage_ratio_warning {
            if !self.refusing.swap(true, Ordering::AcqRel) {
                error!(
                    usage,
                    disk_usage_ratio_warning = tuning.disk_usage_ratio_warning,
                    "disk nearly full: refusing writes until usage falls below {}",
                    tuning.disk_usage_ratio_clean_forcibly
                );
            }
        } else if usage <= tuning.disk_usage_ratio_clean_forcibly
            && self.refusing.swap(false, Ordering::AcqRel)
        {
            info!(
                usage,
                "disk usage is back to normal: accepting writes again"
            );
        }
    }

    /// Why an append is refused, if it is. The source is asked only then: appends read one
    /// atomic, not the live settings.
    pub(crate) fn refusal(&self, tuning: &dyn TuningSource) -> Option<StoreError> {
        self.refusing
            .load(Ordering::Acquire)
            .then(|| StoreError::DiskNearlyFull {
                usage: self.usage().usage_ratio,
                limit: tuning.store_tuning().disk_usage_ratio_warning,
            })
    }

    pub(crate) fn usage(&self) -> DiskUsage {
        DiskUsage {
            usage_ratio: f64::from_bits(self.usage_bits.load(Ordering::Relaxed)),
            writes_refused: self.refusing.load(Ordering::Acquire),
        }
    }
}

/// The UTC hour of a millisecond timestamp.
pub(crate) fn hour_of_day(now_ms: i64) -> u32 {
    (now_ms.div_euclid(3_600_000).rem_euclid(24)) as u32
}

/// One retention pass, by RocketMQ's rules (`CleanCommitLogService`), with the settings as
/// they are now (`tuning`, read once per pass).
///
/// A segment has expired when it was closed (the first record of the next segment was stored)
/// more than `file_reserved_hours` before `now_ms`. Expired segments are deleted at the
/// configured `delete_when_hour`, or at any hour while disk usage is above
/// `disk_usage_ratio_max`. A segment that has not expired is deleted only while usage is above
/// `disk_usage_ratio_clean_forcibly` (and `clean_file_forcibly` is on), oldest first, each
/// with a WARN naming the figures. `disk_usage` is measured again after every deletion. The
/// segment being written is never deleted; at most [`SEGMENTS_PER_PASS_MAX`] go per pass.
/// Consume queues then drop files that point only at deleted data and move their minimums.
pub(crate) fn delete_expired(
    commit_log: &CommitLog,
    tuning: &StoreTuning,
    queues: Vec<Arc<ConsumeQueue>>,
    now_ms: i64,
    hour_of_day: u32,
    disk_usage: &mut dyn FnMut() -> f64,
) -> Result<RetentionReport> {
    // An operator's value may be absurdly large: it then never expires, and never overflows.
    let reserved_ms = i64::try_from(tuning.file_reserved_hours)
        .unwrap_or(i64::MAX)
        .saturating_mul(3_600_000);
    let in_delete_hour = hour_of_day == tuning.delete_when_hour;
    let mut report = RetentionReport::default();
    let mut usage = disk_usage();
    while report.segments_deleted.len() < SEGMENTS_PER_PASS_MAX {
        let segments = commit_log.segments();
        if segments.len() < 2 {
            break;
        }
        let closed_at = commit_log
            .read(segments[1].base, 64)?
            .and_then(|head| store_timestamp_of(&head));
        let expired = closed_at.is_some_and(|closed| closed.saturating_add(reserved_ms) <= now_ms);
        let space_pressure = usage > tuning.disk_usage_ratio_max;
        let forced = tuning.clean_file_forcibly && usage > tuning.disk_usage_ratio_clean_forcibly;
        let delete = (expired && (in_delete_hour || space_pressure)) || forced;
        if !delete {
            break;
        }
        let Some(base) = commit_log.delete_oldest_segment()? else {
            break;
        };
        report.segments_deleted.push(base);
        if !expired {
            report.segments_deleted_unexpired.push(base);
            warn!(
                segment = base,
                disk_usage = usage,
                disk_usage_ratio_clean_forcibly = tuning.disk_usage_ratio_clean_forcibly,
                closed_hours_ago = closed_at.map(|closed| (now_ms - closed) as f64 / 3_600_000.0),
                file_reserved_hours = tuning.file_reserved_hours,
                "disk usage above the forced-clean level: deleted a segment that had not expired; \
                 consumers behind it lose those messages"
            );
        }
        usage = disk_usage();
    }
    if !report.segments_deleted.is_empty() {
        let min = commit_log.min_offset();
        for queue in queues {
            report.queue_files_deleted += queue.correct_min_offset(min)?;
        }
        info!(
            segments = report.segments_deleted.len(),
            unexpired = report.segments_deleted_unexpired.len(),
            queue_files = report.queue_files_deleted,
            min_offset = min,
            disk_usage = usage,
            "retention deleted old data"
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    #[test]
    fn hours_are_utc() {
        assert_eq!(super::hour_of_day(1_700_000_000_000), 22); // 2023-11-14T22:13:20Z
        assert_eq!(super::hour_of_day(0), 0);
    }

    /// Reserved blocks count as used only when nobody can use them: RocketMQ's figure is
    /// (total − free) / total, with root's reserve in `free`.
    #[test]
    fn usage_is_total_minus_free_over_total() {
        assert_eq!(super::used_ratio(1000, 890), 0.11);
        assert_eq!(super::used_ratio(0, 0), 0.0);
        assert_eq!(super::used_ratio(100, 200), 0.0);
    }

    #[test]
    fn disk_usage_of_the_working_directory_is_a_ratio() {
        let ratio = super::disk_usage_ratio(std::path::Path::new(".")).expect("statvfs");
        assert!((0.0..=1.0).contains(&ratio));
    }
}
