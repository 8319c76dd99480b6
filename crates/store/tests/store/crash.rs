//! Crash safety through the simulated file system: a crash at every k-th I/O operation (the
//! process dying mid-write included), then a power loss that keeps a random prefix of the
//! unsynced writes with the last one torn. After reopening under `Sync` flush, every
//! acknowledged message is present and byte-identical, nothing that was never appended
//! appears, and consume queues agree with the commit log.

use std::collections::{HashMap, HashSet};

use crate::common::*;
use tidemark_store::sim::SimStorage;
use tidemark_store::{Appended, FlushPolicy, NewMessage};

/// Messages over three queues of two topics, sizes varied so segments roll at odd places.
fn workload() -> Vec<NewMessage> {
    (0..90u32)
        .map(|index| {
            let topic = if index % 3 == 0 { "Orders" } else { "Events" };
            let size = 20 + (index as usize * 37) % 400;
            let mut body = vec![(index % 251) as u8; size];
            body[..4].copy_from_slice(&index.to_be_bytes());
            message(
                topic,
                (index % 2) as i32,
                body,
                Some(if index % 2 == 0 { "TagA" } else { "TagB" }),
            )
        })
        .collect()
}

/// Runs the workload until the simulated crash stops it; returns what was acknowledged.
fn run_until_crash(storage: &SimStorage, crash_after: Option<u64>) -> Vec<(NewMessage, Appended)> {
    let (store, _) = open_sim(storage, FlushPolicy::Sync).expect("open before the crash point");
    if let Some(operations) = crash_after {
        storage.crash_after(operations);
    }
    let mut acknowledged = Vec::new();
    for message in workload() {
        match store.put(&message) {
            Ok(appended) => acknowledged.push((message, appended)),
            Err(_) => break,
        }
    }
    drop(store);
    acknowledged
}

fn verify_after_crash(
    storage: &SimStorage,
    acknowledged: &[(NewMessage, Appended)],
    context: &str,
) {
    let (store, report) = open_sim(storage, FlushPolicy::Sync)
        .unwrap_or_else(|error| panic!("{context}: recovery failed: {error}"));
    assert!(
        report.corrupt_ranges.is_empty(),
        "{context}: a crash is not corruption: {report:?}"
    );
    for (message, appended) in acknowledged {
        let record = store
            .read_record(appended.commit_log_offset)
            .expect("readable")
            .unwrap_or_else(|| {
                panic!(
                    "{context}: acknowledged message at {} lost ({report:?})",
                    appended.commit_log_offset
                )
            });
        let record = decode(&record);
        assert_eq!(record.body, message.body, "{context}");
        assert_eq!(record.topic, message.topic, "{context}");
        assert_eq!(record.queue_offset, appended.queue_offset, "{context}");
        assert_eq!(
            record.store_timestamp, appended.store_timestamp,
            "{context}"
        );
        assert_eq!(
            record.properties.encode(),
            message.properties.encode(),
            "{context}"
        );
        let entry = store
            .queue_entry(&message.topic, message.queue_id, appended.queue_offset)
            .expect("readable");
        assert_eq!(
            entry.map(|entry| entry.commit_log_offset as u64),
            Some(appended.commit_log_offset),
            "{context}"
        );
    }
    let submitted: HashSet<Vec<u8>> = workload()
        .into_iter()
        .map(|message| message.body.to_vec())
        .collect();
    let mut per_queue: HashMap<(String, i32), i64> = HashMap::new();
    for (topic, queue_id) in store.queues() {
        for record in read_all(&store, &topic, queue_id) {
            assert!(
                submitted.contains(&record.body.to_vec()),
                "{context}: a message nobody appended appeared"
            );
            let next = per_queue.entry((topic.clone(), queue_id)).or_insert(0);
            assert_eq!(
                record.queue_offset, *next,
                "{context}: queue offsets are contiguous"
            );
            *next += 1;
        }
    }
    assert_queues_agree_with_log(&store);
    // The recovered store keeps working.
    store
        .put(&message("Orders", 0, vec![1, 2, 3], None))
        .unwrap_or_else(|error| panic!("{context}: append after recovery: {error}"));
}

#[test]
fn crash_at_every_kth_operation_loses_nothing_acknowledged() {
    let reference = SimStorage::new();
    let operations_before = {
        let (_store, _) = open_sim(&reference, FlushPolicy::Sync).expect("open");
        reference.operations()
    };
    let full = run_until_crash(&reference, None);
    assert_eq!(full.len(), workload().len());
    let workload_operations = reference.operations() - operations_before;
    let step = (workload_operations / 300).max(1);
    let mut rounds = 0;
    for crash_point in (1..workload_operations).step_by(step as usize) {
        for seed in 0..6u64 {
            let storage = SimStorage::new();
            let acknowledged = run_until_crash(&storage, Some(crash_point));
            let after = storage.crash(crash_point * 31 + seed);
            verify_after_crash(
                &after,
                &acknowledged,
                &format!("crash after {crash_point} operations, seed {seed}"),
            );
            rounds += 1;
        }
    }
    println!("{rounds} crash rounds over {workload_operations} operations");
    assert!(rounds >= 1000, "{rounds} rounds");
}

/// A second crash during recovery's own repairs is survived too.
#[test]
fn crash_during_recovery_is_recoverable() {
    for point in [5u64, 40, 120] {
        let storage = SimStorage::new();
        let acknowledged = run_until_crash(&storage, Some(200 + point));
        let first = storage.crash(point);
        first.crash_after(point);
        let _ = open_sim(&first, FlushPolicy::Sync);
        let second = first.crash(point + 1);
        verify_after_crash(
            &second,
            &acknowledged,
            &format!("crash {point} operations into recovery"),
        );
    }
}
