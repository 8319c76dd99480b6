//! A store directory written by the real Apache RocketMQ store (rocketmq-store 4.9.7, driven
//! by `compat/java`'s `StoreFixture` with 64 KiB segments and 100-entry queue files) opens in
//! Tidemark, and every message reads back identical to the Java side's manifest — after a clean
//! shutdown and after a crash (abort marker, lagging checkpoint, a pre-created empty segment).
//! Tidemark then keeps appending to it.

use std::path::{Path, PathBuf};

use crate::common::{self, decode};
use tidemark_protocol::json::{self, Value};
use tidemark_protocol::{hex, message::tags_code};
use tidemark_store::{MessageStore, RecoveryMode, StoreConfig};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/java-store")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("fixture directory") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

fn field<'a>(value: &'a Value, name: &str) -> &'a Value {
    value
        .get(name)
        .unwrap_or_else(|| panic!("manifest lacks {name}"))
}

fn int(value: &Value, name: &str) -> i64 {
    match field(value, name) {
        Value::Int(number) => *number,
        other => panic!("{name} is not an integer: {other:?}"),
    }
}

fn text<'a>(value: &'a Value, name: &str) -> &'a str {
    field(value, name)
        .as_str()
        .unwrap_or_else(|| panic!("{name} is not a string"))
}

fn manifest() -> Value {
    let bytes = std::fs::read(fixture().join("manifest.json")).expect("manifest");
    json::parse(&bytes).expect("manifest is JSON")
}

fn check(variant: &str, expected_mode: RecoveryMode) {
    let manifest = manifest();
    let dir = tempfile::tempdir().expect("tempdir");
    copy_tree(&fixture().join(variant), dir.path());
    // Default sizes on purpose: the segment and queue-file sizes on disk must win.
    let config = StoreConfig::new(dir.path());
    let (store, report) = MessageStore::open(config.clone()).expect("a RocketMQ store opens");
    assert_eq!(report.mode, expected_mode);
    let Value::Array(messages) = field(&manifest, "messages") else {
        panic!("messages is a list")
    };
    assert_eq!(messages.len(), 300);
    assert_eq!(
        report.commit_log_end,
        int(field(&manifest, "store"), "maxPhyOffset") as u64,
        "{report:?}"
    );
    assert!(report.corrupt_ranges.is_empty());
    for message in messages {
        let offset = int(message, "commitLogOffset") as u64;
        let raw = store
            .read_record(offset)
            .expect("readable")
            .unwrap_or_else(|| panic!("message at {offset} missing"));
        assert_eq!(raw.len() as i64, int(message, "size"));
        let record = decode(&raw);
        let (topic, queue_id, queue_offset) = (
            text(message, "topic"),
            int(message, "queueId") as i32,
            int(message, "queueOffset"),
        );
        assert_eq!(
            (record.topic.as_str(), record.queue_id, record.queue_offset),
            (topic, queue_id, queue_offset)
        );
        assert_eq!(record.physical_offset as u64, offset);
        assert_eq!(record.store_timestamp, int(message, "storeTimestamp"));
        assert_eq!(record.born_timestamp, int(message, "bornTimestamp"));
        assert_eq!(i64::from(record.flag), int(message, "flag"));
        assert_eq!(i64::from(record.sys_flag), int(message, "sysFlag"));
        assert_eq!(i64::from(record.body_crc), int(message, "bodyCRC"));
        assert_eq!(hex::encode_lower(&record.body), text(message, "bodyHex"));
        assert_eq!(
            record.properties.encode(),
            text(message, "propertiesString")
        );
        assert_eq!(tags_code(record.tags()), int(message, "tagsCode"));
        let entry = store
            .queue_entry(topic, queue_id, queue_offset)
            .expect("readable")
            .expect("indexed");
        assert_eq!(
            (
                entry.commit_log_offset as u64,
                i64::from(entry.size),
                entry.tags_code
            ),
            (offset, int(message, "size"), int(message, "tagsCode"))
        );
        let read = store
            .get(topic, queue_id, queue_offset, 1, usize::MAX, |_| true)
            .expect("get");
        assert_eq!(
            read.messages.first(),
            Some(&raw),
            "a pull returns the bytes RocketMQ stored"
        );
    }
    let Value::Array(queues) = field(field(&manifest, "store"), "queues") else {
        panic!("queues is a list")
    };
    for queue in queues {
        let (topic, queue_id) = (text(queue, "topic"), int(queue, "queueId") as i32);
        assert_eq!(store.min_offset(topic, queue_id), int(queue, "minOffset"));
        assert_eq!(store.max_offset(topic, queue_id), int(queue, "maxOffset"));
    }
    // Tidemark keeps writing where RocketMQ stopped.
    let appended = store
        .put(&common::message(
            "TopicA",
            0,
            b"after java".to_vec(),
            Some("TagA"),
        ))
        .expect("append");
    assert_eq!(appended.queue_offset, 150);
    assert_eq!(appended.commit_log_offset, report.commit_log_end);
    store.shutdown().expect("shutdown");
    drop(store);
    let (store, report) = MessageStore::open(config).expect("reopen");
    assert_eq!(report.mode, RecoveryMode::Normal);
    assert_eq!(
        decode(
            &store
                .read_record(appended.commit_log_offset)
                .expect("readable")
                .expect("kept")
        )
        .body
        .as_ref(),
        b"after java"
    );
}

#[test]
fn opens_a_cleanly_shut_down_rocketmq_store() {
    check("store", RecoveryMode::Normal);
}

#[test]
fn recovers_a_crashed_rocketmq_store() {
    check("store-abort", RecoveryMode::Abnormal);
}
