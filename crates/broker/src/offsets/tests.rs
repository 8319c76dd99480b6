use super::*;

#[test]
fn commits_only_move_forward_unless_the_stored_offset_is_past_the_queue() {
    let mut table = ConsumerOffsetTable::new();
    assert_eq!(
        table.commit("T", "g", 0, 10, 100, 0),
        CommitOutcome::Created
    );
    assert_eq!(
        table.commit("T", "g", 0, 15, 100, 0),
        CommitOutcome::Advanced { previous: 10 }
    );
    assert_eq!(
        table.commit("T", "g", 0, 12, 100, 0),
        CommitOutcome::IgnoredBackwards { stored: 15 }
    );
    assert_eq!(table.query("T", "g", 0), Some(15));
    // The log lost its tail: the queue now ends at 13, the stored 15 points nowhere.
    assert_eq!(
        table.commit("T", "g", 0, 13, 13, 0),
        CommitOutcome::Corrected { previous: 15 }
    );
    assert_eq!(
        table.commit("T", "g", 0, -1, 13, 0),
        CommitOutcome::Rejected
    );
    assert_eq!(table.query("T", "g", 0), Some(13));
    table.reset("T", "g", 0, 2, 0);
    assert_eq!(
        table.query("T", "g", 0),
        Some(2),
        "an operator may move backwards"
    );
}

/// A lower commit moves progress back only when it is deliberate: from an admin tool (even
/// through an unconfirmed reset's fence) or from the queue's current consumer. A former
/// owner's late commit is still ignored. A rewind raises the epoch, so slaves take it.
#[test]
fn deliberate_rewinds_are_stored_stale_commits_are_not() {
    let mut table = ConsumerOffsetTable::new();
    table.commit("T", "g", 0, 8, 100, 0);
    assert_eq!(
        table.commit_by("T", "g", 0, 5, 100, 1, Committer::Progress),
        CommitOutcome::IgnoredBackwards { stored: 8 }
    );
    assert_eq!(
        table.commit_by("T", "g", 0, 3, 100, 2, Committer::Admin),
        CommitOutcome::Rewound { previous: 8 }
    );
    assert_eq!(table.query("T", "g", 0), Some(3));
    let epoch = table.reset_epoch("T", "g", 0);
    assert!(epoch > 0, "a rewind raises the epoch");
    table.commit("T", "g", 0, 9, 100, 3);
    table.note_puller("T", "g", 0, 42, false, |_| true);
    assert!(table.is_current_consumer("T", "g", 0, 42));
    assert!(!table.is_current_consumer("T", "g", 0, 7));
    assert_eq!(
        table.commit_by("T", "g", 0, 4, 100, 4, Committer::CurrentConsumer),
        CommitOutcome::Rewound { previous: 9 }
    );
    assert!(table.reset_epoch("T", "g", 0) > epoch);
    // Through an operator reset's fence: the current consumer waits like everyone else,
    // an admin tool does not.
    table.reset("T", "g", 0, 6, 10);
    assert!(matches!(
        table.commit_by("T", "g", 0, 2, 100, 11, Committer::CurrentConsumer),
        CommitOutcome::IgnoredDuringReset { .. }
    ));
    assert_eq!(
        table.commit_by("T", "g", 0, 1, 100, 12, Committer::Admin),
        CommitOutcome::Rewound { previous: 6 }
    );
    assert_eq!(table.query("T", "g", 0), Some(1));
}

/// Acknowledged ranges: kept above the offset, merged (never shrunk) by later reports and by
/// a slave merge, forgotten by a reset or rewind, carried by the wrapper.
#[test]
fn acknowledged_ranges_follow_the_offset() {
    let ranges = |list: &[(i64, i64)]| AckedRanges::from_ranges(list.iter().copied());
    let mut table = ConsumerOffsetTable::new();
    table.commit("T", "g", 0, 10, 100, 0);
    assert!(table.note_acked("T", "g", 0, &ranges(&[(12, 15), (20, 22)])));
    assert!(
        !table.note_acked("T", "g", 0, &ranges(&[(13, 14)])),
        "nothing new"
    );
    assert!(table.note_acked("T", "g", 0, &ranges(&[(15, 16)])));
    let acked = |table: &ConsumerOffsetTable| {
        table
            .queue_progress("T", "g", 0)
            .map(|progress| progress.acked)
    };
    assert_eq!(acked(&table), Some(ranges(&[(12, 16), (20, 22)])));
    // The offset passes part of them: what lies at or below it is dropped.
    table.commit("T", "g", 0, 14, 100, 1);
    assert_eq!(acked(&table), Some(ranges(&[(15, 16), (20, 22)])));
    let wrapper = table.to_wrapper();
    assert_eq!(
        acked(&ConsumerOffsetTable::from_wrapper(&wrapper)),
        acked(&table)
    );

    let mut slave = ConsumerOffsetTable::new();
    slave.merge_from_master(&table);
    slave.note_acked("T", "g", 0, &ranges(&[(30, 31)]));
    table.note_acked("T", "g", 0, &ranges(&[(40, 41)]));
    slave.merge_from_master(&table);
    assert_eq!(
        acked(&slave),
        Some(ranges(&[(15, 16), (20, 22), (30, 31), (40, 41)]))
    );

    table.reset("T", "g", 0, 5, 10);
    assert_eq!(
        acked(&table),
        Some(AckedRanges::new()),
        "a reset replays everything"
    );
    table.commit("T", "g", 0, 8, 100, 11);
    table.note_acked("T", "g", 0, &ranges(&[(9, 12)]));
    table.commit_by("T", "g", 0, 3, 100, 12, Committer::Admin);
    assert_eq!(acked(&table), Some(AckedRanges::new()), "so does a rewind");
}

#[test]
fn a_reset_is_fenced_until_a_client_confirms_it() {
    let mut table = ConsumerOffsetTable::new();
    table.commit("T", "g", 0, 50, 100, 0);
    table.reset("T", "g", 0, 10, 1_000);
    // A commit sent before the client heard of the reset must not undo it.
    assert_eq!(
        table.commit("T", "g", 0, 52, 100, 1_500),
        CommitOutcome::IgnoredDuringReset { reset_offset: 10 }
    );
    assert_eq!(table.query("T", "g", 0), Some(10));
    // The client applied the reset: it commits exactly the reset offset, then moves on.
    assert_eq!(
        table.commit("T", "g", 0, 10, 100, 2_000),
        CommitOutcome::Advanced { previous: 10 }
    );
    assert_eq!(
        table.commit("T", "g", 0, 12, 100, 2_500),
        CommitOutcome::Advanced { previous: 10 }
    );
    // A fence nobody confirms lapses.
    table.reset("T", "g", 0, 5, 10_000);
    assert!(matches!(
        table.commit("T", "g", 0, 7, 100, 10_000 + RESET_FENCE_MS - 1),
        CommitOutcome::IgnoredDuringReset { .. }
    ));
    assert_eq!(
        table.commit("T", "g", 0, 7, 100, 10_000 + RESET_FENCE_MS),
        CommitOutcome::Advanced { previous: 5 }
    );
}

/// A reset the master made comes to its slave with its fence and pull redirect: elected before
/// the consumer heard of it, the slave must neither take the consumer's commit of where it was
/// nor let its pulls go on from there. Once the master moved on (the consumer confirmed the
/// reset there), the slave's fence is lifted by the next progress it takes.
#[test]
fn a_reset_taken_from_the_master_is_fenced_on_the_slave_too() {
    let mut master = ConsumerOffsetTable::new();
    master.commit("T", "g", 0, 50, 100, 0);
    let mut slave = ConsumerOffsetTable::new();
    slave.merge_from_master(&master);
    master.reset("T", "g", 0, 10, 1_000);
    slave.merge_from_master(&master);
    assert_eq!(slave.query("T", "g", 0), Some(10));
    assert_eq!(
        slave.commit("T", "g", 0, 55, 100, 1_500),
        CommitOutcome::IgnoredDuringReset { reset_offset: 10 },
        "a commit sent before the consumer heard of the reset"
    );
    assert_eq!(slave.take_pull_redirect("T", "g", 0, 55), Some(10));

    // Made on the master and confirmed there: the slave follows, fence lifted.
    let mut confirmed = ConsumerOffsetTable::new();
    confirmed.commit("T", "g", 0, 50, 100, 0);
    let mut follower = ConsumerOffsetTable::new();
    follower.merge_from_master(&confirmed);
    confirmed.reset("T", "g", 0, 10, 1_000);
    follower.merge_from_master(&confirmed);
    confirmed.commit("T", "g", 0, 10, 100, 1_200);
    confirmed.commit("T", "g", 0, 14, 100, 1_300);
    follower.merge_from_master(&confirmed);
    assert_eq!(
        follower.commit("T", "g", 0, 16, 100, 1_400),
        CommitOutcome::Advanced { previous: 14 }
    );
    assert_eq!(follower.take_pull_redirect("T", "g", 0, 16), None);

    // A reset whose fence had lapsed where it was made (the offset moved on after it) brings
    // neither.
    let mut lapsed = ConsumerOffsetTable::new();
    lapsed.reset("T", "g", 0, 7, 1_000);
    lapsed.commit("T", "g", 0, 9, 100, 1_000 + RESET_FENCE_MS);
    let mut late = ConsumerOffsetTable::new();
    late.merge_from_master(&lapsed);
    assert_eq!(late.query("T", "g", 0), Some(9));
    assert_eq!(late.take_pull_redirect("T", "g", 0, 3), None);
    assert_eq!(
        late.commit("T", "g", 0, 11, 100, 1_000 + RESET_FENCE_MS + 1),
        CommitOutcome::Advanced { previous: 9 }
    );
}

#[test]
fn a_slave_merge_keeps_newer_progress_and_obeys_resets() {
    let mut master = ConsumerOffsetTable::new();
    master.commit("T", "g", 0, 10, 100, 0);
    master.commit("T", "g", 1, 30, 100, 0);
    let mut slave = ConsumerOffsetTable::new();
    slave.merge_from_master(&master);
    // While the master was away, consumers committed to the slave.
    slave.commit("T", "g", 0, 25, 100, 0);
    slave.commit("T", "g", 2, 5, 100, 0);
    // The master came back with its older values (and learned one queue from a client).
    master.commit("T", "g", 1, 35, 100, 0);
    let ahead = slave.merge_from_master(&master);
    assert_eq!(
        slave.query("T", "g", 0),
        Some(25),
        "never overwritten by an older value"
    );
    assert_eq!(
        slave.query("T", "g", 1),
        Some(35),
        "newer master values are taken"
    );
    assert_eq!(slave.query("T", "g", 2), Some(5), "slave-only entries stay");
    let pushed: Vec<_> = ahead.iter().map(|a| (a.queue_id, a.offset)).collect();
    assert_eq!(
        pushed,
        vec![(0, 25), (2, 5)],
        "the master is told what it is behind on"
    );

    // An operator reset on the master moves the slave back, once.
    master.reset("T", "g", 0, 3, 1_000);
    let ahead = slave.merge_from_master(&master);
    assert_eq!(slave.query("T", "g", 0), Some(3));
    assert!(
        ahead.iter().all(|a| a.queue_id != 0),
        "a reset queue is not pushed back"
    );
    assert_eq!(
        slave.reset_epoch("T", "g", 0),
        master.reset_epoch("T", "g", 0)
    );
    // Progress after the reset (confirmed first) merges by the larger value again.
    slave.commit("T", "g", 0, 3, 100, 2_000);
    slave.commit("T", "g", 0, 4, 100, 2_000);
    slave.merge_from_master(&master);
    assert_eq!(slave.query("T", "g", 0), Some(4));

    // A master that lost its reset (older epoch) does not undo the slave's.
    let mut forgetful = ConsumerOffsetTable::new();
    forgetful.commit("T", "g", 0, 60, 100, 0);
    slave.merge_from_master(&forgetful);
    assert_eq!(slave.query("T", "g", 0), Some(4));
}

#[test]
fn reset_epochs_survive_the_wrapper_and_increase() {
    let mut table = ConsumerOffsetTable::new();
    table.reset("T", "g", 0, 1, 500);
    table.reset("T", "g", 0, 1, 400);
    assert_eq!(
        table.reset_epoch("T", "g", 0),
        501,
        "epochs never go backwards"
    );
    let wrapper = table.to_wrapper();
    assert_eq!(
        ConsumerOffsetTable::from_wrapper(&wrapper).reset_epoch("T", "g", 0),
        501
    );
}

#[test]
fn wrapper_round_trip_and_drops() {
    let mut table = ConsumerOffsetTable::new();
    table.commit("T", "g1", 0, 5, 10, 0);
    table.commit("%RETRY%g1", "g1", 0, 1, 10, 0);
    table.commit("T", "g2", 1, 7, 10, 0);
    let wrapper = table.to_wrapper();
    assert_eq!(wrapper.offset_table["T@g1"][&0], 5);
    assert_eq!(ConsumerOffsetTable::from_wrapper(&wrapper), table);
    assert_eq!(
        table.topics_of_group("g1"),
        vec!["%RETRY%g1".to_owned(), "T".to_owned()]
    );
    assert_eq!(
        table.groups_of_topic("T"),
        vec!["g1".to_owned(), "g2".to_owned()]
    );
    assert_eq!(table.drop_group("g1"), 2);
    assert_eq!(table.drop_topic("T"), 1);
    assert!(table.is_empty());
}

/// A queue is stuck when later offsets are done (acknowledged ranges) and its offset has not
/// moved for the threshold; each stuck offset is reported once.
#[test]
fn stuck_queues_are_found_once_per_episode() {
    let mut table = ConsumerOffsetTable::new();
    table.commit("T", "g", 0, 10, 100, 1_000);
    table.commit("T", "g", 1, 10, 100, 1_000);
    table.note_acked("T", "g", 0, &AckedRanges::from_ranges([(11, 40)]));
    let progress = table.queue_progress("T", "g", 0).expect("progress");
    assert_eq!(
        progress.stuck_since(5_000, 30_000, 0),
        None,
        "not for long yet"
    );
    assert_eq!(progress.stuck_since(31_000, 30_000, 0), Some(1_000));
    let stuck = table.newly_stuck(31_000, 30_000, 0);
    assert_eq!(stuck.len(), 1, "queue 1 has nothing done above its offset");
    assert_eq!(
        (stuck[0].queue_id, stuck[0].offset, stuck[0].acked_above),
        (0, 10, 29)
    );
    assert!(
        table.newly_stuck(40_000, 30_000, 0).is_empty(),
        "logged once"
    );
    // The stuck message completes; later it sticks again at a new offset: a new episode.
    table.commit("T", "g", 0, 40, 100, 41_000);
    assert!(table.newly_stuck(50_000, 30_000, 0).is_empty());
    table.note_acked("T", "g", 0, &AckedRanges::from_ranges([(41, 45)]));
    let stuck = table.newly_stuck(72_000, 30_000, 0);
    assert_eq!(stuck.iter().map(|s| s.offset).collect::<Vec<_>>(), vec![40]);
}

/// A queue is held by a puller that hands off explicitly until it releases it; others (Java
/// clients) never hold one.
#[test]
fn a_hand_off_holder_holds_until_it_releases() {
    let mut table = ConsumerOffsetTable::new();
    table.commit("T", "g", 0, 5, 100, 0);
    table.note_puller("T", "g", 0, 7, false, |_| true);
    assert_eq!(
        table.holder("T", "g", 0),
        None,
        "a plain RocketMQ client holds nothing"
    );
    table.note_puller("T", "g", 0, 8, true, |_| true);
    assert_eq!(table.holder("T", "g", 0), Some(8));
    table.release("T", "g", 0, 7);
    assert_eq!(
        table.holder("T", "g", 0),
        Some(8),
        "only the holder releases"
    );
    table.release("T", "g", 0, 8);
    assert_eq!(table.holder("T", "g", 0), None);
}

/// Two consumers whose rebalances overlap both ask to take a released queue over: the first
/// holds it from its question on, the second waits until the first releases it (or is gone).
#[test]
fn the_first_to_take_a_queue_over_holds_it() {
    let mut table = ConsumerOffsetTable::new();
    table.commit("T", "g", 0, 5, 100, 0);
    table.note_puller("T", "g", 0, 1, true, |_| true);
    assert_eq!(table.claim("T", "g", 0, 2, |_| true), Some(1), "held by 1");
    table.release("T", "g", 0, 1);
    assert_eq!(table.claim("T", "g", 0, 2, |_| true), None, "2 takes it");
    assert_eq!(table.claim("T", "g", 0, 2, |_| true), None, "asking again");
    assert_eq!(
        table.claim("T", "g", 0, 3, |_| true),
        Some(2),
        "3 waits for 2"
    );
    // A pull 1 sent before it released lands now: it does not take the queue back.
    table.note_puller("T", "g", 0, 1, true, |_| true);
    assert_eq!(table.holder("T", "g", 0), Some(2));
    table.release("T", "g", 0, 2);
    assert_eq!(
        table.claim("T", "g", 0, 3, |_| true),
        None,
        "then 3 takes it"
    );
    // A holder that is gone holds nothing.
    assert_eq!(table.claim("T", "g", 0, 4, |holder| holder != 3), None);
    assert_eq!(table.holder("T", "g", 0), Some(4));
    // Nothing to hold where the group has no progress.
    assert_eq!(table.claim("T", "g", 1, 4, |_| true), None);
    assert_eq!(table.holder("T", "g", 1), None);
}

fn progress_record(group: &str, offset: i64, reset_epoch: i64, acked: &[(i64, i64)]) -> Vec<u8> {
    journal::queue_progress_record(&journal::ProgressEntry {
        topic: "T",
        group,
        queue_id: 0,
        offset,
        reset_epoch,
        acked: AckedRanges::from_ranges(acked.iter().copied()),
    })
}

#[test]
fn a_replica_merges_its_masters_stream_and_keeps_its_place() {
    let replica = ConsumerOffsets::in_memory(ConsumerOffsetTable::new());
    let outbox = std::sync::Arc::new(crate::progress_record::ProgressOutbox::default());
    let mut replica = replica;
    replica.publish_to(outbox.clone());
    let skipped = replica.apply_replicated(
        &[
            progress_record("g", 10, 0, &[(12, 14)]),
            // Older than what came before it (a late record of the same epoch): no step back.
            progress_record("g", 7, 0, &[]),
            progress_record("gone", 4, 0, &[]),
            journal::group_removed_record("gone"),
            vec![99],
        ],
        5,
        1_000,
    );
    assert_eq!(
        skipped, 1,
        "the unreadable record is skipped, the others applied"
    );
    assert_eq!(replica.query("T", "g", 0), Some(10));
    assert_eq!(
        replica.queue_progress("T", "g", 0).map(|p| p.acked),
        Some(AckedRanges::from_ranges([(12, 14)]))
    );
    assert_eq!(replica.query("T", "gone", 0), None);
    assert_eq!(replica.replica_position(), 5);
    assert_eq!(
        outbox.last_pushed(),
        0,
        "what a replica applies is not published again"
    );
    // An operator's rewind on the master comes with a newer epoch and wins, backwards.
    replica.apply_replicated(&[progress_record("g", 3, 50, &[])], 6, 2_000);
    assert_eq!(replica.query("T", "g", 0), Some(3));
    // It brought the rewind's fence: a commit taken here once that lapsed is published.
    let (fenced, _) = replica.commit("T", "g", 0, 8, 100, 3_000, Committer::Progress, None);
    assert_eq!(
        fenced,
        CommitOutcome::IgnoredDuringReset { reset_offset: 3 }
    );
    assert_eq!(outbox.last_pushed(), 0);
    replica.commit(
        "T",
        "g",
        0,
        8,
        100,
        50 + RESET_FENCE_MS,
        Committer::Progress,
        None,
    );
    assert_eq!(outbox.last_pushed(), 1);
    replica.set_replica_position(2);
    assert_eq!(replica.replica_position(), 2);
}

/// Found by the fault harness (seed 1796665858614440553): a master deposed while paused ran a
/// reset queued meanwhile after the election. The reset stood in its table stamped later than
/// anything the new master did, so the new master's offsets never replaced it, and once
/// elected again it answered the rewind. A replica that starts following gives its own
/// rewinds up first; the new master's copies then decide.
#[test]
fn a_deposed_masters_own_reset_gives_way_to_the_new_masters_offsets() {
    let table = || {
        let offsets = ConsumerOffsets::in_memory(ConsumerOffsetTable::new());
        offsets.apply_replicated(&[progress_record("g", 858, 0, &[])], 1, 1_000);
        offsets
    };
    let replay = |replica: &ConsumerOffsets| {
        // The new master's whole tables, published when this replica connects.
        replica.apply_replicated(&[progress_record("g", 858, 0, &[])], 2, 9_000);
        replica.query("T", "g", 0)
    };

    let kept = table();
    kept.reset("T", "g", 0, 505, 5_000);
    assert_eq!(
        replay(&kept),
        Some(505),
        "without giving up its reset, the deposed master keeps the rewind"
    );

    let deposed = table();
    deposed.reset("T", "g", 0, 505, 5_000);
    assert_eq!(deposed.forfeit_rewinds(), 1);
    assert_eq!(
        replay(&deposed),
        Some(858),
        "the new master's offset decides"
    );
    assert_eq!(
        deposed.take_pull_redirect("T", "g", 0, 858),
        None,
        "no pull is sent back to the forfeited reset's offset"
    );
    // A reset the new master made itself still wins, backwards.
    deposed.apply_replicated(&[progress_record("g", 100, 7_000, &[])], 3, 9_500);
    assert_eq!(deposed.query("T", "g", 0), Some(100));
    assert_eq!(deposed.forfeit_rewinds(), 1);
    assert_eq!(deposed.forfeit_rewinds(), 0, "nothing left to give up");
}

#[test]
fn the_replica_position_survives_the_journal_and_its_snapshot() {
    use tidemark_storage::journal::JournalCodec;
    let empty = || Ok(ConsumerOffsetTable::new());
    let codec = journal::OffsetJournalCodec { import: &empty };
    let mut table = ConsumerOffsetTable::new();
    codec
        .apply(&mut table, &journal::replica_position_record(42))
        .expect("applies");
    assert_eq!(table.replica_position(), 42);
    table.commit("T", "g", 0, 5, 10, 0);
    let restored = codec
        .restore(&journal::encode_snapshot(&table))
        .expect("restores");
    assert_eq!(restored.replica_position(), 42);
    assert_eq!(restored.query("T", "g", 0), Some(5));
    // A snapshot without a position (written before there was one) still reads.
    let mut plain = ConsumerOffsetTable::new();
    plain.commit("T", "g", 0, 5, 10, 0);
    let restored = codec
        .restore(&journal::encode_snapshot(&plain))
        .expect("restores");
    assert_eq!(restored.replica_position(), 0);
}
