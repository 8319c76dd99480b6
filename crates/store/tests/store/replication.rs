//! Commit-log replication between two stores, as a master and a slave broker drive it: chunks
//! of at most 32 KiB that never cross a segment end, applied in order on the slave, which
//! indexes its consume queues from the records it receives.

use std::sync::Arc;

use crate::common::{self, message, small_config, ticking_clock};
use proptest::prelude::*;
use tidemark_store::io::Storage;
use tidemark_store::sim::SimStorage;
use tidemark_store::{FlushPolicy, MessageStore, StoreError};

const CHUNK_MAX: usize = 32 * 1024;

pub(crate) fn open(storage: &SimStorage, root: &str) -> MessageStore {
    MessageStore::open_with(
        small_config(root, FlushPolicy::Async { interval_ms: 50 }),
        Arc::new(storage.clone()) as Arc<dyn Storage>,
        ticking_clock(1_700_000_000_000),
    )
    .expect("open")
    .0
}

/// Copies everything new from `master` to `slave` in chunks no longer than `chunk`.
fn replicate(master: &MessageStore, slave: &MessageStore, chunk: usize) -> u64 {
    let mut position = slave.commit_log_positions().1;
    while let Some(bytes) = master
        .replication_chunk(position, chunk)
        .expect("master read")
    {
        assert!(bytes.len() <= chunk);
        position = slave
            .append_replicated(position, &bytes)
            .expect("slave append");
    }
    position
}

fn assert_same(master: &MessageStore, slave: &MessageStore) {
    let (master_min, master_end, _) = master.commit_log_positions();
    let (_, slave_end, _) = slave.commit_log_positions();
    assert_eq!(slave_end, master_end, "commit-log ends");
    // Byte for byte, segment by segment.
    let mut position = master_min;
    while let Some(bytes) = master.replication_chunk(position, CHUNK_MAX).expect("read") {
        let copy = slave
            .replication_chunk(position, bytes.len())
            .expect("read")
            .expect("slave has the bytes");
        assert_eq!(copy, bytes, "commit log differs at {position}");
        position += bytes.len() as u64;
    }
    let mut queues = master.queues();
    queues.sort();
    let mut slave_queues = slave.queues();
    slave_queues.sort();
    assert_eq!(slave_queues, queues, "the same consume queues");
    for (topic, queue_id) in queues {
        let max = master.max_offset(&topic, queue_id);
        assert_eq!(
            slave.max_offset(&topic, queue_id),
            max,
            "{topic}/{queue_id} max offset"
        );
        let on_master = master
            .get(&topic, queue_id, 0, max as usize, usize::MAX, |_| true)
            .expect("get");
        let on_slave = slave
            .get(&topic, queue_id, 0, max as usize, usize::MAX, |_| true)
            .expect("get");
        assert_eq!(
            on_slave.messages, on_master.messages,
            "{topic}/{queue_id} messages"
        );
    }
}

pub(crate) fn fill(master: &MessageStore, count: usize, seed: u64) {
    for i in 0..count {
        let size = 50 + ((seed as usize).wrapping_mul(31).wrapping_add(i * 97)) % 700;
        let topic = if i % 3 == 0 { "TopicA" } else { "TopicB" };
        master
            .put(&message(
                topic,
                (i % 4) as i32,
                vec![i as u8; size],
                Some("t"),
            ))
            .expect("put");
    }
}

#[test]
fn a_slave_copy_is_byte_identical_and_indexed_like_the_master() {
    let storage = SimStorage::new();
    let master = open(&storage, "/master");
    let slave = open(&storage, "/slave");
    fill(&master, 60, 1);
    replicate(&master, &slave, 1000);
    fill(&master, 40, 2);
    replicate(&master, &slave, CHUNK_MAX);
    assert!(
        master.commit_log_positions().1 > 4 * 4096,
        "several segments were rolled"
    );
    assert_same(&master, &slave);
}

#[test]
fn a_gap_is_refused_and_the_slave_resumes_from_its_end() {
    let storage = SimStorage::new();
    let master = open(&storage, "/master");
    let slave = open(&storage, "/slave");
    fill(&master, 10, 3);
    let first = master
        .replication_chunk(0, 300)
        .expect("read")
        .expect("bytes");
    slave.append_replicated(0, &first).expect("first chunk");
    let later = master
        .replication_chunk(600, 100)
        .expect("read")
        .expect("bytes");
    match slave.append_replicated(600, &later) {
        Err(StoreError::ReplicationGap { expected, got }) => {
            assert_eq!((expected, got), (300, 600))
        }
        other => panic!("expected a gap error, got {other:?}"),
    }
    replicate(&master, &slave, 77);
    assert_same(&master, &slave);
}

#[test]
fn a_slave_restarted_mid_record_recovers_and_continues() {
    let storage = SimStorage::new();
    let master = open(&storage, "/master");
    fill(&master, 30, 4);
    {
        let slave = open(&storage, "/slave");
        // Stop half way through some record, then drop without shutdown (a crash).
        let chunk = master
            .replication_chunk(0, 1500)
            .expect("read")
            .expect("bytes");
        slave.append_replicated(0, &chunk).expect("append");
    }
    let slave = open(&storage, "/slave");
    let resumed_at = slave.commit_log_positions().1;
    assert!(resumed_at <= 1500, "recovery keeps whole records only");
    replicate(&master, &slave, 999);
    assert_same(&master, &slave);
    slave.shutdown().expect("shutdown");
    let slave = open(&storage, "/slave");
    assert_same(&master, &slave);
}

/// Controller mode: a slave elected while a record was half-copied cuts that half before it
/// takes writes, so its own records follow whole ones.
#[test]
fn a_slave_elected_mid_record_cuts_the_half_record_before_writing() {
    let storage = SimStorage::new();
    let master = open(&storage, "/master");
    let slave = open(&storage, "/slave");
    fill(&master, 30, 8);
    let chunk = master
        .replication_chunk(0, 1500)
        .expect("read")
        .expect("bytes");
    slave.append_replicated(0, &chunk).expect("append");
    assert_eq!(slave.commit_log_positions().1, 1500);
    let cut = slave.cut_partial_record().expect("cut");
    assert!(cut > 0, "1500 bytes end inside a record");
    let whole_end = slave.commit_log_positions().1;
    assert!(
        whole_end < 1500,
        "the log now ends where the half record began"
    );
    assert_eq!(slave.cut_partial_record().expect("again"), 0);
    // Taking writes: the new records are readable after the copied ones.
    let before: i64 = slave
        .queues()
        .iter()
        .map(|(topic, queue)| slave.max_offset(topic, *queue))
        .sum();
    fill(&slave, 5, 9);
    let after: i64 = slave
        .queues()
        .iter()
        .map(|(topic, queue)| slave.max_offset(topic, *queue))
        .sum();
    assert_eq!(after, before + 5);
    slave.shutdown().expect("shutdown");
    let slave = open(&storage, "/slave");
    assert_eq!(
        slave
            .queues()
            .iter()
            .map(|(topic, queue)| slave.max_offset(topic, *queue))
            .sum::<i64>(),
        after,
        "recovery reads every record back"
    );
}

/// A master demoted without restarting (controller mode) whose log agrees with the new
/// master's: replication continues after its own appends without re-indexing them.
#[test]
fn a_master_demoted_in_place_replicates_after_its_own_appends() {
    let storage = SimStorage::new();
    let old = open(&storage, "/old");
    let new = open(&storage, "/new");
    fill(&old, 20, 10);
    replicate(&old, &new, 1000);
    // The new master writes on; the old one, with nothing to cut, follows it.
    fill(&new, 15, 11);
    assert_eq!(
        old.truncate_to(old.commit_log_positions().1).expect("cut"),
        0
    );
    // A reader in the middle of a queue keeps its place while the old master catches up.
    let reading = old
        .get("TopicB", 1, 2, 2, usize::MAX, |_| true)
        .expect("get")
        .messages;
    replicate(&new, &old, 500);
    assert_same(&new, &old);
    assert_eq!(
        old.get("TopicB", 1, 2, 2, usize::MAX, |_| true)
            .expect("get")
            .messages,
        reading
    );
    old.shutdown().expect("shutdown");
    let old = open(&storage, "/old");
    assert_same(&new, &old);
}

#[test]
fn an_empty_slave_accepts_a_master_starting_mid_log() {
    let storage = SimStorage::new();
    let master = open(&storage, "/master");
    fill(&master, 80, 5);
    let (_, end, _) = master.commit_log_positions();
    // Java masters start an empty slave at their last segment.
    let start = end - end % 4096;
    let slave = open(&storage, "/slave");
    let mut position = start;
    while let Some(bytes) = master.replication_chunk(position, 512).expect("read") {
        position = slave.append_replicated(position, &bytes).expect("append");
    }
    assert_eq!(slave.commit_log_positions().1, end);
    // Queues with records in the copied segment are indexed from there on, like the master's.
    let queues = slave.queues();
    assert!(!queues.is_empty());
    for (topic, queue_id) in queues {
        let max = master.max_offset(&topic, queue_id);
        assert_eq!(
            slave.max_offset(&topic, queue_id),
            max,
            "{topic}/{queue_id}"
        );
        let on_slave = slave
            .get(&topic, queue_id, 0, max as usize, usize::MAX, |_| true)
            .expect("get");
        assert!(
            !on_slave.messages.is_empty(),
            "{topic}/{queue_id} has messages on the slave"
        );
        for record in &on_slave.messages {
            let queue_offset = common::decode(record).queue_offset;
            let on_master = master
                .get(&topic, queue_id, queue_offset, 1, usize::MAX, |_| true)
                .expect("get");
            assert_eq!(
                on_master.messages.first(),
                Some(record),
                "{topic}/{queue_id} at {queue_offset}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn any_chunking_gives_the_same_copy(sizes in proptest::collection::vec(1usize..5000, 1..40), count in 1usize..80) {
        let storage = SimStorage::new();
        let master = open(&storage, "/master");
        let slave = open(&storage, "/slave");
        fill(&master, count, count as u64);
        let mut position = 0;
        let mut turn = 0;
        while let Some(bytes) = master.replication_chunk(position, sizes[turn % sizes.len()]).expect("read") {
            position = slave.append_replicated(position, &bytes).expect("append");
            turn += 1;
        }
        assert_same(&master, &slave);
    }
}

/// An old master and its slave: the slave has the first `shared` bytes, the old master wrote
/// 20 more messages the slave never got, and the slave, now master in epoch 2, wrote 30 of its
/// own. Both flushed. Returns (old, new, shared).
fn diverged(storage: &SimStorage) -> (MessageStore, MessageStore, u64) {
    let old = open(storage, "/old");
    let new = open(storage, "/new");
    old.epochs().begin(1, 0).expect("epoch 1");
    fill(&old, 50, 5);
    replicate(&old, &new, 1000);
    let shared = new.commit_log_positions().1;
    new.epochs()
        .replace(&old.epochs().spans(shared as i64))
        .expect("the slave's copy of the history");
    fill(&old, 20, 6);
    new.epochs().begin(2, shared as i64).expect("epoch 2");
    fill(&new, 30, 7);
    old.flush().expect("flush");
    new.flush().expect("flush");
    (old, new, shared)
}

fn spans(store: &MessageStore) -> Vec<tidemark_store::epochs::EpochSpan> {
    store.epochs().spans(store.commit_log_positions().1 as i64)
}

/// Controller mode: the old master comes back after its slave took over; it cuts its log where
/// their epoch histories stop agreeing, then follows the new master, byte for byte.
#[test]
fn a_returning_master_cuts_its_divergent_tail_and_follows_the_new_master() {
    let storage = SimStorage::new();
    let (old, new, shared) = diverged(&storage);
    let point = tidemark_store::epochs::consistent_point(&spans(&old), &spans(&new));
    assert_eq!(point, Some(shared as i64));
    let cut = old.truncate_to(shared).expect("truncate");
    assert!(cut > 0, "the divergent tail had bytes");
    assert_eq!(old.commit_log_positions().1, shared);
    assert_eq!(old.epochs().last_epoch(), Some(1));
    assert_eq!(
        old.truncate_to(shared).expect("again"),
        0,
        "nothing more to cut"
    );
    replicate(&new, &old, 777);
    assert_same(&new, &old);
    old.shutdown().expect("shutdown");
    let old = open(&storage, "/old");
    assert_same(&new, &old);
}

/// A crash anywhere in the cut leaves a log that recovery reads as whole records — the old
/// tail or part of it at worst, which a second cut removes — never zeroed bytes as data.
#[test]
fn a_crash_during_the_cut_never_leaves_garbage() {
    let measure = SimStorage::new();
    let (old, _new, shared) = diverged(&measure);
    let before = measure.operations();
    old.truncate_to(shared).expect("truncate");
    // Background threads add some operations; the range only needs to cover the cut.
    let operations = measure.operations() - before;
    let step = (operations / 40).max(1);
    for crash_after in (1..=operations + step).step_by(step as usize) {
        let storage = SimStorage::new();
        let (old, new, shared) = diverged(&storage);
        let old_end = old.commit_log_positions().1;
        storage.crash_after(crash_after);
        let _ = old.truncate_to(shared);
        drop(old);
        drop(new);
        let after = storage.crash(crash_after);
        let old = open(&after, "/old");
        let new = open(&after, "/new");
        let end = old.commit_log_positions().1;
        assert!(
            (shared..=old_end).contains(&end),
            "crash after {crash_after}: end {end} outside {shared}..={old_end}"
        );
        // Every queue entry recovery kept points at its own record.
        for (topic, queue_id) in old.queues() {
            let max = old.max_offset(&topic, queue_id);
            let got = old
                .get(&topic, queue_id, 0, max as usize, usize::MAX, |_| true)
                .expect("get");
            for (slot, record) in got.messages.iter().enumerate() {
                let queue_offset = i64::from_be_bytes(record[20..28].try_into().expect("8 bytes"));
                assert_eq!(
                    queue_offset, slot as i64,
                    "crash after {crash_after}: {topic}/{queue_id} slot {slot} reads another record"
                );
            }
        }
        old.truncate_to(shared).expect("truncate again");
        replicate(&new, &old, CHUNK_MAX);
        assert_same(&new, &old);
    }
}
