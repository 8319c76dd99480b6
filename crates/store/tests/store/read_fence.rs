//! The read fence (controller mode's confirm offset): queue reads and queue ends show only
//! records that end at or below it, wherever the fence falls — between records, inside one,
//! across consume-queue files and commit-log segments — and the reader at the fence waits
//! instead of being told its offset is bad.

use crate::common::{message, open_sim};
use proptest::prelude::*;
use tidemark_store::sim::SimStorage;
use tidemark_store::{Appended, FlushPolicy, GetStatus, MessageStore};

const TOPIC: &str = "Fenced";

fn filled(queues: &[i32]) -> (MessageStore, Vec<(i32, Appended)>) {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Async { interval_ms: 50 }).expect("open");
    let mut appended = Vec::new();
    for (index, queue) in queues.iter().enumerate() {
        let body = format!("body-{index:04}-{}", "x".repeat(index % 90)).into_bytes();
        let stored = store.put(&message(TOPIC, *queue, body, None)).expect("put");
        appended.push((*queue, stored));
    }
    (store, appended)
}

/// How many of `queue`'s records end at or below `fence`.
fn expected_visible(appended: &[(i32, Appended)], queue: i32, fence: u64) -> i64 {
    appended
        .iter()
        .filter(|(q, stored)| {
            *q == queue && stored.commit_log_offset + u64::from(stored.size) <= fence
        })
        .count() as i64
}

fn read_all(store: &MessageStore, queue: i32) -> Vec<i64> {
    let mut offsets = Vec::new();
    let mut next = 0;
    loop {
        let result = store
            .get(TOPIC, queue, next, 32, 1 << 20, |_| true)
            .expect("get");
        match result.status {
            GetStatus::Found => {
                offsets.extend(next..result.next_begin_offset);
                next = result.next_begin_offset;
            }
            GetStatus::OffsetOverflowOne => {
                assert_eq!(
                    result.next_begin_offset, next,
                    "a reader at the fence stays put"
                );
                return offsets;
            }
            // A queue the layout never wrote to.
            GetStatus::NoMatchedLogicQueue => return offsets,
            other => panic!("unexpected status {other:?} at {next}"),
        }
    }
}

#[test]
fn reads_stop_at_the_fence_and_resume_when_it_moves() {
    let queues: Vec<i32> = (0..60).map(|index| index % 2).collect();
    let (store, appended) = filled(&queues);
    let end = store.commit_log_positions().1;
    assert_eq!(store.read_fence(), None);
    assert_eq!(store.max_offset(TOPIC, 0), 30);

    // Inside the 41st record: the first 40 are visible (20 per queue).
    let (_, forty_first) = appended[40];
    store.set_read_fence(Some(forty_first.commit_log_offset + 3));
    for queue in [0, 1] {
        assert_eq!(store.max_offset(TOPIC, queue), 20, "queue {queue}");
        assert_eq!(store.written_max_offset(TOPIC, queue), 30);
        assert_eq!(read_all(&store, queue), (0..20).collect::<Vec<_>>());
        // A reader the fence fell behind (a rejoining replica moved it back) waits too.
        let ahead = store
            .get(TOPIC, queue, 25, 32, 1 << 20, |_| true)
            .expect("get");
        assert_eq!(ahead.status, GetStatus::OffsetOverflowOne);
        assert_eq!(ahead.next_begin_offset, 25);
        // Past everything written is still a bad offset.
        let beyond = store
            .get(TOPIC, queue, 31, 32, 1 << 20, |_| true)
            .expect("get");
        assert_eq!(beyond.status, GetStatus::OffsetOverflowBadly);
    }

    // Exactly at a record's end: that record is visible.
    store.set_read_fence(Some(
        forty_first.commit_log_offset + u64::from(forty_first.size),
    ));
    assert_eq!(store.max_offset(TOPIC, 0), 21);
    assert_eq!(store.max_offset(TOPIC, 1), 20);

    store.set_read_fence(Some(0));
    assert_eq!(store.max_offset(TOPIC, 0), 0);
    assert_eq!(read_all(&store, 0), Vec::<i64>::new());

    store.set_read_fence(Some(end));
    assert_eq!(read_all(&store, 1), (0..30).collect::<Vec<_>>());
    store.set_read_fence(None);
    assert_eq!(store.read_fence(), None);
    assert_eq!(read_all(&store, 0), (0..30).collect::<Vec<_>>());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any layout of three queues, any fence: the visible end is the count of records below it,
    /// and reading from 0 returns exactly those.
    #[test]
    fn the_visible_end_counts_the_records_below_the_fence(
        queues in proptest::collection::vec(0i32..3, 1..120),
        cut in 0.0f64..1.1,
    ) {
        let (store, appended) = filled(&queues);
        let end = store.commit_log_positions().1;
        let fence = (end as f64 * cut) as u64;
        store.set_read_fence(Some(fence));
        for queue in 0..3 {
            let visible = expected_visible(&appended, queue, fence);
            prop_assert_eq!(store.max_offset(TOPIC, queue), visible);
            prop_assert_eq!(read_all(&store, queue), (0..visible).collect::<Vec<_>>());
        }
    }
}
