//! The store's tests: behaviour, crashes, the model, retention, replication and Java's layout.
//!
//! One test binary for the whole crate (each file a module), so the suite links once
//! instead of once per file. Run one file's tests with a filter on its module:
//! `cargo test -p <crate> --test store -- <module>::`.

mod common;

mod behaviour;
mod crash;
mod destroy;
mod elections;
mod index;
mod java_layout;
mod model;
mod process_kill;
mod read_fence;
mod replication;
mod retention;
mod torn_tail;
