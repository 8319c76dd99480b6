//! `tidemark-broker` serves RocketMQ clients: sends into the store, pulls (with long polling)
//! out of it, consumer groups and their progress, and the admin requests operators use.
//!
//! [`Broker::open`] builds every component up front (store recovery, config files); `serve`
//! runs the listen and VIP servers plus the background tasks (name-server registration, offset
//! persistence, client expiry) until shutdown, then persists everything.

pub mod broker_stats;
pub mod clients;
pub mod config;
mod controller_mode;
pub mod delay_offsets;
pub mod filter;
mod foreign_offsets;
pub mod ha;
pub mod ha_progress;
pub mod history;
pub mod live_config;
pub mod live_keys;
mod lock_rank;
mod long_poll;
pub mod master_link;
pub mod message_log;
pub mod metadata;
pub mod metadata_change;
pub mod offsets;
pub mod parts;
pub mod persister;
pub mod pop;
mod pre_online;
pub(crate) mod processor;
pub mod progress;
pub mod progress_record;
pub mod progress_stream;
mod registration;
pub mod request_modes;
pub mod role;
pub mod schedule;
mod service_parts;
mod slave_sync;
mod state;
pub mod stats;
pub mod stats_history;
pub mod timer;
pub mod transaction;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tidemark_remoting::ServerConfig;
use tidemark_store::{MessageStore, StoreError};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::info;

pub use config::{BrokerConfig, BrokerRole, ConfigError, FlushDiskType, SecretText};
use live_config::LiveConfig;
pub use processor::BrokerHandler;
pub use state::BrokerState;

/// Why the broker could not start or stop cleanly.
#[derive(Debug, Error)]
pub enum BrokerError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("config file: {0}")]
    Config(#[from] tidemark_storage::atomic_file::PersistError),
    #[error(transparent)]
    Settings(#[from] ConfigError),
    #[error("offset journal: {0}")]
    OffsetJournal(#[from] tidemark_storage::journal::JournalError),
    #[error(transparent)]
    Acl(#[from] tidemark_acl::AclError),
    #[error("TLS: {0}")]
    Tls(#[from] tidemark_remoting::tls::TlsError),
}

/// Clients silent this long are dropped (Java: 120 s, scanned every 10 s, when stuck consumers
/// are looked for too).
const CLIENT_EXPIRY: Duration = Duration::from_secs(120);

/// How often the ACL file is looked at for changes (RocketMQ: 5 s).
const ACL_FILE_CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// A broker ready to serve.
#[derive(Debug)]
pub struct Broker {
    state: Arc<BrokerState>,
}

impl Broker {
    /// Opens (and recovers) the store and loads the config files. Blocking: call it before
    /// serving, or from a blocking task.
    pub fn open(config: BrokerConfig) -> Result<Broker, BrokerError> {
        config.validate()?;
        // Before the store: the store reads retention from the live settings, which a broker
        // configured in code may have changed in an earlier run.
        let live = Arc::new(LiveConfig::new(
            &config,
            Arc::new(tidemark_storage::io::FsStorage),
            tidemark_remoting::now_ms(),
        ));
        let (store, report) = MessageStore::open_tuned(config.store_config(), live.clone())?;
        info!(mode = ?report.mode, end = report.commit_log_end, records = report.records_recovered, "store opened");
        let state = BrokerState::load(config, Arc::new(store), live)?;
        Ok(Broker {
            state: Arc::new(state),
        })
    }

    pub fn state(&self) -> &Arc<BrokerState> {
        &self.state
    }

    /// Serves the listen port and the VIP port until `shutdown` resolves, then unregisters
    /// from the name servers and persists everything.
    pub async fn serve(
        self,
        listener: TcpListener,
        vip_listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), BrokerError> {
        self.serve_with_ha(listener, vip_listener, None, shutdown)
            .await
    }

    /// [`Broker::serve`], plus the HA port a master's slaves connect to (`listen_port + 1`).
    /// A slave follows its master and synchronises its metadata whatever `ha_listener` is.
    pub async fn serve_with_ha(
        self,
        listener: TcpListener,
        vip_listener: TcpListener,
        ha_listener: Option<TcpListener>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), BrokerError> {
        let state = self.state;
        // Before the first request is served (connections wait in the listen backlog meanwhile)
        // and before registering: a returning master learns what was committed on its slaves.
        pre_online::take_slaves_progress(&state).await;
        let (stop, stopping) = watch::channel(false);
        let wait_stop = |mut receiver: watch::Receiver<bool>| async move {
            let _ = receiver.wait_for(|stopped| *stopped).await;
        };
        let mut handler: Arc<dyn tidemark_remoting::RequestHandler> =
            Arc::new(BrokerHandler::new(state.clone()));
        let mut acl_watch = None;
        if let Some(acl) = &state.security.acl {
            info!(file = %acl.file().display(), "ACL enabled");
            handler = Arc::new(tidemark_acl::AclGuard::new(acl.clone(), handler));
            acl_watch = Some(tokio::spawn(tidemark_acl::watch_file(
                acl.clone(),
                ACL_FILE_CHECK_INTERVAL,
                wait_stop(stopping.clone()),
            )));
        }
        let server_config = ServerConfig {
            tls: Some(state.security.tls.clone()),
            connections_max: state.config.max_connections,
            ..ServerConfig::default()
        };
        info!(mode = %state.security.tls.mode(), certificate = if state.security.tls.settings().files.is_some() { "configured" } else { "self-signed" }, client_certificates = state.security.tls.settings().client_ca.is_some(), "TLS");
        let tls_watch = tokio::spawn(tidemark_remoting::tls::watch_files(
            state.security.tls.clone(),
            ACL_FILE_CHECK_INTERVAL,
            wait_stop(stopping.clone()),
        ));
        let main = tokio::spawn(tidemark_remoting::serve(
            listener,
            handler.clone(),
            server_config.clone(),
            wait_stop(stopping.clone()),
        ));
        let vip = tokio::spawn(tidemark_remoting::serve(
            vip_listener,
            handler,
            server_config,
            wait_stop(stopping.clone()),
        ));
        let registration = tokio::spawn(registration::run(
            state.registrar(),
            wait_stop(stopping.clone()),
        ));
        let persistence = tokio::spawn(persister::run(
            state.persisted_tables(),
            wait_stop(stopping.clone()),
        ));
        let expiry = tokio::spawn(expiry_loop(state.clone(), wait_stop(stopping.clone())));
        let mut services = Vec::new();
        // In controller mode either role may come, so both roles' loops run; each checks the
        // role on every round (the slave's follow only while a slave, the master's serve only
        // while a master).
        let controller_mode = state.config.enable_controller_mode;
        if controller_mode {
            services.push(tokio::spawn(controller_mode::run(
                state.clone(),
                stopping.clone(),
            )));
        }
        // Either role's end of the progress stream; each acts only while its role holds.
        services.push(tokio::spawn(progress_stream::publish(
            state.progress_replication(),
            wait_stop(stopping.clone()),
        )));
        if controller_mode || state.config.is_slave() {
            services.push(tokio::spawn(progress_stream::follow(
                state.progress_replication(),
                wait_stop(stopping.clone()),
            )));
            services.push(tokio::spawn(ha::run_slave(
                state.clone(),
                wait_stop(stopping.clone()),
            )));
            services.push(tokio::spawn(slave_sync::run(
                state.slave_sync(),
                wait_stop(stopping.clone()),
            )));
        }
        let schedule = if state.config.is_slave() {
            // A slave copies the master's log; delivering delayed messages is the master's job.
            None
        } else {
            if let Some(ha_listener) = ha_listener {
                services.push(tokio::spawn(ha::serve_master(
                    state.clone(),
                    ha_listener,
                    wait_stop(stopping.clone()),
                )));
            }
            services.push(tokio::spawn(timer::run(
                state.log_handle(),
                state.timers.clone(),
                wait_stop(stopping.clone()),
            )));
            services.push(tokio::spawn(transaction::check::run(
                state.transaction_checker(),
                wait_stop(stopping.clone()),
            )));
            services.push(tokio::spawn(pop::revive::run(
                state.reviver(),
                wait_stop(stopping.clone()),
            )));
            let levels = state
                .config
                .delay_levels_ms()
                .map_or(0, |levels| i32::try_from(levels.len()).unwrap_or(i32::MAX));
            Some(tokio::spawn(schedule::run(
                state.log_handle(),
                state.progress.clone(),
                levels,
                wait_stop(stopping.clone()),
            )))
        };

        shutdown.await;
        info!("broker shutting down");
        // Held pulls answer now instead of holding the drain up.
        state.held_pulls.notify_all();
        let _ = stop.send(true);
        for task in [main, vip, persistence, expiry, tls_watch]
            .into_iter()
            .chain(schedule)
            .chain(services)
            .chain(acl_watch)
        {
            let _ = task.await;
        }
        let _ = registration.await;
        let persisted = tokio::task::spawn_blocking({
            let state = state.clone();
            move || state.close()
        })
        .await;
        match persisted {
            Ok(result) => result,
            Err(_) => Err(BrokerError::Store(StoreError::Closed)),
        }
    }
}

async fn expiry_loop(state: Arc<BrokerState>, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut tick = 0u64;
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = ticker.tick() => {}
        }
        let (put, got) = (
            state.stats.messages_put_total.load(Ordering::Relaxed),
            state.stats.messages_got_total.load(Ordering::Relaxed),
        );
        state
            .stats
            .with_throughput(|throughput| throughput.sample(tidemark_remoting::now_ms(), put, got));
        tick += 1;
        if tick % 10 == 1 {
            state.stats.history.sample(
                tidemark_remoting::now_ms(),
                &state.config.broker_cluster_name,
                &state.stats.traffic.snapshot(),
            );
        }
        if !tick.is_multiple_of(10) {
            continue;
        }
        let expired = state
            .clients
            .expire(std::time::Instant::now(), CLIENT_EXPIRY);
        let mut groups: Vec<String> = expired
            .into_iter()
            .map(|(group, channel)| {
                info!(%group, peer = %channel.peer_addr(), "consumer channel expired");
                channel.close();
                group
            })
            .collect();
        groups.dedup();
        for group in groups {
            processor::consumer::notify_ids_changed(&state, &group);
        }
        log_stuck_consumers(&state);
    }
}

/// One WARN per stuck episode: a group held at one offset while later messages are done.
fn log_stuck_consumers(state: &BrokerState) {
    let threshold = state.live.get().consumer_stuck_threshold_ms;
    if threshold == 0 {
        return;
    }
    let now = tidemark_remoting::now_ms();
    for stuck in state
        .progress
        .offsets
        .newly_stuck(now, threshold as i64, state.boot_timestamp_ms)
    {
        tracing::warn!(
            group = %stuck.group,
            topic = %stuck.topic,
            queue = stuck.queue_id,
            offset = stuck.offset,
            stuck_for_s = (now - stuck.since_ms) / 1000,
            done_above = stuck.acked_above,
            "a consumer group is held back by one message while later ones are done"
        );
    }
}
