//! The journal's writer thread: takes every queued chunk, writes it at its position, syncs
//! once, and publishes the last ticket it covered. A failed write or sync is retried with the
//! same bytes at the same positions (positional writes make that idempotent), after telling the
//! waiters of the tickets it carried.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::warn;

use super::frame::{segment_header, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN};
use super::{io_error, segment_name, Chunk, JournalError, Shared};
use crate::io::{Storage, StorageFile};

/// The segment the writer appends to.
#[derive(Debug)]
pub(crate) struct Target {
    pub storage: Arc<dyn Storage>,
    pub dir: PathBuf,
    pub name: String,
    pub file: Arc<dyn StorageFile>,
    pub segment: u64,
    pub position: u64,
    /// The file's length: bytes from `position` up to it are zeros the writer put there.
    pub allocated: u64,
}

/// How far ahead of the records the writer zero-fills a segment. Syncing an append that grows
/// the file must also write the file's size (a second device write per sync); writing into
/// space that already exists needs only the data, so the size changes once per this many bytes.
pub(crate) const ZERO_AHEAD: u64 = 1 << 20;

/// Zeros from `target.allocated` to past `needed`, in the same sync as the records that need it
/// (`needed` includes the frame header of zeros that marks where the records end).
fn allocate(target: &mut Target, needed: u64, path: &Path) -> Result<(), JournalError> {
    if needed <= target.allocated {
        return Ok(());
    }
    let end = needed.div_ceil(ZERO_AHEAD) * ZERO_AHEAD + ZERO_AHEAD;
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut at = target.allocated;
    while at < end {
        let length = (end - at).min(ZEROS.len() as u64) as usize;
        target
            .file
            .write_at(at, &ZEROS[..length])
            .map_err(io_error("write", path))?;
        at += length as u64;
    }
    target.allocated = end;
    Ok(())
}

/// Creates a segment with its header, durably (file and directory entry).
pub(crate) fn create_segment(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
    segment: u64,
) -> Result<Arc<dyn StorageFile>, JournalError> {
    let path = dir.join(segment_name(name, segment));
    let file = storage
        .open(&path, true)
        .map_err(io_error("create", &path))?;
    file.set_len(0).map_err(io_error("truncate", &path))?;
    file.write_at(0, &segment_header(segment))
        .map_err(io_error("write", &path))?;
    file.sync().map_err(io_error("sync", &path))?;
    storage.sync_dir(dir).map_err(io_error("sync", dir))?;
    Ok(file)
}

pub(crate) fn spawn(
    shared: Arc<Shared>,
    target: Target,
    window: Duration,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("journal-{}", target.name))
        .spawn(move || run(&shared, target, window))
}

const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);

fn run(shared: &Shared, mut target: Target, window: Duration) {
    let mut batch: VecDeque<Chunk> = VecDeque::new();
    let mut backoff = Duration::from_millis(10);
    loop {
        let (through, stopping) = {
            let mut queue = shared.queue_on_writer();
            while queue.chunks.is_empty() && batch.is_empty() && !queue.stopping {
                queue.writer_parked = true;
                queue = shared
                    .work
                    .wait(queue)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                queue.writer_parked = false;
            }
            if !window.is_zero() && !queue.stopping {
                drop(queue);
                std::thread::sleep(window);
                queue = shared.queue_on_writer();
            }
            batch.extend(queue.chunks.drain(..));
            (queue.appended, queue.stopping)
        };
        if batch.is_empty() {
            if stopping {
                break;
            }
            continue;
        }
        match write(&mut target, &mut batch, shared) {
            Ok(()) => {
                backoff = Duration::from_millis(10);
                shared.publish(|progress| {
                    progress.durable = progress.durable.max(through);
                    progress.failure = None;
                });
            }
            Err(failure) => {
                warn!(journal = %target.dir.display(), %failure, "journal write failed; retrying");
                let reason: Arc<str> = Arc::from(failure.to_string());
                shared.publish(|progress| progress.failure = Some((through, reason)));
                if stopping {
                    break;
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
            }
        }
    }
    shared.publish(|progress| progress.closed = true);
}

/// Writes `batch` in order and syncs. Chunks leave `batch` only once durable; on an error the
/// target's position is back at the start of the first chunk still in `batch`.
fn write(
    target: &mut Target,
    batch: &mut VecDeque<Chunk>,
    shared: &Shared,
) -> Result<(), JournalError> {
    let path = target.dir.join(segment_name(&target.name, target.segment));
    let start = target.position;
    let mut position = start;
    let mut written = 0;
    let outcome = (|| {
        let needed = batch
            .iter()
            .map_while(|chunk| match chunk {
                Chunk::Records(bytes) => Some(bytes.len() as u64),
                Chunk::NewSegment(_) => None,
            })
            .sum::<u64>();
        allocate(target, start + needed + FRAME_HEADER_LEN as u64, &path)?;
        for chunk in batch.iter() {
            match chunk {
                Chunk::Records(bytes) => {
                    target
                        .file
                        .write_at(position, bytes)
                        .map_err(io_error("write", &path))?;
                    position += bytes.len() as u64;
                    written += 1;
                }
                Chunk::NewSegment(_) => break,
            }
        }
        target.file.sync().map_err(io_error("sync", &path))
    })();
    if let Err(failure) = outcome {
        target.position = start;
        return Err(failure);
    }
    target.position = position;
    batch.drain(..written);
    if let Some(Chunk::NewSegment(segment)) = batch.front() {
        let segment = *segment;
        target.file = create_segment(target.storage.as_ref(), &target.dir, &target.name, segment)?;
        target.segment = segment;
        target.position = SEGMENT_HEADER_LEN;
        target.allocated = SEGMENT_HEADER_LEN;
        shared.writer_segment.store(segment, Ordering::Release);
        batch.pop_front();
        return write(target, batch, shared);
    }
    Ok(())
}
