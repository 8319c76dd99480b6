//! The broker's shared state: every component built up front. Each table owns its lock and its
//! revision and offers atomic operations that return copies, so no lock guard leaves a table;
//! the few locks that nest, and in which order, are in ARCHITECTURE.md ("Lock order").

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use crate::master_link::MasterLink;

use std::time::Duration;
use tidemark_protocol::body::{
    ConsumerOffsetWrapper, DelayOffsetWrapper, SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
};
use tidemark_protocol::json::JsonBody;
use tidemark_storage::io::{FsStorage, Storage};
use tidemark_storage::journal::JournalOptions;
use tidemark_store::MessageStore;
use tokio::sync::Notify;
use tracing::{info, warn};

pub use crate::broker_stats::BrokerStats;
use crate::clients::{ClientRegistry, QueueLocks};
use crate::config::BrokerConfig;
use crate::delay_offsets::DelayOffsets;
use crate::long_poll::HeldPulls;
use crate::metadata::{SubscriptionGroupTable, TopicTable};
use crate::offsets::{ConsumerOffsetTable, ConsumerOffsets};
use crate::persister::{ConfigFile, Persister};
use crate::BrokerError;
use tidemark_storage::atomic_file::PersistError;

use tidemark_remoting::now_ms;

/// Everything request handlers and background tasks share.
#[derive(Debug)]
pub struct BrokerState {
    /// The configuration the broker started with; the keys that change at run time
    /// (`live_config::live_keys`) are read from `live` instead.
    pub config: BrokerConfig,
    /// The settings UPDATE_BROKER_CONFIG changes while the broker runs (shared with the store,
    /// which reads retention there).
    pub live: Arc<crate::live_config::LiveConfig>,
    /// The message log's parts (the store among them, which no service holds on its own); the
    /// same `Arc`s as the fields below.
    log_parts: crate::message_log::LogHandle,
    /// Topics, subscription groups and request modes.
    pub metadata: Arc<crate::parts::Metadata>,
    /// Committed offsets and delay-level offsets.
    pub progress: Arc<crate::parts::Progress>,
    /// Consumer progress on its way to the replicas through the log (master), or from the
    /// master's log into `offsets` (replica).
    pub progress_stream: Arc<crate::progress_stream::ProgressStream>,
    /// Timer messages: pending by delivery time, delivered (journaled).
    pub timers: Arc<crate::timer::Timers>,
    /// POP progress: cursors and in-flight messages per group and queue (journaled).
    pub pop: Arc<crate::pop::PopTable>,
    /// POP requests suspended now, per (topic, group, queue id), for POLLING_INFO and the
    /// POLLING_FULL bound.
    pub suspended_pops: crate::long_poll::SuspendedPops,
    /// Half messages waiting for their producer's commit or rollback.
    pub transactions: Arc<crate::transaction::Transactions>,
    /// SQL92 selectors, compiled once per text.
    pub selectors: crate::filter::CompiledSelectors,
    pub clients: Arc<ClientRegistry>,
    pub locks: QueueLocks,
    pub held_pulls: Arc<HeldPulls>,
    /// Writes every config file.
    pub persister: Arc<Persister>,
    /// Registration rounds: woken when topics change, so the broker re-registers at once, and
    /// waited for by a send whose new topic must be registered first (see `metadata_change`).
    pub registrations: Arc<crate::registration::RegistrationRounds>,
    /// Controller mode: a controller announced a role change (NOTIFY_BROKER_ROLE_CHANGED);
    /// the controller-mode loop asks for the decision at once instead of at its next tick.
    pub role_change_announced: Notify,
    pub boot_timestamp_ms: i64,
    pub stats: Arc<BrokerStats>,
    /// Master: replication progress of the slaves.
    pub ha: Arc<crate::ha_progress::HaState>,
    /// Slave: its master's addresses, learned at registration.
    pub master: Arc<MasterLink>,
    /// Master or slave, and the id registered under, as of now (read this, not `config`).
    pub role: Arc<crate::role::Role>,
    /// Set once a name server accepted this broker's registration.
    pub registered: Arc<AtomicBool>,
    /// Who may do what, and the TLS of the ports and of the broker's own connections.
    pub security: crate::parts::Security,
    store_host: SocketAddr,
    /// `messageDelayLevel`'s level count, read once: the key takes effect at restart only.
    delay_levels: i32,
}

fn load_or_refuse<T>(
    config: &BrokerConfig,
    persister: &Persister,
    file: ConfigFile,
    parse: impl Fn(&[u8]) -> Result<T, tidemark_protocol::JsonError>,
) -> Result<Option<T>, BrokerError> {
    match persister.load(file, parse) {
        Ok(value) => Ok(value),
        Err(error @ PersistError::BothCorrupt { .. }) if config.ignore_corrupt_config => {
            warn!(%error, "ignore_corrupt_config is set: starting with an empty table");
            Ok(None)
        }
        Err(error) => Err(BrokerError::Config(error)),
    }
}

/// Another broker (Apache RocketMQ, run on this store after Tidemark) wrote `consumerOffset.json`
/// since Tidemark's last export: its progress is newer than the journal's, so the journal is set
/// aside and the broker imports the file, as it does on a store that never had a journal.
fn set_aside_a_journal_older_than_the_export(
    config: &BrokerConfig,
    storage: &dyn Storage,
) -> Result<(), BrokerError> {
    let config_dir = config.store_path_root_dir.join("config");
    let journal = config.offset_journal_dir();
    if !storage.exists(&journal) || !crate::foreign_offsets::written_elsewhere(storage, &config_dir)
    {
        return Ok(());
    }
    let aside = crate::foreign_offsets::set_journal_aside(storage, &journal, now_ms()).map_err(
        |source| {
            BrokerError::Config(tidemark_storage::atomic_file::PersistError::Io {
                op: "set aside",
                path: journal.clone(),
                source: Arc::new(source),
            })
        },
    )?;
    warn!(
        aside = %aside.display(),
        "consumerOffset.json was written by another broker after Tidemark's last export: consumer progress is taken from it, and the older offset journal was set aside"
    );
    Ok(())
}

impl BrokerState {
    /// The message log for a background service, owning what [`BrokerState::log`] borrows.
    pub fn log_handle(&self) -> crate::message_log::LogHandle {
        self.log_parts.clone()
    }

    /// The message log: the one door messages go through into the store.
    pub fn log(&self) -> crate::message_log::MessageLog<'_> {
        self.log_parts.log()
    }

    /// Controller mode, on a master: shows readers only what its SyncStateSet confirmed
    /// (RocketMQ 5's confirm offset), first in the store, then to the held pulls.
    pub(crate) fn publish_read_fence(&self) {
        self.ha.publish_read_fence(|fence| {
            self.log_parts.store.set_read_fence(fence);
            self.held_pulls.set_fence(fence);
        });
    }

    /// Lifts the read fence: a slave that reconciled its log with the new master's holds
    /// nothing unconfirmed any more.
    pub(crate) fn lift_read_fence(&self) {
        self.ha.publish_fence_value(None, |fence| {
            self.log_parts.store.set_read_fence(fence);
            self.held_pulls.set_fence(fence);
        });
    }

    /// Loads the config files (refusing corrupt ones unless told otherwise) around an open store
    /// and the live settings it was opened with.
    pub fn load(
        config: BrokerConfig,
        store: Arc<MessageStore>,
        live: Arc<crate::live_config::LiveConfig>,
    ) -> Result<BrokerState, BrokerError> {
        Self::load_with(config, store, live, Arc::new(FsStorage))
    }

    /// [`load`](Self::load), with config files on `storage` (tests use the simulated one).
    pub fn load_with(
        config: BrokerConfig,
        store: Arc<MessageStore>,
        live: Arc<crate::live_config::LiveConfig>,
        storage: Arc<dyn Storage>,
    ) -> Result<BrokerState, BrokerError> {
        let persister = Persister::new(storage.clone(), &config.store_path_root_dir);
        let acl = match config.acl_file_path() {
            Some(file) => Some(Arc::new(tidemark_acl::AccessControl::open(file)?)),
            None => None,
        };
        let tls = Arc::new(tidemark_remoting::tls::ServerTls::new(
            config.server_tls_settings(),
            Vec::new(),
        )?);
        let client_tls = match config.client_tls_settings() {
            Some(settings) => Some(Arc::new(tidemark_remoting::tls::ClientTls::new(&settings)?)),
            None => None,
        };
        let now = now_ms();
        let topics = TopicTable::with_system_topics(
            &config.broker_cluster_name,
            &config.broker_name,
            config.auto_create_topic_enable,
            config.default_topic_queue_nums,
            config.delay_levels_ms()?.len() as i32,
            now,
        );
        if let Some(wrapper) = load_or_refuse(
            &config,
            &persister,
            ConfigFile::Topics,
            TopicConfigSerializeWrapper::from_json_bytes,
        )? {
            topics.merge(wrapper, false);
        }
        if config.trace_topic_enable && !config.msg_trace_topic_name.is_empty() {
            // One queue, as RocketMQ creates it; a table that has it already keeps its own.
            topics.ensure(
                &config.msg_trace_topic_name,
                1,
                tidemark_protocol::body::perm::READ | tidemark_protocol::body::perm::WRITE,
                now,
            );
            topics.mark_system(&config.msg_trace_topic_name);
        }
        let groups = load_or_refuse(
            &config,
            &persister,
            ConfigFile::SubscriptionGroups,
            SubscriptionGroupWrapper::from_json_bytes,
        )?
        .map(SubscriptionGroupTable::from_wrapper)
        .unwrap_or_default();
        // Consumer progress lives in the offset journal; `consumerOffset.json` is read only
        // when there is no journal yet (an Apache store, or one from before the journal).
        let import = || -> Result<ConsumerOffsetTable, String> {
            load_or_refuse(
                &config,
                &persister,
                ConfigFile::ConsumerOffsets,
                ConsumerOffsetWrapper::from_json_bytes,
            )
            .map(|wrapper| {
                if wrapper.is_some() {
                    info!(
                        "no offset journal yet: consumer offsets imported from consumerOffset.json"
                    );
                }
                wrapper
                    .map(|wrapper| ConsumerOffsetTable::from_wrapper(&wrapper))
                    .unwrap_or_default()
            })
            .map_err(|error| error.to_string())
        };
        set_aside_a_journal_older_than_the_export(&config, storage.as_ref())?;
        let (mut offsets, recovery) = ConsumerOffsets::open(
            storage.clone(),
            &config.offset_journal_dir(),
            JournalOptions {
                group_commit_window: Duration::from_millis(config.offset_journal_group_commit_ms),
                compact_min_bytes: config.offset_journal_compact_bytes,
            },
            &import,
        )?;
        if let Some(damage) = &recovery.damage {
            warn!(file = %damage.file.display(), offset = damage.offset, damage = %damage.damage, "offset journal was damaged; progress recorded after that point is lost");
        }
        let (mut history, history_recovery) = crate::history::ProgressHistory::open(
            storage.clone(),
            &config.progress_history_dir(),
            JournalOptions::default(),
            config.history_bounds(),
            i64::try_from(config.progress_checkpoint_interval_ms).unwrap_or(i64::MAX),
        )?;
        if let Some(damage) = &history_recovery.damage {
            warn!(file = %damage.file.display(), offset = damage.offset, damage = %damage.damage, "progress history journal was damaged; the entries recorded after that point are lost");
        }
        let (mut timers, timer_recovery) = crate::timer::Timers::open(
            storage.clone(),
            &config.timer_journal_dir(),
            JournalOptions::default(),
        )?;
        if let Some(damage) = &timer_recovery.damage {
            warn!(file = %damage.file.display(), offset = damage.offset, damage = %damage.damage, "timer journal was damaged; timer messages delivered after that point may be delivered again");
        }
        let apache_timers = config.store_path_root_dir.join("config").join("timercheck");
        match crate::timer::ApacheCheckpoint::read(storage.as_ref(), &apache_timers) {
            Ok(Some(found)) if !found.is_plausible(tidemark_remoting::now_ms()) => {
                warn!(file = %apache_timers.display(), last_read_time_ms = found.last_read_time_ms, next_queue_offset = found.next_queue_offset, "Apache RocketMQ's timer checkpoint is not plausible (a read time far ahead of the clock, or negative); ignored: timer messages an Apache broker delivered from this store may be delivered again");
                timers.set_apache_checkpoint(storage.clone(), &apache_timers, None);
            }
            Ok(checkpoint) => {
                if let Some(found) = checkpoint {
                    info!(next_queue_offset = found.next_queue_offset, last_read_time_ms = found.last_read_time_ms, "Apache RocketMQ's timer checkpoint found: the timer messages it delivered are not delivered again");
                }
                timers.set_apache_checkpoint(storage.clone(), &apache_timers, checkpoint);
            }
            Err(failure) => {
                warn!(%failure, file = %apache_timers.display(), "Apache RocketMQ's timer checkpoint unreadable; timer messages an Apache broker delivered from this store may be delivered again");
            }
        }
        let (mut pop, pop_recovery) = crate::pop::PopTable::open(
            storage.clone(),
            &config.pop_journal_dir(),
            JournalOptions::default(),
        )?;
        if let Some(damage) = &pop_recovery.damage {
            warn!(file = %damage.file.display(), offset = damage.offset, damage = %damage.damage, "POP journal was damaged; messages acknowledged after that point may be delivered again");
        }
        let request_modes = load_or_refuse(
            &config,
            &persister,
            ConfigFile::MessageRequestModes,
            crate::request_modes::RequestModes::parse,
        )?
        .unwrap_or_default();
        let delay_offsets = load_or_refuse(
            &config,
            &persister,
            ConfigFile::DelayOffsets,
            DelayOffsetWrapper::from_json_bytes,
        )?
        .map(|wrapper| wrapper.offset_table)
        .unwrap_or_default();
        let ip = config
            .broker_ip1
            .parse()
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        let store_host = SocketAddr::new(ip, config.listen_port);
        // A slave neither resolves nor checks back transactions: its master does.
        // In controller mode the controllers decide; until they have, the broker is a slave
        // of nobody (it takes no writes) and does not register (id -1).
        let role = if config.enable_controller_mode {
            crate::role::Role::new(crate::config::BrokerRole::Slave, -1)
        } else {
            crate::role::Role::new(config.broker_role, config.broker_id)
        };
        let transactions = if config.is_slave() {
            crate::transaction::Transactions::default()
        } else {
            let timeout = live.get().transaction_timeout;
            crate::transaction::recovery::recover(&store, store_host, timeout)?.0
        };
        let progress_stream = crate::progress_stream::ProgressStream::default();
        offsets.publish_to(progress_stream.outbox().clone());
        pop.publish_to(progress_stream.outbox().clone());
        timers.publish_to(progress_stream.outbox().clone());
        history.publish_to(progress_stream.outbox().clone());
        let timers = Arc::new(timers);
        let log_parts = crate::message_log::LogHandle {
            store,
            stats: Arc::default(),
            ha: Arc::default(),
            held_pulls: Arc::default(),
            timer_wake: timers.waker(),
            role: Arc::new(role),
            live,
        };
        let delay_levels = config
            .delay_levels_ms()
            .map_or(1, |levels| i32::try_from(levels.len()).unwrap_or(i32::MAX))
            .max(1);
        let state = BrokerState {
            config,
            live: log_parts.live.clone(),
            metadata: Arc::new(crate::parts::Metadata {
                topics,
                groups,
                request_modes,
            }),
            progress: Arc::new(crate::parts::Progress {
                offsets,
                history,
                delay_offsets: DelayOffsets::new(delay_offsets),
            }),
            progress_stream: Arc::new(progress_stream),
            timers,
            pop: Arc::new(pop),
            suspended_pops: Default::default(),
            selectors: Default::default(),
            transactions: Arc::new(transactions),
            clients: Arc::default(),
            locks: QueueLocks::default(),
            held_pulls: log_parts.held_pulls.clone(),
            persister: Arc::new(persister),
            registrations: Arc::default(),
            role_change_announced: Notify::new(),
            boot_timestamp_ms: now,
            stats: log_parts.stats.clone(),
            ha: log_parts.ha.clone(),
            master: Arc::default(),
            role: log_parts.role.clone(),
            registered: Arc::default(),
            security: crate::parts::Security {
                acl,
                tls,
                client_tls,
            },
            delay_levels,
            store_host,
            log_parts,
        };
        state
            .persister
            .mark_loaded(&state.metadata, &state.progress);
        Ok(state)
    }

    /// The parts the persister works with.
    pub fn persisted_tables(&self) -> crate::persister::PersistedTables {
        crate::persister::PersistedTables {
            persister: self.persister.clone(),
            metadata: self.metadata.clone(),
            progress: self.progress.clone(),
            live: self.live.clone(),
            role: self.role.clone(),
        }
    }

    /// Slave: where to follow the master's log (configured, else learned at registration).
    pub fn ha_master_addr(&self) -> Option<String> {
        self.config
            .ha_master_address
            .clone()
            .filter(|addr| !addr.is_empty())
            .or_else(|| self.master.ha_addr())
    }

    /// Settings for the broker's own connections to name servers and other brokers: signed
    /// with its account when it has one, over TLS when `tls_enable` is on.
    pub fn remoting_client_config(&self) -> tidemark_remoting::ClientConfig {
        tidemark_remoting::ClientConfig {
            tls: self.security.client_tls.clone(),
            ..self.config.remoting_client_config()
        }
    }

    /// How many delay levels are configured (`messageDelayLevel`); at least one.
    pub fn delay_level_count(&self) -> i32 {
        self.delay_levels
    }

    /// The store host stamped on records and encoded in message ids: `brokerIP1:listenPort`.
    pub fn store_host(&self) -> SocketAddr {
        self.store_host
    }

    /// Makes topics and groups created by a request durable before it is answered, so nothing
    /// it acknowledges depends on a table a crash could forget.
    pub async fn persist_metadata_now(self: &Arc<Self>) -> Result<(), PersistError> {
        Persister::flush(&self.persisted_tables(), crate::persister::METADATA).await
    }

    /// The end of a clean shutdown, once nothing serves any more: every config file written,
    /// the journals closed, the store shut down. Blocking.
    pub fn close(&self) -> Result<(), BrokerError> {
        self.persist_all()?;
        self.progress.offsets.close();
        self.progress.history.close();
        self.timers.close();
        self.pop.close();
        self.log().shutdown()?;
        Ok(())
    }

    /// Writes every config file now, changed or not. Blocking; for shutdown and tests.
    pub fn persist_all(&self) -> Result<(), PersistError> {
        self.persister.write(
            &self.metadata,
            &self.progress,
            &[
                ConfigFile::ConsumerOffsets,
                ConfigFile::DelayOffsets,
                ConfigFile::Topics,
                ConfigFile::SubscriptionGroups,
                ConfigFile::MessageRequestModes,
            ],
            true,
        )
    }
}
