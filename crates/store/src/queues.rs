//! The store's consume queues by topic and queue id: those on disk are opened with the store,
//! the others created on first use (an append, a replicated record, recovery).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

use crate::consume_queue::ConsumeQueue;
use crate::error::{io_error, Result};
use crate::io::Storage;

/// Queues by topic, then queue id (nested so lookups by `&str` allocate nothing).
type ByTopic = HashMap<String, HashMap<i32, Arc<ConsumeQueue>>>;

pub(crate) struct QueueTable {
    storage: Arc<dyn Storage>,
    /// `consumequeue/`: a directory per topic, and in it one per queue id.
    dir: PathBuf,
    entries_per_file: u64,
    queues: RwLock<ByTopic>,
}

impl QueueTable {
    /// Opens every queue found under `dir`.
    pub fn open(storage: Arc<dyn Storage>, dir: PathBuf, entries_per_file: u64) -> Result<Self> {
        let mut queues = ByTopic::new();
        for topic in storage.list(&dir).map_err(io_error("list", &dir))? {
            if !topic.is_dir {
                continue;
            }
            let topic_dir = dir.join(&topic.name);
            for queue in storage
                .list(&topic_dir)
                .map_err(io_error("list", &topic_dir))?
            {
                let Ok(queue_id) = queue.name.parse::<i32>() else {
                    continue;
                };
                if !queue.is_dir {
                    continue;
                }
                let consume_queue = ConsumeQueue::open(
                    storage.clone(),
                    topic_dir.join(&queue.name),
                    topic.name.clone(),
                    queue_id,
                    entries_per_file,
                )?;
                queues
                    .entry(topic.name.clone())
                    .or_default()
                    .insert(queue_id, Arc::new(consume_queue));
            }
        }
        Ok(QueueTable {
            storage,
            dir,
            entries_per_file,
            queues: RwLock::new(queues),
        })
    }

    /// The queue, if it exists.
    pub fn get(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)?
            .get(&queue_id)
            .cloned()
    }

    /// The queue, created (files and all) if it does not exist yet.
    pub fn get_or_create(&self, topic: &str, queue_id: i32) -> Result<Arc<ConsumeQueue>> {
        if let Some(queue) = self.get(topic, queue_id) {
            return Ok(queue);
        }
        let mut queues = self.queues.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queues.get(topic).and_then(|queues| queues.get(&queue_id)) {
            return Ok(queue.clone());
        }
        let dir = self.dir.join(topic).join(queue_id.to_string());
        let queue = Arc::new(ConsumeQueue::open(
            self.storage.clone(),
            dir,
            topic.to_owned(),
            queue_id,
            self.entries_per_file,
        )?);
        queues
            .entry(topic.to_owned())
            .or_default()
            .insert(queue_id, queue.clone());
        Ok(queue)
    }

    /// Takes the queue out of the table (its files stay until it is destroyed).
    pub fn remove(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        let mut queues = self.queues.write().unwrap_or_else(PoisonError::into_inner);
        let by_id = queues.get_mut(topic)?;
        let queue = by_id.remove(&queue_id);
        if by_id.is_empty() {
            queues.remove(topic);
        }
        queue
    }

    /// The queues of one topic.
    pub fn of_topic(&self, topic: &str) -> Vec<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(topic)
            .map(|queues| queues.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Topics that have at least one queue.
    pub fn topics(&self) -> Vec<String> {
        self.queues
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// Every queue, in no particular order.
    pub fn all(&self) -> Vec<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .flat_map(|queues| queues.values().cloned())
            .collect()
    }
}
