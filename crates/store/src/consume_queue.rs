//! Consume queues: per (topic, queue id), 20-byte entries `commit-log offset:i64 | size:i32 |
//! tags code:i64`, files of `entries_per_file` entries named by their first entry's *byte*
//! offset (RocketMQ's `ConsumeQueue`). The logical offset of an entry is its index.
//!
//! A *hole* (`offset -1, size 0`) stands for a record recovery found corrupt: the slot keeps
//! later offsets where producers were told they are, and reads skip it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use tracing::warn;

use crate::commit_log::{parse_segment_file_name, segment_file_name};
use crate::error::{Result, StoreError};
use crate::io::{Storage, StorageFile};

/// Bytes of one consume-queue entry (`CQ_STORE_UNIT_SIZE`).
pub const ENTRY_BYTES: u64 = 20;

/// One consume-queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueEntry {
    pub commit_log_offset: i64,
    pub size: i32,
    pub tags_code: i64,
}

impl QueueEntry {
    /// The placeholder for a record that recovery could not trust.
    pub const HOLE: QueueEntry = QueueEntry {
        commit_log_offset: -1,
        size: 0,
        tags_code: 0,
    };
    /// An unwritten slot.
    pub const EMPTY: QueueEntry = QueueEntry {
        commit_log_offset: 0,
        size: 0,
        tags_code: 0,
    };

    pub fn is_hole(&self) -> bool {
        *self == Self::HOLE
    }

    fn is_valid(&self) -> bool {
        self.commit_log_offset >= 0 && self.size > 0
    }

    fn encode(&self) -> [u8; ENTRY_BYTES as usize] {
        let mut out = [0u8; ENTRY_BYTES as usize];
        out[0..8].copy_from_slice(&self.commit_log_offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.size.to_be_bytes());
        out[12..20].copy_from_slice(&self.tags_code.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> QueueEntry {
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&bytes[0..8]);
        let mut tags = [0u8; 8];
        tags.copy_from_slice(&bytes[12..20]);
        QueueEntry {
            commit_log_offset: i64::from_be_bytes(offset),
            size: i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
            tags_code: i64::from_be_bytes(tags),
        }
    }
}

/// Entries appended since the last write to the files: `entries[0]` has offset `start`.
/// Consume queues are derived data (recovery rebuilds them from the commit log), so appends
/// only touch memory and the files are written in batches, which keeps one syscall per append.
#[derive(Debug, Default)]
struct Tail {
    start: i64,
    entries: Vec<QueueEntry>,
}

impl Tail {
    fn end(&self) -> i64 {
        self.start + self.entries.len() as i64
    }
}

/// Tail entries held in memory before they are written out.
const TAIL_ENTRIES_MAX: usize = 1024;

/// One queue's index into the commit log.
#[derive(Debug)]
pub struct ConsumeQueue {
    pub topic: String,
    pub queue_id: i32,
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    entries_per_file: u64,
    files: RwLock<BTreeMap<u64, Arc<dyn StorageFile>>>,
    /// First readable offset.
    min_offset: AtomicI64,
    /// Readers see entries below it.
    max_offset: AtomicI64,
    /// Entries appended but not yet written to their files.
    tail: Mutex<Tail>,
    /// Files written since the last sync.
    dirty: Mutex<BTreeSet<u64>>,
    /// Set by [`destroy`](Self::destroy): the files are gone and the store no longer lists
    /// this queue; whoever still holds it must look the queue up again before writing.
    destroyed: AtomicBool,
}

impl ConsumeQueue {
    /// Opens (or creates) the queue directory and finds its end by scanning its last file.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        topic: String,
        queue_id: i32,
        entries_per_file: u64,
    ) -> Result<ConsumeQueue> {
        storage
            .create_dir_all(&dir)
            .map_err(|error| StoreError::io("create", &dir, error))?;
        let mut found = Vec::new();
        for entry in storage
            .list(&dir)
            .map_err(|error| StoreError::io("list", &dir, error))?
        {
            if let Some(byte_offset) =
                parse_segment_file_name(&entry.name).filter(|_| !entry.is_dir)
            {
                let path = dir.join(&entry.name);
                let file = storage
                    .open(&path, false)
                    .map_err(|error| StoreError::io("open", &path, error))?;
                found.push((byte_offset, path, file));
            }
        }
        found.sort_by_key(|(byte_offset, _, _)| *byte_offset);
        // An existing queue's file size wins over the configuration (a RocketMQ store written
        // with other settings is read as it is).
        let mut entries_per_file = entries_per_file;
        if let Some((_, path, file)) = found.first() {
            let length = file
                .length()
                .map_err(|error| StoreError::io("stat", path, error))?;
            if length > 0 && length % ENTRY_BYTES == 0 && length / ENTRY_BYTES != entries_per_file {
                warn!(path = %path.display(), configured = entries_per_file, on_disk = length / ENTRY_BYTES, "consume-queue file size differs from the configuration; using the size on disk");
                entries_per_file = length / ENTRY_BYTES;
            }
        }
        let file_bytes = entries_per_file * ENTRY_BYTES;
        let mut files = BTreeMap::new();
        for (byte_offset, path, file) in found {
            if byte_offset % file_bytes != 0 {
                return Err(StoreError::Unrecoverable {
                    reason: format!(
                        "consume-queue file {} does not start on a {file_bytes}-byte boundary",
                        path.display()
                    ),
                });
            }
            files.insert(byte_offset / file_bytes, file);
        }
        let queue = ConsumeQueue {
            topic,
            queue_id,
            dir,
            storage,
            entries_per_file,
            files: RwLock::new(files),
            min_offset: AtomicI64::new(0),
            max_offset: AtomicI64::new(0),
            tail: Mutex::new(Tail::default()),
            dirty: Mutex::new(BTreeSet::new()),
            destroyed: AtomicBool::new(false),
        };
        queue.find_bounds()?;
        Ok(queue)
    }

    fn file_path(&self, index: u64) -> PathBuf {
        self.dir.join(segment_file_name(
            index * self.entries_per_file * ENTRY_BYTES,
        ))
    }

    /// min = start of the first file; max = after the last valid entry or hole of the last file.
    fn find_bounds(&self) -> Result<()> {
        let files = self
            .files
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some((&first, _)) = files.iter().next() else {
            return Ok(());
        };
        self.min_offset
            .store((first * self.entries_per_file) as i64, Ordering::Release);
        let mut max = (first * self.entries_per_file) as i64;
        // Walk files from the newest back until one holds an entry.
        for (&index, file) in files.iter().rev() {
            let entries = self.read_file_entries(index, file)?;
            if let Some(last) = entries
                .iter()
                .rposition(|entry| entry.is_valid() || entry.is_hole())
            {
                let valid_prefix = entries
                    .iter()
                    .take_while(|entry| entry.is_valid() || entry.is_hole())
                    .count();
                max = (index * self.entries_per_file) as i64 + valid_prefix.min(last + 1) as i64;
                break;
            }
        }
        self.max_offset.store(max, Ordering::Release);
        *self.tail() = Tail {
            start: max,
            entries: Vec::new(),
        };
        Ok(())
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.tail.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn read_file_entries(
        &self,
        index: u64,
        file: &Arc<dyn StorageFile>,
    ) -> Result<Vec<QueueEntry>> {
        let path = self.file_path(index);
        let length = file
            .length()
            .map_err(|error| StoreError::io("stat", &path, error))?;
        let usable = length.min(self.entries_per_file * ENTRY_BYTES) / ENTRY_BYTES * ENTRY_BYTES;
        let mut bytes = vec![0u8; usable as usize];
        file.read_at(0, &mut bytes)
            .map_err(|error| StoreError::io("read", &path, error))?;
        Ok(bytes
            .chunks_exact(ENTRY_BYTES as usize)
            .map(QueueEntry::decode)
            .collect())
    }

    pub fn min_offset(&self) -> i64 {
        self.min_offset.load(Ordering::Acquire)
    }

    pub fn max_offset(&self) -> i64 {
        self.max_offset.load(Ordering::Acquire)
    }

    fn file(&self, index: u64, create: bool) -> Result<Option<Arc<dyn StorageFile>>> {
        if let Some(file) = self
            .files
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&index)
        {
            return Ok(Some(file.clone()));
        }
        if !create {
            return Ok(None);
        }
        let path = self.file_path(index);
        let file = self
            .storage
            .open(&path, true)
            .map_err(|error| StoreError::io("create", &path, error))?;
        file.set_len(self.entries_per_file * ENTRY_BYTES)
            .map_err(|error| StoreError::io("preallocate", &path, error))?;
        self.storage
            .sync_dir(&self.dir)
            .map_err(|error| StoreError::io("sync", &self.dir, error))?;
        self.files
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index, file.clone());
        Ok(Some(file))
    }

    fn write_entry(&self, offset: i64, entry: QueueEntry) -> Result<()> {
        let offset = u64::try_from(offset).map_err(|_| StoreError::Unrecoverable {
            reason: format!("negative queue offset {offset}"),
        })?;
        let index = offset / self.entries_per_file;
        let file = self.file(index, true)?.ok_or(StoreError::Closed)?;
        let position = (offset % self.entries_per_file) * ENTRY_BYTES;
        file.write_at(position, &entry.encode())
            .map_err(|error| StoreError::io("write", self.file_path(index), error))?;
        self.dirty
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index);
        Ok(())
    }

    /// Records the entry for `offset` without publishing it; slots between the current end and
    /// `offset` become holes. Overwriting an existing slot (recovery re-dispatch) is allowed.
    pub fn put(&self, offset: i64, entry: QueueEntry) -> Result<()> {
        let mut tail = self.tail();
        if offset < tail.start {
            drop(tail);
            return self.write_entry(offset, entry);
        }
        if offset < tail.end() {
            let index = (offset - tail.start) as usize;
            tail.entries[index] = entry;
            return Ok(());
        }
        for _ in tail.end()..offset {
            tail.entries.push(QueueEntry::HOLE);
        }
        tail.entries.push(entry);
        if tail.entries.len() >= TAIL_ENTRIES_MAX {
            self.write_tail(&mut tail)?;
        }
        Ok(())
    }

    /// Writes the tail to the files, one write per file touched.
    fn write_tail(&self, tail: &mut Tail) -> Result<()> {
        let mut offset = tail.start as u64;
        let mut remaining: &[QueueEntry] = &tail.entries;
        while !remaining.is_empty() {
            let index = offset / self.entries_per_file;
            let in_file = ((self.entries_per_file - offset % self.entries_per_file) as usize)
                .min(remaining.len());
            let (chunk, rest) = remaining.split_at(in_file);
            let mut bytes = Vec::with_capacity(chunk.len() * ENTRY_BYTES as usize);
            for entry in chunk {
                bytes.extend_from_slice(&entry.encode());
            }
            let file = self.file(index, true)?.ok_or(StoreError::Closed)?;
            file.write_at((offset % self.entries_per_file) * ENTRY_BYTES, &bytes)
                .map_err(|error| StoreError::io("write", self.file_path(index), error))?;
            self.dirty
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(index);
            offset += in_file as u64;
            remaining = rest;
        }
        tail.start = tail.end();
        tail.entries.clear();
        Ok(())
    }

    /// One past the highest entry recorded, published or not.
    pub fn write_end(&self) -> i64 {
        self.tail().end()
    }

    /// Forgets recorded but unpublished entries (an append that failed half way): the next
    /// put reuses their slots.
    pub fn abandon_unpublished(&self) {
        let max = self.max_offset();
        let mut tail = self.tail();
        if max >= tail.start {
            let keep = (max - tail.start) as usize;
            tail.entries.truncate(keep);
        } else {
            *tail = Tail {
                start: max,
                entries: Vec::new(),
            };
        }
    }

    /// Makes entries below `end` visible.
    pub fn publish(&self, end: i64) {
        self.max_offset.fetch_max(end, Ordering::AcqRel);
    }

    /// Up to `count` published entries from `from`; `None` when the file holding them is gone.
    pub fn read(&self, from: i64, count: usize) -> Result<Option<Vec<QueueEntry>>> {
        let end = self.max_offset().min(from.saturating_add(count as i64));
        if from < 0 || from >= end {
            return Ok(Some(Vec::new()));
        }
        // Entries move from the tail to the files, never back: the tail start read under the
        // lock bounds what the files already hold.
        let (file_end, from_tail) = {
            let tail = self.tail();
            let start = tail.start.max(from);
            let part = if end > start {
                tail.entries[(start - tail.start) as usize..(end - tail.start) as usize].to_vec()
            } else {
                Vec::new()
            };
            (tail.start.min(end), part)
        };
        let mut out = Vec::with_capacity((end - from) as usize);
        let mut offset = from as u64;
        while (offset as i64) < file_end {
            let index = offset / self.entries_per_file;
            let Some(file) = self.file(index, false)? else {
                return Ok(None);
            };
            let in_file = (self.entries_per_file - offset % self.entries_per_file)
                .min(file_end as u64 - offset);
            let mut bytes = vec![0u8; (in_file * ENTRY_BYTES) as usize];
            self.read_padded(
                index,
                &file,
                (offset % self.entries_per_file) * ENTRY_BYTES,
                &mut bytes,
            )?;
            out.extend(
                bytes
                    .chunks_exact(ENTRY_BYTES as usize)
                    .map(QueueEntry::decode),
            );
            offset += in_file;
        }
        out.extend(from_tail);
        Ok(Some(out))
    }

    /// Reads slots; bytes past the end of a file (a crash can lose its preallocation) read as
    /// empty slots.
    fn read_padded(
        &self,
        index: u64,
        file: &Arc<dyn StorageFile>,
        position: u64,
        buffer: &mut [u8],
    ) -> Result<()> {
        match file.read_at(position, buffer) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                let path = self.file_path(index);
                let length = file
                    .length()
                    .map_err(|error| StoreError::io("stat", &path, error))?;
                buffer.fill(0);
                let available = length.saturating_sub(position).min(buffer.len() as u64) as usize;
                if available == 0 {
                    return Ok(());
                }
                file.read_at(position, &mut buffer[..available])
                    .map_err(|error| StoreError::io("read", &path, error))
            }
            Err(error) => Err(StoreError::io("read", self.file_path(index), error)),
        }
    }

    /// The first logical offset of the file after the one holding `offset` (Java's
    /// `rollNextFile`), where a reader resumes when an entry cannot be read.
    pub fn next_file_offset(&self, offset: i64) -> i64 {
        let per_file = self.entries_per_file as i64;
        (offset.max(0) / per_file + 1) * per_file
    }

    /// Recovery: removes every entry pointing at or past `commit_log_end`, from the end back,
    /// together with holes and empty slots among them (a crash can keep a later file's entries
    /// and lose an earlier one's). Returns how many slots were cleared.
    ///
    /// `holds_record(slot, entry)` says whether the log has this queue's record for `slot`
    /// where the entry points: a torn write over an entry can leave one pointing anywhere
    /// below the end, and only the record itself can tell.
    pub fn truncate_past(
        &self,
        commit_log_end: u64,
        holds_record: &dyn Fn(i64, &QueueEntry) -> bool,
    ) -> Result<u64> {
        let old_end = self.hide_past(commit_log_end, holds_record)?;
        let max = self.max_offset();
        for offset in (max..old_end).rev() {
            self.write_entry(offset, QueueEntry::EMPTY)?;
        }
        Ok((old_end - max) as u64)
    }

    /// A runtime truncation's first half: entries pointing at or past `commit_log_end` stop
    /// being visible (in memory; the files keep them until [`clear_hidden`](Self::clear_hidden),
    /// so a crash before the log is cut finds them consistent with it). The caller holds the
    /// store's append lock. Returns the end before.
    pub fn hide_past(
        &self,
        commit_log_end: u64,
        holds_record: &dyn Fn(i64, &QueueEntry) -> bool,
    ) -> Result<i64> {
        {
            let mut tail = self.tail();
            self.write_tail(&mut tail)?;
        }
        let old_end = self.max_offset();
        let min = self.min_offset();
        let mut max = old_end;
        while max > min {
            let Some(entries) = self.read(max - 1, 1)? else {
                break;
            };
            let Some(entry) = entries.first() else { break };
            if entry.is_valid()
                && entry.commit_log_offset as u64 + entry.size as u64 <= commit_log_end
                && holds_record(max - 1, entry)
            {
                break;
            }
            max -= 1;
        }
        self.max_offset.store(max, Ordering::Release);
        *self.tail() = Tail {
            start: max,
            entries: Vec::new(),
        };
        Ok(old_end)
    }

    /// The second half, once the log is cut: removes the hidden slots up to `old_end` from the
    /// files so that a reopen sees the new end whatever a crash leaves: the slot at the new end
    /// is emptied and synced first (the bounds found at open stop at the first empty slot of
    /// the newest file), later files go newest first, then the rest of the slots are emptied.
    pub fn clear_hidden(&self, old_end: i64) -> Result<()> {
        let max = self.max_offset();
        if old_end <= max {
            return Ok(());
        }
        let Ok(max_slot) = u64::try_from(max) else {
            return Ok(());
        };
        let seal_index = max_slot / self.entries_per_file;
        if self.file(seal_index, false)?.is_some() {
            self.write_entry(max, QueueEntry::EMPTY)?;
            self.sync()?;
        }
        let later: Vec<u64> = self
            .files
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .filter(|index| *index > seal_index)
            .collect();
        for index in later.into_iter().rev() {
            self.files
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&index);
            self.dirty
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&index);
            let path = self.file_path(index);
            match self.storage.remove_file(&path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(StoreError::io("remove", &path, error)),
            }
            self.storage
                .sync_dir(&self.dir)
                .map_err(|error| StoreError::io("sync", &self.dir, error))?;
        }
        let seal_file_end = ((seal_index + 1) * self.entries_per_file) as i64;
        for offset in (max + 1)..old_end.min(seal_file_end) {
            self.write_entry(offset, QueueEntry::EMPTY)?;
        }
        self.sync()
    }

    /// Writes the tail out and syncs every file written since the last call.
    pub fn sync(&self) -> Result<()> {
        {
            let mut tail = self.tail();
            self.write_tail(&mut tail)?;
        }
        let dirty = std::mem::take(&mut *self.dirty.lock().unwrap_or_else(PoisonError::into_inner));
        for index in dirty {
            if let Some(file) = self.file(index, false)? {
                file.sync()
                    .map_err(|error| StoreError::io("sync", self.file_path(index), error))?;
            }
        }
        Ok(())
    }

    /// Where the queue's last record ends in the commit log (RocketMQ's `getLastOffset`),
    /// looking below the minimum offset too (retention moves it past expired records);
    /// `None` for a queue holding no record.
    pub fn last_record_end(&self) -> Result<Option<u64>> {
        let mut offset = self.max_offset();
        let per_file = self.entries_per_file as i64;
        while offset > 0 {
            // Never across a file boundary: the files before one retention removed are gone.
            let from = (offset - 64).max((offset - 1) / per_file * per_file);
            let Some(entries) = self.read(from, (offset - from) as usize)? else {
                return Ok(None);
            };
            if let Some(entry) = entries.iter().rev().find(|entry| entry.is_valid()) {
                return Ok(Some(entry.commit_log_offset as u64 + entry.size as u64));
            }
            offset = from;
        }
        Ok(None)
    }

    /// The commit-log offset of the first readable record, if any.
    pub fn first_record_offset(&self) -> Result<Option<u64>> {
        let (mut offset, max) = (self.min_offset(), self.max_offset());
        while offset < max {
            let Some(entries) = self.read(offset, 64)? else {
                return Ok(None);
            };
            if let Some(entry) = entries.iter().find(|entry| entry.is_valid()) {
                return Ok(Some(entry.commit_log_offset as u64));
            }
            offset += entries.len().max(1) as i64;
        }
        Ok(None)
    }

    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// Removes the queue's files and directory (RocketMQ's `ConsumeQueue.destroy`). Callers
    /// first take it out of the store's table, under the append lock, so nothing appends to it
    /// afterwards; a reader still holding it keeps reading the unlinked files.
    pub fn destroy(&self) -> Result<()> {
        let mut tail = self.tail();
        self.destroyed.store(true, Ordering::Release);
        let end = tail.end();
        *tail = Tail {
            start: end,
            entries: Vec::new(),
        };
        self.dirty
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let files =
            std::mem::take(&mut *self.files.write().unwrap_or_else(PoisonError::into_inner));
        for index in files.keys() {
            let path = self.file_path(*index);
            match self.storage.remove_file(&path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(StoreError::io("remove", &path, error)),
            }
        }
        match self.storage.remove_dir(&self.dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(StoreError::io("remove", &self.dir, error)),
        }
        if let Some(parent) = self.dir.parent() {
            // The topic directory goes with its last queue; one still holding queues stays.
            if self.storage.remove_dir(parent).is_ok() {
                if let Some(root) = parent.parent() {
                    self.storage
                        .sync_dir(root)
                        .map_err(|error| StoreError::io("sync", root, error))?;
                }
            } else {
                self.storage
                    .sync_dir(parent)
                    .map_err(|error| StoreError::io("sync", parent, error))?;
            }
        }
        Ok(())
    }

    /// Retention: drops files whose entries all point below `commit_log_min` (never the last
    /// file) and moves the minimum offset to the first entry still backed by the commit log.
    pub fn correct_min_offset(&self, commit_log_min: u64) -> Result<usize> {
        {
            let mut tail = self.tail();
            self.write_tail(&mut tail)?;
        }
        let mut deleted = 0;
        loop {
            let files: Vec<(u64, Arc<dyn StorageFile>)> = self
                .files
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(index, file)| (*index, file.clone()))
                .collect();
            if files.len() < 2 {
                break;
            }
            let (index, file) = &files[0];
            let entries = self.read_file_entries(*index, file)?;
            let last = entries.iter().rev().find(|entry| entry.is_valid());
            if last.is_some_and(|entry| {
                (entry.commit_log_offset as u64 + entry.size as u64) <= commit_log_min
            }) {
                let path = self.file_path(*index);
                match self.storage.remove_file(&path) {
                    Ok(()) => {}
                    // Destroyed meanwhile: nothing left to retain.
                    Err(_) if self.is_destroyed() => return Ok(deleted),
                    Err(error) => return Err(StoreError::io("remove", &path, error)),
                }
                self.files
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(index);
                deleted += 1;
            } else {
                break;
            }
        }
        let first = self
            .files
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .next()
            .map(|(index, file)| (*index, file.clone()));
        if let Some((index, file)) = first {
            let entries = self.read_file_entries(index, &file)?;
            let skip = entries
                .iter()
                .take_while(|entry| {
                    entry.is_valid() && (entry.commit_log_offset as u64) < commit_log_min
                })
                .count();
            let min = (index * self.entries_per_file) as i64 + skip as i64;
            self.min_offset
                .store(min.min(self.max_offset()), Ordering::Release);
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimStorage;

    fn entry(offset: i64) -> QueueEntry {
        QueueEntry {
            commit_log_offset: offset * 100,
            size: 100,
            tags_code: offset,
        }
    }

    #[test]
    fn entries_span_files_and_reopen_finds_the_end() {
        let storage = Arc::new(SimStorage::new());
        let dir = PathBuf::from("/cq/T/0");
        let queue =
            ConsumeQueue::open(storage.clone(), dir.clone(), "T".into(), 0, 4).expect("open");
        for offset in 0..10 {
            queue.put(offset, entry(offset)).expect("put");
            queue.publish(offset + 1);
        }
        assert_eq!(
            queue.read(2, 5).expect("read").expect("present"),
            (2..7).map(entry).collect::<Vec<_>>()
        );
        // Appends live in memory until the queue is synced.
        queue.sync().expect("sync");
        assert_eq!(
            queue.read(2, 5).expect("read").expect("present"),
            (2..7).map(entry).collect::<Vec<_>>()
        );
        let files: Vec<_> = storage
            .files()
            .into_iter()
            .filter(|path| path.starts_with(&dir))
            .collect();
        assert_eq!(files.len(), 3, "4 entries per file: {files:?}");
        assert!(
            files.contains(&dir.join("00000000000000000080")),
            "named by byte offset"
        );
        let reopened = ConsumeQueue::open(storage, dir, "T".into(), 0, 4).expect("reopen");
        assert_eq!((reopened.min_offset(), reopened.max_offset()), (0, 10));
    }

    #[test]
    fn gaps_become_holes_and_truncation_removes_entries_past_the_log() {
        let storage = Arc::new(SimStorage::new());
        let queue =
            ConsumeQueue::open(storage, PathBuf::from("/cq/T/1"), "T".into(), 1, 4).expect("open");
        queue.put(0, entry(0)).expect("put");
        queue.put(3, entry(3)).expect("put");
        queue.publish(4);
        let entries = queue.read(0, 4).expect("read").expect("present");
        assert!(entries[1].is_hole() && entries[2].is_hole());
        assert_eq!(
            queue.truncate_past(250, &|_, _| true).expect("truncate"),
            3,
            "entry 3 ends past 250, holes before it go too"
        );
        assert_eq!(queue.max_offset(), 1);
    }
}
