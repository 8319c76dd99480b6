//! Model test: random appends, reads, clean reopenings and crash-style reopenings against an
//! in-memory model of every queue. Under `Sync` flush, everything appended survives both.

use std::collections::BTreeMap;

use crate::common::*;
use proptest::prelude::*;
use tidemark_protocol::message::tags_code;
use tidemark_store::sim::SimStorage;
use tidemark_store::{FlushPolicy, GetStatus};

#[derive(Debug, Clone)]
enum Operation {
    Append {
        topic: u8,
        queue_id: u8,
        size: usize,
        tag: u8,
    },
    Batch {
        topic: u8,
        queue_id: u8,
        count: usize,
    },
    Get {
        topic: u8,
        queue_id: u8,
        offset_shift: i64,
        max_count: usize,
        only_tag: Option<u8>,
    },
    Reopen {
        clean: bool,
    },
}

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        6 => (0u8..2, 0u8..3, 1usize..600, 0u8..3).prop_map(|(topic, queue_id, size, tag)| Operation::Append { topic, queue_id, size, tag }),
        1 => (0u8..2, 0u8..3, 1usize..5).prop_map(|(topic, queue_id, count)| Operation::Batch { topic, queue_id, count }),
        3 => (0u8..2, 0u8..3, -3i64..40, 1usize..40, proptest::option::of(0u8..3))
            .prop_map(|(topic, queue_id, offset_shift, max_count, only_tag)| Operation::Get { topic, queue_id, offset_shift, max_count, only_tag }),
        1 => any::<bool>().prop_map(|clean| Operation::Reopen { clean }),
    ]
}

/// Bodies and tags by queue offset, per (topic, queue id).
type Model = BTreeMap<(u8, u8), Vec<(Vec<u8>, u8)>>;

fn topic_name(topic: u8) -> &'static str {
    ["Alpha", "Beta"][topic as usize]
}

fn tag_name(tag: u8) -> &'static str {
    ["TagA", "TagB", "TagC"][tag as usize]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model(operations in proptest::collection::vec(operation(), 1..120)) {
        let storage = SimStorage::new();
        let (mut store, _) = open_sim(&storage, FlushPolicy::Sync).expect("open");
        let mut model: Model = BTreeMap::new();
        let mut serial = 0u32;
        for operation in operations {
            match operation {
                Operation::Append { topic, queue_id, size, tag } => {
                    serial += 1;
                    let mut body = vec![(serial % 256) as u8; size.max(4)];
                    body[..4].copy_from_slice(&serial.to_be_bytes());
                    let appended = store.put(&message(topic_name(topic), i32::from(queue_id), body.clone(), Some(tag_name(tag)))).expect("put");
                    let queue = model.entry((topic, queue_id)).or_default();
                    prop_assert_eq!(appended.queue_offset, queue.len() as i64);
                    queue.push((body, tag));
                }
                Operation::Batch { topic, queue_id, count } => {
                    let batch: Vec<_> = (0..count).map(|_| {
                        serial += 1;
                        let mut body = vec![7u8; 16];
                        body[..4].copy_from_slice(&serial.to_be_bytes());
                        body
                    }).collect();
                    let messages: Vec<_> = batch.iter().map(|body| message(topic_name(topic), i32::from(queue_id), body.clone(), Some("TagA"))).collect();
                    store.put_batch(&messages).expect("batch");
                    model.entry((topic, queue_id)).or_default().extend(batch.into_iter().map(|body| (body, 0)));
                }
                Operation::Get { topic, queue_id, offset_shift, max_count, only_tag } => {
                    let queue = model.get(&(topic, queue_id)).cloned().unwrap_or_default();
                    let offset = offset_shift.clamp(0, queue.len() as i64 + 2);
                    let code = only_tag.map(|tag| tags_code(Some(tag_name(tag))));
                    let result = store.get(topic_name(topic), i32::from(queue_id), offset, max_count, usize::MAX, |candidate| code.is_none_or(|code| code == candidate)).expect("get");
                    let length = queue.len() as i64;
                    if !model.contains_key(&(topic, queue_id)) {
                        prop_assert_eq!(result.status, GetStatus::NoMatchedLogicQueue);
                        continue;
                    }
                    prop_assert_eq!(result.max_offset, length);
                    if offset == length {
                        prop_assert_eq!(result.status, GetStatus::OffsetOverflowOne);
                        continue;
                    }
                    if offset > length {
                        prop_assert_eq!((result.status, result.next_begin_offset), (GetStatus::OffsetOverflowBadly, 0));
                        continue;
                    }
                    let wanted: Vec<&Vec<u8>> = queue[offset as usize..]
                        .iter()
                        .filter(|(_, tag)| only_tag.is_none_or(|only| only == *tag))
                        .map(|(body, _)| body)
                        .take(max_count)
                        .collect();
                    let got: Vec<Vec<u8>> = result.messages.iter().map(|record| decode(record).body.to_vec()).collect();
                    prop_assert!(!got.is_empty() || wanted.is_empty() || result.next_begin_offset > offset, "progress is always made");
                    prop_assert_eq!(&got[..], &wanted[..got.len()].iter().map(|body| body.to_vec()).collect::<Vec<_>>()[..]);
                    let expected_status = if got.is_empty() { GetStatus::NoMatchedMessage } else { GetStatus::Found };
                    prop_assert_eq!(result.status, expected_status);
                }
                Operation::Reopen { clean } => {
                    if clean {
                        store.shutdown().expect("shutdown");
                    }
                    drop(store);
                    let (reopened, _) = open_sim(&storage, FlushPolicy::Sync).expect("reopen");
                    store = reopened;
                }
            }
        }
        for ((topic, queue_id), queue) in &model {
            let all = read_all(&store, topic_name(*topic), i32::from(*queue_id));
            prop_assert_eq!(all.len(), queue.len());
            for (record, (body, _)) in all.iter().zip(queue) {
                prop_assert_eq!(&record.body.to_vec(), body);
            }
        }
        assert_queues_agree_with_log(&store);
    }
}
