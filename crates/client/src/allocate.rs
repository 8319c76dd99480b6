//! Queue allocation among the consumers of a group (Java `AllocateMessageQueueStrategy`).
//!
//! Every member computes its own share from the same sorted inputs, with no coordination, so
//! all members of a group — Java or Rust — must use the same strategy with the same arithmetic.

use tidemark_protocol::body::MessageQueue;

mod consistent_hash;

pub use consistent_hash::ConsistentHashRing;

/// How a group's queues are split among its consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocateStrategy {
    /// Contiguous blocks, the first `queues % consumers` members taking one more
    /// (`AllocateMessageQueueAveragely`, RocketMQ's default).
    #[default]
    Averagely,
    /// Queue `i` goes to consumer `i % consumers` (`AllocateMessageQueueAveragelyByCircle`).
    AveragelyByCircle,
    /// A hash ring of the consumers, `virtual_nodes` points each
    /// (`AllocateMessageQueueConsistentHash`; Java's default is 10).
    ConsistentHash { virtual_nodes: usize },
}

impl AllocateStrategy {
    /// Java's strategy name (`getName()`), reported in heartbeats and running info.
    pub fn name(&self) -> &'static str {
        match self {
            AllocateStrategy::Averagely => "AVG",
            AllocateStrategy::AveragelyByCircle => "AVG_BY_CIRCLE",
            AllocateStrategy::ConsistentHash { .. } => "CONSISTENT_HASH",
        }
    }

    /// The queues `me` should consume. `queues` and `consumers` must be sorted as Java sorts them
    /// (`MessageQueue` order and string order); a consumer not in the list gets nothing.
    pub fn allocate(
        &self,
        me: &str,
        queues: &[MessageQueue],
        consumers: &[String],
    ) -> Vec<MessageQueue> {
        let Some(index) = consumers.iter().position(|id| id == me) else {
            return Vec::new();
        };
        if queues.is_empty() {
            return Vec::new();
        }
        match self {
            AllocateStrategy::Averagely => averagely(index, queues, consumers.len()),
            AllocateStrategy::AveragelyByCircle => queues
                .iter()
                .enumerate()
                .skip(index)
                .filter(|(position, _)| position % consumers.len() == index)
                .map(|(_, queue)| queue.clone())
                .collect(),
            AllocateStrategy::ConsistentHash { virtual_nodes } => {
                let ring = ConsistentHashRing::new(consumers, *virtual_nodes);
                queues
                    .iter()
                    .filter(|queue| ring.owner_of(queue) == Some(me))
                    .cloned()
                    .collect()
            }
        }
    }
}

fn averagely(index: usize, queues: &[MessageQueue], consumer_count: usize) -> Vec<MessageQueue> {
    let total = queues.len();
    let remainder = total % consumer_count;
    let gets_extra = remainder > 0 && index < remainder;
    let share = if total <= consumer_count {
        1
    } else if gets_extra {
        total / consumer_count + 1
    } else {
        total / consumer_count
    };
    let start = if gets_extra {
        index * share
    } else {
        index * share + remainder
    };
    let count = share.min(total.saturating_sub(start));
    queues.iter().skip(start).take(count).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn queues(count: i32) -> Vec<MessageQueue> {
        (0..count)
            .map(|id| MessageQueue::new("T", "b", id))
            .collect()
    }

    fn ids(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("10.0.0.{i}@pid")).collect()
    }

    fn owned(strategy: AllocateStrategy, queue_count: i32, consumer_count: usize) -> Vec<Vec<i32>> {
        let all = queues(queue_count);
        let consumers = ids(consumer_count);
        consumers
            .iter()
            .map(|me| {
                strategy
                    .allocate(me, &all, &consumers)
                    .iter()
                    .map(|queue| queue.queue_id)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn averagely_matches_javas_blocks() {
        // Worked examples of AllocateMessageQueueAveragely.
        assert_eq!(
            owned(AllocateStrategy::Averagely, 8, 3),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7]]
        );
        assert_eq!(
            owned(AllocateStrategy::Averagely, 4, 2),
            vec![vec![0, 1], vec![2, 3]]
        );
        assert_eq!(
            owned(AllocateStrategy::Averagely, 2, 3),
            vec![vec![0], vec![1], vec![]]
        );
    }

    #[test]
    fn by_circle_deals_queues_round_robin() {
        assert_eq!(
            owned(AllocateStrategy::AveragelyByCircle, 8, 3),
            vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]]
        );
    }

    /// Expected shares printed by rocketmq-client 4.9.8's three strategies for 12 queues on two
    /// brokers and three consumers (a one-off `javac`/`java` run against the Maven jars).
    #[test]
    fn shares_match_rocketmq_client_4_9_8() {
        let all: Vec<MessageQueue> = ["broker-a", "broker-b"]
            .iter()
            .flat_map(|broker| (0..6).map(move |id| MessageQueue::new("TopicTest", *broker, id)))
            .collect();
        let consumers: Vec<String> = ["127.0.0.1@1001#1", "127.0.0.1@1002#2", "127.0.0.1@1003#3"]
            .map(String::from)
            .to_vec();
        let java = [
            (
                AllocateStrategy::Averagely,
                ["a0 a1 a2 a3", "a4 a5 b0 b1", "b2 b3 b4 b5"],
            ),
            (
                AllocateStrategy::AveragelyByCircle,
                ["a0 a3 b0 b3", "a1 a4 b1 b4", "a2 a5 b2 b5"],
            ),
            (
                AllocateStrategy::ConsistentHash { virtual_nodes: 10 },
                ["b0 b1 b2", "a1 a2 a3 a4 a5 b3 b4", "a0 b5"],
            ),
        ];
        for (strategy, shares) in java {
            for (consumer, expected) in consumers.iter().zip(shares) {
                let got: Vec<String> = strategy
                    .allocate(consumer, &all, &consumers)
                    .iter()
                    .map(|queue| format!("{}{}", &queue.broker_name[7..], queue.queue_id))
                    .collect();
                assert_eq!(
                    got.join(" "),
                    expected,
                    "{} for {consumer}",
                    strategy.name()
                );
            }
        }
    }

    #[test]
    fn a_consumer_not_in_the_list_gets_nothing() {
        let all = queues(4);
        assert!(AllocateStrategy::Averagely
            .allocate("x", &all, &ids(2))
            .is_empty());
    }

    #[test]
    fn every_strategy_assigns_each_queue_exactly_once() {
        let strategies = [
            AllocateStrategy::Averagely,
            AllocateStrategy::AveragelyByCircle,
            AllocateStrategy::ConsistentHash { virtual_nodes: 10 },
        ];
        for strategy in strategies {
            for queue_count in 0..20 {
                for consumer_count in 1..7 {
                    let shares = owned(strategy, queue_count, consumer_count);
                    let mut seen = BTreeSet::new();
                    for id in shares.iter().flatten() {
                        assert!(seen.insert(*id), "{strategy:?} gave queue {id} twice");
                    }
                    assert_eq!(
                        seen.len(),
                        queue_count as usize,
                        "{strategy:?} lost a queue"
                    );
                }
            }
        }
    }
}
