//! The message index: RocketMQ's index-file layout (the Apache store fixture's index reads,
//! and rebuilding it from the fixture's commit log gives the same bytes), lookups by key and
//! unique key across file rolls, restarts and crashes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::{decode, message, ticking_clock};
use tidemark_store::index::IndexConfig;
use tidemark_store::io::{FsStorage, Storage};
use tidemark_store::{MessageStore, StoreConfig};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/java-store/store")
}

fn copy_tree(from: &Path, to: &Path, skip: &str) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("fixture directory") {
        let entry = entry.expect("entry");
        if entry.file_name() == skip {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target, skip);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The fixture was written with 64 slots and 1024 entries per file.
fn fixture_config(root: &Path) -> StoreConfig {
    StoreConfig {
        index: IndexConfig {
            enabled: true,
            hash_slots: 64,
            entries: 1024,
        },
        ..StoreConfig::new(root)
    }
}

fn index_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("index"))
        .map(|entries| entries.map(|entry| entry.expect("entry").path()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn apaches_index_is_read_and_rebuilding_it_gives_the_same_bytes() {
    // Apache's own index file answers lookups.
    let dir = tempfile::tempdir().expect("tempdir");
    copy_tree(&fixture(), dir.path(), "");
    let (store, _) = MessageStore::open(fixture_config(dir.path())).expect("opens");
    let found = store
        .query_message("TopicA", "k0", 64, 0, i64::MAX)
        .expect("query");
    assert!(
        found
            .iter()
            .any(|record| decode(record).physical_offset == 0),
        "message 0 (keys \"k0 grp0\") found by k0"
    );
    let by_unique = store
        .query_message(
            "TopicA",
            "7F0000010FA01234ABCD000003E80001",
            32,
            0,
            i64::MAX,
        )
        .expect("query");
    assert_eq!(by_unique.len(), 1);
    assert_eq!(decode(&by_unique[0]).physical_offset, 362);
    assert!(store
        .query_message("TopicB", "k0", 64, 0, i64::MAX)
        .expect("query")
        .iter()
        .all(|record| decode(record).topic == "TopicB"));
    store.shutdown().expect("shutdown");

    // The same store without its index: Tidemark builds one from the commit log, and it is
    // Apache's, byte for byte.
    let rebuilt = tempfile::tempdir().expect("tempdir");
    copy_tree(&fixture(), rebuilt.path(), "index");
    let (store, _) = MessageStore::open(fixture_config(rebuilt.path())).expect("opens");
    store.index_now().expect("indexed");
    store.shutdown().expect("shutdown");
    let ours = index_files(rebuilt.path());
    let theirs = index_files(&fixture());
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(
        std::fs::read(&ours[0]).expect("ours"),
        std::fs::read(&theirs[0]).expect("theirs"),
        "the rebuilt index file differs from Apache's"
    );
}

fn keyed(i: usize) -> tidemark_store::NewMessage {
    let mut message = message(
        "Orders",
        (i % 2) as i32,
        format!("body-{i}").into_bytes(),
        None,
    );
    message
        .properties
        .insert("KEYS", format!("order-{i} customer-{}", i % 7));
    message
}

#[test]
fn keys_are_found_across_file_rolls_restarts_and_crashes() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Tiny files: 16 entries each, so 100 messages (two keys and a unique key each) roll many.
    let config = StoreConfig {
        index: IndexConfig {
            enabled: true,
            hash_slots: 8,
            entries: 16,
        },
        ..StoreConfig::new(dir.path())
    };
    let open = || {
        MessageStore::open_with(
            config.clone(),
            Arc::new(FsStorage) as Arc<dyn Storage>,
            ticking_clock(1_700_000_000_000),
        )
        .expect("opens")
        .0
    };
    let store = open();
    let mut offsets = Vec::new();
    for i in 0..100 {
        offsets.push(store.put(&keyed(i)).expect("put").commit_log_offset as i64);
    }
    store.index_now().expect("indexed");
    let check = |store: &MessageStore, offsets: &[i64], upto: usize| {
        for i in [0, 1, 37, upto - 1] {
            let found = store
                .query_message("Orders", &format!("order-{i}"), 64, 0, i64::MAX)
                .expect("query");
            let at: Vec<i64> = found
                .iter()
                .map(|record| decode(record).physical_offset)
                .collect();
            assert_eq!(at, vec![offsets[i]], "order-{i}");
        }
        let customers = store
            .query_message("Orders", "customer-3", 64, 0, i64::MAX)
            .expect("query");
        let expected = (0..upto).filter(|i| i % 7 == 3).count();
        assert_eq!(customers.len(), expected, "customer-3 over {upto} messages");
        assert!(
            customers
                .windows(2)
                .all(|pair| decode(&pair[0]).physical_offset > decode(&pair[1]).physical_offset),
            "newest first"
        );
        assert!(store
            .query_message("Other", "order-1", 64, 0, i64::MAX)
            .expect("query")
            .is_empty());
    };
    check(&store, &offsets, 100);
    assert!(index_files(dir.path()).len() > 10, "files rolled");
    store.shutdown().expect("shutdown");
    drop(store);

    // After a clean restart it goes on.
    let store = open();
    check(&store, &offsets, 100);
    for i in 100..150 {
        offsets.push(store.put(&keyed(i)).expect("put").commit_log_offset as i64);
    }
    store.index_now().expect("indexed");
    check(&store, &offsets, 150);
    // A crash (no shutdown) after more messages that may not be indexed yet: the next start
    // indexes them, and nothing twice.
    for i in 150..200 {
        offsets.push(store.put(&keyed(i)).expect("put").commit_log_offset as i64);
    }
    drop(store);
    let store = open();
    store.index_now().expect("indexed");
    check(&store, &offsets, 200);
    store.shutdown().expect("shutdown");
}
