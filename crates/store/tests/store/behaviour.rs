//! The store's public behaviour: appends, the read status table, offsets by time, batches,
//! reopening, retention and a full disk.

use std::sync::Arc;

use crate::common::*;
use tidemark_protocol::message::tags_code;
use tidemark_store::io::Storage;
use tidemark_store::sim::SimStorage;
use tidemark_store::{FlushPolicy, GetStatus, MessageStore, RecoveryMode, StoreError};

/// Appends assign consecutive queue offsets per queue and commit-log offsets that locate the
/// record; reads return the same bytes.
#[test]
fn appends_assign_offsets_and_read_back() {
    let storage = SimStorage::new();
    let (store, report) = open_sim(&storage, FlushPolicy::Async { interval_ms: 50 }).expect("open");
    assert_eq!(report.mode, RecoveryMode::Normal);
    let mut last_offset = None;
    for index in 0..40u8 {
        let appended = store
            .put(&message(
                "T",
                i32::from(index % 2),
                vec![index; 100],
                Some("TagA"),
            ))
            .expect("put");
        assert_eq!(appended.queue_offset, i64::from(index / 2));
        if let Some(previous) = last_offset {
            assert!(appended.commit_log_offset > previous);
        }
        last_offset = Some(appended.commit_log_offset);
        let record = decode(
            &store
                .read_record(appended.commit_log_offset)
                .expect("read")
                .expect("present"),
        );
        assert_eq!(record.body.to_vec(), vec![index; 100]);
        assert_eq!(record.physical_offset as u64, appended.commit_log_offset);
        assert_eq!(record.store_timestamp, appended.store_timestamp);
    }
    assert_eq!(store.max_offset("T", 0), 20);
    let all = read_all(&store, "T", 1);
    assert_eq!(all.len(), 20);
    assert!(all
        .iter()
        .enumerate()
        .all(|(index, record)| record.queue_offset == index as i64));
    // 40 records of ~200 bytes in 4 KiB segments: several segments were rolled.
    let (min, written, _) = store.commit_log_positions();
    assert_eq!(min, 0);
    assert!(written > 4096 * 2);
    assert_queues_agree_with_log(&store);
}

/// The status and next-begin-offset rules the pull table relies on.
#[test]
fn read_statuses_follow_rocketmq() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Async { interval_ms: 50 }).expect("open");
    let missing = store
        .get("None", 0, 0, 32, usize::MAX, |_| true)
        .expect("get");
    assert_eq!(
        (missing.status, missing.next_begin_offset),
        (GetStatus::NoMatchedLogicQueue, 0)
    );
    for index in 0..5u8 {
        let tag = if index % 2 == 0 { "TagA" } else { "TagB" };
        store
            .put(&message("T", 0, vec![index; 10], Some(tag)))
            .expect("put");
    }
    let one = store.get("T", 0, 5, 32, usize::MAX, |_| true).expect("get");
    assert_eq!(
        (
            one.status,
            one.next_begin_offset,
            one.min_offset,
            one.max_offset
        ),
        (GetStatus::OffsetOverflowOne, 5, 0, 5)
    );
    let badly = store.get("T", 0, 9, 32, usize::MAX, |_| true).expect("get");
    assert_eq!(
        (badly.status, badly.next_begin_offset),
        (GetStatus::OffsetOverflowBadly, 0),
        "min is 0, so back to 0"
    );
    let found = store.get("T", 0, 1, 2, usize::MAX, |_| true).expect("get");
    assert_eq!(
        (found.status, found.next_begin_offset, found.messages.len()),
        (GetStatus::Found, 3, 2)
    );
    let code_a = tags_code(Some("TagA"));
    let filtered = store
        .get("T", 0, 0, 32, usize::MAX, |code| code == code_a)
        .expect("get");
    assert_eq!(filtered.status, GetStatus::Found);
    assert_eq!(filtered.messages.len(), 3);
    assert_eq!(
        filtered.next_begin_offset, 5,
        "every scanned entry counts, matched or not"
    );
    let none = store
        .get("T", 0, 1, 32, usize::MAX, |_| false)
        .expect("get");
    assert_eq!(
        (none.status, none.next_begin_offset),
        (GetStatus::NoMatchedMessage, 5)
    );
    let bytes_limited = store.get("T", 0, 0, 32, 1, |_| true).expect("get");
    assert_eq!(
        bytes_limited.messages.len(),
        1,
        "the first message always fits"
    );
}

/// Offsets by timestamp use the first message stored at or after the time.
#[test]
fn offsets_by_store_time() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Async { interval_ms: 50 }).expect("open");
    let mut times = Vec::new();
    for index in 0..20u8 {
        times.push(
            store
                .put(&message("T", 3, vec![index; 30], None))
                .expect("put")
                .store_timestamp,
        );
    }
    assert_eq!(
        store.offset_by_timestamp("T", 3, times[7]).expect("search"),
        7
    );
    assert_eq!(
        store
            .offset_by_timestamp("T", 3, times[6] + 1)
            .expect("search"),
        7
    );
    assert_eq!(store.offset_by_timestamp("T", 3, 0).expect("search"), 0);
    assert_eq!(
        store.offset_by_timestamp("T", 3, i64::MAX).expect("search"),
        20
    );
    assert_eq!(
        store.earliest_store_timestamp("T", 3).expect("read"),
        Some(times[0])
    );
    assert_eq!(store.earliest_store_timestamp("T", 4).expect("read"), None);
}

/// A batch lands contiguously with consecutive queue offsets.
#[test]
fn batches_are_contiguous() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Sync).expect("open");
    store.put(&message("B", 0, vec![1; 10], None)).expect("put");
    let batch: Vec<_> = (0..5u8)
        .map(|index| message("B", 0, vec![index; 50], None))
        .collect();
    let appended = store.put_batch(&batch).expect("batch");
    assert_eq!(
        appended
            .iter()
            .map(|one| one.queue_offset)
            .collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    for pair in appended.windows(2) {
        assert_eq!(
            pair[0].commit_log_offset + u64::from(pair[0].size),
            pair[1].commit_log_offset
        );
    }
    let mixed = vec![
        message("B", 0, vec![1], None),
        message("B", 1, vec![1], None),
    ];
    assert!(store.put_batch(&mixed).is_err());
}

/// A clean shutdown and reopen keeps everything and resumes queue offsets.
#[test]
fn reopen_after_shutdown_keeps_everything() {
    let storage = SimStorage::new();
    {
        let (store, _) = open_sim(
            &storage,
            FlushPolicy::Async {
                interval_ms: 10_000,
            },
        )
        .expect("open");
        for index in 0..30u8 {
            store
                .put(&message("T", 0, vec![index; 150], None))
                .expect("put");
        }
        store.shutdown().expect("shutdown");
    }
    let (store, report) = open_sim(
        &storage,
        FlushPolicy::Async {
            interval_ms: 10_000,
        },
    )
    .expect("reopen");
    assert_eq!(report.mode, RecoveryMode::Normal);
    assert_eq!(report.bytes_truncated, 0);
    assert_eq!(store.max_offset("T", 0), 30);
    assert_eq!(
        store
            .put(&message("T", 0, vec![99; 10], None))
            .expect("put")
            .queue_offset,
        30
    );
    let all = read_all(&store, "T", 0);
    assert_eq!(all.len(), 31);
    assert!(all
        .iter()
        .take(30)
        .enumerate()
        .all(|(index, record)| record.body.to_vec() == vec![index as u8; 150]));
}

/// A second store on the same directory is refused while the first holds the lock.
#[test]
fn the_directory_lock_is_exclusive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path(), FlushPolicy::Sync);
    let (first, _) = MessageStore::open(config.clone()).expect("first");
    assert!(matches!(
        MessageStore::open(config.clone()),
        Err(StoreError::Locked { .. })
    ));
    first.shutdown().expect("shutdown");
    drop(first);
    MessageStore::open(config).expect("free again");
}

/// After `shutdown` appends are refused (sent and replicated alike) while reads go on, a
/// second `shutdown` does nothing, and a `Durable` taken before it still resolves.
#[test]
fn shutdown_refuses_appends_and_is_idempotent() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Sync).expect("open");
    let (_, durable) = store
        .append_batch(&[message("T", 0, vec![1; 10], None)])
        .expect("append");
    store.shutdown().expect("shutdown");
    durable.wait().expect("durable after shutdown");
    assert!(matches!(
        store.put(&message("T", 0, vec![2; 10], None)),
        Err(StoreError::Closed)
    ));
    let end = store.commit_log_positions().1;
    assert!(matches!(
        store.append_replicated(end, &[]),
        Err(StoreError::Closed)
    ));
    assert_eq!(read_all(&store, "T", 0).len(), 1);
    store.shutdown().expect("second shutdown");
    drop(store);
    let (store, report) = open_sim(&storage, FlushPolicy::Sync).expect("reopen");
    assert_eq!(report.mode, RecoveryMode::Normal);
    assert_eq!(store.max_offset("T", 0), 1);
}

/// A full disk fails the append with a typed error; the store stays readable, consistent, and
/// accepts writes again once space is back.
#[test]
fn a_full_disk_fails_appends_cleanly() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Sync).expect("open");
    let mut stored = 0;
    for index in 0..10u8 {
        store
            .put(&message("T", 0, vec![index; 200], None))
            .expect("put");
        stored += 1;
    }
    storage.set_capacity(Some(storage_bytes(&storage)));
    let mut failures = 0;
    for index in 10..40u8 {
        match store.put(&message("T", 0, vec![index; 200], None)) {
            Ok(_) => stored += 1,
            Err(StoreError::DiskFull { .. }) => failures += 1,
            Err(other) => panic!("expected DiskFull, got {other}"),
        }
    }
    assert!(failures > 0);
    let all = read_all(&store, "T", 0);
    assert_eq!(all.len(), stored);
    assert!(all
        .iter()
        .enumerate()
        .all(|(index, record)| record.queue_offset == index as i64));
    assert_queues_agree_with_log(&store);
    storage.set_capacity(None);
    let appended = store
        .put(&message("T", 0, vec![7; 10], None))
        .expect("space is back");
    assert_eq!(appended.queue_offset, stored as i64);
    drop(store);
    let (store, _) = open_sim(&storage, FlushPolicy::Sync).expect("reopen");
    assert_eq!(read_all(&store, "T", 0).len(), stored + 1);
    assert_queues_agree_with_log(&store);
}

fn storage_bytes(storage: &SimStorage) -> u64 {
    storage
        .files()
        .iter()
        .map(|path| {
            storage.read_file(path).map_or(0, |bytes| {
                bytes
                    .iter()
                    .rposition(|b| *b != 0)
                    .map_or(0, |at| at as u64 + 1)
            })
        })
        .sum::<u64>()
        + 64
}

/// A store on the real file system round-trips too.
#[test]
fn works_on_the_real_file_system() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = small_config(dir.path(), FlushPolicy::Sync);
    {
        let (store, _) = MessageStore::open(config.clone()).expect("open");
        for index in 0..50u8 {
            store
                .put(&message("T", 0, vec![index; 100], None))
                .expect("put");
        }
        store.shutdown().expect("shutdown");
    }
    assert!(!dir.path().join("abort").exists());
    assert!(dir.path().join("commitlog/00000000000000000000").exists());
    assert!(dir
        .path()
        .join("consumequeue/T/0/00000000000000000000")
        .exists());
    let (store, report) = MessageStore::open(config).expect("reopen");
    assert_eq!(report.mode, RecoveryMode::Normal);
    assert_eq!(read_all(&store, "T", 0).len(), 50);
    let _unused: Arc<dyn Storage> = Arc::new(tidemark_store::io::FsStorage);
}

/// Entries of the schedule topic carry the time their message is due, also after recovery.
#[test]
fn schedule_topic_entries_carry_the_due_time() {
    let storage = SimStorage::new();
    let config = tidemark_store::StoreConfig {
        delay_levels_ms: vec![1_000, 5_000],
        ..small_config(ROOT, FlushPolicy::Sync)
    };
    let open = || {
        MessageStore::open_with(
            config.clone(),
            Arc::new(storage.clone()) as Arc<dyn Storage>,
            ticking_clock(1_700_000_000_000),
        )
        .expect("open")
        .0
    };
    let store = open();
    let appended = store
        .put(&message(
            tidemark_store::SCHEDULE_TOPIC,
            1,
            vec![1; 20],
            Some("TagA"),
        ))
        .expect("put");
    let entry = store
        .queue_entry(tidemark_store::SCHEDULE_TOPIC, 1, 0)
        .expect("read")
        .expect("entry");
    assert_eq!(entry.tags_code, appended.store_timestamp + 5_000);
    let ordinary = store
        .put(&message("T", 1, vec![1; 20], Some("TagA")))
        .expect("put");
    assert_eq!(
        store
            .queue_entry("T", 1, ordinary.queue_offset)
            .expect("read")
            .expect("entry")
            .tags_code,
        tidemark_protocol::message::tags_code(Some("TagA"))
    );
    drop(store);
    let store = open();
    let entry = store
        .queue_entry(tidemark_store::SCHEDULE_TOPIC, 1, 0)
        .expect("read")
        .expect("entry");
    assert_eq!(
        entry.tags_code,
        appended.store_timestamp + 5_000,
        "recovery recomputes the due time"
    );
}

/// Appends awaited as futures (how the broker appends under `Sync`) resolve only once their
/// bytes are durable, and many in flight share fsyncs.
#[test]
fn awaited_appends_resolve_once_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = tidemark_store::StoreConfig {
        commit_log_segment_bytes: 1024 * 1024,
        ..small_config(dir.path(), FlushPolicy::Sync)
    };
    let (store, _) = MessageStore::open(config.clone()).expect("open");
    let store = Arc::new(store);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let tasks: Vec<_> = (0..32)
        .map(|task| {
            let store = store.clone();
            runtime.spawn(async move {
                for index in 0..20u8 {
                    let (appended, durable) = store
                        .append_batch(&[message("T", task % 4, vec![index; 64], None)])
                        .expect("append");
                    durable.await.expect("durable");
                    let end = appended[0].commit_log_offset + u64::from(appended[0].size);
                    let (_, _, flushed) = store.commit_log_positions();
                    assert!(flushed >= end, "resolved before its fsync");
                }
            })
        })
        .collect();
    runtime.block_on(async {
        for task in tasks {
            tokio::time::timeout(std::time::Duration::from_secs(30), task)
                .await
                .expect("awaited appends finish")
                .expect("task");
        }
    });
    let store = Arc::into_inner(store).expect("tasks are done");
    drop(store); // a crash as far as the files go: every awaited append must be there
    let (store, _) = MessageStore::open(config).expect("recover");
    let total: usize = (0..4).map(|queue| read_all(&store, "T", queue).len()).sum();
    assert_eq!(total, 32 * 20);
}

/// When the fsync fails, every awaiting append gets the error; none is left waiting.
#[test]
fn awaited_appends_get_a_failed_sync() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Sync).expect("open");
    let store = Arc::new(store);
    storage.crash_after(storage.operations() + 40);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let store = store.clone();
            runtime.spawn(async move {
                let mut failed = false;
                for index in 0..50u8 {
                    match store.append_batch(&[message("T", task % 2, vec![index; 32], None)]) {
                        Ok((_, durable)) => {
                            if durable.await.is_err() {
                                failed = true;
                                break;
                            }
                        }
                        Err(_) => {
                            failed = true;
                            break;
                        }
                    }
                }
                failed
            })
        })
        .collect();
    let failed = runtime.block_on(async {
        let mut failed = 0;
        for task in tasks {
            let outcome = tokio::time::timeout(std::time::Duration::from_secs(30), task)
                .await
                .expect("no append is left waiting")
                .expect("task");
            failed += usize::from(outcome);
        }
        failed
    });
    assert_eq!(failed, 16, "every writer saw the failure");
}

/// Under `Async` flush there is nothing to wait for.
#[test]
fn async_flush_appends_are_acknowledged_at_once() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(
        &storage,
        FlushPolicy::Async {
            interval_ms: 60_000,
        },
    )
    .expect("open");
    let (_, durable) = store
        .append_batch(&[message("T", 0, b"x".to_vec(), None)])
        .expect("append");
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    let mut durable = std::pin::pin!(durable);
    assert!(matches!(
        std::future::Future::poll(durable.as_mut(), &mut context),
        std::task::Poll::Ready(Ok(()))
    ));
}

/// Mappings of files under `dir` in this process (Linux: /proc/self/maps).
#[cfg(target_os = "linux")]
fn mapped_files_under(dir: &std::path::Path) -> Vec<String> {
    let dir = dir.display().to_string();
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .filter(|line| line.contains(&dir))
        .map(str::to_owned)
        .collect()
}

/// Under `Async`, appends get the active segment mapped ahead of them (the write window), and
/// a reopened store that nobody writes to maps nothing.
#[cfg(target_os = "linux")]
#[test]
fn the_write_window_follows_appends_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = tidemark_store::StoreConfig {
        commit_log_segment_bytes: 1024 * 1024,
        ..small_config(dir.path(), FlushPolicy::Async { interval_ms: 500 })
    };
    {
        let (store, _) = MessageStore::open(config.clone()).expect("open");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut index = 0u32;
        while mapped_files_under(dir.path()).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "appends never got a write window"
            );
            store
                .put(&message("T", 0, index.to_be_bytes().to_vec(), None))
                .expect("put");
            index += 1;
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(mapped_files_under(dir.path())
            .iter()
            .all(|line| line.contains("commitlog")));
        store.shutdown().expect("shutdown");
        drop(store);
        assert!(
            mapped_files_under(dir.path()).is_empty(),
            "the map goes with the store"
        );
        let (store, _) = MessageStore::open(config).expect("reopen");
        assert_eq!(read_all(&store, "T", 0).len(), index as usize);
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert!(
            mapped_files_under(dir.path()).is_empty(),
            "an idle store maps nothing"
        );
    }
}

/// RocketMQ 4.9.4+ limits: a body of exactly `message_size_max_bytes` is stored, one byte more
/// is refused as a body; the record may be larger than the body limit by the header and
/// properties; a batch is limited as a whole.
#[test]
fn the_body_limit_is_on_the_body_not_the_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = tidemark_store::StoreConfig {
        commit_log_segment_bytes: 1024 * 1024,
        message_size_max_bytes: 64 * 1024,
        ..small_config(dir.path(), FlushPolicy::Async { interval_ms: 50 })
    };
    let (store, _) = MessageStore::open(config).expect("open");
    let at_limit = store
        .put(&message("T", 0, vec![7; 64 * 1024], Some("tag")))
        .expect("a body of exactly the limit is stored");
    assert!(
        at_limit.size as usize > 64 * 1024,
        "the record is larger than the body"
    );
    match store.put(&message("T", 0, vec![7; 64 * 1024 + 1], None)) {
        Err(StoreError::MessageTooLarge { part, size, max }) => {
            assert_eq!((part, size, max), ("body", 64 * 1024 + 1, 64 * 1024));
        }
        other => panic!("expected the body to be refused, got {other:?}"),
    }
    let batch: Vec<_> = (0..3)
        .map(|_| message("T", 0, vec![1; 60 * 1024], None))
        .collect();
    match store.put_batch(&batch) {
        Err(StoreError::MessageTooLarge { part: "batch", .. }) => {}
        other => panic!("expected the batch to be refused, got {other:?}"),
    }
    let small_batch: Vec<_> = (0..3)
        .map(|_| message("T", 0, vec![1; 30 * 1024], None))
        .collect();
    store
        .put_batch(&small_batch)
        .expect("a batch within the limit");
    assert_eq!(store.max_offset("T", 0), 4, "nothing refused was stored");
}

/// A read gathers a queue's records with few reads of the log (neighbours, other queues'
/// records between them, a run crossing into the next segment) and hands back each exactly as
/// it would be read alone; a record filter that refuses some keeps scanning for more.
#[test]
fn reads_of_many_records_return_each_as_read_alone() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Async { interval_ms: 50 }).expect("open");
    // Three queues interleaved unevenly, bodies of varying size, over many 4 KiB segments.
    let mut expected: Vec<Vec<u64>> = vec![Vec::new(); 3];
    for index in 0..300usize {
        let queue_id = [0, 0, 1, 2, 0, 1][index % 6];
        let body = vec![(index % 251) as u8; 20 + (index * 37) % 400];
        let appended = store
            .put(&message("Many", queue_id, body, Some("TagA")))
            .expect("put");
        expected[queue_id as usize].push(appended.commit_log_offset);
    }
    for (queue_id, offsets) in expected.iter().enumerate() {
        for start in 0..offsets.len() {
            let result = store
                .get(
                    "Many",
                    queue_id as i32,
                    start as i64,
                    32,
                    usize::MAX,
                    |_| true,
                )
                .expect("get");
            assert_eq!(result.status, GetStatus::Found);
            let count = (offsets.len() - start).min(32);
            assert_eq!(
                result.messages.len(),
                count,
                "queue {queue_id} from {start}"
            );
            assert_eq!(result.next_begin_offset, (start + count) as i64);
            for (record, offset) in result.messages.iter().zip(&offsets[start..]) {
                let alone = store.read_record(*offset).expect("read").expect("present");
                assert_eq!(record, &alone, "queue {queue_id} record at {offset}");
            }
        }
    }
    // A record filter passing every other record: still 32, from further along the queue.
    let result = store
        .get_matching(
            "Many",
            0,
            0,
            32,
            usize::MAX,
            |_| true,
            |record| decode(record).queue_offset % 2 == 0,
        )
        .expect("get");
    assert_eq!(result.messages.len(), 32);
    assert!(result
        .messages
        .iter()
        .map(decode)
        .enumerate()
        .all(|(index, record)| record.queue_offset == 2 * index as i64));
    assert_eq!(result.next_begin_offset, 63);
}
