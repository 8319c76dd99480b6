//! `tidemark-store` owns message durability: a commit log and consume queues in RocketMQ's
//! on-disk layout (so an Apache RocketMQ store can be opened, and pull bodies are records copied
//! straight out of the log), flush policies with group commit, crash recovery, and retention.
//!
//! It never sees sockets. All file access goes through the [`io::Storage`] seam (from
//! `tidemark-storage`), which [`sim::SimStorage`] implements for crash tests.

pub mod checkpoint;
pub mod commit_log;
pub mod config;
pub mod consume_queue;
mod destroyed;
mod dispatch;
pub mod epochs;
pub mod error;
pub mod index;
mod queues;
pub mod recovery;
pub mod retention;
mod store;
pub mod sync_times;
pub mod tuning;

/// The file-system seam, re-exported: the store's modules and its users name it `io`.
pub use tidemark_storage::{io, sim};

pub use config::{FlushPolicy, StoreConfig, RECORD_OVERHEAD_MAX};
pub use consume_queue::QueueEntry;
pub use dispatch::{SCHEDULE_TOPIC, TIMER_TOPIC};
pub use error::StoreError;
pub use recovery::{RecoveryMode, RecoveryReport};
pub use retention::{disk_usage_ratio, disk_used_bytes, DiskUsage, RetentionReport};
pub use store::{Appended, Durable, GetResult, GetStatus, MessageStore, NewMessage};
pub use sync_times::SyncTimesSnapshot;
/// The STORETIMESTAMP field of a raw record (read in place by the protocol crate's layout).
pub use tidemark_protocol::message::store_timestamp_of;
pub use tuning::{StoreTuning, TuningSource};
