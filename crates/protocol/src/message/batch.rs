//! The SEND_BATCH_MESSAGE body: per message `TOTALSIZE:i32 | MAGIC:i32 (0) | BODYCRC:i32 (0) |
//! FLAG:i32 | BODY:i32+n | PROPERTIES:i16+p`, back to back.

use bytes::{BufMut, Bytes, BytesMut};

use super::properties::Properties;
use crate::error::MessageError;

/// One message of a batch body. Topic and other metadata come from the request header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchEntry {
    pub flag: i32,
    pub body: Bytes,
    pub properties: Properties,
}

/// Encodes a batch body as `MessageDecoder.encodeMessages` does.
pub fn encode_batch(entries: &[BatchEntry]) -> Result<Bytes, MessageError> {
    let mut out = BytesMut::new();
    for entry in entries {
        let properties = entry.properties.encode();
        if properties.len() > i16::MAX as usize {
            return Err(MessageError::FieldTooLong {
                field: "properties",
                length: properties.len(),
                max: i16::MAX as usize,
            });
        }
        let length = 4 + 4 + 4 + 4 + 4 + entry.body.len() + 2 + properties.len();
        let total = i32::try_from(length).map_err(|_| MessageError::FieldTooLong {
            field: "batch entry",
            length,
            max: i32::MAX as usize,
        })?;
        out.reserve(length);
        out.put_i32(total);
        out.put_i32(0);
        out.put_i32(0);
        out.put_i32(entry.flag);
        out.put_i32(entry.body.len() as i32);
        out.put_slice(&entry.body);
        out.put_i16(properties.len() as i16);
        out.put_slice(properties.as_bytes());
    }
    Ok(out.freeze())
}

/// Decodes a batch body; bodies are zero-copy slices of `body`.
pub fn decode_batch(body: &Bytes) -> Result<Vec<BatchEntry>, MessageError> {
    let mut entries = Vec::new();
    let mut offset = 0usize;
    while offset < body.len() {
        let read_i32 = |at: usize, field: &'static str| -> Result<i32, MessageError> {
            body.get(at..at + 4)
                .map(|bytes| i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
                .ok_or(MessageError::Truncated {
                    field,
                    offset: at,
                    need: 4,
                    have: body.len().saturating_sub(at),
                })
        };
        let total = read_i32(offset, "TOTALSIZE")?;
        let end = usize::try_from(total)
            .ok()
            .filter(|length| *length >= 22)
            .map(|length| offset + length)
            .filter(|end| *end <= body.len())
            .ok_or(MessageError::InvalidLength {
                field: "TOTALSIZE",
                offset,
                length: i64::from(total),
            })?;
        let flag = read_i32(offset + 12, "FLAG")?;
        let body_length = read_i32(offset + 16, "BODY length")?;
        let body_start = offset + 20;
        let body_end = usize::try_from(body_length)
            .ok()
            .map(|length| body_start + length)
            .filter(|body_end| body_end + 2 <= end)
            .ok_or(MessageError::InvalidLength {
                field: "BODY",
                offset: offset + 16,
                length: i64::from(body_length),
            })?;
        let properties_length = i16::from_be_bytes([body[body_end], body[body_end + 1]]);
        let properties_start = body_end + 2;
        let properties_end = usize::try_from(properties_length)
            .ok()
            .map(|length| properties_start + length)
            .filter(|properties_end| *properties_end == end)
            .ok_or(MessageError::SizeMismatch {
                offset,
                declared: i64::from(total),
                actual: properties_start - offset,
            })?;
        let properties =
            std::str::from_utf8(&body[properties_start..properties_end]).map_err(|_| {
                MessageError::InvalidUtf8 {
                    field: "properties",
                }
            })?;
        entries.push(BatchEntry {
            flag,
            body: body.slice(body_start..body_end),
            properties: Properties::parse(properties),
        });
        offset = end;
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trip_and_bad_lengths() {
        let entries = vec![
            BatchEntry {
                flag: 1,
                body: Bytes::from_static(b"a"),
                properties: [("UNIQ_KEY", "X")].into_iter().collect(),
            },
            BatchEntry {
                flag: 0,
                body: Bytes::new(),
                properties: Properties::new(),
            },
        ];
        let bytes = encode_batch(&entries).expect("encodes");
        assert_eq!(
            &bytes[..4],
            &(4 + 4 + 4 + 4 + 4 + 1 + 2 + 10i32).to_be_bytes()
        );
        assert_eq!(decode_batch(&bytes), Ok(entries));
        let mut broken = BytesMut::from(&bytes[..]);
        broken[19] = 0xFF; // body length of the first entry
        assert!(decode_batch(&broken.freeze()).is_err());
        assert!(decode_batch(&bytes.slice(..bytes.len() - 1)).is_err());
    }
}
