//! The consumer offset table against its rules, over random sequences of commits, resets and
//! drops: a commit never lowers a stored offset unless that offset lies past the queue's end;
//! only a reset moves backwards, and until a client commits the reset offset every other commit
//! is ignored; persisting and reloading gives the same offsets.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tidemark_broker::offsets::{CommitOutcome, ConsumerOffsetTable};

#[derive(Debug, Clone)]
enum Operation {
    Commit {
        topic: u8,
        group: u8,
        queue: u8,
        offset: i64,
        queue_max: i64,
    },
    Reset {
        topic: u8,
        group: u8,
        queue: u8,
        offset: i64,
    },
    DropGroup(u8),
    DropTopic(u8),
}

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        8 => (0u8..3, 0u8..3, 0u8..4, -2i64..200, 0i64..220).prop_map(|(topic, group, queue, offset, queue_max)| Operation::Commit { topic, group, queue, offset, queue_max }),
        1 => (0u8..3, 0u8..3, 0u8..4, 0i64..200).prop_map(|(topic, group, queue, offset)| Operation::Reset { topic, group, queue, offset }),
        1 => (0u8..3).prop_map(Operation::DropGroup),
        1 => (0u8..3).prop_map(Operation::DropTopic),
    ]
}

fn name(prefix: &str, index: u8) -> String {
    format!("{prefix}{index}")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn offsets_follow_their_rules(operations in proptest::collection::vec(operation(), 1..200)) {
        let mut table = ConsumerOffsetTable::new();
        let mut model: BTreeMap<(u8, u8, u8), i64> = BTreeMap::new();
        // Queues reset and not yet confirmed (the clock stands still, so fences never lapse here).
        let mut fences: BTreeMap<(u8, u8, u8), i64> = BTreeMap::new();
        for operation in operations {
            match operation {
                Operation::Commit { topic, group, queue, offset, queue_max } => {
                    let before = model.get(&(topic, group, queue)).copied();
                    let outcome = table.commit(&name("T", topic), &name("g", group), i32::from(queue), offset, queue_max, 0);
                    if offset >= 0 {
                        if let Some(fence) = fences.get(&(topic, group, queue)).copied() {
                            if offset != fence {
                                prop_assert_eq!(outcome, CommitOutcome::IgnoredDuringReset { reset_offset: fence });
                                continue;
                            }
                            fences.remove(&(topic, group, queue));
                        }
                    }
                    let expected = match before {
                        _ if offset < 0 => before,
                        None => Some(offset),
                        Some(stored) if offset >= stored => Some(offset),
                        Some(stored) if stored > queue_max => Some(offset),
                        Some(stored) => Some(stored),
                    };
                    if let (Some(stored), Some(after)) = (before, expected) {
                        prop_assert!(after >= stored || stored > queue_max, "only a stored offset past the queue may go down");
                    }
                    match outcome {
                        CommitOutcome::Rejected => prop_assert!(offset < 0),
                        CommitOutcome::IgnoredBackwards { stored } => prop_assert_eq!(Some(stored), before),
                        CommitOutcome::Corrected { previous } => prop_assert!(previous > queue_max),
                        CommitOutcome::Created | CommitOutcome::Advanced { .. } => {}
                        CommitOutcome::IgnoredDuringReset { .. } => prop_assert!(false, "no fence was up"),
                        CommitOutcome::Rewound { .. } => prop_assert!(false, "plain commits never rewind"),
                    }
                    if let Some(value) = expected {
                        model.insert((topic, group, queue), value);
                    }
                }
                Operation::Reset { topic, group, queue, offset } => {
                    table.reset(&name("T", topic), &name("g", group), i32::from(queue), offset, 0);
                    model.insert((topic, group, queue), offset);
                    fences.insert((topic, group, queue), offset);
                }
                Operation::DropGroup(group) => {
                    table.drop_group(&name("g", group));
                    model.retain(|(_, g, _), _| *g != group);
                    fences.retain(|(_, g, _), _| *g != group);
                }
                Operation::DropTopic(topic) => {
                    table.drop_topic(&name("T", topic));
                    model.retain(|(t, _, _), _| *t != topic);
                    fences.retain(|(t, _, _), _| *t != topic);
                }
            }
            for ((topic, group, queue), value) in &model {
                prop_assert_eq!(table.query(&name("T", *topic), &name("g", *group), i32::from(*queue)), Some(*value));
            }
        }
        prop_assert_eq!(ConsumerOffsetTable::from_wrapper(&table.to_wrapper()).to_wrapper(), table.to_wrapper());
    }
}
