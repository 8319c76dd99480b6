//! What a broken or hostile client can put on the wire — bytes that are no protobuf message,
//! wrong types, missing fields — gets an error status, and the server keeps serving.

use std::time::Duration;

use crate::common::*;
use tidemark_grpc::proto::messaging_service_client::MessagingServiceClient;
use tidemark_grpc::proto::*;
use tonic::transport::Channel;

/// Sends raw bytes as a gRPC message and reads the answer as raw bytes: what a broken or hostile
/// client can put on the wire.
#[derive(Debug, Clone, Default)]
struct RawCodec;

#[derive(Debug)]
struct RawCoder;

impl tonic::codec::Encoder for RawCoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Self::Error> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, Self::Error> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCoder;
    type Decoder = RawCoder;

    fn encoder(&mut self) -> RawCoder {
        RawCoder
    }

    fn decoder(&mut self) -> RawCoder {
        RawCoder
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_calls_get_an_error_status_and_the_server_keeps_serving() {
    let server = start().await;
    let channel = Channel::from_shared(format!("http://{}", server.grpc))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut raw = tonic::client::Grpc::new(channel.clone());
    for (path, bytes) in [
        // Not protobuf at all.
        (
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            vec![0xff, 0xff, 0xff, 0xff, 0x0f],
        ),
        // A field claiming more bytes than there are.
        (
            "/apache.rocketmq.v2.MessagingService/QueryRoute",
            vec![0x0a, 0x7f, 0x01],
        ),
    ] {
        raw.ready().await.expect("ready");
        let answer = raw
            .unary(
                with_client_id(bytes, "fuzzer"),
                http::uri::PathAndQuery::from_static(path),
                RawCodec,
            )
            .await;
        let status = answer.expect_err("a decode error status");
        assert!(
            matches!(
                status.code(),
                tonic::Code::Internal | tonic::Code::InvalidArgument
            ),
            "{path}: {status:?}"
        );
    }
    // Unknown enum values are read as unknown, not refused by the transport.
    let mut client = MessagingServiceClient::new(channel);
    let route = client
        .query_route(with_client_id(
            QueryRouteRequest {
                topic: Some(resource("StillServing")),
                endpoints: Some(Endpoints {
                    scheme: 99,
                    addresses: vec![Address {
                        host: "127.0.0.1".into(),
                        port: 1,
                    }],
                }),
            },
            "fuzzer",
        ))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(code(&route.status), Code::Ok);
    let heartbeat = client
        .heartbeat(with_client_id(
            HeartbeatRequest {
                group: None,
                client_type: 77,
            },
            "fuzzer",
        ))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(code(&heartbeat.status), Code::Ok);
    // Telemetry settings that are neither a producer's nor a consumer's: the stream fails with
    // a gRPC status, the next call is served.
    let (sender, receiver) = tokio::sync::mpsc::channel(2);
    sender
        .send(TelemetryCommand {
            status: None,
            command: Some(telemetry_command::Command::Settings(Settings::default())),
        })
        .await
        .expect("queued");
    let mut telemetry = client
        .telemetry(with_client_id(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
            "fuzzer",
        ))
        .await
        .expect("stream opened")
        .into_inner();
    let failure = tokio::time::timeout(Duration::from_secs(5), telemetry.message())
        .await
        .expect("answered in time")
        .expect_err("an error status");
    assert_eq!(failure.code(), tonic::Code::InvalidArgument);
    drop(sender);
    let again = client
        .heartbeat(with_client_id(
            HeartbeatRequest {
                group: None,
                client_type: ClientType::Producer as i32,
            },
            "fuzzer",
        ))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(code(&again.status), Code::Ok);
}
