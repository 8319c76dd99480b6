//! Process-level crash test: a child process appends and reports every acknowledged append on
//! stdout; the parent SIGKILLs it at a random moment, reopens the store (recovery runs in
//! abnormal mode) and checks every acknowledged message. Rounds reuse one directory, so each
//! recovery also starts from the previous one's repairs.
//!
//! Under `Sync` an acknowledged append is on disk; under `Async` it is in the page cache (for
//! the real file system, written through the memory-mapped write window), which a process
//! crash does not lose either, so both policies must keep every acknowledged message.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use tidemark_store::{FlushPolicy, MessageStore, RecoveryMode};

const CHILD_DIR_VARIABLE: &str = "TIDEMARK_STORE_KILL_CHILD_DIR";
const CHILD_ROUND_VARIABLE: &str = "TIDEMARK_STORE_KILL_CHILD_ROUND";
const CHILD_FLUSH_VARIABLE: &str = "TIDEMARK_STORE_KILL_CHILD_FLUSH";
/// How long a child may take to open the store and acknowledge its first append.
const FIRST_ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// The store both sides open: `Sync` on the tests' tiny segments (many segment switches),
/// `Async` on segments large enough for the write window to fault pages in ahead and let go of
/// them behind.
fn config(dir: &Path, flush: FlushPolicy) -> tidemark_store::StoreConfig {
    match flush {
        FlushPolicy::Sync => small_config(dir, flush),
        // Without fsyncs the child appends hundreds of thousands of messages per round: files
        // sized for that keep the open-file count of recovery (every file is opened) far below
        // the process limit on a fast machine.
        FlushPolicy::Async { .. } => tidemark_store::StoreConfig {
            commit_log_segment_bytes: 512 * 1024,
            consume_queue_entries_per_file: 4_096,
            ..small_config(dir, flush)
        },
    }
}

fn flush_name(flush: FlushPolicy) -> &'static str {
    match flush {
        FlushPolicy::Sync => "sync",
        FlushPolicy::Async { .. } => "async",
    }
}

fn body(round: u32, index: u32) -> Vec<u8> {
    let mut body = format!("round {round} message {index} ").into_bytes();
    body.resize(40 + (index as usize * 29) % 500, b'.');
    body
}

/// The child: appends until killed. Does nothing when run as an ordinary test.
#[test]
fn child_writer() {
    let (Some(dir), Some(round)) = (
        std::env::var_os(CHILD_DIR_VARIABLE),
        std::env::var(CHILD_ROUND_VARIABLE).ok(),
    ) else {
        return;
    };
    let round: u32 = round.parse().expect("round number");
    let flush = match std::env::var(CHILD_FLUSH_VARIABLE).as_deref() {
        Ok("async") => FlushPolicy::Async { interval_ms: 500 },
        _ => FlushPolicy::Sync,
    };
    let (store, _) =
        MessageStore::open(config(Path::new(&dir), flush)).expect("child opens the store");
    let mut stdout = std::io::stdout().lock();
    for index in 0.. {
        let appended = store
            .put(&message(
                "Killed",
                (index % 3) as i32,
                body(round, index),
                Some("TagA"),
            ))
            .expect("append");
        writeln!(
            stdout,
            "ACK {round} {index} {} {}",
            appended.commit_log_offset, appended.queue_offset
        )
        .expect("parent reads");
        stdout.flush().expect("parent reads");
    }
}

struct Acknowledged {
    round: u32,
    index: u32,
    commit_log_offset: u64,
}

fn run_child(
    dir: &Path,
    flush: FlushPolicy,
    round: u32,
    kill_after: Duration,
) -> Vec<Acknowledged> {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            own_test("child_writer").as_str(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_VARIABLE, dir)
        .env(CHILD_ROUND_VARIABLE, round.to_string())
        .env(CHILD_FLUSH_VARIABLE, flush_name(flush))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("piped");
    // Told once the child acknowledged its first append: it has opened the store.
    let (first_ack, acking) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut acknowledged = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() == 5 && fields[0] == "ACK" {
                if let (Ok(round), Ok(index), Ok(offset)) =
                    (fields[1].parse(), fields[2].parse(), fields[3].parse())
                {
                    if acknowledged.is_empty() {
                        let _ = first_ack.send(());
                    }
                    acknowledged.push(Acknowledged {
                        round,
                        index,
                        commit_log_offset: offset,
                    });
                }
            }
        }
        acknowledged
    });
    // Wait (bounded) until the child is writing: a start slowed down by a busy machine must
    // not eat into its writing time, or it would be killed before its first append.
    match acking.recv_timeout(FIRST_ACK_TIMEOUT) {
        Ok(()) => {}
        // The reader ended without an ACK: the child exited (or closed stdout) first.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("round {round}: the child acknowledged nothing within {FIRST_ACK_TIMEOUT:?}");
        }
    }
    // Let it write a while, then kill it mid-flight.
    let started = Instant::now();
    while started.elapsed() < kill_after {
        if child.try_wait().expect("poll child").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap child");
    reader.join().expect("reader thread")
}

fn kill_rounds(rounds: u32, flush: FlushPolicy) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut all: Vec<Acknowledged> = Vec::new();
    let mut seed = 0x5EED_u64;
    for round in 0..rounds {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let kill_after = Duration::from_millis(80 + (seed >> 33) % 250);
        let acknowledged = run_child(dir.path(), flush, round, kill_after);
        all.extend(acknowledged);
        let (store, report) =
            MessageStore::open(config(dir.path(), flush)).expect("recovery after SIGKILL");
        assert_eq!(
            report.mode,
            RecoveryMode::Abnormal,
            "the killed child left its abort marker"
        );
        for acknowledged in &all {
            let record = store
                .read_record(acknowledged.commit_log_offset)
                .expect("readable")
                .unwrap_or_else(|| {
                    panic!(
                        "round {round}: acknowledged message {} of round {} lost",
                        acknowledged.index, acknowledged.round
                    )
                });
            assert_eq!(
                decode(&record).body.to_vec(),
                body(acknowledged.round, acknowledged.index),
                "round {round}"
            );
        }
        assert_queues_agree_with_log(&store);
        store.shutdown().expect("shutdown");
    }
    assert!(
        all.len() > rounds as usize,
        "children acknowledged appends before being killed"
    );
    println!(
        "{rounds} SIGKILL rounds under {}, {} acknowledged appends verified",
        flush_name(flush),
        all.len()
    );
}

#[test]
fn sigkill_loses_nothing_acknowledged() {
    kill_rounds(20, FlushPolicy::Sync);
}

#[test]
fn sigkill_under_async_loses_nothing_acknowledged() {
    kill_rounds(20, FlushPolicy::Async { interval_ms: 500 });
}

#[test]
#[ignore = "soak: cargo test -p tidemark-store --test store -- --ignored process_kill::"]
fn sigkill_soak() {
    kill_rounds(300, FlushPolicy::Sync);
    kill_rounds(300, FlushPolicy::Async { interval_ms: 500 });
}

/// The full name of `test` in this binary, where this file is a module: what `--exact` needs.
fn own_test(test: &str) -> String {
    let module = module_path!()
        .split_once("::")
        .map_or("", |(_, module)| module);
    format!("{module}::{test}")
}
