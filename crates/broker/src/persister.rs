//! The one way config files reach the disk. A single task owns every write: periodically it
//! writes the tables whose revision moved (offsets every `flush_consumer_offset_interval`, less
//! often when exporting them takes long,
//! delay offsets every `flush_delay_offset_interval`, topics and groups on the same tick), and
//! on request it writes at once and tells the requester when the files are durable (a send
//! that created a topic awaits that before it is acknowledged). It also compacts the offset
//! journal when due. `consumerOffset.json` is an export of the journaled progress in
//! RocketMQ's format, for tools and migration. Writes run on a blocking
//! thread through the `Storage` seam ([`persist::write_atomically`]); concurrent
//! requests are served by one write. Tables are copied under their lock and encoded after it
//! is released.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tidemark_protocol::json::{JsonBody, WriteOptions};
use tidemark_remoting::now_ms;
use tidemark_storage::io::Storage;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::live_config::LiveConfig;
use crate::lock_rank::{self, Rank};
use crate::parts::{Metadata, Progress};
use tidemark_storage::atomic_file::{self as persist, PersistError};

/// One of the broker's config files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFile {
    ConsumerOffsets,
    DelayOffsets,
    Topics,
    SubscriptionGroups,
    /// SET_MESSAGE_REQUEST_MODE's choices (PULL or POP per topic and group).
    MessageRequestModes,
}

impl ConfigFile {
    const ALL: [ConfigFile; 5] = [
        ConfigFile::ConsumerOffsets,
        ConfigFile::DelayOffsets,
        ConfigFile::Topics,
        ConfigFile::SubscriptionGroups,
        ConfigFile::MessageRequestModes,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn file_name(self) -> &'static str {
        match self {
            ConfigFile::ConsumerOffsets => "consumerOffset.json",
            ConfigFile::DelayOffsets => "delayOffset.json",
            ConfigFile::Topics => "topics.json",
            ConfigFile::SubscriptionGroups => "subscriptionGroup.json",
            ConfigFile::MessageRequestModes => "messageRequestMode.json",
        }
    }

    /// The table's revision now.
    fn revision(self, metadata: &Metadata, progress: &Progress) -> u64 {
        match self {
            ConfigFile::ConsumerOffsets => progress.offsets.revision(),
            ConfigFile::DelayOffsets => progress.delay_offsets.revision(),
            ConfigFile::Topics => metadata.topics.revision(),
            ConfigFile::SubscriptionGroups => metadata.groups.revision(),
            ConfigFile::MessageRequestModes => metadata.request_modes.revision(),
        }
    }

    /// A copy of the table taken under its lock, encoded after: (revision, file text).
    fn snapshot(self, metadata: &Metadata, progress: &Progress) -> (u64, Vec<u8>) {
        match self {
            ConfigFile::ConsumerOffsets => {
                let (revision, table) = progress.offsets.snapshot();
                (
                    revision,
                    table.to_wrapper().to_json_bytes_with(WriteOptions::PRETTY),
                )
            }
            ConfigFile::DelayOffsets => {
                let (revision, wrapper) = progress.delay_offsets.snapshot();
                (revision, wrapper.to_json_bytes_with(WriteOptions::PRETTY))
            }
            ConfigFile::Topics => {
                let (revision, wrapper) = metadata.topics.snapshot();
                (revision, wrapper.to_json_bytes_with(WriteOptions::PRETTY))
            }
            ConfigFile::SubscriptionGroups => {
                let (revision, wrapper) = metadata.groups.snapshot();
                (revision, wrapper.to_json_bytes_with(WriteOptions::PRETTY))
            }
            ConfigFile::MessageRequestModes => metadata.request_modes.snapshot(),
        }
    }
}

/// Topics and subscription groups: what a request that created either must make durable.
pub const METADATA: &[ConfigFile] = &[ConfigFile::Topics, ConfigFile::SubscriptionGroups];

#[derive(Debug, Clone, Copy, Default)]
struct Written {
    revision: Option<u64>,
    keep_backup: bool,
}

struct FlushRequest {
    files: Vec<ConfigFile>,
    done: oneshot::Sender<Result<(), PersistError>>,
}

/// What the persister works with: the tables it writes, where, and how often.
#[derive(Debug, Clone)]
pub struct PersistedTables {
    pub persister: Arc<Persister>,
    pub metadata: Arc<Metadata>,
    pub progress: Arc<Progress>,
    pub live: Arc<crate::live_config::LiveConfig>,
    /// A slave writes no checkpoints: its history is its master's, checkpoints included.
    pub role: Arc<crate::role::Role>,
}

/// Writes the broker's config files; see the module documentation.
#[derive(Debug)]
pub struct Persister {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// Per file, by [`ConfigFile::index`]: the revision of its table last written, and whether
    /// the file on disk may become the backup (not when it was unusable at load). Only the
    /// persister task (and the final write at shutdown, after it stopped) take this.
    written: Mutex<[Written; 5]>,
    requests: mpsc::UnboundedSender<FlushRequest>,
    /// Taken by the task when the broker starts serving.
    receiver: Mutex<Option<mpsc::UnboundedReceiver<FlushRequest>>>,
}

impl std::fmt::Debug for FlushRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlushRequest")
            .field("files", &self.files)
            .finish()
    }
}

impl Persister {
    /// Config files live in `<store root>/config/`.
    pub fn new(storage: Arc<dyn Storage>, store_root: &Path) -> Self {
        let (requests, receiver) = mpsc::unbounded_channel();
        Self {
            storage,
            dir: store_root.join("config"),
            written: Mutex::new([Written::default(); 5]),
            requests,
            receiver: Mutex::new(Some(receiver)),
        }
    }

    pub fn path(&self, file: ConfigFile) -> PathBuf {
        self.dir.join(file.file_name())
    }

    /// Loads a config file (or its backup) with `parse`; `None` on a fresh start. A file
    /// loaded from its backup is replaced without rotating, so the good backup survives.
    pub fn load<T, E: std::fmt::Display>(
        &self,
        file: ConfigFile,
        parse: impl Fn(&[u8]) -> Result<T, E>,
    ) -> Result<Option<T>, PersistError> {
        let loaded = persist::load_with_source(self.storage.as_ref(), &self.path(file), parse)?;
        let from_backup = matches!(loaded, Some((_, persist::Source::Backup)));
        lock_rank::lock(&self.written, Rank::PersisterWritten)[file.index()].keep_backup =
            from_backup;
        Ok(loaded.map(|(value, _)| value))
    }

    /// Counts what the tables hold now as written: they were just loaded from these files.
    pub(crate) fn mark_loaded(&self, metadata: &Metadata, progress: &Progress) {
        let mut written = lock_rank::lock(&self.written, Rank::PersisterWritten);
        for file in ConfigFile::ALL {
            written[file.index()].revision = Some(file.revision(metadata, progress));
        }
    }

    /// Writes each of `files` whose table changed since it was last written (every one with
    /// `force`). Blocking.
    pub fn write(
        &self,
        metadata: &Metadata,
        progress: &Progress,
        files: &[ConfigFile],
        force: bool,
    ) -> Result<(), PersistError> {
        let mut written = lock_rank::lock(&self.written, Rank::PersisterWritten);
        for &file in files {
            let slot = &mut written[file.index()];
            if !force && slot.revision == Some(file.revision(metadata, progress)) {
                continue;
            }
            let (revision, text) = file.snapshot(metadata, progress);
            if file == ConfigFile::ConsumerOffsets {
                crate::foreign_offsets::record_export(self.storage.as_ref(), &self.dir, &text)?;
            }
            persist::write_atomically(
                self.storage.as_ref(),
                &self.path(file),
                &text,
                slot.keep_backup,
            )?;
            *slot = Written {
                revision: Some(revision),
                keep_backup: false,
            };
        }
        Ok(())
    }

    /// Writes `files` now if they changed and returns once they are durable. Served by the
    /// persister task; when it is not running (before the broker serves, after it stopped) the
    /// write happens on a blocking thread here.
    pub async fn flush(tables: &PersistedTables, files: &[ConfigFile]) -> Result<(), PersistError> {
        let task_started = tables
            .persister
            .receiver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none();
        if !task_started {
            // Queued, it would wait for a task that may never start (a broker opened but not
            // serving); the writes serialise on `written` either way.
            return write_off_task(tables, files.to_vec()).await;
        }
        let (done, result) = oneshot::channel();
        let request = FlushRequest {
            files: files.to_vec(),
            done,
        };
        if tables.persister.requests.send(request).is_ok() {
            if let Ok(outcome) = result.await {
                return outcome;
            }
        }
        write_off_task(tables, files.to_vec()).await
    }
}

/// Runs one write on a blocking thread.
async fn write_off_task(
    tables: &PersistedTables,
    files: Vec<ConfigFile>,
) -> Result<(), PersistError> {
    let writer = tables.clone();
    tokio::task::spawn_blocking(move || {
        writer
            .persister
            .write(&writer.metadata, &writer.progress, &files, false)
    })
    .await
    .unwrap_or_else(|failure| {
        Err(PersistError::Io {
            op: "persist",
            path: tables.persister.dir.clone(),
            source: Arc::new(std::io::Error::other(failure.to_string())),
        })
    })
}

/// `consumerOffset.json` is only an export (the journal is the truth), but rewriting it whole
/// costs time in proportion to the table: with a million entries, every tick would spend a
/// good part of a core on it. The next periodic export waits at least this many times as long
/// as the last one took (so it uses at most about 5% of a core); small tables are exported on
/// every tick as before, and requested flushes are never held back.
const EXPORT_COST_RATIO: u32 = 19;

/// How often the persister's tick runs: `flush_consumer_offset_interval`, as it is now.
fn tick_interval(live: &LiveConfig) -> Duration {
    Duration::from_millis(live.get().flush_consumer_offset_interval.max(100))
}

/// The persister task: serves flush requests and writes changed tables periodically, until
/// `stop`. The final write at shutdown is the broker's, after every other task ended.
pub(crate) async fn run(tables: PersistedTables, stop: impl Future<Output = ()>) {
    let Some(mut requests) = tables
        .persister
        .receiver
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    else {
        warn!("the persister task was started twice; the second one does nothing");
        return;
    };
    tokio::pin!(stop);
    let mut interval = tick_interval(&tables.live);
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut delay_written_at = now_ms();
    let mut offsets_export_due = Instant::now();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(first) = requests.recv() => {
                let mut batch = vec![first];
                while let Ok(more) = requests.try_recv() {
                    batch.push(more);
                }
                let mut files: Vec<ConfigFile> = Vec::new();
                for request in &batch {
                    for file in &request.files {
                        if !files.contains(file) {
                            files.push(*file);
                        }
                    }
                }
                let outcome = write_off_task(&tables, files).await;
                if let Err(failure) = &outcome {
                    warn!(%failure, "config files not persisted on request");
                }
                for request in batch {
                    let _ = request.done.send(outcome.clone());
                }
            }
            _ = ticker.tick() => {
                if Instant::now() >= offsets_export_due {
                    let started = Instant::now();
                    if let Err(failure) =
                        write_off_task(&tables, vec![ConfigFile::ConsumerOffsets]).await
                    {
                        warn!(%failure, "consumer offsets not exported; will retry");
                    }
                    let took = started.elapsed();
                    offsets_export_due = Instant::now() + took * EXPORT_COST_RATIO;
                    debug!(?took, "consumerOffset.json exported");
                }
                let mut files = vec![ConfigFile::Topics, ConfigFile::SubscriptionGroups];
                let delay_interval_ms =
                    tables.live.get().flush_delay_offset_interval.max(100) as i64;
                if now_ms() - delay_written_at >= delay_interval_ms {
                    files.push(ConfigFile::DelayOffsets);
                    delay_written_at = now_ms();
                }
                if let Err(failure) = write_off_task(&tables, files).await {
                    warn!(%failure, "config files not persisted; will retry");
                }
                let compacting = tables.progress.clone();
                match tokio::task::spawn_blocking(move || compacting.offsets.compact_if_due()).await {
                    Ok(Err(failure)) => warn!(%failure, "offset journal not compacted; will retry"),
                    Err(failure) => warn!(%failure, "offset journal compaction ended unfinished; it runs again at the next tick"),
                    Ok(Ok(_)) => {}
                }
                let history = tables.progress.clone();
                let slave = tables.role.is_slave();
                let checkpointed = tokio::task::spawn_blocking(move || {
                    let now = now_ms();
                    if !slave && history.history.checkpoint_due(now) {
                        let committed = history.offsets.committed();
                        history.history.checkpoint(now, &committed);
                    }
                    history.history.compact_if_due(now)
                })
                .await;
                match checkpointed {
                    Ok(Err(failure)) => warn!(%failure, "progress history not compacted; will retry"),
                    Err(failure) => warn!(%failure, "progress history checkpoint ended unfinished; it runs again at the next tick"),
                    Ok(Ok(_)) => {}
                }
                // flushConsumerOffsetInterval is live: a changed one paces the next tick.
                let wanted = tick_interval(&tables.live);
                if wanted != interval {
                    interval = wanted;
                    ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
                }
            }
        }
    }
    // Requests that raced the stop are answered by a write of their own.
    requests.close();
    while let Some(request) = requests.recv().await {
        let outcome = write_off_task(&tables, request.files.clone()).await;
        let _ = request.done.send(outcome);
    }
}
