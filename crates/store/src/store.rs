//! `MessageStore`: the state every job shares, opening the store, appending, shutting down.
//!
//! The other jobs are `impl` blocks in the child modules: `read` (gets and lookups),
//! `durable` (group commit), `background` (the store's threads and retention passes),
//! `replication` (master chunks, slave appends) and `lifecycle` (running, stopping, closed).

mod background;
mod cleanup;
mod durable;
mod indexing;
mod lifecycle;
mod read;
mod replication;
mod visibility;

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use tidemark_protocol::message::{
    Properties, RecordRef, RecordVersion, PHYSICAL_OFFSET_POSITION, QUEUE_OFFSET_POSITION,
};

use crate::checkpoint::{Checkpoint, CheckpointFile};
use crate::commit_log::CommitLog;
use crate::config::{FlushPolicy, StoreConfig};
use crate::dispatch::DispatchRequest;
use crate::error::{io_error, Result, StoreError};
use crate::io::{FsStorage, Storage};
use crate::queues::QueueTable;
use crate::recovery::{self, RecoveryMode, RecoveryReport};
use crate::retention;
use crate::tuning::TuningSource;
pub use durable::Durable;
use durable::GroupCommit;
use lifecycle::{Lifecycle, LifecycleCell};
pub use read::{GetResult, GetStatus};
use tidemark_storage::lock_rank::{self, Rank, Ranked};

/// A message to append; the store assigns offsets and the store timestamp.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub topic: String,
    pub queue_id: i32,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Bytes,
    /// Parsed once by whoever builds the message; the store encodes them once into the record
    /// and reads `TAGS` from them.
    pub properties: Properties,
}

impl NewMessage {
    /// A record the broker writes for itself (an op record, an event, progress): queue 0, no
    /// flags, born and stored at `host`.
    pub fn broker_record(
        topic: impl Into<String>,
        host: SocketAddr,
        born_timestamp: i64,
        body: Bytes,
        properties: Properties,
    ) -> NewMessage {
        NewMessage {
            topic: topic.into(),
            queue_id: 0,
            flag: 0,
            sys_flag: 0,
            born_timestamp,
            born_host: host,
            store_host: host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body,
            properties,
        }
    }
}

/// Where an appended message landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub commit_log_offset: u64,
    pub queue_offset: i64,
    pub store_timestamp: i64,
    pub size: u32,
}

/// How long an idle background thread (group commit, prefault) or a parked appender sleeps
/// between checks; whoever has work for it wakes it at once.
const IDLE_WAIT: Duration = Duration::from_millis(100);

type Clock = dyn Fn() -> i64 + Send + Sync;

struct AppendState {
    last_store_timestamp: i64,
    /// Every record below this commit-log offset is whole and in its consume queue. Appends
    /// and replication both advance it; only a replicated record not yet complete lies above.
    replica_dispatched: u64,
}

struct Inner {
    config: StoreConfig,
    storage: Arc<dyn Storage>,
    commit_log: CommitLog,
    queues: QueueTable,
    /// Queues destroyed while their records are still in the log; recovery skips those.
    destroyed: crate::destroyed::DestroyedQueues,
    /// Which master epoch wrote which part of the log (controller mode).
    epochs: crate::epochs::EpochHistory,
    append: Mutex<AppendState>,
    group_commit: GroupCommit,
    /// The prefault thread, unparked by appenders nearing the end of the write window.
    prefault_thread: OnceLock<std::thread::Thread>,
    /// Set with that unpark: the thread acts only when asked, so an idle store maps nothing.
    prefault_wanted: AtomicBool,
    /// Queue reads show only records ending at or below this commit-log offset
    /// ([`visibility::UNFENCED`] when there is no fence).
    read_fence: std::sync::atomic::AtomicU64,
    checkpoint: CheckpointFile,
    last_checkpoint: Mutex<Checkpoint>,
    /// Message keys → commit-log offsets, built by the index thread behind the appenders.
    index: crate::index::MessageIndex,
    index_cursor: Mutex<indexing::IndexCursor>,
    /// Disk usage from the last retention pass; above the warning level appends are refused.
    disk: retention::DiskGuard,
    /// Retention and flush settings, asked at each use (they may change while the store runs).
    tuning: Arc<dyn TuningSource>,
    lifecycle: LifecycleCell,
    clock: Box<Clock>,
    _lock: Box<dyn Debug + Send + Sync>,
}

impl Inner {
    /// The append lock, ranked (`tidemark_storage::lock_rank`): taken after every broker lock
    /// a caller may hold, before the store's own.
    fn append_lock(&self) -> Ranked<'_, AppendState> {
        lock_rank::lock(&self.append, Rank::StoreAppend)
    }
}

/// The message store: a commit log indexed by consume queues.
pub struct MessageStore {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Debug for MessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStore")
            .field("root", &self.inner.config.root)
            .finish_non_exhaustive()
    }
}

fn system_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

impl MessageStore {
    /// Opens the store on the real file system.
    pub fn open(config: StoreConfig) -> Result<(MessageStore, RecoveryReport)> {
        Self::open_with(config, Arc::new(FsStorage), Box::new(system_clock_ms))
    }

    /// Opens the store on the real file system, reading retention and the flush interval from
    /// `tuning` at each use instead of keeping `config`'s (a broker's live configuration).
    pub fn open_tuned(
        config: StoreConfig,
        tuning: Arc<dyn TuningSource>,
    ) -> Result<(MessageStore, RecoveryReport)> {
        Self::open_with_tuning(
            config,
            Arc::new(FsStorage),
            Box::new(system_clock_ms),
            tuning,
        )
    }

    /// Opens the store on any storage with any clock (tests use the simulator and a fake clock).
    pub fn open_with(
        config: StoreConfig,
        storage: Arc<dyn Storage>,
        clock: Box<Clock>,
    ) -> Result<(MessageStore, RecoveryReport)> {
        let tuning = Arc::new(config.tuning());
        Self::open_with_tuning(config, storage, clock, tuning)
    }

    /// [`open_with`](Self::open_with), with a [`TuningSource`] as [`open_tuned`](Self::open_tuned)
    /// takes.
    pub fn open_with_tuning(
        config: StoreConfig,
        storage: Arc<dyn Storage>,
        clock: Box<Clock>,
        tuning: Arc<dyn TuningSource>,
    ) -> Result<(MessageStore, RecoveryReport)> {
        config.validate()?;
        let root = config.root.clone();
        storage
            .create_dir_all(&root)
            .map_err(io_error("create", &root))?;
        let lock_path = root.join("lock");
        let lock = storage
            .lock(&lock_path)
            .map_err(io_error("lock", &lock_path))?
            .ok_or(StoreError::Locked { path: root.clone() })?;
        let abort_path = root.join("abort");
        let mode = if storage.exists(&abort_path) {
            RecoveryMode::Abnormal
        } else {
            RecoveryMode::Normal
        };
        storage
            .open(&abort_path, true)
            .map_err(io_error("create", &abort_path))?;
        storage.sync_dir(&root).map_err(io_error("sync", &root))?;

        let (checkpoint_file, checkpoint) =
            CheckpointFile::open(storage.as_ref(), root.join("checkpoint"))?;
        let commit_log = CommitLog::open(
            storage.clone(),
            root.join("commitlog"),
            config.commit_log_segment_bytes,
        )?;
        let queues = QueueTable::open(
            storage.clone(),
            root.join("consumequeue"),
            config.consume_queue_entries_per_file,
        )?;
        let destroyed = crate::destroyed::DestroyedQueues::open(
            storage.clone(),
            root.join("destroyed-queues"),
        )?;
        let epochs = crate::epochs::EpochHistory::open(storage.clone(), root.join("epochs"))?;
        let index =
            crate::index::MessageIndex::open(storage.clone(), root.join("index"), config.index)
                .map_err(io_error("open", &root.join("index")))?;
        let inner = Inner {
            index,
            index_cursor: Mutex::new(indexing::IndexCursor::default()),
            config,
            storage,
            commit_log,
            queues,
            destroyed,
            epochs,
            append: Mutex::new(AppendState {
                last_store_timestamp: 0,
                replica_dispatched: 0,
            }),
            group_commit: GroupCommit::default(),
            prefault_thread: OnceLock::new(),
            prefault_wanted: AtomicBool::new(false),
            read_fence: std::sync::atomic::AtomicU64::new(visibility::UNFENCED),
            checkpoint: checkpoint_file,
            last_checkpoint: Mutex::new(checkpoint),
            disk: retention::DiskGuard::default(),
            tuning,
            lifecycle: LifecycleCell::new(),
            clock,
            _lock: lock,
        };
        let report = recovery::recover(
            &inner.commit_log,
            &inner.queues,
            &inner.destroyed,
            &inner.config,
            mode,
            &checkpoint,
        )?;
        recovery::log_report(&report);
        // An epoch that began past the recovered end began on bytes that are gone.
        let log_end = i64::try_from(inner.commit_log.written()).unwrap_or(i64::MAX);
        inner.epochs.truncate_from(log_end.saturating_add(1))?;
        // A store opened on a nearly full disk refuses writes from the start, not 10 s later.
        inner.disk.record(
            retention::disk_usage_ratio(&inner.config.root).unwrap_or(0.0),
            &inner.tuning.store_tuning(),
        );
        // The index goes on after the last record it has (everything, for a store without
        // one).
        {
            let end = inner.index.end_phy_offset();
            let mut cursor = inner
                .index_cursor
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            cursor.skip_through = end;
            cursor.next = u64::try_from(end)
                .unwrap_or(0)
                .clamp(inner.commit_log.min_offset(), inner.commit_log.written());
        }
        // Recovery dispatched every complete record.
        inner.append_lock().replica_dispatched = inner.commit_log.written();
        let inner = Arc::new(inner);
        let threads = Inner::start_threads(&inner)?;
        Ok((
            MessageStore {
                inner,
                threads: Mutex::new(threads),
            },
            report,
        ))
    }

    /// Appends one message.
    pub fn put(&self, message: &NewMessage) -> Result<Appended> {
        let mut appended = self.put_batch(std::slice::from_ref(message))?;
        appended.pop().ok_or(StoreError::Closed)
    }

    /// Appends messages of one topic and queue contiguously (SEND_BATCH_MESSAGE), with
    /// consecutive queue offsets; all or nothing. Under `Sync` flush it returns once the fsync
    /// covering them is done (see [`append_batch`](Self::append_batch) to await that instead).
    pub fn put_batch(&self, messages: &[NewMessage]) -> Result<Vec<Appended>> {
        let (appended, durable) = self.append_batch(messages)?;
        durable.wait()?;
        Ok(appended)
    }

    /// Appends as [`put_batch`](Self::put_batch) does, but returns before the messages are
    /// durable, with a [`Durable`] to wait on or await before acknowledging them. Readers see
    /// the messages at once, as RocketMQ's do.
    pub fn append_batch(&self, messages: &[NewMessage]) -> Result<(Vec<Appended>, Durable)> {
        let inner = &self.inner;
        if !inner.lifecycle.is_running() {
            return Err(StoreError::Closed);
        }
        if let Some(error) = inner.sync_failed() {
            return Err(error);
        }
        if let Some(refusal) = inner.disk.refusal(inner.tuning.as_ref()) {
            return Err(refusal);
        }
        let Some(first) = messages.first() else {
            return Ok((Vec::new(), Durable::new(None, 0)));
        };
        if messages
            .iter()
            .any(|message| message.topic != first.topic || message.queue_id != first.queue_id)
        {
            return Err(StoreError::Config(
                "a batch must target one topic and queue".into(),
            ));
        }
        // Encode outside the lock; offsets and the store timestamp are patched in under it.
        let mut encoded = BytesMut::new();
        let mut layout = Vec::with_capacity(messages.len());
        for message in messages {
            let properties = message.properties.encode();
            let record = RecordRef {
                version: if message.topic.len() > 127 {
                    RecordVersion::V2
                } else {
                    RecordVersion::V1
                },
                queue_id: message.queue_id,
                flag: message.flag,
                queue_offset: 0,
                physical_offset: 0,
                sys_flag: message.sys_flag,
                born_timestamp: message.born_timestamp,
                born_host: message.born_host,
                store_timestamp: 0,
                store_host: message.store_host,
                reconsume_times: message.reconsume_times,
                prepared_transaction_offset: message.prepared_transaction_offset,
                body: &message.body,
                topic: &message.topic,
                properties: &properties,
            };
            // RocketMQ 4.9.4+ limits the body to maxMessageSize and the record to 64 KiB more;
            // properties have their own 32767-byte limit, checked by the encoder.
            if message.body.len() > inner.config.message_size_max_bytes {
                return Err(StoreError::MessageTooLarge {
                    part: "body",
                    size: message.body.len(),
                    max: inner.config.message_size_max_bytes,
                });
            }
            let start = encoded.len();
            let size = record.encode(&mut encoded)?;
            if size > inner.config.record_size_max() {
                return Err(StoreError::MessageTooLarge {
                    part: "record",
                    size,
                    max: inner.config.record_size_max(),
                });
            }
            layout.push((
                start,
                size,
                record.store_timestamp_position(),
                &message.properties,
            ));
        }
        let total = encoded.len() as u64;
        if messages.len() > 1 && total as usize > inner.config.record_size_max() {
            return Err(StoreError::MessageTooLarge {
                part: "batch",
                size: total as usize,
                max: inner.config.record_size_max(),
            });
        }
        if total + 8 > inner.commit_log.segment_bytes() {
            return Err(StoreError::MessageTooLarge {
                part: "segment",
                size: total as usize,
                max: inner.commit_log.segment_bytes() as usize - 8,
            });
        }

        let mut queue = inner.queues.get_or_create(&first.topic, first.queue_id)?;
        let (appended, end) = {
            let mut state = inner.append_lock();
            if queue.is_destroyed() {
                // Destroyed between the lookup and the lock: its successor takes the append.
                queue = inner.queues.get_or_create(&first.topic, first.queue_id)?;
            }
            let mut queue_offset = queue.write_end();
            let store_timestamp = (inner.clock)().max(state.last_store_timestamp);
            let base = inner.commit_log.reserve(total)?;
            let mut appended = Vec::with_capacity(layout.len());
            let written = (|| {
                for (start, size, store_timestamp_at, properties) in &layout {
                    let offset = base + *start as u64;
                    let record = &mut encoded[*start..*start + *size];
                    record[QUEUE_OFFSET_POSITION..QUEUE_OFFSET_POSITION + 8]
                        .copy_from_slice(&queue_offset.to_be_bytes());
                    record[PHYSICAL_OFFSET_POSITION..PHYSICAL_OFFSET_POSITION + 8]
                        .copy_from_slice(&(offset as i64).to_be_bytes());
                    record[*store_timestamp_at..*store_timestamp_at + 8]
                        .copy_from_slice(&store_timestamp.to_be_bytes());
                    // The queue entry is written first: it is invisible until published, and
                    // the commit-log write below is the commit point.
                    let request = DispatchRequest {
                        topic: &first.topic,
                        queue_id: first.queue_id,
                        properties,
                        store_timestamp,
                        commit_log_offset: offset,
                        size: *size as u32,
                    };
                    queue.put(queue_offset, request.queue_entry(&inner.config))?;
                    appended.push(Appended {
                        commit_log_offset: offset,
                        queue_offset,
                        store_timestamp,
                        size: *size as u32,
                    });
                    queue_offset += 1;
                }
                inner.commit_log.write(base, &encoded)
            })();
            if let Err(error) = written {
                queue.abandon_unpublished();
                return Err(error);
            }
            inner.commit_log.publish(base + total);
            queue.publish(queue_offset);
            state.last_store_timestamp = store_timestamp;
            // A master that becomes a slave (controller mode) replicates from here on.
            state.replica_dispatched = base + total;
            (appended, base + total)
        };
        inner.ask_for_prefault(end);
        let durable = Durable::new(
            (inner.config.flush == FlushPolicy::Sync).then(|| inner.clone()),
            end,
        );
        Ok((appended, durable))
    }

    /// Syncs everything now (commit log, consume queues, checkpoint).
    pub fn flush(&self) -> Result<()> {
        self.inner.flush_all()
    }

    /// Stops the flush thread, syncs everything and removes the `abort` marker.
    pub fn shutdown(&self) -> Result<()> {
        if self.inner.lifecycle.advance(Lifecycle::Stopping) != Lifecycle::Running {
            return Ok(());
        }
        self.stop_threads();
        // Whatever the index thread had not got to yet.
        if let Err(error) = self.inner.index_catch_up() {
            tracing::warn!(%error, "indexing the last messages at shutdown failed; the next start indexes them");
        }
        // Serialise with in-flight appends before the final flush.
        drop(self.inner.append_lock());
        self.inner.flush_all()?;
        let abort = self.inner.config.root.join("abort");
        self.inner
            .storage
            .remove_file(&abort)
            .map_err(io_error("remove", &abort))?;
        self.inner
            .storage
            .sync_dir(&self.inner.config.root)
            .map_err(io_error("sync", &self.inner.config.root))
    }
}

impl Drop for MessageStore {
    /// Dropping without `shutdown` behaves like a crash as far as the files go (the abort
    /// marker stays), but the flush thread is stopped.
    fn drop(&mut self) {
        if self.inner.lifecycle.get() != Lifecycle::Closed {
            self.stop_threads();
        }
    }
}
