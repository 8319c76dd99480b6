//! The storage seam. Every durable byte goes through [`Storage`] and [`StorageFile`], so tests
//! can swap the file system for [`SimStorage`](crate::sim::SimStorage), crash it at any
//! operation and tear the last write.
//!
//! Tidemark uses positioned I/O (`pread`/`pwrite`) rather than memory maps: no `unsafe`, no
//! SIGBUS when a file shrinks under a reader, and the same durability story as RocketMQ's
//! mapped files — a write is in the page cache (surviving a process crash) when it returns and
//! on disk after `sync`.

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// One file, read and written by position.
pub trait StorageFile: Send + Sync + Debug {
    fn length(&self) -> io::Result<u64>;
    /// Fills `buffer` from `offset`; reading past the end is `UnexpectedEof`.
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> io::Result<()>;
    /// Writes all of `data` at `offset`, growing the file if needed.
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Makes every completed write durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    fn set_len(&self, length: u64) -> io::Result<()>;
}

/// A directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub is_dir: bool,
}

/// The file system as the store sees it.
pub trait Storage: Send + Sync + Debug {
    /// Opens a file, creating it (empty) when `create` is set.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>>;
    fn exists(&self, path: &Path) -> bool;
    /// Entries of a directory, in no particular order; a missing directory is empty.
    fn list(&self, dir: &Path) -> io::Result<Vec<Entry>>;
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Makes creations and removals in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive advisory lock held as long as the returned guard lives; `Ok(None)`
    /// when another process holds it.
    fn lock(&self, path: &Path) -> io::Result<Option<Box<dyn Debug + Send + Sync>>>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsStorage;

#[derive(Debug)]
struct FsFile {
    file: File,
}

impl StorageFile for FsFile {
    fn length(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buffer, offset)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, length: u64) -> io::Result<()> {
        self.file.set_len(length)
    }
}

impl Storage for FsStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(Arc::new(FsFile { file }))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<Entry>> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry?;
            // Names we cannot read as UTF-8 are not ours.
            if let Ok(name) = entry.file_name().into_string() {
                out.push(Entry {
                    name,
                    is_dir: entry.file_type()?.is_dir(),
                });
            }
        }
        Ok(out)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn lock(&self, path: &Path) -> io::Result<Option<Box<dyn Debug + Send + Sync>>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Box::new(file))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(error)) => Err(error),
        }
    }
}
