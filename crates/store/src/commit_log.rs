//! The commit log: fixed-size segments named by their 20-digit start offset, records back to
//! back, and a blank record (`size | 0xCBD43194`) filling the end of every full segment
//! (RocketMQ's `CommitLog` over a `MappedFileQueue`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;
use tidemark_protocol::message::{
    total_size_of, BLANK_MAGIC_CODE, PHYSICAL_OFFSET_POSITION, QUEUE_OFFSET_POSITION,
};
use tracing::warn;

use crate::error::{Result, StoreError};
use crate::io::{Storage, StorageFile};

/// A segment must keep room for the blank record that ends it (`END_FILE_MIN_BLANK_LENGTH`).
pub const END_OF_SEGMENT_MIN_BYTES: u64 = 8;

/// RocketMQ's file name for a start offset: zero-padded to 20 digits.
pub fn segment_file_name(offset: u64) -> String {
    format!("{offset:020}")
}

/// Parses a 20-digit segment name.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    (name.len() == 20 && name.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

/// One segment file.
#[derive(Debug)]
pub struct Segment {
    pub base: u64,
    pub path: PathBuf,
    pub file: Arc<dyn StorageFile>,
}

/// Bytes between two wanted records that [`CommitLog::read_many`] reads and drops rather than
/// issue a second read: other queues' records in between, up to a few.
const READ_GAP_BYTES_MAX: u64 = 8 * 1024;
/// The most one read of [`CommitLog::read_many`] takes in.
const READ_RUN_BYTES_MAX: u64 = 1024 * 1024;

/// The ordered segments and the write and flush positions.
#[derive(Debug)]
pub struct CommitLog {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    segment_bytes: u64,
    segments: RwLock<Vec<Arc<Segment>>>,
    /// End of the last complete record: readers never look past it.
    written: AtomicU64,
    /// Bytes below this are durable.
    flushed: AtomicU64,
    /// The write window's end as last set by [`prefault`](Self::prefault); 0 before the first.
    prefaulted_to: AtomicU64,
    /// The segment the write window was last set in, to close its window when writes move on.
    prefault_segment: Mutex<Option<Arc<Segment>>>,
    /// How long each [`sync_to`](Self::sync_to) that had bytes to sync took.
    syncs: crate::sync_times::SyncTimes,
}

/// How far past the write position [`CommitLog::prefault`] gets pages ready. Faulting a page
/// in costs about as much as writing it (the kernel zeroes it), so the prefault thread needs a
/// head start of some milliseconds of writing to stay ahead of a writer at full speed.
pub const PREFAULT_AHEAD_BYTES: u64 = 16 * 1024 * 1024;

/// The prefault thread is woken each time the writer has used up this much of the window.
const PREFAULT_STEP_BYTES: u64 = 1024 * 1024;
/// A record's header up to and including its physical offset.
const RECORD_HEAD_BYTES: usize = PHYSICAL_OFFSET_POSITION + 8;

/// Pages further behind the write position than this are let go of (unmapped; the page cache
/// keeps them), so the broker's resident set does not grow with the segment.
pub const RELEASE_BEHIND_BYTES: u64 = 4 * 1024 * 1024;

impl CommitLog {
    /// Opens the segments in `dir`. An existing store's segment size wins over `segment_bytes`
    /// (a RocketMQ store written with other settings is read as it is).
    pub fn open(storage: Arc<dyn Storage>, dir: PathBuf, segment_bytes: u64) -> Result<CommitLog> {
        storage
            .create_dir_all(&dir)
            .map_err(|error| StoreError::io("create", &dir, error))?;
        let mut bases: Vec<u64> = storage
            .list(&dir)
            .map_err(|error| StoreError::io("list", &dir, error))?
            .into_iter()
            .filter(|entry| !entry.is_dir)
            .filter_map(|entry| parse_segment_file_name(&entry.name))
            .collect();
        bases.sort_unstable();
        let mut segments = Vec::with_capacity(bases.len());
        for base in &bases {
            let path = dir.join(segment_file_name(*base));
            let file = storage
                .open(&path, false)
                .map_err(|error| StoreError::io("open", &path, error))?;
            segments.push(Arc::new(Segment {
                base: *base,
                path,
                file,
            }));
        }
        let mut effective = segment_bytes;
        if let Some(first) = segments.first() {
            let length = first
                .file
                .length()
                .map_err(|error| StoreError::io("stat", &first.path, error))?;
            if length != segment_bytes && length > 0 {
                warn!(configured = segment_bytes, on_disk = length, "commit-log segment size differs from the configuration; using the size on disk");
                effective = length;
            }
        }
        for pair in bases.windows(2) {
            if pair[1] != pair[0] + effective {
                return Err(StoreError::Unrecoverable {
                    reason: format!(
                        "commit-log segments {} and {} are not {} bytes apart",
                        pair[0], pair[1], effective
                    ),
                });
            }
        }
        let start = bases.first().copied().unwrap_or(0);
        Ok(CommitLog {
            dir,
            storage,
            segment_bytes: effective,
            segments: RwLock::new(segments),
            written: AtomicU64::new(start),
            flushed: AtomicU64::new(start),
            prefaulted_to: AtomicU64::new(0),
            prefault_segment: Mutex::new(None),
            syncs: crate::sync_times::SyncTimes::default(),
        })
    }

    fn read_segments(&self) -> RwLockReadGuard<'_, Vec<Arc<Segment>>> {
        self.segments.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_segments(&self) -> RwLockWriteGuard<'_, Vec<Arc<Segment>>> {
        self.segments
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Snapshot of the segments, oldest first.
    pub fn segments(&self) -> Vec<Arc<Segment>> {
        self.read_segments().clone()
    }

    /// Smallest offset still stored.
    pub fn min_offset(&self) -> u64 {
        self.read_segments()
            .first()
            .map_or_else(|| self.written(), |segment| segment.base)
    }

    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    pub fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    /// Sets the positions after recovery.
    pub fn set_recovered_end(&self, end: u64) {
        self.written.store(end, Ordering::Release);
        self.flushed.store(end, Ordering::Release);
    }

    fn segment_for(&self, offset: u64) -> Option<Arc<Segment>> {
        let segments = self.read_segments();
        let index = segments
            .partition_point(|segment| segment.base <= offset)
            .checked_sub(1)?;
        let segment = &segments[index];
        (offset < segment.base + self.segment_bytes).then(|| segment.clone())
    }

    fn create_segment(&self, base: u64) -> Result<Arc<Segment>> {
        let path = self.dir.join(segment_file_name(base));
        let file = self
            .storage
            .open(&path, true)
            .map_err(|error| StoreError::io("create", &path, error))?;
        // Full size up front, as RocketMQ's mapped files are (sparse: costs no disk yet).
        file.set_len(self.segment_bytes)
            .map_err(|error| StoreError::io("preallocate", &path, error))?;
        self.storage
            .sync_dir(&self.dir)
            .map_err(|error| StoreError::io("sync", &self.dir, error))?;
        let segment = Arc::new(Segment { base, path, file });
        self.write_segments().push(segment.clone());
        Ok(segment)
    }

    /// Where a record of `length` bytes goes. When it does not fit in the current segment
    /// (with room left for the blank record) the segment is closed with a blank record and a new
    /// one is started. Callers hold the store's append lock.
    pub fn reserve(&self, length: u64) -> Result<u64> {
        debug_assert!(
            length + END_OF_SEGMENT_MIN_BYTES <= self.segment_bytes,
            "callers check the size"
        );
        let end = self.written();
        let current = match self.segment_for(end) {
            Some(segment) => segment,
            None => self.create_segment(end - end % self.segment_bytes)?,
        };
        let position = end - current.base;
        let remaining = self.segment_bytes - position;
        if length + END_OF_SEGMENT_MIN_BYTES <= remaining {
            return Ok(end);
        }
        let mut blank = [0u8; 8];
        blank[0..4].copy_from_slice(&(remaining as i32).to_be_bytes());
        blank[4..8].copy_from_slice(&BLANK_MAGIC_CODE.to_be_bytes());
        current
            .file
            .write_at(position, &blank)
            .map_err(|error| StoreError::io("write", &current.path, error))?;
        let next = current.base + self.segment_bytes;
        self.create_segment(next)?;
        self.written.store(next, Ordering::Release);
        Ok(next)
    }

    /// Writes record bytes at an offset returned by [`reserve`](Self::reserve).
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        let segment = self.segment_for(offset).ok_or(StoreError::Unrecoverable {
            reason: format!("no commit-log segment for offset {offset}"),
        })?;
        segment
            .file
            .write_at(offset - segment.base, bytes)
            .map_err(|error| StoreError::io("write", &segment.path, error))
    }

    /// Writes bytes copied from a master's log at `offset` (the end of this log, or anywhere
    /// when this log is empty), creating segments as the bytes cross their boundaries, and
    /// publishes them. Callers hold the store's append lock.
    pub fn write_replicated(&self, offset: u64, bytes: &[u8]) -> Result<u64> {
        let mut position = offset;
        let mut rest = bytes;
        while !rest.is_empty() {
            let segment = match self.segment_for(position) {
                Some(segment) => segment,
                None => self.create_segment(position - position % self.segment_bytes)?,
            };
            let room = (segment.base + self.segment_bytes - position) as usize;
            let (chunk, tail) = rest.split_at(room.min(rest.len()));
            segment
                .file
                .write_at(position - segment.base, chunk)
                .map_err(|error| StoreError::io("write", &segment.path, error))?;
            position += chunk.len() as u64;
            rest = tail;
        }
        self.written.fetch_max(position, Ordering::AcqRel);
        Ok(position)
    }

    /// Whether the record of `queue_id` at `queue_offset` starts at `offset`: its header names
    /// that queue, that queue offset and that position (what a consume-queue entry claims).
    pub fn holds_record(&self, offset: i64, queue_id: i32, queue_offset: i64) -> bool {
        let Ok(offset) = u64::try_from(offset) else {
            return false;
        };
        // Not bounded by the write position: recovery asks before it knows where the log ends.
        let Some(segment) = self.segment_for(offset) else {
            return false;
        };
        if offset - segment.base + RECORD_HEAD_BYTES as u64 > self.segment_bytes {
            return false;
        }
        let mut head = [0u8; RECORD_HEAD_BYTES];
        if segment
            .file
            .read_at(offset - segment.base, &mut head)
            .is_err()
        {
            return false;
        }
        let field = |at: usize| {
            head.get(at..at + 8)
                .and_then(|bytes| bytes.try_into().ok())
                .map(i64::from_be_bytes)
        };
        let queue_id_at = head
            .get(12..16)
            .and_then(|bytes| bytes.try_into().ok())
            .map(i32::from_be_bytes);
        queue_id_at == Some(queue_id)
            && field(QUEUE_OFFSET_POSITION) == Some(queue_offset)
            && field(PHYSICAL_OFFSET_POSITION) == Some(offset as i64)
    }

    /// After a truncation: the write window is set again from the new end at the next
    /// prefault (a window above the write position would break its invariant).
    pub fn forget_prefault(&self) {
        self.prefaulted_to.store(0, Ordering::Release);
    }

    /// Whether the write window should move on: appends ending at `end` have used up a step
    /// of it since it was last set.
    pub fn wants_prefault(&self, end: u64) -> bool {
        end.saturating_add(PREFAULT_AHEAD_BYTES - PREFAULT_STEP_BYTES)
            > self.prefaulted_to.load(Ordering::Acquire)
    }

    /// Moves the write window of the segment being written to `[written − RELEASE_BEHIND,
    /// written + PREFAULT_AHEAD)` (see [`StorageFile::write_window`]), and closes the previous
    /// segment's window when writes have moved to a new one. Run by the store's prefault
    /// thread, off the append path.
    ///
    /// The window never starts above the published write position, and appends only write at
    /// or above it, so no append writes where the window is being let go of.
    pub fn prefault(&self) -> Result<()> {
        let written = self.written();
        let Some(segment) = self.segment_for(written) else {
            return Ok(());
        };
        {
            let mut previous = self
                .prefault_segment
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if previous
                .as_ref()
                .is_some_and(|previous| previous.base != segment.base)
            {
                if let Some(previous) = previous.take() {
                    // All of the old segment is behind the writer now.
                    let end = self.segment_bytes;
                    previous
                        .file
                        .write_window(end, end)
                        .map_err(|error| StoreError::io("unmap", &previous.path, error))?;
                }
            }
            *previous = Some(segment.clone());
        }
        let position = written - segment.base;
        let to = position
            .saturating_add(PREFAULT_AHEAD_BYTES)
            .min(self.segment_bytes);
        segment
            .file
            .write_window(position.saturating_sub(RELEASE_BEHIND_BYTES), to)
            .map_err(|error| StoreError::io("prefault", &segment.path, error))?;
        // A window that reached the segment's end is as far ahead as it can get: nothing is
        // wanted until the writer is in the next segment.
        let reached = if to == self.segment_bytes {
            segment.base + self.segment_bytes + PREFAULT_AHEAD_BYTES - PREFAULT_STEP_BYTES
        } else {
            segment.base + to
        };
        self.prefaulted_to.fetch_max(reached, Ordering::AcqRel);
        Ok(())
    }

    /// Makes bytes below `end` visible to readers.
    pub fn publish(&self, end: u64) {
        debug_assert!(
            end >= self.written(),
            "the write position only moves forward"
        );
        self.written.store(end, Ordering::Release);
    }

    /// `length` bytes at `offset`; `None` when they were deleted or are not written yet.
    pub fn read(&self, offset: u64, length: usize) -> Result<Option<Bytes>> {
        if offset + length as u64 > self.written() {
            return Ok(None);
        }
        let Some(segment) = self.segment_for(offset) else {
            return Ok(None);
        };
        if offset - segment.base + length as u64 > self.segment_bytes {
            return Ok(None);
        }
        let mut buffer = vec![0u8; length];
        segment
            .file
            .read_at(offset - segment.base, &mut buffer)
            .map_err(|error| StoreError::io("read", &segment.path, error))?;
        Ok(Some(Bytes::from(buffer)))
    }

    /// Records at `(offset, length)` spans in ascending order, each as [`read`](Self::read)
    /// would return it. Records close together (a queue's messages between other queues' in
    /// the log) are read with one system call and shared out as slices of it: a pull of 32
    /// messages costs a few reads, not 32.
    pub fn read_many(&self, spans: &[(u64, usize)]) -> Result<Vec<Option<Bytes>>> {
        let mut records = Vec::with_capacity(spans.len());
        let mut first = 0;
        while first < spans.len() {
            let start = spans[first].0;
            let mut end = start + spans[first].1 as u64;
            let mut last = first + 1;
            while let Some(&(offset, length)) = spans.get(last) {
                let next_end = offset + length as u64;
                if offset < end
                    || offset - end > READ_GAP_BYTES_MAX
                    || next_end - start > READ_RUN_BYTES_MAX
                {
                    break;
                }
                end = next_end;
                last += 1;
            }
            let run = &spans[first..last];
            match self.read(start, (end - start) as usize)? {
                Some(block) => records.extend(run.iter().map(|&(offset, length)| {
                    let at = (offset - start) as usize;
                    Some(block.slice(at..at + length))
                })),
                // The run crosses a segment's end or reaches unwritten or deleted bytes: each
                // record on its own says which of them are there.
                None => {
                    for &(offset, length) in run {
                        records.push(self.read(offset, length)?);
                    }
                }
            }
            first = last;
        }
        Ok(records)
    }

    /// The whole record starting at `offset`.
    pub fn read_record(&self, offset: u64) -> Result<Option<Bytes>> {
        let Some(size) = self.read(offset, 4)?.and_then(|head| total_size_of(&head)) else {
            return Ok(None);
        };
        if size < 4 {
            return Ok(None);
        }
        self.read(offset, size as usize)
    }

    /// Makes every byte below `target` durable; concurrent callers share the work safely.
    pub fn sync_to(&self, target: u64) -> Result<()> {
        let from = self.flushed();
        if target <= from {
            return Ok(());
        }
        let started = std::time::Instant::now();
        for segment in self.read_segments().iter() {
            let end = segment.base + self.segment_bytes;
            if end > from && segment.base < target {
                segment
                    .file
                    .sync()
                    .map_err(|error| StoreError::io("sync", &segment.path, error))?;
            }
        }
        self.flushed.fetch_max(target, Ordering::AcqRel);
        self.syncs.record(started.elapsed());
        Ok(())
    }

    /// The durations of the syncs so far.
    pub fn sync_times(&self) -> crate::sync_times::SyncTimesSnapshot {
        self.syncs.snapshot()
    }

    /// Recovery: everything at and after `end` goes. The rest of the segment holding `end` is
    /// zeroed up to the first fully zero block (so no stale record can be found there later),
    /// later segments are deleted. Returns the number of non-zero bytes cut.
    pub fn truncate(&self, end: u64) -> Result<u64> {
        const BLOCK: u64 = 64 * 1024;
        let mut cut = 0u64;
        if let Some(segment) = self.segment_for(end) {
            let mut position = end - segment.base;
            while position < self.segment_bytes {
                let length = BLOCK.min(self.segment_bytes - position);
                let mut block = vec![0u8; length as usize];
                match segment.file.read_at(position, &mut block) {
                    Ok(()) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(error) => return Err(StoreError::io("read", &segment.path, error)),
                }
                let dirty = block.iter().filter(|byte| **byte != 0).count() as u64;
                if dirty == 0 {
                    break;
                }
                cut += dirty;
                segment
                    .file
                    .write_at(position, &vec![0u8; length as usize])
                    .map_err(|error| StoreError::io("write", &segment.path, error))?;
                position += length;
            }
            // A crash can leave a fresh segment shorter than its size; restore the full length.
            let length = segment
                .file
                .length()
                .map_err(|error| StoreError::io("stat", &segment.path, error))?;
            if length < self.segment_bytes {
                segment
                    .file
                    .set_len(self.segment_bytes)
                    .map_err(|error| StoreError::io("preallocate", &segment.path, error))?;
            }
            segment
                .file
                .sync()
                .map_err(|error| StoreError::io("sync", &segment.path, error))?;
        }
        let doomed: Vec<Arc<Segment>> = {
            let mut segments = self.write_segments();
            // A segment starting exactly at `end` stays: it is where the next record goes.
            let keep = segments.partition_point(|segment| segment.base <= end);
            segments.split_off(keep)
        };
        // Newest first, each removal made durable before the next: a crash part way leaves
        // the segments contiguous (a gap would make the log unreadable).
        for segment in doomed.into_iter().rev() {
            cut += segment.file.length().unwrap_or(0);
            self.storage
                .remove_file(&segment.path)
                .map_err(|error| StoreError::io("remove", &segment.path, error))?;
            self.storage
                .sync_dir(&self.dir)
                .map_err(|error| StoreError::io("sync", &self.dir, error))?;
        }
        self.set_recovered_end(end);
        Ok(cut)
    }

    /// Retention: deletes the oldest segment, never the one being written.
    pub fn delete_oldest_segment(&self) -> Result<Option<u64>> {
        let victim = {
            let segments = self.read_segments();
            if segments.len() < 2 {
                return Ok(None);
            }
            segments[0].clone()
        };
        self.storage
            .remove_file(&victim.path)
            .map_err(|error| StoreError::io("remove", &victim.path, error))?;
        self.write_segments()
            .retain(|segment| segment.base != victim.base);
        Ok(Some(victim.base))
    }
}

/// Reads a segment sequentially in large windows, for recovery scans.
#[derive(Debug)]
pub struct SegmentReader {
    segment: Arc<Segment>,
    /// Bytes present in the file (a crash can leave a new segment shorter than its size).
    length: u64,
    segment_bytes: u64,
    window: Bytes,
    window_start: u64,
}

/// Bytes read from disk at a time during a scan.
const SCAN_WINDOW_BYTES: u64 = 8 * 1024 * 1024;

impl SegmentReader {
    pub fn new(segment: Arc<Segment>, segment_bytes: u64) -> Result<SegmentReader> {
        let on_disk = segment
            .file
            .length()
            .map_err(|error| StoreError::io("stat", &segment.path, error))?;
        Ok(SegmentReader {
            segment,
            length: on_disk.min(segment_bytes),
            segment_bytes,
            window: Bytes::new(),
            window_start: 0,
        })
    }

    /// Segment bytes present in the file.
    pub fn len(&self) -> u64 {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// The segment's nominal size.
    pub fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    /// `length` bytes at `position` in the segment, or `None` past its end.
    pub fn slice(&mut self, position: u64, length: u64) -> Result<Option<Bytes>> {
        if position + length > self.length {
            return Ok(None);
        }
        let window_end = self.window_start + self.window.len() as u64;
        if position < self.window_start || position + length > window_end {
            let load = (self.length - position).min(SCAN_WINDOW_BYTES.max(length));
            let mut buffer = vec![0u8; load as usize];
            self.segment
                .file
                .read_at(position, &mut buffer)
                .map_err(|error| StoreError::io("read", &self.segment.path, error))?;
            self.window = Bytes::from(buffer);
            self.window_start = position;
        }
        let from = (position - self.window_start) as usize;
        Ok(Some(self.window.slice(from..from + length as usize)))
    }
}
