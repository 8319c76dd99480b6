//! CI's chaos run: a fixed set of seeds, each a fresh cluster under the whole workload with
//! 30 s of random faults (one of them with full disks only, which the others rarely draw),
//! every one of which must end without an anomaly. The runs' reports
//! stay in `target/chaos/seed-N` (`summary.md` first). Long soaks with fresh seeds:
//! `cargo run -p tidemark-chaos -- soak --hours 3`.

use std::time::Duration;

use tidemark_chaos::cluster::{Cluster, NO_NAMESPACES};
use tidemark_chaos::nemesis::{FaultKind, ALL_FAULTS};
use tidemark_chaos::run::{run, RunOptions};

/// Seeds and the faults each draws from.
const RUNS: [(u64, &[FaultKind]); 4] = [
    (101, &ALL_FAULTS),
    (202, &ALL_FAULTS),
    (303, &ALL_FAULTS),
    (7, &[FaultKind::DiskFull]),
];

#[test]
fn fixed_seeds_end_without_an_anomaly() {
    let mut failures = Vec::new();
    for (seed, faults) in RUNS {
        let options = RunOptions {
            seed,
            duration: Duration::from_secs(30),
            faults: faults.to_vec(),
            out: Cluster::log_dir(),
            pop: true,
        };
        let outcome = match run(&options) {
            Ok(outcome) => outcome,
            Err(failure) if failure.starts_with(NO_NAMESPACES) => {
                // Only where namespaces cannot be made (not root): said, not hidden.
                eprintln!("skipped: {failure}");
                return;
            }
            Err(failure) => panic!("seed {seed}: the run could not be made: {failure}"),
        };
        let summary = std::fs::read_to_string(outcome.dir.join("summary.md")).unwrap_or_default();
        println!("{summary}");
        assert!(
            !outcome.faults.is_empty(),
            "seed {seed}: no fault was injected"
        );
        if !outcome.verdict.anomalies.is_empty() {
            failures.push(format!(
                "seed {seed}: {} anomalies (report in {})",
                outcome.verdict.anomalies.len(),
                outcome.dir.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
