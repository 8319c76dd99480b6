//! Registration with the name servers: at start, every `registerNameServerPeriod`, at once
//! when topics change, and with a name server that lost this broker (checked every few
//! seconds); unregistration at shutdown.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::body::{perm, DataVersion, RegisterBrokerBody};
use tidemark_protocol::headers::{
    QueryDataVersionRequestHeader, QueryDataVersionResponseHeader, RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader, UnregisterBrokerRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingClient;
use tokio::sync::{watch, Notify};
use tracing::{debug, info, warn};

use crate::config::BrokerConfig;
use crate::master_link::MasterLink;
use crate::message_log::LogHandle;
use crate::parts::Metadata;

const CALL_TIMEOUT: Duration = Duration::from_secs(6);
/// How often, between full rounds, each name server is asked whether it still has this
/// broker's data (QUERY_DATA_VERSION, what RocketMQ's broker asks before an unforced
/// registration). A name server back from a crash knows no broker and answers every client
/// "topic not exist" until it is told: without the check, for up to a registration period.
const CHECK_PERIOD: Duration = Duration::from_secs(2);
/// A check waits this long for an answer: the next one comes soon anyway.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// What registration touches: the settings it announces, the topics, the log's epochs, role
/// and permission, the master a slave learns from the answers, and the rounds requests wait
/// for.
#[derive(Debug, Clone)]
pub struct Registrar {
    pub config: Arc<BrokerConfig>,
    /// How the broker's own connections are made (TLS included).
    pub client_config: tidemark_remoting::ClientConfig,
    pub metadata: Arc<Metadata>,
    pub log: LogHandle,
    pub master: Arc<MasterLink>,
    /// Set once a name server accepted a registration.
    pub registered: Arc<AtomicBool>,
    pub rounds: Arc<RegistrationRounds>,
}

/// The version of what a registration announces, as the name servers record it.
fn announced_version(registrar: &Registrar, mut version: DataVersion) -> DataVersion {
    if registrar.config.enable_controller_mode {
        // The name servers prefer the master of the newest epoch (RocketMQ's stateVersion),
        // so a deposed master that still registers as id 0 does not take routes back.
        version.state_version = registrar.log.log().epochs().last_epoch().map(i64::from);
    }
    version
}

fn register_request(registrar: &Registrar) -> RemotingCommand {
    let mut topics = registrar.metadata.topics.snapshot().1;
    topics.data_version = announced_version(registrar, topics.data_version);
    // A broker that does not take writes (or reads) announces every topic with its own
    // permission, as RocketMQ does, so clients route around it.
    let permission = registrar.log.live.get().broker_permission;
    if !perm::is_writeable(permission) || !perm::is_readable(permission) {
        for topic in topics.topic_config_table.values_mut() {
            topic.perm = permission;
        }
    }
    let body = RegisterBrokerBody {
        topic_config_serialize_wrapper: topics,
        filter_server_list: Vec::new(),
    }
    .to_json_bytes();
    let header = RegisterBrokerRequestHeader {
        broker_name: registrar.config.broker_name.clone(),
        broker_addr: registrar.config.broker_addr(),
        cluster_name: registrar.config.broker_cluster_name.clone(),
        ha_server_addr: format!(
            "{}:{}",
            registrar.config.broker_ip1,
            registrar.config.ha_port()
        ),
        broker_id: registrar.log.role().now().broker_id,
        compressed: false,
        body_crc32: (crc32fast_hash(&body) & 0x7FFF_FFFF) as i32,
        heartbeat_timeout_millis: None,
        enable_acting_master: None,
    };
    RemotingCommand::request_with_header(RequestCode::RegisterBroker, &header).with_body(body)
}

fn crc32fast_hash(bytes: &[u8]) -> u32 {
    // The protocol crate owns the record CRC; the register body uses the same masked CRC32.
    tidemark_protocol::message::body_crc(bytes)
}

async fn register_all(registrar: &Registrar, client: &RemotingClient) {
    for addr in registrar.config.name_servers() {
        register_with(registrar, client, &addr).await;
    }
}

/// Registers with every name server that no longer has this broker's current data (it
/// restarted, or missed a round).
async fn register_where_lost(registrar: &Registrar, client: &RemotingClient) {
    let version = announced_version(registrar, registrar.metadata.topics.data_version());
    let header = QueryDataVersionRequestHeader {
        broker_name: registrar.config.broker_name.clone(),
        broker_addr: registrar.config.broker_addr(),
        cluster_name: registrar.config.broker_cluster_name.clone(),
        broker_id: registrar.log.role().now().broker_id,
    };
    for addr in registrar.config.name_servers() {
        let request = RemotingCommand::request_with_header(RequestCode::QueryDataVersion, &header)
            .with_body(version.to_json_bytes());
        // One that does not answer is left alone (the round warns of it): it is asked again
        // in a moment, and once it is back it says it lacks the data.
        let lacks = match client.invoke(&addr, request, CHECK_TIMEOUT).await {
            Ok(response) if response.response_code() == ResponseCode::Success => response
                .decode_header::<QueryDataVersionResponseHeader>()
                .is_ok_and(|answer| answer.changed),
            Ok(_) => true,
            Err(_) => false,
        };
        if lacks {
            debug!(namesrv = %addr, "the name server lacks this broker's data");
            register_with(registrar, client, &addr).await;
        }
    }
}

async fn register_with(registrar: &Registrar, client: &RemotingClient, addr: &str) {
    match client
        .invoke(addr, register_request(registrar), CALL_TIMEOUT)
        .await
    {
        Ok(response) if response.response_code() == ResponseCode::Success => {
            debug!(namesrv = %addr, "registered");
            registrar
                .registered
                .store(true, std::sync::atomic::Ordering::Release);
            if registrar.log.role().is_slave() {
                learn_master(registrar, &response);
            }
        }
        Ok(response) => {
            warn!(namesrv = %addr, code = %response.response_code(), remark = ?response.remark, "registration refused")
        }
        Err(failure) => warn!(namesrv = %addr, %failure, "registration failed; will retry"),
    }
}

/// A slave learns its master's addresses from the registration answer (both empty while the
/// master is not registered: slave sync pauses, replication keeps trying the last address).
fn learn_master(registrar: &Registrar, response: &RemotingCommand) {
    let Ok(header) = response.decode_header::<RegisterBrokerResponseHeader>() else {
        return;
    };
    let master = header.master_addr.filter(|addr| !addr.is_empty());
    let ha = header.ha_server_addr.filter(|addr| !addr.is_empty());
    if registrar.master.learn(master.clone(), ha) {
        info!(master = ?master, "master address from the name server");
    }
}

/// Rounds of registration with the name servers, counted so that a send which created its
/// topic can wait until the name servers know the topic. RocketMQ's broker registers such a topic
/// before it answers the send; a client that asks the name server for the route right after
/// (a consumer starting, `fetchPublishMessageQueues`) must find it.
#[derive(Debug)]
pub struct RegistrationRounds {
    /// Rounds asked for so far (each ask is a ticket).
    asked: AtomicU64,
    /// The highest ticket a finished round covered.
    covered: watch::Sender<u64>,
    /// Whether the registration loop runs; nobody waits for a loop that does not.
    running: AtomicBool,
    /// Wakes the loop for a round now (topics changed, or a role or permission change).
    wake: Notify,
}

impl Default for RegistrationRounds {
    fn default() -> Self {
        Self {
            asked: AtomicU64::new(0),
            covered: watch::Sender::new(0),
            running: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }
}

impl RegistrationRounds {
    /// Asks for a round that starts from now and wakes the loop; the ticket to
    /// [`RegistrationRounds::wait`] for.
    pub fn ask(&self) -> u64 {
        let ticket = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        self.wake.notify_one();
        ticket
    }

    /// Wakes the loop for a round now; nobody waits for it.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Until a round that started after `ticket` was asked has finished, at most `bound`; whether
    /// one did.
    pub async fn wait(&self, ticket: u64, bound: Duration) -> bool {
        if !self.running.load(Ordering::SeqCst) {
            return false;
        }
        let mut covered = self.covered.subscribe();
        let waited =
            tokio::time::timeout(bound, covered.wait_for(|covered| *covered >= ticket)).await;
        matches!(waited, Ok(Ok(_)))
    }

    fn finished(&self, covering: u64) {
        self.covered.send_if_modified(|covered| {
            let newer = covering > *covered;
            if newer {
                *covered = covering;
            }
            newer
        });
    }
}

pub(crate) async fn run(registrar: Registrar, stop: impl Future<Output = ()>) {
    registrar.rounds.running.store(true, Ordering::SeqCst);
    run_rounds(&registrar, stop).await;
    registrar.rounds.running.store(false, Ordering::SeqCst);
    // Whoever still waits is let go.
    registrar.rounds.finished(u64::MAX);
}

async fn run_rounds(registrar: &Registrar, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let client = RemotingClient::new(registrar.client_config.clone(), None);
    // A slave without a live master asks again soon: its master's return must not wait a
    // whole registration period before slave synchronisation resumes.
    const MASTERLESS_PERIOD: Duration = Duration::from_secs(2);
    let mut next = tokio::time::Instant::now();
    loop {
        let check = tokio::time::Instant::now() + CHECK_PERIOD;
        tokio::select! {
            _ = &mut stop => break,
            _ = tokio::time::sleep_until(next) => {}
            _ = registrar.rounds.wake.notified() => {}
            _ = tokio::time::sleep_until(check), if check < next => {
                if registrar.log.role().now().broker_id >= 0 {
                    register_where_lost(registrar, &client).await;
                }
                continue;
            }
        }
        // Every ticket asked before the round starts is covered by it.
        let covering = registrar.rounds.asked.load(Ordering::SeqCst);
        if registrar.log.role().now().broker_id >= 0 {
            register_all(registrar, &client).await;
        }
        registrar.rounds.finished(covering);
        // Read each round: registerNameServerPeriod is live.
        let period = Duration::from_millis(
            registrar
                .log
                .live
                .get()
                .register_name_server_period
                .clamp(10_000, 60_000),
        );
        let wait = if registrar.log.role().is_slave() && registrar.master.broker_addr().is_none() {
            MASTERLESS_PERIOD.min(period)
        } else {
            period
        };
        next = tokio::time::Instant::now() + wait;
    }
    for addr in registrar.config.name_servers() {
        let header = UnregisterBrokerRequestHeader {
            broker_name: registrar.config.broker_name.clone(),
            broker_addr: registrar.config.broker_addr(),
            cluster_name: registrar.config.broker_cluster_name.clone(),
            broker_id: registrar.log.role().now().broker_id,
        };
        match client
            .invoke(
                &addr,
                RemotingCommand::request_with_header(RequestCode::UnregisterBroker, &header),
                CALL_TIMEOUT,
            )
            .await
        {
            Ok(_) => info!(namesrv = %addr, "unregistered"),
            Err(failure) => warn!(namesrv = %addr, %failure, "unregistration failed"),
        }
    }
    client.shutdown();
}
