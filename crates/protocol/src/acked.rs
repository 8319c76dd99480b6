//! Acknowledged ranges: Tidemark's extension of a consumer offset. With its commit offset (the
//! smallest offset still in flight) a Tidemark client reports which offsets *above* it are
//! already consumed, so whoever consumes the queue next skips them instead of redelivering
//! everything above one slow message (Pulsar's individually deleted ranges, JetStream's ack
//! floor plus pending). The broker stores them with the offset and returns them with
//! QUERY_CONSUMER_OFFSET.
//!
//! On the wire they travel in the ext field [`ACKED_RANGES_FIELD`] of UPDATE_CONSUMER_OFFSET
//! (request) and QUERY_CONSUMER_OFFSET (response); Apache brokers and clients ignore unknown
//! fields. Text form, relative to the commit offset `c`: `gap+length` pairs separated by
//! commas, where the first gap is the start of the first range minus `c`, each later gap is the
//! start of a range minus the end of the previous one, and ranges are half-open `[start, end)`.
//! `c = 10`, ranges `[12, 15)` and `[20, 21)` → `2+3,5+1`. Gaps and lengths are at least 1 (0
//! for the first gap is read as 1: offset `c` itself is never acknowledged, it is in flight).
//!
//! Bound: at most [`ACKED_RANGES_MAX`] ranges. Past that the highest ranges are dropped — those
//! messages are delivered again, never lost.

use std::fmt::Write as _;

/// The ext field carrying acknowledged ranges.
pub const ACKED_RANGES_FIELD: &str = "tidemarkAckedRanges";

/// Hand-off of a queue between two Tidemark consumers of a group, so the new owner starts only
/// after the old one committed its final progress. On PULL_MESSAGE: the puller hands its
/// queues off this way (value `1`).
pub const HAND_OFF_FIELD: &str = "tidemarkHandOff";
/// On UPDATE_CONSUMER_OFFSET (value `1`): the final commit of a queue being given up.
pub const RELEASED_FIELD: &str = "tidemarkReleased";
/// On UPDATE_CONSUMER_OFFSET (value `1`): a consumer's own progress, never an operator's
/// rewind. A broker that has not had the consumer's heartbeat yet (just started, or just became
/// master) cannot tell it from an admin tool by membership; Java, Go and C++ consumers commit
/// oneway, which says the same.
pub const FROM_CONSUMER_FIELD: &str = "tidemarkFromConsumer";

/// An ext field Tidemark's slaves add when they pass progress on to their master: such a commit
/// only ever moves forward (Apache brokers ignore unknown fields).
pub const FORWARD_ONLY_FIELD: &str = "tidemarkForwardOnly";
/// On QUERY_CONSUMER_OFFSET (value `1`): the asker is about to consume the queue.
pub const TAKE_OVER_FIELD: &str = "tidemarkTakeOver";
/// In the answer to a take-over query (value `1`): another live consumer still holds the queue
/// and has not released it yet; ask again shortly.
pub const HELD_FIELD: &str = "tidemarkHeld";

/// The most ranges kept for one queue.
pub const ACKED_RANGES_MAX: usize = 64;

/// Offsets above a commit offset that are already consumed: sorted, disjoint, non-adjacent
/// half-open ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckedRanges {
    ranges: Vec<(i64, i64)>,
}

impl AckedRanges {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ranges from any list of `[start, end)` pairs: empty ones dropped, the rest sorted, merged
    /// and bounded.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (i64, i64)>) -> Self {
        let mut list: Vec<(i64, i64)> = ranges.into_iter().filter(|(s, e)| s < e).collect();
        list.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(list.len());
        for (start, end) in list {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged.truncate(ACKED_RANGES_MAX);
        Self { ranges: merged }
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ranges.iter().copied()
    }

    /// Whether `offset` is acknowledged.
    pub fn contains(&self, offset: i64) -> bool {
        let index = self.ranges.partition_point(|(_, end)| *end <= offset);
        self.ranges
            .get(index)
            .is_some_and(|(start, _)| *start <= offset)
    }

    /// How many offsets are acknowledged.
    pub fn count(&self) -> i64 {
        self.ranges.iter().map(|(start, end)| end - start).sum()
    }

    /// Both sets of ranges (an offset acknowledged by anyone stays acknowledged).
    pub fn union(&self, other: &AckedRanges) -> AckedRanges {
        Self::from_ranges(self.iter().chain(other.iter()))
    }

    /// Only what lies above `offset` (the commit offset itself is in flight).
    pub fn above(&self, offset: i64) -> AckedRanges {
        Self::from_ranges(
            self.iter()
                .map(|(start, end)| (start.max(offset.saturating_add(1)), end)),
        )
    }

    /// Only what lies below `end` (a queue that lost its tail has no offsets past it).
    pub fn below(&self, end: i64) -> AckedRanges {
        Self::from_ranges(self.iter().map(|(start, stop)| (start, stop.min(end))))
    }

    /// The text form relative to `commit_offset` (see the module documentation); ranges at or
    /// below it are left out.
    pub fn encode(&self, commit_offset: i64) -> String {
        let mut out = String::new();
        let mut previous_end = commit_offset;
        for (start, end) in self.above(commit_offset).iter() {
            if !out.is_empty() {
                out.push(',');
            }
            let _ = write!(out, "{}+{}", start - previous_end, end - start);
            previous_end = end;
        }
        out
    }

    /// Reads the text form relative to `commit_offset`. Anything malformed is an error naming
    /// the part; an empty text is no ranges.
    pub fn decode(commit_offset: i64, text: &str) -> Result<AckedRanges, String> {
        let mut ranges = Vec::new();
        let mut previous_end = commit_offset;
        for (index, part) in text.split(',').filter(|part| !part.is_empty()).enumerate() {
            if index >= ACKED_RANGES_MAX {
                break;
            }
            let (gap, length) = part
                .split_once('+')
                .ok_or_else(|| format!("range {part:?} is not gap+length"))?;
            let gap: i64 = gap
                .parse()
                .map_err(|_| format!("bad gap in range {part:?}"))?;
            let length: i64 = length
                .parse()
                .map_err(|_| format!("bad length in range {part:?}"))?;
            if gap < 0 || length < 1 {
                return Err(format!("range {part:?} has a negative gap or no length"));
            }
            let start = previous_end
                .checked_add(gap.max(i64::from(index == 0)))
                .ok_or_else(|| format!("range {part:?} overflows"))?;
            let end = start
                .checked_add(length)
                .ok_or_else(|| format!("range {part:?} overflows"))?;
            ranges.push((start, end));
            previous_end = end;
        }
        Ok(Self::from_ranges(ranges))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips_relative_to_the_commit_offset() {
        let ranges = AckedRanges::from_ranges([(20, 21), (12, 15)]);
        assert_eq!(ranges.encode(10), "2+3,5+1");
        assert_eq!(AckedRanges::decode(10, "2+3,5+1"), Ok(ranges.clone()));
        assert_eq!(AckedRanges::decode(10, ""), Ok(AckedRanges::new()));
        assert!(ranges.contains(12) && ranges.contains(14) && ranges.contains(20));
        assert!(!ranges.contains(15) && !ranges.contains(11) && !ranges.contains(21));
        assert_eq!(ranges.count(), 4);
        // Ranges at or below the commit offset are not sent.
        assert_eq!(ranges.encode(13), "1+1,5+1");
    }

    #[test]
    fn malformed_text_is_refused_and_overlaps_merge() {
        for bad in [
            "x",
            "1+",
            "+1",
            "1+0",
            "-1+2",
            "1+2,3",
            "99999999999999999999+1",
        ] {
            assert!(AckedRanges::decode(0, bad).is_err(), "{bad}");
        }
        assert_eq!(
            AckedRanges::from_ranges([(1, 5), (3, 8), (8, 9), (20, 20)]),
            AckedRanges::from_ranges([(1, 9)])
        );
        assert!(AckedRanges::decode(i64::MAX - 1, "5+5").is_err());
    }

    #[test]
    fn the_bound_keeps_the_lowest_ranges() {
        let many = AckedRanges::from_ranges((0..200).map(|i| (i * 3 + 1, i * 3 + 2)));
        assert_eq!(many.len(), ACKED_RANGES_MAX);
        assert_eq!(many.iter().next(), Some((1, 2)));
        let text = many.encode(0);
        assert_eq!(AckedRanges::decode(0, &text), Ok(many));
    }

    #[test]
    fn union_above_and_below() {
        let a = AckedRanges::from_ranges([(5, 8)]);
        let b = AckedRanges::from_ranges([(7, 10), (12, 13)]);
        assert_eq!(a.union(&b), AckedRanges::from_ranges([(5, 10), (12, 13)]));
        assert_eq!(
            a.union(&b).above(6),
            AckedRanges::from_ranges([(7, 10), (12, 13)])
        );
        assert_eq!(a.union(&b).below(9), AckedRanges::from_ranges([(5, 9)]));
    }
}
