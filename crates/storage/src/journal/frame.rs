//! The bytes of a journal: segment headers, record frames and snapshot files, and the scan that
//! reads them back and says exactly where and why it stopped.
//!
//! Segment: `TMJRNL01` (8 bytes), the segment number (u64 big-endian), then records.
//! Record: payload length (u32 BE), CRC-32 of the length bytes and the payload (u32 BE), payload.
//! The checksum covers the length so a flipped length bit is caught even when the wrong length
//! still fits in the file. The writer zero-fills space ahead of its records and always leaves at
//! least a frame header's worth of it, so the records end where the file ends or where at least
//! eight zero bytes and nothing else follow. Fewer zeros are a cut frame header (its length
//! always has a non-zero byte), and a zero length anywhere else is damage.
//! Snapshot: `TMSNAP01`, the first segment to replay after it (u64 BE), CRC-32 of the payload
//! (u32 BE), payload.

use std::fmt;

pub(crate) const SEGMENT_MAGIC: &[u8; 8] = b"TMJRNL01";
pub(crate) const SEGMENT_HEADER_LEN: u64 = 16;
pub(crate) const SNAPSHOT_MAGIC: &[u8; 8] = b"TMSNAP01";
pub(crate) const FRAME_HEADER_LEN: usize = 8;

/// The largest payload a record may have: a flipped length bit must not make recovery allocate
/// gigabytes, and no single change of consumer progress comes near it.
pub const RECORD_PAYLOAD_MAX: usize = 16 << 20;

pub(crate) fn segment_header(segment: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut header = [0; SEGMENT_HEADER_LEN as usize];
    header[..8].copy_from_slice(SEGMENT_MAGIC);
    header[8..].copy_from_slice(&segment.to_be_bytes());
    header
}

fn checksum(length: [u8; 4], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&length);
    hasher.update(payload);
    hasher.finalize()
}

/// Appends one framed record to `out`.
pub(crate) fn encode_record(out: &mut Vec<u8>, payload: &[u8]) {
    let length = (payload.len() as u32).to_be_bytes();
    out.extend_from_slice(&length);
    out.extend_from_slice(&checksum(length, payload).to_be_bytes());
    out.extend_from_slice(payload);
}

/// Why a scan stopped before the end of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// The segment does not start with a header naming the expected segment.
    BadHeader,
    /// The file ends inside a record (a write the crash cut short).
    Torn { needed: u64 },
    /// A record's checksum does not match its bytes.
    ChecksumMismatch,
    /// A length that no record can have.
    BadLength { length: u64 },
    /// The record is intact but its owner could not apply it.
    Rejected(String),
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::BadHeader => {
                write!(f, "the segment header is missing or names another segment")
            }
            Damage::Torn { needed } => write!(f, "torn record: {needed} more bytes expected"),
            Damage::ChecksumMismatch => write!(f, "record checksum mismatch"),
            Damage::BadLength { length } => write!(f, "impossible record length {length}"),
            Damage::Rejected(reason) => write!(f, "record not applicable: {reason}"),
        }
    }
}

/// How a segment scan ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanEnd {
    /// Offset just past the last good record.
    pub good_end: u64,
    /// Why it stopped before the end of the bytes, if it did.
    pub damage: Option<Damage>,
}

/// Calls `apply` on each record of a segment in order, stopping at the first damaged record
/// (or the first one `apply` refuses).
pub(crate) fn scan_segment(
    bytes: &[u8],
    segment: u64,
    mut apply: impl FnMut(&[u8]) -> Result<(), String>,
) -> ScanEnd {
    if bytes.len() < SEGMENT_HEADER_LEN as usize || bytes[..16] != segment_header(segment) {
        return ScanEnd {
            good_end: 0,
            damage: Some(
                if bytes.len() < SEGMENT_HEADER_LEN as usize
                    && segment_header(segment).starts_with(bytes)
                {
                    Damage::Torn {
                        needed: SEGMENT_HEADER_LEN - bytes.len() as u64,
                    }
                } else {
                    Damage::BadHeader
                },
            ),
        };
    }
    let mut at = SEGMENT_HEADER_LEN as usize;
    loop {
        let rest = &bytes[at..];
        if rest.is_empty() {
            return ScanEnd {
                good_end: at as u64,
                damage: None,
            };
        }
        let stop = |damage| ScanEnd {
            good_end: at as u64,
            damage: Some(damage),
        };
        if rest.len() >= FRAME_HEADER_LEN && rest.iter().all(|&byte| byte == 0) {
            return ScanEnd {
                good_end: at as u64,
                damage: None,
            };
        }
        if rest.len() < FRAME_HEADER_LEN {
            return stop(Damage::Torn {
                needed: (FRAME_HEADER_LEN - rest.len()) as u64,
            });
        }
        let length_bytes = [rest[0], rest[1], rest[2], rest[3]];
        let length = u32::from_be_bytes(length_bytes) as usize;
        let stored = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if length == 0 || length > RECORD_PAYLOAD_MAX {
            return stop(Damage::BadLength {
                length: length as u64,
            });
        }
        let Some(payload) = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + length) else {
            return stop(Damage::Torn {
                needed: (FRAME_HEADER_LEN + length - rest.len()) as u64,
            });
        };
        if checksum(length_bytes, payload) != stored {
            return stop(Damage::ChecksumMismatch);
        }
        if let Err(reason) = apply(payload) {
            return stop(Damage::Rejected(reason));
        }
        at += FRAME_HEADER_LEN + length;
    }
}

/// A snapshot file's bytes.
pub(crate) fn encode_snapshot(base_segment: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 20);
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.extend_from_slice(&base_segment.to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A snapshot file's base segment and payload, or why the file is unusable.
pub(crate) fn decode_snapshot(bytes: &[u8]) -> Result<(u64, &[u8]), String> {
    if bytes.len() < 20 || &bytes[..8] != SNAPSHOT_MAGIC {
        return Err("not a journal snapshot (bad magic or too short)".to_owned());
    }
    let mut base = [0; 8];
    base.copy_from_slice(&bytes[8..16]);
    let stored = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let payload = &bytes[20..];
    if crc32fast::hash(payload) != stored {
        return Err("snapshot checksum mismatch".to_owned());
    }
    Ok((u64::from_be_bytes(base), payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment_with(records: &[&[u8]]) -> Vec<u8> {
        let mut bytes = segment_header(3).to_vec();
        for record in records {
            encode_record(&mut bytes, record);
        }
        bytes
    }

    fn scan(bytes: &[u8]) -> (Vec<Vec<u8>>, ScanEnd) {
        let mut seen = Vec::new();
        let end = scan_segment(bytes, 3, |payload| {
            seen.push(payload.to_vec());
            Ok(())
        });
        (seen, end)
    }

    #[test]
    fn a_clean_segment_yields_every_record() {
        let bytes = segment_with(&[b"one", b"two", b"three"]);
        let (seen, end) = scan(&bytes);
        assert_eq!(
            seen,
            vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
        );
        assert_eq!(end.good_end, bytes.len() as u64);
        assert_eq!(end.damage, None);
    }

    #[test]
    fn damage_is_named_and_the_records_before_it_kept() {
        let mut bytes = segment_with(&[b"one", b"two"]);
        let second = 16 + 8 + 3;
        bytes[second + 9] ^= 0x10;
        let (seen, end) = scan(&bytes);
        assert_eq!(seen, vec![b"one".to_vec()]);
        assert_eq!(end.good_end, second as u64);
        assert_eq!(end.damage, Some(Damage::ChecksumMismatch));

        let bytes = segment_with(&[b"one", b"two"]);
        let (seen, end) = scan(&bytes[..bytes.len() - 1]);
        assert_eq!(seen.len(), 1);
        assert_eq!(end.damage, Some(Damage::Torn { needed: 1 }));

        let (seen, end) = scan_segment(&bytes, 4, |_| Ok(()))
            .damage
            .map(|d| (0, d))
            .unzip();
        assert_eq!((seen, end), (Some(0), Some(Damage::BadHeader)));
    }

    #[test]
    fn zeros_after_the_last_record_are_space_not_damage() {
        let mut bytes = segment_with(&[b"one", b"two"]);
        let end_of_records = bytes.len() as u64;
        bytes.resize(bytes.len() + 4096, 0);
        let (seen, end) = scan(&bytes);
        assert_eq!(seen.len(), 2);
        assert_eq!(end.good_end, end_of_records);
        assert_eq!(end.damage, None);

        // A stray byte in that space is not the end of the records.
        let last = bytes.len() - 100;
        bytes[last] = 1;
        let (seen, end) = scan(&bytes);
        assert_eq!(seen.len(), 2);
        assert_eq!(end.good_end, end_of_records);
        assert_eq!(end.damage, Some(Damage::BadLength { length: 0 }));
    }

    #[test]
    fn a_refused_record_stops_the_scan_there() {
        let bytes = segment_with(&[b"one", b"bad", b"three"]);
        let mut seen = Vec::new();
        let end = scan_segment(&bytes, 3, |payload| {
            if payload == b"bad" {
                return Err("no".into());
            }
            seen.push(payload.to_vec());
            Ok(())
        });
        assert_eq!(seen, vec![b"one".to_vec()]);
        assert_eq!(end.damage, Some(Damage::Rejected("no".into())));
    }

    #[test]
    fn snapshots_round_trip_and_refuse_damage() {
        let bytes = encode_snapshot(7, b"state");
        assert_eq!(decode_snapshot(&bytes), Ok((7, &b"state"[..])));
        let mut flipped = bytes.clone();
        flipped[22] ^= 1;
        assert!(decode_snapshot(&flipped).is_err());
        assert!(decode_snapshot(&bytes[..10]).is_err());
    }
}
