use std::sync::Arc;

use tidemark_storage::io::FsStorage;
use tidemark_storage::journal::JournalOptions;

use super::*;

fn open(dir: &Path) -> PopTable {
    let (table, report) =
        PopTable::open(Arc::new(FsStorage), dir, JournalOptions::default()).expect("opens");
    assert!(report.damage.is_none());
    table
}

fn pop(table: &PopTable, key: &QueueKey, next: i64, now: i64, offsets: &[i64]) {
    pop_as(table, key, (next, now), offsets, (false, false));
}

/// A pop at `now` up to `next`, `(orderly, resent)`.
fn pop_as(
    table: &PopTable,
    key: &QueueKey,
    (next, now): (i64, i64),
    offsets: &[i64],
    (orderly, resent): (bool, bool),
) {
    let claim = table.claim(key.clone()).expect("free");
    assert!(
        table.claim(key.clone()).is_none(),
        "one pop per queue at a time"
    );
    let journaled = claim.record(&Popped {
        next,
        pop_time: now,
        visible_at: now + 1_000,
        orderly,
        resent,
        offsets: offsets.to_vec(),
    });
    table.wait_durable(journaled).expect("durable");
}

#[test]
fn acknowledgements_changes_and_revivals_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = QueueKey::new("G", "T", 0);
    {
        let table = open(dir.path());
        pop(&table, &key, 4, 100, &[0, 1, 2, 3]);
        assert!(table.claim(key.clone()).is_some(), "released after the pop");
        let (outcome, _) = table.finish(&key, 1, 100);
        assert!(matches!(outcome, Finish::Finished(_)));
        assert_eq!(table.finish(&key, 1, 100).0, Finish::NotInFlight);
        let (changed, _) = table.change_invisibility(&key, 2, 100, 150, 60_000);
        assert_eq!(changed.map(|entry| entry.visible_at), Some(60_000));
        assert_eq!(table.next_deadline(), Some(1_100));
        let (revive, unblocked) = table.take_expired(1_100, 10);
        assert!(unblocked.is_empty());
        assert_eq!(
            revive
                .iter()
                .map(|(_, offset, _)| *offset)
                .collect::<Vec<_>>(),
            vec![0, 3]
        );
        assert_eq!(
            table.change_invisibility(&key, 0, 100, 200, 9_000).0,
            None,
            "being revived: too late to extend"
        );
        table
            .wait_durable(table.revived(&key, 0, "%RETRY%G_T", 1))
            .expect("durable");
        table.revive_failed(&key, 3, 2_000);
        assert_eq!(table.next_deadline(), Some(2_000));
        table.close();
    }
    let table = open(dir.path());
    let views = table.views("G", None);
    assert_eq!(views.len(), 1);
    assert_eq!(
        (
            views[0].floor,
            views[0].next,
            views[0].in_flight,
            views[0].acked_holes
        ),
        (2, 4, 2, 0),
        "2 (extended) and 3 (copy failed) are in flight"
    );
    assert_eq!(table.copies_end("%RETRY%G_T"), Some(1));
    assert!(table.is_in_flight(&key, 3));
    assert_eq!(
        table.next_deadline(),
        Some(1_100),
        "after a restart the failed copy is due again at once"
    );
    assert_eq!(
        table.groups_in_flight(),
        vec![("G".to_owned(), "T".to_owned())]
    );
    table.wait_durable(table.reset(&key, 10)).expect("durable");
    assert_eq!(table.cursor(&key), Some((10, 10)));
    assert_eq!(table.next_deadline(), None);
}

#[test]
fn a_receipt_an_invisibility_change_replaced_still_finishes_the_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = QueueKey::new("G", "T", 0);
    {
        let table = open(dir.path());
        pop(&table, &key, 2, 100, &[0, 1]);
        let (changed, _) = table.change_invisibility(&key, 1, 100, 150, 60_000);
        assert!(changed.is_some());
        // The client never heard of the change and acknowledges with the receipt it has.
        let (outcome, journaled) = table.finish(&key, 1, 100);
        assert!(
            matches!(outcome, Finish::Finished(entry) if entry.pop_time == 150),
            "{outcome:?}"
        );
        table.wait_durable(journaled).expect("durable");
        assert!(!table.is_in_flight(&key, 1));
        assert_eq!(table.next_deadline(), Some(1_100), "only offset 0 is due");
        table.close();
    }
    let table = open(dir.path());
    assert!(!table.is_in_flight(&key, 1), "finished after a restart too");
    assert!(table.is_in_flight(&key, 0));
}

#[test]
fn an_orderly_receipt_from_an_earlier_hand_out_finishes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = QueueKey::new("G", "T", 0);
    let table = open(dir.path());
    pop_as(&table, &key, (1, 100), &[0], (true, false));
    let (revive, _) = table.take_expired(1_100, 10);
    assert!(
        revive.is_empty(),
        "orderly offsets are handed out again in place"
    );
    pop_as(&table, &key, (1, 2_000), &[0], (true, true));
    assert_eq!(table.finish(&key, 0, 100).0, Finish::StaleReceipt);
    assert!(table.is_in_flight(&key, 0));
    assert!(matches!(
        table.finish(&key, 0, 2_000).0,
        Finish::Finished(_)
    ));
}

#[test]
fn a_replica_replaces_the_state_durably_and_a_bad_one_changes_nothing() {
    let master_dir = tempfile::tempdir().expect("tempdir");
    let slave_dir = tempfile::tempdir().expect("tempdir");
    let key = QueueKey::new("G", "T", 0);
    let other = QueueKey::new("G", "T", 1);
    let master = open(master_dir.path());
    pop(&master, &key, 3, 100, &[0, 1, 2]);
    master.finish(&key, 1, 100);
    let replica = master.replica();
    {
        let slave = open(slave_dir.path());
        // Whatever the slave held before is replaced, not merged.
        pop(&slave, &other, 5, 50, &[4]);
        assert!(slave.replace_from_master(&replica).expect("taken"));
        assert!(!slave.replace_from_master(&replica).expect("same again"));
        for bad in [&[][..], &[9, 0, 0, 0, 0][..], &replica[..replica.len() - 3]] {
            assert!(slave.replace_from_master(bad).is_err(), "{bad:?} taken");
        }
        assert_eq!(slave.replica(), replica, "bad replicas changed nothing");
        assert_eq!(slave.next_deadline(), Some(1_100), "deadlines re-indexed");
        slave.close();
    }
    let slave = open(slave_dir.path());
    assert_eq!(slave.replica(), replica, "kept across a restart");
    assert_eq!(slave.cursor(&other), None);
    assert!(slave.is_in_flight(&key, 2));
    assert!(!slave.is_in_flight(&key, 1));
}

/// The revive service sleeps until the first deadline: a pop or change whose deadline comes
/// later wakes nothing, an earlier one wakes it.
#[test]
fn only_a_sooner_deadline_wakes_the_revive_service() {
    use std::future::Future;
    use std::task::{Context, Waker};
    let dir = tempfile::tempdir().expect("tempdir");
    let table = open(dir.path());
    // A stored permit makes `notified()` ready at once.
    let woken = |table: &PopTable| {
        let notified = std::pin::pin!(table.wake().notified());
        notified
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    };
    let key = QueueKey::new("G", "T", 0);
    pop(&table, &key, 2, 100, &[0, 1]);
    assert!(woken(&table), "the first deadline wakes it");
    pop(&table, &key, 4, 200, &[2, 3]);
    assert!(!woken(&table), "1 200 comes after 1 100");
    pop(&table, &key, 5, 50, &[4]);
    assert!(woken(&table), "1 050 comes before 1 100");
    table.change_invisibility(&key, 2, 200, 300, 90_000);
    assert!(!woken(&table), "a later deadline for one in flight");
    table.change_invisibility(&key, 3, 200, 300, 60);
    assert!(woken(&table), "an earlier one");
    table.close();
}

#[test]
fn a_replica_follows_the_masters_changes_and_whole_copies_and_keeps_them() {
    let (master_dir, replica_dir) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let outbox = Arc::new(crate::progress_record::ProgressOutbox::default());
    let mut master = open(master_dir.path());
    master.publish_to(outbox.clone());
    let (a, b) = (QueueKey::new("G", "T", 0), QueueKey::new("G", "T", 1));
    pop(&master, &a, 4, 100, &[0, 1, 2, 3]);
    pop(&master, &b, 2, 100, &[0, 1]);
    let _ = master.finish(&a, 1, 100);

    // A replica that joins now gets a whole copy, then the changes after it.
    let replica = open(replica_dir.path());
    pop(&replica, &QueueKey::new("Old", "T", 0), 1, 50, &[0]);
    let _ = outbox.take_all();
    assert_eq!(master.publish_whole(), 2);
    let _ = master.finish(&b, 0, 100);
    let (changed, _) = master.change_invisibility(&a, 2, 100, 150, 60_000);
    assert!(changed.is_some());
    let records = outbox.take_all();
    assert_eq!(replica.apply_replicated(&records), 0);
    // One table's lock at a time (ARCHITECTURE.md, "Lock order").
    let replica_state = replica.lock().state.clone();
    assert_eq!(
        replica_state,
        master.lock().state,
        "the replica holds the master's state, its own gone"
    );
    assert_eq!(
        replica.apply_replicated(&[(2, vec![77])]),
        1,
        "an unreadable record is skipped"
    );

    // It survives the replica's restart, and a replica about to be master revives from it.
    let expected = master.lock().state.clone();
    drop(replica);
    let replica = open(replica_dir.path());
    assert_eq!(replica.lock().state, expected);
    replica.after_replication();
    assert_eq!(replica.next_deadline(), Some(1_100));
}
