use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;
use tidemark_protocol::MessageError;

/// What the store reports to its callers.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A read, write, sync or metadata operation failed; `op` says which.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The disk is full; the append was not stored and the store stays readable.
    #[error("no space left writing {path}")]
    DiskFull { path: PathBuf },
    /// The message cannot be stored as a record (too large, topic too long, …).
    #[error("message rejected: {0}")]
    Message(#[from] MessageError),
    /// `part`: "body" (against `message_size_max_bytes`), "record" or "batch" (the stored
    /// bytes, against that plus 64 KiB), "segment" (more than one commit-log segment holds).
    #[error("message {part} of {size} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        part: &'static str,
        size: usize,
        max: usize,
    },
    /// Disk usage passed the warning level; appends are refused until retention frees space.
    #[error(
        "disk usage {usage:.3} is above disk_usage_ratio_warning {limit:.2}: the store refuses \
         writes until usage falls below disk_usage_ratio_clean_forcibly"
    )]
    DiskNearlyFull { usage: f64, limit: f64 },
    /// The store directory is in use by another process.
    #[error("store directory {path} is locked by another process")]
    Locked { path: PathBuf },
    /// Recovery found something it cannot repair safely.
    #[error("store cannot be recovered: {reason}")]
    Unrecoverable { reason: String },
    /// An earlier fsync failed; nothing after it can be acknowledged durably until reopen.
    #[error("the store stopped accepting writes after a failed sync: {reason}")]
    SyncFailed { reason: String },
    #[error("the store is shut down")]
    Closed,
    /// Replicated bytes do not continue the log (a slave must report its end and resume there).
    #[error("replicated data starts at {got}, but the commit log ends at {expected}")]
    ReplicationGap { expected: u64, got: u64 },
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl StoreError {
    /// Wraps an I/O error with the operation and the file, turning "no space" into `DiskFull`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> StoreError {
        let path = path.into();
        if source.kind() == io::ErrorKind::StorageFull {
            StoreError::DiskFull { path }
        } else {
            StoreError::Io { op, path, source }
        }
    }
}

/// [`StoreError::io`] for `map_err`: `.map_err(io_error("sync", &root))`.
pub(crate) fn io_error<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |error| StoreError::io(op, path, error)
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
