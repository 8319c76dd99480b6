//! How each group reads each topic — PULL (the consumer rebalances and pulls) or POP (the broker
//! hands out messages) — as an operator set it with SET_MESSAGE_REQUEST_MODE; consumers that
//! let the broker assign queues (QUERY_ASSIGNMENT) follow it. Persisted as
//! `messageRequestMode.json` in RocketMQ's layout:
//! `{"messageRequestModeMap":{topic:{group:{"consumerGroup","mode","popShareQueueNum","topic"}}}}`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tidemark_protocol::body::{MessageRequestMode, SetMessageRequestModeRequestBody};
use tidemark_protocol::json::{JsonBody, WriteOptions};
use tidemark_protocol::json_object;

use crate::lock_rank::{self, Rank, Ranked};

json_object! {
    /// The file's layout (RocketMQ's `MessageRequestModeManager`).
    pub struct RequestModeFile {
        "messageRequestModeMap" => modes: BTreeMap<String, BTreeMap<String, SetMessageRequestModeRequestBody>>,
    }
}

/// The stored modes; owns its lock and revision.
#[derive(Debug, Default)]
pub struct RequestModes {
    inner: Mutex<(RequestModeFile, u64)>,
}

impl RequestModes {
    pub fn parse(bytes: &[u8]) -> Result<Self, tidemark_protocol::JsonError> {
        Ok(Self {
            inner: Mutex::new((RequestModeFile::from_json_bytes(bytes)?, 0)),
        })
    }

    fn lock(&self) -> Ranked<'_, (RequestModeFile, u64)> {
        lock_rank::lock(&self.inner, Rank::Table)
    }

    /// The stored choice for (topic, group).
    pub fn get(&self, topic: &str, group: &str) -> Option<SetMessageRequestModeRequestBody> {
        self.lock()
            .0
            .modes
            .get(topic)
            .and_then(|groups| groups.get(group))
            .cloned()
    }

    /// The mode (topic, group) reads in: the stored one, else PULL.
    pub fn mode(&self, topic: &str, group: &str) -> MessageRequestMode {
        self.get(topic, group)
            .map_or(MessageRequestMode::Pull, |body| body.mode)
    }

    pub fn set(&self, body: SetMessageRequestModeRequestBody) {
        let mut inner = self.lock();
        inner
            .0
            .modes
            .entry(body.topic.clone())
            .or_default()
            .insert(body.consumer_group.clone(), body);
        inner.1 += 1;
    }

    pub fn revision(&self) -> u64 {
        self.lock().1
    }

    /// (revision, file text).
    pub fn snapshot(&self) -> (u64, Vec<u8>) {
        let inner = self.lock();
        (inner.1, inner.0.to_json_bytes_with(WriteOptions::PRETTY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_survive_the_file_in_rocketmqs_layout() {
        let modes = RequestModes::default();
        assert_eq!(modes.mode("T", "G"), MessageRequestMode::Pull);
        modes.set(SetMessageRequestModeRequestBody {
            consumer_group: "G".into(),
            mode: MessageRequestMode::Pop,
            pop_share_queue_num: -1,
            topic: "T".into(),
        });
        let (revision, text) = modes.snapshot();
        assert_eq!(revision, 1);
        let text = String::from_utf8(text).expect("utf-8");
        assert!(text.contains("\"messageRequestModeMap\""), "{text}");
        assert!(text.contains("\"mode\":\"POP\""), "{text}");
        let again = RequestModes::parse(text.as_bytes()).expect("parses");
        assert_eq!(again.mode("T", "G"), MessageRequestMode::Pop);
        assert_eq!(again.mode("T", "H"), MessageRequestMode::Pull);
    }
}
