//! The entries a broker keeps, oldest first, within their bounds; and where a group stood at a
//! past time according to them.

use std::collections::{BTreeMap, HashMap, VecDeque};

use tidemark_storage::journal::JournalCodec;

use super::entry::{put_str, ChangeKind, HistoryEntry, Reader};

/// How much history is kept: entries older than `max_age_ms` go at compaction, and the oldest
/// go whenever the entries weigh more than `max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryBounds {
    pub max_bytes: usize,
    pub max_age_ms: i64,
}

/// The kept entries, their weight, and each queue's last recorded offset.
#[derive(Debug, Default)]
pub struct HistoryLog {
    entries: VecDeque<HistoryEntry>,
    weight: usize,
    next_id: u64,
    /// (group, topic, queue) → the offset the newest entry naming it left (what a checkpoint
    /// compares with, so only queues that moved are written).
    last_known: HashMap<(String, String, i32), Option<i64>>,
}

impl HistoryLog {
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &HistoryEntry> {
        self.entries.iter()
    }

    pub fn weight(&self) -> usize {
        self.weight
    }

    pub fn last_known(&self, group: &str, topic: &str, queue_id: i32) -> Option<Option<i64>> {
        self.last_known
            .get(&(group.to_owned(), topic.to_owned(), queue_id))
            .copied()
    }

    /// Adds an entry, then drops the oldest past the size bound. Ids increase along the log: an
    /// entry whose id some kept entries already have or passed replaces them (a replica's own
    /// entries give way to its master's, which take the same ids; the journal replays this
    /// the same way).
    pub fn push(&mut self, entry: HistoryEntry, bounds: &HistoryBounds) {
        if entry.id < self.next_id {
            self.drop_from(entry.id);
        }
        self.next_id = self.next_id.max(entry.id + 1);
        for queue in &entry.queues {
            self.last_known.insert(
                (entry.group.clone(), queue.topic.clone(), queue.queue_id),
                queue.after,
            );
        }
        self.weight += entry.weight();
        self.entries.push_back(entry);
        while self.weight > bounds.max_bytes && self.entries.len() > 1 {
            self.drop_oldest();
        }
    }

    /// Drops entries older than the age bound (at compaction).
    pub fn expire(&mut self, now_ms: i64, bounds: &HistoryBounds) {
        let cutoff = now_ms.saturating_sub(bounds.max_age_ms);
        while self
            .entries
            .front()
            .is_some_and(|entry| entry.time_ms < cutoff)
        {
            self.drop_oldest();
        }
    }

    /// Empties the log; the ids go on from `next_id` (a master's whole copy follows).
    pub fn clear(&mut self, next_id: u64) {
        *self = HistoryLog {
            next_id,
            ..HistoryLog::default()
        };
    }

    /// Drops the newest entries down to (and with) the one numbered `id`.
    fn drop_from(&mut self, id: u64) {
        let mut dropped = false;
        while self.entries.back().is_some_and(|entry| entry.id >= id) {
            if let Some(entry) = self.entries.pop_back() {
                self.weight -= entry.weight();
                dropped = true;
            }
        }
        if dropped {
            self.last_known.clear();
            for entry in &self.entries {
                for queue in &entry.queues {
                    self.last_known.insert(
                        (entry.group.clone(), queue.topic.clone(), queue.queue_id),
                        queue.after,
                    );
                }
            }
        }
    }

    fn drop_oldest(&mut self) {
        if let Some(entry) = self.entries.pop_front() {
            self.weight -= entry.weight();
        }
    }

    /// Where `group` stood at `time_ms` in each queue the history names (of `topic` only, if
    /// given): the offset the last entry at or before that time left; for a queue no entry
    /// names until later, the `before` of the first change after it (a checkpoint's `before`
    /// is only the previous checkpoint's value, so it does not count).
    pub fn position_at(
        &self,
        group: &str,
        topic: Option<&str>,
        time_ms: i64,
    ) -> BTreeMap<(String, i32), Option<i64>> {
        let mut at = BTreeMap::new();
        let mut later = BTreeMap::new();
        let named = self
            .entries
            .iter()
            .filter(|entry| entry.group == group)
            .flat_map(|entry| entry.queues.iter().map(move |queue| (entry, queue)))
            .filter(|(_, queue)| topic.is_none_or(|topic| queue.topic == topic));
        for (entry, queue) in named {
            let key = (queue.topic.clone(), queue.queue_id);
            if entry.time_ms <= time_ms {
                at.insert(key, queue.after);
            } else if entry.kind != ChangeKind::Checkpoint && !at.contains_key(&key) {
                later.entry(key).or_insert(queue.before);
            }
        }
        for (key, before) in later {
            at.entry(key).or_insert(before);
        }
        at
    }
}

/// How the history is journaled: each record is one entry; a snapshot is the next id and the
/// kept entries.
#[derive(Debug)]
pub struct HistoryCodec {
    pub bounds: HistoryBounds,
}

impl JournalCodec for HistoryCodec {
    type State = HistoryLog;

    fn fresh(&self) -> Result<HistoryLog, String> {
        Ok(HistoryLog::default())
    }

    fn restore(&self, snapshot: &[u8]) -> Result<HistoryLog, String> {
        let mut reader = Reader {
            bytes: snapshot,
            at: 0,
        };
        let next_id = reader.u64("next id")?;
        let count = reader.u32("entry count")?;
        let mut entries = Vec::new();
        for _ in 0..count {
            entries.push(HistoryEntry::decode(&mut reader)?);
        }
        // The details follow the entries (a snapshot written before details has none).
        if reader.remaining() != 0 {
            let details = reader.u32("detail count")?;
            for _ in 0..details {
                let index = reader.u32("detail's entry")? as usize;
                let detail = reader.string("detail")?;
                let entry = entries
                    .get_mut(index)
                    .ok_or(format!("a detail of entry {index} of {count}"))?;
                entry.detail = detail;
            }
        }
        if reader.remaining() != 0 {
            return Err(format!("{} bytes after the entries", reader.remaining()));
        }
        let mut log = HistoryLog::default();
        for entry in entries {
            log.push(entry, &self.bounds);
        }
        log.next_id = log.next_id.max(next_id);
        Ok(log)
    }

    fn apply(&self, state: &mut HistoryLog, record: &[u8]) -> Result<(), String> {
        state.push(HistoryEntry::from_record(record)?, &self.bounds);
        Ok(())
    }

    fn snapshot(&self, state: &HistoryLog) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + state.weight);
        out.extend_from_slice(&state.next_id.to_be_bytes());
        out.extend_from_slice(&(state.entries.len() as u32).to_be_bytes());
        for entry in &state.entries {
            entry.encode(&mut out);
        }
        let detailed: Vec<(usize, &HistoryEntry)> = state
            .entries
            .iter()
            .enumerate()
            .filter(|(_, entry)| !entry.detail.is_empty())
            .collect();
        if !detailed.is_empty() {
            out.extend_from_slice(&(detailed.len() as u32).to_be_bytes());
            for (index, entry) in detailed {
                out.extend_from_slice(&(index as u32).to_be_bytes());
                put_str(&mut out, &entry.detail);
            }
        }
        out
    }
}
