//! Message trace data: what clients with tracing on (Java's `enableMsgTrace`) store in the
//! trace topic (`RMQ_SYS_TRACE_TOPIC` unless configured otherwise) — one message body holds
//! records separated by `\u{2}`, each a type followed by `\u{1}`-separated fields (RocketMQ's
//! `TraceDataEncoder` layout). Decoding is lenient: a record of an unknown type, or one too
//! short for its type, is skipped; numbers that do not parse read as absent.

/// The default trace topic (RocketMQ's `TopicValidator.RMQ_SYS_TRACE_TOPIC`).
pub const DEFAULT_TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";

const RECORD_SEPARATOR: char = '\u{2}';
const FIELD_SEPARATOR: char = '\u{1}';

/// One trace record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceRecord {
    /// A producer sent the message.
    Pub {
        timestamp_ms: Option<i64>,
        region: String,
        producer_group: String,
        topic: String,
        msg_id: String,
        tags: String,
        keys: String,
        store_host: String,
        body_length: Option<i64>,
        cost_ms: Option<i64>,
        /// The offset message id, when the client recorded it.
        offset_msg_id: Option<String>,
        success: Option<bool>,
        client_host: Option<String>,
    },
    /// A consumer is about to run its listener on the message.
    SubBefore {
        timestamp_ms: Option<i64>,
        region: String,
        consumer_group: String,
        request_id: String,
        msg_id: String,
        retry_times: Option<i64>,
        keys: String,
    },
    /// The listener returned.
    SubAfter {
        request_id: String,
        msg_id: String,
        cost_ms: Option<i64>,
        success: Option<bool>,
        keys: String,
        /// How the listener ended (RocketMQ's `ConsumeReturnType` ordinal).
        context_code: Option<i64>,
        timestamp_ms: Option<i64>,
    },
    /// A transactional producer ended (or answered a check-back for) the transaction.
    EndTransaction {
        timestamp_ms: Option<i64>,
        region: String,
        producer_group: String,
        topic: String,
        msg_id: String,
        tags: String,
        keys: String,
        store_host: String,
        transaction_id: String,
        /// COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW.
        state: String,
        from_check: Option<bool>,
    },
}

impl TraceRecord {
    /// The client's message id the record is about.
    pub fn msg_id(&self) -> &str {
        match self {
            TraceRecord::Pub { msg_id, .. }
            | TraceRecord::SubBefore { msg_id, .. }
            | TraceRecord::SubAfter { msg_id, .. }
            | TraceRecord::EndTransaction { msg_id, .. } => msg_id,
        }
    }

    /// Whether the record is about the message with client id or offset id `id`.
    pub fn is_about(&self, id: &str) -> bool {
        self.msg_id() == id
            || matches!(self, TraceRecord::Pub { offset_msg_id: Some(offset), .. } if offset == id)
    }

    /// RocketMQ's name of the record's type.
    pub fn kind(&self) -> &'static str {
        match self {
            TraceRecord::Pub { .. } => "Pub",
            TraceRecord::SubBefore { .. } => "SubBefore",
            TraceRecord::SubAfter { .. } => "SubAfter",
            TraceRecord::EndTransaction { .. } => "EndTransaction",
        }
    }

    /// When the event happened, if the record says.
    pub fn timestamp_ms(&self) -> Option<i64> {
        match self {
            TraceRecord::Pub { timestamp_ms, .. }
            | TraceRecord::SubBefore { timestamp_ms, .. }
            | TraceRecord::SubAfter { timestamp_ms, .. }
            | TraceRecord::EndTransaction { timestamp_ms, .. } => *timestamp_ms,
        }
    }
}

/// Every record of one trace message body.
pub fn decode_trace_data(data: &str) -> Vec<TraceRecord> {
    data.split(RECORD_SEPARATOR)
        .filter(|record| !record.is_empty())
        .filter_map(|record| decode_record(&record.split(FIELD_SEPARATOR).collect::<Vec<_>>()))
        .collect()
}

fn decode_record(fields: &[&str]) -> Option<TraceRecord> {
    let text = |index: usize| {
        fields
            .get(index)
            .map_or_else(String::new, |f| (*f).to_owned())
    };
    let number = |index: usize| fields.get(index).and_then(|f| f.trim().parse::<i64>().ok());
    let flag = |index: usize| {
        fields
            .get(index)
            .and_then(|f| f.trim().parse::<bool>().ok())
    };
    let optional = |index: usize| fields.get(index).map(|f| (*f).to_owned());
    match *fields.first()? {
        "Pub" if fields.len() >= 12 => {
            // 13 fields: success last; 14: offset id, success; 15+: and the client host.
            let (offset_msg_id, success, client_host) = match fields.len() {
                12 => (None, None, None),
                13 => (None, flag(12), None),
                _ => (optional(12), flag(13), optional(14)),
            };
            Some(TraceRecord::Pub {
                timestamp_ms: number(1),
                region: text(2),
                producer_group: text(3),
                topic: text(4),
                msg_id: text(5),
                tags: text(6),
                keys: text(7),
                store_host: text(8),
                body_length: number(9),
                cost_ms: number(10),
                offset_msg_id,
                success,
                client_host,
            })
        }
        "SubBefore" if fields.len() >= 8 => Some(TraceRecord::SubBefore {
            timestamp_ms: number(1),
            region: text(2),
            consumer_group: text(3),
            request_id: text(4),
            msg_id: text(5),
            retry_times: number(6),
            keys: text(7),
        }),
        "SubAfter" if fields.len() >= 6 => Some(TraceRecord::SubAfter {
            request_id: text(1),
            msg_id: text(2),
            cost_ms: number(3),
            success: flag(4),
            keys: text(5),
            context_code: number(6),
            timestamp_ms: number(7),
        }),
        "EndTransaction" if fields.len() >= 13 => Some(TraceRecord::EndTransaction {
            timestamp_ms: number(1),
            region: text(2),
            producer_group: text(3),
            topic: text(4),
            msg_id: text(5),
            tags: text(6),
            keys: text(7),
            store_host: text(8),
            transaction_id: text(10),
            state: text(11),
            from_check: flag(12),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(fields: &[&str]) -> String {
        fields.join("\u{1}") + "\u{2}"
    }

    #[test]
    fn the_java_clients_records_decode() {
        let publish = join(&[
            "Pub",
            "1700000000000",
            "DefaultRegion",
            "PG",
            "Orders",
            "ID1",
            "TagA",
            "k1",
            "127.0.0.1:10911",
            "12",
            "3",
            "0",
            "7F000001000027AF0000000000000000",
            "true",
        ]);
        let before = join(&[
            "SubBefore",
            "1700000000100",
            "DefaultRegion",
            "CG",
            "R1",
            "ID1",
            "0",
            "k1",
        ]);
        let after = join(&[
            "SubAfter",
            "R1",
            "ID1",
            "5",
            "true",
            "k1",
            "0",
            "1700000000105",
        ]);
        let records = decode_trace_data(&format!("{publish}{before}{after}"));
        assert_eq!(records.len(), 3);
        assert!(records.iter().all(|record| record.is_about("ID1")));
        assert!(records[0].is_about("7F000001000027AF0000000000000000"));
        assert!(matches!(
            &records[0],
            TraceRecord::Pub { success: Some(true), cost_ms: Some(3), producer_group, .. } if producer_group == "PG"
        ));
        assert!(matches!(
            &records[1],
            TraceRecord::SubBefore { consumer_group, retry_times: Some(0), .. } if consumer_group == "CG"
        ));
        assert_eq!(records[2].timestamp_ms(), Some(1_700_000_000_105));
        assert_eq!(records[2].kind(), "SubAfter");
    }

    #[test]
    fn short_unknown_and_garbled_records_are_skipped() {
        assert!(decode_trace_data("").is_empty());
        assert!(decode_trace_data("Pub\u{1}1\u{2}").is_empty());
        assert!(decode_trace_data("Mystery\u{1}a\u{1}b\u{2}").is_empty());
        let lenient = decode_trace_data(&join(&[
            "SubBefore",
            "not-a-time",
            "r",
            "g",
            "q",
            "ID",
            "x",
            "k",
        ]));
        assert_eq!(lenient.len(), 1);
        assert_eq!(lenient[0].timestamp_ms(), None);
    }

    proptest::proptest! {
        #[test]
        fn decoding_never_panics(data in "[\\PC\u{1}\u{2}]{0,200}") {
            let _ = decode_trace_data(&data);
        }
    }
}
