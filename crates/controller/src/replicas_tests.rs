use super::*;

fn apply_id(sets: &mut ReplicaSets, id: i64) -> Applied {
    sets.apply(&Command::ApplyBrokerId {
        cluster: "c".to_owned(),
        broker_name: "broker-a".to_owned(),
        broker_id: id,
        address: format!("10.0.0.{id}:10911"),
        check_code: format!("10.0.0.{id}:10911;{id}"),
    })
}

fn candidate(id: i64, epoch: i32, max_offset: i64) -> Candidate {
    Candidate {
        id,
        epoch,
        max_offset,
        priority: 0,
    }
}

/// broker-a with replicas 1, 2, 3; 1 elected master and all three in sync.
fn three_in_sync() -> ReplicaSets {
    let mut sets = ReplicaSets::default();
    for id in 1..=3 {
        assert_eq!(apply_id(&mut sets, id), Applied::BrokerIdApplied);
    }
    let ElectionPlan::Propose(command) = sets.plan_election("broker-a", Some(1), false, &[], false)
    else {
        panic!("the first broker to ask becomes master");
    };
    assert!(matches!(sets.apply(&command), Applied::MasterElected(_)));
    let altered = sets.apply(&Command::AlterSyncStateSet {
        broker_name: "broker-a".to_owned(),
        master: 1,
        master_epoch: 1,
        at_sync_state_set_epoch: 1,
        sync_state_set: BTreeSet::from([1, 2, 3]),
    });
    assert_eq!(
        altered,
        Applied::SyncStateSetAltered {
            sync_state_set_epoch: 2
        }
    );
    sets
}

#[test]
fn ids_are_handed_out_in_order_and_a_taken_id_needs_its_check_code() {
    let mut sets = ReplicaSets::default();
    assert_eq!(sets.next_broker_id("broker-a"), 1);
    let refused = sets.check_apply_broker_id("broker-a", 2, "x");
    assert_eq!(
        refused.map_err(|refusal| refusal.response_code()),
        Err(ResponseCode::ControllerBrokerIdInvalid),
        "a new set starts at id 1"
    );
    assert_eq!(apply_id(&mut sets, 1), Applied::BrokerIdApplied);
    assert_eq!(sets.next_broker_id("broker-a"), 2);
    // The same broker applying again (same check code) is fine; another one is not.
    assert!(sets
        .check_apply_broker_id("broker-a", 1, "10.0.0.1:10911;1")
        .is_ok());
    let stolen = sets.apply(&Command::ApplyBrokerId {
        cluster: "c".to_owned(),
        broker_name: "broker-a".to_owned(),
        broker_id: 1,
        address: "10.0.0.9:10911".to_owned(),
        check_code: "10.0.0.9:10911;9".to_owned(),
    });
    assert!(
        matches!(&stolen, Applied::Refused(refusal) if refusal.response_code() == ResponseCode::ControllerBrokerIdInvalid),
        "{stolen:?}"
    );
    assert_eq!(
        sets.get("broker-a").and_then(|set| set.address(1)),
        Some("10.0.0.1:10911")
    );
}

#[test]
fn an_election_raises_both_epochs_and_starts_the_sync_set_with_the_master() {
    let mut sets = three_in_sync();
    let plan = sets.plan_election(
        "broker-a",
        None,
        false,
        &[candidate(2, 1, 500), candidate(3, 1, 900)],
        false,
    );
    let ElectionPlan::Propose(command) = plan else {
        panic!("master 1 is dead: {plan:?}");
    };
    let Applied::MasterElected(election) = sets.apply(&command) else {
        panic!("elected");
    };
    assert_eq!(
        election.master, 3,
        "the longest log wins among equal epochs"
    );
    assert_eq!(election.master_address, "10.0.0.3:10911");
    assert_eq!(election.master_epoch, 2);
    assert_eq!(election.sync_state_set, BTreeSet::from([3]));
    assert_eq!(election.sync_state_set_epoch, 3);
    assert_eq!(election.members.len(), 3);
}

#[test]
fn a_higher_epoch_beats_a_longer_log_and_priority_breaks_ties() {
    let sets = three_in_sync();
    let plan = sets.plan_election(
        "broker-a",
        None,
        false,
        &[candidate(2, 2, 100), candidate(3, 1, 900)],
        false,
    );
    assert!(matches!(
        plan,
        ElectionPlan::Propose(Command::ElectMaster {
            new_master: Some(2),
            ..
        })
    ));
    let tied = [
        Candidate {
            priority: 5,
            ..candidate(2, 1, 100)
        },
        Candidate {
            priority: 1,
            ..candidate(3, 1, 100)
        },
    ];
    assert!(matches!(
        sets.plan_election("broker-a", None, false, &tied, false),
        ElectionPlan::Propose(Command::ElectMaster {
            new_master: Some(3),
            ..
        })
    ));
}

#[test]
fn only_sync_state_set_members_are_elected_unless_unclean_election_is_on() {
    let mut sets = three_in_sync();
    let shrunk = sets.apply(&Command::AlterSyncStateSet {
        broker_name: "broker-a".to_owned(),
        master: 1,
        master_epoch: 1,
        at_sync_state_set_epoch: 2,
        sync_state_set: BTreeSet::from([1]),
    });
    assert!(matches!(shrunk, Applied::SyncStateSetAltered { .. }));
    let alive = [candidate(2, 1, 100)];
    // Controller-noticed death with no eligible replica: the master is recorded as lost.
    let plan = sets.plan_election("broker-a", None, false, &alive, false);
    let ElectionPlan::Propose(command) = plan else {
        panic!("{plan:?}");
    };
    assert_eq!(
        sets.clone().apply(&command),
        Applied::MasterLost { master_epoch: 2 }
    );
    // A broker asking for itself gets a refusal instead.
    let asked = sets.plan_election("broker-a", Some(2), false, &alive, false);
    assert!(
        matches!(&asked, ElectionPlan::Refused(refusal) if refusal.response_code() == ResponseCode::ControllerElectMasterFailed),
        "{asked:?}"
    );
    // With unclean election any live replica may take over.
    assert!(matches!(
        sets.plan_election("broker-a", None, false, &alive, true),
        ElectionPlan::Propose(Command::ElectMaster {
            new_master: Some(2),
            ..
        })
    ));
}

#[test]
fn a_live_master_stays_unless_another_is_designated() {
    let sets = three_in_sync();
    let alive = [candidate(1, 1, 10), candidate(2, 1, 900)];
    assert!(matches!(
        sets.plan_election("broker-a", Some(2), false, &alive, false),
        ElectionPlan::MasterStillAlive(Election { master: 1, .. })
    ));
    assert!(matches!(
        sets.plan_election("broker-a", Some(2), true, &alive, false),
        ElectionPlan::Propose(Command::ElectMaster {
            new_master: Some(2),
            ..
        })
    ));
    // A designated broker that is not alive is not elected, and the master is not replaced.
    let plan = sets.plan_election("broker-a", Some(3), true, &alive, false);
    assert!(matches!(plan, ElectionPlan::Refused(_)), "{plan:?}");
}

#[test]
fn two_elections_decided_on_the_same_state_take_effect_once() {
    let mut sets = three_in_sync();
    let first = sets.plan_election("broker-a", None, false, &[candidate(2, 1, 9)], false);
    let second = sets.plan_election("broker-a", None, false, &[candidate(3, 1, 9)], false);
    let (ElectionPlan::Propose(first), ElectionPlan::Propose(second)) = (first, second) else {
        panic!("both propose");
    };
    assert!(matches!(sets.apply(&first), Applied::MasterElected(_)));
    let late = sets.apply(&second);
    assert!(
        matches!(&late, Applied::Refused(refusal) if refusal.response_code() == ResponseCode::ControllerFencedMasterEpoch),
        "{late:?}"
    );
    assert_eq!(sets.get("broker-a").and_then(|set| set.master), Some(2));
}

#[test]
fn sync_state_set_changes_are_fenced_by_master_and_both_epochs() {
    let sets = three_in_sync();
    let alter = |master, master_epoch, at, members: &[i64]| Command::AlterSyncStateSet {
        broker_name: "broker-a".to_owned(),
        master,
        master_epoch,
        at_sync_state_set_epoch: at,
        sync_state_set: members.iter().copied().collect(),
    };
    let refused = |command: Command| match sets.clone().apply(&command) {
        Applied::Refused(refusal) => refusal.response_code(),
        other => panic!("{command:?} applied: {other:?}"),
    };
    assert_eq!(
        refused(alter(2, 1, 2, &[1, 2])),
        ResponseCode::ControllerInvalidMaster
    );
    assert_eq!(
        refused(alter(1, 0, 2, &[1, 2])),
        ResponseCode::ControllerFencedMasterEpoch
    );
    assert_eq!(
        refused(alter(1, 1, 1, &[1, 2])),
        ResponseCode::ControllerFencedSyncStateSetEpoch
    );
    assert_eq!(
        refused(alter(1, 1, 2, &[1, 2, 3])),
        ResponseCode::ControllerAlterSyncStateSetFailed,
        "unchanged"
    );
    assert_eq!(
        refused(alter(1, 1, 2, &[1, 7])),
        ResponseCode::ControllerInvalidReplicas
    );
    assert_eq!(
        refused(alter(1, 1, 2, &[2, 3])),
        ResponseCode::ControllerAlterSyncStateSetFailed,
        "the master must stay in"
    );
    // Liveness is the leader's call, before proposing.
    let check = sets.check_alter_sync_state_set(&alter(1, 1, 2, &[1, 2]), |id| id != 2);
    assert_eq!(
        check.map_err(|refusal| refusal.response_code()),
        Err(ResponseCode::ControllerBrokerNotAlive)
    );
}

#[test]
fn cleaning_removes_replicas_and_then_the_set() {
    let mut sets = three_in_sync();
    sets.apply(&Command::CleanBrokerData {
        broker_name: "broker-a".to_owned(),
        broker_ids: Some(BTreeSet::from([1, 3])),
    });
    let set = sets.get("broker-a").expect("still there");
    assert_eq!(set.master, None);
    assert_eq!(set.sync_state_set, BTreeSet::from([2]));
    assert_eq!(set.next_id, 4, "ids are never reused");
    sets.apply(&Command::CleanBrokerData {
        broker_name: "broker-a".to_owned(),
        broker_ids: None,
    });
    assert!(sets.get("broker-a").is_none());
}

#[test]
fn commands_survive_the_raft_log_encoding() {
    let command = Command::AlterSyncStateSet {
        broker_name: "broker-a".to_owned(),
        master: 1,
        master_epoch: 3,
        at_sync_state_set_epoch: 7,
        sync_state_set: BTreeSet::from([1, 2]),
    };
    let bytes = serde_json::to_vec(&command).expect("encode");
    assert_eq!(
        serde_json::from_slice::<Command>(&bytes).expect("decode"),
        command
    );
}
