//! Faults, chosen at random from a seed, applied to the cluster and undone, each logged with
//! the time it started, was healed and the cluster settled again.
//!
//! Not here, and why: a delayed link (this kernel has no `netem`; a slow link is a token bucket
//! and a lossy one a random-drop filter instead). A crashed consumer is the Go applications'
//! SIGKILL.

use std::collections::BTreeMap;
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
    /// One of the Go applications (producer and consumer: remoting or gRPC) SIGKILLed, started
    /// again when healed.
    KillApp,
    /// A broker's disk (master or slave) full but for a few pages.
    DiskFull,
    /// A master's link loses 10, 30 or 60 % of its packets each way, at random.
    LossyMaster,
    /// A broker's (master or slave) wall clock stepped 20–90 s forward or back, and back to
    /// true when healed (needs libfaketime; not drawn without it).
    ClockJump,
}

pub const ALL_FAULTS: [FaultKind; 14] = [
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
    FaultKind::DiskFull,
    FaultKind::LossyMaster,
    FaultKind::ClockJump,
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

/// One thing a fault does to the cluster. Faults may overlap and hit the same thing (two cuts
/// of one pair, a kill of a host already down): each is done when the first fault takes it
/// and undone when the last one lets it go.
#[derive(Debug, Clone)]
enum Action {
    /// SIGKILL a server; restarted when undone.
    Down(String),
    /// SIGSTOP a server; SIGCONT when undone.
    Pause(String),
    /// No packet between two hosts.
    Cut(String, String),
    /// What reaches a host limited.
    Slow(String),
    /// A Go application (by its place among the run's) SIGKILLed; started again when undone.
    AppDown(usize),
    /// A broker's disk filled; emptied when undone.
    DiskFull(String),
    /// A share (in percent) of what reaches or leaves a host dropped.
    Lossy(String, u32),
    /// A broker's wall clock this many seconds off; true again when undone.
    Clock(String, i64),
}

impl Action {
    fn key(&self) -> String {
        match self {
            Action::Down(host) => format!("down {host}"),
            Action::Pause(host) => format!("pause {host}"),
            Action::Cut(a, b) if a <= b => format!("cut {a} {b}"),
            Action::Cut(a, b) => format!("cut {b} {a}"),
            Action::Slow(host) => format!("slow {host}"),
            Action::AppDown(app) => format!("app {app} down"),
            Action::DiskFull(host) => format!("disk full {host}"),
            Action::Lossy(host, _) => format!("lossy {host}"),
            Action::Clock(host, _) => format!("clock {host}"),
        }
    }
}

/// The cluster and what the faults in force hold of it.
struct Injector<'a> {
    cluster: &'a mut Cluster,
    apps: &'a mut [GoApp],
    held: BTreeMap<String, usize>,
}

impl Injector<'_> {
    fn take(&mut self, action: &Action) {
        let count = self.held.entry(action.key()).or_default();
        *count += 1;
        if *count > 1 {
            return;
        }
        let cluster = &mut *self.cluster;
        match action {
            Action::Down(host) => {
                if let Some(process) = cluster.processes.get_mut(host) {
                    process.kill();
                }
            }
            Action::Pause(host) => {
                if let Some(process) = cluster.processes.get(host) {
                    process.signal("STOP");
                }
            }
            Action::Cut(a, b) => cluster.hosts.cut(a, b),
            Action::Slow(host) => cluster.hosts.throttle(host, Some("300kbit")),
            Action::Lossy(host, percent) => cluster.hosts.lose(host, Some(*percent)),
            Action::Clock(host, seconds) => {
                if let Err(failure) = cluster.step_clock(host, *seconds) {
                    eprintln!("chaos: {failure}");
                }
            }
            Action::AppDown(app) => {
                if let Some(app) = self.apps.get_mut(*app) {
                    app.kill();
                }
            }
            Action::DiskFull(host) => {
                if let Err(failure) = cluster.fill_disk(host) {
                    eprintln!("chaos: {failure}");
                }
            }
        }
    }

    fn release(&mut self, action: &Action) {
        let key = action.key();
        let Some(count) = self.held.get_mut(&key) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        self.held.remove(&key);
        let cluster = &mut *self.cluster;
        match action {
            Action::Down(host) => {
                if let Some(process) = cluster.processes.get_mut(host) {
                    process.restart();
                }
            }
            Action::Pause(host) => {
                if let Some(process) = cluster.processes.get(host) {
                    process.signal("CONT");
                }
            }
            Action::Cut(a, b) => cluster.hosts.heal(a, b),
            Action::Slow(host) => cluster.hosts.throttle(host, None),
            Action::Lossy(host, _) => cluster.hosts.lose(host, None),
            Action::Clock(host, _) => {
                if let Err(failure) = cluster.step_clock(host, 0) {
                    eprintln!("chaos: {failure}");
                }
            }
            Action::AppDown(app) => {
                let restarted = self.apps.get_mut(*app).map(GoApp::restart);
                if let Some(Err(failure)) = restarted {
                    eprintln!("chaos: the Go application did not start again: {failure}");
                }
            }
            Action::DiskFull(host) => {
                if let Err(failure) = cluster.free_disk(host) {
                    eprintln!("chaos: {failure}");
                }
            }
        }
    }

    /// What `kind` does now, with its targets resolved (`None` when the cluster offers none,
    /// e.g. no master to kill).
    fn plan(&self, kind: FaultKind, choices: &mut Choices) -> Option<(Vec<String>, Vec<Action>)> {
        let cluster = &*self.cluster;
        let set = BROKER_SETS[choices.below(BROKER_SETS.len() as u64) as usize];
        let cut_from = |host: &str, others: &[&str]| -> Vec<Action> {
            others
                .iter()
                .filter(|other| **other != host)
                .map(|other| Action::Cut(host.to_owned(), (*other).to_owned()))
                .collect()
        };
        let planned = match kind {
            FaultKind::KillMaster => {
                let host = cluster.master_of(set.0)?;
                (vec![host.clone()], vec![Action::Down(host)])
            }
            FaultKind::KillSlave => {
                let master = cluster.master_of(set.0)?;
                let host = set.1.iter().find(|host| **host != master)?.to_string();
                (vec![host.clone()], vec![Action::Down(host)])
            }
            FaultKind::PauseMaster => {
                let host = cluster.master_of(set.0)?;
                (vec![host.clone()], vec![Action::Pause(host)])
            }
            FaultKind::KillControllerLeader => {
                let host = cluster.controller_leader()?;
                (vec![host.clone()], vec![Action::Down(host)])
            }
            FaultKind::KillNamesrv => {
                let host = NAMESRV_HOSTS[choices.below(2) as usize].to_owned();
                (vec![host.clone()], vec![Action::Down(host)])
            }
            FaultKind::MasterFromControllers => {
                let host = cluster.master_of(set.0)?;
                let cuts = cut_from(&host, &CONTROLLER_HOSTS);
                (vec![host], cuts)
            }
            FaultKind::IsolateBroker => {
                let host = set.1[choices.below(2) as usize].to_owned();
                let everyone: Vec<&str> = cluster
                    .processes
                    .keys()
                    .map(String::as_str)
                    .chain([CLIENT_HOST])
                    .collect();
                let cuts = cut_from(&host, &everyone);
                (vec![host], cuts)
            }
            FaultKind::ControllerMinority => {
                let host = cluster.controller_leader()?;
                let cuts = cut_from(&host, &CONTROLLER_HOSTS);
                (vec![host], cuts)
            }
            FaultKind::ClientsFromMaster => {
                let host = cluster.master_of(set.0)?;
                let cuts = vec![Action::Cut(host.clone(), CLIENT_HOST.to_owned())];
                (vec![host], cuts)
            }
            FaultKind::KillApp => {
                let app = choices.below(self.apps.len() as u64) as usize;
                let name = self.apps.get(app)?.flavor().name();
                (vec![name.to_owned()], vec![Action::AppDown(app)])
            }
            FaultKind::SlowMaster => {
                let host = cluster.master_of(set.0)?;
                (vec![host.clone()], vec![Action::Slow(host)])
            }
            FaultKind::DiskFull => {
                let host = set.1[choices.below(2) as usize].to_owned();
                (vec![host.clone()], vec![Action::DiskFull(host)])
            }
            FaultKind::LossyMaster => {
                let host = cluster.master_of(set.0)?;
                let percent = [10, 30, 60][choices.below(3) as usize];
                (vec![host.clone()], vec![Action::Lossy(host, percent)])
            }
            FaultKind::ClockJump => {
                let host = set.1[choices.below(2) as usize].to_owned();
                let size = 20 + choices.below(71) as i64;
                let seconds = if choices.below(2) == 0 { size } else { -size };
                if !cluster.clocks_step() {
                    return None;
                }
                (vec![host.clone()], vec![Action::Clock(host, seconds)])
            }
        };
        Some(planned)
    }
}

/// Faults one after another until `until` (ms of the run): a quiet 2–5 s, then a fault held
/// 3–8 s (a paused master 3 s longer, so its controller heartbeats lapse), now and then a
/// second one during the first; then healed, and the next waits until the cluster is whole.
pub fn run(
    cluster: &mut Cluster,
    apps: &mut [GoApp],
    faults: &[FaultKind],
    seed: u64,
    until_ms: f64,
    recorder: &Recorder,
) -> Vec<FaultRecord> {
    let mut choices = Choices::new(seed);
    let mut injector = Injector {
        cluster,
        apps,
        held: BTreeMap::new(),
    };
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
            let Some((targets, how)) = injector.plan(kind, &mut choices) else {
                continue;
            };
            for action in &how {
                injector.take(action);
            }
            if kind == FaultKind::PauseMaster {
                hold += Duration::from_secs(3);
            }
            eprintln!(
                "chaos: {:>8.0} ms {kind:?} on {targets:?}: {how:?}",
                started_ms
            );
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
            for action in how.iter().rev() {
                injector.release(action);
            }
            log[index].healed_ms = Some(recorder.now());
        }
        let settled = injector.cluster.settled().ok().map(|_| recorder.now());
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
