//! Durable consumer-offset commits through the offset journal, against the whole-file rewrite
//! (`consumerOffset.json`) RocketMQ relies on, measured in the same run.
//!
//! `cargo bench -p tidemark-broker --bench offset_journal` prints, for tables of 10k and 1M
//! (topic, group, queue) entries:
//! - durable commits per second: many tasks each committing and awaiting durability (what a
//!   synchronous UPDATE_CONSUMER_OFFSET does in the broker, without the network);
//! - journal bytes written per second at that rate (zero fill included), next to what rewriting
//!   `consumerOffset.json` costs: its size per write, and per second at RocketMQ's 5 s interval
//!   and if it were rewritten per group commit instead;
//! - recovery time: opening the journal (snapshot + the records of the run) and writing the
//!   snapshot recovery ends with.
//!
//! Files go to `$TIDEMARK_BENCH_DIR` or the target directory (a real disk: fsync costs what it
//! costs). `TIDEMARK_BENCH_SECONDS` sets each run's length (default 5). Under `cargo test` it is
//! a short smoke pass over a small table.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_broker::offsets::{Committer, ConsumerOffsetTable, ConsumerOffsets};
use tidemark_protocol::json::{JsonBody, WriteOptions};
use tidemark_storage::io::FsStorage;
use tidemark_storage::journal::JournalOptions;

const TOPIC_QUEUES: i32 = 8;
const GROUPS_PER_TOPIC: usize = 10;

fn topic(index: usize) -> String {
    format!("bench-topic-{index:06}")
}

fn group(index: usize) -> String {
    format!("bench-group-{index:03}")
}

/// A table of `entries` (rounded to whole topics): topics × 10 groups × 8 queues.
fn table(entries: usize) -> ConsumerOffsetTable {
    let mut table = ConsumerOffsetTable::new();
    let topics = (entries / (GROUPS_PER_TOPIC * TOPIC_QUEUES as usize)).max(1);
    for t in 0..topics {
        for g in 0..GROUPS_PER_TOPIC {
            for q in 0..TOPIC_QUEUES {
                table.commit(&topic(t), &group(g), q, 1_000, 1 << 40, 0);
            }
        }
    }
    table
}

fn bench_dir() -> PathBuf {
    std::env::var_os("TIDEMARK_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")))
}

struct Measured {
    commits_per_second: f64,
    journal_bytes_per_second: f64,
    json_bytes: usize,
    group_commits_per_second: f64,
    recovery: Duration,
}

fn measure(entries: usize, tasks: usize, run: Duration) -> Measured {
    let base = tempfile::Builder::new()
        .prefix("offset-journal-bench-")
        .tempdir_in(bench_dir())
        .expect("bench dir");
    let dir = base.path().join("offsetJournal");
    let seeded = table(entries);
    let json_bytes = seeded
        .to_wrapper()
        .to_json_bytes_with(WriteOptions::PRETTY)
        .len();
    let topics = seeded.entry_count() / (GROUPS_PER_TOPIC * TOPIC_QUEUES as usize);
    let import = move || Ok(seeded.clone());
    let options = JournalOptions {
        // Never during the run: compaction cost is measured by recovery below.
        compact_min_bytes: u64::MAX,
        ..JournalOptions::default()
    };
    let (offsets, _) = ConsumerOffsets::open(Arc::new(FsStorage), &dir, options.clone(), &import)
        .expect("journal");
    let offsets = Arc::new(offsets);
    let bytes_before = bytes_written(&dir);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let commits = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    runtime.block_on(async {
        let mut handles = Vec::new();
        for task in 0..tasks {
            let (offsets, commits, stop) = (offsets.clone(), commits.clone(), stop.clone());
            handles.push(tokio::spawn(async move {
                let topic = topic(task % topics);
                let group = group(task % GROUPS_PER_TOPIC);
                let queue = (task / GROUPS_PER_TOPIC) as i32 % TOPIC_QUEUES;
                let mut offset = 1_000;
                while !stop.load(Ordering::Relaxed) {
                    offset += 1;
                    let (_, journaled) = offsets.commit(
                        &topic,
                        &group,
                        queue,
                        offset,
                        1 << 40,
                        0,
                        Committer::Progress,
                        None,
                    );
                    offsets.durable(journaled).await.expect("durable");
                    commits.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        tokio::time::sleep(run).await;
        stop.store(true, Ordering::Relaxed);
        for handle in handles {
            handle.await.expect("task");
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let committed = commits.load(Ordering::Relaxed) as f64;
    offsets.close();
    let written = bytes_written(&dir).saturating_sub(bytes_before) as f64;
    // Each sync covers one batch; records per batch = commits / syncs. Estimated from the
    // tasks in flight: every waiting task shares the next sync.
    let group_commits_per_second = committed / elapsed / tasks as f64;
    drop(offsets);
    let recovery_started = Instant::now();
    let refuse = || Err("no import".to_owned());
    let (reopened, _) =
        ConsumerOffsets::open(Arc::new(FsStorage), &dir, options, &refuse).expect("reopen");
    let recovery = recovery_started.elapsed();
    drop(reopened);
    Measured {
        commits_per_second: committed / elapsed,
        journal_bytes_per_second: written / elapsed,
        json_bytes,
        group_commits_per_second,
        recovery,
    }
}

/// Bytes this process handed to `write`/`pwrite` (`wchar` of `/proc/self/io`): the journal's
/// records and the zeros its writer fills ahead of them; nothing else writes during a run.
/// Where that file does not exist, the journal files' lengths.
fn bytes_written(dir: &Path) -> u64 {
    let from_proc = std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|line| line.strip_prefix("wchar:"))
                .and_then(|value| value.trim().parse().ok())
        });
    from_proc.unwrap_or_else(|| journal_file_bytes(dir))
}

fn journal_file_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|entry| entry.file_name().to_string_lossy().ends_with(".journal"))
                .filter_map(|entry| entry.metadata().ok())
                .map(|metadata| metadata.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    let smoke = !std::env::args().any(|arg| arg == "--bench");
    let seconds: u64 = std::env::var("TIDEMARK_BENCH_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(5);
    let (sizes, run): (&[usize], Duration) = if smoke {
        (&[10_000], Duration::from_millis(300))
    } else {
        (&[10_000, 1_000_000], Duration::from_secs(seconds))
    };
    println!(
        "{:>9} {:>6} {:>12} {:>14} {:>12} {:>16} {:>18} {:>10}",
        "entries",
        "tasks",
        "commits/s",
        "journal B/s",
        "json B",
        "json@5s B/s",
        "json/commit B/s",
        "recovery"
    );
    for &entries in sizes {
        for tasks in [64, 1024] {
            let measured = measure(entries, tasks, run);
            println!(
                "{:>9} {:>6} {:>12.0} {:>14.0} {:>12} {:>16.0} {:>18.0} {:>9.2}s",
                entries,
                tasks,
                measured.commits_per_second,
                measured.journal_bytes_per_second,
                measured.json_bytes,
                measured.json_bytes as f64 / 5.0,
                measured.json_bytes as f64 * measured.group_commits_per_second,
                measured.recovery.as_secs_f64()
            );
        }
    }
}
