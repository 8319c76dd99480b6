//! Each anomaly from a history made to have it, and a clean history that has none.

use super::*;
use crate::history::SendMode;

fn queue(topic: &str, id: i32) -> QueueRef {
    QueueRef {
        topic: topic.into(),
        broker: "set-a".into(),
        queue: id,
    }
}

/// A history built op by op, one millisecond apart.
#[derive(Default)]
struct Story(Vec<Op>);

impl Story {
    fn push(&mut self, outcome: Outcome, kind: Kind) -> u64 {
        let id = self.0.len() as u64;
        let at = id as f64;
        self.0.push(Op {
            id,
            process: "test".into(),
            invoked_ms: at,
            completed_ms: at,
            outcome,
            kind,
        });
        id
    }

    fn send(&mut self, outcome: Outcome, mode: SendMode, values: &[&str], topic: &str) -> u64 {
        let queue = (outcome == Outcome::Ok).then(|| queue(topic, 0));
        self.push(
            outcome,
            Kind::Send {
                mode,
                values: values.iter().map(|v| (*v).to_owned()).collect(),
                queue,
                offset: None,
            },
        )
    }

    fn deliver(&mut self, group: &str, value: &str, topic: &str, offset: i64) -> u64 {
        self.push(
            Outcome::Ok,
            Kind::Deliver {
                group: group.into(),
                consumer: "c1".into(),
                value: value.into(),
                queue: queue(topic, 0),
                offset,
            },
        )
    }

    fn committed(&mut self, group: &str, topic: &str, offset: i64) -> u64 {
        self.push(
            Outcome::Ok,
            Kind::Committed {
                group: group.into(),
                queue: queue(topic, 0),
                offset,
            },
        )
    }

    fn log(&mut self, topic: &str, values: &[&str]) -> u64 {
        self.push(
            Outcome::Ok,
            Kind::LogRead {
                queue: queue(topic, 0),
                values: values
                    .iter()
                    .enumerate()
                    .map(|(offset, value)| (offset as i64, (*value).to_owned()))
                    .collect(),
            },
        )
    }
}

fn expect(groups: &[(&str, &str)], orderly: &[&str]) -> Expectations {
    Expectations {
        subscriptions: groups
            .iter()
            .map(|(group, topic)| ((*group).to_owned(), (*topic).to_owned()))
            .collect(),
        orderly_groups: orderly.iter().map(|group| (*group).to_owned()).collect(),
        moved_after_ms: 500.0,
        clock_steps: Vec::new(),
    }
}

#[test]
fn a_clean_history_has_no_anomaly() {
    let mut story = Story::default();
    story.send(Outcome::Ok, SendMode::Sync, &["s0"], "t");
    story.send(Outcome::Ok, SendMode::Batch, &["b0", "b1"], "t");
    // Unknown: stored or not, either is fine; Fail: never acknowledged.
    story.send(Outcome::Unknown, SendMode::Async, &["a0"], "t");
    story.send(Outcome::Fail, SendMode::Sync, &["s1"], "t");
    story.deliver("g", "s0", "t", 0);
    story.deliver("g", "b0", "t", 1);
    // Again before any commit past it was read: within what a consumer may replay.
    story.deliver("g", "s0", "t", 0);
    story.committed("g", "t", 2);
    story.deliver("g", "b1", "t", 2);
    story.committed("g", "t", 3);
    story.log("t", &["s0", "b0", "b1"]);
    let verdict = check(&story.0, &expect(&[("g", "t")], &[]));
    assert_eq!(verdict.anomalies, vec![]);
    assert_eq!(verdict.counts.values_acknowledged, 3);
    assert_eq!(verdict.counts.redeliveries, 1);
    assert_eq!(verdict.counts.deliveries, 4);
    assert_eq!(verdict.counts.commit_readings, 2);
    assert_eq!(verdict.counts.sends.get("batch ok"), Some(&1));
}

#[test]
fn an_acknowledged_value_missing_from_the_log_is_a_lost_write() {
    let mut story = Story::default();
    let send = story.send(Outcome::Ok, SendMode::Async, &["a0"], "t");
    story.log("t", &[]);
    let anomalies = check(&story.0, &expect(&[], &[])).anomalies;
    assert_eq!(
        anomalies,
        vec![Anomaly::LostWrite {
            value: "a0".into(),
            send
        }]
    );
    assert!(anomalies[0].to_string().contains("lost acknowledged write"));
}

#[test]
fn a_value_stored_twice_is_a_duplicate() {
    let mut story = Story::default();
    story.send(Outcome::Unknown, SendMode::Sync, &["s0"], "t");
    story.log("t", &["s0", "s0"]);
    let anomalies = check(&story.0, &expect(&[], &[])).anomalies;
    assert!(
        matches!(&anomalies[..], [Anomaly::DuplicateInLog { value, places }] if value == "s0" && places.len() == 2),
        "{anomalies:?}"
    );
}

#[test]
fn a_send_slow_enough_to_be_moved_may_be_stored_twice() {
    let mut story = Story::default();
    story.0.push(Op {
        id: 0,
        process: "test".into(),
        invoked_ms: 0.0,
        completed_ms: 800.0,
        outcome: Outcome::Unknown,
        kind: Kind::Send {
            mode: SendMode::Sync,
            values: vec!["s0".into()],
            queue: None,
            offset: None,
        },
    });
    story.0.push(Op {
        id: 1,
        process: "test".into(),
        invoked_ms: 900.0,
        completed_ms: 900.0,
        outcome: Outcome::Ok,
        kind: Kind::LogRead {
            queue: queue("t", 0),
            values: vec![(0, "s0".into()), (1, "s0".into())],
        },
    });
    assert_eq!(check(&story.0, &expect(&[], &[])).anomalies, vec![]);
}

#[test]
fn a_value_never_sent_is_unexpected_in_the_log_and_in_a_delivery() {
    let mut story = Story::default();
    let read = story.log("t", &["ghost"]);
    let delivery = story.deliver("g", "ghost", "t", 0);
    let anomalies = check(&story.0, &expect(&[], &[])).anomalies;
    assert_eq!(
        anomalies,
        vec![
            Anomaly::Unexpected {
                value: "ghost".into(),
                op: read
            },
            Anomaly::Unexpected {
                value: "ghost".into(),
                op: delivery
            },
        ]
    );
}

#[test]
fn an_acknowledged_value_a_group_never_got_is_named_for_that_group() {
    let mut story = Story::default();
    let send = story.send(Outcome::Ok, SendMode::Sync, &["s0"], "t");
    story.send(Outcome::Ok, SendMode::Sync, &["u0"], "other");
    story.deliver("g1", "s0", "t", 0);
    story.log("t", &["s0"]);
    story.log("other", &["u0"]);
    let anomalies = check(&story.0, &expect(&[("g1", "t"), ("g2", "t")], &[])).anomalies;
    assert_eq!(
        anomalies,
        vec![Anomaly::NeverDelivered {
            group: "g2".into(),
            value: "s0".into(),
            send
        }]
    );
}

#[test]
fn a_commit_read_lower_than_before_goes_back_unless_an_operator_moved_it() {
    let mut story = Story::default();
    let high = story.committed("g", "t", 10);
    let low = story.committed("g", "t", 7);
    let anomalies = check(&story.0, &expect(&[], &[])).anomalies;
    assert_eq!(
        anomalies,
        vec![Anomaly::OffsetBackwards {
            group: "g".into(),
            queue: queue("t", 0),
            before: (high, 10),
            after: (low, 7)
        }]
    );

    let mut story = Story::default();
    story.committed("g", "t", 10);
    story.push(
        Outcome::Ok,
        Kind::ProgressMoved {
            group: "g".into(),
            topic: "t".into(),
        },
    );
    story.committed("g", "t", 7);
    assert_eq!(check(&story.0, &expect(&[], &[])).anomalies, vec![]);
}

#[test]
fn an_operator_move_counts_from_when_it_was_asked_for() {
    let mut story = Story::default();
    story.send(Outcome::Ok, SendMode::Sync, &["s0"], "t");
    story.deliver("g", "s0", "t", 0);
    story.committed("g", "t", 1);
    // Asked for at 3 ms, answered at 10 ms; the broker applied it (and the consumer followed)
    // before the answer came, and a reading asked for meanwhile still saw the old offset.
    story.0.push(Op {
        id: 3,
        process: "operator".into(),
        invoked_ms: 3.0,
        completed_ms: 10.0,
        outcome: Outcome::Ok,
        kind: Kind::ProgressMoved {
            group: "g".into(),
            topic: "t".into(),
        },
    });
    story.deliver("g", "s0", "t", 0);
    let stale = story.committed("g", "t", 1);
    story.0[stale as usize].invoked_ms = 4.0;
    story.0[stale as usize].completed_ms = 11.0;
    story.push(
        Outcome::Ok,
        Kind::Committed {
            group: "g".into(),
            queue: queue("t", 0),
            offset: 0,
        },
    );
    let last = story.0.len() - 1;
    story.0[last].invoked_ms = 12.0;
    story.0[last].completed_ms = 12.0;
    story.log("t", &["s0"]);
    let len = story.0.len() - 1;
    story.0[len].completed_ms = 13.0;
    let verdict = check(&story.0, &expect(&[("g", "t")], &[]));
    assert_eq!(verdict.anomalies, vec![]);
    assert_eq!(verdict.counts.redeliveries, 1);
}

#[test]
fn the_history_entry_of_a_move_does_not_shorten_its_window() {
    let mut story = Story::default();
    story.send(Outcome::Ok, SendMode::Sync, &["s0", "s1"], "t");
    story.deliver("g", "s0", "t", 0);
    story.deliver("g", "s1", "t", 1);
    // The operator's move: asked for at 3 ms, answered at 20 ms (the replicas were slow);
    // the broker's history says it applied it at 4 ms.
    let moved = |process: &str, invoked_ms: f64, completed_ms: f64| Op {
        id: 0,
        process: process.into(),
        invoked_ms,
        completed_ms,
        outcome: Outcome::Ok,
        kind: Kind::ProgressMoved {
            group: "g".into(),
            topic: "t".into(),
        },
    };
    story.0.push(Op {
        id: 3,
        ..moved("operator", 3.0, 20.0)
    });
    story.0.push(Op {
        id: 4,
        ..moved("history", 4.0, 5.0)
    });
    // Asked for at 10 ms, it still shows the offset from before the move, and the consumer,
    // told of the move at 19 ms, starts again from 0.
    let stale = story.committed("g", "t", 2);
    story.0[stale as usize].invoked_ms = 10.0;
    story.0[stale as usize].completed_ms = 11.0;
    let again = story.deliver("g", "s0", "t", 0);
    story.0[again as usize].invoked_ms = 21.0;
    story.0[again as usize].completed_ms = 21.0;
    story.log("t", &["s0", "s1"]);
    let last = story.0.len() - 1;
    story.0[last].completed_ms = 22.0;
    let verdict = check(&story.0, &expect(&[("g", "t")], &[]));
    assert_eq!(verdict.anomalies, vec![]);
}

#[test]
fn a_delivery_below_a_commit_already_read_is_a_redelivery_after_commit() {
    let mut story = Story::default();
    story.send(Outcome::Ok, SendMode::Sync, &["s0"], "t");
    story.deliver("g", "s0", "t", 0);
    let commit = story.committed("g", "t", 1);
    let again = story.deliver("g", "s0", "t", 0);
    story.log("t", &["s0"]);
    let anomalies = check(&story.0, &expect(&[("g", "t")], &[])).anomalies;
    assert_eq!(
        anomalies,
        vec![Anomaly::RedeliveredAfterCommit {
            group: "g".into(),
            value: "s0".into(),
            offset: 0,
            commit: (commit, 1),
            delivery: again
        }]
    );
}

#[test]
fn an_orderly_group_that_gets_a_later_value_first_is_an_order_violation() {
    let (first, second) = (ordered_value("k", 0), ordered_value("k", 1));
    let mut story = Story::default();
    story.send(Outcome::Ok, SendMode::Ordered, &[first.as_str()], "o");
    story.send(Outcome::Ok, SendMode::Ordered, &[second.as_str()], "o");
    let early = story.deliver("go", &second, "o", 1);
    story.deliver("go", &first, "o", 0);
    // A concurrent group may get them in any order.
    story.deliver("gc", &second, "o", 1);
    story.deliver("gc", &first, "o", 0);
    story.log("o", &[first.as_str(), second.as_str()]);
    let anomalies = check(&story.0, &expect(&[("go", "o"), ("gc", "o")], &["go"])).anomalies;
    assert_eq!(
        anomalies,
        vec![Anomaly::OrderViolation {
            group: "go".into(),
            key: "k".into(),
            delivered: (early, 1),
            missing: 0
        }]
    );
}

use crate::history::ordered_value;

fn fault(kind: crate::nemesis::FaultKind, started_ms: f64, overlapped: bool) -> FaultRecord {
    FaultRecord {
        kind,
        targets: vec!["a1".into()],
        set: Some("set-a".into()),
        started_ms,
        healed_ms: Some(started_ms + 4000.0),
        settled_ms: Some(started_ms + 5000.0),
        overlapped,
    }
}

#[test]
fn a_set_silent_past_the_bound_after_losing_its_master_is_unavailable() {
    use crate::nemesis::FaultKind;
    let mut story = Story::default();
    for at in [500.0, 12_500.0] {
        let id = story.send(Outcome::Ok, SendMode::Sync, &[&format!("s{at}")], "t");
        story.0[id as usize].invoked_ms = at;
        story.0[id as usize].completed_ms = at;
    }
    let faults = [fault(FaultKind::KillMaster, 1000.0, false)];
    assert_eq!(unavailability(&story.0, &faults), vec![11_500.0]);
    let anomalies = check_availability(&story.0, &faults);
    assert!(
        matches!(&anomalies[..], [Anomaly::Unavailable { ms, .. }] if *ms == 11_500.0),
        "{anomalies:?}"
    );
    // Not held to it: a fault that takes no master, and two faults at once.
    assert_eq!(
        check_availability(
            &story.0,
            &[fault(FaultKind::ClientsFromMaster, 1000.0, false)]
        ),
        vec![]
    );
    let pair = [
        fault(FaultKind::KillMaster, 1000.0, false),
        fault(FaultKind::KillSlave, 2000.0, true),
    ];
    assert_eq!(check_availability(&story.0, &pair), vec![]);
}

#[test]
fn a_value_a_pop_group_acknowledged_in_time_must_not_come_again() {
    let mut story = Story::default();
    story.send(Outcome::Ok, SendMode::Sync, &["s0", "s1"], "t");
    story.deliver("pop", "s0", "t", 0);
    story.deliver("pop", "s1", "t", 1);
    // s0 acknowledged within its invisibility; s1's acknowledgement came after its receipt
    // had expired (at 2 ms): it may come again.
    let ack = story.push(
        Outcome::Ok,
        Kind::PopAck {
            group: "pop".into(),
            value: "s0".into(),
            visible_until_ms: 1000.0,
        },
    );
    story.push(
        Outcome::Ok,
        Kind::PopAck {
            group: "pop".into(),
            value: "s1".into(),
            visible_until_ms: 2.0,
        },
    );
    story.deliver("pop", "s1", "t", 1);
    let again = story.deliver("pop", "s0", "t", 0);
    story.log("t", &["s0", "s1"]);
    assert_eq!(
        check(&story.0, &expect(&[("pop", "t")], &[])).anomalies,
        vec![Anomaly::PopAckedRedelivered {
            group: "pop".into(),
            value: "s0".into(),
            ack,
            delivery: again
        }]
    );
}

#[test]
fn a_pop_redelivery_a_stepped_clock_explains_is_counted_not_flagged() {
    let mut story = Story::default();
    story.send(Outcome::Ok, SendMode::Sync, &["s0"], "t");
    story.deliver("pop", "s0", "t", 0);
    story.push(
        Outcome::Ok,
        Kind::PopAck {
            group: "pop".into(),
            value: "s0".into(),
            visible_until_ms: 1000.0,
        },
    );
    story.deliver("pop", "s0", "t", 0);
    story.log("t", &["s0"]);
    let step = |set: &str, from_ms: f64, to_ms: f64| ClockStep {
        set: set.into(),
        from_ms,
        to_ms,
    };
    let mut expected = expect(&[("pop", "t")], &[]);
    expected.clock_steps = vec![step("set-a", 2.5, 10.0)];
    let verdict = check(&story.0, &expected);
    assert!(verdict.anomalies.is_empty(), "{:?}", verdict.anomalies);
    assert_eq!(verdict.counts.pop_redelivered_by_clock, 1);
    // A step on another set, or one over before the acknowledgement, explains nothing.
    for other in [step("set-b", 2.5, 10.0), step("set-a", 0.0, 1.0)] {
        expected.clock_steps = vec![other];
        assert_eq!(check(&story.0, &expected).anomalies.len(), 1);
    }
}

#[test]
fn a_pop_delivery_of_a_values_second_stored_copy_is_counted_not_flagged() {
    let mut story = Story::default();
    // The client retried a send that waited a second: the value is stored twice.
    let send = story.send(Outcome::Ok, SendMode::GrpcSync, &["r0"], "t");
    story.0[send as usize].invoked_ms = -1000.0;
    story.deliver("pop", "r0", "t", 0);
    story.push(
        Outcome::Ok,
        Kind::PopAck {
            group: "pop".into(),
            value: "r0".into(),
            visible_until_ms: 1000.0,
        },
    );
    story.deliver("pop", "r0", "t", 1);
    story.log("t", &["r0", "r0"]);
    let verdict = check(&story.0, &expect(&[("pop", "t")], &[]));
    assert!(verdict.anomalies.is_empty(), "{:?}", verdict.anomalies);
    assert_eq!(verdict.counts.pop_redelivered_stored_twice, 1);
}

#[test]
fn a_committed_transaction_is_a_write_and_a_rolled_back_one_is_never_seen() {
    let mut story = Story::default();
    let committed = story.send(Outcome::Ok, SendMode::Transaction, &["tc0"], "t");
    story.send(Outcome::Ok, SendMode::Transaction, &["tr1"], "t");
    story.send(Outcome::Ok, SendMode::Transaction, &["tuc2"], "t");
    story.send(Outcome::Ok, SendMode::Transaction, &["tur3"], "t");
    story.deliver("g", "tuc2", "t", 0);
    let delivered = story.deliver("g", "tur3", "t", 1);
    let read = story.log("t", &["tuc2", "tur3"]);
    let verdict = check(&story.0, &expect(&[("g", "t")], &[]));
    assert_eq!(
        verdict.anomalies,
        vec![
            Anomaly::RolledBackVisible {
                value: "tur3".into(),
                op: read
            },
            Anomaly::LostWrite {
                value: "tc0".into(),
                send: committed
            },
            Anomaly::RolledBackVisible {
                value: "tur3".into(),
                op: delivered
            },
            Anomaly::NeverDelivered {
                group: "g".into(),
                value: "tc0".into(),
                send: committed
            },
        ]
    );
    assert_eq!(verdict.counts.values_acknowledged, 2, "the two that commit");
    assert!(verdict.anomalies[0]
        .to_string()
        .contains("rolled-back transaction visible"));
}
