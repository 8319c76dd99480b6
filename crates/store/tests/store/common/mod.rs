//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tidemark_protocol::message::{DecodeOptions, MessageRecord, Properties};
use tidemark_store::io::Storage;
use tidemark_store::sim::SimStorage;
use tidemark_store::{FlushPolicy, MessageStore, NewMessage, RecoveryReport, StoreConfig};

pub const ROOT: &str = "/store";

/// Small files so tests roll segments and queue files often.
pub fn small_config(root: impl Into<PathBuf>, flush: FlushPolicy) -> StoreConfig {
    StoreConfig {
        commit_log_segment_bytes: 4096,
        consume_queue_entries_per_file: 16,
        message_size_max_bytes: 2048,
        flush,
        ..StoreConfig::new(root)
    }
}

/// A clock that advances one millisecond per reading, so store timestamps are distinct.
pub fn ticking_clock(start: i64) -> Box<dyn Fn() -> i64 + Send + Sync> {
    let now = Arc::new(AtomicI64::new(start));
    Box::new(move || now.fetch_add(1, Ordering::Relaxed))
}

pub fn open_sim(
    storage: &SimStorage,
    flush: FlushPolicy,
) -> tidemark_store::error::Result<(MessageStore, RecoveryReport)> {
    MessageStore::open_with(
        small_config(ROOT, flush),
        Arc::new(storage.clone()) as Arc<dyn Storage>,
        ticking_clock(1_700_000_000_000),
    )
}

pub fn message(topic: &str, queue_id: i32, body: Vec<u8>, tag: Option<&str>) -> NewMessage {
    let mut properties = Properties::new();
    if let Some(tag) = tag {
        properties.insert("TAGS", tag);
    }
    properties.insert(
        "UNIQ_KEY",
        format!(
            "ID-{}",
            tidemark_protocol::hex::encode_upper(&body[..body.len().min(8)])
        ),
    );
    NewMessage {
        topic: topic.to_owned(),
        queue_id,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_600_000_000_000,
        born_host: "127.0.0.1:40000".parse().expect("literal"),
        store_host: "127.0.0.1:10911".parse().expect("literal"),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: Bytes::from(body),
        properties,
    }
}

pub fn decode(record: &Bytes) -> MessageRecord {
    MessageRecord::decode(
        record,
        0,
        DecodeOptions {
            verify_body_crc: true,
        },
    )
    .expect("stored records are valid")
    .0
}

/// Every message of a queue, read through the public API.
pub fn read_all(store: &MessageStore, topic: &str, queue_id: i32) -> Vec<MessageRecord> {
    let mut out = Vec::new();
    let mut offset = store.min_offset(topic, queue_id);
    loop {
        let result = store
            .get(topic, queue_id, offset, 32, usize::MAX, |_| true)
            .expect("readable");
        if result.messages.is_empty() && result.next_begin_offset == offset {
            return out;
        }
        out.extend(result.messages.iter().map(decode));
        if result.next_begin_offset <= offset {
            return out;
        }
        offset = result.next_begin_offset;
    }
}

/// Checks that every published queue entry points at a record of that topic, queue and offset.
pub fn assert_queues_agree_with_log(store: &MessageStore) {
    for (topic, queue_id) in store.queues() {
        let (min, max) = (
            store.min_offset(&topic, queue_id),
            store.max_offset(&topic, queue_id),
        );
        for offset in min..max {
            let entry = store
                .queue_entry(&topic, queue_id, offset)
                .expect("readable")
                .expect("published");
            if entry.is_hole() {
                continue;
            }
            let record = store
                .read_record(entry.commit_log_offset as u64)
                .expect("readable")
                .expect("entry points at a record");
            let record = decode(&record);
            assert_eq!(
                (record.topic.as_str(), record.queue_id, record.queue_offset),
                (topic.as_str(), queue_id, offset)
            );
            assert_eq!(record.physical_offset, entry.commit_log_offset);
        }
    }
}
