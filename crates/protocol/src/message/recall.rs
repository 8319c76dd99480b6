//! The recall handle of a timer message (RocketMQ 5.3.2+): what a send of a timer message is
//! answered with, and what a producer gives back to cancel the message before it is due.
//!
//! Its text is URL-safe base64 of `v1 <topic> <broker name> <timestamp> <unique id>`, the
//! timestamp being the due time plus one millisecond (RocketMQ's brokers round due times down
//! to their slot, and the extra millisecond rounds back into the same slot). Readers accept
//! the base64 with or without padding, as Java's decoder does.

use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;

const VERSION_1: &str = "v1";

const HANDLE_BASE64: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A decoded recall handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecallHandle {
    /// The topic the message was sent to (not the timer topic it waits in).
    pub topic: String,
    /// The broker that holds the message.
    pub broker_name: String,
    /// The due time plus one millisecond, as RocketMQ writes it.
    pub timestamp_ms: i64,
    /// The message's unique (client) id, `UNIQ_KEY`.
    pub message_id: String,
}

/// Why a recall handle cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("recall handle is invalid: {0}")]
pub struct BadRecallHandle(&'static str);

impl RecallHandle {
    /// The handle of a timer message due at `due_ms`.
    pub fn for_timer(topic: &str, broker_name: &str, due_ms: i64, message_id: &str) -> Self {
        RecallHandle {
            topic: topic.to_owned(),
            broker_name: broker_name.to_owned(),
            timestamp_ms: due_ms.saturating_add(1),
            message_id: message_id.to_owned(),
        }
    }

    /// The due time the handle names (a RocketMQ broker's is rounded down to its slot).
    pub fn due_ms(&self) -> i64 {
        self.timestamp_ms.saturating_sub(1)
    }

    pub fn encode(&self) -> String {
        let text = format!(
            "{VERSION_1} {} {} {} {}",
            self.topic, self.broker_name, self.timestamp_ms, self.message_id
        );
        HANDLE_BASE64.encode(text)
    }

    pub fn decode(handle: &str) -> Result<Self, BadRecallHandle> {
        let bytes = HANDLE_BASE64
            .decode(handle.trim())
            .map_err(|_| BadRecallHandle("not base64"))?;
        let text = String::from_utf8(bytes).map_err(|_| BadRecallHandle("not UTF-8"))?;
        let mut parts = text.split(' ');
        if parts.next() != Some(VERSION_1) {
            return Err(BadRecallHandle("not a v1 handle"));
        }
        let mut next = |what: &'static str| {
            parts
                .next()
                .filter(|part| !part.is_empty())
                .ok_or(BadRecallHandle(what))
        };
        let topic = next("no topic")?.to_owned();
        let broker_name = next("no broker name")?.to_owned();
        let timestamp_ms = next("no timestamp")?
            .parse()
            .map_err(|_| BadRecallHandle("timestamp is not a number"))?;
        let message_id = next("no message id")?.to_owned();
        Ok(RecallHandle {
            topic,
            broker_name,
            timestamp_ms,
            message_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_reads_back_what_was_written() {
        let handle = RecallHandle::for_timer("Orders", "broker-a", 1_700_000_000_000, "7F00AB");
        let text = handle.encode();
        assert!(text.len().is_multiple_of(4), "padded: {text}");
        let read = RecallHandle::decode(&text).expect("reads");
        assert_eq!(read, handle);
        assert_eq!(read.due_ms(), 1_700_000_000_000);
        assert_eq!(read.timestamp_ms, 1_700_000_000_001);
    }

    #[test]
    fn reads_a_handle_as_java_writes_it_and_without_padding() {
        // Java: Base64.getUrlEncoder().encodeToString("v1 T b 1001 ID1".getBytes(UTF_8)).
        let java = "djEgVCBiIDEwMDEgSUQx";
        let read = RecallHandle::decode(java).expect("reads");
        assert_eq!(
            (
                read.topic.as_str(),
                read.broker_name.as_str(),
                read.timestamp_ms,
                read.message_id.as_str()
            ),
            ("T", "b", 1001, "ID1")
        );
        let padded = HANDLE_BASE64.encode("v1 T b 1001 ID12");
        assert!(padded.ends_with('='));
        assert!(RecallHandle::decode(padded.trim_end_matches('=')).is_ok());
    }

    #[test]
    fn refuses_what_is_not_a_handle() {
        for bad in [
            String::new(),
            "%%%".to_owned(),
            HANDLE_BASE64.encode("v1 a b c"),
            HANDLE_BASE64.encode("v2 a b 1 d"),
            HANDLE_BASE64.encode("v1 a b soon d"),
            HANDLE_BASE64.encode("v1 a  1 d"),
            HANDLE_BASE64.encode([0xff, 0xfe]),
        ] {
            assert!(RecallHandle::decode(&bad).is_err(), "{bad:?}");
        }
    }
}
