//! RocketMQ 5 POP consumption: POP_MESSAGE (200050), ACK_MESSAGE (200051),
//! CHANGE_MESSAGE_INVISIBLETIME (200053), NOTIFICATION (200054), POLLING_INFO (200055),
//! PEEK_MESSAGE (200052); the receipt string (`POP_CK`, "extra info") clients echo back; and the
//! POP retry topics' names.

use crate::command_header;

command_header! {
    /// `PopMessageRequestHeader`.
    pub struct PopMessageRequestHeader {
        required consumer_group: String = "consumerGroup",
        required topic: String = "topic",
        /// −1: any readable queue of the topic on this broker.
        required queue_id: i32 = "queueId",
        /// 1 to 32.
        required max_msg_nums: i32 = "maxMsgNums",
        /// How long the popped messages stay invisible, ms.
        required invisible_time: i64 = "invisibleTime",
        /// Long-polling time, ms (0: answer at once).
        required poll_time: i64 = "pollTime",
        /// The client's clock when it sent the request, ms.
        required born_time: i64 = "bornTime",
        /// Where a group with no progress starts: 0 the first message, 1 the last.
        required init_mode: i32 = "initMode",
        optional exp_type: String = "expType",
        optional exp: String = "exp",
        optional order: bool = "order",
        optional attempt_id: String = "attemptId",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `PopMessageResponseHeader`. The info strings: entries joined by `;`, fields by a space —
    /// start offsets `<retry flag> <queue id> <start offset>`, message offsets
    /// `<retry flag> <queue id> <offset>,<offset>,…`.
    pub struct PopMessageResponseHeader {
        required pop_time: i64 = "popTime",
        required invisible_time: i64 = "invisibleTime",
        required revive_qid: i32 = "reviveQid",
        /// Messages left to pop in the queues this pop read.
        required rest_num: i64 = "restNum",
        optional start_offset_info: String = "startOffsetInfo",
        optional msg_offset_info: String = "msgOffsetInfo",
        optional order_count_info: String = "orderCountInfo",
    }
}

command_header! {
    /// `AckMessageRequestHeader`. `topic` is the real one (the POP retry topic for a retried
    /// message).
    pub struct AckMessageRequestHeader {
        required consumer_group: String = "consumerGroup",
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        required extra_info: String = "extraInfo",
        required offset: i64 = "offset",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `ChangeInvisibleTimeRequestHeader`: the message stays invisible `invisibleTime` from now.
    pub struct ChangeInvisibleTimeRequestHeader {
        required consumer_group: String = "consumerGroup",
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        required extra_info: String = "extraInfo",
        required offset: i64 = "offset",
        required invisible_time: i64 = "invisibleTime",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `ChangeInvisibleTimeResponseHeader`: the client builds the message's new receipt from
    /// these.
    pub struct ChangeInvisibleTimeResponseHeader {
        required pop_time: i64 = "popTime",
        required invisible_time: i64 = "invisibleTime",
        required revive_qid: i32 = "reviveQid",
    }
}

command_header! {
    /// `NotificationRequestHeader`.
    pub struct NotificationRequestHeader {
        required consumer_group: String = "consumerGroup",
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        required poll_time: i64 = "pollTime",
        required born_time: i64 = "bornTime",
        optional order: bool = "order",
        optional attempt_id: String = "attemptId",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `NotificationResponseHeader`.
    pub struct NotificationResponseHeader {
        required has_msg: bool = "hasMsg",
        optional polling_full: bool = "pollingFull",
    }
}

command_header! {
    /// `PollingInfoRequestHeader`.
    pub struct PollingInfoRequestHeader {
        required consumer_group: String = "consumerGroup",
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        optional broker_name: String = "bname",
    }
}

command_header! {
    /// `PollingInfoResponseHeader`: POP requests waiting on the queue.
    pub struct PollingInfoResponseHeader {
        required polling_num: i32 = "pollingNum",
    }
}

command_header! {
    /// `PeekMessageRequestHeader`.
    pub struct PeekMessageRequestHeader {
        required topic: String = "topic",
        required queue_id: i32 = "queueId",
        required max_msg_nums: i32 = "maxMsgNums",
        required consumer_group: String = "consumerGroup",
        optional broker_name: String = "bname",
    }
}

/// Reads one of a pop answer's info strings (`startOffsetInfo`, `orderCountInfo`): entries
/// joined by `;`, the last space-separated field of each the value, the rest its key —
/// `"0 3 100"` is key `"0 3"` (source flag, queue id), value 100. Unreadable entries are left
/// out.
pub fn parse_pop_info(info: Option<&str>) -> std::collections::HashMap<String, i64> {
    info.unwrap_or("")
        .split(';')
        .filter_map(|entry| {
            let (key, value) = entry.rsplit_once(' ')?;
            Some((key.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The revive queue id of an orderly pop's receipt.
pub const ORDERLY_REVIVE_QID: i32 = 999;

/// Which topic a popped message came from, as the receipt says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopSource {
    /// The topic asked for (`0`).
    Topic,
    /// The group's POP retry topic `%RETRY%{group}_{topic}` (`1`).
    RetryV1,
    /// The group's POP retry topic `%RETRY%{group}+{topic}` (`2`).
    RetryV2,
}

impl PopSource {
    pub fn flag(self) -> &'static str {
        match self {
            PopSource::Topic => "0",
            PopSource::RetryV1 => "1",
            PopSource::RetryV2 => "2",
        }
    }

    pub fn from_flag(flag: &str) -> Option<Self> {
        match flag {
            "0" => Some(PopSource::Topic),
            "1" => Some(PopSource::RetryV1),
            "2" => Some(PopSource::RetryV2),
            _ => None,
        }
    }

    /// The topic a message of this source lives in, for `group` popping `topic`.
    pub fn real_topic(self, group: &str, topic: &str) -> String {
        match self {
            PopSource::Topic => topic.to_owned(),
            PopSource::RetryV1 => pop_retry_topic_v1(group, topic),
            PopSource::RetryV2 => pop_retry_topic_v2(group, topic),
        }
    }
}

/// RocketMQ 5's POP retry topic (the default naming): `%RETRY%{group}_{topic}`.
pub fn pop_retry_topic_v1(group: &str, topic: &str) -> String {
    format!("%RETRY%{group}_{topic}")
}

/// RocketMQ 5's POP retry topic, second naming: `%RETRY%{group}+{topic}`.
pub fn pop_retry_topic_v2(group: &str, topic: &str) -> String {
    format!("%RETRY%{group}+{topic}")
}

/// A popped message's receipt (`POP_CK` / `extraInfo`): eight fields separated by one space —
/// the pop's start offset in that queue, pop time, invisible time, revive queue id, source flag,
/// broker name, queue id, the message's queue offset. The gRPC proxy's receipt handle adds a
/// ninth, the commit-log offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopReceipt {
    pub start_offset: i64,
    pub pop_time: i64,
    pub invisible_time: i64,
    pub revive_qid: i32,
    pub source: PopSource,
    pub broker_name: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub commit_log_offset: Option<i64>,
}

impl PopReceipt {
    pub fn encode(&self) -> String {
        // Written by hand rather than with `format!`: every popped message gets one, and the
        // gRPC gateway writes another for each ack.
        let mut out = String::with_capacity(80 + self.broker_name.len());
        let mut number = itoa::Buffer::new();
        for value in [self.start_offset, self.pop_time, self.invisible_time] {
            out.push_str(number.format(value));
            out.push(' ');
        }
        out.push_str(number.format(self.revive_qid));
        out.push(' ');
        out.push_str(self.source.flag());
        out.push(' ');
        out.push_str(&self.broker_name);
        out.push(' ');
        out.push_str(number.format(self.queue_id));
        out.push(' ');
        out.push_str(number.format(self.queue_offset));
        if let Some(offset) = self.commit_log_offset {
            out.push(' ');
            out.push_str(number.format(offset));
        }
        out
    }

    /// Reads a receipt; an error names the field that is missing or unreadable.
    pub fn decode(text: &str) -> Result<PopReceipt, String> {
        // Every ack reads one (the gRPC gateway's two): the fields stay on the stack.
        let mut slots = [""; 9];
        let mut count = 0;
        for field in text.split(' ') {
            if let Some(slot) = slots.get_mut(count) {
                *slot = field;
            }
            count += 1;
        }
        if !(8..=9).contains(&count) {
            return Err(format!("a receipt has 8 or 9 fields, this one {count}"));
        }
        let fields = &slots[..count];
        fn number<T: std::str::FromStr>(
            fields: &[&str],
            index: usize,
            name: &str,
        ) -> Result<T, String> {
            fields[index]
                .parse()
                .map_err(|_| format!("receipt field {name} {:?} is not a number", fields[index]))
        }
        Ok(PopReceipt {
            start_offset: number(fields, 0, "start offset")?,
            pop_time: number(fields, 1, "pop time")?,
            invisible_time: number(fields, 2, "invisible time")?,
            revive_qid: number(fields, 3, "revive queue id")?,
            source: PopSource::from_flag(fields[4])
                .ok_or_else(|| format!("receipt source flag {:?} is not 0, 1 or 2", fields[4]))?,
            broker_name: fields[5].to_owned(),
            queue_id: number(fields, 6, "queue id")?,
            queue_offset: number(fields, 7, "queue offset")?,
            commit_log_offset: match fields.get(8) {
                Some(_) => Some(number(fields, 8, "commit-log offset")?),
                None => None,
            },
        })
    }

    /// When the message becomes visible again.
    pub fn visible_again_at(&self) -> i64 {
        self.pop_time.saturating_add(self.invisible_time)
    }

    /// An orderly pop's receipt.
    pub fn is_orderly(&self) -> bool {
        self.revive_qid == ORDERLY_REVIVE_QID
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext_fields::CommandHeader;

    #[test]
    fn receipts_round_trip_in_rocketmqs_layout() {
        let text = "100 1726700000000 60000 3 0 broker-a 2 104";
        let receipt = PopReceipt::decode(text).expect("decodes");
        assert_eq!(receipt.start_offset, 100);
        assert_eq!(receipt.queue_offset, 104);
        assert_eq!(receipt.source, PopSource::Topic);
        assert_eq!(receipt.visible_again_at(), 1_726_700_060_000);
        assert_eq!(receipt.encode(), text);
        let retry =
            PopReceipt::decode("57 1726700000000 60000 3 1 broker-a 0 57 9000").expect("decodes");
        assert_eq!(retry.source.real_topic("G", "T"), "%RETRY%G_T");
        assert_eq!(retry.commit_log_offset, Some(9000));
        assert_eq!(
            retry.encode(),
            "57 1726700000000 60000 3 1 broker-a 0 57 9000"
        );
        assert!(PopReceipt::decode("200 1 30000 999 0 b 1 201")
            .expect("orderly")
            .is_orderly());
        for bad in [
            "",
            "1 2 3",
            "x 1 2 3 0 b 1 2",
            "1 2 3 4 7 b 1 2",
            "1 2 3 4 0 b 1 2 3 4",
        ] {
            assert!(PopReceipt::decode(bad).is_err(), "{bad:?}");
        }
        assert_eq!(pop_retry_topic_v2("G", "T"), "%RETRY%G+T");
    }

    #[test]
    fn info_strings_are_keyed_by_everything_but_their_value() {
        let starts = parse_pop_info(Some("0 3 100;1 0 57"));
        assert_eq!(starts.get("0 3"), Some(&100));
        assert_eq!(starts.get("1 0"), Some(&57));
        let counts = parse_pop_info(Some("0 qo1%5 2;0 1 0"));
        assert_eq!(counts.get("0 qo1%5"), Some(&2));
        assert!(parse_pop_info(None).is_empty());
        assert!(parse_pop_info(Some("garbage")).is_empty());
    }

    #[test]
    fn pop_headers_use_java_field_names() {
        let header = PopMessageRequestHeader {
            consumer_group: "G".into(),
            topic: "T".into(),
            queue_id: -1,
            max_msg_nums: 32,
            invisible_time: 60_000,
            poll_time: 20_000,
            born_time: 1_726_700_000_000,
            init_mode: 0,
            exp_type: Some("TAG".into()),
            exp: Some("*".into()),
            order: None,
            attempt_id: None,
            broker_name: Some("broker-a".into()),
        };
        let fields = header.to_ext_fields();
        assert_eq!(fields.get("consumerGroup"), Some("G"));
        assert_eq!(fields.get("maxMsgNums"), Some("32"));
        assert_eq!(fields.get("invisibleTime"), Some("60000"));
        assert_eq!(fields.get("bornTime"), Some("1726700000000"));
        assert_eq!(
            PopMessageRequestHeader::read_from(&fields).ok(),
            Some(header)
        );
        let mut missing = fields.clone();
        missing.remove("pollTime");
        assert!(PopMessageRequestHeader::read_from(&missing).is_err());
    }
}
