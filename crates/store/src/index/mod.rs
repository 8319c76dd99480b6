//! The message index (RocketMQ's `IndexService`): message keys and unique keys → commit-log
//! offsets, in index files of RocketMQ's layout under `<root>/index/`, so QUERY_MESSAGE finds
//! messages by key and Apache's own store can be opened.
//!
//! The index follows the commit log: the store's index thread reads records from where the
//! index ends and adds `topic#UNIQ_KEY` and `topic#key` for each key in `KEYS` (rolled-back
//! transactional records are left out, as RocketMQ does). So appends, a slave's replicated
//! bytes and a recovered log are indexed the same way, and the append path pays nothing; a
//! lookup sees a message a few milliseconds after it is stored. After a crash the index goes
//! on from the end its newest file's header records (written after its entries and slots).

mod file;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tidemark_protocol::message::{property, MessageRecord};
use tidemark_storage::io::Storage;
use tracing::warn;

#[cfg(test)]
use file::key_hash;
use file::IndexFile;

/// `MessageSysFlag.TRANSACTION_ROLLBACK_TYPE`.
const ROLLBACK_TYPE: i32 = 0x3 << 2;

/// Index settings (RocketMQ's `messageIndexEnable`, `maxHashSlotNum`, `maxIndexNum`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexConfig {
    pub enabled: bool,
    pub hash_slots: u32,
    pub entries: u32,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            hash_slots: 5_000_000,
            entries: 20_000_000,
        }
    }
}

/// The index files, oldest first; the last one is written. Owns its lock.
#[derive(Debug)]
pub(crate) struct MessageIndex {
    config: IndexConfig,
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    files: Mutex<Vec<IndexFile>>,
}

impl MessageIndex {
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        config: IndexConfig,
    ) -> std::io::Result<Self> {
        if !config.enabled {
            return Ok(Self {
                config,
                dir,
                storage,
                files: Mutex::new(Vec::new()),
            });
        }
        let mut names: Vec<String> = storage
            .list(&dir)?
            .into_iter()
            .filter(|entry| !entry.is_dir && entry.name.bytes().all(|byte| byte.is_ascii_digit()))
            .map(|entry| entry.name)
            .collect();
        names.sort();
        let mut files = Vec::new();
        let expected = IndexFile::size(config.hash_slots, config.entries);
        let last = names.len().saturating_sub(1);
        for (at, name) in names.into_iter().enumerate() {
            let path = dir.join(&name);
            let file = storage.open(&path, false)?;
            if file.length()? != expected {
                warn!(file = %path.display(), "index file of another size (maxHashSlotNum/maxIndexNum changed?); left out");
                continue;
            }
            files.push(IndexFile::open(
                name,
                file,
                config.hash_slots,
                config.entries,
                at == last,
            )?);
        }
        Ok(Self {
            config,
            dir,
            storage,
            files: Mutex::new(files),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<IndexFile>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The commit-log offset of the last record indexed (−1: none). The newest file may hold
    /// nothing yet — a crash right after a roll leaves it so — and then the answer is in the
    /// one before it: answering "none" would index every retained record a second time.
    pub fn end_phy_offset(&self) -> i64 {
        self.lock()
            .iter()
            .rev()
            .find(|file| file.header.index_count > 1)
            .map_or(-1, |file| file.header.end_phy_offset)
    }

    /// (last store timestamp, last commit-log offset) indexed, for QUERY_MESSAGE's answer.
    pub fn last_update(&self) -> (i64, i64) {
        self.lock().last().map_or((0, 0), |file| {
            (file.header.end_timestamp, file.header.end_phy_offset)
        })
    }

    /// Indexes one record stored at `phy_offset`; `now_ms` names a new file.
    pub fn add(&self, record: &MessageRecord, phy_offset: i64, now_ms: i64) -> std::io::Result<()> {
        if record.sys_flag & ROLLBACK_TYPE == ROLLBACK_TYPE {
            return Ok(());
        }
        let mut keys = Vec::new();
        if let Some(unique) = record
            .properties
            .get(property::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            .filter(|key| !key.is_empty())
        {
            keys.push(format!("{}#{unique}", record.topic));
        }
        if let Some(list) = record.properties.get(property::KEYS) {
            for key in list.split(' ').filter(|key| !key.is_empty()) {
                keys.push(format!("{}#{key}", record.topic));
            }
        }
        let mut files = self.lock();
        for key in keys {
            loop {
                let writable = files.last_mut().filter(|file| !file.is_full());
                if let Some(file) = writable {
                    if file.put(&key, phy_offset, record.store_timestamp) {
                        break;
                    }
                }
                // The full file is written out and read from disk from now on.
                if let Some(full) = files.last_mut() {
                    full.flush(true)?;
                }
                let name = file_name(now_ms, files.last().map(|file| file.name.as_str()));
                let path = self.dir.join(&name);
                self.storage.create_dir_all(&self.dir)?;
                let file = self.storage.open(&path, true)?;
                files.push(IndexFile::create(
                    name,
                    file,
                    self.config.hash_slots,
                    self.config.entries,
                )?);
                self.storage.sync_dir(&self.dir)?;
            }
        }
        Ok(())
    }

    /// Writes the newest file's entries, slots and header (durably with `sync`).
    pub fn flush(&self, sync: bool) -> std::io::Result<()> {
        match self.lock().last_mut() {
            Some(file) => file.flush(sync),
            None => Ok(()),
        }
    }

    /// Commit-log offsets of `topic`'s messages with `key` (a key of `KEYS` or the unique key)
    /// stored within `[begin, end]` ms, newest first, at most `max` (RocketMQ's `queryOffset`).
    pub fn query(
        &self,
        topic: &str,
        key: &str,
        max: usize,
        begin: i64,
        end: i64,
    ) -> std::io::Result<Vec<i64>> {
        let key = format!("{topic}#{key}");
        let files = self.lock();
        let mut found = Vec::new();
        for file in files.iter().rev() {
            if file.meets(begin, end) {
                file.select(&key, max, begin, end, &mut found)?;
            }
            if file.header.begin_timestamp < begin || found.len() >= max {
                break;
            }
        }
        Ok(found)
    }

    /// Deletes files whose every entry is below `min_phy_offset` (their messages are gone),
    /// never the newest.
    pub fn delete_below(&self, min_phy_offset: u64) -> std::io::Result<usize> {
        let mut files = self.lock();
        let mut deleted = 0;
        while files.len() > 1 && files[0].header.end_phy_offset < min_phy_offset as i64 {
            let file = files.remove(0);
            self.storage.remove_file(&self.dir.join(&file.name))?;
            deleted += 1;
        }
        if deleted > 0 {
            self.storage.sync_dir(&self.dir)?;
        }
        Ok(deleted)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `yyyyMMddHHmmssSSS` of `now_ms` in UTC (RocketMQ uses the local zone), after `previous`.
fn file_name(now_ms: i64, previous: Option<&str>) -> String {
    let mut name = format_time(now_ms);
    // Two files created within one millisecond (tiny test files) still sort by age.
    let mut bump = now_ms;
    while previous.is_some_and(|previous| name.as_str() <= previous) {
        bump += 1;
        name = format_time(bump);
    }
    name
}

fn format_time(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}{:02}{:02}{:02}{:03}",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_rocketmq_timestamps() {
        assert_eq!(format_time(1_795_947_429_502), "20261129101709502");
        assert_eq!(format_time(0), "19700101000000000");
        assert_eq!(file_name(0, Some("19700101000000000")), "19700101000000001");
    }

    #[test]
    fn key_hashes_are_javas_string_hash_codes() {
        assert_eq!(key_hash(""), 0);
        assert_eq!(
            key_hash("TopicA#k0"),
            "TopicA#k0"
                .bytes()
                .fold(0i32, |h, b| h.wrapping_mul(31).wrapping_add(i32::from(b)))
                .abs()
        );
        // "polygenelubricants".hashCode() is Integer.MIN_VALUE: RocketMQ maps it to 0.
        assert_eq!(key_hash("polygenelubricants"), 0);
    }
}
