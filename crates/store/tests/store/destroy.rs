//! Destroying consume queues (a deleted or unused topic, queues whose records all expired):
//! the files go, a queue made again starts at 0, and a crash afterwards neither brings the old
//! queue back nor lets its records — still in the log — cut the log short during recovery.

use std::path::Path;
use std::sync::Arc;

use crate::common::*;
use tidemark_store::io::Storage;
use tidemark_store::sim::SimStorage;
use tidemark_store::{FlushPolicy, MessageStore};

fn put(store: &MessageStore, topic: &str, queue_id: i32, tag: u8) -> i64 {
    store
        .put(&message(topic, queue_id, vec![tag; 20], None))
        .expect("put")
        .queue_offset
}

fn bodies(store: &MessageStore, topic: &str, queue_id: i32) -> Vec<u8> {
    read_all(store, topic, queue_id)
        .iter()
        .map(|record| record.body[0])
        .collect()
}

fn queue_files(storage: &SimStorage, topic: &str) -> usize {
    let dir = Path::new(ROOT).join("consumequeue").join(topic);
    storage
        .files()
        .iter()
        .filter(|path| path.starts_with(&dir))
        .count()
}

#[test]
fn a_destroyed_topic_stays_destroyed_through_a_crash_and_its_records_do_not_cut_the_log() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Sync).expect("open");
    for index in 0..10 {
        put(&store, "Gone", 0, index);
        put(&store, "Gone", 1, index);
        put(&store, "Kept", 0, index);
    }
    store.flush().expect("flush");
    assert!(queue_files(&storage, "Gone") > 0);
    assert_eq!(store.destroy_topic_queues("Gone").expect("destroy"), 2);
    assert_eq!(store.destroy_topic_queues("Gone").expect("again"), 0);
    assert_eq!(queue_files(&storage, "Gone"), 0, "files removed");
    assert!(!store.queue_topics().contains(&"Gone".to_owned()));
    assert_eq!(store.max_offset("Gone", 0), 0);
    // Made again, the queue starts at 0, as in RocketMQ.
    assert_eq!(put(&store, "Gone", 0, 100), 0);
    assert_eq!(put(&store, "Gone", 0, 101), 1);
    for index in 10..15 {
        put(&store, "Kept", 0, index);
    }
    let written = store.commit_log_positions().1;
    drop(store);

    // After a crash, recovery reads the old records of "Gone" (offsets 0..10) before the new
    // ones (0..2): without the destroy mark, the second offset 0 would end the scan there.
    let (store, report) = open_sim(&storage.crash(7), FlushPolicy::Sync).expect("recover");
    assert_eq!(report.commit_log_end, written, "{report:?}");
    assert_eq!(report.bytes_truncated, 0, "{report:?}");
    assert_eq!(bodies(&store, "Gone", 0), vec![100, 101]);
    assert_eq!(
        store.max_offset("Gone", 1),
        0,
        "not rebuilt from old records"
    );
    assert_eq!(bodies(&store, "Kept", 0), (0..15).collect::<Vec<u8>>());
    assert_queues_agree_with_log(&store);
}

/// A crash at every point of a destroy: afterwards the topic is either whole (the mark was not
/// yet durable) or gone, and the other topic and the log are intact.
#[test]
fn a_destroy_interrupted_anywhere_is_completed_or_never_happened() {
    for crash_after in 1..40 {
        let storage = SimStorage::new();
        let (store, _) = open_sim(&storage, FlushPolicy::Sync).expect("open");
        for index in 0..12 {
            put(&store, "Gone", 0, index);
            put(&store, "Kept", 0, index);
        }
        store.flush().expect("flush");
        let written = store.commit_log_positions().1;
        storage.crash_after(crash_after);
        let destroyed = store.destroy_topic_queues("Gone").is_ok();
        drop(store);
        let context = format!("crash after {crash_after} operations");
        let (store, report) =
            open_sim(&storage.crash(crash_after), FlushPolicy::Sync).expect("recover");
        assert_eq!(report.commit_log_end, written, "{context}: {report:?}");
        assert_eq!(
            bodies(&store, "Kept", 0),
            (0..12).collect::<Vec<u8>>(),
            "{context}"
        );
        let gone = bodies(&store, "Gone", 0);
        assert!(
            gone.is_empty() || gone == (0..12).collect::<Vec<u8>>(),
            "{context}: half a queue: {gone:?}"
        );
        if destroyed {
            assert!(gone.is_empty(), "{context}: a finished destroy came undone");
        }
        // Whatever happened, the topic can be written again from where its queue now ends.
        let next = put(&store, "Gone", 0, 200);
        assert_eq!(next, gone.len() as i64, "{context}");
        assert_queues_agree_with_log(&store);
    }
}

#[test]
fn only_queues_whose_records_all_expired_are_destroyed() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Async { interval_ms: 50 }).expect("open");
    // "Old" only in the first segments; "Live" to the end; "Kept" old but protected.
    for index in 0..20u8 {
        store
            .put(&message("Old", 0, vec![index; 300], None))
            .expect("put");
        store
            .put(&message("Kept", 0, vec![index; 300], None))
            .expect("put");
    }
    for index in 0..30u8 {
        store
            .put(&message("Live", 0, vec![index; 300], None))
            .expect("put");
    }
    assert!(
        store
            .destroy_expired_queues(|_| false)
            .expect("clean")
            .is_empty(),
        "nothing expired yet"
    );
    let expired = 1_700_000_000_000 + 73 * 3_600_000;
    let report = store.delete_expired(expired, 4, 0.1).expect("retention");
    assert!(!report.segments_deleted.is_empty());
    let (log_min, _, _) = store.commit_log_positions();
    assert!(log_min > 0);
    assert_eq!(
        store
            .destroy_expired_queues(|topic| topic == "Kept")
            .expect("clean"),
        vec![("Old".to_owned(), 0)]
    );
    let topics = store.queue_topics();
    assert!(!topics.contains(&"Old".to_owned()), "{topics:?}");
    assert!(topics.contains(&"Kept".to_owned()) && topics.contains(&"Live".to_owned()));
    assert_eq!(queue_files(&storage, "Old"), 0);
    assert!(!read_all(&store, "Live", 0).is_empty());
    store.shutdown().expect("shutdown");
    drop(store);
    let (store, _) = open_sim(&storage, FlushPolicy::Async { interval_ms: 50 }).expect("reopen");
    assert!(!store.queue_topics().contains(&"Old".to_owned()));
}

fn open_at(storage: &SimStorage, root: &str) -> MessageStore {
    MessageStore::open_with(
        small_config(root, FlushPolicy::Sync),
        Arc::new(storage.clone()) as Arc<dyn Storage>,
        ticking_clock(1_700_000_000_000),
    )
    .expect("open")
    .0
}

fn replicate(master: &MessageStore, slave: &MessageStore) {
    let mut position = slave.commit_log_positions().1;
    while let Some(bytes) = master.replication_chunk(position, 8192).expect("read") {
        position = slave
            .append_replicated(position, &bytes)
            .expect("slave append");
    }
}

/// A slave follows a master that destroyed a queue and began it again, rather than mixing
/// the two queues' entries, and keeps it so through its own crash.
#[test]
fn a_slave_restarts_a_queue_its_master_restarted() {
    let master_storage = SimStorage::new();
    let slave_storage = SimStorage::new();
    let master = open_at(&master_storage, "/master");
    let slave = open_at(&slave_storage, "/slave");
    for index in 0..8 {
        put(&master, "T", 0, index);
    }
    replicate(&master, &slave);
    assert_eq!(slave.max_offset("T", 0), 8);
    master.destroy_topic_queues("T").expect("destroy");
    put(&master, "T", 0, 50);
    put(&master, "T", 0, 51);
    replicate(&master, &slave);
    assert_eq!(bodies(&slave, "T", 0), vec![50, 51]);
    assert_eq!(slave.max_offset("T", 0), 2);
    slave.flush().expect("flush");
    let written = slave.commit_log_positions().1;
    drop(slave);
    let slave = MessageStore::open_with(
        small_config("/slave", FlushPolicy::Sync),
        Arc::new(slave_storage.crash(3)) as Arc<dyn Storage>,
        ticking_clock(1_700_000_000_000),
    )
    .expect("recover")
    .0;
    assert_eq!(slave.commit_log_positions().1, written);
    assert_eq!(bodies(&slave, "T", 0), vec![50, 51]);
}
