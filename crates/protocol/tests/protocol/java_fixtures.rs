//! Fixtures captured from the real Apache RocketMQ Java client 4.9.8 (`compat/java`, which
//! also checks in CI that they are still what that client produces). Each is decoded and every
//! field asserted, against literal values and against the facts in its `.txt` sidecar; where
//! Java's bytes are deterministic, re-encoding must reproduce them exactly.

use std::collections::BTreeMap;
use std::path::PathBuf;

use bytes::Bytes;
use tidemark_protocol::body::{
    ConsumeFromWhere, ConsumeStats, ConsumeType, ConsumerOffsetWrapper, HeartbeatData,
    MessageModel, MessageQueue, MessageQueueOffsets, TopicRouteData,
};
use tidemark_protocol::headers::{
    pull_sys_flag, PullMessageRequestHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2,
};
use tidemark_protocol::json::{JsonBody, WriteOptions};
use tidemark_protocol::message::{
    decode_offset_msg_id, encode_offset_msg_id, DecodeOptions, MessageRecord, Properties,
    RecordVersion,
};
use tidemark_protocol::{
    frame, hex, LanguageCode, RemotingCommand, RequestCode, SerializeType,
    FRAME_SIZE_MAX_BYTES_DEFAULT,
};

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/java")
        .join(name)
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    let raw =
        std::fs::read(fixture_path(name)).unwrap_or_else(|error| panic!("fixture {name}: {error}"));
    if name.ends_with(".hex") {
        hex::decode(std::str::from_utf8(&raw).expect("hex fixtures are text"))
            .expect("hex fixture is hex")
    } else {
        raw
    }
}

/// Reads `key = value` lines; values use `\uXXXX` (UTF-16 units) for anything outside ASCII.
fn sidecar(name: &str) -> BTreeMap<String, String> {
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    let text =
        std::fs::read_to_string(fixture_path(&format!("{stem}.txt"))).expect("sidecar exists");
    text.lines()
        .filter_map(|line| {
            line.split_once(" = ")
                .or_else(|| line.strip_suffix(" =").map(|key| (key, "")))
        })
        .map(|(key, value)| (key.trim().to_owned(), unescape(value)))
        .collect()
}

fn unescape(text: &str) -> String {
    let mut units: Vec<u16> = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(character) = chars.next() {
        if character == '\\' && chars.peek() == Some(&'u') {
            chars.next();
            let digits: String = chars.by_ref().take(4).collect();
            units.push(u16::from_str_radix(&digits, 16).expect("sidecar escape"));
        } else {
            let mut buffer = [0u16; 2];
            units.extend_from_slice(character.encode_utf16(&mut buffer));
        }
    }
    String::from_utf16(&units).expect("sidecar text")
}

fn number<T: std::str::FromStr>(facts: &BTreeMap<String, String>, key: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    facts
        .get(key)
        .unwrap_or_else(|| panic!("sidecar lacks {key}"))
        .parse()
        .expect("numeric fact")
}

/// Decodes a captured frame, checks its envelope against the sidecar, and checks that
/// encoding the decoded command gives back the captured bytes.
fn decode_frame_fixture(name: &str) -> RemotingCommand {
    let bytes = fixture_bytes(name);
    let facts = sidecar(name);
    assert_eq!(bytes.len(), number::<usize>(&facts, "frame_total_length"));
    let (command, consumed) = frame::decode_slice(&bytes, FRAME_SIZE_MAX_BYTES_DEFAULT)
        .expect("valid frame")
        .expect("complete frame");
    assert_eq!(consumed, bytes.len(), "one frame, no trailing bytes");
    let expected_type = if number::<u8>(&facts, "serialize_type") == 1 {
        SerializeType::RocketMq
    } else {
        SerializeType::Json
    };
    assert_eq!(command.serialize_type, expected_type);
    assert_eq!(command.code, number::<i32>(&facts, "code"));
    assert_eq!(command.language.name(), facts["language"]);
    assert_eq!(command.version, number::<i32>(&facts, "version"));
    assert_eq!(command.opaque, number::<i32>(&facts, "opaque"));
    assert_eq!(command.flag, number::<i32>(&facts, "flag"));
    assert_eq!(command.remark, None, "Java sends no remark on requests");
    let ext_facts: Vec<(&str, &str)> = facts
        .iter()
        .filter_map(|(key, value)| {
            key.strip_prefix("ext.")
                .map(|field| (field, value.as_str()))
        })
        .collect();
    assert_eq!(command.ext_fields.len(), ext_facts.len());
    for (field, value) in ext_facts {
        assert_eq!(
            command.ext_fields.get(field),
            Some(value),
            "ext field {field}"
        );
    }
    assert_eq!(command.body.len(), number::<usize>(&facts, "body_length"));
    if let Some(body) = facts.get("body_utf8") {
        assert_eq!(&command.body[..], body.as_bytes());
    }
    let reencoded = frame::encode_to_bytes(&command).expect("encodes");
    assert!(
        reencoded[..] == bytes[..],
        "re-encoding {name} must reproduce Java's bytes\n  ours: {}\n  java: {}",
        hex::encode_lower(&reencoded),
        hex::encode_lower(&bytes)
    );
    command
}

fn expected_send_header() -> SendMessageRequestHeaderV2 {
    SendMessageRequestHeaderV2 {
        producer_group: "PG_FIXTURE".into(),
        topic: "TopicFixture".into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 2,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_123,
        flag: 7,
        properties: Some(
            "color\u{1}blue\u{2}KEYS\u{1}k1 k2\u{2}UNIQ_KEY\u{1}7F00000100002A9F0000000000000001\u{2}WAIT\u{1}true\u{2}TAGS\u{1}TagA"
                .into(),
        ),
        reconsume_times: Some(0),
        unit_mode: false,
        max_reconsume_times: None,
        batch: false,
        broker_name: Some("broker-a".into()),
    }
}

#[test]
fn send_message_v2_json_frame_from_java() {
    let command = decode_frame_fixture("send_message_v2_request.hex");
    assert_eq!(command.request_code(), RequestCode::SendMessageV2);
    assert_eq!(command.language, LanguageCode::Java);
    assert_eq!(&command.body[..], b"hello tidemark");
    let header: SendMessageRequestHeaderV2 = command.decode_header().expect("typed header");
    assert_eq!(header, expected_send_header());
    let properties = Properties::parse(header.properties.as_deref().expect("present"));
    assert_eq!(properties.tags(), Some("TagA"));
    assert_eq!(properties.keys().collect::<Vec<_>>(), vec!["k1", "k2"]);
    assert_eq!(
        properties.unique_key(),
        Some("7F00000100002A9F0000000000000001")
    );
    assert_eq!(properties.get("color"), Some("blue"));
    assert_eq!(properties.get("WAIT"), Some("true"));
    // Java 4.9 writes no separator after the last property; so do we.
    assert_eq!(Some(properties.encode()), header.properties);
    let v1 = SendMessageRequestHeader::from(header.clone());
    assert_eq!(v1.topic, "TopicFixture");
    assert_eq!(SendMessageRequestHeaderV2::from(v1), header);
}

#[test]
fn send_message_v2_rocketmq_frame_from_java() {
    let command = decode_frame_fixture("send_message_v2_request_rocketmq.hex");
    assert_eq!(command.serialize_type, SerializeType::RocketMq);
    assert_eq!(command.request_code(), RequestCode::SendMessageV2);
    let header: SendMessageRequestHeaderV2 = command.decode_header().expect("typed header");
    assert_eq!(header, expected_send_header());
    assert_eq!(&command.body[..], b"hello tidemark");
}

#[test]
fn pull_message_frame_from_java() {
    let command = decode_frame_fixture("pull_message_request.hex");
    assert_eq!(command.request_code(), RequestCode::PullMessage);
    assert!(command.body.is_empty());
    let header: PullMessageRequestHeader = command.decode_header().expect("typed header");
    assert_eq!(
        header,
        PullMessageRequestHeader {
            consumer_group: "CG_FIXTURE".into(),
            topic: "TopicFixture".into(),
            queue_id: 1,
            queue_offset: 42,
            max_msg_nums: 32,
            sys_flag: 3,
            commit_offset: 40,
            suspend_timeout_millis: 15_000,
            subscription: None,
            sub_version: 1_700_000_000_000,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            broker_name: Some("broker-a".into()),
        }
    );
    assert_eq!(
        header.sys_flag,
        pull_sys_flag::build(true, true, false, false)
    );
    assert_ne!(
        header.sys_flag & pull_sys_flag::COMMIT_OFFSET,
        0,
        "the pull carries a commit offset"
    );
    assert_eq!(
        header.sys_flag & pull_sys_flag::SUBSCRIPTION,
        0,
        "push consumers do not post the subscription"
    );
}

#[test]
fn heart_beat_frame_from_java() {
    let command = decode_frame_fixture("heart_beat_request.hex");
    assert_eq!(command.request_code(), RequestCode::HeartBeat);
    assert!(
        command.ext_fields.is_empty(),
        "HEART_BEAT has no custom header"
    );
    let data = HeartbeatData::from_json_bytes(&command.body).expect("HeartbeatData");
    assert_eq!(data.client_id, "127.0.0.1@fixture");
    assert_eq!(data.heartbeat_fingerprint, None, "4.9 has no heartbeat V2");
    let mut producers: Vec<&str> = data
        .producer_data_set
        .iter()
        .map(|producer| producer.group_name.as_str())
        .collect();
    producers.sort_unstable();
    assert_eq!(producers, vec!["CLIENT_INNER_PRODUCER", "PG_FIXTURE"]);
    assert_eq!(data.consumer_data_set.len(), 1);
    let consumer = &data.consumer_data_set[0];
    assert_eq!(consumer.group_name, "CG_FIXTURE");
    assert_eq!(consumer.consume_type, ConsumeType::ConsumePassively);
    assert_eq!(consumer.message_model, MessageModel::Clustering);
    assert_eq!(
        consumer.consume_from_where,
        ConsumeFromWhere::ConsumeFromLastOffset
    );
    assert!(!consumer.unit_mode);
    let mut subscriptions = consumer.subscription_data_set.clone();
    subscriptions.sort_by(|a, b| b.topic.cmp(&a.topic));
    assert_eq!(subscriptions.len(), 2);
    let main = &subscriptions[0];
    assert_eq!(main.topic, "TopicFixture");
    assert_eq!(main.sub_string, "TagA || TagB");
    assert_eq!(main.expression_type, "TAG");
    assert_eq!(main.sub_version, 1_700_000_000_000);
    assert!(!main.class_filter_mode);
    let mut tags = main.tags_set.clone();
    tags.sort();
    assert_eq!(tags, vec!["TagA", "TagB"]);
    let mut codes = main.code_set.clone();
    codes.sort_unstable();
    assert_eq!(codes, vec![2_598_919, 2_598_920]);
    // Our builder computes the same codes from the expression.
    let ours = tidemark_protocol::body::SubscriptionData::from_expression(
        "TopicFixture",
        "TagA || TagB",
        1_700_000_000_000,
    );
    assert_eq!(ours.code_set, vec![2_598_919, 2_598_920]);
    let retry = &subscriptions[1];
    assert_eq!(retry.topic, "%RETRY%CG_FIXTURE");
    assert_eq!(retry.sub_string, "*");
    assert_eq!(retry.sub_version, 1_700_000_000_001);
    assert!(retry.tags_set.is_empty() && retry.code_set.is_empty());
}

fn assert_route(route: &TopicRouteData) {
    assert_eq!(route.order_topic_conf, None);
    assert!(route.filter_server_table.is_empty());
    assert_eq!(route.broker_datas.len(), 2);
    let a = &route.broker_datas[0];
    assert_eq!(
        (a.broker_name.as_str(), a.cluster.as_str()),
        ("broker-a", "DefaultCluster")
    );
    assert_eq!(
        a.broker_addrs.get(&0).map(String::as_str),
        Some("127.0.0.1:10911")
    );
    assert_eq!(
        a.broker_addrs.get(&1).map(String::as_str),
        Some("127.0.0.1:10921")
    );
    assert_eq!(a.master_addr(), Some("127.0.0.1:10911"));
    let b = &route.broker_datas[1];
    assert_eq!(b.broker_name, "broker-b");
    assert_eq!(b.broker_addrs.len(), 1);
    assert_eq!(route.queue_datas.len(), 2);
    let qa = &route.queue_datas[0];
    assert_eq!(
        (
            qa.broker_name.as_str(),
            qa.read_queue_nums,
            qa.write_queue_nums,
            qa.perm,
            qa.topic_sys_flag
        ),
        ("broker-a", 4, 4, 6, 0)
    );
    let qb = &route.queue_datas[1];
    assert_eq!(
        (
            qb.broker_name.as_str(),
            qb.read_queue_nums,
            qb.write_queue_nums,
            qb.perm
        ),
        ("broker-b", 2, 2, 6)
    );
}

#[test]
fn topic_route_data_in_both_key_styles_from_java() {
    let fastjson = fixture_bytes("topic_route_data.json");
    let standard = fixture_bytes("topic_route_data_standard.json");
    assert!(
        std::str::from_utf8(&fastjson)
            .expect("text")
            .contains(r#"{0:"127.0.0.1:10911""#),
        "unquoted keys"
    );
    let route = TopicRouteData::from_json_bytes(&fastjson).expect("fastjson style parses");
    assert_route(&route);
    let route_standard = TopicRouteData::from_json_bytes(&standard).expect("standard style parses");
    assert_eq!(route_standard, route);
    assert_eq!(
        String::from_utf8(route.to_json_bytes()).expect("utf8"),
        String::from_utf8(fastjson).expect("utf8")
    );
    assert_eq!(
        String::from_utf8(route.to_json_bytes_with(WriteOptions::STANDARD)).expect("utf8"),
        String::from_utf8(standard).expect("utf8")
    );
}

fn check_stored_message(name: &str, ipv6: bool) {
    let bytes = Bytes::from(fixture_bytes(name));
    let facts = sidecar(name);
    assert_eq!(bytes.len(), number::<usize>(&facts, "record_length"));
    let (record, length) = MessageRecord::decode(
        &bytes,
        0,
        DecodeOptions {
            verify_body_crc: true,
        },
    )
    .expect("valid record");
    assert_eq!(length, bytes.len());
    assert_eq!(record.version, RecordVersion::V1);
    assert_eq!(record.body_crc, number::<u32>(&facts, "body_crc"));
    assert_eq!(record.body_crc, 467_367_933);
    assert_eq!(record.queue_id, 3);
    assert_eq!(record.flag, 7);
    assert_eq!(record.queue_offset, 1234);
    assert_eq!(record.physical_offset, 567_890);
    assert_eq!(record.sys_flag, if ipv6 { 0x30 } else { 0 });
    assert_eq!(record.sys_flag, number::<i32>(&facts, "sys_flag"));
    assert_eq!(record.born_timestamp, 1_700_000_000_123);
    assert_eq!(record.store_timestamp, 1_700_000_000_456);
    let (born, store) = if ipv6 {
        ("[::1]:50001", "[::1]:10911")
    } else {
        ("127.0.0.1:50001", "127.0.0.1:10911")
    };
    assert_eq!(record.born_host, born.parse().expect("literal"));
    assert_eq!(record.store_host, store.parse().expect("literal"));
    assert_eq!(record.reconsume_times, 2);
    assert_eq!(record.prepared_transaction_offset, 0);
    assert_eq!(&record.body[..], b"hello tidemark");
    assert_eq!(record.topic, "TopicFixture");
    assert_eq!(
        record.properties.iter().collect::<Vec<_>>(),
        vec![
            ("color", "blue"),
            ("KEYS", "k1 k2"),
            ("UNIQ_KEY", "7F00000100002A9F0000000000000001"),
            ("TAGS", "TagA")
        ]
    );
    // Field offsets from the sidecar point at the values we decoded.
    let store_at = number::<usize>(&facts, "store_timestamp_offset");
    assert_eq!(
        i64::from_be_bytes(bytes[store_at..store_at + 8].try_into().expect("8 bytes")),
        record.store_timestamp
    );
    let properties_at = number::<usize>(&facts, "properties_offset");
    assert_eq!(
        &bytes[properties_at..],
        record.properties.encode().as_bytes()
    );
    let id = encode_offset_msg_id(record.store_host, record.physical_offset);
    if !ipv6 {
        assert_eq!(id, facts["decoded_offset_msg_id"]);
    }
    assert_eq!(
        decode_offset_msg_id(&id).expect("valid id"),
        (record.store_host, 567_890)
    );
    let reencoded = record.encode_to_bytes().expect("encodes");
    assert!(
        reencoded == bytes,
        "re-encoding {name} must reproduce Java's record\n  ours: {}\n  java: {}",
        hex::encode_lower(&reencoded),
        hex::encode_lower(&bytes)
    );
}

#[test]
fn stored_message_from_java_encoder() {
    check_stored_message("stored_message.hex", false);
}

#[test]
fn stored_message_with_ipv6_hosts_from_java_encoder() {
    check_stored_message("stored_message_ipv6.hex", true);
}

#[test]
fn consumer_offset_file_from_java_broker() {
    let pretty = fixture_bytes("consumer_offset.json");
    let compact = fixture_bytes("consumer_offset_compact.json");
    let wrapper = ConsumerOffsetWrapper::from_json_bytes(&pretty).expect("pretty file parses");
    assert_eq!(
        ConsumerOffsetWrapper::from_json_bytes(&compact).expect("compact parses"),
        wrapper
    );
    assert_eq!(wrapper.data_version, None);
    let expected: BTreeMap<String, BTreeMap<i32, i64>> = [
        (
            "TopicFixture@CG_FIXTURE".to_owned(),
            [(0, 1200), (1, 1187)].into_iter().collect(),
        ),
        (
            "%RETRY%CG_FIXTURE@CG_FIXTURE".to_owned(),
            [(0, 3)].into_iter().collect(),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(wrapper.offset_table, expected);
    assert_eq!(
        tidemark_protocol::body::split_topic_at_group("TopicFixture@CG_FIXTURE"),
        Some(("TopicFixture", "CG_FIXTURE"))
    );
    // Our pretty writer lays the file out exactly as fastjson does, tabs and all.
    assert_eq!(
        String::from_utf8(wrapper.to_json_bytes_with(WriteOptions::PRETTY)).expect("utf8"),
        String::from_utf8(pretty).expect("utf8")
    );
    assert_eq!(
        String::from_utf8(wrapper.to_json_bytes()).expect("utf8"),
        String::from_utf8(compact).expect("utf8")
    );
}

#[test]
fn consume_stats_with_message_queue_keys_from_java() {
    let bytes = fixture_bytes("consume_stats.json");
    let stats = ConsumeStats::from_json_bytes(&bytes).expect("object keys parse");
    assert_eq!(stats.consume_tps, 1.5);
    let queue0 = MessageQueue::new("TopicFixture", "broker-a", 0);
    let queue1 = MessageQueue::new("TopicFixture", "broker-a", 1);
    let first = &stats.offset_table[&queue0];
    assert_eq!(
        (
            first.broker_offset,
            first.consumer_offset,
            first.last_timestamp
        ),
        (100, 90, 1_700_000_000_999)
    );
    let second = &stats.offset_table[&queue1];
    assert_eq!(
        (
            second.broker_offset,
            second.consumer_offset,
            second.last_timestamp
        ),
        (50, 50, 0)
    );
    assert_eq!(
        String::from_utf8(stats.to_json_bytes()).expect("utf8"),
        String::from_utf8(bytes).expect("utf8")
    );
}

#[test]
fn broadcasting_offsets_file_from_java_client() {
    let bytes = fixture_bytes("local_offsets.json");
    let offsets = MessageQueueOffsets::from_json_bytes(&bytes).expect("pretty object keys parse");
    assert_eq!(offsets.offset_table.len(), 2);
    assert_eq!(
        offsets.offset_table[&MessageQueue::new("TopicFixture", "broker-a", 0)],
        42
    );
    assert_eq!(
        offsets.offset_table[&MessageQueue::new("TopicFixture", "broker-a", 1)],
        17
    );
    assert_eq!(
        String::from_utf8(offsets.to_json_bytes_with(WriteOptions::PRETTY)).expect("utf8"),
        String::from_utf8(bytes).expect("utf8")
    );
}
