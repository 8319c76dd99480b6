//! POP progress as plain data, and how it is journaled (`config/popJournal/`).
//!
//! Per (group, topic, queue) a [`PopQueue`] holds the pop cursor (`next`, the first offset
//! never handed out) and the in-flight set: every offset handed out and not yet finished, with
//! its pop time (which receipt is current) and when it becomes visible again. An offset below
//! `next` that is not in flight is finished (acknowledged, moved to the retry topic, or skipped
//! by the group's filter), so the acknowledged holes are exactly the gaps between in-flight
//! offsets and need no record of their own.
//!
//! Invariants: every in-flight offset is below `next`; `floor()` (the smallest in-flight
//! offset, else `next`) never moves back except by a reset.
//!
//! Journal records (big-endian), each starting with a kind byte and the queue key
//! (`u16` group length, group, `u16` topic length, topic, `i32` queue id):
//! - `1` popped: `next` after the pop, pop time, visible-at, `u8` kind (0 normal, 1 orderly, 2
//!   orderly re-sent for the same attempt: not counted as a new delivery), `u16` count, offsets.
//! - `2` finished (acknowledged, or moved on by the revive service): offset, pop time (`-1`:
//!   whatever the receipt).
//! - `3` invisibility changed: offset, old pop time, new pop time, new visible-at.
//! - `4` reset: the new cursor; the in-flight set is dropped.
//! - `5` copy placed: destination topic (`u16` + bytes), the destination queue offset after it.
//!
//! Snapshot: `u32` queue count, then per queue the key, `next`, `u32` in-flight count and per
//! entry offset, pop time, visible-at, `u32` deliveries, `u8` orderly; then `u32` copy-topic
//! count and per topic its name and end.

use std::collections::{BTreeMap, HashMap};

use tidemark_storage::journal::JournalCodec;

const POPPED: u8 = 1;
const FINISHED: u8 = 2;
const CHANGED: u8 = 3;
const RESET: u8 = 4;
const COPIED: u8 = 5;

/// A finish that matches whatever receipt is current.
pub const ANY_RECEIPT: i64 = -1;

/// Which queue of which topic a group pops.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueKey {
    pub group: String,
    pub topic: String,
    pub queue_id: i32,
}

impl QueueKey {
    pub fn new(group: &str, topic: &str, queue_id: i32) -> Self {
        Self {
            group: group.to_owned(),
            topic: topic.to_owned(),
            queue_id,
        }
    }
}

/// One handed-out message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// The pop time of the receipt that is current (a changed invisibility issues a new one).
    pub pop_time: i64,
    /// When the message becomes visible again.
    pub visible_at: i64,
    /// How many times it was handed out (orderly pops hand the same offset out again).
    pub deliveries: u32,
    /// Handed out by an orderly pop: it comes back in place, not through the retry topic.
    pub orderly: bool,
}

/// One queue's POP progress for one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PopQueue {
    pub next: i64,
    pub in_flight: BTreeMap<i64, InFlight>,
}

impl PopQueue {
    /// Everything below it is finished.
    pub fn floor(&self) -> i64 {
        self.in_flight
            .keys()
            .next()
            .copied()
            .unwrap_or(self.next)
            .min(self.next)
    }

    /// An orderly queue is blocked while a handed-out message is still invisible.
    pub fn orderly_blocked(&self, now: i64) -> bool {
        self.in_flight
            .values()
            .any(|entry| entry.orderly && entry.visible_at > now)
    }
}

/// What a pop hands out, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Popped {
    pub next: i64,
    pub pop_time: i64,
    pub visible_at: i64,
    pub orderly: bool,
    /// The same orderly batch sent again for a retried attempt (its answer was lost): the
    /// deliveries are not counted again.
    pub resent: bool,
    pub offsets: Vec<i64>,
}

/// Every group's POP progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PopState {
    pub queues: HashMap<QueueKey, PopQueue>,
    /// Per destination topic (retry or dead-letter), the end of its queue 0 after the last
    /// copy the revive service journaled: after a crash, copies past it are looked up so a
    /// message is never copied twice.
    pub copies_end: BTreeMap<String, i64>,
}

impl PopState {
    /// Applies a pop: the cursor moves on and the offsets go in flight (an offset handed out
    /// again counts one more delivery).
    pub fn apply_popped(&mut self, key: &QueueKey, popped: &Popped) {
        let queue = self.queues.entry(key.clone()).or_default();
        queue.next = queue.next.max(popped.next);
        for &offset in &popped.offsets {
            let deliveries = match queue.in_flight.get(&offset) {
                Some(entry) if popped.resent => entry.deliveries,
                Some(entry) => entry.deliveries.saturating_add(1),
                None => 1,
            };
            queue.in_flight.insert(
                offset,
                InFlight {
                    pop_time: popped.pop_time,
                    visible_at: popped.visible_at,
                    deliveries,
                    orderly: popped.orderly,
                },
            );
        }
    }

    /// Finishes an in-flight offset if `pop_time` is its current receipt's (or
    /// [`ANY_RECEIPT`]); the entry it removed.
    pub fn apply_finished(
        &mut self,
        key: &QueueKey,
        offset: i64,
        pop_time: i64,
    ) -> Option<InFlight> {
        let queue = self.queues.get_mut(key)?;
        let entry = queue.in_flight.get(&offset)?;
        if pop_time != ANY_RECEIPT && entry.pop_time != pop_time {
            return None;
        }
        queue.in_flight.remove(&offset)
    }

    /// Moves an in-flight offset's visibility, if `old_pop_time` is its current receipt's.
    pub fn apply_changed(
        &mut self,
        key: &QueueKey,
        offset: i64,
        old_pop_time: i64,
        new_pop_time: i64,
        visible_at: i64,
    ) -> Option<InFlight> {
        let entry = self.queues.get_mut(key)?.in_flight.get_mut(&offset)?;
        if entry.pop_time != old_pop_time {
            return None;
        }
        entry.pop_time = new_pop_time;
        entry.visible_at = visible_at;
        Some(*entry)
    }

    pub fn apply_reset(&mut self, key: &QueueKey, offset: i64) {
        let queue = self.queues.entry(key.clone()).or_default();
        queue.next = offset;
        queue.in_flight.clear();
    }

    pub fn apply_copied(&mut self, topic: &str, end: i64) {
        let stored = self.copies_end.entry(topic.to_owned()).or_insert(end);
        *stored = (*stored).max(end);
    }
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u16).to_be_bytes());
    out.extend_from_slice(text.as_bytes());
}

/// A record's buffer: its kind, then room for `key` and `more` bytes, so that writing it takes
/// one allocation (every pop and every ack writes one).
fn record_for(kind: u8, key: &QueueKey, more: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 2 + key.group.len() + 2 + key.topic.len() + 4 + more);
    out.push(kind);
    put_key(&mut out, key);
    out
}

fn put_key(out: &mut Vec<u8>, key: &QueueKey) {
    put_str(out, &key.group);
    put_str(out, &key.topic);
    out.extend_from_slice(&key.queue_id.to_be_bytes());
}

pub fn popped_record(key: &QueueKey, popped: &Popped) -> Vec<u8> {
    let mut out = record_for(POPPED, key, 3 * 8 + 1 + 2 + 8 * popped.offsets.len());
    for value in [popped.next, popped.pop_time, popped.visible_at] {
        out.extend_from_slice(&value.to_be_bytes());
    }
    out.push(match (popped.orderly, popped.resent) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    });
    out.extend_from_slice(&(popped.offsets.len() as u16).to_be_bytes());
    for offset in &popped.offsets {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out
}

pub fn finished_record(key: &QueueKey, offset: i64, pop_time: i64) -> Vec<u8> {
    let mut out = record_for(FINISHED, key, 2 * 8);
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&pop_time.to_be_bytes());
    out
}

pub fn changed_record(
    key: &QueueKey,
    offset: i64,
    old_pop_time: i64,
    new_pop_time: i64,
    visible_at: i64,
) -> Vec<u8> {
    let mut out = record_for(CHANGED, key, 4 * 8);
    for value in [offset, old_pop_time, new_pop_time, visible_at] {
        out.extend_from_slice(&value.to_be_bytes());
    }
    out
}

pub fn reset_record(key: &QueueKey, offset: i64) -> Vec<u8> {
    let mut out = record_for(RESET, key, 8);
    out.extend_from_slice(&offset.to_be_bytes());
    out
}

pub fn copied_record(topic: &str, end: i64) -> Vec<u8> {
    let mut out = vec![COPIED];
    put_str(&mut out, topic);
    out.extend_from_slice(&end.to_be_bytes());
    out
}

/// Reads a record or snapshot field by field; every error says where it ran out.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize, what: &str) -> Result<&'a [u8], String> {
        let slice = self
            .bytes
            .get(self.at..self.at + count)
            .ok_or_else(|| format!("ends inside its {what} (byte {})", self.at))?;
        self.at += count;
        Ok(slice)
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        let raw = self.take(2, what)?;
        Ok(u16::from_be_bytes([raw[0], raw[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let raw = self.take(4, what)?;
        Ok(u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]))
    }

    fn i32(&mut self, what: &str) -> Result<i32, String> {
        Ok(self.u32(what)? as i32)
    }

    fn i64(&mut self, what: &str) -> Result<i64, String> {
        let mut value = [0; 8];
        value.copy_from_slice(self.take(8, what)?);
        Ok(i64::from_be_bytes(value))
    }

    fn string(&mut self, what: &str) -> Result<String, String> {
        let length = self.u16(what)? as usize;
        String::from_utf8(self.take(length, what)?.to_vec())
            .map_err(|_| format!("its {what} is not UTF-8"))
    }

    fn key(&mut self) -> Result<QueueKey, String> {
        Ok(QueueKey {
            group: self.string("group")?,
            topic: self.string("topic")?,
            queue_id: self.i32("queue id")?,
        })
    }

    fn done(&self) -> Result<(), String> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(format!("{} bytes left over", self.bytes.len() - self.at))
        }
    }
}

/// How [`PopState`] is journaled.
#[derive(Debug, Default)]
pub struct PopCodec;

impl JournalCodec for PopCodec {
    type State = PopState;

    fn fresh(&self) -> Result<PopState, String> {
        Ok(PopState::default())
    }

    fn restore(&self, snapshot: &[u8]) -> Result<PopState, String> {
        let mut reader = Reader {
            bytes: snapshot,
            at: 0,
        };
        let mut state = PopState::default();
        for _ in 0..reader.u32("queue count")? {
            let key = reader.key()?;
            let mut queue = PopQueue {
                next: reader.i64("cursor")?,
                in_flight: BTreeMap::new(),
            };
            for _ in 0..reader.u32("in-flight count")? {
                let offset = reader.i64("offset")?;
                let entry = InFlight {
                    pop_time: reader.i64("pop time")?,
                    visible_at: reader.i64("visible-at")?,
                    deliveries: reader.u32("deliveries")?,
                    orderly: reader.u8("orderly flag")? != 0,
                };
                if offset >= queue.next {
                    return Err(format!(
                        "in-flight offset {offset} is not below {}",
                        queue.next
                    ));
                }
                queue.in_flight.insert(offset, entry);
            }
            state.queues.insert(key, queue);
        }
        for _ in 0..reader.u32("copy topic count")? {
            let topic = reader.string("copy topic")?;
            let end = reader.i64("copy end")?;
            state.copies_end.insert(topic, end);
        }
        reader.done()?;
        Ok(state)
    }

    fn apply(&self, state: &mut PopState, record: &[u8]) -> Result<(), String> {
        let mut reader = Reader {
            bytes: record,
            at: 1,
        };
        match record.first() {
            Some(&POPPED) => {
                let key = reader.key()?;
                let next = reader.i64("cursor")?;
                let pop_time = reader.i64("pop time")?;
                let visible_at = reader.i64("visible-at")?;
                let kind = reader.u8("pop kind")?;
                if kind > 2 {
                    return Err(format!("unknown pop kind {kind}"));
                }
                let (orderly, resent) = (kind != 0, kind == 2);
                let count = reader.u16("offset count")?;
                let offsets = (0..count)
                    .map(|_| reader.i64("offset"))
                    .collect::<Result<Vec<_>, _>>()?;
                reader.done()?;
                if offsets.iter().any(|offset| *offset >= next) {
                    return Err(format!("a popped offset is not below the cursor {next}"));
                }
                state.apply_popped(
                    &key,
                    &Popped {
                        next,
                        pop_time,
                        visible_at,
                        orderly,
                        resent,
                        offsets,
                    },
                );
            }
            Some(&FINISHED) => {
                let key = reader.key()?;
                let offset = reader.i64("offset")?;
                let pop_time = reader.i64("pop time")?;
                reader.done()?;
                state.apply_finished(&key, offset, pop_time);
            }
            Some(&CHANGED) => {
                let key = reader.key()?;
                let offset = reader.i64("offset")?;
                let old = reader.i64("old pop time")?;
                let new = reader.i64("new pop time")?;
                let visible_at = reader.i64("visible-at")?;
                reader.done()?;
                state.apply_changed(&key, offset, old, new, visible_at);
            }
            Some(&RESET) => {
                let key = reader.key()?;
                let offset = reader.i64("cursor")?;
                reader.done()?;
                state.apply_reset(&key, offset);
            }
            Some(&COPIED) => {
                let topic = reader.string("copy topic")?;
                let end = reader.i64("copy end")?;
                reader.done()?;
                state.apply_copied(&topic, end);
            }
            Some(other) => {
                return Err(format!(
                    "unknown POP record kind {other} ({} bytes)",
                    record.len()
                ))
            }
            None => return Err("empty POP record".to_owned()),
        }
        Ok(())
    }

    fn snapshot(&self, state: &PopState) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(state.queues.len() as u32).to_be_bytes());
        // In key order: equal states encode to equal bytes (a master's copy on its slaves
        // compares so).
        let mut queues: Vec<_> = state.queues.iter().collect();
        queues.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, queue) in queues {
            put_key(&mut out, key);
            out.extend_from_slice(&queue.next.to_be_bytes());
            out.extend_from_slice(&(queue.in_flight.len() as u32).to_be_bytes());
            for (offset, entry) in &queue.in_flight {
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(&entry.pop_time.to_be_bytes());
                out.extend_from_slice(&entry.visible_at.to_be_bytes());
                out.extend_from_slice(&entry.deliveries.to_be_bytes());
                out.push(u8::from(entry.orderly));
            }
        }
        out.extend_from_slice(&(state.copies_end.len() as u32).to_be_bytes());
        for (topic, end) in &state.copies_end {
            put_str(&mut out, topic);
            out.extend_from_slice(&end.to_be_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> QueueKey {
        QueueKey::new("G", "T", 2)
    }

    fn popped(next: i64, pop_time: i64, offsets: &[i64]) -> Popped {
        Popped {
            next,
            pop_time,
            visible_at: pop_time + 1_000,
            orderly: false,
            resent: false,
            offsets: offsets.to_vec(),
        }
    }

    #[test]
    fn acknowledged_holes_are_the_gaps_between_in_flight_offsets() {
        let mut state = PopState::default();
        state.apply_popped(&key(), &popped(5, 100, &[0, 1, 2, 4]));
        let queue = &state.queues[&key()];
        assert_eq!((queue.floor(), queue.next), (0, 5), "3 was filtered out");
        assert!(state.apply_finished(&key(), 1, 100).is_some());
        assert!(
            state.apply_finished(&key(), 0, 99).is_none(),
            "a stale receipt finishes nothing"
        );
        assert!(state.apply_finished(&key(), 0, ANY_RECEIPT).is_some());
        assert_eq!(state.queues[&key()].floor(), 2);
        assert!(state
            .apply_changed(&key(), 2, 100, 150, 9_000)
            .is_some_and(|entry| entry.visible_at == 9_000));
        assert!(
            state.apply_finished(&key(), 2, 100).is_none(),
            "old receipt"
        );
        assert!(state.apply_finished(&key(), 2, 150).is_some());
        assert!(state.apply_finished(&key(), 4, 100).is_some());
        assert_eq!(state.queues[&key()].floor(), 5);
    }

    #[test]
    fn orderly_redelivery_counts_deliveries_and_blocks_until_visible() {
        let mut state = PopState::default();
        let first = Popped {
            orderly: true,
            ..popped(2, 100, &[0, 1])
        };
        state.apply_popped(&key(), &first);
        assert!(state.queues[&key()].orderly_blocked(1_099));
        assert!(!state.queues[&key()].orderly_blocked(1_100));
        let again = Popped {
            orderly: true,
            ..popped(2, 1_200, &[0, 1])
        };
        state.apply_popped(&key(), &again);
        assert_eq!(state.queues[&key()].in_flight[&0].deliveries, 2);
        let resent = Popped {
            orderly: true,
            resent: true,
            ..popped(2, 1_300, &[0, 1])
        };
        state.apply_popped(&key(), &resent);
        assert_eq!(
            state.queues[&key()].in_flight[&0].deliveries,
            2,
            "a lost answer sent again is not another delivery"
        );
        assert_eq!(state.queues[&key()].in_flight[&0].pop_time, 1_300);
    }

    #[test]
    fn records_and_snapshots_rebuild_the_same_state() {
        let codec = PopCodec;
        let mut state = codec.fresh().expect("fresh");
        let other = QueueKey::new("G2", "%RETRY%G2_T", 0);
        let records = [
            popped_record(&key(), &popped(5, 100, &[0, 1, 2, 4])),
            finished_record(&key(), 1, 100),
            changed_record(&key(), 2, 100, 150, 9_000),
            popped_record(&other, &popped(3, 200, &[2])),
            copied_record("%RETRY%G_T", 7),
            reset_record(&other, 1),
            popped_record(&other, &popped(2, 300, &[1])),
        ];
        for record in &records {
            codec.apply(&mut state, record).expect("applies");
        }
        assert_eq!(state.queues[&other].next, 2);
        assert_eq!(state.queues[&key()].in_flight.len(), 3);
        assert_eq!(state.copies_end["%RETRY%G_T"], 7);
        let restored = codec.restore(&codec.snapshot(&state)).expect("restores");
        assert_eq!(restored, state);
        for record in &records {
            for cut in 0..record.len() {
                assert!(
                    codec.apply(&mut state.clone(), &record[..cut]).is_err(),
                    "a record cut at {cut} is refused"
                );
            }
        }
        assert!(codec.apply(&mut state, &[9, 0]).is_err());
        assert!(codec
            .apply(&mut state, &popped_record(&key(), &popped(1, 1, &[3])))
            .is_err());
        let snapshot = codec.snapshot(&state);
        assert!(codec.restore(&snapshot[..snapshot.len() - 1]).is_err());
    }
}
