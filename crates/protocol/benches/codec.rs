//! Frame encode/decode and message decode throughput. Run with `cargo bench -p tidemark-protocol`.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tidemark_protocol::headers::PullMessageRequestHeader;
use tidemark_protocol::message::{decode_records, DecodeOptions, MessageRecord, Properties};
use tidemark_protocol::{
    frame, RemotingCommand, RequestCode, SerializeType, FRAME_SIZE_MAX_BYTES_DEFAULT,
};

fn pull_request(serialize_type: SerializeType) -> RemotingCommand {
    let header = PullMessageRequestHeader {
        consumer_group: "benchmark_consumer_group".into(),
        topic: "BenchmarkTopic".into(),
        queue_id: 3,
        queue_offset: 123_456,
        max_msg_nums: 32,
        sys_flag: 3,
        commit_offset: 123_400,
        suspend_timeout_millis: 15_000,
        subscription: None,
        sub_version: 1_700_000_000_000,
        expression_type: Some("TAG".into()),
        max_msg_bytes: None,
        broker_name: Some("broker-a".into()),
    };
    RemotingCommand::request_with_header(RequestCode::PullMessage, &header)
        .with_opaque(42)
        .with_serialize_type(serialize_type)
}

fn record(body_len: usize, queue_offset: i64) -> MessageRecord {
    let mut properties = Properties::new();
    properties.insert("TAGS", "TagA");
    properties.insert("UNIQ_KEY", "7F0000012A9F00000001000000050000");
    properties.insert("WAIT", "true");
    MessageRecord {
        queue_offset,
        body: Bytes::from(vec![b'x'; body_len]),
        topic: "BenchmarkTopic".into(),
        properties,
        born_host: "127.0.0.1:50000".parse().expect("literal"),
        store_host: "127.0.0.1:10911".parse().expect("literal"),
        ..MessageRecord::default()
    }
}

fn frames(c: &mut Criterion) {
    for (name, serialize_type) in [
        ("json", SerializeType::Json),
        ("rocketmq", SerializeType::RocketMq),
    ] {
        let command = pull_request(serialize_type);
        let encoded = frame::encode_to_bytes(&command).expect("encodes");
        let mut group = c.benchmark_group(format!("frame_{name}"));
        group.throughput(Throughput::Bytes(encoded.len() as u64));
        group.bench_function("encode", |b| {
            let mut out = BytesMut::with_capacity(1024);
            b.iter(|| {
                out.clear();
                frame::encode(black_box(&command), &mut out).expect("encodes");
            })
        });
        group.bench_function("decode", |b| {
            b.iter(|| {
                let mut buffer = BytesMut::from(&encoded[..]);
                black_box(
                    frame::decode(&mut buffer, FRAME_SIZE_MAX_BYTES_DEFAULT).expect("decodes"),
                )
            })
        });
        group.finish();
    }
}

fn messages(c: &mut Criterion) {
    for body_len in [128usize, 1024] {
        let mut body = BytesMut::new();
        for offset in 0..32 {
            record(body_len, offset).encode(&mut body).expect("encodes");
        }
        let body = body.freeze();
        let mut group = c.benchmark_group(format!("message_decode_{body_len}B"));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function("pull_body_of_32", |b| {
            b.iter(|| {
                black_box(
                    decode_records(black_box(&body), DecodeOptions::default()).expect("decodes"),
                )
            })
        });
        group.bench_function("pull_body_of_32_with_crc", |b| {
            b.iter(|| {
                black_box(
                    decode_records(
                        &body,
                        DecodeOptions {
                            verify_body_crc: true,
                        },
                    )
                    .expect("decodes"),
                )
            })
        });
        group.finish();
    }
}

criterion_group!(benches, frames, messages);
criterion_main!(benches);
