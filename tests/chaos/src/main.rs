//! `tidemark-chaos`: seeded fault runs against a Tidemark cluster in network namespaces (root
//! needed). `run` makes one run and exits non-zero on any anomaly; `soak` makes runs with
//! fresh seeds until its time is up, keeping every run's directory.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use tidemark_chaos::checker::{check, check_availability, clock_steps};
use tidemark_chaos::cluster::Cluster;
use tidemark_chaos::history::Kind;
use tidemark_chaos::nemesis::{FaultKind, ALL_FAULTS};
use tidemark_chaos::run::{run, RunOptions};
use tidemark_chaos::{pop_workload, report, workload};

#[derive(Parser)]
#[command(about = "Seeded faults against a Tidemark cluster, and a checker over the history")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One run.
    Run {
        /// Replays a run's choices (default: from the clock).
        #[arg(long)]
        seed: Option<u64>,
        /// Seconds of faults.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only these faults (comma-separated; default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        faults: Vec<FaultKind>,
    },
    /// Checks a run's history again and rewrites its summary and chart (after a change to the
    /// checker or the report).
    Recheck {
        /// The run's directory (`target/chaos/seed-N`).
        dir: PathBuf,
    },
    /// Removes what runs stopped by a signal left: their network namespaces, the servers
    /// still running in them, and the brokers' disks.
    Cleanup,
    /// Runs with fresh seeds until `hours` are up.
    Soak {
        #[arg(long, default_value_t = 1.0)]
        hours: f64,
        /// Seconds of faults per run.
        #[arg(long, default_value_t = 300)]
        seconds: u64,
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |since| since.as_nanos() as u64)
        | 1
}

/// One run, printed; whether it was clean.
fn one(
    seed: u64,
    seconds: u64,
    out: &std::path::Path,
    faults: &[FaultKind],
) -> Result<bool, String> {
    let options = RunOptions {
        seed,
        duration: Duration::from_secs(seconds),
        faults: faults.to_vec(),
        out: out.to_owned(),
        pop: true,
    };
    let outcome = run(&options)?;
    println!(
        "seed {seed}: {} faults, {} anomalies; report in {}",
        outcome.faults.len(),
        outcome.verdict.anomalies.len(),
        outcome.dir.display()
    );
    for anomaly in outcome.verdict.anomalies.iter().take(20) {
        println!("  {anomaly}");
    }
    Ok(outcome.verdict.anomalies.is_empty())
}

fn recheck(dir: &std::path::Path) -> Result<bool, String> {
    let (ops, faults) =
        report::read(dir).map_err(|error| format!("read {}: {error}", dir.display()))?;
    let seed = dir
        .file_name()
        .and_then(|name| name.to_str()?.strip_prefix("seed-")?.parse().ok())
        .unwrap_or(0);
    let pop_ran = ops.iter().any(
        |op| matches!(&op.kind, Kind::Deliver { group, .. } if group == pop_workload::POP_GROUP),
    );
    let mut expect = workload::expectations(pop_ran);
    expect.clock_steps = clock_steps(&faults);
    let mut verdict = check(&ops, &expect);
    verdict.anomalies.extend(check_availability(&ops, &faults));
    report::write(dir, seed, &ops, &faults, &verdict)
        .map_err(|error| format!("write {}: {error}", dir.display()))?;
    println!("{}: {} anomalies", dir.display(), verdict.anomalies.len());
    for anomaly in verdict.anomalies.iter().take(20) {
        println!("  {anomaly}");
    }
    Ok(verdict.anomalies.is_empty())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run {
            seed,
            seconds,
            out,
            faults,
        } => {
            let out = out.unwrap_or_else(Cluster::log_dir);
            let faults = if faults.is_empty() {
                ALL_FAULTS.to_vec()
            } else {
                faults
            };
            one(seed.unwrap_or_else(clock_seed), seconds, &out, &faults)
        }
        Command::Recheck { dir } => recheck(&dir),
        Command::Cleanup => {
            let removed = tidemark_tests::netns::remove_orphans();
            println!("removed {} namespaces: {removed:?}", removed.len());
            let unmounted = tidemark_chaos::disks::unmount_orphans();
            println!("unmounted {} broker disks: {unmounted:?}", unmounted.len());
            Ok(true)
        }
        Command::Soak {
            hours,
            seconds,
            out,
        } => {
            let out = out.unwrap_or_else(Cluster::log_dir);
            let until = Instant::now() + Duration::from_secs_f64(hours * 3600.0);
            let mut clean = true;
            let mut runs = 0;
            while Instant::now() < until {
                runs += 1;
                match one(clock_seed(), seconds, &out, &ALL_FAULTS) {
                    Ok(true) => {}
                    Ok(false) => clean = false,
                    Err(failure) => {
                        eprintln!("run {runs}: {failure}");
                        clean = false;
                    }
                }
            }
            println!(
                "{runs} runs, {}",
                if clean {
                    "all clean"
                } else {
                    "anomalies found"
                }
            );
            Ok(clean)
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(failure) => {
            eprintln!("tidemark-chaos: {failure}");
            ExitCode::from(2)
        }
    }
}
