//! The broker's consumer offsets through their journal, on the simulated file system: any mix of
//! commits, resets, rewinds, drops, slave merges and compactions reloads to the same table; and
//! a crash at any file-system operation keeps every change that was reported durable, never
//! showing an offset that was not stored at some point.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use tidemark_broker::offsets::{Committer, ConsumerOffsetTable, ConsumerOffsets};
use tidemark_protocol::acked::AckedRanges;
use tidemark_storage::journal::JournalOptions;
use tidemark_storage::sim::SimStorage;

fn options() -> JournalOptions {
    JournalOptions {
        // Small, so the sequences below compact often.
        compact_min_bytes: 300,
        ..JournalOptions::default()
    }
}

fn empty() -> Result<ConsumerOffsetTable, String> {
    Ok(ConsumerOffsetTable::new())
}

fn open(storage: &SimStorage) -> ConsumerOffsets {
    ConsumerOffsets::open(
        Arc::new(storage.clone()),
        Path::new("/store/config/offsetJournal"),
        options(),
        &empty,
    )
    .expect("journal opens")
    .0
}

#[derive(Debug, Clone)]
enum Operation {
    Commit {
        topic: u8,
        group: u8,
        queue: u8,
        offset: i64,
        admin: bool,
        acked: Vec<(i64, i64)>,
    },
    Reset {
        topic: u8,
        group: u8,
        queue: u8,
        offset: i64,
    },
    DropGroup(u8),
    DropTopic(u8),
    Merge {
        topic: u8,
        group: u8,
        queue: u8,
        offset: i64,
    },
    Compact,
}

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        8 => (0u8..3, 0u8..3, 0u8..4, 0i64..200, any::<bool>(), proptest::collection::vec((0i64..220, 1i64..6), 0..3)).prop_map(|(topic, group, queue, offset, admin, ranges)| Operation::Commit { topic, group, queue, offset, admin, acked: ranges.into_iter().map(|(start, length)| (start, start + length)).collect() }),
        1 => (0u8..3, 0u8..3, 0u8..4, 0i64..200).prop_map(|(topic, group, queue, offset)| Operation::Reset { topic, group, queue, offset }),
        1 => (0u8..3).prop_map(Operation::DropGroup),
        1 => (0u8..3).prop_map(Operation::DropTopic),
        1 => (0u8..3, 0u8..3, 0u8..4, 0i64..200).prop_map(|(topic, group, queue, offset)| Operation::Merge { topic, group, queue, offset }),
        1 => Just(Operation::Compact),
    ]
}

fn apply(offsets: &ConsumerOffsets, operation: &Operation, now: i64) {
    let name = |prefix: &str, index: u8| format!("{prefix}{index}");
    match *operation {
        Operation::Commit {
            topic,
            group,
            queue,
            offset,
            admin,
            ref acked,
        } => {
            let acked = AckedRanges::from_ranges(acked.iter().copied());
            let committer = if admin {
                Committer::Admin
            } else {
                Committer::Progress
            };
            offsets.commit(
                &name("T", topic),
                &name("g", group),
                i32::from(queue),
                offset,
                1_000,
                now,
                committer,
                Some(&acked),
            );
        }
        Operation::Reset {
            topic,
            group,
            queue,
            offset,
        } => {
            offsets.reset(
                &name("T", topic),
                &name("g", group),
                i32::from(queue),
                offset,
                now,
            );
        }
        Operation::DropGroup(group) => {
            offsets.drop_group(&name("g", group));
        }
        Operation::DropTopic(topic) => {
            offsets.drop_topic(&name("T", topic));
        }
        Operation::Merge {
            topic,
            group,
            queue,
            offset,
        } => {
            let mut master = ConsumerOffsetTable::new();
            master.commit(
                &name("T", topic),
                &name("g", group),
                i32::from(queue),
                offset,
                1_000,
                now,
            );
            offsets.merge_from_master(&master);
        }
        Operation::Compact => {
            offsets.compact_if_due().expect("compaction");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn journaled_offsets_reload_to_the_same_table(operations in proptest::collection::vec(operation(), 1..150)) {
        let storage = SimStorage::new();
        let offsets = open(&storage);
        for (index, operation) in operations.iter().enumerate() {
            apply(&offsets, operation, 1_000 + index as i64);
        }
        let expected = offsets.snapshot().1.to_wrapper();
        offsets.close();
        drop(offsets);
        let reloaded = open(&storage);
        prop_assert_eq!(reloaded.snapshot().1.to_wrapper(), expected);
    }
}

/// A crash at every file-system operation of a commit workload with compactions: every commit
/// reported durable is there after recovery (offsets only move forward here, so "there" means
/// at least that value), and every recovered value was committed.
#[test]
fn a_crash_anywhere_keeps_every_durable_commit() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for crash_at in (1..400u64).step_by(3) {
        let storage = SimStorage::new();
        let offsets = open(&storage);
        storage.crash_after(crash_at);
        let mut durable: BTreeMap<i32, i64> = BTreeMap::new();
        let mut committed: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        for step in 0..120i64 {
            let queue = (step % 5) as i32;
            let offset = step + 1;
            let (_, journaled) = offsets.commit(
                "T",
                "g",
                queue,
                offset,
                1_000,
                step,
                Committer::Progress,
                None,
            );
            committed.entry(queue).or_default().push(offset);
            if step % 2 == 0 {
                if runtime.block_on(offsets.durable(journaled)).is_err() {
                    break;
                }
                durable.insert(queue, offset);
            }
            if step % 17 == 16 {
                let _ = offsets.compact_if_due();
            }
        }
        let image = storage.crash(crash_at);
        drop(offsets);
        let recovered = open(&image);
        for (queue, offset) in &durable {
            let found = recovered.query("T", "g", *queue);
            assert!(
                found.is_some_and(|found| found >= *offset),
                "crash at {crash_at}: queue {queue} durable at {offset}, recovered {found:?}"
            );
        }
        for queue in 0..5 {
            if let Some(found) = recovered.query("T", "g", queue) {
                assert!(
                    committed
                        .get(&queue)
                        .is_some_and(|values| values.contains(&found)),
                    "crash at {crash_at}: queue {queue} recovered {found}, never committed"
                );
            }
        }
    }
}

/// A store with only `consumerOffset.json` (Apache's, or Tidemark's before the journal) is
/// imported once; from then on the journal is the truth.
#[test]
fn a_store_without_a_journal_imports_consumer_offsets_json_once() {
    let storage = SimStorage::new();
    let imported = || -> Result<ConsumerOffsetTable, String> {
        let mut table = ConsumerOffsetTable::new();
        table.commit("T", "g", 0, 42, 100, 0);
        Ok(table)
    };
    let dir = Path::new("/store/config/offsetJournal");
    let (offsets, report) =
        ConsumerOffsets::open(Arc::new(storage.clone()), dir, options(), &imported).expect("opens");
    assert_eq!(report.snapshot, None);
    assert_eq!(offsets.query("T", "g", 0), Some(42));
    offsets.commit("T", "g", 0, 43, 100, 1, Committer::Progress, None);
    offsets.close();
    drop(offsets);
    let refuse = || -> Result<ConsumerOffsetTable, String> { Err("must not be read again".into()) };
    let (offsets, _) =
        ConsumerOffsets::open(Arc::new(storage), dir, options(), &refuse).expect("reopens");
    assert_eq!(offsets.query("T", "g", 0), Some(43));
}
