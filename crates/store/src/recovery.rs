//! Startup recovery: find the end of the commit log, cut a torn tail, report corruption, and
//! make the consume queues agree with the commit log.
//!
//! The scan starts at the last point known good:
//! - with Tidemark's checkpoint extension, at the lower of the durable commit-log and
//!   consume-queue offsets (after a crash, no later than the start of the newest segment, so a
//!   corrupt byte there is noticed);
//! - without it (a store written by RocketMQ, or a torn checkpoint), at the third-newest segment
//!   after a clean shutdown, as RocketMQ does, and at the first segment after a crash.
//!
//! Every record from there is checked (magic, size, body CRC) and re-dispatched to its consume
//! queue (idempotent: the slot is its queue offset). At the first bad record:
//! - *inside* the durable region, data that was fsynced has rotted: the bad range is reported,
//!   its queue slots become holes, and the scan resynchronises on the next valid record, so
//!   acknowledged records after it are kept;
//! - otherwise it is a torn tail: the log ends there.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tidemark_protocol::message::{
    magic_code_of, total_size_of, DecodeOptions, MessageRecord, BLANK_MAGIC_CODE, MAGIC_CODE_V1,
    MAGIC_CODE_V2,
};
use tracing::{info, warn};

use crate::checkpoint::Checkpoint;
use crate::commit_log::{CommitLog, Segment, SegmentReader};
use crate::config::StoreConfig;
use crate::consume_queue::{ConsumeQueue, QueueEntry};
use crate::destroyed::DestroyedQueues;
use crate::dispatch::DispatchRequest;
use crate::error::Result;
use crate::queues::QueueTable;

/// Whether the previous run shut down cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryMode {
    /// No `abort` marker: the previous run shut down and flushed.
    Normal,
    /// The `abort` marker was present: the previous run crashed or was killed.
    Abnormal,
}

/// What recovery found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    pub mode: RecoveryMode,
    /// Where the scan started.
    pub scan_start: u64,
    /// Records checked and dispatched by the scan.
    pub records_recovered: u64,
    /// End of the commit log after recovery.
    pub commit_log_end: u64,
    /// Non-zero bytes removed from the tail (torn or unacknowledged data).
    pub bytes_truncated: u64,
    /// Ranges `[start, end)` of rotten data inside the durable region, skipped.
    pub corrupt_ranges: Vec<(u64, u64)>,
    /// Consume-queue entries removed because they pointed past the commit log.
    pub queue_entries_truncated: u64,
}

/// A record found by the scan, to be dispatched.
#[derive(Debug)]
pub struct ScannedRecord {
    pub offset: u64,
    pub record: MessageRecord,
    pub size: u32,
    /// Corrupt ranges skipped so far in this scan.
    pub corrupt_ranges_before: usize,
}

/// What a scan found.
#[derive(Debug)]
pub struct ScanOutcome {
    /// End of the valid log.
    pub end: u64,
    /// Corrupt ranges skipped inside synced data.
    pub corrupt_ranges: Vec<(u64, u64)>,
    pub records: u64,
}

/// Scans the commit log from `start`, calling `dispatch` for every valid record; a record
/// `dispatch` refuses counts as bad.
pub fn scan(
    log: &CommitLog,
    start: u64,
    durable_end: u64,
    mut dispatch: impl FnMut(ScannedRecord) -> Result<bool>,
) -> Result<ScanOutcome> {
    let segment_bytes = log.segment_bytes();
    let segments: Vec<Arc<Segment>> = log
        .segments()
        .into_iter()
        .filter(|segment| segment.base + segment_bytes > start)
        .collect();
    let mut corrupt = Vec::new();
    let mut records = 0u64;
    let mut end = start.max(segments.first().map_or(start, |segment| segment.base));
    let bounds = |base: u64, is_last: bool| Bounds {
        base,
        next_segment_at: (!is_last).then_some(base + segment_bytes),
        durable_end,
    };
    for (index, segment) in segments.iter().enumerate() {
        let is_last = index + 1 == segments.len();
        let mut reader = SegmentReader::new(segment.clone(), segment_bytes)?;
        let mut position = end.saturating_sub(segment.base);
        loop {
            match next_record(&mut reader, position)? {
                Found::Record(record, size)
                    if record.physical_offset == (segment.base + position) as i64 =>
                {
                    let scanned = ScannedRecord {
                        offset: segment.base + position,
                        record: *record,
                        size,
                        corrupt_ranges_before: corrupt.len(),
                    };
                    if dispatch(scanned)? {
                        records += 1;
                        position += u64::from(size);
                        end = segment.base + position;
                        continue;
                    }
                    match skip_bad(
                        &mut reader,
                        &bounds(segment.base, is_last),
                        position,
                        &mut corrupt,
                    )? {
                        AfterBad::At(next) => position = next,
                        AfterBad::NextSegment => {
                            end = segment.base + segment_bytes;
                            break;
                        }
                        AfterBad::End => {
                            return Ok(ScanOutcome {
                                end: segment.base + position,
                                corrupt_ranges: corrupt,
                                records,
                            })
                        }
                    }
                }
                Found::EndOfSegment => {
                    if is_last {
                        // The blank was written and then the next segment never created.
                        end = segment.base + segment_bytes;
                    }
                    break;
                }
                Found::Zeros => {
                    // Unwritten space. In a segment that is not the newest it means the data
                    // after this point never became durable: the log ends here either way.
                    return Ok(ScanOutcome {
                        end: segment.base + position,
                        corrupt_ranges: corrupt,
                        records,
                    });
                }
                // A record whose body checks out but whose position field is wrong was damaged
                // in its header: as untrustworthy as a bad CRC.
                Found::Record(..) | Found::Bad => {
                    match skip_bad(
                        &mut reader,
                        &bounds(segment.base, is_last),
                        position,
                        &mut corrupt,
                    )? {
                        AfterBad::At(next) => position = next,
                        AfterBad::NextSegment => {
                            end = segment.base + segment_bytes;
                            break;
                        }
                        AfterBad::End => {
                            return Ok(ScanOutcome {
                                end: segment.base + position,
                                corrupt_ranges: corrupt,
                                records,
                            })
                        }
                    }
                }
            }
        }
        if !is_last {
            end = segment.base + segment_bytes;
        }
    }
    Ok(ScanOutcome {
        end,
        corrupt_ranges: corrupt,
        records,
    })
}

/// Where a scan is in the log: the segment's first offset, whether a newer segment follows it
/// (and where this one ends), and below which offset the data was synced.
struct Bounds {
    base: u64,
    next_segment_at: Option<u64>,
    durable_end: u64,
}

/// What follows a bad record.
enum AfterBad {
    /// A valid record at this position of the segment: the scan goes on there.
    At(u64),
    /// Nothing valid in the rest of this segment, a newer one follows: the scan goes on there.
    NextSegment,
    /// The log ends at the bad record.
    End,
}

/// At a bad record: inside synced data, resynchronise on the next valid record, or when the
/// segment holds none, on the next segment — the records of newer segments were synced too and
/// must not be cut with the rotten one — and report the skipped range. Past the synced data a
/// bad record is a torn tail: the log ends there.
fn skip_bad(
    reader: &mut SegmentReader,
    bounds: &Bounds,
    position: u64,
    corrupt: &mut Vec<(u64, u64)>,
) -> Result<AfterBad> {
    let at = bounds.base + position;
    if at >= bounds.durable_end {
        return Ok(AfterBad::End);
    }
    if let Some(next) = resync(reader, position + 1)? {
        warn!(
            from = at,
            to = bounds.base + next,
            "corrupt commit-log range inside synced data; skipped"
        );
        corrupt.push((at, bounds.base + next));
        return Ok(AfterBad::At(next));
    }
    match bounds.next_segment_at {
        Some(next_segment) => {
            warn!(
                from = at,
                to = next_segment,
                "corrupt commit-log range inside synced data, to the end of its segment; skipped"
            );
            corrupt.push((at, next_segment));
            Ok(AfterBad::NextSegment)
        }
        None => {
            warn!(
                at,
                "corrupt commit-log record with nothing valid after it in the newest segment; the log ends there"
            );
            Ok(AfterBad::End)
        }
    }
}

enum Found {
    Record(Box<MessageRecord>, u32),
    EndOfSegment,
    Zeros,
    Bad,
}

fn next_record(reader: &mut SegmentReader, position: u64) -> Result<Found> {
    if position + 8 > reader.segment_bytes() {
        // Fewer than 8 bytes left cannot hold anything but the end of the segment.
        return Ok(Found::EndOfSegment);
    }
    let Some((size, magic)) = reader
        .slice(position, 8)?
        .and_then(|head| Some((total_size_of(&head)?, magic_code_of(&head)?)))
    else {
        // The file is shorter than its segment: nothing was written here.
        return Ok(Found::Zeros);
    };
    if size == 0 && magic == 0 {
        return Ok(Found::Zeros);
    }
    if magic == BLANK_MAGIC_CODE && size >= 8 && position + size as u64 == reader.segment_bytes() {
        return Ok(Found::EndOfSegment);
    }
    if (magic != MAGIC_CODE_V1 && magic != MAGIC_CODE_V2) || size < 8 {
        return Ok(Found::Bad);
    }
    let Some(bytes) = reader.slice(position, size as u64)? else {
        return Ok(Found::Bad);
    };
    Ok(decode_checked(&bytes).map_or(Found::Bad, |record| {
        Found::Record(Box::new(record), size as u32)
    }))
}

fn decode_checked(bytes: &Bytes) -> Option<MessageRecord> {
    MessageRecord::decode(
        bytes,
        0,
        DecodeOptions {
            verify_body_crc: true,
        },
    )
    .ok()
    .filter(|(_, length)| *length == bytes.len())
    .map(|(record, _)| record)
}

/// The next position in the segment where a whole valid record starts.
fn resync(reader: &mut SegmentReader, from: u64) -> Result<Option<u64>> {
    let mut position = from;
    while position + 8 <= reader.len() {
        // Records cannot start in the last 8 bytes, and a resync never crosses a segment.
        if let Some(magic) = reader
            .slice(position, 8)?
            .and_then(|head| magic_code_of(&head))
        {
            if magic == MAGIC_CODE_V1 || magic == MAGIC_CODE_V2 {
                if let Found::Record(..) = next_record(reader, position)? {
                    return Ok(Some(position));
                }
            }
        }
        position += 1;
    }
    Ok(None)
}

/// Where the scan starts, and below which offset data was known durable.
pub fn scan_start(log: &CommitLog, checkpoint: &Checkpoint, mode: RecoveryMode) -> (u64, u64) {
    let segments = log.segments();
    let first = segments.first().map_or(0, |segment| segment.base);
    let newest = segments.last().map_or(0, |segment| segment.base);
    match (checkpoint.durable, mode) {
        (Some(durable), RecoveryMode::Normal) => (
            durable.commit_log.min(durable.consume_queues).max(first),
            durable.commit_log,
        ),
        (Some(durable), RecoveryMode::Abnormal) => (
            durable
                .commit_log
                .min(durable.consume_queues)
                .min(newest)
                .max(first),
            durable.commit_log,
        ),
        (None, RecoveryMode::Normal) => {
            let third_newest = segments.len().saturating_sub(3);
            (
                segments
                    .get(third_newest)
                    .map_or(first, |segment| segment.base),
                0,
            )
        }
        (None, RecoveryMode::Abnormal) => (first, 0),
    }
}

/// Recovers an opened store: scans the commit log from where `checkpoint` and `mode` say,
/// cuts it where the valid data ends, and rebuilds the consume queues from the records found.
pub(crate) fn recover(
    log: &CommitLog,
    queues: &QueueTable,
    destroyed: &DestroyedQueues,
    config: &StoreConfig,
    mode: RecoveryMode,
    checkpoint: &Checkpoint,
) -> Result<RecoveryReport> {
    let (start, durable_end) = scan_start(log, checkpoint, mode);
    // A destroy the crash interrupted: the marked queue still holds records from before its
    // mark. A queue created after the destroy holds only later ones.
    for ((topic, queue_id), at) in destroyed.all() {
        if let Some(queue) = queues.get(&topic, queue_id) {
            if queue.first_record_offset()?.is_some_and(|first| first < at) {
                queues.remove(&topic, queue_id);
                queue.destroy()?;
            }
        }
    }
    // Consume queues are derived data: everything they say about the log from the scan
    // start on is dropped and rebuilt from the records themselves.
    for queue in &queues.all() {
        queue.truncate_past(start, &|slot, entry| {
            log.holds_record(entry.commit_log_offset, queue.queue_id, slot)
        })?;
    }
    // A queue's offsets follow each other in log order. The CRC covers only the body, so a
    // record breaking the sequence had its header damaged; a jump is allowed only where a
    // corrupt range was skipped since the queue's previous record (its slots become holes).
    let log_span = log.segments().len() as u64 * log.segment_bytes();
    let mut expected: HashMap<(String, i32), (i64, usize)> = HashMap::new();
    let outcome = scan(log, start, durable_end, |scanned: ScannedRecord| {
        let (topic, queue_id) = (&scanned.record.topic, scanned.record.queue_id);
        if destroyed.covers(topic, queue_id, scanned.offset) {
            return Ok(true);
        }
        let key = (topic.clone(), queue_id);
        let queue = queues.get_or_create(&key.0, key.1)?;
        let offset = scanned.record.queue_offset;
        let first_of_queue = !expected.contains_key(&key);
        let (next, corrupt_seen) = expected
            .get(&key)
            .copied()
            .unwrap_or((queue.write_end(), 0));
        let jump_allowed = scanned.corrupt_ranges_before > corrupt_seen
            && offset > next
            && ((offset - next) as u64) <= log_span / 64;
        // A destroyed queue's successor whose files went too (a destroy that failed half way
        // left the old files to be reopened): its records begin where they begin.
        let restarted_queue = first_of_queue
            && queue.write_end() == 0
            && destroyed.is_marked(&key.0, key.1)
            && offset >= 0;
        if offset != next && !jump_allowed && !restarted_queue {
            return Ok(false);
        }
        expected.insert(key, (offset + 1, scanned.corrupt_ranges_before));
        let request = DispatchRequest::of_record(&scanned.record, scanned.offset, scanned.size);
        queue.put(offset, request.queue_entry(config))?;
        queue.publish(offset + 1);
        Ok(true)
    })?;
    let (end, corrupt, records) = (outcome.end, outcome.corrupt_ranges, outcome.records);
    let bytes_truncated = log.truncate(end)?;
    let commit_log_min = log.min_offset();
    destroyed.prune(commit_log_min)?;
    let mut queue_entries_truncated = 0;
    let queues = queues.all();
    for queue in &queues {
        queue_entries_truncated += queue.truncate_past(end, &|slot, entry| {
            log.holds_record(entry.commit_log_offset, queue.queue_id, slot)
        })?;
        queue.correct_min_offset(commit_log_min)?;
        queue.sync()?;
    }
    if !corrupt.is_empty() {
        punch_holes(&queues, &corrupt)?;
    }
    Ok(RecoveryReport {
        mode,
        scan_start: start,
        records_recovered: records,
        commit_log_end: end,
        bytes_truncated,
        corrupt_ranges: corrupt,
        queue_entries_truncated,
    })
}

/// Queue entries pointing into corrupt ranges become holes: never served.
fn punch_holes(queues: &[Arc<ConsumeQueue>], corrupt: &[(u64, u64)]) -> Result<()> {
    for queue in queues {
        let (min, max) = (queue.min_offset(), queue.max_offset());
        let mut offset = min;
        while offset < max {
            let Some(entries) = queue.read(offset, 1024)? else {
                break;
            };
            for (index, entry) in entries.iter().enumerate() {
                let at = entry.commit_log_offset as u64;
                if !entry.is_hole() && corrupt.iter().any(|(from, to)| at >= *from && at < *to) {
                    queue.put(offset + index as i64, QueueEntry::HOLE)?;
                }
            }
            offset += entries.len().max(1) as i64;
        }
    }
    Ok(())
}

pub fn log_report(report: &RecoveryReport) {
    info!(
        mode = ?report.mode,
        scan_start = report.scan_start,
        records = report.records_recovered,
        end = report.commit_log_end,
        bytes_truncated = report.bytes_truncated,
        corrupt_ranges = report.corrupt_ranges.len(),
        queue_entries_truncated = report.queue_entries_truncated,
        "store recovered"
    );
}
