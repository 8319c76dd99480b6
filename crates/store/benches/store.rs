//! Store throughput against a plain-file baseline measured in the same run.
//!
//! `cargo bench -p tidemark-store --bench store` prints, for 128 B and 1 KiB bodies:
//! - the baseline: the same record bytes written with one `write` per message, and one
//!   `write` + `fdatasync` per message;
//! - `Async` and `Sync` appends with 1, 8 and 64 writer threads, and with 64 tokio tasks that
//!   await durability instead of blocking a thread (as the broker does), and the ratios to the
//!   baseline;
//! - a sequential read of everything appended;
//! - recovery time of a 1 GiB commit log after a crash, with and without the checkpoint.
//!
//! `TIDEMARK_BENCH_FILTER=Async-1-128` runs only the cases whose name contains the text.
//! Files go to `$TIDEMARK_BENCH_DIR` or the target directory (a real disk, not tmpfs, so fsync
//! costs what it costs). Run under `cargo test` it does a seconds-long smoke pass instead.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidemark_protocol::message::Properties;
use tidemark_store::{FlushPolicy, MessageStore, NewMessage, StoreConfig};

struct Settings {
    /// Each case runs this long before its measured window: the first case after another one
    /// otherwise pays for the memory the previous one freed (seen here as a 2x swing).
    warmup: Duration,
    run: Duration,
    recovery_bytes: u64,
}

/// A measured window over a running count: started after the warm-up.
struct Window {
    started: Instant,
    at_start: u64,
}

impl Window {
    fn open(count: u64) -> Window {
        Window {
            started: Instant::now(),
            at_start: count,
        }
    }

    fn rate(&self, count: u64, record: usize) -> Rate {
        Rate::new(count - self.at_start, record, self.started.elapsed())
    }
}

fn bench_dir() -> PathBuf {
    let base = std::env::var_os("TIDEMARK_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    let dir = base.join(format!("store-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench directory");
    dir
}

fn message(body_bytes: usize, index: u64) -> NewMessage {
    let mut properties = Properties::new();
    properties.insert("TAGS", "TagA");
    properties.insert(
        "UNIQ_KEY",
        format!("7F0000012A9F0000000100000005{:04X}", index % 65536),
    );
    NewMessage {
        topic: "BenchmarkTopic".into(),
        queue_id: (index % 8) as i32,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: "127.0.0.1:50000".parse().expect("literal"),
        store_host: "127.0.0.1:10911".parse().expect("literal"),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: Bytes::from(vec![b'x'; body_bytes]),
        properties,
    }
}

fn record_bytes(body_bytes: usize) -> usize {
    message(body_bytes, 0).properties.encode().len()
        + body_bytes
        + "BenchmarkTopic".len()
        + 1
        + 2
        + 4
        + 88
}

/// Messages per second and MB/s of record bytes.
#[derive(Clone, Copy)]
struct Rate {
    messages_per_second: f64,
    megabytes_per_second: f64,
}

impl Rate {
    fn new(messages: u64, record: usize, elapsed: Duration) -> Rate {
        let seconds = elapsed.as_secs_f64().max(1e-9);
        Rate {
            messages_per_second: messages as f64 / seconds,
            megabytes_per_second: messages as f64 * record as f64 / seconds / 1e6,
        }
    }
}

fn baseline_write(dir: &Path, record: usize, settings: &Settings) -> Rate {
    let path = dir.join("baseline-write");
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .expect("baseline file");
    let buffer = vec![b'x'; record];
    let started = Instant::now();
    let mut written = 0u64;
    let mut window: Option<Window> = None;
    loop {
        for _ in 0..1024 {
            file.write_all_at(&buffer, written * record as u64)
                .expect("write");
            written += 1;
        }
        match &window {
            None if started.elapsed() >= settings.warmup => window = Some(Window::open(written)),
            Some(open) if open.started.elapsed() >= settings.run => break,
            _ => {}
        }
    }
    let rate = window.expect("measured").rate(written, record);
    drop(file);
    let _ = std::fs::remove_file(path);
    rate
}

fn baseline_fsync(dir: &Path, record: usize, settings: &Settings) -> Rate {
    let path = dir.join("baseline-fsync");
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .expect("baseline file");
    let buffer = vec![b'x'; record];
    let started = Instant::now();
    let mut written = 0u64;
    let mut window: Option<Window> = None;
    loop {
        file.write_all(&buffer).expect("write");
        file.sync_data().expect("fdatasync");
        written += 1;
        match &window {
            None if started.elapsed() >= settings.warmup => window = Some(Window::open(written)),
            Some(open) if open.started.elapsed() >= settings.run => break,
            _ => {}
        }
    }
    let rate = window.expect("measured").rate(written, record);
    drop(file);
    let _ = std::fs::remove_file(path);
    rate
}

fn store_config(dir: &Path, flush: FlushPolicy) -> StoreConfig {
    StoreConfig {
        flush,
        commit_log_segment_bytes: 256 * 1024 * 1024,
        ..StoreConfig::new(dir)
    }
}

/// How the concurrent writers of a case wait for their appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writers {
    /// OS threads calling the blocking `put`.
    Threads,
    /// Tokio tasks on a runtime with a worker per core, each appending and awaiting
    /// durability ([`Durable`](tidemark_store::Durable)): how the broker appends.
    Tasks,
}

fn appends(
    dir: &Path,
    flush: FlushPolicy,
    (kind, writers): (Writers, usize),
    body: usize,
    settings: &Settings,
) -> (Rate, MessageStore) {
    let (store, _) = MessageStore::open(store_config(dir, flush)).expect("open store");
    let store = Arc::new(store);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let rate = match kind {
        Writers::Threads => {
            let threads: Vec<_> = (0..writers)
                .map(|writer| {
                    let (store, stop, count) = (store.clone(), stop.clone(), count.clone());
                    std::thread::spawn(move || {
                        // Built once: the cost of making a message is the caller's.
                        let message = message(body, writer as u64);
                        while !stop.load(Ordering::Relaxed) {
                            store.put(&message).expect("append");
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            let rate = measure(&count, body, settings);
            stop.store(true, Ordering::Relaxed);
            for thread in threads {
                thread.join().expect("writer");
            }
            rate
        }
        Writers::Tasks => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .build()
                .expect("runtime");
            let tasks: Vec<_> = (0..writers)
                .map(|writer| {
                    let (store, stop, count) = (store.clone(), stop.clone(), count.clone());
                    runtime.spawn(async move {
                        let message = message(body, writer as u64);
                        while !stop.load(Ordering::Relaxed) {
                            let (_, durable) = store
                                .append_batch(std::slice::from_ref(&message))
                                .expect("append");
                            durable.await.expect("durable");
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            let rate = measure(&count, body, settings);
            stop.store(true, Ordering::Relaxed);
            runtime.block_on(async {
                for task in tasks {
                    task.await.expect("writer task");
                }
            });
            rate
        }
    };
    (rate, Arc::into_inner(store).expect("writers are done"))
}

/// Waits out the warm-up, then the rate of `count` over the measured window.
fn measure(count: &AtomicU64, body: usize, settings: &Settings) -> Rate {
    std::thread::sleep(settings.warmup);
    let window = Window::open(count.load(Ordering::Relaxed));
    std::thread::sleep(settings.run);
    window.rate(count.load(Ordering::Relaxed), record_bytes(body))
}

fn sequential_read(store: &MessageStore, body: usize) -> Rate {
    let started = Instant::now();
    let mut messages = 0u64;
    for queue_id in 0..8 {
        let mut offset = store.min_offset("BenchmarkTopic", queue_id);
        loop {
            let result = store
                .get("BenchmarkTopic", queue_id, offset, 32, 256 * 1024, |_| true)
                .expect("read");
            if result.messages.is_empty() {
                break;
            }
            messages += result.messages.len() as u64;
            offset = result.next_begin_offset;
        }
    }
    Rate::new(messages, record_bytes(body), started.elapsed())
}

fn recovery(dir: &Path, bytes: u64) -> (Duration, Duration, u64) {
    let config = StoreConfig {
        commit_log_segment_bytes: 1 << 30,
        ..StoreConfig::new(dir)
    };
    let (store, _) = MessageStore::open(config.clone()).expect("open");
    let body = 1024;
    let mut index = 0u64;
    while store.commit_log_positions().1 < bytes.min((1 << 30) - 8192) {
        store.put(&message(body, index)).expect("append");
        index += 1;
    }
    store.flush().expect("flush");
    drop(store); // no shutdown: the abort marker stays, as after a crash
    let started = Instant::now();
    let (store, report) = MessageStore::open(config.clone()).expect("recover");
    let with_checkpoint = started.elapsed();
    assert_eq!(report.mode, tidemark_store::RecoveryMode::Abnormal);
    drop(store);
    // Without the checkpoint extension (a RocketMQ-written store) the whole log is scanned.
    std::fs::remove_file(dir.join("checkpoint")).expect("remove checkpoint");
    let started = Instant::now();
    let (store, report) = MessageStore::open(config).expect("recover");
    let full_scan = started.elapsed();
    assert_eq!(report.records_recovered, index);
    store.shutdown().expect("shutdown");
    (with_checkpoint, full_scan, index)
}

fn main() {
    let benchmarking = std::env::args().any(|argument| argument == "--bench");
    let settings = if benchmarking {
        Settings {
            warmup: Duration::from_secs(1),
            run: Duration::from_secs(3),
            recovery_bytes: 1 << 30,
        }
    } else {
        Settings {
            warmup: Duration::from_millis(20),
            run: Duration::from_millis(100),
            recovery_bytes: 8 << 20,
        }
    };
    let root = bench_dir();
    println!(
        "store benchmark in {} ({} s per case after {} s of warm-up)",
        root.display(),
        settings.run.as_secs_f64(),
        settings.warmup.as_secs_f64()
    );
    for body in [128usize, 1024] {
        let record = record_bytes(body);
        let write = baseline_write(&root, record, &settings);
        let fsync = baseline_fsync(&root, record, &settings);
        println!("\n== {body} B bodies ({record} B records)");
        println!(
            "baseline write per message      {:>10.0} msg/s {:>8.1} MB/s",
            write.messages_per_second, write.megabytes_per_second
        );
        println!(
            "baseline write+fdatasync each   {:>10.0} msg/s {:>8.1} MB/s",
            fsync.messages_per_second, fsync.megabytes_per_second
        );
        for (name, flush) in [
            ("Async", FlushPolicy::Async { interval_ms: 500 }),
            ("Sync", FlushPolicy::Sync),
        ] {
            let cases = [
                (Writers::Threads, 1usize),
                (Writers::Threads, 8),
                (Writers::Threads, 64),
                (Writers::Tasks, 64),
            ];
            for (kind, writers) in cases {
                let case = format!(
                    "{name}-{writers}-{body}{}",
                    if kind == Writers::Tasks { "-tasks" } else { "" }
                );
                if std::env::var("TIDEMARK_BENCH_FILTER")
                    .is_ok_and(|filter| !case.contains(&filter))
                {
                    continue;
                }
                let dir = root.join(&case);
                let (rate, store) = appends(&dir, flush, (kind, writers), body, &settings);
                let kind = match kind {
                    Writers::Threads => "writers",
                    Writers::Tasks => "tasks  ",
                };
                let ratio = match flush {
                    FlushPolicy::Async { .. } => format!(
                        "{:.2}x baseline write bandwidth",
                        rate.megabytes_per_second / write.megabytes_per_second
                    ),
                    FlushPolicy::Sync => format!(
                        "{:.1}x one-fsync-per-message",
                        rate.messages_per_second / fsync.messages_per_second
                    ),
                };
                println!("{name:<5} append, {writers:>2} {kind}      {:>10.0} msg/s {:>8.1} MB/s   {ratio}", rate.messages_per_second, rate.megabytes_per_second);
                if writers == 1 && matches!(flush, FlushPolicy::Async { .. }) {
                    let read = sequential_read(&store, body);
                    println!(
                        "sequential read (get, 32/batch) {:>10.0} msg/s {:>8.1} MB/s",
                        read.messages_per_second, read.megabytes_per_second
                    );
                }
                store.shutdown().expect("shutdown");
                drop(store);
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
        let again = baseline_write(&root, record, &settings);
        println!(
            "baseline write per message again {:>9.0} msg/s {:>8.1} MB/s (drift check)",
            again.messages_per_second, again.megabytes_per_second
        );
    }
    if std::env::var("TIDEMARK_BENCH_FILTER").is_ok_and(|filter| !"recovery".contains(&filter)) {
        return;
    }
    let dir = root.join("recovery");
    let (with_checkpoint, full_scan, records) = recovery(&dir, settings.recovery_bytes);
    println!(
        "\nrecovery after a crash, {records} records ({:.0} MiB): {:.2} s with checkpoint, {:.2} s full scan ({:.0} MB/s)",
        settings.recovery_bytes.min((1 << 30) - 8192) as f64 / 1048576.0,
        with_checkpoint.as_secs_f64(),
        full_scan.as_secs_f64(),
        settings.recovery_bytes as f64 / 1e6 / full_scan.as_secs_f64().max(1e-9)
    );
    let _ = std::fs::remove_dir_all(&root);
}
