//! One entry of a group's progress history, and how it is written in the history journal.
//!
//! Records and snapshots are big-endian: strings are a u16 length and UTF-8 bytes, an offset
//! that is not there (a queue with no committed offset before, or one removed) is -1.

/// Why a group's committed progress moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChangeKind {
    /// Routine progress, written at most once an interval for each queue that moved since the
    /// last one: no one asked for it, it tells where the group stood.
    Checkpoint,
    /// An operator moved the group to a time or an offset (INVOKE_BROKER_TO_RESET_OFFSET).
    Reset,
    /// An operator moved the group to the end of its queues (a reset to timestamp -1).
    Skip,
    /// Offsets copied from another group (CLONE_GROUP_OFFSET).
    Clone,
    /// A commit below the stored offset by an admin tool or by the queue's own consumer
    /// (UPDATE_CONSUMER_OFFSET), which RocketMQ takes as deliberate.
    Rewind,
    /// The group was deleted with its offsets (DELETE_SUBSCRIPTIONGROUP).
    GroupDeleted,
    /// A topic was deleted, and the group's offsets in it (DELETE_TOPIC_IN_BROKER).
    TopicDeleted,
    /// Put back where the group stood at a time or before an entry (TIDEMARK_RESTORE_PROGRESS).
    Restore,
    /// Dead letters sent again, to the group's retry topic or their original topic
    /// (TIDEMARK_RESEND_DEAD_LETTERS); the entry's detail says which.
    Resend,
    /// A group's consumed retry messages of one original topic put back into its retry topic
    /// (TIDEMARK_REPLAY_RETRIES).
    RetryReplay,
}

impl ChangeKind {
    const ALL: [ChangeKind; 10] = [
        ChangeKind::Checkpoint,
        ChangeKind::Reset,
        ChangeKind::Skip,
        ChangeKind::Clone,
        ChangeKind::Rewind,
        ChangeKind::GroupDeleted,
        ChangeKind::TopicDeleted,
        ChangeKind::Restore,
        ChangeKind::Resend,
        ChangeKind::RetryReplay,
    ];

    fn code(self) -> u8 {
        match self {
            ChangeKind::Checkpoint => 1,
            ChangeKind::Reset => 2,
            ChangeKind::Skip => 3,
            ChangeKind::Clone => 4,
            ChangeKind::Rewind => 5,
            ChangeKind::GroupDeleted => 6,
            ChangeKind::TopicDeleted => 7,
            ChangeKind::Restore => 8,
            ChangeKind::Resend => 9,
            ChangeKind::RetryReplay => 10,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.code() == code)
    }

    /// The name tools and the console show.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Checkpoint => "checkpoint",
            ChangeKind::Reset => "reset",
            ChangeKind::Skip => "skip",
            ChangeKind::Clone => "clone",
            ChangeKind::Rewind => "rewind",
            ChangeKind::GroupDeleted => "group-deleted",
            ChangeKind::TopicDeleted => "topic-deleted",
            ChangeKind::Restore => "restore",
            ChangeKind::Resend => "resend",
            ChangeKind::RetryReplay => "retry-replay",
        }
    }
}

/// Who asked for a change.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Actor {
    /// The ACL account that signed the request, or `open` on a broker without ACL (or the
    /// broker itself for a checkpoint).
    pub account: String,
    /// The connection's remote address.
    pub address: String,
    /// What the client said it is: language and version, and the tool's client id if known.
    pub client: String,
}

/// One queue's committed offset before and after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMove {
    pub topic: String,
    pub queue_id: i32,
    /// `None`: the group had no offset in the queue.
    pub before: Option<i64>,
    /// `None`: the offset was removed.
    pub after: Option<i64>,
}

/// One change of a group's committed progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// Increases by one with every entry this broker records (what `--undo` names).
    pub id: u64,
    pub time_ms: i64,
    pub group: String,
    pub kind: ChangeKind,
    /// The request that made the change (0 for a checkpoint).
    pub request_code: i32,
    pub actor: Actor,
    pub queues: Vec<QueueMove>,
    /// What the queues do not say (which messages a resend sent, and where); empty for most.
    pub detail: String,
}

/// A record of one entry without a detail (the first format, still written for those).
const ENTRY: u8 = 1;
/// A record of one entry followed by its detail.
const ENTRY_WITH_DETAIL: u8 = 2;

impl HistoryEntry {
    /// The entry as one journal record.
    pub fn record(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.queues.len() * 24 + self.detail.len());
        if self.detail.is_empty() {
            out.push(ENTRY);
            self.encode(&mut out);
        } else {
            out.push(ENTRY_WITH_DETAIL);
            self.encode(&mut out);
            put_str(&mut out, &self.detail);
        }
        out
    }

    /// Bytes it takes in memory and in a snapshot, roughly (what the size bound counts).
    pub fn weight(&self) -> usize {
        let strings = self.group.len()
            + self.actor.account.len()
            + self.actor.address.len()
            + self.actor.client.len()
            + self.detail.len();
        let queues: usize = self.queues.iter().map(|queue| 22 + queue.topic.len()).sum();
        33 + strings + queues
    }

    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&self.time_ms.to_be_bytes());
        put_str(out, &self.group);
        out.push(self.kind.code());
        out.extend_from_slice(&self.request_code.to_be_bytes());
        put_str(out, &self.actor.account);
        put_str(out, &self.actor.address);
        put_str(out, &self.actor.client);
        out.extend_from_slice(&(self.queues.len() as u32).to_be_bytes());
        for queue in &self.queues {
            put_str(out, &queue.topic);
            out.extend_from_slice(&queue.queue_id.to_be_bytes());
            out.extend_from_slice(&queue.before.unwrap_or(-1).to_be_bytes());
            out.extend_from_slice(&queue.after.unwrap_or(-1).to_be_bytes());
        }
    }

    /// Decodes one journal record.
    pub fn from_record(record: &[u8]) -> Result<Self, String> {
        match record.first() {
            Some(&kind @ (ENTRY | ENTRY_WITH_DETAIL)) => {
                let mut reader = Reader {
                    bytes: record,
                    at: 1,
                };
                let mut entry = Self::decode(&mut reader)?;
                if kind == ENTRY_WITH_DETAIL {
                    entry.detail = reader.string("detail")?;
                }
                if reader.at != record.len() {
                    return Err(format!(
                        "{} bytes after the entry",
                        record.len() - reader.at
                    ));
                }
                Ok(entry)
            }
            Some(other) => Err(format!("unknown history record kind {other}")),
            None => Err("empty history record".to_owned()),
        }
    }

    pub(super) fn decode(reader: &mut Reader<'_>) -> Result<Self, String> {
        let id = reader.u64("id")?;
        let time_ms = reader.i64("time")?;
        let group = reader.string("group")?;
        let kind_code = reader.u8("kind")?;
        let kind =
            ChangeKind::from_code(kind_code).ok_or(format!("unknown change kind {kind_code}"))?;
        let request_code = reader.i32("request code")?;
        let actor = Actor {
            account: reader.string("account")?,
            address: reader.string("address")?,
            client: reader.string("client")?,
        };
        let count = reader.u32("queue count")? as usize;
        // Each queue takes at least 22 bytes: a count past what is left is damage.
        if count > reader.remaining() / 22 {
            return Err(format!("{count} queues in {} bytes", reader.remaining()));
        }
        let mut queues = Vec::with_capacity(count);
        for _ in 0..count {
            let topic = reader.string("topic")?;
            let queue_id = reader.i32("queue id")?;
            let before = reader.i64("offset before")?;
            let after = reader.i64("offset after")?;
            queues.push(QueueMove {
                topic,
                queue_id,
                before: (before >= 0).then_some(before),
                after: (after >= 0).then_some(after),
            });
        }
        Ok(Self {
            id,
            time_ms,
            group,
            kind,
            request_code,
            actor,
            queues,
            detail: String::new(),
        })
    }
}

pub(super) fn put_str(out: &mut Vec<u8>, text: &str) {
    // Names are bounded by RocketMQ's limits (topics 127 bytes, groups 255); an address or a
    // client string longer than a u16 is cut rather than refused.
    let mut end = text.len().min(u16::MAX as usize);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_be_bytes());
    out.extend_from_slice(&text.as_bytes()[..end]);
}

/// Reads big-endian fields, naming the field a short input ends in.
pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) at: usize,
}

impl Reader<'_> {
    fn take(&mut self, length: usize, what: &str) -> Result<&[u8], String> {
        let end = self.at.checked_add(length).ok_or("length overflows")?;
        let bytes = self
            .bytes
            .get(self.at..end)
            .ok_or_else(|| format!("ends inside its {what}"))?;
        self.at = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut value = [0; N];
        value.copy_from_slice(self.take(N, what)?);
        Ok(value)
    }

    pub(super) fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }

    pub(super) fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(super) fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    pub(super) fn i32(&mut self, what: &str) -> Result<i32, String> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    pub(super) fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    pub(super) fn i64(&mut self, what: &str) -> Result<i64, String> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    pub(super) fn string(&mut self, what: &str) -> Result<String, String> {
        let length = u16::from_be_bytes(self.array(what)?) as usize;
        let bytes = self.take(length, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("its {what} is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> HistoryEntry {
        HistoryEntry {
            id: 7,
            time_ms: 1_800_000_000_000,
            group: "billing".to_owned(),
            kind: ChangeKind::Reset,
            request_code: 222,
            actor: Actor {
                account: "ops-admin".to_owned(),
                address: "10.0.0.5:51234".to_owned(),
                client: "JAVA 4.9.8 mqadmin".to_owned(),
            },
            queues: vec![
                QueueMove {
                    topic: "Orders".to_owned(),
                    queue_id: 0,
                    before: Some(1_200),
                    after: Some(900),
                },
                QueueMove {
                    topic: "Orders".to_owned(),
                    queue_id: 1,
                    before: None,
                    after: Some(0),
                },
            ],
            detail: String::new(),
        }
    }

    #[test]
    fn an_entry_reads_back_as_written() {
        let entry = sample();
        assert_eq!(entry.record()[0], ENTRY, "no detail: the first format");
        assert_eq!(HistoryEntry::from_record(&entry.record()), Ok(entry));
        let detailed = HistoryEntry {
            detail: "to %RETRY%billing: 12, 13".to_owned(),
            ..sample()
        };
        assert_eq!(HistoryEntry::from_record(&detailed.record()), Ok(detailed));
    }

    #[test]
    fn every_cut_or_unknown_kind_is_an_error_not_a_panic() {
        let record = sample().record();
        for length in 0..record.len() {
            assert!(
                HistoryEntry::from_record(&record[..length]).is_err(),
                "{length}"
            );
        }
        let mut longer = record.clone();
        longer.push(0);
        assert!(HistoryEntry::from_record(&longer).is_err());
        let mut unknown = record;
        unknown[0] = 3;
        assert!(HistoryEntry::from_record(&unknown).is_err());
    }

    #[test]
    fn every_kind_has_its_own_code() {
        for kind in ChangeKind::ALL {
            assert_eq!(ChangeKind::from_code(kind.code()), Some(kind));
        }
    }
}
