//! An append-only, checksummed journal of changes to some state, group-committed by a writer
//! thread and compacted into snapshots — the source of truth for state that changes often in
//! small steps (consumer progress) where rewriting a whole file per change would not scale and
//! rewriting it every few seconds would lose seconds of changes in a crash.
//!
//! - [`Journal::append`] frames a change into an in-memory queue and returns a [`Ticket`];
//!   owners call it under their own lock, so the journal's order is the order changes were
//!   applied. The writer thread takes everything queued, writes it and syncs once: one sync
//!   covers every change appended while the previous one ran (the store's group commit).
//!   [`Journal::durable`] resolves once a ticket is on disk.
//! - [`Journal::compact`] starts a new segment at a point the owner chooses under its lock, then
//!   writes the owner's snapshot naming that segment as the first to replay. Segments older than
//!   the previous snapshot (kept as `.bak`) are deleted.
//! - [`Journal::open`] = snapshot (or its backup, or the owner's fresh state) + every later
//!   segment in order, stopping at the first torn, corrupt or unusable record; the report names
//!   the file, the offset and the reason. Then it writes a snapshot of the recovered state and
//!   starts a new segment, so nothing is ever appended after damage.
//!
//! All I/O goes through the [`Storage`] seam. Layout in the journal's directory:
//! `<name>.snapshot` (+ `.bak`), `<name>.<20-digit segment>.journal`; bytes in [`frame`].

mod frame;
mod writer;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::atomic_file::{self, PersistError, Source};
use crate::io::Storage;
use crate::lock_rank::{self, Rank, Ranked};

pub use frame::{Damage, RECORD_PAYLOAD_MAX};

/// How an owner's state is read from and written to a journal.
pub trait JournalCodec {
    type State;
    /// The state when there is no snapshot at all (a new directory, or one to import from).
    fn fresh(&self) -> Result<Self::State, String>;
    fn restore(&self, snapshot: &[u8]) -> Result<Self::State, String>;
    /// Applies one record; an error stops recovery there, as damage would.
    fn apply(&self, state: &mut Self::State, record: &[u8]) -> Result<(), String>;
    fn snapshot(&self, state: &Self::State) -> Vec<u8>;
}

#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// Extra time the writer waits after the first queued change before writing, to gather
    /// more changes into one sync. Zero: write as soon as the previous sync ended.
    pub group_commit_window: Duration,
    /// Compaction is due once this many bytes were appended since the last one, and at least
    /// twice the last snapshot's size (so rewriting snapshots costs at most half the journal's
    /// own bytes).
    pub compact_min_bytes: u64,
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self {
            group_commit_window: Duration::ZERO,
            compact_min_bytes: 16 << 20,
        }
    }
}

#[derive(Debug, Error, Clone)]
pub enum JournalError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: Arc<io::Error>,
    },
    #[error("journal snapshot: {0}")]
    Snapshot(#[from] PersistError),
    #[error("journal {name}: the fresh state could not be built: {reason}")]
    Fresh { name: String, reason: String },
    #[error("journal write failed: {0}")]
    WriteFailed(Arc<str>),
    #[error("the journal is closed")]
    Closed,
    #[error("a record of {0} bytes exceeds the journal's limit")]
    TooLarge(usize),
}

pub(crate) fn io_error(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> JournalError {
    let path = path.to_path_buf();
    move |source| JournalError::Io {
        op,
        path,
        source: Arc::new(source),
    }
}

/// A change's place in the journal: durable once [`Journal::durable`] says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

/// Where recovery stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamageReport {
    pub file: PathBuf,
    /// Offset in the file of the first record not replayed.
    pub offset: u64,
    pub damage: Damage,
    /// Later segments that were not replayed because they come after the damage.
    pub skipped_segments: Vec<PathBuf>,
}

/// What [`Journal::open`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// `None`: no snapshot (the owner's fresh state was used).
    pub snapshot: Option<Source>,
    pub segments_replayed: usize,
    pub records_replayed: u64,
    pub damage: Option<DamageReport>,
}

/// What the writer publishes to durability waiters.
#[derive(Debug, Clone, Default)]
pub(crate) struct Progress {
    /// Every ticket up to this one is durable.
    pub durable: u64,
    /// The last write failed; tickets up to `failed_through` are not known to be durable.
    pub failure: Option<(u64, Arc<str>)>,
    /// The writer stopped: nothing more becomes durable.
    pub closed: bool,
}

/// A unit of the writer's work, in append order.
#[derive(Debug)]
pub(crate) enum Chunk {
    Records(Vec<u8>),
    /// Sync the current segment and continue in this new one.
    NewSegment(u64),
}

#[derive(Debug, Default)]
pub(crate) struct Queue {
    pub chunks: Vec<Chunk>,
    /// Tickets handed out so far (the last one's number).
    pub appended: u64,
    /// The segment appends go to now.
    pub segment: u64,
    pub bytes_since_compaction: u64,
    pub stopping: bool,
    /// The writer is parked on [`Shared::work`]. Appenders wake it only then: waking a thread
    /// is a system call, and under load the writer finds the next batch on its own when its
    /// sync returns.
    pub writer_parked: bool,
}

/// State shared with the writer thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub queue: Mutex<Queue>,
    /// The writer waits on this for work.
    pub work: Condvar,
    pub progress: watch::Sender<Progress>,
    /// Blocking waiters for durability wait on this (with `progress_lock`).
    pub progress_lock: Mutex<()>,
    pub progress_changed: Condvar,
    /// The segment the writer writes to now.
    pub writer_segment: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub(crate) fn queue(&self) -> Ranked<'_, Queue> {
        lock_rank::lock(&self.queue, Rank::JournalQueue)
    }

    /// The queue for the writer thread, which holds no other lock and waits on `work` with it
    /// (a condvar needs the plain guard).
    pub(crate) fn queue_on_writer(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn publish(&self, update: impl FnOnce(&mut Progress)) {
        self.progress.send_modify(update);
        let _guard = self
            .progress_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.progress_changed.notify_all();
    }
}

/// Which snapshot is current and which became the backup: segments below the backup's base are
/// no longer needed by either.
#[derive(Debug)]
struct Snapshots {
    current_base: u64,
    last_size: u64,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Journal {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    name: String,
    options: JournalOptions,
    shared: Arc<Shared>,
    /// Held for a whole compaction, so two never interleave.
    snapshots: Mutex<Snapshots>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// Given to the owner during [`Journal::compact`]: the owner calls [`cut`](Self::cut) under
/// its own lock, at the moment its snapshot is taken.
#[derive(Debug)]
pub struct Cut<'a> {
    journal: &'a Journal,
    base: Option<u64>,
}

impl Cut<'_> {
    /// Every change appended before this call is in the snapshot; every later one goes to the
    /// new segment.
    pub fn cut(&mut self) {
        let mut queue = self.journal.shared.queue();
        queue.segment += 1;
        let segment = queue.segment;
        queue.chunks.push(Chunk::NewSegment(segment));
        queue.bytes_since_compaction = 0;
        let wake = queue.writer_parked;
        drop(queue);
        if wake {
            self.journal.shared.work.notify_one();
        }
        self.base = Some(segment);
    }
}

fn segment_name(name: &str, segment: u64) -> String {
    format!("{name}.{segment:020}.journal")
}

fn parse_segment_name(name: &str, file: &str) -> Option<u64> {
    let number = file.strip_prefix(name)?.strip_prefix('.')?;
    let number = number.strip_suffix(".journal")?;
    (number.len() == 20).then(|| number.parse().ok()).flatten()
}

impl Journal {
    fn segment_path(dir: &Path, name: &str, segment: u64) -> PathBuf {
        dir.join(segment_name(name, segment))
    }

    fn snapshot_path(dir: &Path, name: &str) -> PathBuf {
        dir.join(format!("{name}.snapshot"))
    }

    /// Segment numbers present in the directory, ascending.
    fn segments(storage: &dyn Storage, dir: &Path, name: &str) -> Result<Vec<u64>, JournalError> {
        let mut segments: Vec<u64> = storage
            .list(dir)
            .map_err(io_error("list", dir))?
            .into_iter()
            .filter(|entry| !entry.is_dir)
            .filter_map(|entry| parse_segment_name(name, &entry.name))
            .collect();
        segments.sort_unstable();
        Ok(segments)
    }

    /// Recovers the state (see the module documentation), writes a snapshot of it, and starts
    /// the writer on a new segment. Blocking.
    pub fn open<C: JournalCodec>(
        storage: Arc<dyn Storage>,
        dir: &Path,
        name: &str,
        options: JournalOptions,
        codec: &C,
    ) -> Result<(Journal, C::State, RecoveryReport), JournalError> {
        storage
            .create_dir_all(dir)
            .map_err(io_error("create", dir))?;
        let snapshot_path = Self::snapshot_path(dir, name);
        let loaded = atomic_file::load_with_source(storage.as_ref(), &snapshot_path, |bytes| {
            let (base, payload) = frame::decode_snapshot(bytes)?;
            codec.restore(payload).map(|state| (base, state))
        })?;
        let segments = Self::segments(storage.as_ref(), dir, name)?;
        let (mut state, base, source) = match loaded {
            Some(((base, state), source)) => (state, base, Some(source)),
            None => {
                let state = codec.fresh().map_err(|reason| JournalError::Fresh {
                    name: name.to_owned(),
                    reason,
                })?;
                if !segments.is_empty() {
                    warn!(journal = %dir.display(), segments = segments.len(), "journal segments without any snapshot: replaying all of them over a fresh state");
                }
                (state, 0, None)
            }
        };
        let mut report = RecoveryReport {
            snapshot: source,
            segments_replayed: 0,
            records_replayed: 0,
            damage: None,
        };
        let to_replay: Vec<u64> = segments.iter().copied().filter(|&s| s >= base).collect();
        // After a snapshot, its base segment comes first (it may be missing only when nothing
        // follows it); without one, whatever is oldest.
        let mut expected = if source.is_some() {
            Some(base)
        } else {
            to_replay.first().copied()
        };
        for (index, &segment) in to_replay.iter().enumerate() {
            let path = Self::segment_path(dir, name, segment);
            let damage = if expected != Some(segment) {
                Some((0, Damage::BadHeader))
            } else {
                let bytes = read_all(storage.as_ref(), &path)?;
                report.segments_replayed += 1;
                let end = frame::scan_segment(&bytes, segment, |payload| {
                    codec.apply(&mut state, payload)?;
                    report.records_replayed += 1;
                    Ok(())
                });
                end.damage.map(|damage| (end.good_end, damage))
            };
            if let Some((offset, damage)) = damage {
                let skipped: Vec<PathBuf> = to_replay[index + 1..]
                    .iter()
                    .map(|&later| Self::segment_path(dir, name, later))
                    .collect();
                warn!(file = %path.display(), offset, %damage, skipped = skipped.len(), "journal damaged: recovery keeps every record before this point and nothing after it");
                report.damage = Some(DamageReport {
                    file: path,
                    offset,
                    damage,
                    skipped_segments: skipped,
                });
                break;
            }
            expected = Some(segment + 1);
        }
        let next = segments.last().copied().unwrap_or(0).max(base) + 1;
        let payload = codec.snapshot(&state);
        // A snapshot loaded from the backup means the current file is unusable: it must not
        // become the backup.
        let keep_backup = matches!(source, Some(Source::Backup));
        atomic_file::write_atomically(
            storage.as_ref(),
            &snapshot_path,
            &frame::encode_snapshot(next, &payload),
            keep_backup,
        )?;
        // The backup now is the snapshot just loaded (base `base`): older segments are unused.
        remove_segments_below(storage.as_ref(), dir, name, base.min(next))?;
        let file = writer::create_segment(storage.as_ref(), dir, name, next)?;
        info!(journal = %dir.display(), snapshot = ?report.snapshot, segments = report.segments_replayed, records = report.records_replayed, damaged = report.damage.is_some(), "journal recovered");
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                segment: next,
                ..Queue::default()
            }),
            work: Condvar::new(),
            progress: watch::Sender::new(Progress::default()),
            progress_lock: Mutex::new(()),
            progress_changed: Condvar::new(),
            writer_segment: std::sync::atomic::AtomicU64::new(next),
        });
        let handle = writer::spawn(
            shared.clone(),
            writer::Target {
                storage: storage.clone(),
                dir: dir.to_path_buf(),
                name: name.to_owned(),
                file,
                segment: next,
                position: frame::SEGMENT_HEADER_LEN,
                allocated: frame::SEGMENT_HEADER_LEN,
            },
            options.group_commit_window,
        )
        .map_err(io_error("spawn writer for", dir))?;
        let journal = Journal {
            storage,
            dir: dir.to_path_buf(),
            name: name.to_owned(),
            options,
            shared,
            snapshots: Mutex::new(Snapshots {
                current_base: next,
                last_size: payload.len() as u64,
            }),
            writer: Mutex::new(Some(handle)),
        };
        Ok((journal, state, report))
    }

    /// Queues one change. Call it under the lock that orders the owner's changes.
    pub fn append(&self, payload: &[u8]) -> Result<Ticket, JournalError> {
        if payload.is_empty() || payload.len() > RECORD_PAYLOAD_MAX {
            return Err(JournalError::TooLarge(payload.len()));
        }
        let mut queue = self.shared.queue();
        if queue.stopping {
            return Err(JournalError::Closed);
        }
        let before = match queue.chunks.last_mut() {
            Some(Chunk::Records(bytes)) => {
                let before = bytes.len();
                frame::encode_record(bytes, payload);
                bytes.len() - before
            }
            _ => {
                let mut bytes = Vec::with_capacity(4096);
                frame::encode_record(&mut bytes, payload);
                let written = bytes.len();
                queue.chunks.push(Chunk::Records(bytes));
                written
            }
        };
        queue.bytes_since_compaction += before as u64;
        queue.appended += 1;
        let ticket = Ticket(queue.appended);
        let wake = queue.writer_parked;
        drop(queue);
        if wake {
            self.shared.work.notify_one();
        }
        Ok(ticket)
    }

    /// The last ticket handed out (durable once this is).
    pub fn last_ticket(&self) -> Ticket {
        Ticket(self.shared.queue().appended)
    }

    /// Resolves once `ticket` is durable; an error when the write carrying it failed or the
    /// journal closed first.
    pub async fn durable(&self, ticket: Ticket) -> Result<(), JournalError> {
        let mut progress = self.shared.progress.subscribe();
        let outcome = progress
            .wait_for(|progress| {
                progress.durable >= ticket.0
                    || progress.closed
                    || progress
                        .failure
                        .as_ref()
                        .is_some_and(|(through, _)| *through >= ticket.0)
            })
            .await;
        match outcome {
            Err(_) => Err(JournalError::Closed),
            Ok(progress) => check(&progress, ticket),
        }
    }

    /// [`durable`](Self::durable) for threads that may block.
    pub fn wait_durable(&self, ticket: Ticket) -> Result<(), JournalError> {
        let mut guard = self
            .shared
            .progress_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            let progress = self.shared.progress.borrow().clone();
            if progress.durable >= ticket.0
                || progress.closed
                || progress
                    .failure
                    .as_ref()
                    .is_some_and(|(t, _)| *t >= ticket.0)
            {
                return check(&progress, ticket);
            }
            guard = self
                .shared
                .progress_changed
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Whether enough was appended since the last compaction to make one worthwhile.
    pub fn compaction_due(&self) -> bool {
        let appended = self.shared.queue().bytes_since_compaction;
        let last_size = lock_rank::lock(&self.snapshots, Rank::JournalSnapshots).last_size;
        appended
            >= self
                .options
                .compact_min_bytes
                .max(last_size.saturating_mul(2))
    }

    /// Compacts: `capture` takes the owner's lock, calls [`Cut::cut`] under it, copies the
    /// state and returns its snapshot payload (encoding may happen after the lock is released).
    /// The snapshot is written, and segments nothing needs any more are removed. Blocking.
    pub fn compact(
        &self,
        capture: impl FnOnce(&mut Cut<'_>) -> Vec<u8>,
    ) -> Result<(), JournalError> {
        let mut snapshots = lock_rank::lock(&self.snapshots, Rank::JournalSnapshots);
        let mut cut = Cut {
            journal: self,
            base: None,
        };
        let payload = capture(&mut cut);
        let Some(base) = cut.base else {
            return Err(JournalError::Fresh {
                name: self.name.clone(),
                reason: "compaction without a cut".to_owned(),
            });
        };
        atomic_file::write_atomically(
            self.storage.as_ref(),
            &Self::snapshot_path(&self.dir, &self.name),
            &frame::encode_snapshot(base, &payload),
            false,
        )?;
        let previous = std::mem::replace(&mut snapshots.current_base, base);
        snapshots.last_size = payload.len() as u64;
        // The backup is now the previous snapshot; a segment the writer still writes is kept.
        let writer_at = self
            .shared
            .writer_segment
            .load(std::sync::atomic::Ordering::Acquire);
        remove_segments_below(
            self.storage.as_ref(),
            &self.dir,
            &self.name,
            previous.min(writer_at),
        )
    }

    /// Writes everything queued, stops the writer and waits for it. Later appends fail.
    pub fn close(&self) {
        self.shared.queue().stopping = true;
        self.shared.work.notify_all();
        let handle = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            if handle.join().is_err() {
                warn!(journal = %self.dir.display(), "journal writer thread panicked");
            }
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.close();
    }
}

fn check(progress: &Progress, ticket: Ticket) -> Result<(), JournalError> {
    if progress.durable >= ticket.0 {
        return Ok(());
    }
    match &progress.failure {
        Some((through, reason)) if *through >= ticket.0 => {
            Err(JournalError::WriteFailed(reason.clone()))
        }
        _ => Err(JournalError::Closed),
    }
}

fn read_all(storage: &dyn Storage, path: &Path) -> Result<Vec<u8>, JournalError> {
    let file = storage.open(path, false).map_err(io_error("open", path))?;
    let length = file.length().map_err(io_error("read", path))?;
    let length = usize::try_from(length).map_err(|_| {
        io_error("read", path)(io::Error::other("journal segment too large for memory"))
    })?;
    let mut bytes = vec![0; length];
    file.read_at(0, &mut bytes)
        .map_err(io_error("read", path))?;
    Ok(bytes)
}

fn remove_segments_below(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
    below: u64,
) -> Result<(), JournalError> {
    for segment in Journal::segments(storage, dir, name)? {
        if segment < below {
            let path = Journal::segment_path(dir, name, segment);
            storage
                .remove_file(&path)
                .map_err(io_error("remove", &path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
