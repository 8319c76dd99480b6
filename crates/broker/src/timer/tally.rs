//! The real topics of pending timer messages, for RocketMQ 5's timer families: how many each
//! topic has waiting (`rocketmq_timing_messages`), and how many each topic's messages entered
//! and left the timer since start (`rocketmq_timer_enqueue_total` / `…_dequeue_total`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// One topic's figures.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TopicTally {
    pub pending: u64,
    pub entered: u64,
    pub delivered: u64,
}

/// The topic of each pending timer message (by its timer-queue offset), names interned.
#[derive(Debug, Default)]
pub(crate) struct PendingTopics {
    of_offset: HashMap<i64, Arc<str>>,
    by_topic: HashMap<Arc<str>, TopicTally>,
}

impl PendingTopics {
    /// The message at `offset` of `topic` is pending; seen again, it counts once.
    pub fn add(&mut self, offset: i64, topic: &str) {
        if self.of_offset.contains_key(&offset) {
            return;
        }
        let name = match self.by_topic.get_key_value(topic) {
            Some((name, _)) => name.clone(),
            None => Arc::from(topic),
        };
        let tally = self.by_topic.entry(name.clone()).or_default();
        tally.pending += 1;
        tally.entered += 1;
        self.of_offset.insert(offset, name);
    }

    /// The message at `offset` is no longer pending: `delivered`, or given up.
    pub fn remove(&mut self, offset: i64, delivered: bool) {
        let Some(name) = self.of_offset.remove(&offset) else {
            return;
        };
        if let Some(tally) = self.by_topic.get_mut(&name) {
            tally.pending = tally.pending.saturating_sub(1);
            if delivered {
                tally.delivered += 1;
            }
        }
    }

    /// Every topic's figures, by name.
    pub fn tallies(&self) -> BTreeMap<String, TopicTally> {
        self.by_topic
            .iter()
            .map(|(name, tally)| (name.to_string(), *tally))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_counts_once_until_it_leaves() {
        let mut topics = PendingTopics::default();
        topics.add(1, "Orders");
        topics.add(1, "Orders");
        topics.add(2, "Orders");
        topics.add(3, "Audit");
        topics.remove(2, true);
        topics.remove(3, false);
        topics.remove(9, true);
        let tallies = topics.tallies();
        assert_eq!(
            tallies["Orders"],
            TopicTally {
                pending: 1,
                entered: 2,
                delivered: 1
            }
        );
        assert_eq!(
            tallies["Audit"],
            TopicTally {
                pending: 0,
                entered: 1,
                delivered: 0
            }
        );
    }
}
