//! One controller: its Raft node, the replicated [`ReplicaSets`], the local [`Liveness`] table,
//! and the task that, on the leader, elects a new master for every set whose master died.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ServerState, SnapshotPolicy};
use thiserror::Error;
use tidemark_protocol::body::{BrokerMemberGroup, ElectMasterResponseBody, SyncStateSet};
use tidemark_protocol::headers::{ElectMasterResponseHeader, NotifyBrokerRoleChangedRequestHeader};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig, RemotingClient};
use tidemark_storage::atomic_file::PersistError;
use tidemark_storage::io::{FsStorage, Storage};
use tidemark_storage::journal::JournalError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::liveness::Liveness;
use crate::raft::{ControllerRaft, LogStore, NodeId, PeerNetwork, StateMachineStore};
use crate::replicas::{Applied, Command, Election, ElectionPlan, Refusal, ReplicaSets};

/// How a controller runs (`tidemark controller` flags).
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    pub id: NodeId,
    /// Every controller's remoting address by id, this one's included.
    pub peers: BTreeMap<NodeId, String>,
    /// Holds the Raft log (`raft-log/`) and the state machine's snapshot.
    pub data_dir: PathBuf,
    /// A broker whose heartbeat names no timeout is dead after this long without one.
    pub broker_timeout_default: Duration,
    /// How often the leader looks for dead masters (a closed connection is acted on at once).
    pub scan_interval: Duration,
    /// Elect a replica outside the SyncStateSet when no member of it is alive (may lose
    /// acknowledged messages; off by default, as in RocketMQ).
    pub unclean_election: bool,
    /// Tell a set's brokers about a new master (NOTIFY_BROKER_ROLE_CHANGED) instead of waiting
    /// for them to ask.
    pub notify_role_changes: bool,
    pub raft_heartbeat: Duration,
    /// A follower that hears no leader for this long (up to twice it) starts an election.
    pub raft_election_timeout: Duration,
    /// Connections to peers and brokers (TLS, signing).
    pub client: ClientConfig,
}

impl ControllerSettings {
    pub fn new(id: NodeId, peers: BTreeMap<NodeId, String>, data_dir: PathBuf) -> Self {
        Self {
            id,
            peers,
            data_dir,
            broker_timeout_default: Duration::from_secs(5),
            scan_interval: Duration::from_millis(500),
            unclean_election: false,
            notify_role_changes: true,
            raft_heartbeat: Duration::from_millis(200),
            raft_election_timeout: Duration::from_millis(1000),
            client: ClientConfig::default(),
        }
    }
}

#[derive(Debug, Error)]
pub enum ControllerError {
    #[error("controller {0} is not among the peers")]
    NotAPeer(NodeId),
    #[error("raft log: {0}")]
    Log(#[from] JournalError),
    #[error("state machine snapshot: {0}")]
    Snapshot(#[from] PersistError),
    #[error("raft: {0}")]
    Raft(String),
}

/// A running controller. See the module documentation.
pub struct Controller {
    settings: ControllerSettings,
    raft: ControllerRaft,
    log: LogStore,
    machine: StateMachineStore,
    liveness: Liveness,
    client: Arc<RemotingClient>,
    /// Wakes the election scan early (a broker's connection closed).
    scan_now: Notify,
    stop: CancellationToken,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("id", &self.settings.id)
            .field("peers", &self.settings.peers)
            .field("leadership", &self.leadership())
            .finish_non_exhaustive()
    }
}

/// A controller's part in the Raft group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaftRole {
    Leader,
    Candidate,
    Follower,
    /// Neither voting nor leading: a learner, or shutting down.
    Other,
}

/// Who leads the controllers, as this one sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    pub leader: Option<NodeId>,
    pub leader_address: Option<String>,
    pub is_leader: bool,
    /// This controller's Raft role.
    pub role: RaftRole,
    pub term: u64,
    /// The last log entry applied to the state.
    pub applied_index: Option<u64>,
    /// The last entry the newest snapshot covers (built here or sent by the leader).
    pub snapshot_index: Option<u64>,
}

impl Controller {
    /// Opens the log and state machine, starts Raft (forming the group on first start) and the
    /// election scan.
    pub async fn start(settings: ControllerSettings) -> Result<Arc<Controller>, ControllerError> {
        if !settings.peers.contains_key(&settings.id) {
            return Err(ControllerError::NotAPeer(settings.id));
        }
        let storage: Arc<dyn Storage> = Arc::new(FsStorage);
        let dir = settings.data_dir.clone();
        let opened = tokio::task::spawn_blocking(move || {
            let (log, report) = LogStore::open(storage.clone(), &dir.join("raft-log"))?;
            let machine = StateMachineStore::open(storage, &dir)?;
            Ok::<_, ControllerError>((log, report, machine))
        })
        .await
        .map_err(|join| ControllerError::Raft(join.to_string()))??;
        let (log, report, machine) = opened;
        if let Some(damage) = &report.damage {
            warn!(file = %damage.file.display(), offset = damage.offset, damage = ?damage.damage, "raft log damaged: replayed up to the damage; peers send the rest");
        }
        let config = openraft::Config {
            cluster_name: "tidemark-controllers".to_owned(),
            heartbeat_interval: millis(settings.raft_heartbeat),
            election_timeout_min: millis(settings.raft_election_timeout),
            election_timeout_max: millis(settings.raft_election_timeout) * 2,
            install_snapshot_timeout: 5_000,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(1_000),
            max_in_snapshot_log_to_keep: 100,
            // Snapshot chunks travel as JSON arrays of numbers: keep each well under a frame.
            snapshot_max_chunk_size: 256 * 1024,
            ..openraft::Config::default()
        }
        .validate()
        .map_err(|error| ControllerError::Raft(error.to_string()))?;
        let client = Arc::new(RemotingClient::new(settings.client.clone(), None));
        let raft = ControllerRaft::new(
            settings.id,
            Arc::new(config),
            PeerNetwork::new(client.clone()),
            log.clone(),
            machine.clone(),
        )
        .await
        .map_err(|error| ControllerError::Raft(error.to_string()))?;
        let initialized = raft
            .is_initialized()
            .await
            .map_err(|error| ControllerError::Raft(error.to_string()))?;
        let first = settings.peers.keys().next().copied();
        if !initialized && first == Some(settings.id) {
            // Only the lowest id forms the group (the others wait to hear from it): several
            // nodes forming it at once would be safe, but they then contend for the first
            // terms and leadership flaps during start-up.
            let members: BTreeMap<NodeId, BasicNode> = settings
                .peers
                .iter()
                .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
                .collect();
            if let Err(error) = raft.initialize(members).await {
                debug!(%error, "raft group already formed");
            }
        }
        info!(id = settings.id, peers = ?settings.peers, "controller started");
        let controller = Arc::new(Controller {
            settings,
            raft,
            log,
            machine,
            liveness: Liveness::default(),
            client,
            scan_now: Notify::new(),
            stop: CancellationToken::new(),
        });
        tokio::spawn(scan_for_dead_masters(
            Arc::downgrade(&controller),
            controller.stop.clone(),
        ));
        Ok(controller)
    }

    pub fn settings(&self) -> &ControllerSettings {
        &self.settings
    }

    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    pub(crate) fn raft(&self) -> &ControllerRaft {
        &self.raft
    }

    /// Runs `read` on the replicated state as this controller has applied it.
    pub fn read<R>(&self, read: impl FnOnce(&ReplicaSets) -> R) -> R {
        self.machine.read(read)
    }

    pub fn leadership(&self) -> Leadership {
        let metrics = self.raft.metrics().borrow().clone();
        Leadership {
            leader: metrics.current_leader,
            leader_address: metrics
                .current_leader
                .and_then(|id| self.settings.peers.get(&id).cloned()),
            is_leader: metrics.state == ServerState::Leader,
            role: match metrics.state {
                ServerState::Leader => RaftRole::Leader,
                ServerState::Candidate => RaftRole::Candidate,
                ServerState::Follower => RaftRole::Follower,
                ServerState::Learner | ServerState::Shutdown => RaftRole::Other,
            },
            term: metrics.current_term,
            applied_index: metrics.last_applied.map(|log_id| log_id.index),
            snapshot_index: metrics.snapshot.map(|log_id| log_id.index),
        }
    }

    /// Refusal for a request only the leader serves, naming the leader when known.
    pub(crate) fn not_leader(&self) -> Refusal {
        let leadership = self.leadership();
        Refusal::new(
            ResponseCode::ControllerNotLeader,
            match (leadership.leader, leadership.leader_address) {
                (Some(id), _) if id == self.settings.id => format!(
                    "controller {id} was elected but cannot confirm its leadership yet; ask again"
                ),
                (Some(id), Some(addr)) => {
                    format!(
                        "controller {} is not the leader; controller {id} at {addr} is",
                        self.settings.id
                    )
                }
                _ => format!(
                    "controller {} is not the leader, and no leader is known",
                    self.settings.id
                ),
            },
        )
    }

    /// Waits until this controller is the leader and has applied everything committed before
    /// the call, so a read reflects every earlier write.
    ///
    /// A leader just elected cannot confirm this until its first entry of the term commits;
    /// it retries for up to a second rather than send brokers looking for another leader.
    pub(crate) async fn lead_for_read(&self) -> Result<(), Refusal> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            match self.raft.ensure_linearizable().await {
                Ok(_) => return Ok(()),
                Err(error) => {
                    let leadership = self.leadership();
                    if !leadership.is_leader || tokio::time::Instant::now() >= deadline {
                        debug!(%error, "read refused: leadership not confirmed");
                        return Err(self.not_leader());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Replicates `command` and returns what applying it did.
    pub(crate) async fn propose(&self, command: Command) -> Result<Applied, Refusal> {
        match self.raft.client_write(command).await {
            Ok(written) => Ok(written.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
                Err(self.not_leader())
            }
            Err(error) => Err(Refusal::new(
                ResponseCode::ControllerNotLeader,
                format!("the change was not committed: {error}"),
            )),
        }
    }

    /// Elects (if needed) through Raft and tells the set's brokers about a new master.
    pub(crate) async fn elect(
        &self,
        broker_name: &str,
        request_id: Option<i64>,
        designate: bool,
    ) -> Result<ElectionOutcome, Refusal> {
        let candidates = self.liveness.candidates(broker_name, Instant::now());
        let plan = self.read(|sets| {
            sets.plan_election(
                broker_name,
                request_id,
                designate,
                &candidates,
                self.settings.unclean_election,
            )
        });
        match plan {
            ElectionPlan::Refused(refusal) => Err(refusal),
            ElectionPlan::MasterStillAlive(election) => Ok(ElectionOutcome::StillMaster(election)),
            ElectionPlan::Propose(command) => match self.propose(command).await? {
                Applied::MasterElected(election) => {
                    info!(
                        broker = broker_name,
                        master = election.master,
                        epoch = election.master_epoch,
                        "new master elected"
                    );
                    if self.settings.notify_role_changes {
                        self.notify_role_change(&election);
                    }
                    Ok(ElectionOutcome::Elected(election))
                }
                Applied::MasterLost { master_epoch } => {
                    warn!(
                        broker = broker_name,
                        master_epoch, "master lost and no replica in sync can take over"
                    );
                    Err(Refusal::new(
                        ResponseCode::ControllerMasterNotAvailable,
                        format!("the master of {broker_name} is gone and no replica in its SyncStateSet is alive"),
                    ))
                }
                Applied::Refused(refusal) => Err(refusal),
                other => Err(Refusal::new(
                    ResponseCode::SystemError,
                    format!("an election applied as {other:?}"),
                )),
            },
        }
    }

    /// Sends NOTIFY_BROKER_ROLE_CHANGED (oneway, body the new SyncStateSet, as RocketMQ does)
    /// to every member of the set, in the background.
    fn notify_role_change(&self, election: &Election) {
        let header = NotifyBrokerRoleChangedRequestHeader {
            master_address: Some(election.master_address.clone()),
            master_epoch: Some(election.master_epoch),
            sync_state_set_epoch: Some(election.sync_state_set_epoch),
            master_broker_id: Some(election.master),
        };
        let body = SyncStateSet {
            sync_state_set: election.sync_state_set.clone(),
            sync_state_set_epoch: election.sync_state_set_epoch,
        }
        .to_json_bytes();
        for address in election.members.values() {
            let request =
                RemotingCommand::request_with_header(RequestCode::NotifyBrokerRoleChanged, &header)
                    .with_body(body.clone());
            let (client, address) = (self.client.clone(), address.clone());
            tokio::spawn(async move {
                let sent = tokio::time::timeout(
                    Duration::from_secs(3),
                    client.invoke_oneway(&address, request),
                )
                .await;
                if !matches!(sent, Ok(Ok(()))) {
                    debug!(%address, "role change not delivered; the broker learns it from its next query");
                }
            });
        }
    }

    /// A broker connection closed: brokers on it are dead now, and the scan runs at once.
    pub(crate) fn channel_closed(&self, channel_id: u64) {
        if !self.liveness.channel_closed(channel_id).is_empty() {
            self.scan_now.notify_one();
        }
    }

    /// Builds a snapshot now (and lets Raft purge the log it covers), as it does on its own
    /// every 1,000 entries.
    pub async fn snapshot_now(&self) -> Result<(), ControllerError> {
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|error| ControllerError::Raft(error.to_string()))
    }

    /// Stops the scan and Raft, and closes the log.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        if let Err(error) = self.raft.shutdown().await {
            warn!(%error, "raft did not stop cleanly");
        }
        self.client.shutdown();
        let log = self.log.clone();
        let _ = tokio::task::spawn_blocking(move || log.close()).await;
    }
}

/// How an election request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ElectionOutcome {
    Elected(Election),
    StillMaster(Election),
}

pub(crate) fn election_header(election: &Election) -> ElectMasterResponseHeader {
    ElectMasterResponseHeader {
        master_broker_id: Some(election.master),
        master_address: Some(election.master_address.clone()),
        master_epoch: Some(election.master_epoch),
        sync_state_set_epoch: Some(election.sync_state_set_epoch),
    }
}

pub(crate) fn election_body(election: &Election) -> ElectMasterResponseBody {
    ElectMasterResponseBody {
        broker_member_group: Some(BrokerMemberGroup {
            broker_addrs: election.members.clone(),
            broker_name: election.broker_name.clone(),
            cluster: election.cluster.clone(),
        }),
        sync_state_set: election.sync_state_set.clone(),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// On the leader: every `scan_interval` (or at once when a broker connection closes), elect a
/// master for each set whose master is dead (or missing) while one of its replicas lives. A
/// new leader waits one broker timeout first, so it has heard every live broker's heartbeat
/// before it judges anyone dead.
async fn scan_for_dead_masters(controller: std::sync::Weak<Controller>, stop: CancellationToken) {
    let mut leader_since: Option<Instant> = None;
    loop {
        let Some(this) = controller.upgrade() else {
            return;
        };
        let interval = this.settings.scan_interval;
        let is_leader = this.leadership().is_leader;
        let now = Instant::now();
        leader_since = match (is_leader, leader_since) {
            (false, _) => None,
            (true, None) => Some(now),
            (true, since) => since,
        };
        let settled = leader_since
            .is_some_and(|since| now.duration_since(since) >= this.settings.broker_timeout_default);
        if settled {
            this.liveness
                .forget_older_than(Duration::from_secs(600), now);
            let orphaned: Vec<(String, bool)> = this.read(|sets| {
                sets.sets()
                    .filter(|set| {
                        set.master
                            .is_none_or(|master| !this.liveness.is_alive(&set.name, master, now))
                    })
                    .filter(|set| {
                        set.replicas
                            .keys()
                            .any(|id| this.liveness.is_alive(&set.name, *id, now))
                    })
                    .map(|set| (set.name.clone(), set.master.is_some()))
                    .collect()
            });
            for (broker_name, had_master) in orphaned {
                match this.elect(&broker_name, None, false).await {
                    Ok(_) => {}
                    Err(refusal) if had_master => {
                        warn!(broker = %broker_name, reason = %refusal.reason, "dead master not replaced")
                    }
                    Err(refusal) => {
                        debug!(broker = %broker_name, reason = %refusal.reason, "no master yet")
                    }
                }
            }
        }
        let wake = this.clone();
        drop(this);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
            _ = wake.scan_now.notified() => {}
        }
    }
}
