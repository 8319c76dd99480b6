//! `MessageStore`: appends, reads, flushing and the lifecycle around them.

mod lifecycle;

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use tidemark_protocol::message::{
    find_property, magic_code_of, property, store_timestamp_of, tags_code, total_size_of,
    DecodeOptions, MessageRecord, RecordRef, RecordVersion, BLANK_MAGIC_CODE,
    PHYSICAL_OFFSET_POSITION, QUEUE_OFFSET_POSITION,
};
use tracing::{error, warn};

use crate::checkpoint::{Checkpoint, CheckpointFile, DurableOffsets};
use crate::commit_log::{CommitLog, END_OF_SEGMENT_MIN_BYTES};
use crate::config::{FlushPolicy, StoreConfig};
use crate::consume_queue::{ConsumeQueue, QueueEntry};
use crate::error::{Result, StoreError};
use crate::io::{FsStorage, Storage};
use crate::recovery::{self, RecoveryMode, RecoveryReport, ScannedRecord};
use crate::retention::{self, DiskUsage, RetentionReport};
use lifecycle::{Lifecycle, LifecycleCell};

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
    /// The encoded properties string, as it arrives in a send request.
    pub properties: String,
}

/// Where an appended message landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub commit_log_offset: u64,
    pub queue_offset: i64,
    pub store_timestamp: i64,
    pub size: u32,
}

/// Durability of an append: under `Sync` flush, done when the fsync covering the appended
/// bytes is; under `Async`, at once. [`wait`](Self::wait) blocks the thread; awaiting it (it is
/// a future) lets an async caller hold thousands of appends in flight on a few threads, which
/// is what makes group commit cheap.
#[must_use = "an append is not durable until its Durable resolves"]
pub struct Durable {
    /// `None` when nothing needs waiting for.
    inner: Option<Arc<Inner>>,
    end: u64,
}

impl Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("end", &self.end)
            .field("waits", &self.inner.is_some())
            .finish()
    }
}

impl Durable {
    /// Blocks until the appended bytes are durable (or the sync failed).
    pub fn wait(self) -> Result<()> {
        match &self.inner {
            Some(inner) => inner.wait_durable(self.end),
            None => Ok(()),
        }
    }
}

impl Future for Durable {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let Some(inner) = &self.inner else {
            return Poll::Ready(Ok(()));
        };
        if let Some(outcome) = inner.durable_outcome(self.end) {
            return Poll::Ready(outcome);
        }
        inner.register_sync_waiter(self.end, SyncWaiter::Task(cx.waker().clone()));
        // The sync may have finished between the check and registering.
        match inner.durable_outcome(self.end) {
            Some(outcome) => Poll::Ready(outcome),
            None => Poll::Pending,
        }
    }
}

/// The outcome of a read by queue offset (RocketMQ's `GetMessageStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetStatus {
    Found,
    /// Entries were scanned but none matched the filter.
    NoMatchedMessage,
    /// The entries point at commit-log data already deleted.
    MessageWasRemoving,
    /// The consume-queue file holding the offset is gone.
    OffsetFoundNull,
    /// `offset > max`.
    OffsetOverflowBadly,
    /// `offset == max`: nothing new yet.
    OffsetOverflowOne,
    /// `offset < min`.
    OffsetTooSmall,
    /// The queue has no consume queue at all.
    NoMatchedLogicQueue,
    /// The queue exists but is empty (`max == 0`).
    NoMessageInQueue,
}

/// Messages read from a queue, as raw stored records.
#[derive(Debug, Clone)]
pub struct GetResult {
    pub status: GetStatus,
    /// Where the next read of this queue should start.
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub messages: Vec<Bytes>,
}

/// How many more durable appenders each woken appender wakes (see `Inner::synced_unwoken`).
const WAKE_FAN_OUT: usize = 2;

/// How long an idle background thread (group commit, prefault) or a parked appender sleeps
/// between checks; whoever has work for it wakes it at once.
const IDLE_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Consume-queue entries scanned per read at most when filtering (Java: 16000 bytes of units).
const FILTER_SCAN_ENTRIES_MAX: usize = 800;

type QueueKey = (String, i32);
/// Consume queues by topic, then queue id (nested so lookups by `&str` allocate nothing).
type QueueTable = HashMap<String, HashMap<i32, Arc<ConsumeQueue>>>;
type Clock = dyn Fn() -> i64 + Send + Sync;

struct AppendState {
    last_store_timestamp: i64,
    /// Replication (slave): records below this commit-log offset are in the consume queues.
    replica_dispatched: u64,
}

/// Who waits for the commit log to be durable up to an offset.
enum SyncWaiter {
    /// A thread blocked in [`Durable::wait`].
    Thread(std::thread::Thread),
    /// A task awaiting [`Durable`].
    Task(Waker),
}

struct Inner {
    config: StoreConfig,
    storage: Arc<dyn Storage>,
    commit_log: CommitLog,
    queues: RwLock<QueueTable>,
    append: Mutex<AppendState>,
    /// Why a commit-log sync failed, once one has: nothing is acknowledged after it.
    sync_failure: Mutex<Option<String>>,
    /// Appenders parked until the commit log is durable up to their end offset. Parking (not a
    /// condition variable) lets the group-commit thread wake exactly the satisfied appenders
    /// without them queueing on a mutex on the way out.
    sync_waiters: Mutex<Vec<(u64, SyncWaiter)>>,
    /// Appenders whose bytes are durable but who have not been woken yet. Waking a thread costs
    /// a system call and an inter-processor interrupt; the group-commit thread wakes one and
    /// goes back to syncing, and every woken appender wakes [`WAKE_FAN_OUT`] more on its way
    /// out, so the wake-ups of a large group run in parallel with the next sync.
    synced_unwoken: Mutex<Vec<std::thread::Thread>>,
    /// The group-commit thread, unparked by appenders with bytes to sync.
    group_commit_thread: std::sync::OnceLock<std::thread::Thread>,
    /// The prefault thread, unparked by appenders nearing the end of the write window.
    prefault_thread: std::sync::OnceLock<std::thread::Thread>,
    /// Set with that unpark: the thread acts only when asked, so an idle store maps nothing.
    prefault_wanted: AtomicBool,
    checkpoint: CheckpointFile,
    last_checkpoint: Mutex<Checkpoint>,
    /// Disk usage from the last retention pass; above the warning level appends are refused.
    disk: retention::DiskGuard,
    lifecycle: LifecycleCell,
    clock: Box<Clock>,
    _lock: Box<dyn Debug + Send + Sync>,
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

fn io_error<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |error| StoreError::io(op, path, error)
}

/// The topic delayed messages wait in, one queue per delay level (RocketMQ's
/// `RMQ_SYS_SCHEDULE_TOPIC`).
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// The consume-queue tags code of a record: its tag's hash, or for the schedule topic the
/// time it is due (store time + its level's delay), which the schedule service scans by.
fn queue_tags_code(
    config: &StoreConfig,
    topic: &str,
    queue_id: i32,
    tags: Option<&str>,
    store_timestamp: i64,
) -> i64 {
    if topic == SCHEDULE_TOPIC {
        if let Some(delay) = usize::try_from(queue_id)
            .ok()
            .and_then(|level| config.delay_levels_ms.get(level))
        {
            return store_timestamp + delay;
        }
    }
    tags_code(tags)
}

impl MessageStore {
    /// Opens the store on the real file system.
    pub fn open(config: StoreConfig) -> Result<(MessageStore, RecoveryReport)> {
        Self::open_with(config, Arc::new(FsStorage), Box::new(system_clock_ms))
    }

    /// Opens the store on any storage with any clock (tests use the simulator and a fake clock).
    pub fn open_with(
        config: StoreConfig,
        storage: Arc<dyn Storage>,
        clock: Box<Clock>,
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
        let queues = open_queues(
            &storage,
            &root.join("consumequeue"),
            config.consume_queue_entries_per_file,
        )?;
        let inner = Inner {
            config,
            storage,
            commit_log,
            queues: RwLock::new(queues),
            append: Mutex::new(AppendState {
                last_store_timestamp: 0,
                replica_dispatched: 0,
            }),
            sync_failure: Mutex::new(None),
            sync_waiters: Mutex::new(Vec::new()),
            synced_unwoken: Mutex::new(Vec::new()),
            group_commit_thread: std::sync::OnceLock::new(),
            prefault_thread: std::sync::OnceLock::new(),
            prefault_wanted: AtomicBool::new(false),
            checkpoint: checkpoint_file,
            last_checkpoint: Mutex::new(checkpoint),
            disk: retention::DiskGuard::default(),
            lifecycle: LifecycleCell::new(),
            clock,
            _lock: lock,
        };
        let report = inner.recover(mode, &checkpoint)?;
        recovery::log_report(&report);
        // A store opened on a nearly full disk refuses writes from the start, not 10 s later.
        inner.disk.record(
            retention::disk_usage_ratio(&inner.config.root).unwrap_or(0.0),
            &inner.config,
        );
        // Recovery dispatched every complete record.
        inner
            .append
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replica_dispatched = inner.commit_log.written();
        let inner = Arc::new(inner);
        let mut threads = Vec::new();
        let spawn = |name: &str, body: fn(&Inner)| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || body(&inner))
                .map_err(|error| StoreError::io("spawn thread", PathBuf::new(), error))
        };
        threads.push(spawn("tidemark-store-flush", Inner::flush_loop)?);
        if let FlushPolicy::Async { .. } = inner.config.flush {
            // Not under Sync: every page faulted in ahead is a dirty page of zeros that the
            // next group commit has to write too, which costs more than the faults it saves.
            let thread = spawn("tidemark-store-prefault", Inner::prefault_loop)?;
            let _ = inner.prefault_thread.set(thread.thread().clone());
            threads.push(thread);
        }
        if inner.config.flush == FlushPolicy::Sync {
            let thread = spawn("tidemark-store-group-commit", Inner::group_commit_loop)?;
            let _ = inner.group_commit_thread.set(thread.thread().clone());
            threads.push(thread);
        }
        Ok((
            MessageStore {
                inner,
                threads: Mutex::new(threads),
            },
            report,
        ))
    }

    /// Stops the background threads (idempotent).
    fn stop_threads(&self) {
        self.inner.lifecycle.advance(Lifecycle::Stopping);
        for thread in [
            self.inner.group_commit_thread.get(),
            self.inner.prefault_thread.get(),
        ]
        .into_iter()
        .flatten()
        {
            thread.unpark();
        }
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for thread in threads {
            let _ = thread.join();
        }
        self.inner.lifecycle.advance(Lifecycle::Closed);
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
        if let Some(reason) = inner.sync_failure().clone() {
            return Err(StoreError::SyncFailed { reason });
        }
        if let Some(refusal) = inner.disk.refusal(&inner.config) {
            return Err(refusal);
        }
        let Some(first) = messages.first() else {
            return Ok((
                Vec::new(),
                Durable {
                    inner: None,
                    end: 0,
                },
            ));
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
                properties: &message.properties,
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
                find_property(&message.properties, property::TAGS),
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

        let queue = inner.queue(&first.topic, first.queue_id)?;
        let (appended, end) = {
            let mut state = inner.append.lock().unwrap_or_else(PoisonError::into_inner);
            let mut queue_offset = queue.write_end();
            let store_timestamp = (inner.clock)().max(state.last_store_timestamp);
            let base = inner.commit_log.reserve(total)?;
            let mut appended = Vec::with_capacity(layout.len());
            let written = (|| {
                for (start, size, store_timestamp_at, tags) in &layout {
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
                    queue.put(
                        queue_offset,
                        QueueEntry {
                            commit_log_offset: offset as i64,
                            size: *size as i32,
                            tags_code: queue_tags_code(
                                &inner.config,
                                &first.topic,
                                first.queue_id,
                                *tags,
                                store_timestamp,
                            ),
                        },
                    )?;
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
            (appended, base + total)
        };
        inner.ask_for_prefault(end);
        let durable = Durable {
            inner: (inner.config.flush == FlushPolicy::Sync).then(|| inner.clone()),
            end,
        };
        Ok((appended, durable))
    }

    /// Reads up to `max_count` messages (and, past the first, at most `max_bytes`) from a
    /// queue, keeping those whose tags code passes `filter`.
    pub fn get(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        filter: impl Fn(i64) -> bool,
    ) -> Result<GetResult> {
        let inner = &self.inner;
        let Some(queue) = inner.existing_queue(topic, queue_id) else {
            return Ok(GetResult {
                status: GetStatus::NoMatchedLogicQueue,
                next_begin_offset: 0,
                min_offset: 0,
                max_offset: 0,
                messages: Vec::new(),
            });
        };
        let (min, max) = (queue.min_offset(), queue.max_offset());
        let result = |status, next| GetResult {
            status,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
            messages: Vec::new(),
        };
        if max == 0 {
            return Ok(result(GetStatus::NoMessageInQueue, 0));
        }
        if offset < min {
            return Ok(result(GetStatus::OffsetTooSmall, min));
        }
        if offset == max {
            return Ok(result(GetStatus::OffsetOverflowOne, offset));
        }
        if offset > max {
            // Java sends a consumer past the end of a queue that starts at 0 back to 0.
            return Ok(result(
                GetStatus::OffsetOverflowBadly,
                if min == 0 { min } else { max },
            ));
        }
        let scan = max_count.max(FILTER_SCAN_ENTRIES_MAX);
        let Some(entries) = queue.read(offset, scan)? else {
            return Ok(result(
                GetStatus::OffsetFoundNull,
                queue.next_file_offset(offset),
            ));
        };
        let commit_log_min = inner.commit_log.min_offset();
        let mut messages = Vec::new();
        let mut bytes = 0usize;
        let mut scanned = 0i64;
        let mut removed = false;
        for entry in entries {
            if messages.len() >= max_count {
                break;
            }
            if entry.is_hole() || entry.size <= 0 {
                scanned += 1;
                continue;
            }
            if !messages.is_empty() && bytes + entry.size as usize > max_bytes {
                break;
            }
            scanned += 1;
            if (entry.commit_log_offset as u64) < commit_log_min {
                removed = true;
                continue;
            }
            if !filter(entry.tags_code) {
                continue;
            }
            match inner
                .commit_log
                .read(entry.commit_log_offset as u64, entry.size as usize)?
            {
                Some(record) => {
                    bytes += record.len();
                    messages.push(record);
                }
                None => removed = true,
            }
        }
        let status = if !messages.is_empty() {
            GetStatus::Found
        } else if removed {
            GetStatus::MessageWasRemoving
        } else {
            GetStatus::NoMatchedMessage
        };
        Ok(GetResult {
            status,
            next_begin_offset: offset + scanned,
            min_offset: min,
            max_offset: max,
            messages,
        })
    }

    /// The record stored at a commit-log offset.
    pub fn read_record(&self, commit_log_offset: u64) -> Result<Option<Bytes>> {
        self.inner.commit_log.read_record(commit_log_offset)
    }

    pub fn min_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner
            .existing_queue(topic, queue_id)
            .map_or(0, |queue| queue.min_offset())
    }

    /// The next offset to be written (number of entries), 0 for an unknown queue.
    pub fn max_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner
            .existing_queue(topic, queue_id)
            .map_or(0, |queue| queue.max_offset())
    }

    /// Every queue the store has, as (topic, queue id).
    pub fn queues(&self) -> Vec<(String, i32)> {
        let mut keys: Vec<QueueKey> = self
            .inner
            .all_queues()
            .iter()
            .map(|queue| (queue.topic.clone(), queue.queue_id))
            .collect();
        keys.sort();
        keys
    }

    /// The consume-queue entry at `offset`, if published.
    pub fn queue_entry(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
    ) -> Result<Option<QueueEntry>> {
        let Some(queue) = self.inner.existing_queue(topic, queue_id) else {
            return Ok(None);
        };
        Ok(queue
            .read(offset, 1)?
            .and_then(|entries| entries.first().copied()))
    }

    /// The store time of the message at a queue offset.
    pub fn store_timestamp_at(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
    ) -> Result<Option<i64>> {
        let Some(entry) = self.queue_entry(topic, queue_id, offset)? else {
            return Ok(None);
        };
        if entry.is_hole() {
            return Ok(None);
        }
        let Some(record) = self
            .inner
            .commit_log
            .read(entry.commit_log_offset as u64, entry.size as usize)?
        else {
            return Ok(None);
        };
        Ok(store_timestamp_of(&record))
    }

    /// The first offset whose message was stored at or after `timestamp` (5.x's LOWER
    /// boundary); the max offset when every message is older, the min offset when every
    /// message is newer.
    pub fn offset_by_timestamp(&self, topic: &str, queue_id: i32, timestamp: i64) -> Result<i64> {
        let (mut low, mut high) = (
            self.min_offset(topic, queue_id),
            self.max_offset(topic, queue_id),
        );
        // Invariant: messages below `low` are older than `timestamp`, those at or above `high` are not.
        while low < high {
            let middle = low + (high - low) / 2;
            match self.store_timestamp_at(topic, queue_id, middle)? {
                Some(stored) if stored < timestamp => low = middle + 1,
                Some(_) => high = middle,
                // A hole or a removed record: step over it.
                None => low = middle + 1,
            }
        }
        Ok(low)
    }

    /// Store time of the oldest message still in a queue, if any.
    pub fn earliest_store_timestamp(&self, topic: &str, queue_id: i32) -> Result<Option<i64>> {
        let (min, max) = (
            self.min_offset(topic, queue_id),
            self.max_offset(topic, queue_id),
        );
        for offset in min..max.min(min + 16) {
            if let Some(stored) = self.store_timestamp_at(topic, queue_id, offset)? {
                return Ok(Some(stored));
            }
        }
        Ok(None)
    }

    /// Replication, master side: up to `max_bytes` of the commit log from `from`, never across
    /// a segment end (a slave writes them at the same offsets). `None` when nothing is new;
    /// an error when `from` is no longer retained.
    pub fn replication_chunk(&self, from: u64, max_bytes: usize) -> Result<Option<Bytes>> {
        let log = &self.inner.commit_log;
        let end = log.written();
        if from >= end {
            return Ok(None);
        }
        let segment_end = from - from % log.segment_bytes() + log.segment_bytes();
        let length = (end.min(segment_end) - from).min(max_bytes as u64) as usize;
        log.read(from, length)?
            .map(Some)
            .ok_or_else(|| StoreError::ReplicationGap {
                expected: log.min_offset(),
                got: from,
            })
    }

    /// Replication, slave side: appends bytes copied from the master's commit log at `offset`
    /// — the end of this log, or anywhere when this log is empty — and puts every record they
    /// complete into its consume queue, exactly as the master did. Returns the new end.
    pub fn append_replicated(&self, offset: u64, bytes: &[u8]) -> Result<u64> {
        let inner = &self.inner;
        if !inner.lifecycle.is_running() {
            return Err(StoreError::Closed);
        }
        let mut state = inner.append.lock().unwrap_or_else(PoisonError::into_inner);
        let end = inner.commit_log.written();
        let empty = inner.commit_log.segments().is_empty();
        if offset != end && !empty {
            return Err(StoreError::ReplicationGap {
                expected: end,
                got: offset,
            });
        }
        if empty {
            state.replica_dispatched = offset;
        }
        let new_end = inner.commit_log.write_replicated(offset, bytes)?;
        inner.dispatch_replicated(&mut state)?;
        drop(state);
        inner.ask_for_prefault(new_end);
        Ok(new_end)
    }

    /// Commit-log positions: (min, end of written data, durable end).
    pub fn commit_log_positions(&self) -> (u64, u64, u64) {
        let log = &self.inner.commit_log;
        (log.min_offset(), log.written(), log.flushed())
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
        // Serialise with in-flight appends before the final flush.
        drop(
            self.inner
                .append
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
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

    /// One retention pass with an explicit time, hour of day and disk usage (tests and tools);
    /// the usage also moves the write refusal, as a measured one does. The store's background
    /// task runs one every `retention_check_interval_ms` with the store clock's UTC hour and
    /// the disk usage measured before and after every deletion.
    pub fn delete_expired(
        &self,
        now_ms: i64,
        hour_of_day: u32,
        disk_usage_ratio: f64,
    ) -> Result<RetentionReport> {
        let inner = &self.inner;
        inner.disk.record(disk_usage_ratio, &inner.config);
        retention::delete_expired(
            &inner.commit_log,
            &inner.config,
            inner.all_queues(),
            now_ms,
            hour_of_day,
            &mut || disk_usage_ratio,
        )
    }

    /// The disk usage the last retention pass measured, and whether appends are refused.
    pub fn disk_usage(&self) -> DiskUsage {
        self.inner.disk.usage()
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

fn open_queues(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    entries_per_file: u64,
) -> Result<QueueTable> {
    let mut queues = QueueTable::new();
    for topic in storage.list(dir).map_err(io_error("list", dir))? {
        if !topic.is_dir {
            continue;
        }
        let topic_dir = dir.join(&topic.name);
        for queue in storage
            .list(&topic_dir)
            .map_err(io_error("list", &topic_dir))?
        {
            let Ok(queue_id) = queue.name.parse::<i32>() else {
                continue;
            };
            if !queue.is_dir {
                continue;
            }
            let consume_queue = ConsumeQueue::open(
                storage.clone(),
                topic_dir.join(&queue.name),
                topic.name.clone(),
                queue_id,
                entries_per_file,
            )?;
            queues
                .entry(topic.name.clone())
                .or_default()
                .insert(queue_id, Arc::new(consume_queue));
        }
    }
    Ok(queues)
}

impl Inner {
    fn sync_failure(&self) -> MutexGuard<'_, Option<String>> {
        self.sync_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn existing_queue(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)?
            .get(&queue_id)
            .cloned()
    }

    fn all_queues(&self) -> Vec<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .flat_map(|queues| queues.values().cloned())
            .collect()
    }

    /// Indexes the replicated records that are complete: from the dispatch cursor to the last
    /// whole record below the log's end. Blank records end their segment.
    fn dispatch_replicated(&self, state: &mut AppendState) -> Result<()> {
        let log = &self.commit_log;
        let end = log.written();
        let segment_bytes = log.segment_bytes();
        let mut position = state.replica_dispatched;
        while position < end {
            let left_in_segment = segment_bytes - position % segment_bytes;
            if left_in_segment < END_OF_SEGMENT_MIN_BYTES {
                position += left_in_segment;
                continue;
            }
            let Some((size, magic)) = log
                .read(position, 8)?
                .and_then(|head| Some((total_size_of(&head)?, magic_code_of(&head)?)))
            else {
                break;
            };
            if magic == BLANK_MAGIC_CODE {
                position += left_in_segment;
                continue;
            }
            if size < 8 || size as u64 > left_in_segment {
                return Err(StoreError::Unrecoverable {
                    reason: format!("replicated record at {position} has size {size}"),
                });
            }
            let Some(bytes) = log.read(position, size as usize)? else {
                break;
            };
            let (record, _) = MessageRecord::decode(&bytes, 0, DecodeOptions::default())?;
            if record.physical_offset != position as i64 {
                return Err(StoreError::Unrecoverable {
                    reason: format!(
                        "replicated record at {position} names offset {}",
                        record.physical_offset
                    ),
                });
            }
            let queue = self.queue(&record.topic, record.queue_id)?;
            queue.put(
                record.queue_offset,
                QueueEntry {
                    commit_log_offset: position as i64,
                    size,
                    tags_code: queue_tags_code(
                        &self.config,
                        &record.topic,
                        record.queue_id,
                        record.tags(),
                        record.store_timestamp,
                    ),
                },
            )?;
            queue.publish(record.queue_offset + 1);
            state.last_store_timestamp = state.last_store_timestamp.max(record.store_timestamp);
            position += size as u64;
        }
        state.replica_dispatched = position;
        Ok(())
    }

    fn queue(&self, topic: &str, queue_id: i32) -> Result<Arc<ConsumeQueue>> {
        if let Some(queue) = self.existing_queue(topic, queue_id) {
            return Ok(queue);
        }
        let mut queues = self.queues.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queues.get(topic).and_then(|queues| queues.get(&queue_id)) {
            return Ok(queue.clone());
        }
        let dir = self
            .config
            .root
            .join("consumequeue")
            .join(topic)
            .join(queue_id.to_string());
        let queue = Arc::new(ConsumeQueue::open(
            self.storage.clone(),
            dir,
            topic.to_owned(),
            queue_id,
            self.config.consume_queue_entries_per_file,
        )?);
        queues
            .entry(topic.to_owned())
            .or_default()
            .insert(queue_id, queue.clone());
        Ok(queue)
    }

    /// Whether the commit log is durable up to `end`: `Some` when the wait is over (durable,
    /// or a failed sync), `None` to keep waiting. At shutdown the group-commit thread may be
    /// gone, so the caller's bytes are synced here.
    fn durable_outcome(&self, end: u64) -> Option<Result<()>> {
        let failure = self.sync_failure();
        if let Some(reason) = &*failure {
            return Some(Err(StoreError::SyncFailed {
                reason: reason.clone(),
            }));
        }
        if self.commit_log.flushed() >= end {
            return Some(Ok(()));
        }
        if !self.lifecycle.is_running() {
            drop(failure);
            return Some(self.commit_log.sync_to(end));
        }
        None
    }

    /// Registers a waiter for durability up to `end` and makes sure the group-commit thread
    /// is awake to sync it.
    fn register_sync_waiter(&self, end: u64, waiter: SyncWaiter) {
        self.sync_waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((end, waiter));
        if let Some(thread) = self.group_commit_thread.get() {
            thread.unpark();
        }
    }

    /// Blocks until the commit log is durable up to `end` (Sync flush). The group-commit
    /// thread syncs whatever was written while its previous sync ran, so concurrent appends
    /// share one fsync.
    fn wait_durable(&self, end: u64) -> Result<()> {
        loop {
            if let Some(outcome) = self.durable_outcome(end) {
                return outcome;
            }
            self.register_sync_waiter(end, SyncWaiter::Thread(std::thread::current()));
            // Re-checked on wake-up: parking can return early, and the sync may have finished
            // between the check above and registering.
            if self.commit_log.flushed() < end {
                std::thread::park_timeout(IDLE_WAIT);
            }
            if self.commit_log.flushed() >= end {
                self.wake_unwoken(WAKE_FAN_OUT);
            }
        }
    }

    /// Wakes up to `count` appenders whose bytes are durable.
    fn wake_unwoken(&self, count: usize) {
        let threads: Vec<std::thread::Thread> = {
            let mut unwoken = self
                .synced_unwoken
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let keep = unwoken.len().saturating_sub(count);
            unwoken.split_off(keep)
        };
        for thread in threads {
            thread.unpark();
        }
    }

    /// Wakes the appenders whose bytes are now durable; all of them after a failure or at
    /// shutdown (they find out which on waking).
    fn wake_synced(&self, wake_all: bool) {
        let flushed = self.commit_log.flushed();
        let mut satisfied = Vec::new();
        let mut tasks = Vec::new();
        self.sync_waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(end, waiter)| {
                let done = wake_all || *end <= flushed;
                if done {
                    match waiter {
                        SyncWaiter::Thread(thread) => satisfied.push(thread.clone()),
                        SyncWaiter::Task(waker) => tasks.push(waker.clone()),
                    }
                }
                !done
            });
        // A task wake-up only queues the task on its runtime: cheap enough to do them all.
        for waker in tasks {
            waker.wake();
        }
        if satisfied.is_empty() {
            return;
        }
        self.synced_unwoken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .append(&mut satisfied);
        // Each woken appender wakes more (see `synced_unwoken`); after a failure or at
        // shutdown nobody may be left asleep, so wake them all here.
        self.wake_unwoken(if wake_all { usize::MAX } else { 1 });
    }

    fn group_commit_loop(&self) {
        loop {
            let failed = self.sync_failure().is_some();
            let stopping = !self.lifecycle.is_running();
            let target = self.commit_log.written();
            if !failed && target > self.commit_log.flushed() {
                if let Err(error) = self.commit_log.sync_to(target) {
                    // After a failed fsync the page cache may have dropped the data
                    // (fsyncgate): nothing can be promised durable until the store is reopened.
                    error!(%error, "commit-log sync failed; refusing further writes");
                    *self.sync_failure() = Some(error.to_string());
                    self.wake_synced(true);
                    continue;
                }
                self.wake_synced(false);
                continue;
            }
            if stopping {
                // Waiters left are synced by themselves (see `durable_outcome`).
                self.wake_synced(true);
                break;
            }
            std::thread::park_timeout(IDLE_WAIT);
        }
    }

    /// Wakes the prefault thread (if there is one) when appends ending at `end` are nearing
    /// the end of the write window.
    fn ask_for_prefault(&self, end: u64) {
        if !self.commit_log.wants_prefault(end) {
            return;
        }
        if let Some(thread) = self.prefault_thread.get() {
            self.prefault_wanted.store(true, Ordering::Release);
            thread.unpark();
        }
    }

    /// Keeps the commit log's write window ahead of the appenders (see
    /// [`CommitLog::prefault`]) whenever they ask.
    fn prefault_loop(&self) {
        let mut failing = false;
        loop {
            std::thread::park_timeout(IDLE_WAIT);
            if !self.lifecycle.is_running() {
                break;
            }
            if !self.prefault_wanted.swap(false, Ordering::AcqRel) {
                continue;
            }
            match self.commit_log.prefault() {
                Ok(()) => failing = false,
                // Appends go on with pwrite, which reports a full disk to the caller; say it
                // here once, not on every wake-up.
                Err(error) if !failing => {
                    failing = true;
                    warn!(%error, "cannot get commit-log pages ready ahead of the writer");
                }
                Err(_) => {}
            }
        }
    }

    fn flush_all(&self) -> Result<()> {
        self.commit_log.sync_to(self.commit_log.written())?;
        // Every record below `dispatched` has its queue entry written (entries go first).
        let dispatched = self.commit_log.written();
        let queues = self.all_queues();
        for queue in queues {
            queue.sync()?;
        }
        let mut last = self
            .last_checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = (self.clock)();
        let checkpoint = Checkpoint {
            physic_msg_timestamp: now,
            logics_msg_timestamp: now,
            index_msg_timestamp: last.index_msg_timestamp,
            durable: Some(DurableOffsets {
                commit_log: self.commit_log.flushed(),
                consume_queues: dispatched,
            }),
        };
        if checkpoint.durable != last.durable {
            self.checkpoint.write(&checkpoint)?;
            *last = checkpoint;
        }
        Ok(())
    }

    fn flush_loop(&self) {
        let interval = self.config.background_flush_interval();
        let mut last_retention = (self.clock)();
        while self.lifecycle.sleep_while_running(interval) {
            if let Err(error) = self.flush_all() {
                warn!(%error, "background flush failed; will retry");
            }
            let now = (self.clock)();
            if now - last_retention >= self.config.retention_check_interval_ms as i64 {
                last_retention = now;
                self.retention_pass(now);
            }
        }
    }

    /// The periodic retention pass: UTC hour from the store clock, disk usage measured on the
    /// store's file system (0 where it cannot be measured, as on simulated storage).
    fn retention_pass(&self, now: i64) {
        let mut measure = || {
            let usage = retention::disk_usage_ratio(&self.config.root).unwrap_or(0.0);
            self.disk.record(usage, &self.config);
            usage
        };
        let queues = self.all_queues();
        if let Err(error) = retention::delete_expired(
            &self.commit_log,
            &self.config,
            queues,
            now,
            retention::hour_of_day(now),
            &mut measure,
        ) {
            warn!(%error, "retention pass failed; will retry");
        }
    }

    fn recover(&self, mode: RecoveryMode, checkpoint: &Checkpoint) -> Result<RecoveryReport> {
        let (start, durable_end) = recovery::scan_start(&self.commit_log, checkpoint, mode);
        // Consume queues are derived data: everything they say about the log from the scan
        // start on is dropped and rebuilt from the records themselves.
        let queues = self.all_queues();
        for queue in &queues {
            queue.truncate_past(start)?;
        }
        // A queue's offsets follow each other in log order. The CRC covers only the body, so a
        // record breaking the sequence had its header damaged; a jump is allowed only where a
        // corrupt range was skipped since the queue's previous record (its slots become holes).
        let log_span = self.commit_log.segments().len() as u64 * self.commit_log.segment_bytes();
        let mut expected: HashMap<QueueKey, (i64, usize)> = HashMap::new();
        let outcome = recovery::scan(
            &self.commit_log,
            start,
            durable_end,
            |scanned: ScannedRecord| {
                let key = (scanned.record.topic.clone(), scanned.record.queue_id);
                let queue = self.queue(&key.0, key.1)?;
                let offset = scanned.record.queue_offset;
                let (next, corrupt_seen) = expected
                    .get(&key)
                    .copied()
                    .unwrap_or((queue.write_end(), 0));
                let jump_allowed = scanned.corrupt_ranges_before > corrupt_seen
                    && offset > next
                    && ((offset - next) as u64) <= log_span / 64;
                if offset != next && !jump_allowed {
                    return Ok(false);
                }
                expected.insert(key, (offset + 1, scanned.corrupt_ranges_before));
                queue.put(
                    offset,
                    QueueEntry {
                        commit_log_offset: scanned.offset as i64,
                        size: scanned.size as i32,
                        tags_code: queue_tags_code(
                            &self.config,
                            &scanned.record.topic,
                            scanned.record.queue_id,
                            scanned.record.properties.tags(),
                            scanned.record.store_timestamp,
                        ),
                    },
                )?;
                queue.publish(offset + 1);
                Ok(true)
            },
        )?;
        let (end, corrupt, records) = (outcome.end, outcome.corrupt_ranges, outcome.records);
        let bytes_truncated = self.commit_log.truncate(end)?;
        let commit_log_min = self.commit_log.min_offset();
        let mut queue_entries_truncated = 0;
        let queues = self.all_queues();
        for queue in &queues {
            queue_entries_truncated += queue.truncate_past(end)?;
            queue.correct_min_offset(commit_log_min)?;
            queue.sync()?;
        }
        if !corrupt.is_empty() {
            self.punch_holes(&queues, &corrupt)?;
        }
        Ok(RecoveryReport {
            mode,
            scan_start: start,
            records_recovered: records,
            commit_log_end: end,
            bytes_truncated,
            corrupt_ranges: corrupt,
            queue_entries_truncated,
        })
    }

    /// Queue entries pointing into corrupt ranges become holes: never served.
    fn punch_holes(&self, queues: &[Arc<ConsumeQueue>], corrupt: &[(u64, u64)]) -> Result<()> {
        for queue in queues {
            let (min, max) = (queue.min_offset(), queue.max_offset());
            let mut offset = min;
            while offset < max {
                let Some(entries) = queue.read(offset, 1024)? else {
                    break;
                };
                for (index, entry) in entries.iter().enumerate() {
                    let at = entry.commit_log_offset as u64;
                    if !entry.is_hole() && corrupt.iter().any(|(from, to)| at >= *from && at < *to)
                    {
                        queue.put(offset + index as i64, QueueEntry::HOLE)?;
                    }
                }
                offset += entries.len().max(1) as i64;
            }
        }
        Ok(())
    }
}
