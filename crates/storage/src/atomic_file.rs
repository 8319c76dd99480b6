//! Small files that hold state (the broker's config files, a broadcasting consumer's offsets)
//! written so that a crash at any point leaves a complete file to load, and loaded so that a
//! corrupt or empty file is never silently replaced by an empty table. All I/O goes through the
//! [`Storage`] seam, so the simulated file system crash-tests it.
//!
//! Write: the new text goes to `<file>.tmp` and is synced; the current file is renamed to
//! `<file>.bak`; the temp file is renamed into place; the directory is synced. (Java's
//! `MixAll.string2File` has no fsync and rewrites in place on 5.1–5.3.)
//! Load: `<file>`, else `<file>.bak` (with a log line saying why). Neither existing is a fresh
//! start; anything else that yields no table — both unreadable, or empty, or the file present
//! but unusable with no backup — is an error naming both files.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::io::Storage;
use thiserror::Error;
use tracing::warn;

/// Why a config file could not be written or loaded.
#[derive(Debug, Error, Clone)]
pub enum PersistError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: Arc<io::Error>,
    },
    /// Neither the file nor its backup could be used; starting empty would lose data.
    #[error(
        "{file} and {backup} are both unusable ({reason}); refusing to start with an empty table"
    )]
    BothCorrupt {
        file: PathBuf,
        backup: PathBuf,
        reason: String,
    },
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PersistError {
    let path = path.to_path_buf();
    move |source| PersistError::Io {
        op,
        path,
        source: Arc::new(source),
    }
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|name| name.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// The backup kept next to `path`.
pub fn backup_path(path: &Path) -> PathBuf {
    sibling(path, ".bak")
}

/// Replaces `path` with `contents` crash-safely, keeping the previous version as `.bak` — unless
/// `keep_backup` says the current file must not become the backup (it was unusable at load and
/// the backup is the good copy): then the current file is simply replaced and `.bak` stays.
/// Callers serialise writes of one file (the broker's persister task does all of its writes).
pub fn write_atomically(
    storage: &dyn Storage,
    path: &Path,
    contents: &[u8],
    keep_backup: bool,
) -> Result<(), PersistError> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    storage
        .create_dir_all(dir)
        .map_err(io_error("create", dir))?;
    let temp = sibling(path, ".tmp");
    if storage.exists(&temp) {
        // Left by a write that died; its content is of no use.
        storage
            .remove_file(&temp)
            .map_err(io_error("remove", &temp))?;
    }
    let file = storage
        .open(&temp, true)
        .map_err(io_error("create", &temp))?;
    file.write_at(0, contents)
        .map_err(io_error("write", &temp))?;
    file.sync().map_err(io_error("sync", &temp))?;
    drop(file);
    if storage.exists(path) && !keep_backup {
        let backup = backup_path(path);
        storage
            .rename(path, &backup)
            .map_err(io_error("rename", path))?;
    }
    storage
        .rename(&temp, path)
        .map_err(io_error("rename", &temp))?;
    storage.sync_dir(dir).map_err(io_error("sync", dir))
}

/// The whole content of `path`, `None` when it does not exist.
fn read(storage: &dyn Storage, path: &Path) -> Result<Option<Vec<u8>>, PersistError> {
    let file = match storage.open(path, false) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(io_error("open", path)(error)),
    };
    let length = file.length().map_err(io_error("read", path))?;
    let length = usize::try_from(length)
        .map_err(|_| io_error("read", path)(io::Error::other("file too large for memory")))?;
    let mut bytes = vec![0; length];
    file.read_at(0, &mut bytes)
        .map_err(io_error("read", path))?;
    Ok(Some(bytes))
}

/// What one candidate file yielded.
enum Candidate<T> {
    Missing,
    Loaded(T),
    Unusable(String),
}

fn try_candidate<T, E: std::fmt::Display>(
    storage: &dyn Storage,
    path: &Path,
    parse: &impl Fn(&[u8]) -> Result<T, E>,
) -> Result<Candidate<T>, PersistError> {
    // An empty file is whatever `parse` makes of it: the broker's tables refuse it (an empty
    // file is not an empty table), a broadcasting consumer's offsets read it as none.
    Ok(match read(storage, path)? {
        None => Candidate::Missing,
        Some(bytes) => match parse(&bytes) {
            Ok(value) => Candidate::Loaded(value),
            Err(_) if bytes.iter().all(u8::is_ascii_whitespace) => {
                Candidate::Unusable("empty".to_owned())
            }
            Err(error) => Candidate::Unusable(error.to_string()),
        },
    })
}

/// Which file a table was loaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The file itself, or nothing (a fresh start): the next write may rotate it to `.bak`.
    File,
    /// The backup, because the file was missing or unusable: the next write must keep `.bak`.
    Backup,
}

/// Loads `path` (or its backup) with `parse`. `Ok(None)` only when neither exists: a fresh
/// start.
pub fn load<T, E: std::fmt::Display>(
    storage: &dyn Storage,
    path: &Path,
    parse: impl Fn(&[u8]) -> Result<T, E>,
) -> Result<Option<T>, PersistError> {
    Ok(load_with_source(storage, path, parse)?.map(|(value, _)| value))
}

/// [`load`], saying which file the value came from.
pub fn load_with_source<T, E: std::fmt::Display>(
    storage: &dyn Storage,
    path: &Path,
    parse: impl Fn(&[u8]) -> Result<T, E>,
) -> Result<Option<(T, Source)>, PersistError> {
    let backup = backup_path(path);
    let main = match try_candidate(storage, path, &parse)? {
        Candidate::Loaded(value) => return Ok(Some((value, Source::File))),
        Candidate::Missing => None,
        Candidate::Unusable(reason) => {
            warn!(file = %path.display(), %reason, backup = %backup.display(), "config file is unusable; loading its backup");
            Some(reason)
        }
    };
    match (try_candidate(storage, &backup, &parse)?, main) {
        (Candidate::Loaded(value), reason) => {
            if reason.is_none() {
                warn!(file = %path.display(), backup = %backup.display(), "config file is missing; loaded its backup");
            }
            Ok(Some((value, Source::Backup)))
        }
        (Candidate::Missing, None) => Ok(None),
        (backup_state, main) => Err(PersistError::BothCorrupt {
            file: path.to_path_buf(),
            backup,
            reason: format!(
                "{}; backup: {}",
                main.unwrap_or_else(|| "missing".into()),
                match backup_state {
                    Candidate::Missing => "missing".to_owned(),
                    Candidate::Unusable(reason) => reason,
                    Candidate::Loaded(_) => unreachable!("handled above"),
                }
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::FsStorage;
    use crate::sim::SimStorage;

    fn parse(bytes: &[u8]) -> Result<String, String> {
        let text = String::from_utf8(bytes.to_vec()).map_err(|_| "not utf8".to_owned())?;
        if text.starts_with('{') && text.ends_with('}') {
            Ok(text)
        } else {
            Err(format!("not an object: {text}"))
        }
    }

    #[test]
    fn writes_keep_a_backup_and_loads_fall_back_to_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FsStorage;
        let path = dir.path().join("config/consumerOffset.json");
        assert_eq!(load(&storage, &path, parse).expect("fresh"), None);
        write_atomically(&storage, &path, b"{1}", false).expect("write");
        write_atomically(&storage, &path, b"{2}", false).expect("write");
        assert_eq!(std::fs::read(backup_path(&path)).expect("backup"), b"{1}");
        assert_eq!(
            load(&storage, &path, parse).expect("load").as_deref(),
            Some("{2}")
        );
        std::fs::write(&path, b"torn").expect("corrupt");
        assert_eq!(
            load(&storage, &path, parse).expect("falls back").as_deref(),
            Some("{1}")
        );
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(
            load(&storage, &path, parse).expect("falls back").as_deref(),
            Some("{1}")
        );
    }

    #[test]
    fn both_unusable_is_an_error_naming_both_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FsStorage;
        let path = dir.path().join("topics.json");
        std::fs::write(&path, b"torn").expect("write");
        std::fs::write(backup_path(&path), b"also torn").expect("write");
        let error = load(&storage, &path, parse).expect_err("refuses");
        let message = error.to_string();
        assert!(
            message.contains("topics.json") && message.contains("topics.json.bak"),
            "{message}"
        );
        std::fs::remove_file(backup_path(&path)).expect("remove");
        assert!(
            matches!(
                load(&storage, &path, parse),
                Err(PersistError::BothCorrupt { .. })
            ),
            "a corrupt file with no backup is refused too"
        );
    }

    /// An empty file is not an empty table: with no usable backup the broker refuses to start.
    #[test]
    fn an_empty_file_without_a_backup_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FsStorage;
        let path = dir.path().join("consumerOffset.json");
        std::fs::write(&path, b"  \n").expect("write");
        let error = load(&storage, &path, parse).expect_err("refuses");
        assert!(error.to_string().contains("empty"), "{error}");
        std::fs::write(backup_path(&path), b"{ok}").expect("write");
        assert_eq!(
            load(&storage, &path, parse).expect("backup").as_deref(),
            Some("{ok}")
        );
    }

    /// A file that was unusable at load (the backup was loaded) is replaced without becoming
    /// the backup: a crash between the renames must still find the good backup.
    #[test]
    fn an_unusable_file_never_replaces_a_good_backup() {
        let path = Path::new("/store/config/topics.json");
        for crash_after in 1..12 {
            let storage = SimStorage::new();
            write_atomically(&storage, path, b"{good}", false).expect("write");
            write_atomically(&storage, path, b"{newer}", false).expect("write");
            storage
                .open(path, false)
                .and_then(|file| file.write_at(0, b"xx"))
                .expect("tear");
            storage
                .open(path, false)
                .and_then(|file| file.sync())
                .expect("sync");
            let (loaded, source) = load_with_source(&storage, path, parse)
                .expect("loads")
                .expect("something");
            assert_eq!((loaded.as_str(), source), ("{good}", Source::Backup));
            storage.crash_after(crash_after);
            let _ = write_atomically(&storage, path, b"{next}", true);
            let rebooted = storage.crash(crash_after);
            let after = load(&rebooted, path, parse)
                .expect("the backup is still good")
                .expect("something");
            assert!(
                after == "{good}" || after == "{next}",
                "crash after {crash_after}: {after}"
            );
        }
    }

    /// Every operation of a sequence of replacements as the crash point, several tear seeds
    /// each: after any crash the file or its backup loads, never neither, and what loads is the
    /// last acknowledged version or the one being written when the process died.
    #[test]
    fn a_crash_anywhere_leaves_the_file_or_its_backup() {
        let path = Path::new("/store/config/consumerOffset.json");
        let versions: Vec<String> = (0..4).map(|index| format!("{{v{index}}}")).collect();
        let mut crash_points = 0;
        for crash_after in 1..80 {
            for seed in 0..6 {
                let storage = SimStorage::new();
                write_atomically(&storage, path, versions[0].as_bytes(), false).expect("first");
                storage.crash_after(crash_after);
                let mut acknowledged = 0;
                for (index, version) in versions.iter().enumerate().skip(1) {
                    if write_atomically(&storage, path, version.as_bytes(), false).is_err() {
                        break;
                    }
                    acknowledged = index;
                }
                if !storage.has_crashed() {
                    continue;
                }
                crash_points += 1;
                let rebooted = storage.crash(seed);
                let loaded = load(&rebooted, path, parse)
                    .unwrap_or_else(|error| {
                        panic!("crash after {crash_after} ops, seed {seed}: {error}")
                    })
                    .unwrap_or_else(|| panic!("crash after {crash_after}: nothing to load"));
                let index = versions
                    .iter()
                    .position(|version| *version == loaded)
                    .unwrap_or_else(|| panic!("loaded {loaded}, which was never written"));
                assert!(
                    index == acknowledged || index == acknowledged + 1,
                    "crash after {crash_after}: loaded v{index}, acknowledged v{acknowledged}"
                );
            }
        }
        assert!(
            crash_points > 20,
            "the sequence was crashed in {crash_points} places"
        );
    }
}
