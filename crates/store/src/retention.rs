//! Retention: deleting old commit-log segments and the consume-queue files they leave behind
//! (RocketMQ's `CleanCommitLogService` and `CleanConsumeQueueService`).

use std::path::Path;
use std::sync::Arc;

use tracing::info;

use crate::commit_log::CommitLog;
use crate::config::StoreConfig;
use crate::consume_queue::ConsumeQueue;
use crate::error::Result;
use crate::store::{store_timestamp_of, MessageStore};

/// What a retention pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Start offsets of the deleted commit-log segments.
    pub segments_deleted: Vec<u64>,
    pub queue_files_deleted: usize,
}

/// Share of the file system holding `path` that is in use, as RocketMQ's
/// `getDiskPartitionSpaceUsedPercent` computes it.
pub fn disk_usage_ratio(path: &Path) -> std::io::Result<f64> {
    let stats = fs4::statvfs(path)?;
    if stats.total_space() == 0 {
        return Ok(0.0);
    }
    Ok(1.0 - stats.available_space() as f64 / stats.total_space() as f64)
}

/// The UTC hour of a millisecond timestamp.
pub(crate) fn hour_of_day(now_ms: i64) -> u32 {
    (now_ms.div_euclid(3_600_000).rem_euclid(24)) as u32
}

/// One retention pass.
///
/// A segment has expired when it was closed (the first record of the next segment was stored)
/// more than `file_reserved_hours` before `now_ms`. Expired segments are deleted when
/// `hour_of_day` is the configured `delete_when_hour`; when `disk_usage_ratio` is above the
/// configured maximum, the oldest segment goes whether expired or not. The segment being written
/// is never deleted. Consume queues then drop files that point only at deleted data and move
/// their minimum offsets.
pub(crate) fn delete_expired(
    commit_log: &CommitLog,
    config: &StoreConfig,
    queues: Vec<Arc<ConsumeQueue>>,
    now_ms: i64,
    hour_of_day: u32,
    disk_usage_ratio: f64,
) -> Result<RetentionReport> {
    let reserved_ms = config.file_reserved_hours as i64 * 3_600_000;
    let disk_full = disk_usage_ratio > config.disk_usage_ratio_max;
    let in_delete_hour = hour_of_day == config.delete_when_hour;
    let mut report = RetentionReport::default();
    loop {
        let segments = commit_log.segments();
        if segments.len() < 2 {
            break;
        }
        let closed_at = commit_log
            .read(segments[1].base, 64)?
            .and_then(|head| store_timestamp_of(&head));
        let expired = closed_at.is_some_and(|closed| closed + reserved_ms <= now_ms);
        let delete = (expired && (in_delete_hour || disk_full))
            || (disk_full && report.segments_deleted.is_empty());
        if !delete {
            break;
        }
        match commit_log.delete_oldest_segment()? {
            Some(base) => report.segments_deleted.push(base),
            None => break,
        }
    }
    if !report.segments_deleted.is_empty() {
        let min = commit_log.min_offset();
        for queue in queues {
            report.queue_files_deleted += queue.correct_min_offset(min)?;
        }
        info!(
            segments = report.segments_deleted.len(),
            queue_files = report.queue_files_deleted,
            "retention deleted old data"
        );
    }
    Ok(report)
}

impl MessageStore {
    /// One retention pass with an explicit time, hour of day and disk usage (tests and tools);
    /// the store's background task runs one every `retention_check_interval_ms` with the
    /// store clock's UTC hour and the measured disk usage.
    pub fn delete_expired(
        &self,
        now_ms: i64,
        hour_of_day: u32,
        disk_usage_ratio: f64,
    ) -> Result<RetentionReport> {
        delete_expired(
            self.commit_log(),
            self.config(),
            self.all_queues(),
            now_ms,
            hour_of_day,
            disk_usage_ratio,
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hours_are_utc() {
        assert_eq!(super::hour_of_day(1_700_000_000_000), 22); // 2023-11-14T22:13:20Z
        assert_eq!(super::hour_of_day(0), 0);
    }

    #[test]
    fn disk_usage_of_the_working_directory_is_a_ratio() {
        let ratio = super::disk_usage_ratio(std::path::Path::new(".")).expect("statvfs");
        assert!((0.0..=1.0).contains(&ratio));
    }
}
