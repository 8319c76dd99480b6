//! Retention by RocketMQ's rules: expired segments at the delete hour or under space pressure,
//! unexpired ones only above the forced-clean level, and no appends above the warning level.
use crate::common::*;
use std::sync::Arc;
use tidemark_store::sim::SimStorage;
use tidemark_store::{FlushPolicy, GetStatus, MessageStore, StoreError};

const START: i64 = 1_700_000_000_000;
/// Later than every segment's expiry (72 h reserved).
const EXPIRED: i64 = START + 73 * 3_600_000;
/// Not the delete hour (4).
const OTHER_HOUR: u32 = 12;

/// A store of ~5 segments, all but the last closed just after `START`.
fn filled_store(storage: &SimStorage) -> MessageStore {
    let (store, _) = open_sim(storage, FlushPolicy::Async { interval_ms: 50 }).expect("open");
    for index in 0..60u8 {
        store
            .put(&message("T", 0, vec![index; 200], None))
            .expect("put");
    }
    store
}

/// Expired segments go at the delete hour (never the active one) and queues follow.
#[test]
fn retention_deletes_expired_segments_and_corrects_queue_minimums() {
    let storage = SimStorage::new();
    let (store, _) = open_sim(&storage, FlushPolicy::Async { interval_ms: 50 }).expect("open");
    for index in 0..60u8 {
        store
            .put(&message("T", 0, vec![index; 200], None))
            .expect("put");
    }
    let segments_before = store.commit_log_positions();
    let later = 1_700_000_000_000 + 73 * 3_600_000;
    let not_the_hour = store.delete_expired(later, 3, 0.1).expect("retention");
    assert!(
        not_the_hour.segments_deleted.is_empty(),
        "only at the delete hour"
    );
    let too_early = store
        .delete_expired(1_700_000_000_000 + 3_600_000, 4, 0.1)
        .expect("retention");
    assert!(
        too_early.segments_deleted.is_empty(),
        "nothing is 72 h old yet"
    );
    let report = store.delete_expired(later, 4, 0.1).expect("retention");
    assert!(!report.segments_deleted.is_empty());
    let (min, written, _) = store.commit_log_positions();
    assert!(min > segments_before.0 && min <= written);
    assert!(min + 4096 > written, "only the active segment is left");
    let queue_min = store.min_offset("T", 0);
    assert!(queue_min > 0);
    let first = store.get("T", 0, 0, 32, usize::MAX, |_| true).expect("get");
    assert_eq!(
        (first.status, first.next_begin_offset),
        (GetStatus::OffsetTooSmall, queue_min)
    );
    assert_eq!(
        read_all(&store, "T", 0)
            .first()
            .map(|record| record.queue_offset),
        Some(queue_min)
    );
    assert_queues_agree_with_log(&store);
}

/// Above `disk_usage_ratio_max` but below the forced level, nothing unexpired goes, at any hour
/// (the old rule deleted the oldest segment whatever its age).
#[test]
fn space_pressure_alone_never_deletes_unexpired_segments() {
    let storage = SimStorage::new();
    let store = filled_store(&storage);
    let before = store.commit_log_positions().0;
    for hour in [OTHER_HOUR, 4] {
        let report = store
            .delete_expired(START + 3_600_000, hour, 0.84)
            .expect("retention");
        assert_eq!(report.segments_deleted, Vec::<u64>::new(), "hour {hour}");
    }
    assert_eq!(store.commit_log_positions().0, before);
    assert_eq!(store.min_offset("T", 0), 0);
}

/// Space pressure lets expired segments go at once instead of at the delete hour.
#[test]
fn space_pressure_deletes_expired_segments_outside_the_delete_hour() {
    let storage = SimStorage::new();
    let store = filled_store(&storage);
    let calm = store
        .delete_expired(EXPIRED, OTHER_HOUR, 0.5)
        .expect("retention");
    assert!(
        calm.segments_deleted.is_empty(),
        "no pressure, not the hour"
    );
    let report = store
        .delete_expired(EXPIRED, OTHER_HOUR, 0.8)
        .expect("retention");
    assert!(report.segments_deleted.len() >= 2, "{report:?}");
    assert!(report.segments_deleted_unexpired.is_empty());
    assert!(store.min_offset("T", 0) > 0);
    assert_queues_agree_with_log(&store);
}

/// Above `disk_usage_ratio_clean_forcibly` unexpired segments go too, oldest first and never
/// the active one; with `clean_file_forcibly` off they stay.
#[test]
fn the_forced_level_deletes_unexpired_segments_oldest_first() {
    let storage = SimStorage::new();
    let store = filled_store(&storage);
    let report = store
        .delete_expired(START + 3_600_000, OTHER_HOUR, 0.86)
        .expect("retention");
    assert_eq!(report.segments_deleted.first(), Some(&0));
    assert_eq!(report.segments_deleted, report.segments_deleted_unexpired);
    let (min, written, _) = store.commit_log_positions();
    assert!(min + 4096 > written, "all but the active segment went");
    let got = store.get("T", 0, 0, 32, usize::MAX, |_| true).expect("get");
    assert_eq!(got.status, GetStatus::OffsetTooSmall);
    assert_queues_agree_with_log(&store);

    let storage = SimStorage::new();
    let (store, _) = MessageStore::open_with(
        tidemark_store::StoreConfig {
            clean_file_forcibly: false,
            ..small_config(ROOT, FlushPolicy::Async { interval_ms: 50 })
        },
        std::sync::Arc::new(storage.clone()) as std::sync::Arc<dyn tidemark_store::io::Storage>,
        ticking_clock(START),
    )
    .expect("open");
    for index in 0..60u8 {
        store
            .put(&message("T", 0, vec![index; 200], None))
            .expect("put");
    }
    let report = store
        .delete_expired(START + 3_600_000, OTHER_HOUR, 0.95)
        .expect("retention");
    assert!(report.segments_deleted.is_empty(), "forced cleaning is off");
}

/// Above the warning level appends are refused with a typed error (the broker answers
/// SERVICE_NOT_AVAILABLE); they resume only once usage is back at the forced-clean level.
#[test]
fn the_warning_level_refuses_appends_until_usage_falls() {
    let storage = SimStorage::new();
    let store = filled_store(&storage);
    let before = store.max_offset("T", 0);
    store
        .delete_expired(START, OTHER_HOUR, 0.91)
        .expect("retention");
    assert!(store.disk_usage().writes_refused);
    assert_eq!(store.disk_usage().usage_ratio, 0.91);
    match store.put(&message("T", 0, vec![1; 10], None)) {
        Err(StoreError::DiskNearlyFull { usage, limit }) => {
            assert_eq!((usage, limit), (0.91, 0.90));
        }
        other => panic!("expected DiskNearlyFull, got {other:?}"),
    }
    store
        .delete_expired(START, OTHER_HOUR, 0.87)
        .expect("retention");
    assert!(
        store.put(&message("T", 0, vec![1; 10], None)).is_err(),
        "between the two levels the refusal stays"
    );
    store
        .delete_expired(START, OTHER_HOUR, 0.80)
        .expect("retention");
    assert!(!store.disk_usage().writes_refused);
    store
        .put(&message("T", 0, vec![1; 10], None))
        .expect("accepted again");
    assert_eq!(
        store.max_offset("T", 0),
        before + 1,
        "refused appends left nothing"
    );
}

/// A tuning source changed while the store runs governs the next pass: the reserved time an
/// operator lowers during an incident (RocketMQ's live `fileReservedTime`) expires segments
/// the store opened with as still reserved.
#[test]
fn a_lowered_reserved_time_applies_at_the_next_pass() {
    #[derive(Debug)]
    struct Operator(std::sync::Mutex<tidemark_store::StoreTuning>);
    impl tidemark_store::TuningSource for Operator {
        fn store_tuning(&self) -> tidemark_store::StoreTuning {
            *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }
    let storage = SimStorage::new();
    let config = small_config(ROOT, FlushPolicy::Async { interval_ms: 50 });
    let operator = Arc::new(Operator(std::sync::Mutex::new(config.tuning())));
    let (store, _) = MessageStore::open_with_tuning(
        config,
        Arc::new(storage.clone()),
        ticking_clock(START),
        operator.clone(),
    )
    .expect("open");
    for index in 0..60u8 {
        store
            .put(&message("T", 0, vec![index; 200], None))
            .expect("put");
    }
    let two_hours_later = START + 2 * 3_600_000;
    let reserved = store
        .delete_expired(two_hours_later, 4, 0.1)
        .expect("retention");
    assert!(reserved.segments_deleted.is_empty(), "72 h reserved");
    operator.0.lock().expect("lock").file_reserved_hours = 1;
    let report = store
        .delete_expired(two_hours_later, 4, 0.1)
        .expect("retention");
    assert!(report.segments_deleted.len() >= 2, "{report:?}");
    assert!(store.min_offset("T", 0) > 0);
    assert_queues_agree_with_log(&store);
}
