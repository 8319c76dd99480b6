//! Damage to the newest commit-log segment after a crash: a torn tail of garbage, or a single
//! flipped bit anywhere. Recovery never panics, keeps every record before the damage intact,
//! never serves a record that fails its checks, and leaves queues consistent with the log.

use std::path::PathBuf;

use crate::common::*;
use proptest::prelude::*;
use tidemark_store::checkpoint::Checkpoint;
use tidemark_store::sim::SimStorage;
use tidemark_store::{Appended, FlushPolicy};

fn filled_store(checkpointed: bool) -> (SimStorage, Vec<(Vec<u8>, Appended)>) {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Sync).expect("open");
    let mut acknowledged = Vec::new();
    for index in 0..70u32 {
        let mut body = vec![index as u8; 30 + (index as usize * 53) % 300];
        body[..4].copy_from_slice(&index.to_be_bytes());
        let appended = store
            .put(&message(
                "T",
                (index % 2) as i32,
                body.clone(),
                Some("TagA"),
            ))
            .expect("put");
        acknowledged.push((body, appended));
    }
    if checkpointed {
        // Records the durable offsets, so damage inside them counts as rot, not as a torn tail.
        store.flush().expect("flush");
    }
    drop(store);
    (storage.crash(7), acknowledged)
}

fn newest_segment(storage: &SimStorage) -> (PathBuf, u64) {
    let path = storage
        .files()
        .into_iter()
        .filter(|path| path.starts_with(format!("{ROOT}/commitlog")))
        .max()
        .expect("a segment exists");
    let base = path
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.parse().ok())
        .expect("numeric name");
    (path, base)
}

fn verify(storage: &SimStorage, acknowledged: &[(Vec<u8>, Appended)], damage_at: u64) {
    let (store, report) =
        open_sim(storage, FlushPolicy::Sync).expect("recovery never fails on damage");
    for (body, appended) in acknowledged {
        let end = appended.commit_log_offset + u64::from(appended.size);
        let stored = store
            .read_record(appended.commit_log_offset)
            .expect("readable");
        if end <= damage_at {
            let record = decode(
                &stored.unwrap_or_else(|| panic!("record before the damage lost: {report:?}")),
            );
            assert_eq!(record.body.to_vec(), *body);
        }
    }
    for queue_id in 0..2 {
        // read_all decodes with CRC checks: a bad record served would fail here.
        for record in read_all(&store, "T", queue_id) {
            let original = &acknowledged
                .iter()
                .find(|(_, appended)| appended.commit_log_offset == record.physical_offset as u64)
                .expect("served records were appended")
                .0;
            assert_eq!(record.body.to_vec(), *original);
        }
    }
    assert_queues_agree_with_log(&store);
    store
        .put(&message("T", 0, vec![9; 9], None))
        .expect("appends work after recovery");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn torn_tail_of_garbage(fraction in 0.0f64..1.0, garbage in proptest::collection::vec(any::<u8>(), 1..300), checkpointed in any::<bool>()) {
        let (storage, acknowledged) = filled_store(checkpointed);
        let (path, base) = newest_segment(&storage);
        let used = acknowledged.last().map(|(_, appended)| appended.commit_log_offset + u64::from(appended.size) - base).unwrap_or(0);
        let at = (used as f64 * fraction) as u64;
        storage.corrupt(&path, at, &garbage);
        verify(&storage, &acknowledged, base + at);
    }

    #[test]
    fn single_bit_flip(fraction in 0.0f64..1.0, bit in 0u8..8, checkpointed in any::<bool>()) {
        let (storage, acknowledged) = filled_store(checkpointed);
        let (path, base) = newest_segment(&storage);
        let used = acknowledged.last().map(|(_, appended)| appended.commit_log_offset + u64::from(appended.size) - base).unwrap_or(1);
        let at = ((used as f64 * fraction) as u64).min(used - 1);
        let image = storage.read_file(&path).expect("segment");
        storage.corrupt(&path, at, &[image[at as usize] ^ (1 << bit)]);
        // The record containing the flipped byte may go; everything before it must stay.
        let damaged_record_start = acknowledged
            .iter()
            .map(|(_, appended)| appended.commit_log_offset)
            .filter(|offset| *offset <= base + at)
            .max()
            .unwrap_or(base);
        verify(&storage, &acknowledged, damaged_record_start);
    }
}

/// With the durable offsets checkpointed, a flipped body byte in the middle of synced data
/// costs only that record: it is reported, skipped, and the records after it are kept.
#[test]
fn rot_inside_synced_data_costs_only_the_rotten_record() {
    let (storage, acknowledged) = filled_store(true);
    let (path, base) = newest_segment(&storage);
    let in_segment: Vec<&(Vec<u8>, Appended)> = acknowledged
        .iter()
        .filter(|(_, appended)| appended.commit_log_offset >= base)
        .collect();
    assert!(
        in_segment.len() >= 3,
        "the newest segment holds several records"
    );
    let victim = in_segment[in_segment.len() / 2].1;
    // Last byte of the record's body region: 20 bytes before its end are topic and properties.
    let at = victim.commit_log_offset - base + u64::from(victim.size) - 40;
    let image = storage.read_file(&path).expect("segment");
    storage.corrupt(&path, at, &[image[at as usize] ^ 0x01]);
    let (store, report) = open_sim(&storage, FlushPolicy::Sync).expect("recovers");
    assert_eq!(report.corrupt_ranges.len(), 1, "{report:?}");
    assert_eq!(report.corrupt_ranges[0].0, victim.commit_log_offset);
    for (body, appended) in &acknowledged {
        let queue_id = body_queue(body);
        let entry = store
            .queue_entry("T", queue_id, appended.queue_offset)
            .expect("readable")
            .expect("slot kept");
        if *appended == victim {
            assert!(
                entry.is_hole(),
                "the rotten record's slot is a hole, never served"
            );
        } else {
            let stored = store
                .get("T", queue_id, appended.queue_offset, 1, usize::MAX, |_| {
                    true
                })
                .expect("get");
            assert_eq!(
                decode(&stored.messages[0]).body.to_vec(),
                *body,
                "records after the rot are kept"
            );
        }
    }
    assert_queues_agree_with_log(&store);
}

/// Rot in the last record of an older segment, where no valid record follows it in its file:
/// the rest of that file is reported and skipped, and every record of the newer segments —
/// synced and acknowledged — is kept (recovery once cut the log there and deleted them).
#[test]
fn rot_at_the_end_of_an_older_segment_keeps_the_newer_segments() {
    let (storage, acknowledged) = filled_store(true);
    let (_, newest_base) = newest_segment(&storage);
    let victim = acknowledged
        .iter()
        .map(|(_, appended)| *appended)
        .filter(|appended| appended.commit_log_offset < newest_base)
        .max_by_key(|appended| appended.commit_log_offset)
        .expect("an older segment holds records");
    let segment_bytes = 4096;
    let base = victim.commit_log_offset / segment_bytes * segment_bytes;
    let path = PathBuf::from(format!("{ROOT}/commitlog/{base:020}"));
    let at = victim.commit_log_offset - base + u64::from(victim.size) - 40;
    let image = storage.read_file(&path).expect("the victim's segment");
    storage.corrupt(&path, at, &[image[at as usize] ^ 0x01]);
    // Recovery scans from the older of the durable offsets: with the consume queues' durable
    // offset back in the victim's segment (their flush lagging the log's), the scan crosses it.
    let checkpoint_path = PathBuf::from(format!("{ROOT}/checkpoint"));
    let mut checkpoint =
        Checkpoint::decode(&storage.read_file(&checkpoint_path).expect("checkpoint"));
    let durable = checkpoint
        .durable
        .as_mut()
        .expect("durable offsets checkpointed");
    assert!(
        durable.commit_log > victim.commit_log_offset,
        "the victim is synced data"
    );
    durable.consume_queues = base;
    storage.corrupt(&checkpoint_path, 0, &checkpoint.encode());
    let (store, report) = open_sim(&storage, FlushPolicy::Sync).expect("recovers");
    assert_eq!(
        report.corrupt_ranges,
        vec![(victim.commit_log_offset, base + segment_bytes)],
        "the rest of the victim's segment is reported"
    );
    let mut kept_after = 0;
    for (body, appended) in &acknowledged {
        let entry = store
            .queue_entry("T", body_queue(body), appended.queue_offset)
            .expect("readable")
            .expect("slot kept");
        if *appended == victim {
            assert!(entry.is_hole(), "the rotten record is never served");
            continue;
        }
        let stored = store
            .read_record(appended.commit_log_offset)
            .expect("readable")
            .unwrap_or_else(|| panic!("record at {} lost", appended.commit_log_offset));
        assert_eq!(decode(&stored).body.to_vec(), *body);
        if appended.commit_log_offset > victim.commit_log_offset {
            kept_after += 1;
        }
    }
    assert!(
        kept_after > 0,
        "records of newer segments exist and were kept"
    );
    assert_queues_agree_with_log(&store);
}

fn body_queue(body: &[u8]) -> i32 {
    (u32::from_be_bytes([body[0], body[1], body[2], body[3]]) % 2) as i32
}
