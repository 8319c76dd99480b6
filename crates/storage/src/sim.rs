//! A simulated file system for crash tests (redb's "live vs durable image" idea).
//!
//! Every file keeps the bytes a reader sees now (`live`) and the writes not yet made durable
//! by a `sync`. The simulation can fail every operation after the k-th (the process "dies"
//! there, possibly in the middle of a write), refuse writes past a capacity (a full disk), and
//! [`SimStorage::crash`] yields the file system a reboot would find: the durable image plus a
//! random prefix of the unsynced writes, the last one possibly torn.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::io::{Entry, Storage, StorageFile};

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone, Default)]
struct SimFile {
    live: Vec<u8>,
    durable: Vec<u8>,
    unsynced: Vec<Pending>,
    /// Highest byte written, what counts against the capacity (set_len is sparse).
    written_extent: u64,
}

fn apply(image: &mut Vec<u8>, pending: &Pending) {
    match pending {
        Pending::Write { offset, data } => {
            let end = *offset as usize + data.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[*offset as usize..end].copy_from_slice(data);
        }
        Pending::SetLen(length) => image.resize(*length as usize, 0),
    }
}

#[derive(Debug, Default)]
struct State {
    files: BTreeMap<PathBuf, SimFile>,
    dirs: BTreeSet<PathBuf>,
    operations: u64,
    crash_after: Option<u64>,
    crashed: bool,
    capacity_bytes: Option<u64>,
    rng: u64,
}

impl State {
    /// Counts an operation; fails it (and every later one) once the crash point is passed.
    fn tick(&mut self) -> io::Result<()> {
        if self.crashed {
            return Err(io::Error::other("simulated crash: the process is gone"));
        }
        self.operations += 1;
        if self
            .crash_after
            .is_some_and(|limit| self.operations > limit)
        {
            self.crashed = true;
            return Err(io::Error::other("simulated crash"));
        }
        Ok(())
    }

    fn next_random(&mut self) -> u64 {
        // splitmix64: deterministic per seed, good enough to pick tear points.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn file(&mut self, path: &Path) -> io::Result<&mut SimFile> {
        self.files
            .get_mut(path)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{}", path.display())))
    }
}

/// The simulated file system; clones share state.
#[derive(Debug, Clone, Default)]
pub struct SimStorage {
    state: Arc<Mutex<State>>,
}

impl SimStorage {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every operation after the `operations`-th fails, as if the process died there. A write
    /// that is the crash point leaves a random prefix of itself behind (a torn write).
    pub fn crash_after(&self, operations: u64) {
        let mut state = self.lock();
        state.crash_after = Some(state.operations + operations);
    }

    /// Writes that would take the written bytes past `bytes` fail with "no space".
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.lock().capacity_bytes = bytes;
    }

    /// Operations performed so far.
    pub fn operations(&self) -> u64 {
        self.lock().operations
    }

    pub fn has_crashed(&self) -> bool {
        self.lock().crashed
    }

    /// The file system after a power loss: durable images plus a seeded-random prefix of the
    /// unsynced writes, the last of them possibly torn. Nothing of this instance is shared.
    pub fn crash(&self, seed: u64) -> SimStorage {
        let mut state = self.lock();
        state.rng = seed;
        let paths: Vec<PathBuf> = state.files.keys().cloned().collect();
        let mut files = BTreeMap::new();
        for path in paths {
            let file = state.files[&path].clone();
            let mut image = file.durable.clone();
            let keep = (state.next_random() % (file.unsynced.len() as u64 + 1)) as usize;
            for (index, pending) in file.unsynced.iter().take(keep).enumerate() {
                match pending {
                    Pending::Write { offset, data } if index + 1 == keep => {
                        let torn = (state.next_random() % (data.len() as u64 + 1)) as usize;
                        apply(
                            &mut image,
                            &Pending::Write {
                                offset: *offset,
                                data: data[..torn].to_vec(),
                            },
                        );
                    }
                    other => apply(&mut image, other),
                }
            }
            let extent = image.len() as u64;
            files.insert(
                path,
                SimFile {
                    live: image.clone(),
                    durable: image,
                    unsynced: Vec::new(),
                    written_extent: extent,
                },
            );
        }
        let dirs = state.dirs.clone();
        SimStorage {
            state: Arc::new(Mutex::new(State {
                files,
                dirs,
                ..State::default()
            })),
        }
    }

    /// The current (live) bytes of a file, for assertions.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        self.lock().files.get(path).map(|file| file.live.clone())
    }

    /// Overwrites bytes of a file live and durably, bypassing the crash machinery (to inject
    /// corruption such as bit flips).
    pub fn corrupt(&self, path: &Path, offset: u64, data: &[u8]) {
        let mut state = self.lock();
        if let Some(file) = state.files.get_mut(path) {
            let pending = Pending::Write {
                offset,
                data: data.to_vec(),
            };
            apply(&mut file.live, &pending);
            apply(&mut file.durable, &pending);
        }
    }

    /// Paths of every file.
    pub fn files(&self) -> Vec<PathBuf> {
        self.lock().files.keys().cloned().collect()
    }
}

#[derive(Debug)]
struct SimHandle {
    storage: SimStorage,
    path: PathBuf,
}

impl StorageFile for SimHandle {
    fn length(&self) -> io::Result<u64> {
        let mut state = self.storage.lock();
        state.tick()?;
        Ok(state.file(&self.path)?.live.len() as u64)
    }

    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> io::Result<()> {
        let mut state = self.storage.lock();
        state.tick()?;
        let file = state.file(&self.path)?;
        if buffer.is_empty() {
            return Ok(());
        }
        let end = offset as usize + buffer.len();
        let source = file
            .live
            .get(offset as usize..end)
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buffer.copy_from_slice(source);
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut state = self.storage.lock();
        let capacity = state.capacity_bytes;
        let used: u64 = state.files.values().map(|file| file.written_extent).sum();
        if let Err(error) = state.tick() {
            // The process died in the middle of this write: part of it may reach the page cache.
            if state.files.contains_key(&self.path) {
                let torn = (state.next_random() % (data.len() as u64 + 1)) as usize;
                let pending = Pending::Write {
                    offset,
                    data: data[..torn].to_vec(),
                };
                let file = state.file(&self.path)?;
                apply(&mut file.live, &pending);
                file.unsynced.push(pending);
            }
            return Err(error);
        }
        let file = state.file(&self.path)?;
        let end = offset + data.len() as u64;
        let growth = end.saturating_sub(file.written_extent);
        if capacity.is_some_and(|capacity| used + growth > capacity) {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "simulated disk full",
            ));
        }
        let pending = Pending::Write {
            offset,
            data: data.to_vec(),
        };
        apply(&mut file.live, &pending);
        file.unsynced.push(pending);
        file.written_extent = file.written_extent.max(end);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut state = self.storage.lock();
        state.tick()?;
        let file = state.file(&self.path)?;
        for pending in std::mem::take(&mut file.unsynced) {
            apply(&mut file.durable, &pending);
        }
        Ok(())
    }

    fn set_len(&self, length: u64) -> io::Result<()> {
        let mut state = self.storage.lock();
        state.tick()?;
        let file = state.file(&self.path)?;
        let pending = Pending::SetLen(length);
        apply(&mut file.live, &pending);
        file.unsynced.push(pending);
        file.written_extent = file.written_extent.min(length);
        Ok(())
    }
}

impl Storage for SimStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let mut state = self.lock();
        state.tick()?;
        if !state.files.contains_key(path) {
            if !create {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{}", path.display()),
                ));
            }
            // Creation is modelled as durable at once (as if the directory were synced).
            state.files.insert(path.to_path_buf(), SimFile::default());
        }
        Ok(Arc::new(SimHandle {
            storage: self.clone(),
            path: path.to_path_buf(),
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        let state = self.lock();
        state.files.contains_key(path) || state.dirs.contains(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<Entry>> {
        let mut state = self.lock();
        state.tick()?;
        let mut entries = Vec::new();
        for path in state.files.keys() {
            if path.parent() == Some(dir) {
                if let Some(name) = path.file_name().and_then(|name| name.to_str()) {
                    entries.push(Entry {
                        name: name.to_owned(),
                        is_dir: false,
                    });
                }
            }
        }
        for path in &state.dirs {
            if path.parent() == Some(dir) {
                if let Some(name) = path.file_name().and_then(|name| name.to_str()) {
                    entries.push(Entry {
                        name: name.to_owned(),
                        is_dir: true,
                    });
                }
            }
        }
        Ok(entries)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.tick()?;
        for ancestor in dir.ancestors() {
            if !ancestor.as_os_str().is_empty() {
                state.dirs.insert(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.tick()?;
        state
            .files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{}", path.display())))
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.tick()?;
        let occupied = state.files.keys().any(|path| path.starts_with(dir))
            || state
                .dirs
                .iter()
                .any(|path| path != dir && path.starts_with(dir));
        if occupied {
            return Err(io::Error::new(
                io::ErrorKind::DirectoryNotEmpty,
                format!("{}", dir.display()),
            ));
        }
        if !state.dirs.remove(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}", dir.display()),
            ));
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.tick()?;
        // Like creation, modelled as durable at once; the file keeps its unsynced writes, so
        // renaming content that was never synced still loses it in a crash.
        let file = state.files.remove(from).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{}", from.display()))
        })?;
        state.files.insert(to.to_path_buf(), file);
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        self.lock().tick()
    }

    fn lock(&self, _path: &Path) -> io::Result<Option<Box<dyn Debug + Send + Sync>>> {
        Ok(Some(Box::new(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_writes_may_be_lost_synced_ones_survive() {
        let storage = SimStorage::new();
        let path = Path::new("/d/f");
        let file = storage.open(path, true).expect("create");
        file.write_at(0, b"durable").expect("write");
        file.sync().expect("sync");
        file.write_at(7, b"-volatile").expect("write");
        for seed in 0..32 {
            let after = storage.crash(seed);
            let image = after.read_file(path).expect("file survives");
            assert!(image.starts_with(b"durable"), "seed {seed}");
            assert!(
                b"durable-volatile".starts_with(&image),
                "seed {seed}: a prefix of what was written"
            );
        }
    }

    #[test]
    fn crash_point_fails_every_later_operation() {
        let storage = SimStorage::new();
        let file = storage.open(Path::new("/f"), true).expect("create");
        storage.crash_after(1);
        file.write_at(0, b"a").expect("first operation runs");
        assert!(file.sync().is_err());
        assert!(file.write_at(1, b"b").is_err());
        assert!(storage.has_crashed());
    }

    #[test]
    fn a_rename_replaces_the_target_and_carries_unsynced_writes_along() {
        let storage = SimStorage::new();
        let old = storage.open(Path::new("/d/f"), true).expect("open");
        old.write_at(0, b"old").expect("write");
        old.sync().expect("sync");
        let new = storage.open(Path::new("/d/f.tmp"), true).expect("open");
        new.write_at(0, b"new").expect("write");
        storage
            .rename(Path::new("/d/f.tmp"), Path::new("/d/f"))
            .expect("rename");
        assert_eq!(
            storage.read_file(Path::new("/d/f")).as_deref(),
            Some(&b"new"[..])
        );
        assert!(!storage.exists(Path::new("/d/f.tmp")));
        let rebooted = storage.crash(0);
        let after = rebooted.read_file(Path::new("/d/f")).expect("still there");
        assert!(
            b"new".starts_with(&after),
            "unsynced bytes may be lost, never invented"
        );
    }

    #[test]
    fn capacity_refuses_growth() {
        let storage = SimStorage::new();
        storage.set_capacity(Some(4));
        let file = storage.open(Path::new("/f"), true).expect("create");
        file.write_at(0, b"abcd").expect("fits");
        let error = file.write_at(4, b"e").expect_err("full");
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        file.write_at(0, b"wxyz")
            .expect("overwriting needs no space");
    }
}
