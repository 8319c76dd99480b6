//! Timer messages an Apache RocketMQ 5 broker left in a store Tidemark starts on.
//!
//! Apache's timer keeps the same timer topic (`rmq_sys_wheel_timer`, queue 0) but its queue
//! entries hold the tags' hash, not the delivery time, and what it delivered is recorded in its
//! checkpoint file (`config/timercheck`), not in Tidemark's journal. Without both, Tidemark would
//! deliver every pending Apache timer message at once and every delivered one again.
//!
//! `timercheck` is big-endian: `lastReadTimeMs` at byte 0 (every wheel slot before it has been
//! delivered; a slot holds the messages whose `TIMER_OUT_MS` is its time) and
//! `lastTimerQueueOffset` at byte 16 (the next timer-queue offset Apache had not taken in). So an
//! entry below that offset whose `TIMER_OUT_MS` is before that time was delivered by Apache.
//!
//! Going back, Tidemark moves `lastReadTimeMs` up at a clean stop to what it delivered, so an
//! Apache broker started on the store again does not deliver again the messages of its wheel
//! Tidemark delivered meanwhile.

use std::path::Path;

use tidemark_protocol::message::{property, MessageRecord};
use tidemark_storage::io::Storage;

/// Apache's slot length (`timerPrecisionMs`, 1 s by default): it delivers the slot starting at
/// `TIMER_OUT_MS` when the slot ends, never before the time asked for.
pub(super) const APACHE_SLOT_MS: i64 = 1_000;

/// How far ahead of the clock a checkpoint's read time may be before it is taken for damage.
const PLAUSIBLE_AHEAD_MS: i64 = 24 * 3_600_000;

/// A tags code above this is a delivery time Tidemark wrote (epoch ms, after 1973); Apache's
/// entries hold a 32-bit tags hash.
const LOWEST_DELIVERY_TIME: i64 = i32::MAX as i64;

/// What Apache's `config/timercheck` says was delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApacheCheckpoint {
    /// Every message with `TIMER_OUT_MS` before this was delivered (if taken in, below).
    pub last_read_time_ms: i64,
    /// Timer-queue entries below this offset were taken in.
    pub next_queue_offset: i64,
}

impl ApacheCheckpoint {
    /// Reads `timercheck` from its 24 leading bytes; `None` if it is shorter.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let long = |at: usize| -> Option<i64> {
            let field: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
            Some(i64::from_be_bytes(field))
        };
        Some(Self {
            last_read_time_ms: long(0)?,
            next_queue_offset: long(16)?,
        })
    }

    /// Reads `path` through `storage`; `None` when there is no such file (or it is too short
    /// to be Apache's). Blocking.
    pub fn read(storage: &dyn Storage, path: &Path) -> std::io::Result<Option<Self>> {
        if !storage.exists(path) {
            return Ok(None);
        }
        let file = storage.open(path, false)?;
        let length = file.length()?.min(24) as usize;
        let mut bytes = vec![0; length];
        file.read_at(0, &mut bytes)?;
        Ok(Self::parse(&bytes))
    }

    /// Whether the checkpoint can be Apache's at `now_ms`: its read time is never negative, and
    /// never far ahead of the clock (Apache reads a slot only once its time came; minutes of
    /// difference between two hosts' clocks are allowed, a day is damage). Trusting a damaged
    /// one would take messages nobody delivered for delivered.
    pub fn is_plausible(&self, now_ms: i64) -> bool {
        (0..=now_ms.saturating_add(PLAUSIBLE_AHEAD_MS)).contains(&self.last_read_time_ms)
            && self.next_queue_offset >= 0
    }

    /// Whether Apache delivered the timer-queue entry at `offset` whose slot is `out_ms`.
    pub fn delivered(&self, offset: i64, out_ms: i64) -> bool {
        offset < self.next_queue_offset && out_ms < self.last_read_time_ms
    }
}

/// Apache's slot of a message due at `due_ms`: a slot holds the messages due after its start,
/// up to and including its end.
fn apache_slot(due_ms: i64) -> i64 {
    due_ms.saturating_sub(1).div_euclid(APACHE_SLOT_MS) * APACHE_SLOT_MS
}

/// The `lastReadTimeMs` to leave Apache at a stop. Apache skips every slot before it and reads
/// that slot again, so it is the slot after the last one a delivered message is in — but not
/// past the first waiting message's slot, and at least the current slot's start. It may be up
/// to a slot after `now` (a message delivered in the current slot): the caller waits until
/// then before writing it, because Apache never reads a slot before its read time, and a time
/// ahead of the clock would lose messages sent to Apache due in between.
pub fn hand_back_read_time(
    first_pending_due: Option<i64>,
    latest_delivered_due: Option<i64>,
    now: i64,
) -> i64 {
    let current = now.div_euclid(APACHE_SLOT_MS) * APACHE_SLOT_MS;
    let after_delivered = latest_delivered_due.map_or(current, |due| {
        current.max(apache_slot(due).saturating_add(APACHE_SLOT_MS))
    });
    match first_pending_due {
        Some(due) => after_delivered.min(apache_slot(due)),
        None => after_delivered,
    }
}

/// Writes `read_time` as `timercheck`'s `lastReadTimeMs`, leaving its other fields. Blocking.
pub fn write_read_time(storage: &dyn Storage, path: &Path, read_time: i64) -> std::io::Result<()> {
    let file = storage.open(path, false)?;
    file.write_at(0, &read_time.to_be_bytes())?;
    file.sync()
}

/// Whether a timer-queue entry's tags code is the delivery time Tidemark wrote; otherwise the
/// entry is Apache's and the time is in the message.
pub fn tags_code_is_due_time(tags_code: i64) -> bool {
    tags_code > LOWEST_DELIVERY_TIME
}

/// When a timer message read from the log is due, as (its `TIMER_OUT_MS`, the time asked for).
/// Apache stores `TIMER_OUT_MS` rounded down to its slot, so the time asked for comes from the
/// client's own property: `TIMER_DELIVER_MS`, or the store time plus `TIMER_DELAY_MS` or
/// `TIMER_DELAY_SEC` (not on a copy Apache rolled forward, stored later than the original: that
/// one is due at its slot's end, as Apache delivers it). `None` for a recall marker, which
/// cancels a message and is never delivered itself.
pub fn timing(record: &MessageRecord) -> Option<(i64, i64)> {
    let properties = &record.properties;
    if properties.get(property::TIMER_DEL_UNIQKEY).is_some() {
        return None;
    }
    let number = |name: &str| {
        properties
            .get(name)
            .and_then(|text| text.parse::<i64>().ok())
    };
    let out_ms = number(property::TIMER_OUT_MS).unwrap_or(record.store_timestamp);
    let delay = || {
        if properties.get(property::TIMER_ROLL_TIMES).is_some() {
            return None;
        }
        let delay = number(property::TIMER_DELAY_MS).or_else(|| {
            number(property::TIMER_DELAY_SEC).map(|seconds| seconds.saturating_mul(1_000))
        })?;
        Some(record.store_timestamp.saturating_add(delay))
    };
    let asked = number(property::TIMER_DELIVER_MS)
        .or_else(delay)
        .unwrap_or(out_ms + APACHE_SLOT_MS);
    Some((out_ms, asked.max(out_ms)))
}

/// The message an Apache recall marker (RocketMQ 5.3.2+) cancels: `TIMER_DEL_UNIQKEY` is
/// `<topic>+<unique id>` (neither has a `+`), due at the marker's `TIMER_OUT_MS` (the slot of
/// the handle's time), else at the handle's time less the millisecond Apache added.
pub(super) fn recall_marker(record: &MessageRecord) -> Option<super::Found> {
    let properties = &record.properties;
    let (topic, id) = properties
        .get(property::TIMER_DEL_UNIQKEY)?
        .split_once('+')?;
    let number = |name: &str| {
        properties
            .get(name)
            .and_then(|text| text.parse::<i64>().ok())
    };
    let due = number(property::TIMER_OUT_MS)
        .or_else(|| number(property::TIMER_DELIVER_MS).map(|at| at - 1))
        .unwrap_or(record.store_timestamp);
    Some(super::Found::RecallMarker {
        due,
        topic: topic.to_owned(),
        id: id.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint_bytes(read: i64, flushed: i64, queue: i64, master: i64) -> Vec<u8> {
        let mut bytes = Vec::new();
        for value in [read, flushed, queue, master, 0, 1_700_000_000_000, 3] {
            bytes.extend_from_slice(&value.to_be_bytes());
        }
        bytes.resize(4096, 0);
        bytes
    }

    #[test]
    fn reads_apaches_checkpoint_layout() {
        let checkpoint = ApacheCheckpoint::parse(&checkpoint_bytes(1_800_000_000_000, 52, 7, 7));
        assert_eq!(
            checkpoint,
            Some(ApacheCheckpoint {
                last_read_time_ms: 1_800_000_000_000,
                next_queue_offset: 7
            })
        );
        let checkpoint = checkpoint.expect("parsed");
        assert!(checkpoint.delivered(6, 1_799_999_999_000));
        assert!(
            !checkpoint.delivered(6, 1_800_000_000_000),
            "the slot read next"
        );
        assert!(!checkpoint.delivered(7, 1), "not taken in yet");
    }

    #[test]
    fn a_zeroed_checkpoint_says_nothing_was_delivered() {
        let zeroed = ApacheCheckpoint::parse(&vec![0; 4096]).expect("Apache's file");
        assert!(!zeroed.delivered(0, i64::MIN));
        assert_eq!(ApacheCheckpoint::parse(&[0; 20]), None);
        assert_eq!(ApacheCheckpoint::parse(&[]), None);
    }

    #[test]
    fn the_hand_back_time_is_after_what_was_delivered_and_before_what_waits() {
        let now = 1_800_000_000_500;
        assert_eq!(hand_back_read_time(None, None, now), 1_800_000_000_000);
        // Delivered a moment ago, in the current slot: the next slot, half a second ahead.
        assert_eq!(
            hand_back_read_time(None, Some(1_800_000_000_400), now),
            1_800_000_001_000
        );
        // A message due exactly on a slot start is in the slot before it, as Apache files it.
        assert_eq!(
            hand_back_read_time(None, Some(1_800_000_000_000), now),
            1_800_000_000_000
        );
        assert_eq!(
            hand_back_read_time(Some(1_800_000_060_000), Some(1_800_000_000_400), now),
            1_800_000_001_000,
            "a message waiting a minute ahead does not hold it back"
        );
        assert_eq!(
            hand_back_read_time(Some(1_799_999_990_000), None, now),
            1_799_999_989_000,
            "an overdue message still waiting is read again"
        );
        assert_eq!(
            hand_back_read_time(Some(1_800_000_000_450), Some(1_800_000_000_400), now),
            1_800_000_000_000,
            "sharing a slot, the waiting one wins"
        );
    }

    #[test]
    fn the_hand_back_rewrites_only_the_read_time() {
        use tidemark_storage::io::FsStorage;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("timercheck");
        std::fs::write(&path, checkpoint_bytes(1_000_000_000_000, 52, 7, 7)).expect("write");
        write_read_time(&FsStorage, &path, 1_800_000_000_000).expect("hand back");
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(bytes.len(), 4096);
        assert_eq!(bytes, checkpoint_bytes(1_800_000_000_000, 52, 7, 7));
        let read = ApacheCheckpoint::read(&FsStorage, &path).expect("read");
        assert_eq!(
            read.map(|found| found.last_read_time_ms),
            Some(1_800_000_000_000)
        );
    }

    fn unreadable_marker() -> MessageRecord {
        timer_record(&[(property::TIMER_DEL_UNIQKEY, "no-separator")])
    }

    fn timer_record(properties: &[(&str, &str)]) -> MessageRecord {
        MessageRecord {
            store_timestamp: 1_799_000_000_000,
            properties: properties.iter().copied().collect(),
            ..MessageRecord::default()
        }
    }

    #[test]
    fn messages_are_due_when_asked_not_at_their_rounded_slot() {
        let asked = timer_record(&[
            (property::TIMER_OUT_MS, "1800000000000"),
            (property::TIMER_DELIVER_MS, "1800000000250"),
        ]);
        assert_eq!(timing(&asked), Some((1_800_000_000_000, 1_800_000_000_250)));
        let by_delay = timer_record(&[
            (property::TIMER_OUT_MS, "1799000030000"),
            (property::TIMER_DELAY_SEC, "30"),
        ]);
        assert_eq!(
            timing(&by_delay),
            Some((1_799_000_030_000, 1_799_000_030_000))
        );
        let by_delay_ms = timer_record(&[
            (property::TIMER_OUT_MS, "1799000000000"),
            (property::TIMER_DELAY_MS, "750"),
        ]);
        assert_eq!(
            timing(&by_delay_ms),
            Some((1_799_000_000_000, 1_799_000_000_750))
        );
        // Tidemark's own records: TIMER_OUT_MS is the time asked for.
        let exact = timer_record(&[
            (property::TIMER_OUT_MS, "1800000000250"),
            (property::TIMER_DELIVER_MS, "1800000000250"),
        ]);
        assert_eq!(timing(&exact), Some((1_800_000_000_250, 1_800_000_000_250)));
    }

    #[test]
    fn rolled_copies_recall_markers_and_unreadable_times() {
        let rolled = timer_record(&[
            (property::TIMER_OUT_MS, "1800000000000"),
            (property::TIMER_DELAY_SEC, "200000"),
            (property::TIMER_ROLL_TIMES, "1"),
        ]);
        assert_eq!(
            timing(&rolled),
            Some((1_800_000_000_000, 1_800_000_001_000)),
            "a copy rolled forward is due at its slot's end, not its store time plus the delay"
        );
        let recall = timer_record(&[
            (property::TIMER_OUT_MS, "1800000000000"),
            (property::TIMER_DEL_UNIQKEY, "Orders+7F0000011F9018B4AAC2"),
        ]);
        assert_eq!(timing(&recall), None, "a recall marker is never delivered");
        assert_eq!(
            recall_marker(&recall),
            Some(super::super::Found::RecallMarker {
                due: 1_800_000_000_000,
                topic: "Orders".into(),
                id: "7F0000011F9018B4AAC2".into(),
            }),
            "it names the message it cancels, due in its slot"
        );
        let by_handle_time = timer_record(&[
            (property::TIMER_DELIVER_MS, "1800000000001"),
            (property::TIMER_DEL_UNIQKEY, "Orders+ID"),
        ]);
        assert!(matches!(
            recall_marker(&by_handle_time),
            Some(super::super::Found::RecallMarker {
                due: 1_800_000_000_000,
                ..
            })
        ));
        assert_eq!(
            recall_marker(&unreadable_marker()),
            None,
            "no `+`: names nothing"
        );
        let unreadable = timer_record(&[(property::TIMER_OUT_MS, "soon")]);
        assert_eq!(
            timing(&unreadable),
            Some((1_799_000_000_000, 1_799_000_001_000)),
            "its store time stands in"
        );
    }

    #[test]
    fn tidemark_due_times_and_apache_tag_hashes_are_told_apart() {
        assert!(tags_code_is_due_time(1_765_000_000_000));
        assert!(!tags_code_is_due_time(0));
        assert!(!tags_code_is_due_time(i64::from(i32::MAX)));
        assert!(!tags_code_is_due_time(i64::from(i32::MIN)));
    }

    #[test]
    fn a_checkpoint_far_ahead_of_the_clock_or_negative_is_not_apaches() {
        let now = 1_800_000_000_000;
        let at = |last_read_time_ms, next_queue_offset| ApacheCheckpoint {
            last_read_time_ms,
            next_queue_offset,
        };
        assert!(at(now - 5_000, 10).is_plausible(now));
        assert!(
            at(now + 600_000, 10).is_plausible(now),
            "another host's clock"
        );
        assert!(!at(now + 2 * 86_400_000, 10).is_plausible(now));
        assert!(!at(-1, 10).is_plausible(now));
        assert!(!at(now, -3).is_plausible(now));
    }
}
