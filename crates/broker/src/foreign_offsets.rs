//! Whether `consumerOffset.json` was written by another broker since Tidemark last exported it.
//!
//! Consumer progress lives in the offset journal; `consumerOffset.json` is an export, read only
//! when there is no journal. A store that moved to Apache RocketMQ and back has both: Tidemark's
//! journal as it was when Tidemark stopped, and Apache's newer progress in the file. Reading the
//! journal then would take every group back to where it stood before the move. So each export
//! is fingerprinted first (the fingerprints of the last two exports are kept in
//! `consumerOffset.json.exported`, the older one covering a crash between the two writes); a
//! file matching neither was written by someone else, and the broker starts from it instead.

use std::path::{Path, PathBuf};

use tidemark_storage::atomic_file::{self as persist, PersistError};
use tidemark_storage::io::Storage;

const MARKS: &str = "consumerOffset.json.exported";
const OFFSETS: &str = "consumerOffset.json";

/// FNV-1a, 64 bits: stable across builds and Rust versions, which a mark kept on disk needs.
fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn marks_path(config_dir: &Path) -> PathBuf {
    config_dir.join(MARKS)
}

/// The fingerprints of the exports Tidemark wrote last, newest last.
fn marks(storage: &dyn Storage, config_dir: &Path) -> Result<Option<Vec<u64>>, PersistError> {
    persist::load(storage, &marks_path(config_dir), |bytes| {
        std::str::from_utf8(bytes)
            .map_err(|_| "not UTF-8".to_owned())?
            .lines()
            .map(|line| u64::from_str_radix(line.trim(), 16).map_err(|error| error.to_string()))
            .collect::<Result<Vec<u64>, String>>()
    })
}

/// Notes that `text` is about to be written as `consumerOffset.json`. Called before the
/// export is written, so a crash between the two leaves the file matching the older mark.
pub(crate) fn record_export(
    storage: &dyn Storage,
    config_dir: &Path,
    text: &[u8],
) -> Result<(), PersistError> {
    // Unreadable marks are only a lost optimisation: the next start then trusts the journal.
    let previous = marks(storage, config_dir)
        .ok()
        .flatten()
        .unwrap_or_default();
    let mut kept: Vec<u64> = previous.last().copied().into_iter().collect();
    kept.push(fingerprint(text));
    let body: String = kept.iter().map(|mark| format!("{mark:016x}\n")).collect();
    persist::write_atomically(storage, &marks_path(config_dir), body.as_bytes(), false)
}

/// Whether `consumerOffset.json` holds progress another broker wrote after Tidemark's last
/// export. False when Tidemark never exported here (no marks): nothing to compare with.
pub(crate) fn written_elsewhere(storage: &dyn Storage, config_dir: &Path) -> bool {
    let Ok(Some(marks)) = marks(storage, config_dir) else {
        return false;
    };
    match persist::load(storage, &config_dir.join(OFFSETS), |bytes| {
        Ok::<_, String>(fingerprint(bytes))
    }) {
        Ok(Some(current)) => !marks.contains(&current),
        _ => false,
    }
}

/// Moves the offset journal out of the way (kept beside it, named by `now_ms`), so the broker
/// opens without one and imports `consumerOffset.json`. Returns where it went.
pub(crate) fn set_journal_aside(
    storage: &dyn Storage,
    journal_dir: &Path,
    now_ms: i64,
) -> std::io::Result<PathBuf> {
    let mut aside = journal_dir.as_os_str().to_owned();
    aside.push(format!(".replaced-{now_ms}"));
    let aside = PathBuf::from(aside);
    storage.rename(journal_dir, &aside)?;
    if let Some(parent) = journal_dir.parent() {
        storage.sync_dir(parent)?;
    }
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_storage::io::FsStorage;

    fn write(storage: &dyn Storage, dir: &Path, text: &str) {
        persist::write_atomically(storage, &dir.join(OFFSETS), text.as_bytes(), false)
            .expect("write the offsets file");
    }

    #[test]
    fn only_a_file_tidemark_did_not_export_counts_as_written_elsewhere() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FsStorage;
        write(&storage, dir.path(), "{\"offsetTable\":{}}");
        assert!(
            !written_elsewhere(&storage, dir.path()),
            "no marks: the journal is trusted"
        );
        for export in ["{\"a\":1}", "{\"a\":2}"] {
            record_export(&storage, dir.path(), export.as_bytes()).expect("mark");
            write(&storage, dir.path(), export);
            assert!(
                !written_elsewhere(&storage, dir.path()),
                "Tidemark's own export"
            );
        }
        record_export(&storage, dir.path(), b"{\"a\":3}").expect("mark");
        assert!(
            !written_elsewhere(&storage, dir.path()),
            "a crash before the export was written leaves the previous one, still Tidemark's"
        );
        write(&storage, dir.path(), "{\"a\":99}");
        assert!(written_elsewhere(&storage, dir.path()), "Apache's write");
    }

    #[test]
    fn the_journal_set_aside_leaves_its_place_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let journal = dir.path().join("offsetJournal");
        std::fs::create_dir_all(&journal).expect("journal dir");
        std::fs::write(journal.join("offsets-0"), b"x").expect("a journal file");
        let aside = set_journal_aside(&FsStorage, &journal, 42).expect("set aside");
        assert!(!journal.exists());
        assert!(aside.join("offsets-0").exists());
        assert!(aside.ends_with("offsetJournal.replaced-42"));
    }
}
