//! The broker's shared state: every component built up front, each behind its own lock, and
//! the persistence of the config files.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use tidemark_protocol::body::{
    ConsumerOffsetWrapper, DelayOffsetWrapper, SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
};
use tidemark_protocol::json::{JsonBody, WriteOptions};
use tidemark_store::MessageStore;
use tokio::sync::Notify;
use tracing::warn;

use crate::clients::{ClientRegistry, QueueLocks};
use crate::config::BrokerConfig;
use crate::long_poll::HeldPulls;
use crate::metadata::{SubscriptionGroupTable, TopicTable};
use crate::offsets::ConsumerOffsetTable;
use crate::persist::{self, PersistError};
use crate::BrokerError;

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// Paths of the broker's config files (RocketMQ's `config/` directory under the store root).
#[derive(Debug, Clone)]
pub struct ConfigFiles {
    pub consumer_offsets: PathBuf,
    pub delay_offsets: PathBuf,
    pub topics: PathBuf,
    pub subscription_groups: PathBuf,
}

impl ConfigFiles {
    pub fn under(store_root: &Path) -> Self {
        let config = store_root.join("config");
        Self {
            consumer_offsets: config.join("consumerOffset.json"),
            delay_offsets: config.join("delayOffset.json"),
            topics: config.join("topics.json"),
            subscription_groups: config.join("subscriptionGroup.json"),
        }
    }
}

/// Everything request handlers and background tasks share.
#[derive(Debug)]
pub struct BrokerState {
    pub config: BrokerConfig,
    pub store: Arc<MessageStore>,
    pub topics: Mutex<TopicTable>,
    pub groups: Mutex<SubscriptionGroupTable>,
    pub offsets: Mutex<ConsumerOffsetTable>,
    pub delay_offsets: Mutex<crate::schedule::DelayOffsets>,
    /// Bumped on every delay-offset change; persistence writes when it moved.
    pub delay_offsets_version: AtomicU64,
    pub clients: Mutex<ClientRegistry>,
    pub locks: Mutex<QueueLocks>,
    pub held_pulls: HeldPulls,
    pub files: ConfigFiles,
    /// Woken when topics change, so the broker re-registers at once.
    pub topics_changed: Notify,
    /// Bumped on every offset change; persistence writes when it moved.
    pub offsets_version: AtomicU64,
    pub boot_timestamp_ms: i64,
    pub messages_put_total: AtomicU64,
    pub messages_got_total: AtomicU64,
    /// Put and get rates for runtime info, sampled every second.
    pub throughput: Mutex<crate::stats::Throughput>,
    /// Master: replication progress of the slaves.
    pub ha: crate::ha::HaState,
    /// Slave: the master's broker address, learned at registration (slave sync talks to it).
    pub master_addr: Mutex<Option<String>>,
    /// Slave: the master's HA address learned at registration (unless configured).
    pub learned_ha_master_addr: Mutex<Option<String>>,
    /// Set once a name server accepted this broker's registration.
    pub registered: std::sync::atomic::AtomicBool,
    /// What `topics.json` and `subscriptionGroup.json` last got; held while they are written
    /// (lock order: this, then `topics`, then `groups`).
    metadata_written: Mutex<MetadataWritten>,
}

/// The texts last written to the metadata files (`None`: unknown, write next time).
#[derive(Debug, Default)]
struct MetadataWritten {
    topics: Option<Vec<u8>>,
    groups: Option<Vec<u8>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn load_or_refuse<T>(
    config: &BrokerConfig,
    path: &Path,
    parse: impl Fn(&[u8]) -> Result<T, tidemark_protocol::JsonError>,
) -> Result<Option<T>, BrokerError> {
    match persist::load(path, parse) {
        Ok(value) => Ok(value),
        Err(error @ PersistError::BothCorrupt { .. }) if config.ignore_corrupt_config => {
            warn!(%error, "ignore_corrupt_config is set: starting with an empty table");
            Ok(None)
        }
        Err(error) => Err(BrokerError::Config(error)),
    }
}

impl BrokerState {
    /// Loads the config files (refusing corrupt ones unless told otherwise) around an open store.
    pub fn load(
        config: BrokerConfig,
        store: Arc<MessageStore>,
    ) -> Result<BrokerState, BrokerError> {
        let files = ConfigFiles::under(&config.store_path_root_dir);
        let now = now_ms();
        let mut topics = TopicTable::with_system_topics(
            &config.broker_cluster_name,
            &config.broker_name,
            config.auto_create_topic_enable,
            config.default_topic_queue_nums,
            config.delay_levels_ms()?.len() as i32,
            now,
        );
        if let Some(wrapper) = load_or_refuse(
            &config,
            &files.topics,
            TopicConfigSerializeWrapper::from_json_bytes,
        )? {
            topics.merge_persisted(wrapper);
        }
        let groups = load_or_refuse(
            &config,
            &files.subscription_groups,
            SubscriptionGroupWrapper::from_json_bytes,
        )?
        .map(SubscriptionGroupTable::from_wrapper)
        .unwrap_or_default();
        let offsets = load_or_refuse(
            &config,
            &files.consumer_offsets,
            ConsumerOffsetWrapper::from_json_bytes,
        )?
        .map(|wrapper| ConsumerOffsetTable::from_wrapper(&wrapper))
        .unwrap_or_default();
        let delay_offsets = load_or_refuse(
            &config,
            &files.delay_offsets,
            DelayOffsetWrapper::from_json_bytes,
        )?
        .map(|wrapper| crate::schedule::DelayOffsets {
            table: wrapper.offset_table,
        })
        .unwrap_or_default();
        Ok(BrokerState {
            config,
            store,
            topics: Mutex::new(topics),
            groups: Mutex::new(groups),
            offsets: Mutex::new(offsets),
            delay_offsets: Mutex::new(delay_offsets),
            delay_offsets_version: AtomicU64::new(0),
            clients: Mutex::new(ClientRegistry::default()),
            locks: Mutex::new(QueueLocks::default()),
            held_pulls: HeldPulls::default(),
            files,
            topics_changed: Notify::new(),
            offsets_version: AtomicU64::new(0),
            boot_timestamp_ms: now,
            messages_put_total: AtomicU64::new(0),
            messages_got_total: AtomicU64::new(0),
            throughput: Mutex::new(crate::stats::Throughput::default()),
            ha: crate::ha::HaState::default(),
            master_addr: Mutex::new(None),
            learned_ha_master_addr: Mutex::new(None),
            registered: std::sync::atomic::AtomicBool::new(false),
            metadata_written: Mutex::new(MetadataWritten::default()),
        })
    }

    /// Slave: where to follow the master's log (configured, else learned at registration).
    pub fn ha_master_addr(&self) -> Option<String> {
        self.config
            .ha_master_address
            .clone()
            .filter(|addr| !addr.is_empty())
            .or_else(|| lock(&self.learned_ha_master_addr).clone())
    }

    /// Slave: the master's broker address, if known.
    pub fn master_addr(&self) -> Option<String> {
        lock(&self.master_addr).clone()
    }

    pub fn topics(&self) -> MutexGuard<'_, TopicTable> {
        lock(&self.topics)
    }

    pub fn groups(&self) -> MutexGuard<'_, SubscriptionGroupTable> {
        lock(&self.groups)
    }

    pub fn offsets(&self) -> MutexGuard<'_, ConsumerOffsetTable> {
        lock(&self.offsets)
    }

    pub fn clients(&self) -> MutexGuard<'_, ClientRegistry> {
        lock(&self.clients)
    }

    pub fn locks(&self) -> MutexGuard<'_, QueueLocks> {
        lock(&self.locks)
    }

    pub fn delay_offsets(&self) -> MutexGuard<'_, crate::schedule::DelayOffsets> {
        lock(&self.delay_offsets)
    }

    /// The `delayOffset.json` / GET_ALL_DELAY_OFFSET form.
    pub fn delay_offset_wrapper(&self) -> DelayOffsetWrapper {
        DelayOffsetWrapper {
            data_version: None,
            offset_table: self.delay_offsets().table.clone(),
        }
    }

    /// Writes `delayOffset.json`.
    pub fn persist_delay_offsets(&self) -> Result<(), PersistError> {
        persist::write_atomically(
            &self.files.delay_offsets,
            &self
                .delay_offset_wrapper()
                .to_json_bytes_with(WriteOptions::PRETTY),
        )
    }

    pub fn mark_offsets_changed(&self) {
        self.offsets_version.fetch_add(1, Ordering::Release);
    }

    /// Writes `consumerOffset.json`.
    pub fn persist_offsets(&self) -> Result<(), PersistError> {
        let text = self
            .offsets()
            .to_wrapper()
            .to_json_bytes_with(WriteOptions::PRETTY);
        persist::write_atomically(&self.files.consumer_offsets, &text)
    }

    /// Writes `topics.json` and `subscriptionGroup.json` as the tables are now (a file whose
    /// text is what was last written is left alone). Blocking. Writers take turns and each
    /// takes its snapshot after the previous one finished, so a write never replaces a newer
    /// snapshot with an older one: once this returns, every change made before the call is on
    /// disk.
    pub fn persist_metadata(&self) -> Result<(), PersistError> {
        let mut written = lock(&self.metadata_written);
        let topics = self
            .topics()
            .to_wrapper()
            .to_json_bytes_with(WriteOptions::PRETTY);
        if written.topics.as_deref() != Some(topics.as_ref()) {
            written.topics = None;
            persist::write_atomically(&self.files.topics, &topics)?;
            written.topics = Some(topics);
        }
        let groups = self
            .groups()
            .to_wrapper()
            .to_json_bytes_with(WriteOptions::PRETTY);
        if written.groups.as_deref() != Some(groups.as_ref()) {
            written.groups = None;
            persist::write_atomically(&self.files.subscription_groups, &groups)?;
            written.groups = Some(groups);
        }
        Ok(())
    }

    /// [`persist_metadata`](Self::persist_metadata) on a blocking thread: a request that
    /// created a topic or group on the fly awaits this before it is answered, so nothing it
    /// acknowledges depends on a table a crash could forget.
    pub async fn persist_metadata_now(self: &Arc<Self>) -> Result<(), PersistError> {
        let state = self.clone();
        match tokio::task::spawn_blocking(move || state.persist_metadata()).await {
            Ok(result) => result,
            Err(failure) => Err(PersistError::Io {
                op: "persist",
                path: self.files.topics.clone(),
                source: std::io::Error::other(failure.to_string()),
            }),
        }
    }
}

impl BrokerState {
    /// The store host stamped on records and encoded in message ids: `brokerIP1:listenPort`.
    pub fn store_host(&self) -> std::net::SocketAddr {
        let ip = self
            .config
            .broker_ip1
            .parse()
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        std::net::SocketAddr::new(ip, self.config.listen_port)
    }
}
