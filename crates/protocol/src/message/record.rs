//! The stored message record: one commit-log entry, and the unit of pull, query and view bodies.
//!
//! ```text
//!  0 TOTALSIZE i32        whole record, this field included
//!  4 MAGICCODE i32        0xDAA320A7 (v1: 1-byte topic length) | 0xDAA320AB (v2: 2-byte)
//!  8 BODYCRC i32          crc32(body) & 0x7FFFFFFF
//! 12 QUEUEID i32
//! 16 FLAG i32
//! 20 QUEUEOFFSET i64
//! 28 PHYSICALOFFSET i64
//! 36 SYSFLAG i32
//! 40 BORNTIMESTAMP i64
//! 48 BORNHOST            4+4 bytes, or 16+4 with sysflag 0x10
//!    STORETIMESTAMP i64
//!    STOREHOST           4+4 bytes, or 16+4 with sysflag 0x20
//!    RECONSUMETIMES i32
//!    PREPARED_TRANSACTION_OFFSET i64
//!    BODY                i32 length + bytes
//!    TOPIC               i8 (v1) / i16 (v2) length + bytes
//!    PROPERTIES          i16 length + bytes
//! ```

use std::io::Read as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};

use super::properties::Properties;
use super::sys_flag;
use crate::error::MessageError;

/// Magic of a v1 record (1-byte topic length).
pub const MAGIC_CODE_V1: u32 = 0xDAA3_20A7;
/// Magic of a v2 record (2-byte topic length), written by 5.x for topics over 127 bytes.
pub const MAGIC_CODE_V2: u32 = 0xDAA3_20AB;
/// Magic of the filler that ends a commit-log segment; never part of a pull body.
pub const BLANK_MAGIC_CODE: u32 = 0xCBD4_3194;

/// Which record layout (magic code) a record uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordVersion {
    /// 1-byte (signed) topic length; what 4.9 and C++ clients can read.
    #[default]
    V1,
    /// 2-byte topic length.
    V2,
}

impl RecordVersion {
    pub fn magic(self) -> u32 {
        match self {
            RecordVersion::V1 => MAGIC_CODE_V1,
            RecordVersion::V2 => MAGIC_CODE_V2,
        }
    }

    fn topic_length_max(self) -> usize {
        match self {
            RecordVersion::V1 => i8::MAX as usize,
            RecordVersion::V2 => i16::MAX as usize,
        }
    }
}

/// How strictly records are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecodeOptions {
    /// Recompute the body CRC and reject a mismatch (store recovery does; clients do not).
    pub verify_body_crc: bool,
}

/// One stored message record with every field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRecord {
    pub version: RecordVersion,
    /// As stored; [`MessageRecord::encode`] recomputes it from the body.
    pub body_crc: u32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    /// [`sys_flag`] bits; the host-width bits are derived from the hosts when encoding.
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    /// As stored (compressed when [`sys_flag::COMPRESSED`] is set).
    pub body: Bytes,
    pub topic: String,
    pub properties: Properties,
}

impl Default for MessageRecord {
    fn default() -> Self {
        let unspecified = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
        Self {
            version: RecordVersion::V1,
            body_crc: 0,
            queue_id: 0,
            flag: 0,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp: 0,
            born_host: unspecified,
            store_timestamp: 0,
            store_host: unspecified,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Bytes::new(),
            topic: String::new(),
            properties: Properties::new(),
        }
    }
}

/// A record to encode that borrows its variable parts, so a store can append without building
/// (and copying into) a [`MessageRecord`]. `properties` is the encoded properties string.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    pub version: RecordVersion,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: &'a [u8],
    pub topic: &'a str,
    pub properties: &'a str,
}

/// Byte position of QUEUEOFFSET in every record.
pub const QUEUE_OFFSET_POSITION: usize = 20;
/// Byte position of PHYSICALOFFSET in every record.
pub const PHYSICAL_OFFSET_POSITION: usize = 28;
/// Byte position of SYSFLAG in every record.
const SYS_FLAG_POSITION: usize = 36;
/// Byte position of BORNHOST in every record; the fields after it move with its width.
const BORN_HOST_POSITION: usize = 48;

// Fields read in place from encoded bytes, without decoding the record: a store reads them
// from partial reads (a record's first bytes) and on paths where a full decode would cost.

/// The TOTALSIZE field at the start of `bytes` (a record, or the blank record ending a
/// commit-log segment); `None` when `bytes` is too short to hold it.
#[inline]
pub fn total_size_of(bytes: &[u8]) -> Option<i32> {
    field(bytes, 0).map(i32::from_be_bytes)
}

/// The MAGICCODE field at the start of `bytes`; `None` when `bytes` is too short to hold it.
#[inline]
pub fn magic_code_of(bytes: &[u8]) -> Option<u32> {
    field(bytes, 4).map(u32::from_be_bytes)
}

/// The STORETIMESTAMP field of an encoded record; `None` when `record` is too short to hold it.
#[inline]
pub fn store_timestamp_of(record: &[u8]) -> Option<i64> {
    let sys_flag = i32::from_be_bytes(field(record, SYS_FLAG_POSITION)?);
    let born_host_length = host_length_for(sys_flag & sys_flag::BORNHOST_V6 != 0);
    field(record, BORN_HOST_POSITION + born_host_length).map(i64::from_be_bytes)
}

/// SYSFLAG and PREPAREDTRANSACTIONOFFSET of an encoded record, read in place: a committed
/// transactional message carries the commit-log offset of its half there. `None` when `record`
/// is too short to hold them.
#[inline]
pub fn transaction_fields_of(record: &[u8]) -> Option<(i32, i64)> {
    let sys_flag = i32::from_be_bytes(field(record, SYS_FLAG_POSITION)?);
    let born_host_length = host_length_for(sys_flag & sys_flag::BORNHOST_V6 != 0);
    let store_host_length = host_length_for(sys_flag & sys_flag::STOREHOST_V6 != 0);
    // After the born host: store timestamp (8), store host, reconsume times (4).
    let at = BORN_HOST_POSITION + born_host_length + 8 + store_host_length + 4;
    Some((sys_flag, i64::from_be_bytes(field(record, at)?)))
}

/// The encoded properties string of a stored record, read in place (no decode of the rest);
/// `None` when the record is malformed.
pub fn properties_of(record: &[u8]) -> Option<&str> {
    topic_and_properties_of(record).map(|(_, properties)| properties)
}

/// The topic of a stored record, read in place; `None` when the record is malformed.
pub fn topic_of(record: &[u8]) -> Option<&str> {
    topic_and_properties_of(record).map(|(topic, _)| topic)
}

fn topic_and_properties_of(record: &[u8]) -> Option<(&str, &str)> {
    let version = match u32::from_be_bytes(field(record, 4)?) {
        MAGIC_CODE_V1 => RecordVersion::V1,
        MAGIC_CODE_V2 => RecordVersion::V2,
        _ => return None,
    };
    let total = usize::try_from(i32::from_be_bytes(field(record, 0)?)).ok()?;
    let record = record.get(..total)?;
    let sys_flag = i32::from_be_bytes(field(record, SYS_FLAG_POSITION)?);
    let born_host_length = host_length_for(sys_flag & sys_flag::BORNHOST_V6 != 0);
    let store_host_length = host_length_for(sys_flag & sys_flag::STOREHOST_V6 != 0);
    // After the born host: store timestamp (8), store host, reconsume times (4), prepared
    // transaction offset (8), then the body's length.
    let body_length_at = BORN_HOST_POSITION + born_host_length + 8 + store_host_length + 4 + 8;
    let body_length = usize::try_from(i32::from_be_bytes(field(record, body_length_at)?)).ok()?;
    let topic_length_at = body_length_at.checked_add(4)?.checked_add(body_length)?;
    let (topic_length, topic_at) = match version {
        RecordVersion::V1 => (
            usize::try_from(i8::from_be_bytes(field(record, topic_length_at)?)).ok()?,
            topic_length_at + 1,
        ),
        RecordVersion::V2 => (
            usize::try_from(i16::from_be_bytes(field(record, topic_length_at)?)).ok()?,
            topic_length_at + 2,
        ),
    };
    let topic = record.get(topic_at..topic_at.checked_add(topic_length)?)?;
    let properties_length_at = topic_at.checked_add(topic_length)?;
    let properties_length =
        usize::try_from(i16::from_be_bytes(field(record, properties_length_at)?)).ok()?;
    let properties_at = properties_length_at + 2;
    let properties = record.get(properties_at..properties_at.checked_add(properties_length)?)?;
    Some((
        std::str::from_utf8(topic).ok()?,
        std::str::from_utf8(properties).ok()?,
    ))
}

/// The `N` bytes at `at`, if `bytes` holds them.
#[inline]
fn field<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

impl RecordRef<'_> {
    /// Where STORETIMESTAMP sits: after the born host, whose width depends on its family.
    pub fn store_timestamp_position(&self) -> usize {
        BORN_HOST_POSITION + host_length(&self.born_host)
    }

    /// Appends the record; returns its length. The body CRC is computed from the body.
    pub fn encode(&self, out: &mut BytesMut) -> Result<usize, MessageError> {
        let topic_max = self.version.topic_length_max();
        if self.topic.len() > topic_max {
            return Err(MessageError::FieldTooLong {
                field: "topic",
                length: self.topic.len(),
                max: topic_max,
            });
        }
        if self.properties.len() > i16::MAX as usize {
            return Err(MessageError::FieldTooLong {
                field: "properties",
                length: self.properties.len(),
                max: i16::MAX as usize,
            });
        }
        let topic_length_field = match self.version {
            RecordVersion::V1 => 1,
            RecordVersion::V2 => 2,
        };
        let length = 4
            + 4
            + 4
            + 4
            + 4
            + 8
            + 8
            + 4
            + 8
            + host_length(&self.born_host)
            + 8
            + host_length(&self.store_host)
            + 4
            + 8
            + 4
            + self.body.len()
            + topic_length_field
            + self.topic.len()
            + 2
            + self.properties.len();
        let total = i32::try_from(length).map_err(|_| MessageError::FieldTooLong {
            field: "record",
            length,
            max: i32::MAX as usize,
        })?;
        out.reserve(length);
        out.put_i32(total);
        out.put_u32(self.version.magic());
        out.put_u32(body_crc(self.body));
        out.put_i32(self.queue_id);
        out.put_i32(self.flag);
        out.put_i64(self.queue_offset);
        out.put_i64(self.physical_offset);
        out.put_i32(effective_sys_flag(
            self.sys_flag,
            &self.born_host,
            &self.store_host,
        ));
        out.put_i64(self.born_timestamp);
        put_host(out, &self.born_host);
        out.put_i64(self.store_timestamp);
        put_host(out, &self.store_host);
        out.put_i32(self.reconsume_times);
        out.put_i64(self.prepared_transaction_offset);
        // Fits: the whole record length fits i32.
        out.put_i32(self.body.len() as i32);
        out.put_slice(self.body);
        match self.version {
            RecordVersion::V1 => out.put_u8(self.topic.len() as u8),
            RecordVersion::V2 => out.put_i16(self.topic.len() as i16),
        }
        out.put_slice(self.topic.as_bytes());
        out.put_i16(self.properties.len() as i16);
        out.put_slice(self.properties.as_bytes());
        Ok(length)
    }
}

fn effective_sys_flag(sys_flag: i32, born_host: &SocketAddr, store_host: &SocketAddr) -> i32 {
    let mut flag = sys_flag & !(sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6);
    if born_host.is_ipv6() {
        flag |= sys_flag::BORNHOST_V6;
    }
    if store_host.is_ipv6() {
        flag |= sys_flag::STOREHOST_V6;
    }
    flag
}

/// `crc32(body) & 0x7FFFFFFF`, RocketMQ's `UtilAll.crc32`.
pub fn body_crc(body: &[u8]) -> u32 {
    crc32fast::hash(body) & 0x7FFF_FFFF
}

fn host_length(address: &SocketAddr) -> usize {
    host_length_for(address.is_ipv6())
}

/// Bytes of an encoded host: address and port.
#[inline]
fn host_length_for(ipv6: bool) -> usize {
    if ipv6 {
        20
    } else {
        8
    }
}

impl MessageRecord {
    /// The sysflag as written: host-width bits follow the host address families.
    pub fn effective_sys_flag(&self) -> i32 {
        effective_sys_flag(self.sys_flag, &self.born_host, &self.store_host)
    }

    /// Appends the record; returns its length. The body CRC is computed from the body.
    pub fn encode(&self, out: &mut BytesMut) -> Result<usize, MessageError> {
        let properties = self.properties.encode();
        RecordRef {
            version: self.version,
            queue_id: self.queue_id,
            flag: self.flag,
            queue_offset: self.queue_offset,
            physical_offset: self.physical_offset,
            sys_flag: self.sys_flag,
            born_timestamp: self.born_timestamp,
            born_host: self.born_host,
            store_timestamp: self.store_timestamp,
            store_host: self.store_host,
            reconsume_times: self.reconsume_times,
            prepared_transaction_offset: self.prepared_transaction_offset,
            body: &self.body,
            topic: &self.topic,
            properties: &properties,
        }
        .encode(out)
    }

    /// The record as a fresh buffer.
    pub fn encode_to_bytes(&self) -> Result<Bytes, MessageError> {
        let mut out = BytesMut::new();
        self.encode(&mut out)?;
        Ok(out.freeze())
    }

    /// Decodes the record starting at `offset` of `buffer`; returns it and its length. The
    /// body is a zero-copy slice of `buffer`.
    pub fn decode(
        buffer: &Bytes,
        offset: usize,
        options: DecodeOptions,
    ) -> Result<(Self, usize), MessageError> {
        let mut reader = RecordReader {
            buffer,
            start: offset,
            position: offset,
        };
        let total = reader.i32("TOTALSIZE")?;
        let magic = reader.u32("MAGICCODE")?;
        let version = match magic {
            MAGIC_CODE_V1 => RecordVersion::V1,
            MAGIC_CODE_V2 => RecordVersion::V2,
            _ => {
                return Err(MessageError::BadMagic {
                    offset: offset + 4,
                    magic,
                })
            }
        };
        let declared = usize::try_from(total)
            .ok()
            .filter(|length| *length >= 4 && offset + length <= buffer.len());
        let Some(declared) = declared else {
            return Err(if total < 0 {
                MessageError::InvalidLength {
                    field: "TOTALSIZE",
                    offset,
                    length: i64::from(total),
                }
            } else {
                MessageError::Truncated {
                    field: "record",
                    offset,
                    need: total as usize,
                    have: buffer.len() - offset,
                }
            });
        };
        // Fields must stay inside the declared record, not merely inside the buffer.
        let record = buffer.slice(offset..offset + declared);
        let mut reader = RecordReader {
            buffer: &record,
            start: 0,
            position: 8,
        };
        let stored_crc = reader.u32("BODYCRC")?;
        let queue_id = reader.i32("QUEUEID")?;
        let flag = reader.i32("FLAG")?;
        let queue_offset = reader.i64("QUEUEOFFSET")?;
        let physical_offset = reader.i64("PHYSICALOFFSET")?;
        let sys_flag = reader.i32("SYSFLAG")?;
        let born_timestamp = reader.i64("BORNTIMESTAMP")?;
        let born_host = reader.host("BORNHOST", sys_flag & sys_flag::BORNHOST_V6 != 0)?;
        let store_timestamp = reader.i64("STORETIMESTAMP")?;
        let store_host = reader.host("STOREHOST", sys_flag & sys_flag::STOREHOST_V6 != 0)?;
        let reconsume_times = reader.i32("RECONSUMETIMES")?;
        let prepared_transaction_offset = reader.i64("PREPAREDTRANSACTIONOFFSET")?;
        let body_length = reader.i32("BODY length")?;
        let body_length = reader.length("BODY", i64::from(body_length))?;
        let body_position = reader.position;
        reader.take("BODY", body_length)?;
        let body = record.slice(body_position..body_position + body_length);
        let topic_length = match version {
            // Java reads a signed byte; a negative length cannot be a topic.
            RecordVersion::V1 => i64::from(reader.take("TOPIC length", 1)?[0] as i8),
            RecordVersion::V2 => i64::from(reader.i16("TOPIC length")?),
        };
        let topic_length = reader.length("TOPIC", topic_length)?;
        let topic = std::str::from_utf8(reader.take("TOPIC", topic_length)?)
            .map_err(|_| MessageError::InvalidUtf8 { field: "topic" })?
            .to_owned();
        let properties_length = reader.i16("PROPERTIES length")?;
        let properties_length = reader.length("PROPERTIES", i64::from(properties_length))?;
        let properties = std::str::from_utf8(reader.take("PROPERTIES", properties_length)?)
            .map_err(|_| MessageError::InvalidUtf8 {
                field: "properties",
            })?;
        if reader.position != declared {
            return Err(MessageError::SizeMismatch {
                offset,
                declared: i64::from(total),
                actual: reader.position,
            });
        }
        if options.verify_body_crc {
            let computed = body_crc(&body);
            if computed != stored_crc {
                return Err(MessageError::BodyCrcMismatch {
                    offset,
                    stored: stored_crc,
                    computed,
                });
            }
        }
        let message = MessageRecord {
            version,
            body_crc: stored_crc,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_transaction_offset,
            body,
            topic,
            properties: Properties::parse(properties),
        };
        Ok((message, declared))
    }

    /// The body as the producer sent it: inflated when the compressed flag is set.
    pub fn uncompressed_body(&self) -> Result<Bytes, MessageError> {
        if self.sys_flag & sys_flag::COMPRESSED == 0 {
            return Ok(self.body.clone());
        }
        let compression = (self.sys_flag & sys_flag::COMPRESSION_TYPE_MASK) >> 8;
        if compression != 0 && compression != 3 {
            return Err(MessageError::Decompress {
                reason: format!("compression type {compression} is not supported"),
            });
        }
        let mut inflated = Vec::with_capacity(self.body.len() * 4);
        flate2::read::ZlibDecoder::new(&self.body[..])
            .read_to_end(&mut inflated)
            .map_err(|error| MessageError::Decompress {
                reason: error.to_string(),
            })?;
        Ok(Bytes::from(inflated))
    }

    /// The `TAGS` property.
    pub fn tags(&self) -> Option<&str> {
        self.properties.tags()
    }
}

/// Decodes a pull / query body: records back to back, nothing between them.
pub fn decode_records(
    body: &Bytes,
    options: DecodeOptions,
) -> Result<Vec<MessageRecord>, MessageError> {
    let mut records = Vec::new();
    let mut offset = 0;
    while offset < body.len() {
        let (record, length) = MessageRecord::decode(body, offset, options)?;
        records.push(record);
        offset += length;
    }
    Ok(records)
}

fn put_host(out: &mut BytesMut, address: &SocketAddr) {
    match address.ip() {
        IpAddr::V4(ip) => out.put_slice(&ip.octets()),
        IpAddr::V6(ip) => out.put_slice(&ip.octets()),
    }
    out.put_i32(i32::from(address.port()));
}

/// A bounds-checked reader over a record.
struct RecordReader<'a> {
    buffer: &'a Bytes,
    start: usize,
    position: usize,
}

impl<'a> RecordReader<'a> {
    fn take(&mut self, field: &'static str, count: usize) -> Result<&'a [u8], MessageError> {
        let have = self.buffer.len().saturating_sub(self.position);
        if count > have {
            return Err(MessageError::Truncated {
                field,
                offset: self.position - self.start,
                need: count,
                have,
            });
        }
        let slice = &self.buffer[self.position..self.position + count];
        self.position += count;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], MessageError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(field, N)?);
        Ok(out)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, MessageError> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, MessageError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, MessageError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, MessageError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    fn length(&self, field: &'static str, length: i64) -> Result<usize, MessageError> {
        usize::try_from(length).map_err(|_| MessageError::InvalidLength {
            field,
            offset: self.position,
            length,
        })
    }

    fn host(&mut self, field: &'static str, ipv6: bool) -> Result<SocketAddr, MessageError> {
        let ip = if ipv6 {
            IpAddr::V6(Ipv6Addr::from(self.array::<16>(field)?))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.array::<4>(field)?))
        };
        let port = self.i32(field)?;
        // Java writes the port as an int; anything outside u16 is not a port.
        let port = u16::try_from(port).map_err(|_| MessageError::InvalidLength {
            field,
            offset: self.position - 4,
            length: i64::from(port),
        })?;
        Ok(SocketAddr::new(ip, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> MessageRecord {
        MessageRecord {
            queue_id: 3,
            flag: 7,
            queue_offset: 1234,
            physical_offset: 567_890,
            born_timestamp: 1_700_000_000_123,
            born_host: "127.0.0.1:50001".parse().expect("addr"),
            store_timestamp: 1_700_000_000_456,
            store_host: "[::1]:10911".parse().expect("addr"),
            reconsume_times: 2,
            body: Bytes::from_static(b"hello tidemark"),
            topic: "TopicFixture".into(),
            properties: [("TAGS", "TagA")].into_iter().collect(),
            ..MessageRecord::default()
        }
    }

    #[test]
    fn round_trip_sets_host_flags_and_crc() {
        let record = sample();
        let bytes = record.encode_to_bytes().expect("encodes");
        let (decoded, length) = MessageRecord::decode(
            &bytes,
            0,
            DecodeOptions {
                verify_body_crc: true,
            },
        )
        .expect("decodes");
        assert_eq!(length, bytes.len());
        assert_eq!(decoded.sys_flag, sys_flag::STOREHOST_V6);
        assert_eq!(decoded.body_crc, body_crc(b"hello tidemark"));
        assert_eq!(
            decoded,
            MessageRecord {
                sys_flag: sys_flag::STOREHOST_V6,
                body_crc: decoded.body_crc,
                ..record
            }
        );
    }

    #[test]
    fn fields_read_in_place_match_the_decoded_record() {
        for born_host in ["127.0.0.1:50001", "[::1]:50001"] {
            let record = MessageRecord {
                born_host: born_host.parse().expect("addr"),
                ..sample()
            };
            let bytes = record.encode_to_bytes().expect("encodes");
            assert_eq!(total_size_of(&bytes), Some(bytes.len() as i32));
            assert_eq!(magic_code_of(&bytes), Some(MAGIC_CODE_V1));
            assert_eq!(store_timestamp_of(&bytes), Some(record.store_timestamp));
            let store_timestamp_end = BORN_HOST_POSITION + host_length(&record.born_host) + 8;
            assert_eq!(store_timestamp_of(&bytes[..store_timestamp_end - 1]), None);
        }
        assert_eq!(total_size_of(&[0, 0, 1]), None);
        assert_eq!(magic_code_of(&[0; 7]), None);
    }

    #[test]
    fn crc_mismatch_is_reported_only_when_asked() {
        let mut bytes = BytesMut::from(&sample().encode_to_bytes().expect("encodes")[..]);
        let body_at = bytes.len() - 14 - 1 - 12 - 2 - "TAGS\u{1}TagA".len();
        bytes[body_at] ^= 0xFF;
        let bytes = bytes.freeze();
        assert!(MessageRecord::decode(&bytes, 0, DecodeOptions::default()).is_ok());
        assert!(matches!(
            MessageRecord::decode(
                &bytes,
                0,
                DecodeOptions {
                    verify_body_crc: true
                }
            ),
            Err(MessageError::BodyCrcMismatch { .. })
        ));
    }

    #[test]
    fn compressed_body_inflates() {
        use std::io::Write as _;
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(5));
        encoder.write_all(&[b'x'; 5000]).expect("in memory");
        let compressed = encoder.finish().expect("in memory");
        let record = MessageRecord {
            body: compressed.into(),
            sys_flag: sys_flag::COMPRESSED,
            ..sample()
        };
        assert_eq!(
            record.uncompressed_body().expect("inflates"),
            Bytes::from(vec![b'x'; 5000])
        );
    }

    #[test]
    fn v1_topic_longer_than_127_bytes_is_refused() {
        let record = MessageRecord {
            topic: "t".repeat(128),
            ..sample()
        };
        assert!(matches!(
            record.encode_to_bytes(),
            Err(MessageError::FieldTooLong { field: "topic", .. })
        ));
        let record = MessageRecord {
            version: RecordVersion::V2,
            ..record
        };
        assert!(record.encode_to_bytes().is_ok());
    }
}
