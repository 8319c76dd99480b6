//! What the controllers agree on: every broker set's replicas, its master with the master
//! epoch, and its SyncStateSet with that set's epoch (RocketMQ's `ReplicasInfoManager`).
//!
//! Changes arrive as [`Command`]s through the Raft log and are applied by
//! [`ReplicaSets::apply`], which is deterministic: every precondition a command depends on
//! (the epoch it was decided at, the id it claims) travels inside it and is checked again when
//! it is applied, so two decisions taken on the same old state cannot both take effect. What
//! is not deterministic — which brokers are alive — is decided before proposing, on the
//! leader, by [`ReplicaSets::plan_election`] and the server.
//!
//! Invariants, checked by [`ReplicaSets::check`] after every change in debug builds:
//! - a set's master, when there is one, is one of its replicas and in its SyncStateSet;
//! - its SyncStateSet only names its replicas;
//! - the next id to hand out is above every id in use;
//! - master epoch and SyncStateSet epoch never go down (each change raises its own by one).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tidemark_protocol::ResponseCode;

/// The first id the controller hands out in a broker set (`MixAll.FIRST_BROKER_CONTROLLER_ID`).
pub const FIRST_BROKER_ID: i64 = 1;

/// One member of a broker set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    pub address: String,
    /// `address;timestamp` the broker chose when it applied for its id; re-applying with the
    /// same code proves it is the same broker.
    pub check_code: String,
}

/// One broker set (all brokers sharing a broker name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerSet {
    pub cluster: String,
    pub name: String,
    pub replicas: BTreeMap<i64, Replica>,
    pub next_id: i64,
    pub master: Option<i64>,
    /// Raised by every election, also one that found no master.
    pub master_epoch: i32,
    pub sync_state_set: BTreeSet<i64>,
    pub sync_state_set_epoch: i32,
}

impl BrokerSet {
    fn new(cluster: &str, name: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            name: name.to_owned(),
            replicas: BTreeMap::new(),
            next_id: FIRST_BROKER_ID,
            master: None,
            master_epoch: 0,
            sync_state_set: BTreeSet::new(),
            sync_state_set_epoch: 0,
        }
    }

    pub fn address(&self, id: i64) -> Option<&str> {
        self.replicas
            .get(&id)
            .map(|replica| replica.address.as_str())
    }

    pub fn master_address(&self) -> Option<&str> {
        self.master.and_then(|id| self.address(id))
    }

    /// Never had a master: the first broker to ask becomes it.
    pub fn never_elected(&self) -> bool {
        self.master_epoch == 0
    }

    pub fn members(&self) -> BTreeMap<i64, String> {
        self.replicas
            .iter()
            .map(|(id, replica)| (*id, replica.address.clone()))
            .collect()
    }

    fn check(&self) -> Result<(), String> {
        if let Some(master) = self.master {
            if !self.replicas.contains_key(&master) {
                return Err(format!("{}: master {master} is not a replica", self.name));
            }
            if !self.sync_state_set.contains(&master) {
                return Err(format!(
                    "{}: master {master} is not in its SyncStateSet",
                    self.name
                ));
            }
        }
        if let Some(stranger) = self
            .sync_state_set
            .iter()
            .find(|id| !self.replicas.contains_key(id))
        {
            return Err(format!(
                "{}: SyncStateSet names {stranger}, not a replica",
                self.name
            ));
        }
        if let Some(highest) = self.replicas.keys().next_back() {
            if *highest >= self.next_id {
                return Err(format!(
                    "{}: next id {} is not above {highest}",
                    self.name, self.next_id
                ));
            }
        }
        Ok(())
    }
}

/// A change to the replicated state, as it is written in the Raft log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A broker takes an id in its set (creating the set with its first broker).
    ApplyBrokerId {
        cluster: String,
        broker_name: String,
        broker_id: i64,
        address: String,
        check_code: String,
    },
    /// A registered broker came back at another address.
    UpdateBrokerAddress {
        broker_name: String,
        broker_id: i64,
        address: String,
    },
    /// A new master (`None`: the master is gone and nobody could take over), decided while
    /// the set's master epoch was `at_master_epoch`.
    ElectMaster {
        broker_name: String,
        at_master_epoch: i32,
        new_master: Option<i64>,
    },
    /// The master's new SyncStateSet, replacing the one of epoch `at_sync_state_set_epoch`.
    AlterSyncStateSet {
        broker_name: String,
        master: i64,
        master_epoch: i32,
        at_sync_state_set_epoch: i32,
        sync_state_set: BTreeSet<i64>,
    },
    /// Forget a set (`broker_ids` `None`) or some of its replicas.
    CleanBrokerData {
        broker_name: String,
        broker_ids: Option<BTreeSet<i64>>,
    },
}

/// What applying a command did: the answer for whoever proposed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Applied {
    /// An entry Raft wrote for itself (a new leader's blank entry, a membership change).
    NoCommand,
    BrokerIdApplied,
    BrokerAddressUpdated,
    MasterElected(Election),
    /// No replica could become master; the set has none now.
    MasterLost {
        master_epoch: i32,
    },
    SyncStateSetAltered {
        sync_state_set_epoch: i32,
    },
    Cleaned,
    Refused(Refusal),
}

/// A set's master after an election.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Election {
    pub cluster: String,
    pub broker_name: String,
    pub master: i64,
    pub master_address: String,
    pub master_epoch: i32,
    pub sync_state_set: BTreeSet<i64>,
    pub sync_state_set_epoch: i32,
    pub members: BTreeMap<i64, String>,
}

/// Why a request was refused, with the response code RocketMQ answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: i32,
    pub reason: String,
}

impl Refusal {
    pub fn new(code: ResponseCode, reason: impl Into<String>) -> Self {
        Self {
            code: code.to_i32(),
            reason: reason.into(),
        }
    }

    pub fn response_code(&self) -> ResponseCode {
        ResponseCode::from_i32(self.code)
    }
}

/// What the leader knows about a live broker, for choosing among candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub id: i64,
    /// The last epoch in its epoch file.
    pub epoch: i32,
    pub max_offset: i64,
    /// Lower wins among equals.
    pub priority: i32,
}

/// How an election request turns out before anything is proposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectionPlan {
    /// Propose this [`Command::ElectMaster`].
    Propose(Command),
    /// The current master stays; nothing to propose.
    MasterStillAlive(Election),
    Refused(Refusal),
}

/// Every broker set the controllers know, by broker name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaSets {
    sets: BTreeMap<String, BrokerSet>,
}

impl ReplicaSets {
    pub fn get(&self, broker_name: &str) -> Option<&BrokerSet> {
        self.sets.get(broker_name)
    }

    pub fn sets(&self) -> impl Iterator<Item = &BrokerSet> {
        self.sets.values()
    }

    /// The id a new broker of `broker_name` should apply for.
    pub fn next_broker_id(&self, broker_name: &str) -> i64 {
        self.sets
            .get(broker_name)
            .map_or(FIRST_BROKER_ID, |set| set.next_id)
    }

    /// Whether an [`Command::ApplyBrokerId`] would be accepted now (checked again on apply).
    pub fn check_apply_broker_id(
        &self,
        broker_name: &str,
        broker_id: i64,
        check_code: &str,
    ) -> Result<(), Refusal> {
        match self.sets.get(broker_name) {
            None if broker_id == FIRST_BROKER_ID => Ok(()),
            None => Err(Refusal::new(
                ResponseCode::ControllerBrokerIdInvalid,
                format!(
                    "broker set {broker_name} is not registered yet, so its first broker must \
                     apply for id {FIRST_BROKER_ID}, not {broker_id}"
                ),
            )),
            Some(set) => match set.replicas.get(&broker_id) {
                None => Ok(()),
                Some(replica) if replica.check_code == check_code => Ok(()),
                Some(replica) => Err(Refusal::new(
                    ResponseCode::ControllerBrokerIdInvalid,
                    format!(
                        "id {broker_id} of broker set {broker_name} belongs to the broker at {}",
                        replica.address
                    ),
                )),
            },
        }
    }

    /// Decides an election on the leader. `alive` are the live replicas of the set with what
    /// their heartbeats said; `request_id` is the broker asking for itself (or designated by an
    /// operator when `designate`), `None` when the controller itself noticed a dead master.
    /// Only SyncStateSet members are candidates unless `unclean` allows any live replica.
    pub fn plan_election(
        &self,
        broker_name: &str,
        request_id: Option<i64>,
        designate: bool,
        alive: &[Candidate],
        unclean: bool,
    ) -> ElectionPlan {
        let Some(set) = self.sets.get(broker_name) else {
            return ElectionPlan::Refused(Refusal::new(
                ResponseCode::ControllerBrokerNeedToBeRegistered,
                format!("broker set {broker_name} is not registered with the controller"),
            ));
        };
        let propose = |new_master| {
            ElectionPlan::Propose(Command::ElectMaster {
                broker_name: broker_name.to_owned(),
                at_master_epoch: set.master_epoch,
                new_master,
            })
        };
        if set.never_elected() {
            if let Some(id) = request_id.filter(|id| set.replicas.contains_key(id)) {
                return propose(Some(id));
            }
        }
        let preferred = if designate { request_id } else { None };
        let chosen = choose(&set.sync_state_set, alive, set.master, preferred).or_else(|| {
            unclean
                .then(|| {
                    let all: BTreeSet<i64> = set.replicas.keys().copied().collect();
                    choose(&all, alive, set.master, preferred)
                })
                .flatten()
        });
        match chosen {
            Some(id) if Some(id) == set.master => {
                ElectionPlan::MasterStillAlive(election_of(set, id))
            }
            Some(id) => propose(Some(id)),
            None if request_id.is_none() && set.master.is_some() => propose(None),
            None if request_id.is_none() => ElectionPlan::Refused(Refusal::new(
                ResponseCode::ControllerMasterNotAvailable,
                format!("broker set {broker_name} has no master and no replica can take over"),
            )),
            None => ElectionPlan::Refused(Refusal::new(
                ResponseCode::ControllerElectMasterFailed,
                format!(
                    "no live replica of {broker_name} in its SyncStateSet {:?} can become master",
                    set.sync_state_set
                ),
            )),
        }
    }

    /// Whether the master of `broker_name` may set `sync_state_set` now; `alive` says whether
    /// a replica is alive (leader-local knowledge, so checked only before proposing).
    pub fn check_alter_sync_state_set(
        &self,
        command: &Command,
        alive: impl Fn(i64) -> bool,
    ) -> Result<(), Refusal> {
        let Command::AlterSyncStateSet {
            broker_name,
            sync_state_set,
            ..
        } = command
        else {
            return Ok(());
        };
        self.validate_alter(command)?;
        if let Some(dead) = sync_state_set.iter().find(|id| !alive(**id)) {
            return Err(Refusal::new(
                ResponseCode::ControllerBrokerNotAlive,
                format!("replica {dead} of {broker_name} is not alive"),
            ));
        }
        Ok(())
    }

    /// Applies one committed command. Deterministic: every controller gets the same answer.
    pub fn apply(&mut self, command: &Command) -> Applied {
        let applied = self.apply_unchecked(command);
        if cfg!(debug_assertions) {
            if let Err(broken) = self.check() {
                panic!("replica sets invariant broken by {command:?}: {broken}");
            }
        }
        applied
    }

    fn apply_unchecked(&mut self, command: &Command) -> Applied {
        match command {
            Command::ApplyBrokerId {
                cluster,
                broker_name,
                broker_id,
                address,
                check_code,
            } => {
                if let Err(refusal) =
                    self.check_apply_broker_id(broker_name, *broker_id, check_code)
                {
                    return Applied::Refused(refusal);
                }
                let set = self
                    .sets
                    .entry(broker_name.clone())
                    .or_insert_with(|| BrokerSet::new(cluster, broker_name));
                set.replicas.insert(
                    *broker_id,
                    Replica {
                        address: address.clone(),
                        check_code: check_code.clone(),
                    },
                );
                set.next_id = set.next_id.max(broker_id.saturating_add(1));
                Applied::BrokerIdApplied
            }
            Command::UpdateBrokerAddress {
                broker_name,
                broker_id,
                address,
            } => match self
                .sets
                .get_mut(broker_name)
                .and_then(|set| set.replicas.get_mut(broker_id))
            {
                Some(replica) => {
                    replica.address.clone_from(address);
                    Applied::BrokerAddressUpdated
                }
                None => Applied::Refused(not_registered(broker_name, *broker_id)),
            },
            Command::ElectMaster {
                broker_name,
                at_master_epoch,
                new_master,
            } => {
                let Some(set) = self.sets.get_mut(broker_name) else {
                    return Applied::Refused(Refusal::new(
                        ResponseCode::ControllerBrokerNeedToBeRegistered,
                        format!("broker set {broker_name} is not registered with the controller"),
                    ));
                };
                if set.master_epoch != *at_master_epoch {
                    return Applied::Refused(Refusal::new(
                        ResponseCode::ControllerFencedMasterEpoch,
                        format!(
                            "election decided at master epoch {at_master_epoch}, but {broker_name} \
                             is at {} already",
                            set.master_epoch
                        ),
                    ));
                }
                match new_master {
                    Some(id) if set.replicas.contains_key(id) => {
                        set.master = Some(*id);
                        set.master_epoch += 1;
                        set.sync_state_set = BTreeSet::from([*id]);
                        set.sync_state_set_epoch += 1;
                        Applied::MasterElected(election_of(set, *id))
                    }
                    Some(id) => Applied::Refused(not_registered(broker_name, *id)),
                    None => {
                        // The SyncStateSet stays: its members are the ones that may take over
                        // when they come back.
                        set.master = None;
                        set.master_epoch += 1;
                        Applied::MasterLost {
                            master_epoch: set.master_epoch,
                        }
                    }
                }
            }
            Command::AlterSyncStateSet {
                broker_name,
                sync_state_set,
                ..
            } => {
                if let Err(refusal) = self.validate_alter(command) {
                    return Applied::Refused(refusal);
                }
                let Some(set) = self.sets.get_mut(broker_name) else {
                    return Applied::Refused(metadata_missing(broker_name));
                };
                set.sync_state_set.clone_from(sync_state_set);
                set.sync_state_set_epoch += 1;
                Applied::SyncStateSetAltered {
                    sync_state_set_epoch: set.sync_state_set_epoch,
                }
            }
            Command::CleanBrokerData {
                broker_name,
                broker_ids,
            } => {
                match broker_ids {
                    None => {
                        self.sets.remove(broker_name);
                    }
                    Some(ids) => {
                        if let Some(set) = self.sets.get_mut(broker_name) {
                            for id in ids {
                                set.replicas.remove(id);
                                set.sync_state_set.remove(id);
                                if set.master == Some(*id) {
                                    set.master = None;
                                }
                            }
                            if set.replicas.is_empty() {
                                self.sets.remove(broker_name);
                            }
                        }
                    }
                }
                Applied::Cleaned
            }
        }
    }

    /// The deterministic half of a SyncStateSet change's checks.
    fn validate_alter(&self, command: &Command) -> Result<(), Refusal> {
        let Command::AlterSyncStateSet {
            broker_name,
            master,
            master_epoch,
            at_sync_state_set_epoch,
            sync_state_set,
        } = command
        else {
            return Ok(());
        };
        let Some(set) = self.sets.get(broker_name) else {
            return Err(metadata_missing(broker_name));
        };
        if set.master != Some(*master) {
            return Err(Refusal::new(
                ResponseCode::ControllerInvalidMaster,
                format!("{broker_name}'s master is {:?}, not {master}", set.master),
            ));
        }
        if set.master_epoch != *master_epoch {
            return Err(Refusal::new(
                ResponseCode::ControllerFencedMasterEpoch,
                format!(
                    "{broker_name}'s master epoch is {}, not {master_epoch}",
                    set.master_epoch
                ),
            ));
        }
        if set.sync_state_set_epoch != *at_sync_state_set_epoch {
            return Err(Refusal::new(
                ResponseCode::ControllerFencedSyncStateSetEpoch,
                format!(
                    "{broker_name}'s SyncStateSet epoch is {}, not {at_sync_state_set_epoch}",
                    set.sync_state_set_epoch
                ),
            ));
        }
        if &set.sync_state_set == sync_state_set {
            return Err(Refusal::new(
                ResponseCode::ControllerAlterSyncStateSetFailed,
                "the new SyncStateSet is the current one",
            ));
        }
        if let Some(stranger) = sync_state_set
            .iter()
            .find(|id| !set.replicas.contains_key(id))
        {
            return Err(Refusal::new(
                ResponseCode::ControllerInvalidReplicas,
                format!("{stranger} is not a replica of {broker_name}"),
            ));
        }
        if !sync_state_set.contains(master) {
            return Err(Refusal::new(
                ResponseCode::ControllerAlterSyncStateSetFailed,
                format!("the new SyncStateSet leaves out the master {master}"),
            ));
        }
        Ok(())
    }

    /// Checks the invariants in the module documentation.
    pub fn check(&self) -> Result<(), String> {
        self.sets.values().try_for_each(BrokerSet::check)
    }
}

/// The best live candidate in `members`: the current master while it is alive and nobody
/// else is preferred; otherwise the preferred one if it qualifies (and nobody if it does not);
/// otherwise the highest epoch, then the longest log, then the lowest priority number.
fn choose(
    members: &BTreeSet<i64>,
    alive: &[Candidate],
    master: Option<i64>,
    preferred: Option<i64>,
) -> Option<i64> {
    let eligible: Vec<&Candidate> = alive
        .iter()
        .filter(|candidate| members.contains(&candidate.id))
        .collect();
    if eligible.is_empty() {
        return None;
    }
    let is_eligible = |id| eligible.iter().any(|candidate| candidate.id == id);
    if let Some(master) = master.filter(|id| is_eligible(*id)) {
        if preferred.is_none_or(|id| id == master) {
            return Some(master);
        }
    }
    if let Some(id) = preferred {
        return is_eligible(id).then_some(id);
    }
    eligible
        .into_iter()
        .min_by_key(|candidate| {
            (
                std::cmp::Reverse(candidate.epoch),
                std::cmp::Reverse(candidate.max_offset),
                candidate.priority,
                candidate.id,
            )
        })
        .map(|candidate| candidate.id)
}

fn election_of(set: &BrokerSet, master: i64) -> Election {
    Election {
        cluster: set.cluster.clone(),
        broker_name: set.name.clone(),
        master,
        master_address: set.address(master).unwrap_or_default().to_owned(),
        master_epoch: set.master_epoch,
        sync_state_set: set.sync_state_set.clone(),
        sync_state_set_epoch: set.sync_state_set_epoch,
        members: set.members(),
    }
}

fn not_registered(broker_name: &str, broker_id: i64) -> Refusal {
    Refusal::new(
        ResponseCode::ControllerBrokerNeedToBeRegistered,
        format!("broker id {broker_id} is not registered in broker set {broker_name}"),
    )
}

pub(crate) fn metadata_missing(broker_name: &str) -> Refusal {
    Refusal::new(
        ResponseCode::ControllerBrokerMetadataNotExist,
        format!("the controller has no metadata of broker set {broker_name}"),
    )
}

#[cfg(test)]
#[path = "replicas_tests.rs"]
mod tests;
