//! The storage seam. Every durable byte goes through [`Storage`] and [`StorageFile`], so tests
//! can swap the file system for [`SimStorage`](crate::sim::SimStorage), crash it at any
//! operation and tear the last write.
//!
//! Reads are positioned I/O (`pread`): no SIGBUS when a file shrinks under a reader. Writes are
//! `pwrite`, except inside a file's write window (see [`StorageFile::write_window`]), where they
//! are copies into a shared memory map whose pages were faulted in ahead
//! ([`write_map`](crate::write_map)) — for small records several times cheaper than a system
//! call each. Both have the durability of RocketMQ's mapped files: a write is in the page cache
//! (surviving a process crash) when it returns and on disk after `sync`.

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tracing::debug;

use crate::write_map::WriteMap;

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
    /// Says that writes will go to `[from, to)` next and not below `from` any more. The real
    /// file maps that range and faults its pages in writable now, so those writes become
    /// memory copies (and a full disk shows here, as an error); the default does nothing.
    fn write_window(&self, from: u64, to: u64) -> io::Result<()> {
        let _ = (from, to);
        Ok(())
    }
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
    /// Removes an empty directory.
    fn remove_dir(&self, dir: &Path) -> io::Result<()>;
    /// Moves `from` to `to` in one step, replacing `to` if it exists (POSIX `rename`); durable
    /// once the directory is synced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes creations, removals and renames in `dir` durable.
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
    map: RwLock<MapState>,
}

/// Whether writes to a [`FsFile`] may go through a memory map.
#[derive(Debug)]
enum MapState {
    /// Nobody asked for a write window yet: every write is a `pwrite`.
    Unmapped,
    Mapped(WriteMap),
    /// Mapping or populating is not supported here (an old kernel, an odd file system).
    Unavailable,
}

impl FsFile {
    fn map_state(&self) -> RwLockReadGuard<'_, MapState> {
        self.map.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn map_state_mut(&self) -> RwLockWriteGuard<'_, MapState> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes through the map when the bytes fall in its ready pages; `false` when they must be
    /// written with `pwrite`. The writer never faults pages in or waits for them: where the
    /// prefault thread has not got to yet, `pwrite` is as fast as this store was without maps.
    fn write_mapped(&self, offset: u64, data: &[u8]) -> bool {
        match &*self.map_state() {
            MapState::Mapped(map) => map.write(offset, data),
            MapState::Unmapped | MapState::Unavailable => false,
        }
    }
}

impl StorageFile for FsFile {
    fn length(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buffer, offset)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        if self.write_mapped(offset, data) {
            return Ok(());
        }
        self.file.write_all_at(data, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, length: u64) -> io::Result<()> {
        let mut state = self.map_state_mut();
        if let MapState::Mapped(map) = &*state {
            if length != map.len() {
                // A store into a mapped page past the end of the file raises SIGBUS; a file
                // that grew is mapped again, whole, at the next window.
                *state = MapState::Unmapped;
            }
        }
        self.file.set_len(length)
    }

    fn write_window(&self, from: u64, to: u64) -> io::Result<()> {
        if matches!(*self.map_state(), MapState::Unmapped) {
            let mut state = self.map_state_mut();
            if matches!(*state, MapState::Unmapped) {
                *state = match WriteMap::new(&self.file, from) {
                    Ok(map) => MapState::Mapped(map),
                    Err(error) => {
                        debug!(%error, "cannot map the file; writes stay pwrite");
                        MapState::Unavailable
                    }
                };
            }
        }
        let outcome = {
            let state = self.map_state();
            let MapState::Mapped(map) = &*state else {
                return Ok(());
            };
            map.release_below(from).and_then(|()| map.populate(to))
        };
        match outcome {
            // EINVAL: this kernel has no MADV_POPULATE_WRITE (before Linux 5.14).
            Err(error) if error.kind() == io::ErrorKind::InvalidInput => {
                debug!(%error, "cannot fault pages in; writes stay pwrite");
                *self.map_state_mut() = MapState::Unavailable;
                Ok(())
            }
            outcome => outcome,
        }
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
        Ok(Arc::new(FsFile {
            file,
            map: RwLock::new(MapState::Unmapped),
        }))
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

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::remove_dir(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
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

#[cfg(test)]
mod tests {
    use super::*;

    const LENGTH: u64 = 1024 * 1024;

    fn open_file(dir: &tempfile::TempDir) -> (std::path::PathBuf, FsFile) {
        let path = dir.path().join("segment");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create");
        let file = FsFile {
            file,
            map: RwLock::new(MapState::Unmapped),
        };
        file.set_len(LENGTH).expect("preallocate");
        (path, file)
    }

    fn read_back(file: &FsFile, offset: u64, length: usize) -> Vec<u8> {
        let mut buffer = vec![0u8; length];
        file.read_at(offset, &mut buffer).expect("read");
        buffer
    }

    #[test]
    fn writes_in_the_window_go_through_the_map_and_are_seen_by_reads_and_after_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, file) = open_file(&dir);
        assert!(!file.write_mapped(0, b"early"), "no window yet: pwrite");
        file.write_window(0, 256 * 1024).expect("window");
        assert!(file.write_mapped(100, b"through the map"));
        assert!(
            file.write_mapped(256 * 1024 - 4, b"edge"),
            "the last bytes of the window"
        );
        assert!(
            !file.write_mapped(256 * 1024 - 2, b"across"),
            "a write crossing the window's end is a pwrite"
        );
        file.write_at(256 * 1024 - 2, b"across").expect("pwrite");
        assert_eq!(read_back(&file, 100, 15), b"through the map");
        assert_eq!(read_back(&file, 256 * 1024 - 4, 8), b"edacross");
        file.sync().expect("sync");
        drop(file);
        let on_disk = std::fs::read(&path).expect("read file");
        assert_eq!(on_disk.len() as u64, LENGTH);
        assert_eq!(&on_disk[100..115], b"through the map");
        assert_eq!(&on_disk[256 * 1024 - 4..256 * 1024 + 4], b"edacross");
    }

    #[test]
    fn the_window_moves_forward_and_what_it_left_is_written_with_pwrite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_path, file) = open_file(&dir);
        file.write_window(0, 128 * 1024).expect("window");
        assert!(file.write_mapped(10, b"first"));
        file.write_window(192 * 1024, 512 * 1024).expect("moved");
        assert!(
            !file.write_mapped(20, b"behind"),
            "below the window: not through the map"
        );
        file.write_at(20, b"behind").expect("pwrite");
        assert!(file.write_mapped(400 * 1024, b"ahead"));
        assert_eq!(read_back(&file, 10, 5), b"first");
        assert_eq!(read_back(&file, 20, 6), b"behind");
        assert_eq!(read_back(&file, 400 * 1024, 5), b"ahead");
    }

    #[test]
    fn shrinking_the_file_drops_the_map() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_path, file) = open_file(&dir);
        file.write_window(0, LENGTH).expect("window");
        assert!(file.write_mapped(0, b"mapped"));
        file.set_len(4096).expect("shrink");
        assert!(matches!(*file.map_state(), MapState::Unmapped));
        assert!(!file.write_mapped(100, b"x"));
        file.write_at(100, b"after").expect("pwrite");
        assert_eq!(read_back(&file, 0, 6), b"mapped");
        assert_eq!(read_back(&file, 100, 5), b"after");
        assert_eq!(file.length().expect("length"), 4096);
    }

    #[test]
    fn a_window_on_an_empty_file_maps_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_path, file) = open_file(&dir);
        file.set_len(0).expect("empty");
        file.write_window(0, 4096)
            .expect("nothing to map is not an error");
        file.write_at(0, b"grows").expect("pwrite grows the file");
        assert_eq!(read_back(&file, 0, 5), b"grows");
        file.set_len(LENGTH).expect("grow");
        file.write_window(0, 4096).expect("window");
        assert!(
            file.write_mapped(5, b" and maps"),
            "mapped again after growing"
        );
        assert_eq!(read_back(&file, 0, 14), b"grows and maps");
    }
}
