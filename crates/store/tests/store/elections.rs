//! Three replicas of one log through elections in quick succession, at the storage seam: the
//! store operations a broker in controller mode performs — a new master cuts a half-copied
//! record and begins its epoch; a follower cuts its log back to where its epoch history
//! agrees with the master's, takes that history and copies — driven by random steps, with
//! the SyncStateSet kept as the controllers keep it (a replica joins once it has every
//! acknowledged record; an election picks from the set and leaves the new master alone in it).
//! No step may cut an acknowledged record from a replica, and every replica ends byte for byte
//! the master's copy.

use std::collections::BTreeSet;

use proptest::prelude::*;
use tidemark_store::sim::SimStorage;
use tidemark_store::MessageStore;

use crate::replication::{fill, open};

const REPLICAS: usize = 3;
/// `small_config`'s commit-log segment size.
const SEGMENT_BYTES: u64 = 4096;

#[derive(Debug, Clone)]
enum Step {
    /// The master stores this many messages.
    Write(usize),
    /// A replica copies up to this many bytes from the master (a chunk may end mid-record).
    Copy(usize, usize),
    /// A replica connects again: it reconciles with the master before it copies.
    Reconnect(usize),
    /// The master drops a slave from the SyncStateSet (it disconnected or fell behind).
    Drop(usize),
    /// The master dies and the controllers elect one of the set's slaves (the nth, wrapping).
    Elect(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1usize..6).prop_map(Step::Write),
        (0..REPLICAS, 1usize..6000).prop_map(|(replica, bytes)| Step::Copy(replica, bytes)),
        (0..REPLICAS).prop_map(Step::Reconnect),
        (0..REPLICAS).prop_map(Step::Drop),
        (0..REPLICAS).prop_map(Step::Elect),
    ]
}

fn end(store: &MessageStore) -> u64 {
    store.commit_log_positions().1
}

/// How many leading bytes `replica`'s log has in common with `master`'s.
fn shared_prefix(replica: &MessageStore, master: &MessageStore) -> u64 {
    let mut position = 0;
    while let Some(theirs) = master.replication_chunk(position, 4096).expect("read") {
        let Some(mine) = replica
            .replication_chunk(position, theirs.len())
            .expect("read")
        else {
            break;
        };
        let same = mine
            .iter()
            .zip(theirs.iter())
            .take_while(|(a, b)| a == b)
            .count();
        position += same as u64;
        if same < theirs.len().min(mine.len()) || mine.len() < theirs.len() {
            break;
        }
    }
    position
}

/// The replicas and what the controllers and the master know about them.
struct Cluster {
    stores: Vec<MessageStore>,
    master: usize,
    epoch: i32,
    in_sync: BTreeSet<usize>,
    /// Whether each replica reconciled with the current master since it was elected.
    following: Vec<bool>,
    /// Where each record of the master's log ends.
    record_ends: Vec<u64>,
    /// Where the padding at the end of a segment ends (no record is cut by cutting it).
    padding_ends: Vec<u64>,
    /// Everything below this every member of the SyncStateSet had whole: acknowledged.
    acknowledged: u64,
    writes: u64,
}

impl Cluster {
    fn new(storage: &SimStorage) -> Cluster {
        let stores: Vec<MessageStore> = (0..REPLICAS)
            .map(|index| open(storage, &format!("/replica-{index}")))
            .collect();
        stores[0].epochs().begin(1, 0).expect("epoch 1");
        Cluster {
            stores,
            master: 0,
            epoch: 1,
            in_sync: BTreeSet::from([0]),
            following: vec![true, false, false],
            record_ends: Vec::new(),
            padding_ends: Vec::new(),
            acknowledged: 0,
            writes: 0,
        }
    }

    /// What the set has whole now is acknowledged (it never becomes unacknowledged).
    fn acknowledge(&mut self) {
        let held = self
            .in_sync
            .iter()
            .map(|replica| end(&self.stores[*replica]))
            .min()
            .unwrap_or(0);
        let whole = self
            .record_ends
            .iter()
            .copied()
            .filter(|record_end| *record_end <= held)
            .max()
            .unwrap_or(0);
        self.acknowledged = self.acknowledged.max(whole);
    }

    fn write(&mut self, count: usize) {
        let master = &self.stores[self.master];
        for _ in 0..count {
            self.writes += 1;
            let before = end(master);
            fill(master, 1, self.writes);
            let after = end(master);
            // A record that did not fit its segment's rest starts the next segment: the
            // padding before it ends on a boundary too.
            let segment_start = after - after % SEGMENT_BYTES;
            if before < segment_start && segment_start < after {
                self.padding_ends.push(segment_start);
            }
            self.record_ends.push(after);
        }
        self.acknowledge();
    }

    /// What a follower does before it copies: cut back to the agreed point, take the history.
    /// It keeps every acknowledged record it shares with the master, and nothing else the
    /// master does not have.
    fn reconcile(&mut self, replica: usize) {
        let (store, master) = (&self.stores[replica], &self.stores[self.master]);
        let before = end(store);
        let shared = shared_prefix(store, master);
        let shared_records = self
            .record_ends
            .iter()
            .copied()
            .filter(|record_end| *record_end <= shared)
            .max()
            .unwrap_or(0);
        store
            .follow_history(&master.epochs().spans(end(master) as i64))
            .expect("follow the master");
        let after = end(store);
        assert!(
            after >= shared_records.min(self.acknowledged),
            "replica {replica} cut from {before} to {after}, below the acknowledged records it \
             shared with the master (to {}, acknowledged to {})",
            shared_records,
            self.acknowledged
        );
        assert!(
            after <= shared,
            "replica {replica} kept {after} bytes, more than the {shared} it shares"
        );
        if self.in_sync.contains(&replica) {
            assert_eq!(after, before, "an in-sync replica {replica} lost bytes");
        }
        self.following[replica] = true;
    }

    fn copy(&mut self, replica: usize, budget: usize) {
        if !self.following[replica] {
            self.reconcile(replica);
        }
        let (store, master) = (&self.stores[replica], &self.stores[self.master]);
        let mut left = budget;
        while left > 0 {
            let from = end(store);
            let Some(bytes) = master.replication_chunk(from, left).expect("read") else {
                break;
            };
            store.append_replicated(from, &bytes).expect("append");
            left -= bytes.len();
        }
        // The master's join rule: everything the set has, and its epoch (it reconciled).
        if end(store) >= self.acknowledged {
            self.in_sync.insert(replica);
        }
        self.acknowledge();
    }

    fn elect(&mut self, nth: usize) {
        let candidates: Vec<usize> = self
            .in_sync
            .iter()
            .copied()
            .filter(|replica| *replica != self.master)
            .collect();
        let Some(&elected) = candidates.get(nth % candidates.len().max(1)) else {
            return;
        };
        let store = &self.stores[elected];
        store.cut_partial_record().expect("cut the half record");
        let start = end(store);
        assert!(
            start >= self.acknowledged,
            "elected replica {elected} ends at {start}, before the acknowledged {}",
            self.acknowledged
        );
        self.record_ends.retain(|record_end| *record_end <= start);
        self.padding_ends
            .retain(|padding_end| *padding_end <= start);
        assert!(
            start == 0 || self.record_ends.contains(&start) || self.padding_ends.contains(&start),
            "the new master's log ends at {start}, inside a record"
        );
        self.epoch += 1;
        store
            .epochs()
            .begin(self.epoch, start as i64)
            .expect("begin");
        self.master = elected;
        self.in_sync = BTreeSet::from([elected]);
        self.following = (0..REPLICAS).map(|replica| replica == elected).collect();
    }

    fn apply(&mut self, step: &Step) {
        match *step {
            Step::Write(count) => self.write(count),
            Step::Copy(replica, bytes) if replica != self.master => self.copy(replica, bytes),
            Step::Reconnect(replica) if replica != self.master => self.reconcile(replica),
            Step::Drop(replica) if replica != self.master => {
                self.in_sync.remove(&replica);
            }
            Step::Elect(nth) => self.elect(nth),
            _ => {}
        }
    }

    /// Every replica follows the master to its end: the same bytes, the same queues.
    fn converge(&mut self) {
        for replica in 0..REPLICAS {
            if replica == self.master {
                continue;
            }
            self.reconcile(replica);
            self.copy(replica, usize::MAX);
            let (store, master) = (&self.stores[replica], &self.stores[self.master]);
            assert_eq!(end(store), end(master), "replica {replica}'s end");
            let mut position = 0;
            while let Some(bytes) = master.replication_chunk(position, 32 * 1024).expect("read") {
                let copy = store
                    .replication_chunk(position, bytes.len())
                    .expect("read")
                    .expect("the replica has the bytes");
                assert_eq!(copy, bytes, "replica {replica} differs at {position}");
                position += bytes.len() as u64;
            }
            let queues: BTreeSet<(String, i32)> =
                master.queues().into_iter().chain(store.queues()).collect();
            for (topic, queue_id) in queues {
                assert_eq!(
                    store.max_offset(&topic, queue_id),
                    master.max_offset(&topic, queue_id),
                    "replica {replica}'s {topic}/{queue_id}"
                );
            }
        }
        assert!(end(&self.stores[self.master]) >= self.acknowledged);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn elections_in_quick_succession_never_cut_an_acknowledged_record(
        steps in proptest::collection::vec(step(), 1..60)
    ) {
        let storage = SimStorage::new();
        let mut cluster = Cluster::new(&storage);
        for step in &steps {
            cluster.apply(step);
        }
        cluster.converge();
    }
}

/// The sequence the fault runs hit: a master paused, its successor elected and killed at once
/// (before any copy), a third replica elected next — the empty epoch in between is replaced.
#[test]
fn back_to_back_elections_with_an_empty_epoch_between() {
    let storage = SimStorage::new();
    let mut cluster = Cluster::new(&storage);
    cluster.write(20);
    cluster.copy(1, usize::MAX);
    cluster.copy(2, usize::MAX);
    let acknowledged = cluster.acknowledged;
    assert!(acknowledged > 0);
    cluster.write(5);
    cluster.elect(0);
    assert_eq!(cluster.master, 1);
    cluster.copy(2, usize::MAX);
    cluster.elect(0);
    assert_eq!(cluster.master, 2);
    cluster.write(7);
    cluster.converge();
    assert!(end(&cluster.stores[0]) >= acknowledged);
}

/// Found by the property above: a replica copied into the padding at a segment's end (the
/// next record did not fit) and was elected; its log ends on the last whole record, not
/// inside the padding.
#[test]
fn an_old_master_that_copied_half_a_record_is_elected() {
    let storage = SimStorage::new();
    let mut cluster = Cluster::new(&storage);
    for step in [
        Step::Write(4),
        Step::Write(4),
        Step::Write(1),
        Step::Copy(1, 3033),
        Step::Elect(0),
        Step::Copy(0, 1),
        Step::Write(3),
        Step::Copy(0, 1023),
        Step::Elect(0),
    ] {
        cluster.apply(&step);
    }
    cluster.converge();
}
