//! The gRPC port at the HTTP/2 level, with a bare h2 client: what the connection announces,
//! how a request split across frames, an unknown method, an oversize request and a receive the
//! client abandons are answered, and that the connection keeps serving after each.

use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use h2::client::{Connection, SendRequest};
use prost::Message;
use tidemark_grpc::proto::*;
use tokio::net::TcpStream;

const SERVICE: &str = "/apache.rocketmq.v2.MessagingService/";
const WAIT: Duration = Duration::from_secs(10);

async fn connect(server: &Server) -> (SendRequest<Bytes>, Connection<TcpStream, Bytes>) {
    // The server only answers once its listener is up; tonic's client retries for us.
    drop(client(server).await);
    let tcp = TcpStream::connect(&server.grpc).await.expect("connect");
    h2::client::handshake(tcp).await.expect("HTTP/2")
}

fn request(server: &Server, method: &str) -> http::Request<()> {
    http::Request::post(format!("http://{}{SERVICE}{method}", server.grpc))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-mq-client-id", "bare-h2")
        .body(())
        .expect("request")
}

fn framed(message: &impl Message) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut bytes = vec![0];
    bytes.extend_from_slice(&u32::try_from(body.len()).expect("small").to_be_bytes());
    bytes.extend_from_slice(&body);
    bytes
}

/// A call's whole answer: headers, the messages' bytes and how many DATA frames carried them,
/// trailers (`None` for trailers-only).
struct Answer {
    head: http::response::Parts,
    data: Vec<u8>,
    data_frames: usize,
    trailers: Option<http::HeaderMap>,
}

impl Answer {
    /// grpc-status, from the trailers or from the only headers.
    fn grpc_status(&self) -> String {
        let headers = self.trailers.as_ref().unwrap_or(&self.head.headers);
        headers
            .get("grpc-status")
            .map(|value| value.to_str().expect("ascii").to_owned())
            .unwrap_or_default()
    }
}

/// Sends `chunks` as the request's DATA frames, the last one ending the stream, and reads the
/// answer while driving the connection.
async fn call(
    calls: &mut SendRequest<Bytes>,
    connection: &mut Connection<TcpStream, Bytes>,
    request: http::Request<()>,
    chunks: Vec<Vec<u8>>,
) -> Answer {
    let (answer, mut body) = calls.send_request(request, false).expect("sent");
    let last = chunks.len().saturating_sub(1);
    for (index, chunk) in chunks.into_iter().enumerate() {
        body.send_data(Bytes::from(chunk), index == last)
            .expect("body sent");
    }
    let read = async {
        let (head, mut body) = answer.await.expect("answered").into_parts();
        let (mut data, mut data_frames) = (Vec::new(), 0);
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("answer data");
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
            data_frames += 1;
        }
        let trailers = body.trailers().await.expect("trailers");
        Answer {
            head,
            data,
            data_frames,
            trailers,
        }
    };
    tokio::time::timeout(WAIT, async {
        tokio::select! {
            answer = read => answer,
            ended = &mut *connection => panic!("connection ended first: {ended:?}"),
        }
    })
    .await
    .expect("answered in time")
}

async fn heartbeat(
    server: &Server,
    calls: &mut SendRequest<Bytes>,
    connection: &mut Connection<TcpStream, Bytes>,
) -> Answer {
    let message = HeartbeatRequest {
        group: None,
        client_type: ClientType::Producer as i32,
    };
    call(
        calls,
        connection,
        request(server, "Heartbeat"),
        vec![framed(&message)],
    )
    .await
}

fn decode<M: Message + Default>(data: &[u8]) -> M {
    let mut messages = decode_all::<M>(data);
    assert_eq!(messages.len(), 1, "one message");
    messages.remove(0)
}

/// Every gRPC-framed message in `data`, in order.
fn decode_all<M: Message + Default>(mut data: &[u8]) -> Vec<M> {
    let mut messages = Vec::new();
    while !data.is_empty() {
        assert_eq!(data[0], 0, "uncompressed");
        let length = u32::from_be_bytes(data[1..5].try_into().expect("prefix")) as usize;
        messages.push(M::decode(&data[5..5 + length]).expect("protobuf"));
        data = &data[5 + length..];
    }
    messages
}

/// A 5.x client puts every consumer's long-polling receives and its acks on one connection, so
/// the port must not cap concurrent streams (Apache's proxy does not); a cap would hold acks
/// back behind receives that wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_may_open_any_number_of_concurrent_calls() {
    let server = start().await;
    let (mut calls, mut connection) = connect(&server).await;
    let answer = heartbeat(&server, &mut calls, &mut connection).await;
    assert_eq!(answer.head.status, http::StatusCode::OK);
    assert_eq!(answer.grpc_status(), "0");
    let response: HeartbeatResponse = decode(&answer.data);
    assert_eq!(code(&response.status), Code::Ok);
    // The server's SETTINGS came before its answer; with no limit in them the client may open
    // as many streams as it likes.
    assert_eq!(connection.max_concurrent_send_streams(), usize::MAX);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_requests_get_grpc_statuses_and_the_connection_keeps_serving() {
    let server = start().await;
    let (mut calls, mut connection) = connect(&server).await;

    // A request cut into one-byte DATA frames is put back together.
    let route = QueryRouteRequest {
        topic: Some(resource("SplitTopic")),
        endpoints: None,
    };
    let bytes = framed(&route);
    let chunks = bytes.iter().map(|byte| vec![*byte]).collect();
    let answer = call(
        &mut calls,
        &mut connection,
        request(&server, "QueryRoute"),
        chunks,
    )
    .await;
    assert_eq!(answer.grpc_status(), "0");
    let response: QueryRouteResponse = decode(&answer.data);
    assert!(response.status.is_some(), "an application status");

    // A method the service does not have: UNIMPLEMENTED, in the only headers.
    let answer = call(
        &mut calls,
        &mut connection,
        request(&server, "NoSuchMethod"),
        vec![framed(&route)],
    )
    .await;
    assert!(answer.trailers.is_none(), "trailers-only");
    assert_eq!(answer.grpc_status(), "12");

    // A message prefix promising more than the port accepts: OUT_OF_RANGE before the rest is
    // read.
    let mut oversize = vec![0];
    oversize.extend_from_slice(&u32::MAX.to_be_bytes());
    oversize.extend_from_slice(&[0; 16]);
    let answer = call(
        &mut calls,
        &mut connection,
        request(&server, "SendMessage"),
        vec![oversize],
    )
    .await;
    assert_eq!(answer.grpc_status(), "11");

    // A compressed message: this port announces no compression.
    let mut compressed = framed(&route);
    compressed[0] = 1;
    let answer = call(
        &mut calls,
        &mut connection,
        request(&server, "QueryRoute"),
        vec![compressed],
    )
    .await;
    assert_eq!(answer.grpc_status(), "12");

    // No message at all.
    let answer = call(
        &mut calls,
        &mut connection,
        request(&server, "Heartbeat"),
        vec![Vec::new()],
    )
    .await;
    assert_eq!(answer.grpc_status(), "13");

    let answer = heartbeat(&server, &mut calls, &mut connection).await;
    assert_eq!(answer.grpc_status(), "0");
}

async fn send_one(server: &Server, id: &str) {
    let mut client = client(server).await;
    let sent = client
        .send_message(with_client_id(
            SendMessageRequest {
                messages: vec![message(RESET_TOPIC, id, id, "TagA")],
            },
            "producer-1",
        ))
        .await
        .expect("send")
        .into_inner();
    assert_eq!(code(&sent.status), Code::Ok);
}

/// A receive of up to `batch` messages of every tag, invisible for a minute, long-polling for
/// `long_poll_s` seconds.
fn receive_request(
    group: &str,
    topic: &str,
    batch: i32,
    long_poll_s: i64,
) -> ReceiveMessageRequest {
    ReceiveMessageRequest {
        group: Some(resource(group)),
        message_queue: Some(MessageQueue {
            topic: Some(resource(topic)),
            id: -1,
            ..MessageQueue::default()
        }),
        filter_expression: Some(FilterExpression {
            r#type: FilterType::Tag as i32,
            expression: "*".into(),
        }),
        batch_size: batch,
        invisible_duration: Some(prost_types::Duration {
            seconds: 60,
            nanos: 0,
        }),
        auto_renew: false,
        long_polling_timeout: Some(prost_types::Duration {
            seconds: long_poll_s,
            nanos: 0,
        }),
        attempt_id: None,
    }
}

const RESET_TOPIC: &str = "ResetTopic";
const RESET_GROUP: &str = "reset_group";

/// A client that gives up on a long-polling receive resets its stream: the call ends there (its
/// future is dropped, so it pops nothing later) and the connection goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_the_client_resets_ends_and_the_connection_goes_on() {
    let server = start().await;
    // The topic exists and the group has nothing visible left: a receive now waits.
    send_one(&server, "before-reset").await;
    let mut tonic_client = client(&server).await;
    let (status, messages) = receive(&mut tonic_client, RESET_GROUP, RESET_TOPIC, 60_000).await;
    assert_eq!((status, messages.len()), (Code::Ok, 1));

    let (mut calls, mut connection) = connect(&server).await;
    let receive_request = receive_request(RESET_GROUP, RESET_TOPIC, 4, 20);
    let mut head = request(&server, "ReceiveMessage");
    let headers = head.headers_mut();
    headers.insert("grpc-timeout", "25S".parse().expect("header"));
    headers.insert("x-mq-client-id", "consumer-1".parse().expect("header"));
    let (answer, mut body) = calls.send_request(head, false).expect("sent");
    body.send_data(Bytes::from(framed(&receive_request)), true)
        .expect("body sent");
    // The receive waits inside its call (its answer, headers and all, comes when it ends).
    let waited = tokio::time::timeout(Duration::from_millis(500), async {
        tokio::select! {
            answer = answer => answer.map(|answer| answer.status()),
            ended = &mut connection => panic!("connection ended first: {ended:?}"),
        }
    })
    .await;
    assert!(waited.is_err(), "the receive was still polling: {waited:?}");
    // Give up on it, and let the connection carry the reset.
    body.send_reset(h2::Reason::CANCEL);
    let answer = heartbeat(&server, &mut calls, &mut connection).await;
    assert_eq!(answer.grpc_status(), "0");

    // A message sent now goes to the next receive, not to the abandoned one.
    send_one(&server, "after-reset").await;
    let (status, messages) = receive(&mut tonic_client, RESET_GROUP, RESET_TOPIC, 60_000).await;
    assert_eq!(status, Code::Ok);
    let bodies: Vec<&[u8]> = messages.iter().map(|message| &message.body[..]).collect();
    assert_eq!(bodies, [&b"after-reset"[..]]);
}

const BATCH_TOPIC: &str = "BatchTopic";

/// A received batch leaves in one DATA frame: the messages a receive has ready are joined, as
/// h2 writes each DATA frame of 256 bytes or more with a write of its own (a batch of 32 took 32
/// writes, and receive+ack cost a fifth more CPU per message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_received_batch_is_one_data_frame() {
    let server = start().await;
    let mut client = client(&server).await;
    let body = "b".repeat(400);
    for id in 0..8 {
        let sent = client
            .send_message(with_client_id(
                SendMessageRequest {
                    messages: vec![message(BATCH_TOPIC, &format!("batch-{id}"), &body, "TagA")],
                },
                "producer-1",
            ))
            .await
            .expect("send")
            .into_inner();
        assert_eq!(code(&sent.status), Code::Ok);
    }
    let receive_request = receive_request("batch_group", BATCH_TOPIC, 8, 5);
    let (mut calls, mut connection) = connect(&server).await;
    let mut head = request(&server, "ReceiveMessage");
    head.headers_mut()
        .insert("x-mq-client-id", "consumer-1".parse().expect("header"));
    let answer = call(
        &mut calls,
        &mut connection,
        head,
        vec![framed(&receive_request)],
    )
    .await;
    assert_eq!(answer.grpc_status(), "0");
    let responses = decode_all::<ReceiveMessageResponse>(&answer.data);
    let bodies: Vec<usize> = responses
        .iter()
        .filter_map(|response| match &response.content {
            Some(receive_message_response::Content::Message(message)) => Some(message.body.len()),
            _ => None,
        })
        .collect();
    assert_eq!(bodies, [400; 8], "all eight, in full");
    assert_eq!(
        answer.data_frames,
        1,
        "{} responses in {} DATA frames",
        responses.len(),
        answer.data_frames
    );
}
