//! Retention: deleting old commit-log segments and the consume-queue files they leave behind.

use tracing::info;

use crate::error::Result;
use crate::store::{store_timestamp_of, MessageStore};

/// What a retention pass deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Start offsets of the deleted commit-log segments.
    pub segments_deleted: Vec<u64>,
    pub queue_files_deleted: usize,
}

impl MessageStore {
    /// One retention pass (RocketMQ's `CleanCommitLogService`).
    ///
    /// A segment has expired when it was closed (the first record of the next segment was
    /// stored) more than `file_reserved_hours` before `now_ms`. Expired segments are deleted
    /// when `hour_of_day` is the configured `delete_when_hour`; when `disk_usage_ratio` is above
    /// the configured maximum, the oldest segment goes whether expired or not. The segment being
    /// written is never deleted. Consume queues then drop files that point only at deleted data
    /// and move their minimum offsets.
    pub fn delete_expired(
        &self,
        now_ms: i64,
        hour_of_day: u32,
        disk_usage_ratio: f64,
    ) -> Result<RetentionReport> {
        let config = self.config();
        let reserved_ms = config.file_reserved_hours as i64 * 3_600_000;
        let disk_full = disk_usage_ratio > config.disk_usage_ratio_max;
        let in_delete_hour = hour_of_day == config.delete_when_hour;
        let mut report = RetentionReport::default();
        loop {
            let segments = self.commit_log().segments();
            if segments.len() < 2 {
                break;
            }
            let closed_at = self
                .commit_log()
                .read(segments[1].base, 64)?
                .and_then(|head| store_timestamp_of(&head));
            let expired = closed_at.is_some_and(|closed| closed + reserved_ms <= now_ms);
            let delete = (expired && (in_delete_hour || disk_full))
                || (disk_full && report.segments_deleted.is_empty());
            if !delete {
                break;
            }
            match self.commit_log().delete_oldest_segment()? {
                Some(base) => report.segments_deleted.push(base),
                None => break,
            }
        }
        if !report.segments_deleted.is_empty() {
            let min = self.commit_log().min_offset();
            for queue in self.all_queues() {
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
}
