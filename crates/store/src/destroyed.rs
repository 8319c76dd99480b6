//! Destroyed queues: for each (topic, queue id) whose consume queue was removed while its
//! records were still in the commit log (a deleted or unused topic, a slave following a master
//! that restarted a queue), the commit-log offset at which it was removed.
//!
//! Recovery rebuilds consume queues from the records after its scan start, and a record whose
//! queue offset does not follow its queue's end ends the scan (a damaged header). The records
//! of a destroyed queue would do exactly that — either into a missing queue, or before the
//! records of the queue that replaced it, which starts again at offset 0 — and so cut the log
//! and lose everything after them. So recovery skips every record of a destroyed queue below
//! its mark. A mark is dropped once retention has removed the log below it.
//!
//! The file (`destroyed-queues` in the store root, one `offset queue-id topic` line per mark)
//! is replaced atomically and written before the queue's files are removed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use tidemark_storage::atomic_file;

use crate::error::{Result, StoreError};
use crate::io::Storage;

type Marks = BTreeMap<(String, i32), u64>;

pub(crate) struct DestroyedQueues {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    marks: Mutex<Marks>,
}

fn parse(bytes: &[u8]) -> std::result::Result<Marks, String> {
    let text = std::str::from_utf8(bytes).map_err(|error| error.to_string())?;
    let mut marks = Marks::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let mut fields = line.splitn(3, ' ');
        let (Some(at), Some(queue_id), Some(topic)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(format!("line {line:?} is not `offset queue-id topic`"));
        };
        let at = at
            .parse::<u64>()
            .map_err(|_| format!("line {line:?}: bad offset"))?;
        let queue_id = queue_id
            .parse::<i32>()
            .map_err(|_| format!("line {line:?}: bad queue id"))?;
        marks.insert((topic.to_owned(), queue_id), at);
    }
    Ok(marks)
}

fn render(marks: &Marks) -> Vec<u8> {
    let mut text = String::new();
    for ((topic, queue_id), at) in marks {
        text.push_str(&format!("{at} {queue_id} {topic}\n"));
    }
    text.into_bytes()
}

impl DestroyedQueues {
    pub fn open(storage: Arc<dyn Storage>, path: PathBuf) -> Result<Self> {
        let marks = atomic_file::load(storage.as_ref(), &path, parse)
            .map_err(|error| StoreError::Unrecoverable {
                reason: format!("destroyed-queue marks: {error}"),
            })?
            .unwrap_or_default();
        Ok(DestroyedQueues {
            storage,
            path,
            marks: Mutex::new(marks),
        })
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the record of `topic`/`queue_id` at commit-log offset `at` belongs to a
    /// destroyed queue.
    pub fn covers(&self, topic: &str, queue_id: i32, at: u64) -> bool {
        self.marks()
            .get(&(topic.to_owned(), queue_id))
            .is_some_and(|mark| at < *mark)
    }

    /// Whether the queue was ever destroyed (since retention last passed its mark).
    pub fn is_marked(&self, topic: &str, queue_id: i32) -> bool {
        self.marks().contains_key(&(topic.to_owned(), queue_id))
    }

    /// Every mark, for completing destroys a crash interrupted.
    pub fn all(&self) -> Vec<((String, i32), u64)> {
        self.marks()
            .iter()
            .map(|(key, at)| (key.clone(), *at))
            .collect()
    }

    /// Durably marks the queues destroyed at `at`, dropping marks retention made useless
    /// (below `log_min`).
    pub fn record(&self, queues: &[(String, i32)], at: u64, log_min: u64) -> Result<()> {
        let mut marks = self.marks();
        let mut next = marks.clone();
        next.retain(|_, mark| *mark > log_min);
        for key in queues {
            next.insert(key.clone(), at);
        }
        atomic_file::write_atomically(self.storage.as_ref(), &self.path, &render(&next), false)
            .map_err(|error| match error {
                atomic_file::PersistError::Io { op, path, source } => StoreError::io(
                    op,
                    path,
                    std::io::Error::new(source.kind(), source.to_string()),
                ),
                other => StoreError::Unrecoverable {
                    reason: format!("writing destroyed-queue marks: {other}"),
                },
            })?;
        *marks = next;
        Ok(())
    }

    /// After the log was cut back to `offset`: records written from there on are new, so no
    /// mark reaches past it.
    pub fn clamp_to(&self, offset: u64) -> Result<()> {
        let mut marks = self.marks();
        if marks.values().all(|mark| *mark <= offset) {
            return Ok(());
        }
        let mut next = marks.clone();
        for mark in next.values_mut() {
            *mark = (*mark).min(offset);
        }
        atomic_file::write_atomically(self.storage.as_ref(), &self.path, &render(&next), false)
            .map_err(|error| StoreError::Unrecoverable {
                reason: format!("writing destroyed-queue marks: {error}"),
            })?;
        *marks = next;
        Ok(())
    }

    /// Drops the marks below `log_min`; writes the file only when one went.
    pub fn prune(&self, log_min: u64) -> Result<()> {
        let stale = self.marks().values().any(|mark| *mark <= log_min);
        if stale {
            self.record(&[], 0, log_min)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimStorage;

    #[test]
    fn marks_survive_reopening_and_go_once_the_log_passed_them() {
        let storage: Arc<dyn Storage> = Arc::new(SimStorage::new());
        let path = PathBuf::from("/store/destroyed-queues");
        let marks = DestroyedQueues::open(storage.clone(), path.clone()).expect("open");
        marks
            .record(&[("T".into(), 0), ("%RETRY%g".into(), 1)], 500, 0)
            .expect("record");
        marks.record(&[("U".into(), 3)], 900, 0).expect("record");
        let reopened = DestroyedQueues::open(storage.clone(), path.clone()).expect("reopen");
        assert!(reopened.covers("T", 0, 499));
        assert!(
            !reopened.covers("T", 0, 500),
            "records from the mark on are the new queue's"
        );
        assert!(!reopened.covers("T", 1, 10), "another queue of the topic");
        assert!(reopened.covers("%RETRY%g", 1, 0));
        assert!(reopened.covers("U", 3, 899));
        reopened.prune(600).expect("prune");
        let pruned = DestroyedQueues::open(storage, path).expect("reopen");
        assert_eq!(pruned.all(), vec![(("U".to_owned(), 3), 900)]);
    }

    #[test]
    fn a_damaged_file_is_an_error_not_an_empty_table() {
        assert!(parse(b"12 x T\n").is_err());
        assert!(parse(b"12\n").is_err());
        assert_eq!(parse(b"").expect("empty").len(), 0);
    }
}
