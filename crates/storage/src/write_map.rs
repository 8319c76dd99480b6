//! Writes through a shared memory map with the pages faulted in ahead of the writer — the idea
//! behind RocketMQ's `MappedFile` and its warm-up, with two differences: pages are faulted in
//! with `MADV_POPULATE_WRITE` (which reports a full disk as an error where a store into an
//! unbacked page would raise SIGBUS), and pages far behind the writer are unmapped again so the
//! process does not carry the whole segment in its resident set.
//!
//! A per-message `pwrite` costs a system call and the kernel's buffered-write path; a copy into
//! a page that is already mapped writable costs a `memcpy`. The faulting is done in bulk, by
//! the store's prefault thread where it keeps ahead, or by the writer itself where it does not.
//!
//! Invariant: a write goes through the map only into `[writable_from, populated_to)`, pages
//! this module faulted in writable and has not released; anything else falls back to
//! `pwrite`, so a write through the map never needs the kernel to allocate a block.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use memmap2::{Advice, MmapOptions, MmapRaw, UncheckedAdvice};

/// Boundaries of populated and released ranges are multiples of this: a multiple of every
/// page size in use (4, 16 and 64 KiB), as `madvise` wants page-aligned starts.
pub(crate) const MAP_ALIGN: u64 = 64 * 1024;

/// Pages faulted in per `madvise` call.
const POPULATE_STEP_BYTES: u64 = 256 * 1024;

/// A file mapped for writing.
#[derive(Debug)]
pub(crate) struct WriteMap {
    map: MmapRaw,
    length: u64,
    /// Start of the populated range; moves forward when pages behind the writer are released.
    writable_from: AtomicU64,
    /// End of the populated range.
    populated_to: AtomicU64,
    /// Serialises `madvise` calls so two threads do not fault the same pages in.
    advising: Mutex<()>,
}

fn align_down(value: u64) -> u64 {
    value - value % MAP_ALIGN
}

impl WriteMap {
    /// Maps all of `file` (its current length); nothing is populated yet. `from` is where the
    /// first writes will go.
    pub(crate) fn new(file: &File, from: u64) -> io::Result<WriteMap> {
        let length = file.metadata()?.len();
        let map = MmapOptions::new().map_raw(file)?;
        let start = align_down(from.min(length));
        Ok(WriteMap {
            map,
            length,
            writable_from: AtomicU64::new(start),
            populated_to: AtomicU64::new(start),
            advising: Mutex::new(()),
        })
    }

    pub(crate) fn len(&self) -> u64 {
        self.length
    }

    pub(crate) fn populated_to(&self) -> u64 {
        self.populated_to.load(Ordering::Acquire)
    }

    /// Faults pages in writable up to `to` (at least; rounded up to [`MAP_ALIGN`] and capped at
    /// the file's end), a step at a time so writers can use the first pages while the rest are
    /// faulted in. An error stops at the step that failed.
    pub(crate) fn populate(&self, to: u64) -> io::Result<()> {
        let to = to
            .checked_next_multiple_of(MAP_ALIGN)
            .unwrap_or(u64::MAX)
            .min(self.length);
        let _advising = self.advising.lock().unwrap_or_else(PoisonError::into_inner);
        let mut from = self.populated_to();
        while from < to {
            let step = (to - from).min(POPULATE_STEP_BYTES);
            self.map
                .advise_range(Advice::PopulateWrite, from as usize, step as usize)?;
            from += step;
            self.populated_to.store(from, Ordering::Release);
        }
        Ok(())
    }

    /// Unmaps the pages below `to` (the page cache keeps them, dirty or not): written bytes are
    /// not read back through the map, so holding them mapped only inflates the resident set.
    pub(crate) fn release_below(&self, to: u64) -> io::Result<()> {
        let _advising = self.advising.lock().unwrap_or_else(PoisonError::into_inner);
        let from = self.writable_from.load(Ordering::Acquire);
        let to = align_down(to).min(self.populated_to());
        if to <= from {
            return Ok(());
        }
        // Moved first: a writer that checks after this sees the range as not writable and
        // uses `pwrite`.
        self.writable_from.store(to, Ordering::Release);
        // SAFETY: MADV_DONTNEED on a shared file mapping drops page-table entries only; the
        // page cache keeps the data (dirty pages stay dirty) and a later access would fault it
        // back in. No reference into the map exists outside `write`, which never touches a
        // range below `writable_from`, moved above before this call.
        unsafe {
            self.map.unchecked_advise_range(
                UncheckedAdvice::DontNeed,
                from as usize,
                (to - from) as usize,
            )
        }
    }

    /// Copies `data` to `offset` when that range is populated; `false` (nothing written) when
    /// the caller must write another way.
    ///
    /// Callers never write overlapping ranges concurrently (the commit log's writes are
    /// serialised by the store's append lock) and never shrink the file while the map lives.
    pub(crate) fn write(&self, offset: u64, data: &[u8]) -> bool {
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return false;
        };
        if offset < self.writable_from.load(Ordering::Acquire) || end > self.populated_to() {
            return false;
        }
        // SAFETY: `offset..end` lies inside the mapping (populated_to ≤ length), the file is
        // not truncated while the map lives (the owner drops the map before any set_len that
        // shrinks it), the pages are faulted in writable, and no other thread writes or holds
        // a reference to these bytes (see above). Readers use pread, never the map.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.map.as_mut_ptr().add(offset as usize),
                data.len(),
            );
        }
        true
    }
}
