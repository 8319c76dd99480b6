//! Consumer progress replicated with the log. RocketMQ's slaves copy a master's offsets every
//! `slaveSyncIntervalMs` (10 s), so a slave elected master answers offsets up to one interval
//! old and the group consumes that much again. Here a master appends every change of its
//! progress — the records its own offset journal takes — to a system topic of its commit log,
//! batched into messages ([`publisher`]); replication carries them to the replicas in order
//! with the messages they are about, and each replica applies them to its own table as they
//! arrive ([`follower`]), by the merge rule of [`crate::offsets`] (a newer reset epoch wins,
//! otherwise the larger offset). A synchronous commit on a SYNC master is answered once the
//! replicas a SYNC send waits for have the message holding it, and a replica about to become
//! master applies everything its log holds first: the new master's offsets are never behind
//! what the old one acknowledged.
//!
//! Whenever a replica connects, the master publishes whole copies of its tables first (the
//! replica may lack what the stream carried before), and again if its outbox overflowed.
//!
//! A message's body: a format byte (1), then records, each a stream byte, a big-endian u32
//! length and that many bytes. Streams: 1 consumer offsets (the offset journal's records; a
//! whole copy is every queue's record), 2 POP progress (the POP journal's records), 3 a piece of
//! a whole POP state, 4 a timer message delivered (the timer journal's records), 5 the whole
//! delivered set.

mod follower;
mod outbox;
mod publisher;

pub(crate) use follower::{after_log_cut, drain, run as follow};
pub use outbox::ProgressOutbox;
pub(crate) use publisher::run as publish;

use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::ResponseCode;
use tokio::sync::Notify;

use crate::ha_progress::ReplicaWait;
use crate::state::BrokerState;

/// A broker's progress stream: the outbox a master publishes from, and the signal a replica's
/// follower waits on.
#[derive(Debug, Default)]
pub struct ProgressStream {
    outbox: Arc<ProgressOutbox>,
    appended: Notify,
}

impl ProgressStream {
    /// The outbox the progress tables push their changes into.
    pub fn outbox(&self) -> &Arc<ProgressOutbox> {
        &self.outbox
    }

    /// A replica's log received bytes from the master: the follower looks at once.
    pub fn log_appended(&self) {
        self.appended.notify_one();
    }

    async fn appended(&self) {
        self.appended.notified().await;
    }
}

/// The system topic progress travels in (one queue).
pub const PROGRESS_TOPIC: &str = "rmq_sys_tidemark_progress";

/// The consumer-offset stream: records of [`crate::offsets`]'s journal.
pub(crate) const STREAM_CONSUMER_OFFSETS: u8 = 1;
/// POP progress: records of [`crate::pop`]'s journal.
pub(crate) const STREAM_POP: u8 = 2;
/// POP progress, whole: what a master publishes when a replica connects.
pub(crate) const STREAM_POP_WHOLE: u8 = 3;
/// Timer messages delivered: records of [`crate::timer`]'s journal.
pub(crate) const STREAM_TIMERS: u8 = 4;
/// Timer messages delivered, whole.
pub(crate) const STREAM_TIMERS_WHOLE: u8 = 5;

const FORMAT: u8 = 1;

/// One record of a stream, as the outbox holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord {
    pub stream: u8,
    pub bytes: Vec<u8>,
}

/// A message body holding `records`.
pub(crate) fn encode_batch(records: &[StreamRecord]) -> Vec<u8> {
    let size = records.iter().map(|r| 5 + r.bytes.len()).sum::<usize>();
    let mut out = Vec::with_capacity(1 + size);
    out.push(FORMAT);
    for record in records {
        out.push(record.stream);
        // The outbox cuts batches far below 4 GiB.
        out.extend_from_slice(&(record.bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(&record.bytes);
    }
    out
}

/// The records of a message body: (stream, bytes) in order.
pub(crate) fn decode_batch(body: &[u8]) -> Result<Vec<(u8, &[u8])>, String> {
    let Some((&format, mut rest)) = body.split_first() else {
        return Err("empty progress message".to_owned());
    };
    if format != FORMAT {
        return Err(format!(
            "progress message format {format} (this broker reads {FORMAT})"
        ));
    }
    let mut records = Vec::new();
    while let Some((&stream, after)) = rest.split_first() {
        let Some((length, after)) = after.split_first_chunk::<4>() else {
            return Err("progress message ends inside a record's length".to_owned());
        };
        let length = u32::from_be_bytes(*length) as usize;
        if after.len() < length {
            return Err(format!(
                "progress record of {length} bytes, {} left in the message",
                after.len()
            ));
        }
        let (bytes, after) = after.split_at(length);
        records.push((stream, bytes));
        rest = after;
    }
    Ok(records)
}

/// What a synchronous commit answers after waiting for its replicas: success, or the code a
/// SYNC send would get (the commit is stored on this broker either way). Only a SYNC master
/// waits; `seq` is the outbox position that holds the commit. With no replica to wait for
/// (none connected, or one too far behind, which the controllers drop from the set) it is
/// success: the change stands on this broker as a SYNC send's message does, and a consumer
/// that could not commit or read offsets while a slave is down would stop.
pub(crate) async fn wait_replicated(state: &BrokerState, seq: u64) -> ResponseCode {
    if !state.role.now().waits_for_slaves() {
        return ResponseCode::Success;
    }
    let live = state.live.get();
    let timeout = Duration::from_millis(live.slave_timeout);
    let Some(end) = state
        .progress_stream
        .outbox()
        .wait_published(seq, timeout)
        .await
    else {
        return ResponseCode::FlushSlaveTimeout;
    };
    let Some(end) = end else {
        // Not published: this broker stopped being master meanwhile.
        return ResponseCode::SlaveNotAvailable;
    };
    let waited = state
        .ha
        .wait_replicated(
            end,
            state.log().positions().1,
            live.ha_slave_fallbehind_max,
            timeout,
        )
        .await;
    match waited {
        ReplicaWait::Replicated | ReplicaWait::SlaveNotAvailable => ResponseCode::Success,
        ReplicaWait::Timeout => ResponseCode::FlushSlaveTimeout,
        ReplicaWait::Deposed => ResponseCode::SlaveNotAvailable,
    }
}

/// Holds an answer that shows progress (an offset query, consume stats) until every change
/// made so far is on the replicas a SYNC send waits for, so nobody is shown a value a
/// failover could take back. When they do not confirm within `slave_timeout` the answer is
/// FLUSH_SLAVE_TIMEOUT instead (the reader asks again; a consumer's rebalance skips the queue
/// until the next round, as it does for any failed query).
pub(crate) async fn once_replicated(
    state: &BrokerState,
    answer: tidemark_protocol::RemotingCommand,
) -> tidemark_protocol::RemotingCommand {
    let through = state.progress_stream.outbox().last_pushed();
    match wait_replicated(state, through).await {
        ResponseCode::Success => answer,
        code => tidemark_protocol::RemotingCommand::response(
            code,
            Some("consumer progress not yet confirmed by the in-sync replicas".to_owned()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_damage_is_refused() {
        let records = vec![
            StreamRecord {
                stream: STREAM_CONSUMER_OFFSETS,
                bytes: vec![1, 2, 3],
            },
            StreamRecord {
                stream: 9,
                bytes: Vec::new(),
            },
        ];
        let body = encode_batch(&records);
        let decoded = decode_batch(&body).expect("decodes");
        assert_eq!(decoded, vec![(1u8, &[1u8, 2, 3][..]), (9u8, &[][..])]);
        assert!(decode_batch(&body[..body.len() - 1]).is_err());
        assert!(decode_batch(&body[..3]).is_err());
        assert!(decode_batch(&[]).is_err());
        assert!(decode_batch(&[2]).is_err());
        assert_eq!(decode_batch(&[FORMAT]).expect("empty batch"), Vec::new());
    }
}
