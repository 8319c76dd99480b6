//! Consumer progress on the client: [`OffsetStore`], one type over the two places RocketMQ
//! keeps it — the broker (clustering; Java `RemoteBrokerOffsetStore`) and a local file
//! (broadcasting; Java `LocalFileOffsetStore`).
//!
//! Both keep an in-memory [`OffsetTable`] that consumption advances increase-only; they differ
//! in where `persist` writes and where `read(.., Store)` reads. The value everywhere is the
//! next offset to consume.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use tidemark_protocol::acked::AckedRanges;

use tidemark_protocol::body::{MessageQueue, MessageQueueOffsets};
use tidemark_protocol::json::{JsonBody, WriteOptions};
use tidemark_storage::atomic_file;
use tidemark_storage::io::FsStorage;
use tracing::{debug, warn};

use crate::error::{ClientError, Result};
use crate::BoxFuture;

/// Where [`OffsetStore::read`] looks (Java `ReadOffsetType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOffsetType {
    /// Only the in-memory table.
    Memory,
    /// Only the persisted copy (broker or file); a value found is cached in memory.
    Store,
    /// Memory if present, else the persisted copy.
    MemoryThenStore,
}

/// The in-memory offsets of one consumer group, by queue.
///
/// Invariant: an increase-only update never lowers a stored value; only an explicit overwrite
/// (an offset read from the store, an operator reset, a corrected out-of-range offset) does.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OffsetTable {
    offsets: BTreeMap<MessageQueue, i64>,
    /// Offsets above a queue's offset already consumed (concurrent push consumers report them
    /// with the offset; see [`AckedRanges`]). Always above the queue's offset.
    acked: BTreeMap<MessageQueue, AckedRanges>,
    /// What was last sent to the broker per queue, so the progress reporter sends only what
    /// moved.
    reported: BTreeMap<MessageQueue, (i64, AckedRanges)>,
}

impl OffsetTable {
    /// Records `offset` for `queue`. With `increase_only` a lower value than the one held is
    /// ignored (consume results can finish out of order). Acknowledged ranges the offset passed
    /// are dropped; an overwrite that moves the offset back drops them all.
    pub fn update(&mut self, queue: &MessageQueue, offset: i64, increase_only: bool) {
        match self.offsets.get_mut(queue) {
            Some(current) => {
                let before = *current;
                if !increase_only || offset > *current {
                    *current = offset;
                }
                debug_assert!(!increase_only || *current >= before);
                let now = *current;
                if now < before {
                    self.acked.remove(queue);
                } else if let Some(acked) = self.acked.get_mut(queue) {
                    *acked = acked.above(now);
                }
            }
            None => {
                self.offsets.insert(queue.clone(), offset);
            }
        }
    }

    /// [`update`](Self::update) (increase-only) and, for what lies above the resulting offset,
    /// these acknowledged ranges added to the ones held. Added, not replacing: two batches
    /// settle concurrently and may call here in the other order than they computed their
    /// ranges, and an offset once done stays done (only a move back forgets the ranges).
    pub fn update_with_acked(&mut self, queue: &MessageQueue, offset: i64, acked: AckedRanges) {
        self.update(queue, offset, true);
        let now = self.offsets.get(queue).copied().unwrap_or(offset);
        let acked = match self.acked.get(queue) {
            Some(held) => held.union(&acked).above(now),
            None => acked.above(now),
        };
        if acked.is_empty() {
            self.acked.remove(queue);
        } else {
            self.acked.insert(queue.clone(), acked);
        }
    }

    /// Replaces a queue's progress with what the broker has (offset and ranges).
    fn set_stored(&mut self, queue: &MessageQueue, offset: i64, acked: AckedRanges) {
        self.offsets.insert(queue.clone(), offset);
        let acked = acked.above(offset);
        if acked.is_empty() {
            self.acked.remove(queue);
        } else {
            self.acked.insert(queue.clone(), acked);
        }
    }

    /// The offsets of `topic`'s queues.
    pub fn of_topic(&self, topic: &str) -> BTreeMap<MessageQueue, i64> {
        self.offsets
            .iter()
            .filter(|(queue, _)| queue.topic == topic)
            .map(|(queue, offset)| (queue.clone(), *offset))
            .collect()
    }

    pub fn get(&self, queue: &MessageQueue) -> Option<i64> {
        self.offsets.get(queue).copied()
    }

    /// The acknowledged ranges held for `queue` (empty when none).
    pub fn acked(&self, queue: &MessageQueue) -> AckedRanges {
        self.acked.get(queue).cloned().unwrap_or_default()
    }

    pub fn remove(&mut self, queue: &MessageQueue) -> Option<i64> {
        self.reported.remove(queue);
        self.acked.remove(queue);
        self.offsets.remove(queue)
    }

    /// Progress of `assigned` queues that differs from what was last reported; it counts as
    /// reported from now on.
    fn take_unreported(&mut self, assigned: &BTreeSet<MessageQueue>) -> Vec<Entry> {
        let changed: Vec<Entry> = self
            .entries(assigned)
            .into_iter()
            .filter(|(queue, offset, acked)| {
                self.reported
                    .get(queue)
                    .is_none_or(|(sent, sent_acked)| sent != offset || sent_acked != acked)
            })
            .collect();
        self.mark_reported(&changed);
        changed
    }

    fn entries(&self, assigned: &BTreeSet<MessageQueue>) -> Vec<Entry> {
        self.offsets
            .iter()
            .filter(|(queue, _)| assigned.contains(*queue))
            .map(|(queue, offset)| (queue.clone(), *offset, self.acked(queue)))
            .collect()
    }

    fn mark_reported(&mut self, entries: &[Entry]) {
        for (queue, offset, acked) in entries {
            self.reported
                .insert(queue.clone(), (*offset, acked.clone()));
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&MessageQueue, i64)> {
        self.offsets.iter().map(|(queue, offset)| (queue, *offset))
    }

    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }
}

/// How often a consumer taking a queue over asks whether the previous owner released it.
const HAND_OFF_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// One queue's progress as it is sent: offset and the acknowledged ranges above it.
type Entry = (MessageQueue, i64, AckedRanges);

/// The broker side of a remote offset store, implemented over the network by the client and
/// by fakes in tests.
pub trait OffsetBroker: Send + Sync + 'static {
    /// QUERY_CONSUMER_OFFSET: the offset and the acknowledged ranges above it (none from
    /// an Apache broker); `Ok(None)` when the broker has no offset for the queue
    /// (QUERY_NOT_FOUND); any other failure is an error.
    fn query<'a>(
        &'a self,
        group: &'a str,
        queue: &'a MessageQueue,
    ) -> BoxFuture<'a, Result<Option<(i64, AckedRanges)>>>;

    /// UPDATE_CONSUMER_OFFSET with the acknowledged ranges above the offset, sent as
    /// `delivery` says.
    fn commit<'a>(
        &'a self,
        group: &'a str,
        queue: &'a MessageQueue,
        offset: i64,
        acked: &'a AckedRanges,
        delivery: CommitDelivery,
    ) -> BoxFuture<'a, Result<()>>;

    /// Whether another live consumer of the group still holds `queue` and has not released it
    /// (a Tidemark broker's answer to a take-over query); brokers that cannot tell say no.
    fn held_by_another<'a>(
        &'a self,
        group: &'a str,
        queue: &'a MessageQueue,
    ) -> BoxFuture<'a, Result<bool>> {
        let _ = (group, queue);
        Box::pin(async { Ok(false) })
    }
}

/// How a commit travels to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitDelivery {
    /// Oneway, for the periodic persist: one that is lost is sent again a round later.
    Oneway,
    /// Waiting for the broker's reply, for the last word on a queue: at shutdown, before a
    /// queue is given up, after a reset or correction, on an explicit persist. Nothing sends
    /// those again, and a oneway frame can still be queued in a broker that is stopping (the
    /// Java client sends them oneway too, and a graceful broker restart right after a
    /// consumer's shutdown can then redeliver its last messages).
    Acknowledged,
    /// [`Acknowledged`](Self::Acknowledged), and the final word on a queue handed off to
    /// another consumer of the group: a Tidemark broker lets the new owner start now.
    Released,
}

enum Backend {
    Remote(Arc<dyn OffsetBroker>),
    Local(OffsetFile),
}

/// Consumer progress of one group: an in-memory table plus where it is persisted.
pub struct OffsetStore {
    group: String,
    table: Mutex<OffsetTable>,
    backend: Backend,
}

impl std::fmt::Debug for OffsetStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.backend {
            Backend::Remote(_) => "remote",
            Backend::Local(_) => "local",
        };
        f.debug_struct("OffsetStore")
            .field("group", &self.group)
            .field("backend", &kind)
            .field("table", &*self.lock())
            .finish()
    }
}

impl OffsetStore {
    /// Clustering: offsets live on the broker.
    pub fn remote(group: impl Into<String>, broker: Arc<dyn OffsetBroker>) -> Self {
        Self {
            group: group.into(),
            table: Mutex::new(OffsetTable::default()),
            backend: Backend::Remote(broker),
        }
    }

    /// Broadcasting: offsets live in `path` (RocketMQ's `offsets.json` format).
    pub fn local_file(group: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self {
            group: group.into(),
            table: Mutex::new(OffsetTable::default()),
            backend: Backend::Local(OffsetFile::new(path.into())),
        }
    }

    /// RocketMQ's default file: `<dir>/<clientId>/<group>/offsets.json`, where `dir` is
    /// `~/.rocketmq_offsets` unless configured.
    pub fn default_local_path(dir: &Path, client_id: &str, group: &str) -> PathBuf {
        dir.join(client_id).join(group).join("offsets.json")
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn is_remote(&self) -> bool {
        matches!(self.backend, Backend::Remote(_))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OffsetTable> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Loads the persisted offsets into memory (local file only; remote offsets are read per
    /// queue when it is assigned). A corrupt file falls back to its `.bak`; both corrupt is an
    /// error.
    pub fn load(&self) -> Result<()> {
        if let Backend::Local(file) = &self.backend {
            let loaded = file.load()?;
            let mut table = self.lock();
            for (queue, offset) in loaded {
                table.update(&queue, offset, false);
            }
        }
        Ok(())
    }

    /// Records progress in memory; see [`OffsetTable::update`].
    pub fn update(&self, queue: &MessageQueue, offset: i64, increase_only: bool) {
        self.lock().update(queue, offset, increase_only);
    }

    /// The in-memory offsets of `topic`'s queues.
    pub fn of_topic(&self, topic: &str) -> BTreeMap<MessageQueue, i64> {
        self.lock().of_topic(topic)
    }

    /// The in-memory offset of `queue`, if any.
    pub fn read_memory(&self, queue: &MessageQueue) -> Option<i64> {
        self.lock().get(queue)
    }

    /// The offset of `queue`: `Ok(None)` when there is none.
    pub async fn read(&self, queue: &MessageQueue, from: ReadOffsetType) -> Result<Option<i64>> {
        if from != ReadOffsetType::Store {
            if let Some(offset) = self.lock().get(queue) {
                return Ok(Some(offset));
            }
            if from == ReadOffsetType::Memory {
                return Ok(None);
            }
        }
        let stored = match &self.backend {
            Backend::Remote(broker) => broker.query(&self.group, queue).await?,
            Backend::Local(file) => file
                .load()?
                .get(queue)
                .map(|offset| (*offset, AckedRanges::new())),
        };
        if let Some((offset, acked)) = &stored {
            self.lock().set_stored(queue, *offset, acked.clone());
        }
        Ok(stored.map(|(offset, _)| offset))
    }

    /// Records progress with the acknowledged ranges above it; see
    /// [`OffsetTable::update_with_acked`].
    pub fn update_with_acked(&self, queue: &MessageQueue, offset: i64, acked: AckedRanges) {
        self.lock().update_with_acked(queue, offset, acked);
    }

    /// The acknowledged ranges held for `queue` (as read from the broker when it was assigned,
    /// or as consumption reported them).
    pub fn acked(&self, queue: &MessageQueue) -> AckedRanges {
        self.lock().acked(queue)
    }

    /// Persists the offsets of `assigned` queues. Remote: one oneway commit per queue (sent even
    /// when unchanged, so a broker that lost it learns it again), and entries of queues no
    /// longer assigned are dropped. Local: the file is rewritten with these entries.
    pub async fn persist_all(
        &self,
        assigned: &BTreeSet<MessageQueue>,
        delivery: CommitDelivery,
    ) -> Result<()> {
        let entries = {
            let mut table = self.lock();
            if self.is_remote() {
                table.offsets.retain(|queue, _| assigned.contains(queue));
                table.acked.retain(|queue, _| assigned.contains(queue));
                table.reported.retain(|queue, _| assigned.contains(queue));
            }
            let entries = table.entries(assigned);
            table.mark_reported(&entries);
            entries
        };
        self.write(&entries, delivery).await
    }

    /// Remote stores: sends, oneway, the offsets of `assigned` queues that moved since they were
    /// last sent (the progress reporter's tick). Local stores keep their periodic file write.
    pub async fn report_changes(&self, assigned: &BTreeSet<MessageQueue>) -> Result<()> {
        if !self.is_remote() {
            return Ok(());
        }
        let entries = self.lock().take_unreported(assigned);
        self.write(&entries, CommitDelivery::Oneway).await
    }

    /// Persists one queue's offset and ranges as the final word of a hand-off, waiting for the
    /// broker to have it.
    pub async fn persist_released(&self, queue: &MessageQueue) -> Result<()> {
        self.persist_as(queue, CommitDelivery::Released).await
    }

    /// Waits until no other live consumer of the group holds `queue` (it released it), for at
    /// most `limit`; whether it was released in time. Local stores have nobody to wait for.
    pub async fn wait_released(&self, queue: &MessageQueue, limit: std::time::Duration) -> bool {
        let Backend::Remote(broker) = &self.backend else {
            return true;
        };
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match broker.held_by_another(&self.group, queue).await {
                Ok(false) => return true,
                Ok(true) => {}
                Err(error) => debug!(?queue, %error, "take-over query failed; asking again"),
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(HAND_OFF_POLL).await;
        }
    }

    /// Persists one queue's offset (before the queue is given up in a rebalance), waiting for
    /// the broker to have it.
    pub async fn persist(&self, queue: &MessageQueue) -> Result<()> {
        self.persist_as(queue, CommitDelivery::Acknowledged).await
    }

    async fn persist_as(&self, queue: &MessageQueue, delivery: CommitDelivery) -> Result<()> {
        let entry = {
            let table = self.lock();
            table
                .get(queue)
                .map(|offset| (queue.clone(), offset, table.acked(queue)))
        };
        match entry {
            Some(entry) => self.write(&[entry], delivery).await,
            None => Ok(()),
        }
    }

    async fn write(&self, entries: &[Entry], delivery: CommitDelivery) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        match &self.backend {
            Backend::Remote(broker) => {
                let mut first_error = None;
                for (queue, offset, acked) in entries {
                    if let Err(error) = broker
                        .commit(&self.group, queue, *offset, acked, delivery)
                        .await
                    {
                        warn!(group = %self.group, ?queue, offset, %error, "offset commit failed");
                        first_error.get_or_insert(error);
                    } else {
                        debug!(group = %self.group, ?queue, offset, "offset committed");
                    }
                }
                first_error.map_or(Ok(()), Err)
            }
            Backend::Local(file) => {
                let offsets: Vec<(MessageQueue, i64)> = entries
                    .iter()
                    .map(|(queue, offset, _)| (queue.clone(), *offset))
                    .collect();
                file.merge_and_write(&offsets)
            }
        }
    }

    /// Forgets `queue`'s offset in memory (the persisted copy stays).
    pub fn remove(&self, queue: &MessageQueue) {
        self.lock().remove(queue);
    }

    /// A copy of the in-memory table.
    pub fn snapshot(&self) -> OffsetTable {
        self.lock().clone()
    }
}

/// RocketMQ's `offsets.json` of a broadcasting consumer, written through the storage crate's
/// crash-safe replacement (the broker's config files use the same), so a crash at any point
/// leaves the old or the new content readable.
struct OffsetFile {
    path: PathBuf,
    /// Serialises writers within this process (persist timer vs. shutdown), and remembers
    /// whether the file on disk may become the `.bak` (not when it was unusable at load).
    writer: Mutex<WriterState>,
}

#[derive(Debug, Default)]
struct WriterState {
    keep_backup: bool,
}

impl OffsetFile {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            writer: Mutex::new(WriterState::default()),
        }
    }

    fn error(path: &Path, detail: impl std::fmt::Display) -> ClientError {
        ClientError::OffsetFile {
            path: path.to_owned(),
            detail: detail.to_string(),
        }
    }

    fn parse(bytes: &[u8]) -> std::result::Result<BTreeMap<MessageQueue, i64>, String> {
        // Java writes nothing for an empty table; an empty file is an empty table.
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(BTreeMap::new());
        }
        MessageQueueOffsets::from_json_bytes(bytes)
            .map(|wrapper| wrapper.offset_table)
            .map_err(|error| format!("not a valid offsets file: {error}"))
    }

    /// The file's offsets; the `.bak` when the file is missing or corrupt; empty when neither
    /// exists. Both unreadable is an error naming both.
    fn read(&self, writer: &mut WriterState) -> Result<BTreeMap<MessageQueue, i64>> {
        match atomic_file::load_with_source(&FsStorage, &self.path, Self::parse) {
            Ok(Some((table, source))) => {
                writer.keep_backup = source == atomic_file::Source::Backup;
                Ok(table)
            }
            Ok(None) => Ok(BTreeMap::new()),
            Err(error) => Err(Self::error(&self.path, error)),
        }
    }

    fn load(&self) -> Result<BTreeMap<MessageQueue, i64>> {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        self.read(&mut writer)
    }

    fn merge_and_write(&self, entries: &[(MessageQueue, i64)]) -> Result<()> {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut table = self.read(&mut writer).unwrap_or_else(|error| {
            warn!(%error, "rewriting an unreadable offset file from memory");
            BTreeMap::new()
        });
        for (queue, offset) in entries {
            table.insert(queue.clone(), *offset);
        }
        let text = MessageQueueOffsets {
            offset_table: table,
        }
        .to_json_bytes_with(WriteOptions::PRETTY);
        atomic_file::write_atomically(&FsStorage, &self.path, &text, writer.keep_backup)
            .map_err(|error| Self::error(&self.path, error))?;
        writer.keep_backup = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
