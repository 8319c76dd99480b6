//! A 5.x client's conversation over loopback with tonic's own client: the settings handshake a
//! 5.x client waits for, route, send, receive with a receipt, redelivery after the invisibility
//! with its attempt counted, ack, change of invisibility, offsets, and the answers to bad calls
//! within that flow; then, each on its own server, garbage on the port, a FIFO topic's route
//! and an oversize body.

use std::time::Duration;

use crate::common::*;
use tidemark_grpc::proto::*;
use tonic::Request;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sends_receives_and_acknowledges_over_grpc() {
    let server = start().await;
    let mut client = client(&server).await;
    let topic = "GrpcTopic";
    let group = "grpc_group";

    // The settings handshake: the answer completes the client's settings.
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    sender
        .send(TelemetryCommand {
            status: None,
            command: Some(telemetry_command::Command::Settings(consumer_settings(
                group, topic,
            ))),
        })
        .await
        .expect("queued");
    let mut telemetry = client
        .telemetry(with_client_id(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
            "consumer-1",
        ))
        .await
        .expect("telemetry")
        .into_inner();
    let reply = tokio::time::timeout(Duration::from_secs(5), telemetry.message())
        .await
        .expect("settings answered in time")
        .expect("frame")
        .expect("a command");
    let Some(telemetry_command::Command::Settings(settings)) = reply.command else {
        panic!("not settings: {reply:?}");
    };
    let Some(settings::PubSub::Subscription(subscription)) = settings.pub_sub else {
        panic!("a consumer gets subscription settings");
    };
    assert_eq!(subscription.receive_batch_size, Some(32));
    assert!(settings
        .backoff_policy
        .is_some_and(|policy| policy.max_attempts == 17));

    // Route: every queue at this gateway, read-write, every message type.
    let route = client
        .query_route(with_client_id(
            QueryRouteRequest {
                topic: Some(resource(topic)),
                endpoints: None,
            },
            "producer-1",
        ))
        .await
        .expect("route")
        .into_inner();
    assert_eq!(code(&route.status), Code::Ok);
    assert!(!route.message_queues.is_empty());
    let queue = &route.message_queues[0];
    assert_eq!(queue.permission, Permission::ReadWrite as i32);
    assert_eq!(queue.accept_message_types.len(), 4);
    let port: i32 = server
        .grpc
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    assert_eq!(
        queue
            .broker
            .as_ref()
            .and_then(|b| b.endpoints.as_ref())
            .map(|e| e.addresses[0].port),
        Some(port)
    );

    // Send three; one with a reserved property is refused on its own.
    let mut reserved = message(topic, "id-x", "bad", "TagA");
    reserved
        .user_properties
        .insert("UNIQ_KEY".into(), "spoof".into());
    let sent = client
        .send_message(with_client_id(
            SendMessageRequest {
                messages: vec![
                    message(topic, "id-1", "one", "TagA"),
                    message(topic, "id-2", "two", "TagA"),
                    reserved,
                    message(topic, "id-3", "three", "TagA"),
                ],
            },
            "producer-1",
        ))
        .await
        .expect("send")
        .into_inner();
    assert_eq!(code(&sent.status), Code::MultipleResults);
    let codes: Vec<Code> = sent.entries.iter().map(|e| code(&e.status)).collect();
    assert_eq!(
        codes,
        vec![
            Code::Ok,
            Code::Ok,
            Code::IllegalMessagePropertyKey,
            Code::Ok
        ]
    );
    assert_eq!(sent.entries[1].message_id, "id-2");

    // Receive all three with receipts; body digest, attempt 1, user property kept.
    let (status, first) = receive(&mut client, group, topic, 2_000).await;
    assert_eq!(status, Code::Ok);
    let mut bodies: Vec<String> = first
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    bodies.sort();
    assert_eq!(bodies, vec!["one", "three", "two"]);
    for m in &first {
        let system = m.system_properties.as_ref().expect("system properties");
        assert_eq!(system.delivery_attempt, Some(1));
        assert!(system.receipt_handle.is_some());
        assert_eq!(
            m.user_properties.get("color").map(String::as_str),
            Some("blue")
        );
        // MD5 in upper-case hex, as Apache's proxy sends it (every 5.x client checks MD5).
        let md5_hex: String = {
            use md5::Digest as _;
            md5::Md5::digest(&m.body)
                .iter()
                .map(|byte| format!("{byte:02X}"))
                .collect()
        };
        let digest = system.body_digest.as_ref().expect("a body digest");
        assert_eq!(digest.r#type, DigestType::Md5 as i32);
        assert_eq!(digest.checksum, md5_hex);
        assert_eq!(system.tag.as_deref(), Some("TagA"));
    }
    // Acknowledge "one"; extend "two"; leave "three" to come back.
    let one = first.iter().find(|m| m.body == b"one").expect("one");
    let two = first.iter().find(|m| m.body == b"two").expect("two");
    let acked = ack(
        &mut client,
        group,
        topic,
        vec![AckMessageEntry {
            message_id: "id-1".into(),
            receipt_handle: handle(one),
            lite_topic: None,
        }],
        "consumer-1",
    )
    .await;
    assert_eq!(code(&acked.status), Code::Ok);
    let changed = client
        .change_invisible_duration(with_client_id(
            ChangeInvisibleDurationRequest {
                group: Some(resource(group)),
                topic: Some(resource(topic)),
                receipt_handle: handle(two),
                invisible_duration: Some(prost_types::Duration {
                    seconds: 60,
                    nanos: 0,
                }),
                message_id: "id-2".into(),
                lite_topic: None,
                suspend: None,
            },
            "consumer-1",
        ))
        .await
        .expect("change")
        .into_inner();
    assert_eq!(code(&changed.status), Code::Ok);
    assert_ne!(changed.receipt_handle, handle(two), "a new handle");
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let (_, again) = receive(&mut client, group, topic, 2_000).await;
    let again_bodies: Vec<String> = again
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(
        again_bodies,
        vec!["three"],
        "only the unacknowledged, unextended one"
    );
    assert_eq!(
        again[0]
            .system_properties
            .as_ref()
            .and_then(|s| s.delivery_attempt),
        Some(2)
    );
    // An expired handle is refused as RocketMQ refuses it.
    let expired = ack(
        &mut client,
        group,
        topic,
        vec![AckMessageEntry {
            message_id: "id-3".into(),
            receipt_handle: handle(first.iter().find(|m| m.body == b"three").expect("three")),
            lite_topic: None,
        }],
        "consumer-1",
    )
    .await;
    assert_eq!(code(&expired.status), Code::InvalidReceiptHandle);

    // Without a client id, a clear status.
    let anonymous = client
        .query_route(Request::new(QueryRouteRequest {
            topic: Some(resource(topic)),
            endpoints: None,
        }))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(code(&anonymous.status), Code::ClientIdRequired);

    // Offsets: what the group committed, and the queue's ends.
    let end = client
        .query_offset(with_client_id(
            QueryOffsetRequest {
                message_queue: Some(queue.clone()),
                query_offset_policy: QueryOffsetPolicy::End as i32,
                timestamp: None,
            },
            "consumer-1",
        ))
        .await
        .expect("query offset")
        .into_inner();
    assert_eq!(code(&end.status), Code::Ok);
    let updated = client
        .update_offset(with_client_id(
            UpdateOffsetRequest {
                group: Some(resource("offset_group")),
                message_queue: Some(queue.clone()),
                offset: end.offset,
            },
            "consumer-1",
        ))
        .await
        .expect("update offset")
        .into_inner();
    assert_eq!(code(&updated.status), Code::Ok);
    let got = client
        .get_offset(with_client_id(
            GetOffsetRequest {
                group: Some(resource("offset_group")),
                message_queue: Some(queue.clone()),
            },
            "consumer-1",
        ))
        .await
        .expect("get offset")
        .into_inner();
    assert_eq!((code(&got.status), got.offset), (Code::Ok, end.offset));
    // PullMessage reads a queue by offset: its messages, then where to go on.
    let mut pulled = Vec::new();
    let mut next_offset = None;
    for queue in route.message_queues.iter().filter(|q| q.id < 4) {
        let mut stream = client
            .pull_message(with_client_id(
                PullMessageRequest {
                    group: Some(resource("puller")),
                    message_queue: Some(queue.clone()),
                    offset: 0,
                    batch_size: 32,
                    filter_expression: None,
                    long_polling_timeout: None,
                },
                "consumer-1",
            ))
            .await
            .expect("pull")
            .into_inner();
        while let Some(frame) = stream.message().await.expect("frame") {
            match frame.content {
                Some(pull_message_response::Content::Message(m)) => pulled.push(m.body),
                Some(pull_message_response::Content::NextOffset(n)) if n > 0 => {
                    next_offset = Some(n)
                }
                _ => {}
            }
        }
    }
    assert_eq!(pulled.len(), 3, "the three stored messages");
    assert!(next_offset.is_some());
    drop(sender);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_port_closes_that_connection_and_the_server_keeps_serving() {
    let server = start().await;
    // Garbage on the port: that connection is dropped, the server keeps serving.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut garbage = tokio::net::TcpStream::connect(&server.grpc)
            .await
            .expect("connect");
        garbage
            .write_all(b"\x16\x03\x01\x00\x05hello")
            .await
            .expect("write");
        let mut sink = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), garbage.read_to_end(&mut sink)).await;
        assert!(read.is_ok(), "a bad handshake is closed, not left hanging");
        let mut plain = tokio::net::TcpStream::connect(&server.grpc)
            .await
            .expect("connect");
        plain
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .await
            .expect("write");
        let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut sink)).await;
    }
    let mut client = client(&server).await;
    let route = client
        .query_route(with_client_id(
            QueryRouteRequest {
                topic: Some(resource("GrpcTopic")),
                endpoints: None,
            },
            "producer-1",
        ))
        .await
        .expect("route after the garbage")
        .into_inner();
    assert_eq!(code(&route.status), Code::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_topic_routes_as_fifo_only_and_refuses_a_normal_message() {
    let server = start().await;
    let mut client = client(&server).await;
    // A FIFO topic (RocketMQ 5's message.type attribute, set over remoting) routes as FIFO only
    // and refuses a normal message as the proxy does.
    let remoting = tidemark_remoting::RemotingClient::new(Default::default(), None);
    let create = tidemark_protocol::RemotingCommand::request_with_header(
        tidemark_protocol::RequestCode::UpdateAndCreateTopic,
        &tidemark_protocol::headers::CreateTopicRequestHeader {
            topic: "FifoTopic".into(),
            default_topic: "TBW102".into(),
            read_queue_nums: 2,
            write_queue_nums: 2,
            perm: 6,
            topic_filter_type: "SINGLE_TAG".into(),
            topic_sys_flag: None,
            order: false,
            attributes: Some("+message.type=FIFO".into()),
            force: None,
        },
    );
    let created = remoting
        .invoke(&server.broker, create, Duration::from_secs(5))
        .await
        .expect("created");
    assert_eq!(
        created.response_code(),
        tidemark_protocol::ResponseCode::Success
    );
    let fifo_route = client
        .query_route(with_client_id(
            QueryRouteRequest {
                topic: Some(resource("FifoTopic")),
                endpoints: None,
            },
            "producer-1",
        ))
        .await
        .expect("route")
        .into_inner();
    assert_eq!(
        fifo_route.message_queues[0].accept_message_types,
        vec![MessageType::Fifo as i32]
    );
    let wrong = client
        .send_message(with_client_id(
            SendMessageRequest {
                messages: vec![message("FifoTopic", "id-9", "normal", "TagA")],
            },
            "producer-1",
        ))
        .await
        .expect("send")
        .into_inner();
    assert_eq!(code(&wrong.status), Code::MessagePropertyConflictWithType);
    remoting.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_body_gets_the_brokers_answer_not_a_transport_error() {
    let server = start().await;
    let mut client = client(&server).await;
    let topic = "GrpcTopic";
    let mut huge = message(topic, "id-big", "", "TagA");
    huge.body = vec![b'x'; 4 * 1024 * 1024 + 1];
    let too_big = client
        .send_message(with_client_id(
            SendMessageRequest {
                messages: vec![huge],
            },
            "producer-1",
        ))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(code(&too_big.status), Code::MessageBodyTooLarge);
}
