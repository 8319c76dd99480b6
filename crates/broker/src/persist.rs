//! Config files (`consumerOffset.json`, `topics.json`, `subscriptionGroup.json`, …) written so
//! that a crash at any point leaves a complete file to load, and loaded so that a corrupt file
//! is never silently replaced by an empty table.
//!
//! Write: the new text goes to `<file>.tmp` and is fsynced; the current file becomes
//! `<file>.bak`; the temp file is renamed into place; the directory is fsynced. (Java's
//! `MixAll.string2File` has no fsync and rewrites in place on 5.1–5.3.)
//! Load: `<file>`, else `<file>.bak` (with a log line saying why); both present but unreadable is
//! an error naming both files.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;
use tracing::warn;

/// Why a config file could not be written or loaded.
#[derive(Debug, Error)]
pub enum PersistError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// Neither the file nor its backup could be parsed; starting empty would lose data.
    #[error(
        "{file} and {backup} are both unreadable ({reason}); refusing to start with an empty table"
    )]
    BothCorrupt {
        file: PathBuf,
        backup: PathBuf,
        reason: String,
    },
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

/// Replaces `path` with `contents` crash-safely, keeping the previous version as `.bak`.
pub fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), PersistError> {
    // Writers of one file share its temp name; serialise them (slave sync, the persistence
    // timer and request handlers can all persist metadata at once).
    static WRITERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = WRITERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let io_error = |op, path: &Path| {
        let path = path.to_path_buf();
        move |source| PersistError::Io { op, path, source }
    };
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(dir).map_err(io_error("create", dir))?;
    let temp = sibling(path, ".tmp");
    {
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&temp)
            .map_err(io_error("create", &temp))?;
        file.write_all(contents).map_err(io_error("write", &temp))?;
        file.sync_all().map_err(io_error("sync", &temp))?;
    }
    if path.exists() {
        let backup = backup_path(path);
        fs::rename(path, &backup).map_err(io_error("rename", path))?;
    }
    fs::rename(&temp, path).map_err(io_error("rename", &temp))?;
    File::open(dir)
        .and_then(|directory| directory.sync_all())
        .map_err(io_error("sync", dir))
}

/// Loads `path` (or its backup) with `parse`. `Ok(None)` when neither exists or both are
/// empty: a fresh start.
pub fn load<T, E: std::fmt::Display>(
    path: &Path,
    parse: impl Fn(&[u8]) -> Result<T, E>,
) -> Result<Option<T>, PersistError> {
    let backup = backup_path(path);
    let read = |candidate: &Path| -> Result<Option<Vec<u8>>, PersistError> {
        match fs::read(candidate) {
            Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(None),
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(PersistError::Io {
                op: "read",
                path: candidate.to_path_buf(),
                source: error,
            }),
        }
    };
    let main_error = match read(path)? {
        Some(bytes) => match parse(&bytes) {
            Ok(value) => return Ok(Some(value)),
            Err(error) => Some(error.to_string()),
        },
        None => None,
    };
    if let Some(reason) = &main_error {
        warn!(file = %path.display(), %reason, backup = %backup.display(), "config file is unreadable; loading its backup");
    }
    match read(&backup)? {
        Some(bytes) => match parse(&bytes) {
            Ok(value) => {
                if main_error.is_none() {
                    warn!(file = %path.display(), backup = %backup.display(), "config file is missing or empty; loaded its backup");
                }
                Ok(Some(value))
            }
            Err(error) => Err(PersistError::BothCorrupt {
                file: path.to_path_buf(),
                backup,
                reason: format!(
                    "{}; backup: {error}",
                    main_error.unwrap_or_else(|| "missing".into())
                ),
            }),
        },
        None => match main_error {
            Some(reason) => Err(PersistError::BothCorrupt {
                file: path.to_path_buf(),
                backup,
                reason: format!("{reason}; backup: missing"),
            }),
            None => Ok(None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<String, String> {
        let text = String::from_utf8(bytes.to_vec()).map_err(|_| "not utf8".to_owned())?;
        if text.starts_with('{') {
            Ok(text)
        } else {
            Err(format!("not an object: {text}"))
        }
    }

    #[test]
    fn writes_keep_a_backup_and_loads_fall_back_to_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config/consumerOffset.json");
        assert_eq!(load(&path, parse).expect("fresh"), None);
        write_atomically(&path, b"{1}").expect("write");
        write_atomically(&path, b"{2}").expect("write");
        assert_eq!(fs::read(backup_path(&path)).expect("backup"), b"{1}");
        assert_eq!(load(&path, parse).expect("load").as_deref(), Some("{2}"));
        fs::write(&path, b"torn").expect("corrupt");
        assert_eq!(
            load(&path, parse).expect("falls back").as_deref(),
            Some("{1}")
        );
        fs::remove_file(&path).expect("remove");
        assert_eq!(
            load(&path, parse).expect("falls back").as_deref(),
            Some("{1}")
        );
    }

    #[test]
    fn both_corrupt_is_an_error_naming_both_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("topics.json");
        fs::write(&path, b"torn").expect("write");
        fs::write(backup_path(&path), b"also torn").expect("write");
        let error = load(&path, parse).expect_err("refuses");
        let message = error.to_string();
        assert!(
            message.contains("topics.json") && message.contains("topics.json.bak"),
            "{message}"
        );
        fs::remove_file(backup_path(&path)).expect("remove");
        assert!(
            matches!(load(&path, parse), Err(PersistError::BothCorrupt { .. })),
            "a corrupt file with no backup is refused too"
        );
    }
}
