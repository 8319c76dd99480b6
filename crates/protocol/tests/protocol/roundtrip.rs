//! Property tests: encode→decode round trips for frames, headers, records and bodies; every
//! truncated prefix is "incomplete"; arbitrary and mutated bytes never panic any decoder.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tidemark_protocol::body::{
    BrokerData, ConsumeStats, ConsumerOffsetWrapper, HeartbeatData, MessageQueue, OffsetWrapper,
    QueueData, TopicRouteData,
};
use tidemark_protocol::headers::{PullMessageRequestHeader, SendMessageRequestHeaderV2};
use tidemark_protocol::json::{self, JsonBody, Value, WriteOptions};
use tidemark_protocol::message::{
    decode_batch, decode_records, encode_batch, properties_of, BatchEntry, DecodeOptions,
    MessageRecord, Properties, RecordVersion,
};
use tidemark_protocol::{
    frame, CommandHeader, ExtFields, LanguageCode, RemotingCommand, SerializeType,
};

/// Cases for the no-panic properties; CI runs all of them.
const NO_PANIC_CASES: u32 = 100_000;
const FRAME_MAX: usize = 1 << 20;

fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..max).prop_map(|chars| chars.into_iter().collect())
}

fn non_empty_text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 1..max).prop_map(|chars| chars.into_iter().collect())
}

fn language() -> impl Strategy<Value = LanguageCode> {
    (0u8..14).prop_map(LanguageCode::from_byte)
}

/// Ext fields as a binary header can carry them: empty values read back as absent there.
fn ext_fields() -> impl Strategy<Value = ExtFields> {
    proptest::collection::vec(("[a-zA-Z_]{1,12}", non_empty_text(24)), 0..8)
        .prop_map(|pairs| pairs.into_iter().collect())
}

fn command() -> impl Strategy<Value = RemotingCommand> {
    (
        (
            any::<i16>(),
            language(),
            any::<i16>(),
            any::<i32>(),
            any::<i32>(),
        ),
        proptest::option::of(non_empty_text(40)),
        ext_fields(),
        proptest::collection::vec(any::<u8>(), 0..64),
        prop_oneof![Just(SerializeType::Json), Just(SerializeType::RocketMq)],
    )
        .prop_map(
            |(
                (code, language, version, opaque, flag),
                remark,
                ext_fields,
                body,
                serialize_type,
            )| {
                RemotingCommand {
                    code: i32::from(code),
                    language,
                    version: i32::from(version),
                    opaque,
                    flag,
                    remark,
                    ext_fields,
                    body: Bytes::from(body),
                    serialize_type,
                }
            },
        )
}

fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<u32>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)),
        (any::<u128>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port)),
    ]
}

/// Properties whose names and values survive Java's parser: non-empty, no separators.
fn properties() -> impl Strategy<Value = Properties> {
    proptest::collection::vec(("[A-Za-z_]{1,10}", "[^\u{1}\u{2}]{1,16}"), 0..6)
        .prop_map(|pairs| pairs.into_iter().collect())
}

fn record() -> impl Strategy<Value = MessageRecord> {
    (
        (
            any::<i32>(),
            any::<i32>(),
            any::<i64>(),
            any::<i64>(),
            any::<i32>(),
            any::<i64>(),
            any::<i64>(),
        ),
        (socket_addr(), socket_addr(), any::<i32>(), any::<i64>()),
        (
            proptest::collection::vec(any::<u8>(), 0..256),
            "[%|a-zA-Z0-9_-]{1,127}",
            properties(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (
                    queue_id,
                    flag,
                    queue_offset,
                    physical_offset,
                    sys_flag,
                    born_timestamp,
                    store_timestamp,
                ),
                (born_host, store_host, reconsume_times, prepared_transaction_offset),
                (body, topic, properties, v2),
            )| {
                let mut record = MessageRecord {
                    version: if v2 {
                        RecordVersion::V2
                    } else {
                        RecordVersion::V1
                    },
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
                    body: Bytes::from(body),
                    topic,
                    properties,
                    body_crc: 0,
                };
                record.sys_flag = record.effective_sys_flag();
                record.body_crc = crc(&record.body);
                record
            },
        )
}

fn crc(body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(body);
    hasher.finalize() & 0x7FFF_FFFF
}

fn route() -> impl Strategy<Value = TopicRouteData> {
    let broker = (
        "[a-z-]{1,10}",
        proptest::collection::btree_map(0i64..4, "[0-9.:]{1,21}", 0..3),
    )
        .prop_map(|(name, addrs)| BrokerData {
            broker_name: name,
            cluster: "DefaultCluster".into(),
            broker_addrs: addrs,
            ..BrokerData::default()
        });
    let queue = ("[a-z-]{1,10}", 0i32..64, 0i32..64, 0i32..8, 0i32..4).prop_map(
        |(name, read, write, perm, flag)| QueueData {
            broker_name: name,
            read_queue_nums: read,
            write_queue_nums: write,
            perm,
            topic_sys_flag: flag,
        },
    );
    (
        proptest::collection::vec(broker, 0..3),
        proptest::collection::vec(queue, 0..3),
        proptest::option::of("[a-z:;0-9]{1,12}"),
    )
        .prop_map(
            |(broker_datas, queue_datas, order_topic_conf)| TopicRouteData {
                broker_datas,
                queue_datas,
                order_topic_conf,
                filter_server_table: BTreeMap::new(),
            },
        )
}

fn consume_stats() -> impl Strategy<Value = ConsumeStats> {
    let line = (any::<i64>(), any::<i64>(), any::<i64>()).prop_map(
        |(broker_offset, consumer_offset, last_timestamp)| OffsetWrapper {
            broker_offset,
            consumer_offset,
            last_timestamp,
            pull_offset: None,
        },
    );
    let queue = ("[a-zA-Z%_-]{1,12}", "[a-z-]{1,8}", 0i32..32)
        .prop_map(|(topic, broker, id)| MessageQueue::new(topic, broker, id));
    (
        proptest::collection::btree_map(queue, line, 0..5),
        -1.0e6f64..1.0e6,
    )
        .prop_map(|(offset_table, consume_tps)| ConsumeStats {
            consume_tps,
            offset_table,
        })
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        (-1.0e12f64..1.0e12).prop_map(Value::Float),
        text(12).prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((text(8), inner), 0..6).prop_map(|entries| {
                let mut object = json::Object::new();
                for (key, value) in entries {
                    object.push(Value::String(key), value);
                }
                Value::Object(object)
            }),
        ]
    })
}

proptest! {
    #[test]
    fn frames_round_trip(command in command()) {
        let encoded = frame::encode_to_bytes(&command).expect("encodes");
        let (decoded, used) = frame::decode_slice(&encoded, FRAME_MAX).expect("valid").expect("complete");
        prop_assert_eq!(used, encoded.len());
        prop_assert_eq!(decoded, command);
    }

    #[test]
    fn every_truncated_prefix_is_incomplete(command in command()) {
        let encoded = frame::encode_to_bytes(&command).expect("encodes");
        for cut in 0..encoded.len() {
            let mut buffer = BytesMut::from(&encoded[..cut]);
            prop_assert_eq!(frame::decode(&mut buffer, FRAME_MAX), Ok(None), "prefix of {} bytes", cut);
            prop_assert_eq!(&buffer[..], &encoded[..cut], "an incomplete frame must be left untouched");
        }
    }

    #[test]
    fn frame_streams_decode_whatever_the_split(commands in proptest::collection::vec(command(), 1..5), split in any::<prop::sample::Index>()) {
        let mut stream = BytesMut::new();
        for command in &commands {
            frame::encode(command, &mut stream).expect("encodes");
        }
        let split = split.index(stream.len() + 1);
        let mut buffer = BytesMut::from(&stream[..split]);
        let mut decoded = Vec::new();
        while let Some(command) = frame::decode(&mut buffer, FRAME_MAX).expect("valid") {
            decoded.push(command);
        }
        buffer.extend_from_slice(&stream[split..]);
        while let Some(command) = frame::decode(&mut buffer, FRAME_MAX).expect("valid") {
            decoded.push(command);
        }
        prop_assert!(buffer.is_empty());
        prop_assert_eq!(decoded, commands);
    }

    #[test]
    fn pull_headers_round_trip(
        group in "[a-zA-Z0-9_%-]{1,20}", topic in "[a-zA-Z0-9_%-]{1,20}", queue_id in any::<i32>(),
        offsets in (any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()), sys_flag in any::<i32>(),
        subscription in proptest::option::of(text(20)), max_bytes in proptest::option::of(any::<i32>()),
    ) {
        let header = PullMessageRequestHeader {
            consumer_group: group, topic, queue_id, queue_offset: offsets.0, max_msg_nums: 32, sys_flag,
            commit_offset: offsets.1, suspend_timeout_millis: offsets.2, subscription, sub_version: offsets.3,
            expression_type: Some("TAG".into()), max_msg_bytes: max_bytes, broker_name: None,
        };
        prop_assert_eq!(PullMessageRequestHeader::read_from(&header.to_ext_fields()), Ok(header));
    }

    #[test]
    fn send_headers_round_trip(topic in "[a-zA-Z0-9_-]{1,30}", queue_id in any::<i32>(), born in any::<i64>(),
        properties in proptest::option::of(text(30)), reconsume in proptest::option::of(any::<i32>()), flags in any::<(bool, bool)>()) {
        let header = SendMessageRequestHeaderV2 {
            producer_group: "PG".into(), topic, default_topic: "TBW102".into(), default_topic_queue_nums: 4, queue_id,
            sys_flag: 0, born_timestamp: born, flag: 0, properties, reconsume_times: reconsume, unit_mode: flags.0,
            max_reconsume_times: None, batch: flags.1, broker_name: Some("b".into()),
        };
        let command = RemotingCommand::request_with_header(tidemark_protocol::RequestCode::SendMessageV2, &header);
        let encoded = frame::encode_to_bytes(&command).expect("encodes");
        let (decoded, _) = frame::decode_slice(&encoded, FRAME_MAX).expect("valid").expect("complete");
        prop_assert_eq!(decoded.decode_header::<SendMessageRequestHeaderV2>(), Ok(header));
    }

    #[test]
    fn records_round_trip(records in proptest::collection::vec(record(), 1..4)) {
        let mut body = BytesMut::new();
        for record in &records {
            record.encode(&mut body).expect("encodes");
        }
        let decoded = decode_records(&body.freeze(), DecodeOptions { verify_body_crc: true }).expect("valid");
        prop_assert_eq!(&decoded, &records);
        // The in-place read of the properties agrees with the full decode (both versions, both
        // host families).
        for record in &records {
            let encoded = record.encode_to_bytes().expect("encodes");
            let properties = properties_of(&encoded).expect("properties found in place");
            prop_assert_eq!(properties.to_owned(), record.properties.encode());
        }
    }

    #[test]
    fn batches_round_trip(entries in proptest::collection::vec((any::<i32>(), proptest::collection::vec(any::<u8>(), 0..64), properties()), 0..5)) {
        let entries: Vec<BatchEntry> = entries.into_iter().map(|(flag, body, properties)| BatchEntry { flag, body: Bytes::from(body), properties }).collect();
        let encoded = encode_batch(&entries).expect("encodes");
        prop_assert_eq!(decode_batch(&encoded).expect("valid"), entries);
    }

    #[test]
    fn route_bodies_round_trip_in_every_style(route in route()) {
        for options in [WriteOptions::FASTJSON, WriteOptions::STANDARD, WriteOptions::PRETTY] {
            let bytes = route.to_json_bytes_with(options);
            prop_assert_eq!(TopicRouteData::from_json_bytes(&bytes).expect("parses"), route.clone());
        }
    }

    #[test]
    fn message_queue_keyed_bodies_round_trip(stats in consume_stats()) {
        for options in [WriteOptions::FASTJSON, WriteOptions::STANDARD, WriteOptions::PRETTY] {
            let bytes = stats.to_json_bytes_with(options);
            prop_assert_eq!(ConsumeStats::from_json_bytes(&bytes).expect("parses"), stats.clone());
        }
    }

    #[test]
    fn offset_files_round_trip(table in proptest::collection::btree_map("[a-zA-Z0-9_%-]{1,8}@[a-zA-Z0-9_-]{1,8}", proptest::collection::btree_map(0i32..64, any::<i64>(), 0..4), 0..4)) {
        let wrapper = ConsumerOffsetWrapper { offset_table: table, data_version: None, reset_epoch_table: None, acked_ranges_table: None };
        for options in [WriteOptions::FASTJSON, WriteOptions::STANDARD, WriteOptions::PRETTY] {
            prop_assert_eq!(ConsumerOffsetWrapper::from_json_bytes(&wrapper.to_json_bytes_with(options)).expect("parses"), wrapper.clone());
        }
    }

    #[test]
    fn json_values_round_trip(value in json_value()) {
        for options in [WriteOptions::FASTJSON, WriteOptions::PRETTY] {
            prop_assert_eq!(json::parse(json::write(&value, options).as_bytes()).expect("parses"), value.clone());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: NO_PANIC_CASES, failure_persistence: None, ..ProptestConfig::default() })]

    /// Raw bytes, and bytes shaped like a frame so the header parsers are reached, give Ok or
    /// a typed error from the frame decoder, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic_the_frame_decoder(
        raw in proptest::collection::vec(any::<u8>(), 0..256),
        serialize_type in 0u8..3,
        shaped in any::<bool>(),
    ) {
        let bytes = if shaped {
            let mut framed = Vec::with_capacity(raw.len() + 8);
            framed.extend_from_slice(&(raw.len() as u32 + 4).to_be_bytes());
            let header_length = (raw.len() as u32).saturating_sub(u32::from(raw.first().copied().unwrap_or(0) % 16));
            framed.extend_from_slice(&(u32::from(serialize_type) << 24 | header_length).to_be_bytes());
            framed.extend_from_slice(&raw);
            framed
        } else {
            raw
        };
        let mut buffer = BytesMut::from(&bytes[..]);
        let _ = frame::decode(&mut buffer, FRAME_MAX);
        let _ = frame::decode_slice(&bytes, FRAME_MAX);
    }

    /// A valid frame with a few bytes overwritten decodes or fails cleanly.
    #[test]
    fn mutated_frames_never_panic(command in command(), mutations in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let mut bytes = frame::encode_to_bytes(&command).expect("encodes").to_vec();
        for (index, byte) in mutations {
            let at = index.index(bytes.len());
            bytes[at] = byte;
        }
        let _ = frame::decode_slice(&bytes, FRAME_MAX);
    }

    /// Record, batch and JSON decoders on arbitrary bytes and on mutated valid records.
    #[test]
    fn arbitrary_bytes_never_panic_message_and_body_decoders(raw in proptest::collection::vec(any::<u8>(), 0..256), record in record(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let raw = Bytes::from(raw);
        let _ = decode_records(&raw, DecodeOptions { verify_body_crc: true });
        let _ = decode_batch(&raw);
        let _ = json::parse(&raw);
        let _ = HeartbeatData::from_json_bytes(&raw);
        let mut valid = record.encode_to_bytes().expect("encodes").to_vec();
        let at = at.index(valid.len());
        valid[at] = byte;
        let _ = properties_of(&valid);
        let _ = properties_of(&raw);
        let _ = decode_records(&Bytes::from(valid), DecodeOptions { verify_body_crc: true });
    }
}
