use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::sim::SimStorage;

/// State: every record applied, in order. Records starting with `!` are refused.
struct Log;

fn encode_items(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for item in items {
        out.extend_from_slice(&(item.len() as u32).to_be_bytes());
        out.extend_from_slice(item);
    }
    out
}

impl JournalCodec for Log {
    type State = Vec<Vec<u8>>;

    fn fresh(&self) -> Result<Self::State, String> {
        Ok(Vec::new())
    }

    fn restore(&self, mut snapshot: &[u8]) -> Result<Self::State, String> {
        let mut items = Vec::new();
        while !snapshot.is_empty() {
            let length = snapshot
                .get(..4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
                .ok_or("short")?;
            let item = snapshot.get(4..4 + length).ok_or("short item")?;
            items.push(item.to_vec());
            snapshot = &snapshot[4 + length..];
        }
        Ok(items)
    }

    fn apply(&self, state: &mut Self::State, record: &[u8]) -> Result<(), String> {
        if record.starts_with(b"!") {
            return Err("refused".into());
        }
        state.push(record.to_vec());
        Ok(())
    }

    fn snapshot(&self, state: &Self::State) -> Vec<u8> {
        encode_items(state)
    }
}

fn dir() -> PathBuf {
    PathBuf::from("/j")
}

fn open(storage: &SimStorage) -> (Journal, Vec<Vec<u8>>, RecoveryReport) {
    Journal::open(
        Arc::new(storage.clone()),
        &dir(),
        "t",
        JournalOptions::default(),
        &Log,
    )
    .expect("journal opens")
}

fn record(i: usize) -> Vec<u8> {
    format!("record-{i:04}").into_bytes()
}

fn segment_files(storage: &SimStorage) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = storage
        .files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "journal"))
        .collect();
    files.sort();
    files
}

#[test]
fn appended_records_survive_a_reopen_in_order() {
    let storage = SimStorage::new();
    let (journal, state, report) = open(&storage);
    assert!(state.is_empty());
    assert_eq!(report.snapshot, None);
    let mut last = None;
    for i in 0..50 {
        last = Some(journal.append(&record(i)).expect("append"));
    }
    journal
        .wait_durable(last.expect("appended"))
        .expect("durable");
    drop(journal);
    let (_journal, state, report) = open(&storage);
    assert_eq!(state, (0..50).map(record).collect::<Vec<_>>());
    assert_eq!(report.records_replayed, 50);
    assert_eq!(report.damage, None);
    assert_eq!(report.snapshot, Some(Source::File));
}

#[test]
fn compaction_cuts_at_the_owners_moment_and_removes_unneeded_segments() {
    let storage = SimStorage::new();
    let (journal, _, _) = open(&storage);
    let state = std::sync::Mutex::new(Vec::new());
    let append = |i: usize| {
        let mut items = state.lock().expect("lock");
        items.push(record(i));
        journal.append(&record(i)).expect("append")
    };
    for round in 0..4 {
        let mut last = None;
        for i in 0..10 {
            last = Some(append(round * 10 + i));
        }
        // A segment the writer has not left yet is kept until a later compaction.
        journal
            .wait_durable(last.expect("appended"))
            .expect("durable");
        journal
            .compact(|cut| {
                let items = state.lock().expect("lock");
                cut.cut();
                encode_items(&items)
            })
            .expect("compact");
    }
    let last = append(99);
    journal.wait_durable(last).expect("durable");
    assert!(
        segment_files(&storage).len() <= 3,
        "old segments are removed: {:?}",
        segment_files(&storage)
    );
    let expected = state.lock().expect("lock").clone();
    drop(journal);
    let (_journal, recovered, report) = open(&storage);
    assert_eq!(recovered, expected);
    assert_eq!(
        report.records_replayed, 1,
        "only what followed the last snapshot"
    );
}

#[test]
fn a_damaged_current_snapshot_falls_back_to_the_backup_and_replays_from_its_base() {
    let storage = SimStorage::new();
    let (journal, _, _) = open(&storage);
    let items = std::sync::Mutex::new(Vec::new());
    for i in 0..5 {
        items.lock().expect("lock").push(record(i));
        journal.append(&record(i)).expect("append");
    }
    journal
        .compact(|cut| {
            let items = items.lock().expect("lock");
            cut.cut();
            encode_items(&items)
        })
        .expect("compact");
    let last = journal.append(&record(5)).expect("append");
    journal.wait_durable(last).expect("durable");
    drop(journal);
    storage.corrupt(&dir().join("t.snapshot"), 25, b"\xff\xff");
    let (_journal, state, report) = open(&storage);
    assert_eq!(report.snapshot, Some(Source::Backup));
    assert_eq!(state, (0..6).map(record).collect::<Vec<_>>());
}

/// A journal of `count` records in one segment after the open snapshot; returns the segment's
/// path and the offsets where each record's frame ends.
fn journal_with(storage: &SimStorage, count: usize) -> (PathBuf, Vec<u64>) {
    let (journal, _, _) = open(storage);
    let mut last = None;
    for i in 0..count {
        last = Some(journal.append(&record(i)).expect("append"));
    }
    journal
        .wait_durable(last.expect("appended"))
        .expect("durable");
    drop(journal);
    let path = segment_files(storage).pop().expect("a segment");
    let mut ends = Vec::new();
    let mut at = frame::SEGMENT_HEADER_LEN;
    for i in 0..count {
        at += 8 + record(i).len() as u64;
        ends.push(at);
    }
    (path, ends)
}

fn records_before(ends: &[u64], position: u64) -> usize {
    ends.iter().take_while(|&&end| end <= position).count()
}

fn truncate(storage: &SimStorage, path: &Path, length: u64) {
    let file = storage.open(path, false).expect("open");
    file.set_len(length).expect("truncate");
    file.sync().expect("sync");
}

/// The fuzz the issue asks for: a cut or a flipped bit at every byte of a journal; recovery
/// keeps every record before the damage, nothing after, names the file and offset, and a
/// journal reopened after that keeps working.
#[test]
fn truncation_or_a_bit_flip_anywhere_keeps_exactly_the_records_before_it() {
    let pristine = SimStorage::new();
    let (path, ends) = journal_with(&pristine, 12);
    let length = *ends.last().expect("records");
    let zeros = frame::FRAME_HEADER_LEN as u64;
    assert!(
        pristine.read_file(&path).expect("segment").len() as u64 >= length + zeros,
        "the writer leaves zeros after its records"
    );
    // Past the records: the writer's zero-filled space, where a cut leaving at least a frame
    // header of zeros is a clean end and a flipped bit is damage.
    for position in 0..length + 2 * zeros {
        for flip in [false, true] {
            let storage = pristine.crash(0);
            if flip {
                let byte = storage.read_file(&path).expect("segment")[position as usize];
                storage.corrupt(&path, position, &[byte ^ (1 << (position % 8))]);
            } else {
                truncate(&storage, &path, position);
            }
            let (journal, state, report) = open(&storage);
            let kept = if position < frame::SEGMENT_HEADER_LEN {
                0
            } else {
                records_before(&ends, position)
            };
            assert_eq!(
                state,
                (0..kept).map(record).collect::<Vec<_>>(),
                "position {position} flip {flip}"
            );
            let clean_cut = !flip
                && (position == frame::SEGMENT_HEADER_LEN
                    || ends.contains(&position)
                    || position >= length + zeros);
            match &report.damage {
                None => assert!(clean_cut, "damage at {position} (flip {flip}) not reported"),
                Some(damage) => {
                    assert!(!clean_cut, "a cut at a record boundary is a clean end");
                    assert_eq!(damage.file, path);
                    let expected_offset = if position < frame::SEGMENT_HEADER_LEN {
                        0
                    } else {
                        ends.iter()
                            .copied()
                            .rfind(|&e| e <= position)
                            .unwrap_or(frame::SEGMENT_HEADER_LEN)
                    };
                    assert_eq!(
                        damage.offset, expected_offset,
                        "position {position} flip {flip}"
                    );
                }
            }
            // Writes after a damaged recovery are not lost behind the damage.
            let ticket = journal.append(b"after").expect("append");
            journal.wait_durable(ticket).expect("durable");
            drop(journal);
            let (_journal, again, report) = open(&storage);
            assert_eq!(again.len(), kept + 1, "position {position} flip {flip}");
            assert_eq!(again.last().map(Vec::as_slice), Some(&b"after"[..]));
            assert_eq!(report.damage, None);
        }
    }
}

#[test]
fn a_record_the_owner_refuses_stops_recovery_like_damage() {
    let storage = SimStorage::new();
    let (journal, _, _) = open(&storage);
    journal.append(b"one").expect("append");
    journal.append(b"!bad").expect("append");
    let last = journal.append(b"three").expect("append");
    journal.wait_durable(last).expect("durable");
    drop(journal);
    let (_journal, state, report) = open(&storage);
    assert_eq!(state, vec![b"one".to_vec()]);
    assert!(matches!(
        report.damage.map(|d| d.damage),
        Some(Damage::Rejected(_))
    ));
}

/// Crash the file system at every operation of a workload (with compactions in it); the
/// recovered state is always a prefix of what was appended and holds at least every record
/// whose ticket was reported durable before the crash.
#[test]
fn a_crash_at_any_operation_keeps_every_durable_record_and_a_prefix() {
    for crash_at in 1..160u64 {
        for seed in [1, 7] {
            let storage = SimStorage::new();
            let (journal, _, _) = open(&storage);
            storage.crash_after(crash_at);
            let items = std::sync::Mutex::new(Vec::new());
            let mut acknowledged = 0;
            for i in 0..40 {
                let ticket = {
                    let mut guard = items.lock().expect("lock");
                    guard.push(record(i));
                    journal.append(&record(i)).expect("append")
                };
                if i % 3 == 0 {
                    if journal.wait_durable(ticket).is_ok() {
                        acknowledged = i + 1;
                    } else {
                        break;
                    }
                }
                if i % 13 == 12 {
                    let _ = journal.compact(|cut| {
                        let guard = items.lock().expect("lock");
                        cut.cut();
                        encode_items(&guard)
                    });
                }
            }
            let image = storage.crash(seed);
            drop(journal);
            let (_journal, state, _) = open(&image);
            assert!(
                state.len() >= acknowledged,
                "crash at {crash_at} seed {seed}: {} recovered, {acknowledged} acknowledged",
                state.len()
            );
            assert_eq!(
                state,
                (0..state.len()).map(record).collect::<Vec<_>>(),
                "crash at {crash_at} seed {seed}: not a prefix"
            );
        }
    }
}

#[tokio::test]
async fn durability_waits_resolve_for_async_callers_and_fail_after_close() {
    let storage = SimStorage::new();
    let (journal, _, _) = open(&storage);
    let ticket = journal.append(b"x").expect("append");
    tokio::time::timeout(std::time::Duration::from_secs(5), journal.durable(ticket))
        .await
        .expect("in time")
        .expect("durable");
    journal.close();
    assert!(matches!(journal.append(b"y"), Err(JournalError::Closed)));
}

/// Under a stream of appends from many tasks, every durability wait resolves, each only once its
/// change is durable, including changes queued while a sync was under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_of_every_round_is_woken_once_its_change_is_durable() {
    let storage = SimStorage::new();
    let (journal, _, _) = open(&storage);
    let journal = Arc::new(journal);
    let mut tasks = Vec::new();
    for task in 0..16 {
        let journal = journal.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..200 {
                let ticket = journal
                    .append(&record(task * 1000 + round))
                    .expect("append");
                tokio::time::timeout(std::time::Duration::from_secs(10), journal.durable(ticket))
                    .await
                    .expect("a waiter was left asleep")
                    .expect("durable");
                assert!(
                    journal.shared.progress.borrow().durable >= ticket.0,
                    "woken before its change was durable"
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("no panic");
    }
    assert_eq!(journal.last_ticket().0, 16 * 200);
}

/// A caller confirming a value that is already stored (a commit that changed nothing) waits
/// for the last ticket while the journal is idle: it must be answered at once.
#[tokio::test]
async fn the_last_ticket_resolves_after_its_round_is_over() {
    let storage = SimStorage::new();
    let (journal, _, _) = open(&storage);
    for index in 0..3 {
        let ticket = journal.append(&record(index)).expect("append");
        tokio::time::timeout(std::time::Duration::from_secs(5), journal.durable(ticket))
            .await
            .expect("in time")
            .expect("durable");
        let last = journal.last_ticket();
        assert_eq!(last, ticket);
        tokio::time::timeout(std::time::Duration::from_secs(5), journal.durable(last))
            .await
            .expect("the last ticket of a finished round was left waiting")
            .expect("durable");
    }
}
