use std::fs;

use super::*;

/// A broker that keeps commits in a map, as the broker's ConsumerOffsetManager does.
#[derive(Default)]
struct FakeBroker {
    offsets: Mutex<BTreeMap<MessageQueue, i64>>,
    acked: Mutex<BTreeMap<MessageQueue, AckedRanges>>,
    commits: Mutex<Vec<(MessageQueue, i64)>>,
    deliveries: Mutex<Vec<CommitDelivery>>,
}

impl OffsetBroker for FakeBroker {
    fn query<'a>(
        &'a self,
        _group: &'a str,
        queue: &'a MessageQueue,
    ) -> BoxFuture<'a, Result<Option<(i64, AckedRanges)>>> {
        Box::pin(async move {
            let offset = self.offsets.lock().expect("lock").get(queue).copied();
            let acked = self.acked.lock().expect("lock").get(queue).cloned();
            Ok(offset.map(|offset| (offset, acked.unwrap_or_default())))
        })
    }

    fn commit<'a>(
        &'a self,
        _group: &'a str,
        queue: &'a MessageQueue,
        offset: i64,
        acked: &'a AckedRanges,
        delivery: CommitDelivery,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.deliveries.lock().expect("lock").push(delivery);
            self.acked
                .lock()
                .expect("lock")
                .insert(queue.clone(), acked.clone());
            self.offsets
                .lock()
                .expect("lock")
                .insert(queue.clone(), offset);
            self.commits
                .lock()
                .expect("lock")
                .push((queue.clone(), offset));
            Ok(())
        })
    }
}

fn mq(id: i32) -> MessageQueue {
    MessageQueue::new("T", "broker-a", id)
}

/// The behaviour both stores share, run against each.
async fn shared_contract(store: &OffsetStore, reopen: impl Fn() -> OffsetStore) {
    let (q0, q1) = (mq(0), mq(1));
    assert_eq!(
        store.read(&q0, ReadOffsetType::Memory).await.expect("read"),
        None
    );
    assert_eq!(
        store
            .read(&q0, ReadOffsetType::MemoryThenStore)
            .await
            .expect("read"),
        None
    );

    store.update(&q0, 10, true);
    store.update(&q0, 7, true);
    assert_eq!(
        store.read(&q0, ReadOffsetType::Memory).await.expect("read"),
        Some(10)
    );
    store.update(&q0, 7, false);
    assert_eq!(
        store.read(&q0, ReadOffsetType::Memory).await.expect("read"),
        Some(7)
    );
    store.update(&q0, 12, true);
    store.update(&q1, 3, true);

    let assigned: BTreeSet<_> = [q0.clone(), q1.clone()].into();
    store
        .persist_all(&assigned, CommitDelivery::Oneway)
        .await
        .expect("persist");
    let again = reopen();
    again.load().expect("load");
    assert_eq!(
        again.read(&q0, ReadOffsetType::Store).await.expect("read"),
        Some(12)
    );
    assert_eq!(
        again
            .read(&q1, ReadOffsetType::MemoryThenStore)
            .await
            .expect("read"),
        Some(3)
    );

    // Forgetting a queue in memory keeps the persisted copy.
    store.remove(&q1);
    assert_eq!(
        store.read(&q1, ReadOffsetType::Memory).await.expect("read"),
        None
    );
    assert_eq!(
        store.read(&q1, ReadOffsetType::Store).await.expect("read"),
        Some(3)
    );

    // persist of one queue writes just that queue's current value.
    store.update(&q0, 20, true);
    store.persist(&q0).await.expect("persist");
    assert_eq!(
        reopen()
            .read(&q0, ReadOffsetType::Store)
            .await
            .expect("read"),
        Some(20)
    );
}

#[tokio::test]
async fn remote_store_meets_the_shared_contract() {
    let broker = Arc::new(FakeBroker::default());
    let store = OffsetStore::remote("G", broker.clone());
    let reopen = || OffsetStore::remote("G", broker.clone());
    shared_contract(&store, reopen).await;
}

#[tokio::test]
async fn local_store_meets_the_shared_contract() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = OffsetStore::default_local_path(dir.path(), "127.0.0.1@DEFAULT", "G");
    let store = OffsetStore::local_file("G", &path);
    let reopen = || OffsetStore::local_file("G", &path);
    shared_contract(&store, reopen).await;
}

#[tokio::test]
async fn remote_persist_all_commits_assigned_queues_and_drops_the_rest() {
    let broker = Arc::new(FakeBroker::default());
    let store = OffsetStore::remote("G", broker.clone());
    store.update(&mq(0), 5, true);
    store.update(&mq(1), 6, true);
    store
        .persist_all(&[mq(0)].into(), CommitDelivery::Oneway)
        .await
        .expect("persist");
    assert_eq!(*broker.commits.lock().expect("lock"), vec![(mq(0), 5)]);
    assert_eq!(
        store.snapshot().get(&mq(1)),
        None,
        "unassigned entry dropped"
    );
    // Unchanged values are sent again.
    store
        .persist_all(&[mq(0)].into(), CommitDelivery::Oneway)
        .await
        .expect("persist");
    assert_eq!(broker.commits.lock().expect("lock").len(), 2);
}

#[tokio::test]
async fn progress_reports_send_only_what_moved_since_it_was_last_sent() {
    let broker = Arc::new(FakeBroker::default());
    let store = OffsetStore::remote("G", broker.clone());
    let assigned: BTreeSet<MessageQueue> = [mq(0), mq(1)].into();
    store.update(&mq(0), 5, true);
    store.update(&mq(1), 6, true);
    store.update(&mq(2), 7, true);
    store.report_changes(&assigned).await.expect("report");
    assert_eq!(
        *broker.commits.lock().expect("lock"),
        vec![(mq(0), 5), (mq(1), 6)],
        "assigned queues only"
    );
    store.report_changes(&assigned).await.expect("report");
    assert_eq!(
        broker.commits.lock().expect("lock").len(),
        2,
        "nothing moved"
    );
    store.update(&mq(1), 9, true);
    store.report_changes(&assigned).await.expect("report");
    assert_eq!(
        broker.commits.lock().expect("lock").last(),
        Some(&(mq(1), 9))
    );
    assert_eq!(broker.commits.lock().expect("lock").len(), 3);
    // A periodic persist counts as a report too.
    store.update(&mq(0), 11, true);
    store
        .persist_all(&assigned, CommitDelivery::Oneway)
        .await
        .expect("persist");
    let before = broker.commits.lock().expect("lock").len();
    store.report_changes(&assigned).await.expect("report");
    assert_eq!(broker.commits.lock().expect("lock").len(), before);
    assert!(broker
        .deliveries
        .lock()
        .expect("lock")
        .iter()
        .all(|delivery| *delivery == CommitDelivery::Oneway));
}

#[tokio::test]
async fn acknowledged_ranges_travel_with_the_offset_both_ways() {
    let broker = Arc::new(FakeBroker::default());
    let store = OffsetStore::remote("G", broker.clone());
    let assigned: BTreeSet<MessageQueue> = [mq(0)].into();
    store.update_with_acked(&mq(0), 5, AckedRanges::from_ranges([(7, 9)]));
    store.report_changes(&assigned).await.expect("report");
    assert_eq!(
        broker.acked.lock().expect("lock").get(&mq(0)),
        Some(&AckedRanges::from_ranges([(7, 9)]))
    );
    // Only the ranges moved: that is a change to report too.
    store.update_with_acked(&mq(0), 5, AckedRanges::from_ranges([(6, 9)]));
    store.report_changes(&assigned).await.expect("report");
    assert_eq!(broker.commits.lock().expect("lock").len(), 2);
    // The offset passing them drops them.
    store.update(&mq(0), 8, true);
    assert_eq!(
        store.acked(&mq(0)),
        AckedRanges::from_ranges([(8, 9)]).above(8)
    );
    // A new owner reads both.
    let next = OffsetStore::remote("G", broker.clone());
    assert_eq!(
        next.read(&mq(0), ReadOffsetType::Store)
            .await
            .expect("read"),
        Some(5)
    );
    assert_eq!(next.acked(&mq(0)), AckedRanges::from_ranges([(6, 9)]));
}

/// Two batches settle concurrently and record their ranges in the other order than they
/// computed them: the earlier, smaller ranges arrive last and must not shrink what is done
/// (they did, and a stuck queue's report then stayed short of what its consumer had finished).
#[tokio::test]
async fn a_late_settlement_does_not_shrink_the_acknowledged_ranges() {
    let broker = Arc::new(FakeBroker::default());
    let store = OffsetStore::remote("G", broker.clone());
    let assigned: BTreeSet<MessageQueue> = [mq(0)].into();
    store.update_with_acked(&mq(0), 0, AckedRanges::from_ranges([(1, 1501)]));
    store.update_with_acked(&mq(0), 0, AckedRanges::from_ranges([(1, 1348)]));
    assert_eq!(store.acked(&mq(0)), AckedRanges::from_ranges([(1, 1501)]));
    store.report_changes(&assigned).await.expect("report");
    assert_eq!(
        broker.acked.lock().expect("lock").get(&mq(0)),
        Some(&AckedRanges::from_ranges([(1, 1501)]))
    );
    // Moving the offset on still drops what it passed; moving it back forgets them all.
    store.update_with_acked(&mq(0), 1400, AckedRanges::new());
    assert_eq!(
        store.acked(&mq(0)),
        AckedRanges::from_ranges([(1401, 1501)])
    );
    store.update(&mq(0), 0, false);
    assert!(store.acked(&mq(0)).is_empty());
}

#[tokio::test]
async fn the_last_word_on_a_queue_waits_for_the_broker() {
    let broker = Arc::new(FakeBroker::default());
    let store = OffsetStore::remote("G", broker.clone());
    store.update(&mq(0), 5, true);
    store
        .persist_all(&[mq(0)].into(), CommitDelivery::Oneway)
        .await
        .expect("periodic persist");
    store.update(&mq(0), 9, true);
    store.persist(&mq(0)).await.expect("before release");
    store
        .persist_all(&[mq(0)].into(), CommitDelivery::Acknowledged)
        .await
        .expect("at shutdown");
    assert_eq!(
        *broker.deliveries.lock().expect("lock"),
        vec![
            CommitDelivery::Oneway,
            CommitDelivery::Acknowledged,
            CommitDelivery::Acknowledged
        ]
    );
    assert_eq!(
        broker.commits.lock().expect("lock").last(),
        Some(&(mq(0), 9))
    );
}

#[tokio::test]
async fn local_file_is_rocketmq_format_and_falls_back_to_bak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("g").join("offsets.json");
    let store = OffsetStore::local_file("G", &path);
    store.update(&mq(0), 1, true);
    store
        .persist_all(&[mq(0)].into(), CommitDelivery::Oneway)
        .await
        .expect("persist");
    store.update(&mq(0), 2, true);
    store
        .persist_all(&[mq(0)].into(), CommitDelivery::Oneway)
        .await
        .expect("persist");

    let text = fs::read_to_string(&path).expect("file");
    assert!(text.contains("\"offsetTable\""), "{text}");
    let parsed = MessageQueueOffsets::from_json_bytes(text.as_bytes()).expect("parse");
    assert_eq!(parsed.offset_table.get(&mq(0)), Some(&2));
    let backup = dir.path().join("g").join("offsets.json.bak");
    let parsed =
        MessageQueueOffsets::from_json_bytes(&fs::read(&backup).expect("bak")).expect("parse bak");
    assert_eq!(
        parsed.offset_table.get(&mq(0)),
        Some(&1),
        "bak holds the previous content"
    );

    // A torn main file: the .bak is used.
    fs::write(&path, b"{\"offsetTable\":{{\"brokerN").expect("tear");
    let reopened = OffsetStore::local_file("G", &path);
    reopened.load().expect("load from bak");
    assert_eq!(reopened.snapshot().get(&mq(0)), Some(1));

    // Both corrupt: a clear error naming the file.
    fs::write(&backup, b"garbage").expect("tear bak");
    let error = OffsetStore::local_file("G", &path)
        .load()
        .expect_err("both corrupt");
    let message = error.to_string();
    assert!(
        message.contains("offsets.json") && message.contains("backup"),
        "{message}"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn local_file_rotates_the_previous_file_to_bak_by_rename() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("offsets.json");
    let store = OffsetStore::local_file("G", &path);
    store.update(&mq(0), 1, true);
    store.persist(&mq(0)).await.expect("persist");
    let first = fs::metadata(&path).expect("file").ino();
    store.update(&mq(0), 2, true);
    store.persist(&mq(0)).await.expect("persist");
    let backup = dir.path().join("offsets.json.bak");
    assert_eq!(
        fs::metadata(&backup).expect("bak").ino(),
        first,
        "the previous file itself became the .bak, not a copy of it"
    );
    assert!(
        !dir.path().join("offsets.json.tmp").exists(),
        "the temp file was renamed into place"
    );
}

#[tokio::test]
async fn a_crash_between_the_renames_loads_the_bak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("offsets.json");
    let store = OffsetStore::local_file("G", &path);
    store.update(&mq(0), 5, true);
    store.persist(&mq(0)).await.expect("persist");
    store.update(&mq(0), 6, true);
    store.persist(&mq(0)).await.expect("persist");
    // The state after `offsets.json` → `.bak` and before `.tmp` → `offsets.json`.
    fs::rename(&path, dir.path().join("offsets.json.bak")).expect("rotate");
    fs::write(dir.path().join("offsets.json.tmp"), b"{\"offsetTa").expect("torn tmp");
    let reopened = OffsetStore::local_file("G", &path);
    reopened.load().expect("load from bak");
    assert_eq!(reopened.snapshot().get(&mq(0)), Some(6));
    // The next persist completes the replace.
    reopened.update(&mq(0), 7, true);
    reopened.persist(&mq(0)).await.expect("persist");
    let fresh = OffsetStore::local_file("G", &path);
    fresh.load().expect("load");
    assert_eq!(fresh.snapshot().get(&mq(0)), Some(7));
}

/// A torn file loaded through its `.bak` is replaced without becoming the `.bak`: the
/// good backup stays until a good file is in place.
#[tokio::test]
async fn a_torn_file_never_becomes_the_backup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("offsets.json");
    let store = OffsetStore::local_file("G", &path);
    for offset in [1, 2] {
        store.update(&mq(0), offset, true);
        store.persist(&mq(0)).await.expect("persist");
    }
    fs::write(&path, b"{\"offsetTa").expect("tear");
    let reopened = OffsetStore::local_file("G", &path);
    reopened.load().expect("load from bak");
    assert_eq!(reopened.snapshot().get(&mq(0)), Some(1));
    reopened.update(&mq(0), 3, true);
    reopened.persist(&mq(0)).await.expect("persist");
    let backup = fs::read(dir.path().join("offsets.json.bak")).expect("bak");
    let kept = MessageQueueOffsets::from_json_bytes(&backup).expect("the bak is still good");
    assert_eq!(kept.offset_table.get(&mq(0)), Some(&1));
    let fresh = OffsetStore::local_file("G", &path);
    fresh.load().expect("load");
    assert_eq!(fresh.snapshot().get(&mq(0)), Some(3));
}

#[test]
fn local_file_reads_java_written_offsets() {
    // Shape written by rocketmq-client's LocalFileOffsetStore (fastjson pretty, object keys).
    let java = "{\n\t\"offsetTable\":{{\n\t\t\t\"brokerName\":\"broker-a\",\n\t\t\t\"queueId\":3,\n\t\t\t\"topic\":\"T\"\n\t\t}:42\n\t}\n}";
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("offsets.json");
    fs::write(&path, java).expect("write");
    let store = OffsetStore::local_file("G", &path);
    store.load().expect("load");
    assert_eq!(store.snapshot().get(&mq(3)), Some(42));
}
