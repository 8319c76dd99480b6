//! One index file in RocketMQ's layout (`store/index/<yyyyMMddHHmmssSSS>`): a 40-byte header,
//! `slots` hash slots of 4 bytes (the newest entry number whose key hashes there), then `entries`
//! entries of 20 bytes (key hash, commit-log offset, seconds since the file's first message,
//! previous entry number in the same slot). Entry 0 is never used, so 0 means "none".
//!
//! The file being written keeps its slot table and unwritten entries in memory and writes
//! them with [`IndexFile::flush`]: entries, then slots, then the header, so a header on disk
//! never counts entries that are not. Files already full are read from disk.

use std::sync::Arc;

use tidemark_storage::io::StorageFile;

pub(crate) const HEADER_BYTES: u64 = 40;
const SLOT_BYTES: u64 = 4;
const ENTRY_BYTES: u64 = 20;

/// The header, as RocketMQ's `IndexHeader` lays it out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct IndexHeader {
    pub begin_timestamp: i64,
    pub end_timestamp: i64,
    pub begin_phy_offset: i64,
    pub end_phy_offset: i64,
    /// Slots in use.
    pub hash_slot_count: i32,
    /// The next entry number (entries used + 1).
    pub index_count: i32,
}

impl IndexHeader {
    fn encode(&self) -> [u8; HEADER_BYTES as usize] {
        let mut bytes = [0u8; HEADER_BYTES as usize];
        bytes[0..8].copy_from_slice(&self.begin_timestamp.to_be_bytes());
        bytes[8..16].copy_from_slice(&self.end_timestamp.to_be_bytes());
        bytes[16..24].copy_from_slice(&self.begin_phy_offset.to_be_bytes());
        bytes[24..32].copy_from_slice(&self.end_phy_offset.to_be_bytes());
        bytes[32..36].copy_from_slice(&self.hash_slot_count.to_be_bytes());
        bytes[36..40].copy_from_slice(&self.index_count.to_be_bytes());
        bytes
    }

    fn decode(bytes: &[u8; HEADER_BYTES as usize]) -> Self {
        let long = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            i64::from_be_bytes(word)
        };
        let int = |at: usize| {
            let mut word = [0u8; 4];
            word.copy_from_slice(&bytes[at..at + 4]);
            i32::from_be_bytes(word)
        };
        Self {
            begin_timestamp: long(0),
            end_timestamp: long(8),
            begin_phy_offset: long(16),
            end_phy_offset: long(24),
            hash_slot_count: int(32),
            index_count: int(36).max(1),
        }
    }
}

/// Java's `String.hashCode`, made non-negative as RocketMQ's `indexKeyHashMethod` does.
pub(crate) fn key_hash(key: &str) -> i32 {
    let hash = key.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    if hash == i32::MIN {
        0
    } else {
        hash.abs()
    }
}

/// The writable part of the newest file.
#[derive(Debug)]
struct Writing {
    slots: Vec<i32>,
    dirty_slots: std::collections::BTreeSet<u32>,
    /// Encoded entries from `written_count` on.
    pending: Vec<u8>,
    /// Entries (by number) already in the file.
    written_count: i32,
    /// The header as last written.
    written_header: IndexHeader,
}

#[derive(Debug)]
pub(crate) struct IndexFile {
    pub name: String,
    file: Arc<dyn StorageFile>,
    pub header: IndexHeader,
    slots: u32,
    entries: u32,
    writing: Option<Writing>,
}

impl IndexFile {
    /// The file's size for `slots` and `entries`.
    pub fn size(slots: u32, entries: u32) -> u64 {
        HEADER_BYTES + u64::from(slots) * SLOT_BYTES + u64::from(entries) * ENTRY_BYTES
    }

    /// A new, empty file to write.
    pub fn create(
        name: String,
        file: Arc<dyn StorageFile>,
        slots: u32,
        entries: u32,
    ) -> std::io::Result<Self> {
        file.set_len(Self::size(slots, entries))?;
        let header = IndexHeader {
            index_count: 1,
            ..IndexHeader::default()
        };
        file.write_at(0, &header.encode())?;
        Ok(Self {
            name,
            file,
            header,
            slots,
            entries,
            writing: Some(Writing {
                slots: vec![0; slots as usize],
                dirty_slots: Default::default(),
                pending: Vec::new(),
                written_count: 1,
                written_header: header,
            }),
        })
    }

    /// An existing file; `writable` loads its slot table to go on writing it. Slots a crash
    /// left pointing past the header's count are walked back along their chains.
    pub fn open(
        name: String,
        file: Arc<dyn StorageFile>,
        slots: u32,
        entries: u32,
        writable: bool,
    ) -> std::io::Result<Self> {
        let mut bytes = [0u8; HEADER_BYTES as usize];
        file.read_at(0, &mut bytes)?;
        let header = IndexHeader::decode(&bytes);
        let mut opened = Self {
            name,
            file,
            header,
            slots,
            entries,
            writing: None,
        };
        if writable && !opened.is_full() {
            let mut table = vec![0u8; (u64::from(slots) * SLOT_BYTES) as usize];
            opened.file.read_at(HEADER_BYTES, &mut table)?;
            let mut slot_values = Vec::with_capacity(slots as usize);
            for chunk in table.chunks_exact(4) {
                let mut value = i32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                let mut steps = 0;
                while value >= header.index_count && steps < 64 {
                    value = opened.read_entry(value)?.3;
                    steps += 1;
                }
                if value >= header.index_count || value < 0 {
                    value = 0;
                }
                slot_values.push(value);
            }
            opened.writing = Some(Writing {
                slots: slot_values,
                dirty_slots: Default::default(),
                pending: Vec::new(),
                written_count: header.index_count,
                written_header: header,
            });
        }
        Ok(opened)
    }

    pub fn is_full(&self) -> bool {
        self.header.index_count >= self.entries as i32
    }

    /// Adds one key for the record at `phy_offset`; `false` when the file is full.
    pub fn put(&mut self, key: &str, phy_offset: i64, store_timestamp: i64) -> bool {
        if self.is_full() {
            return false;
        }
        let Some(writing) = self.writing.as_mut() else {
            return false;
        };
        let hash = key_hash(key);
        let slot = (hash as u32) % self.slots;
        let previous = writing.slots[slot as usize];
        let time_diff = if self.header.begin_timestamp <= 0 {
            0
        } else {
            ((store_timestamp - self.header.begin_timestamp) / 1000).clamp(0, i64::from(i32::MAX))
                as i32
        };
        writing.pending.extend_from_slice(&hash.to_be_bytes());
        writing.pending.extend_from_slice(&phy_offset.to_be_bytes());
        writing.pending.extend_from_slice(&time_diff.to_be_bytes());
        writing.pending.extend_from_slice(&previous.to_be_bytes());
        let number = self.header.index_count;
        writing.slots[slot as usize] = number;
        writing.dirty_slots.insert(slot);
        if self.header.index_count <= 1 {
            self.header.begin_phy_offset = phy_offset;
            self.header.begin_timestamp = store_timestamp;
        }
        if previous == 0 {
            self.header.hash_slot_count += 1;
        }
        self.header.index_count += 1;
        self.header.end_phy_offset = phy_offset;
        self.header.end_timestamp = store_timestamp;
        true
    }

    /// Writes what is only in memory: entries, slots, then the header; `sync` makes it
    /// durable. A full file then forgets its slot table.
    pub fn flush(&mut self, sync: bool) -> std::io::Result<()> {
        let header = self.header;
        let entries_at = HEADER_BYTES + u64::from(self.slots) * SLOT_BYTES;
        let Some(writing) = self.writing.as_mut() else {
            return Ok(());
        };
        if writing.written_header == header {
            return Ok(());
        }
        if !writing.pending.is_empty() {
            let at = entries_at + writing.written_count.max(0) as u64 * ENTRY_BYTES;
            self.file.write_at(at, &writing.pending)?;
            writing.pending.clear();
            writing.written_count = header.index_count;
        }
        if sync {
            self.file.sync()?;
        }
        // Runs of dirty slots are written together.
        let dirty: Vec<u32> = std::mem::take(&mut writing.dirty_slots)
            .into_iter()
            .collect();
        let mut run_start = 0;
        while run_start < dirty.len() {
            let mut run_end = run_start + 1;
            while run_end < dirty.len() && dirty[run_end] == dirty[run_end - 1] + 1 {
                run_end += 1;
            }
            let mut bytes = Vec::with_capacity((run_end - run_start) * 4);
            for slot in &dirty[run_start..run_end] {
                bytes.extend_from_slice(&writing.slots[*slot as usize].to_be_bytes());
            }
            let at = HEADER_BYTES + u64::from(dirty[run_start]) * SLOT_BYTES;
            self.file.write_at(at, &bytes)?;
            run_start = run_end;
        }
        self.file.write_at(0, &header.encode())?;
        if sync {
            self.file.sync()?;
        }
        writing.written_header = header;
        if self.is_full() {
            self.writing = None;
        }
        Ok(())
    }

    fn entry_position(&self, number: i32) -> u64 {
        HEADER_BYTES + u64::from(self.slots) * SLOT_BYTES + number.max(0) as u64 * ENTRY_BYTES
    }

    /// (key hash, commit-log offset, time diff, previous) of entry `number`.
    fn read_entry(&self, number: i32) -> std::io::Result<(i32, i64, i32, i32)> {
        let mut bytes = [0u8; ENTRY_BYTES as usize];
        match &self.writing {
            Some(writing) if number >= writing.written_count => {
                let at = ((number - writing.written_count) as usize) * ENTRY_BYTES as usize;
                match writing.pending.get(at..at + ENTRY_BYTES as usize) {
                    Some(entry) => bytes.copy_from_slice(entry),
                    None => return Ok((0, 0, -1, 0)),
                }
            }
            _ => self.file.read_at(self.entry_position(number), &mut bytes)?,
        }
        let int = |at: usize| {
            i32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&bytes[4..12]);
        Ok((int(0), i64::from_be_bytes(offset), int(12), int(16)))
    }

    fn slot_value(&self, slot: u32) -> std::io::Result<i32> {
        if let Some(writing) = &self.writing {
            return Ok(writing.slots[slot as usize]);
        }
        let mut bytes = [0u8; 4];
        self.file
            .read_at(HEADER_BYTES + u64::from(slot) * SLOT_BYTES, &mut bytes)?;
        Ok(i32::from_be_bytes(bytes))
    }

    /// Whether the file's time span meets `[begin, end]` (RocketMQ's `isTimeMatched`).
    pub fn meets(&self, begin: i64, end: i64) -> bool {
        let (first, last) = (self.header.begin_timestamp, self.header.end_timestamp);
        (begin < first && end > last)
            || (first..=last).contains(&begin)
            || (first..=last).contains(&end)
    }

    /// Commit-log offsets of entries for `key` stored within `[begin, end]` (second
    /// precision, as the file keeps time), newest first, until `found` holds `max`.
    pub fn select(
        &self,
        key: &str,
        max: usize,
        begin: i64,
        end: i64,
        found: &mut Vec<i64>,
    ) -> std::io::Result<()> {
        let count = self.header.index_count;
        if count <= 1 {
            return Ok(());
        }
        let hash = key_hash(key);
        let mut next = self.slot_value((hash as u32) % self.slots)?;
        let mut steps = 0u32;
        while next > 0 && next < count && found.len() < max && steps <= self.entries {
            let (hash_read, offset, time_diff, previous) = self.read_entry(next)?;
            if time_diff < 0 {
                break;
            }
            let stored_at = self.header.begin_timestamp + i64::from(time_diff) * 1000;
            if hash_read == hash && stored_at >= begin && stored_at <= end {
                found.push(offset);
            }
            if previous <= 0 || previous >= next || stored_at < begin {
                break;
            }
            next = previous;
            steps += 1;
        }
        Ok(())
    }
}
