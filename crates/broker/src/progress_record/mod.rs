//! The progress stream's records, as the progress tables write them: the outbox each table
//! pushes its changes into under its own lock, the stream numbers, and a progress message's
//! body. The tables import this; the services that publish and apply it (`progress_stream`)
//! import the tables.
//!
//! A message's body: a format byte (1), then records, each a stream byte, a big-endian u32
//! length and that many bytes. Streams: 1 consumer offsets (the offset journal's records; a
//! whole copy is every queue's record), 2 POP progress (the POP journal's records), 3 a piece of
//! a whole POP state, 4 a timer message delivered (the timer journal's records), 5 the whole
//! delivered set, 6 a progress history entry, 7 the start of a whole history.

mod outbox;

pub use outbox::ProgressOutbox;

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
/// Progress history: records of [`crate::history`]'s journal, one entry each.
pub(crate) const STREAM_HISTORY: u8 = 6;
/// Progress history, whole: a marker (the next id) that empties a replica's history before
/// the master's kept entries follow as [`STREAM_HISTORY`] records.
pub(crate) const STREAM_HISTORY_WHOLE: u8 = 7;
/// Nothing to apply: a record a request that changed nothing waits for, so its answer, too,
/// comes only once the replicas follow this master (`progress_stream::Since`). Older replicas
/// skip it as a stream they do not know.
pub(crate) const STREAM_BARRIER: u8 = 8;

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
