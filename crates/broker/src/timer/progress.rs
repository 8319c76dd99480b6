//! Which timer messages were delivered: the broker's record of it, kept in a journal of its own
//! (`config/timerJournal/`). Timer messages wait in the timer topic in arrival order but fall
//! due in any order, so "delivered" is a low-water mark (every offset below it is delivered)
//! plus the delivered offsets above it, as ranges — as many as there are pending messages
//! between them, not as many as were delivered.
//!
//! Journal record: `1` delivered, the timer-topic offset (i64 BE). Snapshot: the low-water mark,
//! a u32 range count, then each range's start and end (half-open, i64 BE).

use std::collections::BTreeMap;

use tidemark_storage::journal::JournalCodec;

const DELIVERED: u8 = 1;

/// Delivered timer-topic offsets. Invariant: every range lies above `low` and ranges neither
/// overlap nor touch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    low: i64,
    /// start → end (exclusive).
    ranges: BTreeMap<i64, i64>,
}

impl Delivered {
    /// Every offset below this one is delivered.
    pub fn low(&self) -> i64 {
        self.low
    }

    pub fn contains(&self, offset: i64) -> bool {
        offset < self.low
            || self
                .ranges
                .range(..=offset)
                .next_back()
                .is_some_and(|(_, end)| offset < *end)
    }

    /// The first offset at or after `offset` that is not delivered.
    pub fn next_undelivered(&self, offset: i64) -> i64 {
        let offset = offset.max(self.low);
        match self.ranges.range(..=offset).next_back() {
            Some((_, end)) if offset < *end => *end,
            _ => offset,
        }
    }

    /// Marks `offset` delivered; whether it was not already.
    pub fn insert(&mut self, offset: i64) -> bool {
        if self.contains(offset) {
            return false;
        }
        let mut start = offset;
        let mut end = offset + 1;
        if let Some((&before_start, &before_end)) = self.ranges.range(..offset).next_back() {
            if before_end == offset {
                start = before_start;
                self.ranges.remove(&before_start);
            }
        }
        if let Some(after_end) = self.ranges.remove(&end) {
            end = after_end;
        }
        if start == self.low {
            self.low = end;
        } else {
            self.ranges.insert(start, end);
        }
        true
    }

    /// Forgets offsets below `floor` (the timer topic no longer holds them): they count as
    /// delivered.
    pub fn raise_low(&mut self, floor: i64) {
        if floor <= self.low {
            return;
        }
        self.low = floor;
        let below: Vec<i64> = self
            .ranges
            .range(..floor)
            .map(|(start, _)| *start)
            .collect();
        for start in below {
            if let Some(end) = self.ranges.remove(&start) {
                if end > floor {
                    self.ranges.insert(floor, end);
                }
            }
        }
        if let Some(end) = self.ranges.remove(&self.low) {
            self.low = end;
        }
    }

    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// Marks `start..end` delivered.
    pub fn insert_range(&mut self, start: i64, end: i64) {
        let (mut start, mut end) = (start.max(self.low), end);
        if start >= end {
            return;
        }
        // Ranges that overlap or touch the new one become part of it.
        let joined: Vec<(i64, i64)> = self
            .ranges
            .range(..=end)
            .filter(|(_, range_end)| **range_end >= start)
            .map(|(range_start, range_end)| (*range_start, *range_end))
            .collect();
        for (range_start, range_end) in joined {
            self.ranges.remove(&range_start);
            start = start.min(range_start);
            end = end.max(range_end);
        }
        if start <= self.low {
            self.low = self.low.max(end);
            while let Some(range_end) = self.ranges.remove(&self.low) {
                self.low = range_end;
            }
        } else {
            self.ranges.insert(start, end);
        }
    }

    /// Takes every offset `other` holds delivered as delivered too.
    pub fn merge(&mut self, other: &Delivered) {
        self.insert_range(i64::MIN, other.low);
        for (start, end) in &other.ranges {
            self.insert_range(*start, *end);
        }
    }
}

pub(crate) fn delivered_record(offset: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    out.push(DELIVERED);
    out.extend_from_slice(&offset.to_be_bytes());
    out
}

/// The offset a delivered record names.
pub(crate) fn delivered_offset(record: &[u8]) -> Result<i64, String> {
    match record.first() {
        Some(&DELIVERED) if record.len() == 9 => i64_at(record, 1, "offset"),
        Some(other) => Err(format!(
            "unknown timer record kind {other} ({} bytes)",
            record.len()
        )),
        None => Err("empty timer record".to_owned()),
    }
}

fn i64_at(bytes: &[u8], at: usize, what: &str) -> Result<i64, String> {
    let raw = bytes
        .get(at..at + 8)
        .ok_or_else(|| format!("ends inside its {what}"))?;
    let mut value = [0; 8];
    value.copy_from_slice(raw);
    Ok(i64::from_be_bytes(value))
}

/// How [`Delivered`] is journaled.
#[derive(Debug, Default)]
pub(crate) struct DeliveredCodec;

impl JournalCodec for DeliveredCodec {
    type State = Delivered;

    fn fresh(&self) -> Result<Delivered, String> {
        Ok(Delivered::default())
    }

    fn restore(&self, snapshot: &[u8]) -> Result<Delivered, String> {
        let low = i64_at(snapshot, 0, "low-water mark")?;
        let count = snapshot
            .get(8..12)
            .map(|raw| u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize)
            .ok_or("ends inside its range count")?;
        if snapshot.len() != 12 + count * 16 {
            return Err(format!("{} bytes for {count} ranges", snapshot.len()));
        }
        let mut delivered = Delivered {
            low,
            ranges: BTreeMap::new(),
        };
        for index in 0..count {
            let start = i64_at(snapshot, 12 + index * 16, "range start")?;
            let end = i64_at(snapshot, 20 + index * 16, "range end")?;
            if start <= low || end <= start {
                return Err(format!("range [{start}, {end}) is not above {low}"));
            }
            delivered.ranges.insert(start, end);
        }
        Ok(delivered)
    }

    fn apply(&self, state: &mut Delivered, record: &[u8]) -> Result<(), String> {
        state.insert(delivered_offset(record)?);
        Ok(())
    }

    fn snapshot(&self, state: &Delivered) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + state.ranges.len() * 16);
        out.extend_from_slice(&state.low.to_be_bytes());
        out.extend_from_slice(&(state.ranges.len() as u32).to_be_bytes());
        for (start, end) in &state.ranges {
            out.extend_from_slice(&start.to_be_bytes());
            out.extend_from_slice(&end.to_be_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ranges_and_copies_merge_into_one_delivered_set() {
        let mut ours = Delivered::default();
        for offset in [0, 1, 5, 9] {
            ours.insert(offset);
        }
        let mut theirs = Delivered::default();
        for offset in [0, 1, 2, 3, 6, 7, 8, 12] {
            theirs.insert(offset);
        }
        ours.merge(&theirs);
        let mut one_by_one = Delivered::default();
        for offset in [0, 1, 2, 3, 5, 6, 7, 8, 9, 12] {
            one_by_one.insert(offset);
        }
        assert_eq!(ours, one_by_one);
        assert_eq!(ours.low(), 4);
        ours.insert_range(3, 5);
        assert_eq!(ours.low(), 10, "joined up to the ranges above");
        ours.insert_range(20, 20);
        assert_eq!(ours.range_count(), 1);
    }

    use super::*;

    #[test]
    fn deliveries_in_any_order_collapse_into_the_low_water_mark() {
        let mut delivered = Delivered::default();
        for offset in [3, 1, 5, 4] {
            assert!(delivered.insert(offset));
        }
        assert!(!delivered.insert(4), "already delivered");
        assert_eq!(delivered.low(), 0);
        assert_eq!(delivered.range_count(), 2, "[1,2) and [3,6)");
        assert!(delivered.contains(4) && !delivered.contains(2) && !delivered.contains(0));
        assert_eq!(delivered.next_undelivered(3), 6);
        assert_eq!(delivered.next_undelivered(2), 2);
        delivered.insert(0);
        assert_eq!(delivered.low(), 2);
        delivered.insert(2);
        assert_eq!((delivered.low(), delivered.range_count()), (6, 0));
    }

    #[test]
    fn a_raised_floor_counts_as_delivered() {
        let mut delivered = Delivered::default();
        delivered.insert(5);
        delivered.insert(9);
        delivered.raise_low(5);
        assert_eq!(delivered.low(), 6, "5 was delivered too");
        delivered.raise_low(8);
        assert_eq!((delivered.low(), delivered.range_count()), (8, 1));
    }

    #[test]
    fn journal_records_and_snapshots_rebuild_it() {
        let codec = DeliveredCodec;
        let mut state = codec.fresh().expect("fresh");
        for offset in [7, 2, 0, 3, 10] {
            codec
                .apply(&mut state, &delivered_record(offset))
                .expect("applies");
        }
        assert_eq!(state.low(), 1);
        let restored = codec.restore(&codec.snapshot(&state)).expect("restores");
        assert_eq!(restored, state);
        assert!(codec.apply(&mut state, &[1, 0]).is_err());
        assert!(codec.apply(&mut state, &[9; 9]).is_err());
        assert!(codec.restore(&[0; 11]).is_err());
    }
}
