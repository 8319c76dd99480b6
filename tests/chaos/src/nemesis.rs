//! Faults, chosen at random from a seed, applied to the cluster and undone, each logged with
//! the time it started, was healed and the cluster settled again.
//!
//! Not here, and why: a lossy or delayed link (this kernel has no `netem`; a slow link is a
//! token bucket instead), a full disk and clock jumps (to come). A crashed consumer is the Go
//! application's SIGKILL.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, BROKER_SETS, CLIENT_HOST, CONTROLLER_HOSTS, NAMESRV_HOSTS};
use crate::go_app::GoApp;
use crate::history::Recorder;

/// xorshift64*: reproducible choices from the seed.
#[derive(Debug, Clone)]
pub struct Choices(u64);

impl Choices {
    pub fn new(seed: u64) -> Choices {
        Choices(seed.max(1))
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound.max(1)
    }

    /// A duration between `low` and `high` seconds, in whole 100 ms.
    pub fn seconds(&mut self, low: u64, high: u64) -> Duration {
        let tenths = low * 10 + self.below((high - low) * 10 + 1);
        Duration::from_millis(tenths * 100)
    }
}

/// What a fault does; the targets are resolved when it starts (the master at that moment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    KillMaster,
    KillSlave,
    PauseMaster,
    KillControllerLeader,
    KillNamesrv,
    /// The master cannot reach the controllers; clients and its slave still reach it.
    MasterFromControllers,
    /// A broker cut off from every other host.
    IsolateBroker,
    /// The controllers' leader cut off from the other two.
    ControllerMinority,
    /// The clients cannot reach a master.
    ClientsFromMaster,
    /// What reaches a master is limited to 300 kbit/s.
    SlowMaster,
    /// The Go application (producer and consumer) SIGKILLed, started again when healed.
    KillApp,
}

pub const ALL_FAULTS: [FaultKind; 11] = [
    FaultKind::KillMaster,
    FaultKind::KillSlave,
    FaultKind::PauseMaster,
    FaultKind::KillControllerLeader,
    FaultKind::KillNamesrv,
    FaultKind::MasterFromControllers,
    FaultKind::IsolateBroker,
    FaultKind::ControllerMinority,
    FaultKind::ClientsFromMaster,
    FaultKind::SlowMaster,
    FaultKind::KillApp,
];

impl FaultKind {
    /// Whether the fault takes a broker set's master away (its clients wait for an election).
    pub fn loses_master(self) -> bool {
        matches!(
            self,
            FaultKind::KillMaster | FaultKind::PauseMaster | FaultKind::MasterFromControllers
        )
    }
}

/// One fault as it happened.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultRecord {
    pub kind: FaultKind,
    /// The hosts it acted on.
    pub targets: Vec<String>,
    /// The broker set those belong to, for a fault on a broker.
    pub set: Option<String>,
    pub started_ms: f64,
    pub healed_ms: Option<f64>,
    /// When the cluster was whole again (`None`: not within the settle wait).
    pub settled_ms: Option<f64>,
    /// Whether it overlapped another fault (the second of a pair).
    pub overlapped: bool,
}

/// A fault in force: what to undo.
#[derive(Debug)]
enum Undo {
    Restart(String),
    Continue(String),
    Heal(Vec<(String, String)>),
    Unthrottle(String),
    RestartApp,
}

/// Applies `kind` now; returns the hosts it acted on and how to undo it (`None` when the
/// cluster offers no target, e.g. no master to kill).
fn apply(
    cluster: &mut Cluster,
    app: &mut Option<GoApp>,
    kind: FaultKind,
    choices: &mut Choices,
) -> Option<(Vec<String>, Undo)> {
    let set = BROKER_SETS[choices.below(BROKER_SETS.len() as u64) as usize];
    let pairs = |host: &str, others: &[&str]| -> Vec<(String, String)> {
        others
            .iter()
            .filter(|other| **other != host)
            .map(|other| (host.to_owned(), (*other).to_owned()))
            .collect()
    };
    let (targets, undo) = match kind {
        FaultKind::KillMaster => {
            let host = cluster.master_of(set.0)?;
            cluster.processes.get_mut(&host)?.kill();
            (vec![host.clone()], Undo::Restart(host))
        }
        FaultKind::KillSlave => {
            let master = cluster.master_of(set.0)?;
            let host = set.1.iter().find(|host| **host != master)?.to_string();
            cluster.processes.get_mut(&host)?.kill();
            (vec![host.clone()], Undo::Restart(host))
        }
        FaultKind::PauseMaster => {
            let host = cluster.master_of(set.0)?;
            cluster.processes.get(&host)?.signal("STOP");
            (vec![host.clone()], Undo::Continue(host))
        }
        FaultKind::KillControllerLeader => {
            let host = cluster.controller_leader()?;
            cluster.processes.get_mut(&host)?.kill();
            (vec![host.clone()], Undo::Restart(host))
        }
        FaultKind::KillNamesrv => {
            let host = NAMESRV_HOSTS[choices.below(2) as usize].to_owned();
            cluster.processes.get_mut(&host)?.kill();
            (vec![host.clone()], Undo::Restart(host))
        }
        FaultKind::MasterFromControllers => {
            let host = cluster.master_of(set.0)?;
            let cut = pairs(&host, &CONTROLLER_HOSTS);
            cut_all(cluster, &cut);
            (vec![host], Undo::Heal(cut))
        }
        FaultKind::IsolateBroker => {
            let host = set.1[choices.below(2) as usize].to_owned();
            let everyone: Vec<String> = cluster.processes.keys().cloned().collect();
            let everyone: Vec<&str> = everyone
                .iter()
                .map(String::as_str)
                .chain([CLIENT_HOST])
                .collect();
            let cut = pairs(&host, &everyone);
            cut_all(cluster, &cut);
            (vec![host], Undo::Heal(cut))
        }
        FaultKind::ControllerMinority => {
            let host = cluster.controller_leader()?;
            let cut = pairs(&host, &CONTROLLER_HOSTS);
            cut_all(cluster, &cut);
            (vec![host], Undo::Heal(cut))
        }
        FaultKind::ClientsFromMaster => {
            let host = cluster.master_of(set.0)?;
            let cut = vec![(host.clone(), CLIENT_HOST.to_owned())];
            cut_all(cluster, &cut);
            (vec![host], Undo::Heal(cut))
        }
        FaultKind::KillApp => {
            app.as_mut()?.kill();
            (vec![CLIENT_HOST.to_owned()], Undo::RestartApp)
        }
        FaultKind::SlowMaster => {
            let host = cluster.master_of(set.0)?;
            cluster.hosts.throttle(&host, Some("300kbit"));
            (vec![host.clone()], Undo::Unthrottle(host))
        }
    };
    Some((targets, undo))
}

fn cut_all(cluster: &Cluster, pairs: &[(String, String)]) {
    for (a, b) in pairs {
        cluster.hosts.cut(a, b);
    }
}

fn undo(cluster: &mut Cluster, app: &mut Option<GoApp>, undo: Undo) {
    match undo {
        Undo::Restart(host) => {
            if let Some(process) = cluster.processes.get_mut(&host) {
                process.restart();
            }
        }
        Undo::Continue(host) => {
            if let Some(process) = cluster.processes.get(&host) {
                process.signal("CONT");
            }
        }
        Undo::Heal(pairs) => {
            for (a, b) in pairs {
                cluster.hosts.heal(&a, &b);
            }
        }
        Undo::Unthrottle(host) => cluster.hosts.throttle(&host, None),
        Undo::RestartApp => {
            if let Some(failure) = app.as_mut().and_then(|app| app.restart().err()) {
                eprintln!("chaos: the Go application did not start again: {failure}");
            }
        }
    }
}

/// Faults one after another until `until` (ms of the run): a quiet 2–5 s, then a fault held
/// 3–8 s (a paused master 3 s longer, so its controller heartbeats lapse), now and then a
/// second one during the first; then healed, and the next waits until the cluster is whole.
pub fn run(
    cluster: &mut Cluster,
    app: &mut Option<GoApp>,
    faults: &[FaultKind],
    seed: u64,
    until_ms: f64,
    recorder: &Recorder,
) -> Vec<FaultRecord> {
    let mut choices = Choices::new(seed);
    let mut log: Vec<FaultRecord> = Vec::new();
    while recorder.now() < until_ms {
        std::thread::sleep(choices.seconds(2, 5));
        if recorder.now() >= until_ms {
            break;
        }
        let first = faults[choices.below(faults.len() as u64) as usize];
        let second =
            (choices.below(4) == 0).then(|| faults[choices.below(faults.len() as u64) as usize]);
        let mut hold = choices.seconds(3, 8);
        let mut in_force = Vec::new();
        for (index, kind) in [Some(first), second].into_iter().flatten().enumerate() {
            let started_ms = recorder.now();
            let Some((targets, how)) = apply(cluster, app, kind, &mut choices) else {
                continue;
            };
            if kind == FaultKind::PauseMaster {
                hold += Duration::from_secs(3);
            }
            eprintln!("chaos: {:>8.0} ms {kind:?} on {targets:?}", started_ms);
            in_force.push((log.len(), how));
            let set = BROKER_SETS
                .iter()
                .find(|(_, replicas)| {
                    targets
                        .iter()
                        .any(|target| replicas.contains(&target.as_str()))
                })
                .map(|(name, _)| (*name).to_owned());
            log.push(FaultRecord {
                kind,
                targets,
                set,
                started_ms,
                healed_ms: None,
                settled_ms: None,
                overlapped: index > 0,
            });
            if index == 0 {
                // The second starts part-way through the first's hold.
                let lead = hold / 2;
                std::thread::sleep(lead);
                hold -= lead;
            }
        }
        std::thread::sleep(hold);
        for (index, how) in in_force.into_iter().rev() {
            undo(cluster, app, how);
            log[index].healed_ms = Some(recorder.now());
        }
        let settled = cluster.settled().ok().map(|_| recorder.now());
        for record in log.iter_mut().filter(|record| record.settled_ms.is_none()) {
            record.settled_ms = settled;
        }
        if settled.is_none() {
            eprintln!(
                "chaos: the cluster did not settle after {:?}",
                log.last().map(|record| record.kind)
            );
            break;
        }
    }
    log
}
