use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tidemark_storage::journal::{JournalCodec, JournalOptions};
use tidemark_storage::sim::SimStorage;

use super::*;
use crate::offsets::CommittedOffset;

const INTERVAL: i64 = 60_000;

const BOUNDS: HistoryBounds = HistoryBounds {
    max_bytes: 1 << 20,
    max_age_ms: 7 * 24 * 3_600_000,
};

fn options() -> JournalOptions {
    JournalOptions {
        group_commit_window: Duration::ZERO,
        // Small, so the tests compact.
        compact_min_bytes: 4 << 10,
    }
}

fn open(storage: &SimStorage) -> ProgressHistory {
    ProgressHistory::open(
        Arc::new(storage.clone()),
        Path::new("/store/config/progressHistory"),
        options(),
        BOUNDS,
        INTERVAL,
    )
    .expect("history opens")
    .0
}

fn operator() -> Actor {
    Actor {
        account: "ops".to_owned(),
        address: "127.0.0.1:50000".to_owned(),
        client: "JAVA 4.9.8".to_owned(),
    }
}

fn moved(queue_id: i32, before: Option<i64>, after: Option<i64>) -> QueueMove {
    QueueMove {
        topic: "Orders".to_owned(),
        queue_id,
        before,
        after,
    }
}

fn committed(queue_id: i32, offset: i64) -> CommittedOffset {
    CommittedOffset {
        group: "g".to_owned(),
        topic: "Orders".to_owned(),
        queue_id,
        offset,
    }
}

#[test]
fn checkpoints_write_only_queues_that_moved_and_only_once_an_interval() {
    let history = ProgressHistory::in_memory(BOUNDS, INTERVAL);
    assert_eq!(
        history.checkpoint(0, &[committed(0, 5), committed(1, 7)]),
        1
    );
    assert_eq!(
        history.checkpoint(30_000, &[committed(0, 9)]),
        0,
        "within the interval"
    );
    assert_eq!(
        history.checkpoint(60_000, &[committed(0, 5), committed(1, 7)]),
        0,
        "nothing moved"
    );
    assert_eq!(
        history.checkpoint(120_000, &[committed(0, 9), committed(1, 7)]),
        1
    );
    let entries = history.entries("g", 0, true);
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1].queues, vec![moved(0, Some(5), Some(9))]);
    assert!(
        history.entries("g", 0, false).is_empty(),
        "no operator change"
    );
}

#[test]
fn where_a_group_stood_comes_from_the_entries_around_the_time() {
    let history = ProgressHistory::in_memory(BOUNDS, INTERVAL);
    history.checkpoint(1_000, &[committed(0, 100)]);
    history.record(
        5_000,
        "g",
        ChangeKind::Reset,
        222,
        operator(),
        vec![moved(0, Some(150), Some(20)), moved(1, None, Some(0))],
    );
    let key = |queue: i32| ("Orders".to_owned(), queue);
    let before = history.position_at("g", None, 4_999);
    assert_eq!(before.get(&key(0)), Some(&Some(100)), "the checkpoint");
    assert_eq!(
        before.get(&key(1)),
        Some(&None),
        "no offset before the reset made one"
    );
    let after = history.position_at("g", Some("Orders"), 5_000);
    assert_eq!(after.get(&key(0)), Some(&Some(20)));
    assert_eq!(after.get(&key(1)), Some(&Some(0)));
    assert!(history.position_at("g", Some("Other"), 5_000).is_empty());
    assert!(history.position_at("h", None, 5_000).is_empty());
}

#[test]
fn the_oldest_entries_go_past_the_size_bound_and_past_the_age_bound_at_compaction() {
    let small = HistoryBounds {
        max_bytes: 2_000,
        max_age_ms: 10_000,
    };
    let storage = SimStorage::new();
    let history = ProgressHistory::open(
        Arc::new(storage.clone()),
        Path::new("/h"),
        options(),
        small,
        INTERVAL,
    )
    .expect("opens")
    .0;
    for step in 0..200 {
        history.record(
            step * 100,
            "g",
            ChangeKind::Rewind,
            15,
            operator(),
            vec![moved(0, Some(step + 1), Some(step))],
        );
    }
    let kept = history.entries("g", i64::MIN, true);
    assert!(kept.len() < 200, "size bound: {} kept", kept.len());
    assert_eq!(kept.last().map(|entry| entry.id), Some(199));
    let weight: usize = kept.iter().map(HistoryEntry::weight).sum();
    assert!(weight <= 2_000, "{weight} bytes kept");
    assert!(history.compact_if_due(30_000).expect("compacts"));
    let kept = history.entries("g", i64::MIN, true);
    assert!(
        kept.iter().all(|entry| entry.time_ms >= 20_000),
        "age bound at compaction"
    );
    history.close();
    drop(history);
    let reopened = ProgressHistory::open(
        Arc::new(storage),
        Path::new("/h"),
        options(),
        small,
        INTERVAL,
    )
    .expect("reopens")
    .0;
    assert_eq!(reopened.entries("g", i64::MIN, true), kept);
    let (id, _) = reopened.record(40_000, "g", ChangeKind::Skip, 222, operator(), vec![]);
    assert_eq!(id, 200, "ids go on where they stopped");
}

/// A crash at every file-system operation of a history workload with compactions: every entry
/// reported durable is there after recovery, in order, and nothing recovered was not recorded.
#[test]
fn a_crash_anywhere_keeps_every_durable_entry() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for crash_at in (1..300u64).step_by(3) {
        let storage = SimStorage::new();
        let history = open(&storage);
        storage.crash_after(crash_at);
        let mut durable = Vec::new();
        let mut recorded = Vec::new();
        for step in 0..80i64 {
            let queues = vec![moved((step % 4) as i32, Some(step + 10), Some(step))];
            let (id, journaled) = history.record(
                step,
                "g",
                ChangeKind::Reset,
                222,
                operator(),
                queues.clone(),
            );
            recorded.push((id, queues));
            if step % 2 == 0 {
                if runtime.block_on(history.durable(journaled)).is_err() {
                    break;
                }
                durable.push(id);
            }
            if step % 13 == 12 {
                let _ = history.compact_if_due(step);
            }
        }
        let image = storage.crash(crash_at);
        drop(history);
        let recovered = open(&image).entries("g", i64::MIN, true);
        let ids: Vec<u64> = recovered.iter().map(|entry| entry.id).collect();
        for id in &durable {
            assert!(
                ids.contains(id),
                "crash at {crash_at}: durable entry {id} lost"
            );
        }
        assert!(
            ids.windows(2).all(|pair| pair[0] < pair[1]),
            "crash at {crash_at}: out of order {ids:?}"
        );
        for entry in &recovered {
            let made = recorded
                .iter()
                .find(|(id, _)| *id == entry.id)
                .map(|(_, queues)| queues);
            assert_eq!(
                made,
                Some(&entry.queues),
                "crash at {crash_at}: entry {}",
                entry.id
            );
        }
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// A consumer's routine commit moves a queue forward.
    Consume { queue: i32, by: i64 },
    /// An operator moves a queue anywhere (recorded at once).
    Move { queue: i32, to: i64 },
    /// Time passes; the checkpoint service runs.
    Wait { ms: i64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..3i32, 1..50i64).prop_map(|(queue, by)| Step::Consume { queue, by }),
        1 => (0..3i32, 0..500i64).prop_map(|(queue, to)| Step::Move { queue, to }),
        3 => (1..40_000i64).prop_map(|ms| Step::Wait { ms }),
    ]
}

proptest! {
    /// Where the history says a group stood at a time t is where it really stood at some time
    /// within one checkpoint interval before t (exactly at t when only operators moved it).
    #[test]
    fn the_position_at_a_time_is_where_the_group_stood_within_an_interval(
        steps in proptest::collection::vec(step(), 1..80),
        probes in proptest::collection::vec(0..1_000_000i64, 1..10),
    ) {
        let history = ProgressHistory::in_memory(BOUNDS, INTERVAL);
        let mut now = 0i64;
        let mut offsets = BTreeMap::from([(0, 0i64), (1, 0), (2, 0)]);
        let snapshot = |offsets: &BTreeMap<i32, i64>| -> Vec<CommittedOffset> {
            offsets.iter().map(|(queue, offset)| committed(*queue, *offset)).collect()
        };
        // The true position over time: (time, queue, offset) from each change on.
        let mut truth: Vec<(i64, i32, i64)> = offsets.iter().map(|(q, o)| (0, *q, *o)).collect();
        history.checkpoint(now, &snapshot(&offsets));
        for step in steps {
            match step {
                Step::Consume { queue, by } => {
                    let offset = offsets.entry(queue).or_default();
                    *offset += by;
                    truth.push((now, queue, *offset));
                }
                Step::Move { queue, to } => {
                    let before = offsets.insert(queue, to);
                    history.record(now, "g", ChangeKind::Reset, 222, operator(),
                        vec![moved(queue, before, Some(to))]);
                    truth.push((now, queue, to));
                }
                Step::Wait { ms } => {
                    // The service looks every few seconds; a checkpoint is written once an
                    // interval passed.
                    let end = now + ms;
                    while now < end {
                        now = (now + 5_000).min(end);
                        history.checkpoint(now, &snapshot(&offsets));
                    }
                }
            }
        }
        for probe in probes {
            let t = probe.min(now);
            let position = history.position_at("g", Some("Orders"), t);
            for queue in 0..3 {
                let found = position.get(&("Orders".to_owned(), queue)).copied().flatten();
                let Some(found) = found else {
                    return Err(TestCaseError::fail(format!("queue {queue} unknown at {t}")));
                };
                // Every value the queue held at some time in [t - interval - 5 s, t].
                let window_start = t - INTERVAL - 5_000;
                let mut held = Vec::new();
                let mut value_at_start = 0;
                for (time, q, offset) in &truth {
                    if *q != queue {
                        continue;
                    }
                    if *time <= window_start {
                        value_at_start = *offset;
                    } else if *time <= t {
                        held.push(*offset);
                    }
                }
                held.push(value_at_start);
                prop_assert!(held.contains(&found),
                    "queue {} at {}: history says {}, it held {:?}", queue, t, found, held);
            }
        }
    }
}

#[test]
fn details_survive_a_snapshot_and_entries_without_one_stay_in_the_first_format() {
    use tidemark_storage::journal::JournalCodec;
    let codec = HistoryCodec { bounds: BOUNDS };
    let mut log = HistoryLog::default();
    for (id, detail) in [(0, ""), (1, "to %RETRY%g: 7, 9"), (2, "")] {
        log.push(
            HistoryEntry {
                id,
                time_ms: 1_000,
                group: "g".to_owned(),
                kind: ChangeKind::Resend,
                request_code: 31007,
                actor: operator(),
                queues: Vec::new(),
                detail: detail.to_owned(),
            },
            &BOUNDS,
        );
    }
    let restored = codec.restore(&codec.snapshot(&log)).expect("restores");
    let details: Vec<&str> = restored
        .entries()
        .map(|entry| entry.detail.as_str())
        .collect();
    assert_eq!(details, ["", "to %RETRY%g: 7, 9", ""]);
    // A snapshot of entries with no detail has no trailer: what the first format wrote.
    log.clear(3);
    let plain = codec.snapshot(&log);
    assert_eq!(plain.len(), 12);
    // A detail naming an entry that is not there is damage.
    let mut damaged = plain;
    damaged.extend_from_slice(&1u32.to_be_bytes());
    damaged.extend_from_slice(&5u32.to_be_bytes());
    damaged.extend_from_slice(&[0, 1, b'x']);
    assert!(codec.restore(&damaged).is_err());
}

#[test]
fn a_group_with_very_many_queues_checkpoints_in_several_entries() {
    let history = ProgressHistory::in_memory(BOUNDS_LARGE, INTERVAL);
    let queues: Vec<CommittedOffset> = (0..10_000).map(|queue| committed(queue, 1)).collect();
    assert_eq!(
        history.checkpoint(0, &queues),
        3,
        "4,096 + 4,096 + 1,808 queues"
    );
    let entries = history.entries("g", 0, true);
    let named: usize = entries.iter().map(|entry| entry.queues.len()).sum();
    assert_eq!(named, 10_000);
    assert!(entries.iter().all(|entry| entry.queues.len() <= 4096));
}

const BOUNDS_LARGE: HistoryBounds = HistoryBounds {
    max_bytes: 64 << 20,
    max_age_ms: 7 * 24 * 3_600_000,
};

proptest! {
    /// A record or snapshot that passed the journal's checksum but is not what this version
    /// wrote (another version's, or bytes a master sent a replica) is refused with a reason,
    /// never a panic or an allocation its length fields ask for.
    #[test]
    fn any_bytes_decode_to_an_entry_or_a_reason(
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
        flip_at in any::<proptest::sample::Index>(),
        flip in 1..=255u8,
    ) {
        let codec = HistoryCodec { bounds: BOUNDS };
        let _ = HistoryEntry::from_record(&bytes);
        let _ = codec.restore(&bytes);
        let mut state = HistoryLog::default();
        let _ = codec.apply(&mut state, &bytes);

        // A real record with one byte changed.
        let entry = HistoryEntry {
            id: 7,
            time_ms: 1_000,
            group: "g".into(),
            kind: ChangeKind::Resend,
            request_code: 31007,
            actor: operator(),
            queues: vec![moved(0, Some(5), Some(1)), moved(3, Some(2), Some(9))],
            detail: "offsets 1,2".into(),
        };
        let mut record = entry.record();
        let at = flip_at.index(record.len());
        record[at] ^= flip;
        if let Ok(decoded) = HistoryEntry::from_record(&record) {
            prop_assert_ne!(decoded, entry);
        }
    }
}
