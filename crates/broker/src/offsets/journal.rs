//! Consumer progress in the offset journal: the records a change of the table writes and the
//! snapshot a compaction writes, both replayed into a [`ConsumerOffsetTable`] at start.
//!
//! A record states the result of a change, not the request that caused it, so replaying it is
//! idempotent and needs none of the rules (forward-only, fences) again:
//! - `1` queue progress: topic, group, queue id, offset, reset epoch, acknowledged ranges (a u16
//!   count, then each range's start and end) — after a commit, reset, rewind, acknowledged
//!   ranges reported, or a slave's merge;
//! - `2` group removed: group; `3` topic removed: topic;
//! - `4` replica position: the next offset of the master's progress stream to apply.
//!
//! Strings are a big-endian u16 length and UTF-8; numbers big-endian. A snapshot is a u64 count
//! followed by that many queue-progress bodies, then — only when it is not 0 — the replica
//! position as an i64.
//!
//! The same records, batched, are what a master publishes to its replicas
//! ([`crate::progress_stream`]); there a record is a change to merge, not a value to restore.

use tidemark_protocol::acked::{AckedRanges, ACKED_RANGES_MAX};
use tidemark_storage::journal::JournalCodec;

use super::ConsumerOffsetTable;

const QUEUE_PROGRESS: u8 = 1;
const GROUP_REMOVED: u8 = 2;
const TOPIC_REMOVED: u8 = 3;
const REPLICA_POSITION: u8 = 4;

/// One (topic, group, queue)'s stored progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProgressEntry<'a> {
    pub topic: &'a str,
    pub group: &'a str,
    pub queue_id: i32,
    pub offset: i64,
    pub reset_epoch: i64,
    pub acked: AckedRanges,
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    // Topic and group names are far below 64 KiB (RocketMQ caps them at 127 and 255 chars);
    // a longer one is cut rather than written in a form recovery would refuse.
    let bytes = &text.as_bytes()[..text.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn put_entry(out: &mut Vec<u8>, entry: &ProgressEntry<'_>) {
    put_str(out, entry.topic);
    put_str(out, entry.group);
    out.extend_from_slice(&entry.queue_id.to_be_bytes());
    out.extend_from_slice(&entry.offset.to_be_bytes());
    out.extend_from_slice(&entry.reset_epoch.to_be_bytes());
    // `AckedRanges` holds at most ACKED_RANGES_MAX ranges, far below u16::MAX.
    out.extend_from_slice(&(entry.acked.len() as u16).to_be_bytes());
    for (start, end) in entry.acked.iter() {
        out.extend_from_slice(&start.to_be_bytes());
        out.extend_from_slice(&end.to_be_bytes());
    }
}

pub(crate) fn queue_progress_record(entry: &ProgressEntry<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + entry.topic.len() + entry.group.len());
    out.push(QUEUE_PROGRESS);
    put_entry(&mut out, entry);
    out
}

pub(crate) fn group_removed_record(group: &str) -> Vec<u8> {
    let mut out = vec![GROUP_REMOVED];
    put_str(&mut out, group);
    out
}

pub(crate) fn topic_removed_record(topic: &str) -> Vec<u8> {
    let mut out = vec![TOPIC_REMOVED];
    put_str(&mut out, topic);
    out
}

pub(crate) fn replica_position_record(position: i64) -> Vec<u8> {
    let mut out = vec![REPLICA_POSITION];
    out.extend_from_slice(&position.to_be_bytes());
    out
}

/// A journal record, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    QueueProgress(ProgressEntry<'a>),
    GroupRemoved(&'a str),
    TopicRemoved(&'a str),
    ReplicaPosition(i64),
}

/// Reads one record whole (no trailing bytes).
pub(crate) fn decode_record(bytes: &[u8]) -> Result<Record<'_>, String> {
    let mut reader = Reader { bytes };
    let record = match reader.u8("kind")? {
        QUEUE_PROGRESS => Record::QueueProgress(reader.entry()?),
        GROUP_REMOVED => Record::GroupRemoved(reader.str("group")?),
        TOPIC_REMOVED => Record::TopicRemoved(reader.str("topic")?),
        REPLICA_POSITION => Record::ReplicaPosition(reader.i64("replica position")?),
        other => return Err(format!("unknown record kind {other}")),
    };
    reader.finish()?;
    Ok(record)
}

/// Reads fields off a record, failing with what was being read.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize, what: &str) -> Result<&'a [u8], String> {
        if self.bytes.len() < count {
            return Err(format!("record ends inside its {what}"));
        }
        let (head, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn i32(&mut self, what: &str) -> Result<i32, String> {
        let mut raw = [0; 4];
        raw.copy_from_slice(self.take(4, what)?);
        Ok(i32::from_be_bytes(raw))
    }

    fn i64(&mut self, what: &str) -> Result<i64, String> {
        let mut raw = [0; 8];
        raw.copy_from_slice(self.take(8, what)?);
        Ok(i64::from_be_bytes(raw))
    }

    fn str(&mut self, what: &str) -> Result<&'a str, String> {
        let raw = self.take(2, what)?;
        let length = u16::from_be_bytes([raw[0], raw[1]]) as usize;
        std::str::from_utf8(self.take(length, what)?).map_err(|_| format!("{what} is not UTF-8"))
    }

    fn u16(&mut self, what: &str) -> Result<u16, String> {
        let raw = self.take(2, what)?;
        Ok(u16::from_be_bytes([raw[0], raw[1]]))
    }

    fn entry(&mut self) -> Result<ProgressEntry<'a>, String> {
        let topic = self.str("topic")?;
        let group = self.str("group")?;
        let queue_id = self.i32("queue id")?;
        let offset = self.i64("offset")?;
        let reset_epoch = self.i64("reset epoch")?;
        let count = usize::from(self.u16("range count")?);
        if count > ACKED_RANGES_MAX {
            return Err(format!(
                "{count} acknowledged ranges (at most {ACKED_RANGES_MAX})"
            ));
        }
        let mut ranges = Vec::with_capacity(count);
        for _ in 0..count {
            ranges.push((self.i64("range start")?, self.i64("range end")?));
        }
        Ok(ProgressEntry {
            topic,
            group,
            queue_id,
            offset,
            reset_epoch,
            acked: AckedRanges::from_ranges(ranges),
        })
    }

    fn finish(&self) -> Result<(), String> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} unexpected bytes after the record",
                self.bytes.len()
            ))
        }
    }
}

/// Where a fresh journal starts: the table imported from `consumerOffset.json` (an Apache
/// store, or a Tidemark store from before the journal), or empty.
pub(crate) struct OffsetJournalCodec<'a> {
    pub import: &'a dyn Fn() -> Result<ConsumerOffsetTable, String>,
}

impl std::fmt::Debug for OffsetJournalCodec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OffsetJournalCodec")
    }
}

impl JournalCodec for OffsetJournalCodec<'_> {
    type State = ConsumerOffsetTable;

    fn fresh(&self) -> Result<ConsumerOffsetTable, String> {
        (self.import)()
    }

    fn restore(&self, snapshot: &[u8]) -> Result<ConsumerOffsetTable, String> {
        let mut reader = Reader { bytes: snapshot };
        let count = reader.i64("entry count")?;
        let mut table = ConsumerOffsetTable::new();
        for _ in 0..count {
            let entry = reader.entry()?;
            table.restore_queue(&entry);
        }
        if !reader.bytes.is_empty() {
            table.replica_position = reader.i64("replica position")?;
        }
        reader.finish()?;
        Ok(table)
    }

    fn apply(&self, table: &mut ConsumerOffsetTable, record: &[u8]) -> Result<(), String> {
        match decode_record(record)? {
            Record::QueueProgress(entry) => table.restore_queue(&entry),
            Record::GroupRemoved(group) => {
                table.drop_group(group);
            }
            Record::TopicRemoved(topic) => {
                table.drop_topic(topic);
            }
            Record::ReplicaPosition(position) => table.replica_position = position,
        }
        Ok(())
    }

    fn snapshot(&self, table: &ConsumerOffsetTable) -> Vec<u8> {
        encode_snapshot(table)
    }
}

pub(crate) fn encode_snapshot(table: &ConsumerOffsetTable) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + table.entry_count() * 48);
    out.extend_from_slice(&(table.entry_count() as i64).to_be_bytes());
    table.for_each_entry(|entry| put_entry(&mut out, &entry));
    if table.replica_position != 0 {
        out.extend_from_slice(&table.replica_position.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> Result<ConsumerOffsetTable, String> {
        Ok(ConsumerOffsetTable::new())
    }

    fn codec() -> OffsetJournalCodec<'static> {
        OffsetJournalCodec { import: &empty }
    }

    #[test]
    fn records_and_snapshots_rebuild_the_table() {
        let mut table = ConsumerOffsetTable::new();
        table.commit("T", "g1", 0, 5, 10, 0);
        table.commit("T", "g2", 3, 7, 10, 0);
        table.reset("U", "g1", 1, 2, 1_000);
        table.note_acked("T", "g1", 0, &AckedRanges::from_ranges([(7, 9), (12, 13)]));
        let codec = codec();
        let restored = codec.restore(&encode_snapshot(&table)).expect("snapshot");
        assert_eq!(restored.to_wrapper(), table.to_wrapper());

        let mut replayed = ConsumerOffsetTable::new();
        for record in [
            queue_progress_record(&ProgressEntry {
                topic: "T",
                group: "g1",
                queue_id: 0,
                offset: 9,
                reset_epoch: 0,
                acked: AckedRanges::from_ranges([(11, 14)]),
            }),
            queue_progress_record(&ProgressEntry {
                topic: "U",
                group: "g1",
                queue_id: 0,
                offset: 1,
                reset_epoch: 77,
                acked: AckedRanges::new(),
            }),
            topic_removed_record("U"),
            queue_progress_record(&ProgressEntry {
                topic: "T",
                group: "g2",
                queue_id: 0,
                offset: 4,
                reset_epoch: 0,
                acked: AckedRanges::new(),
            }),
            group_removed_record("g2"),
        ] {
            codec.apply(&mut replayed, &record).expect("applies");
        }
        assert_eq!(replayed.query("T", "g1", 0), Some(9));
        assert_eq!(
            replayed.queue_progress("T", "g1", 0).map(|p| p.acked),
            Some(AckedRanges::from_ranges([(11, 14)]))
        );
        assert_eq!(replayed.query("U", "g1", 0), None);
        assert_eq!(replayed.query("T", "g2", 0), None);
    }

    #[test]
    fn malformed_records_are_refused_with_a_reason() {
        let codec = codec();
        let mut table = ConsumerOffsetTable::new();
        let mut record = queue_progress_record(&ProgressEntry {
            topic: "T",
            group: "g",
            queue_id: 0,
            offset: 1,
            reset_epoch: 0,
            acked: AckedRanges::new(),
        });
        assert!(codec
            .apply(&mut table, &record[..record.len() - 1])
            .is_err());
        record.push(0);
        assert!(codec.apply(&mut table, &record).is_err());
        assert!(codec.apply(&mut table, &[9]).is_err());
        assert!(codec.apply(&mut table, &[2, 0, 1, 0xff]).is_err());
        assert!(table.is_empty());
    }
}
