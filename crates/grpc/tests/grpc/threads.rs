//! The gRPC port on threads of its own (`serve_on_threads`, what `tidemark dev` and `tidemark
//! broker` run): connections handed to different threads share one broker, and stopping ends
//! every thread.

use std::num::NonZeroUsize;
use std::time::Duration;

use crate::common::*;
use tidemark_grpc::proto::messaging_service_client::MessagingServiceClient;
use tidemark_grpc::proto::*;

/// Threads of this process named as the gRPC port's serving threads.
fn serving_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .is_ok_and(|name| name.starts_with("tidemark-grpc-"))
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_on_different_serving_threads_share_one_broker() {
    let (namesrv, _namesrv_stop) = start_namesrv().await;
    let server = start_broker(&namesrv, "broker-a", false).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("bound");
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let threads = NonZeroUsize::new(3).expect("non-zero");
    let serving = tokio::spawn(
        tidemark_grpc::serve_on_threads(listener, server.state.clone(), threads, || {}, stopping)
            .expect("serving threads start"),
    );
    // A thread names itself once it runs.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while serving_threads() < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(serving_threads(), 3);

    // Three connections, handed round-robin to the three threads: one sends, one receives,
    // one acknowledges what the other received.
    let mut clients = Vec::new();
    for _ in 0..3 {
        let client = MessagingServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        clients.push(client);
    }
    let (topic, group) = ("ThreadsTopic", "threads_group");
    let _producer = open_telemetry(&mut clients[0], "producer-1", producer_settings(topic)).await;
    let _consumer = open_telemetry(
        &mut clients[1],
        "consumer-1",
        consumer_settings(group, topic),
    )
    .await;
    let sent = clients[0]
        .send_message(with_client_id(
            SendMessageRequest {
                messages: (0..6)
                    .map(|n| message(topic, &format!("id-{n}"), &format!("body-{n}"), "TagA"))
                    .collect(),
            },
            "producer-1",
        ))
        .await
        .expect("send")
        .into_inner();
    assert!(
        sent.entries
            .iter()
            .all(|entry| code(&entry.status) == Code::Ok),
        "every send accepted: {sent:?}"
    );

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut received = Vec::new();
    while received.len() < 6 && tokio::time::Instant::now() < deadline {
        let (_, batch) = receive(&mut clients[1], group, topic, 30_000).await;
        received.extend(batch);
    }
    let mut bodies: Vec<String> = received
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    bodies.sort();
    assert_eq!(
        bodies,
        (0..6).map(|n| format!("body-{n}")).collect::<Vec<_>>()
    );
    let entries = received
        .iter()
        .map(|m| {
            let system = m.system_properties.as_ref().expect("system properties");
            AckMessageEntry {
                message_id: system.message_id.clone(),
                receipt_handle: system.receipt_handle.clone().expect("receipt handle"),
                lite_topic: None,
            }
        })
        .collect();
    let acked = ack(&mut clients[2], group, topic, entries, "consumer-1").await;
    assert_eq!(code(&acked.status), Code::Ok, "{acked:?}");
    // Acknowledged on another thread's connection: nothing comes back after invisibility.
    let (_, again) = receive(&mut clients[1], group, topic, 1_000).await;
    assert!(
        again.is_empty(),
        "acknowledged messages came back: {again:?}"
    );

    stop.send(true).expect("threads listening");
    drop(clients);
    let served = tokio::time::timeout(Duration::from_secs(15), serving)
        .await
        .expect("every thread stops in time")
        .expect("joined");
    assert!(served.is_ok(), "{served:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while serving_threads() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(serving_threads(), 0, "serving threads left behind");
}
