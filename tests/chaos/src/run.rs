//! One run: the cluster, the workload on the client host, the nemesis on this thread, then the
//! checker and the report.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checker::{self, check, check_availability, unavailability, Verdict};
use crate::clocks;
use crate::cluster::{Cluster, BROKER_SETS, CLIENT_HOST};
use crate::go_app::{Flavor, GoApp, GO_TOPIC, GRPC_TOPIC};
use crate::history::Recorder;
use crate::nemesis::{self, FaultKind, FaultRecord};
use crate::report;
use crate::workload::{self, ORDERED_TOPIC, QUEUES, QUEUE_TOPIC};

/// Traffic before the first fault and after the last.
const QUIET: Duration = Duration::from_secs(3);
/// How long a new topic may take to be routed on every broker set.
const ROUTE_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub seed: u64,
    /// How long faults are injected.
    pub duration: Duration,
    pub faults: Vec<FaultKind>,
    /// Where the run's directory is made.
    pub out: PathBuf,
    /// Whether the POP group runs.
    pub pop: bool,
}

#[derive(Debug)]
pub struct RunOutcome {
    pub verdict: Verdict,
    pub faults: Vec<FaultRecord>,
    /// Per fault, the longest time without an acknowledged send (ms).
    pub unavailable_ms: Vec<f64>,
    pub dir: PathBuf,
}

/// Runs once. `Err` when the run could not be made (no network namespaces here, a cluster
/// that never came up, a workload that could not start): not a verdict on the system.
pub fn run(options: &RunOptions) -> Result<RunOutcome, String> {
    let step_clocks = options.faults.contains(&FaultKind::ClockJump) && clocks::available();
    let mut cluster = Cluster::start(&format!("chaos-{}", options.seed), step_clocks)?;
    for topic in [QUEUE_TOPIC, ORDERED_TOPIC, GO_TOPIC, GRPC_TOPIC] {
        cluster.create_topic(topic, QUEUES)?;
        wait_for_route(&cluster, topic)?;
    }
    let recorder = Recorder::new();
    let mut apps = vec![
        GoApp::start(&cluster, recorder.clone(), Flavor::Remoting)?,
        GoApp::start(&cluster, recorder.clone(), Flavor::Grpc)?,
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let clients = {
        let (namesrv, recorder, stop) = (cluster.namesrv_addrs(), recorder.clone(), stop.clone());
        let pop = options.pop;
        let brokers = BROKER_SETS
            .iter()
            .map(|(name, _)| (*name).to_owned())
            .collect();
        cluster.hosts.run_in(CLIENT_HOST, move || {
            workload::run(namesrv, brokers, pop, recorder, stop)
        })
    };
    std::thread::sleep(QUIET);
    let until = recorder.now() + options.duration.as_secs_f64() * 1e3;
    let faults = nemesis::run(
        &mut cluster,
        &mut apps,
        &options.faults,
        options.seed,
        until,
        &recorder,
    );
    std::thread::sleep(QUIET);
    // The Go applications stop sending first: the drain waits for every group, theirs too.
    for app in &mut apps {
        app.stop_sending();
    }
    stop.store(true, Ordering::Relaxed);
    let finished = clients
        .join()
        .map_err(|_| "the workload's thread panicked".to_owned());
    for app in apps {
        app.shutdown();
    }
    finished?.map_err(|failure| format!("the workload failed: {failure}"))?;
    let ops = recorder.snapshot();
    let mut expect = workload::expectations(options.pop);
    expect.clock_steps = checker::clock_steps(&faults);
    let mut verdict = check(&ops, &expect);
    verdict.anomalies.extend(check_availability(&ops, &faults));
    let unavailable_ms = unavailability(&ops, &faults);
    let dir = options.out.join(format!("seed-{}", options.seed));
    report::write(&dir, options.seed, &ops, &faults, &verdict)
        .map_err(|error| format!("write the report to {}: {error}", dir.display()))?;
    Ok(RunOutcome {
        verdict,
        faults,
        unavailable_ms,
        dir,
    })
}

fn wait_for_route(cluster: &Cluster, topic: &str) -> Result<(), String> {
    let start = Instant::now();
    let namesrv = cluster.namesrv_addrs();
    loop {
        let route = cluster
            .admin(&["topic-route", "-n", &namesrv, "-t", topic])
            .unwrap_or_default();
        if BROKER_SETS.iter().all(|(name, _)| route.contains(name)) {
            return Ok(());
        }
        if start.elapsed() > ROUTE_WAIT {
            return Err(format!("{topic} not routed on every broker set: {route}"));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
