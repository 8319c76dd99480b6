//! `tidemark-storage` is the one way Tidemark touches files it must not lose:
//!
//! - [`io`] — the `Storage` / `StorageFile` seam and `FsStorage`, the real file system (with the
//!   memory-mapped write window the store's commit log uses);
//! - [`sim`] — `SimStorage`, a simulated file system that can crash at any operation and tear
//!   unsynced writes, for crash tests;
//! - [`atomic_file`] — replacing a small file (config files, offset files) so that a crash at
//!   any point leaves it or its `.bak` loadable, and loading it without mistaking a corrupt or
//!   empty file for an empty table;
//! - [`journal`] — an append-only, checksummed, group-committed journal of changes with
//!   snapshots, for state that changes in many small steps (consumer progress).
//!
//! The store, the broker (its config files) and the client (broadcasting offsets) all use it;
//! it depends on no other Tidemark crate.

pub mod atomic_file;
pub mod io;
pub mod journal;
pub mod lock_rank;
pub mod sim;
mod write_map;
