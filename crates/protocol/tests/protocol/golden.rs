//! Golden byte vectors derived by hand from the protocol notes (§1 frames, §5 records): the
//! exact bytes, field offsets asserted one by one, and the actual hex printed on failure.

use bytes::{Bytes, BytesMut};
use tidemark_protocol::hex;
use tidemark_protocol::message::{DecodeOptions, MessageRecord, Properties};
use tidemark_protocol::{
    frame, ExtFields, LanguageCode, RemotingCommand, RequestCode, SerializeType,
    FRAME_SIZE_MAX_BYTES_DEFAULT,
};

fn assert_bytes(actual: &[u8], expected: &[u8], what: &str) {
    assert!(
        actual == expected,
        "{what} differs\n  actual:   {}\n  expected: {}",
        hex::encode_lower(actual),
        hex::encode_lower(expected)
    );
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn be_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(word)
}

/// GET_MAX_OFFSET with two ext fields and a 2-byte body, JSON header (§1.1, §1.3).
#[test]
fn json_frame_golden() {
    let header = br#"{"code":30,"extFields":{"topic":"T","queueId":"0"},"flag":0,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}"#;
    assert_eq!(header.len(), 136);
    let mut expected = vec![0x00, 0x00, 0x00, 0x8E, 0x00, 0x00, 0x00, 0x88];
    expected.extend_from_slice(header);
    expected.extend_from_slice(b"hi");

    let mut ext_fields = ExtFields::new();
    ext_fields.insert("topic", "T");
    ext_fields.insert("queueId", "0");
    let command = RemotingCommand {
        code: 30,
        opaque: 5,
        ext_fields,
        body: Bytes::from_static(b"hi"),
        ..RemotingCommand::default()
    };
    let encoded = frame::encode_to_bytes(&command).expect("encodes");
    assert_bytes(&encoded, &expected, "JSON frame");
    assert_eq!(
        be_u32(&encoded, 0),
        4 + 136 + 2,
        "length word = 4 + header + body"
    );
    assert_eq!(encoded[4], 0, "serialize type JSON");
    assert_eq!(be_u32(&encoded, 4) & 0x00FF_FFFF, 136, "header length");
    assert_eq!(&encoded[8 + 136..], b"hi", "body follows the header");

    let decoded = frame::decode_slice(&expected, FRAME_SIZE_MAX_BYTES_DEFAULT)
        .expect("valid")
        .expect("complete");
    assert_eq!(decoded.1, expected.len());
    assert_eq!(decoded.0, command);
}

/// PULL_MESSAGE with one ext field, ROCKETMQ binary header (§1.4).
#[test]
fn rocketmq_frame_golden() {
    #[rustfmt::skip]
    let expected: Vec<u8> = [
        &[0x00, 0x00, 0x00, 0x27][..],             // length = 4 + 33 + 2
        &[0x01, 0x00, 0x00, 0x21],                 // ROCKETMQ | header length 33
        &[0x00, 0x0B],                             // code 11 (int16)
        &[0x00],                                   // language JAVA
        &[0x01, 0x99],                             // version 409 (int16)
        &[0x00, 0x00, 0x00, 0x07],                 // opaque 7
        &[0x00, 0x00, 0x00, 0x00],                 // flag
        &[0x00, 0x00, 0x00, 0x00],                 // remark length 0 = null
        &[0x00, 0x00, 0x00, 0x0C],                 // ext block length 12
        &[0x00, 0x05], b"topic",                   // key
        &[0x00, 0x00, 0x00, 0x01], b"T",           // value
        b"ab",                                     // body
    ]
    .concat();

    let mut ext_fields = ExtFields::new();
    ext_fields.insert("topic", "T");
    let command = RemotingCommand {
        code: RequestCode::PullMessage.to_i32(),
        opaque: 7,
        ext_fields,
        body: Bytes::from_static(b"ab"),
        serialize_type: SerializeType::RocketMq,
        ..RemotingCommand::default()
    };
    let encoded = frame::encode_to_bytes(&command).expect("encodes");
    assert_bytes(&encoded, &expected, "ROCKETMQ frame");
    assert_eq!(
        be_u32(&encoded, 4),
        0x0100_0021,
        "type byte 1, header length 33"
    );
    assert_eq!(
        u16::from_be_bytes([encoded[8], encoded[9]]),
        11,
        "code at 8"
    );
    assert_eq!(encoded[10], LanguageCode::Java.to_byte(), "language at 10");
    assert_eq!(
        u16::from_be_bytes([encoded[11], encoded[12]]),
        409,
        "version at 11"
    );
    assert_eq!(be_u32(&encoded, 13), 7, "opaque at 13");
    assert_eq!(be_u32(&encoded, 25), 12, "ext block length at 25");

    let mut buffer = BytesMut::from(&expected[..]);
    let decoded = frame::decode(&mut buffer, FRAME_SIZE_MAX_BYTES_DEFAULT)
        .expect("valid")
        .expect("complete");
    assert!(buffer.is_empty());
    assert_eq!(decoded, command);
}

/// A stored message record with IPv4 hosts (§5.1): every field at its offset.
#[test]
fn stored_message_golden() {
    #[rustfmt::skip]
    let expected: Vec<u8> = [
        &[0x00, 0x00, 0x00, 0x64][..],                         //  0 TOTALSIZE 100
        &[0xDA, 0xA3, 0x20, 0xA7],                             //  4 MAGICCODE v1
        &[0x1E, 0x83, 0x48, 0x6D],                             //  8 BODYCRC crc32("ab") & 0x7FFFFFFF
        &[0x00, 0x00, 0x00, 0x01],                             // 12 QUEUEID 1
        &[0x00, 0x00, 0x00, 0x00],                             // 16 FLAG
        &[0, 0, 0, 0, 0, 0, 0, 0x05],                          // 20 QUEUEOFFSET 5
        &[0, 0, 0, 0, 0, 0, 0x10, 0x00],                       // 28 PHYSICALOFFSET 4096
        &[0x00, 0x00, 0x00, 0x00],                             // 36 SYSFLAG
        &[0x00, 0x00, 0x01, 0x8B, 0xCF, 0xE5, 0x68, 0x00],     // 40 BORNTIMESTAMP 1700000000000
        &[10, 0, 0, 2], &[0x00, 0x00, 0xC3, 0x50],             // 48 BORNHOST 10.0.0.2:50000
        &[0x00, 0x00, 0x01, 0x8B, 0xCF, 0xE5, 0x68, 0x01],     // 56 STORETIMESTAMP
        &[10, 0, 0, 1], &[0x00, 0x00, 0x2A, 0x9F],             // 64 STOREHOST 10.0.0.1:10911
        &[0x00, 0x00, 0x00, 0x00],                             // 72 RECONSUMETIMES
        &[0, 0, 0, 0, 0, 0, 0, 0],                             // 76 PREPARED TX OFFSET
        &[0x00, 0x00, 0x00, 0x02], b"ab",                      // 84 BODY
        &[0x01], b"T",                                         // 90 TOPIC (1-byte length)
        &[0x00, 0x06], b"TAGS\x01A",                           // 92 PROPERTIES
    ]
    .concat();
    assert_eq!(expected.len(), 100);

    let mut properties = Properties::new();
    properties.insert("TAGS", "A");
    let record = MessageRecord {
        queue_id: 1,
        queue_offset: 5,
        physical_offset: 4096,
        born_timestamp: 1_700_000_000_000,
        born_host: "10.0.0.2:50000".parse().expect("literal"),
        store_timestamp: 1_700_000_000_001,
        store_host: "10.0.0.1:10911".parse().expect("literal"),
        body: Bytes::from_static(b"ab"),
        topic: "T".into(),
        properties,
        body_crc: 0x1E83_486D,
        ..MessageRecord::default()
    };
    let encoded = record.encode_to_bytes().expect("encodes");
    assert_bytes(&encoded, &expected, "stored record");
    assert_eq!(be_u32(&encoded, 4), 0xDAA3_20A7, "magic at 4");
    assert_eq!(be_u32(&encoded, 12), 1, "queue id at 12");
    assert_eq!(be_u64(&encoded, 20), 5, "queue offset at 20");
    assert_eq!(be_u64(&encoded, 28), 4096, "physical offset at 28");
    assert_eq!(
        be_u64(&encoded, 40),
        1_700_000_000_000,
        "born timestamp at 40"
    );
    assert_eq!(
        be_u64(&encoded, 56),
        1_700_000_000_001,
        "store timestamp at 56 with an IPv4 born host"
    );

    let bytes = Bytes::from(expected);
    let (decoded, length) = MessageRecord::decode(
        &bytes,
        0,
        DecodeOptions {
            verify_body_crc: true,
        },
    )
    .expect("valid");
    assert_eq!(length, 100);
    assert_eq!(decoded, record);
    assert_eq!(decoded.tags(), Some("A"));
}
