//! Destroying consume queues an operator no longer wants: those of a deleted or unused topic
//! (RocketMQ's `deleteTopics` / `cleanUnusedTopic`) and those whose every record retention has
//! removed (`cleanExpiredConsumerQueue`). A queue made again afterwards starts at offset 0, as
//! in RocketMQ; a group's offset past its end is corrected by the next pull.

use std::sync::Arc;

use tracing::info;

use super::{Inner, MessageStore};
use crate::consume_queue::ConsumeQueue;
use crate::error::Result;

impl MessageStore {
    /// Topics that have consume queues in this store.
    pub fn queue_topics(&self) -> Vec<String> {
        self.inner.queues.topics()
    }

    /// Destroys every queue of `topic`; returns how many there were.
    pub fn destroy_topic_queues(&self, topic: &str) -> Result<usize> {
        let inner = &self.inner;
        let _appends = inner.append_lock();
        let queues = inner.queues.of_topic(topic);
        if queues.is_empty() {
            return Ok(0);
        }
        // Their records stay in the log until retention: recovery must not rebuild them.
        let keys: Vec<(String, i32)> = queues
            .iter()
            .map(|queue| (queue.topic.clone(), queue.queue_id))
            .collect();
        inner.destroyed.record(
            &keys,
            inner.commit_log.written(),
            inner.commit_log.min_offset(),
        )?;
        inner.destroy_queues(&queues)?;
        info!(topic, queues = queues.len(), "consume queues destroyed");
        Ok(queues.len())
    }

    /// Destroys the queues whose last record lies below the commit log's minimum offset,
    /// except those of topics `keep` names; empty queues stay (one may have just been made).
    /// Returns the queues that went.
    pub fn destroy_expired_queues(
        &self,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, i32)>> {
        let inner = &self.inner;
        let expired_at = |queue: &ConsumeQueue, log_min: u64| -> Result<bool> {
            Ok(queue.last_record_end()?.is_some_and(|end| end <= log_min))
        };
        // Every queue is read without holding up appends; only the few candidates are checked
        // again under the append lock (one may have taken an append meanwhile).
        let mut candidates = Vec::new();
        for queue in inner.queues.all() {
            if !keep(&queue.topic) && expired_at(&queue, inner.commit_log.min_offset())? {
                candidates.push(queue);
            }
        }
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let _appends = inner.append_lock();
        let log_min = inner.commit_log.min_offset();
        let mut expired = Vec::new();
        for queue in candidates {
            if !queue.is_destroyed() && expired_at(&queue, log_min)? {
                expired.push(queue);
            }
        }
        // No mark: recovery never reads below the log's minimum offset.
        inner.destroy_queues(&expired)?;
        for queue in &expired {
            info!(topic = %queue.topic, queue = queue.queue_id, log_min, "expired consume queue destroyed");
        }
        Ok(expired
            .iter()
            .map(|queue| (queue.topic.clone(), queue.queue_id))
            .collect())
    }
}

impl Inner {
    /// Takes the queues out of the table and removes their files. The caller holds the append
    /// lock, so no append is between looking a queue up and writing to it.
    pub(super) fn destroy_queues(&self, queues: &[Arc<ConsumeQueue>]) -> Result<()> {
        for queue in queues {
            self.queues.remove(&queue.topic, queue.queue_id);
            queue.destroy()?;
        }
        Ok(())
    }
}
