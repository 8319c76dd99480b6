//! `tidemark bench produce|consume --grpc ENDPOINT`: the same load over RocketMQ 5's gRPC
//! (MessagingService) instead of remoting, so the two protocols' cost per message can be set
//! side by side in one run. Senders send one message per SendMessage call; consumers receive
//! batches of 32 (ReceiveMessage) and acknowledge every message with its own AckMessage, all of
//! a batch's in flight at once — as the 5.x SimpleConsumer does. Those calls go out as the Java
//! client writes them ([`WireClient`]); setup (route, assignment, settings) uses tonic's client.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tidemark_grpc::prost_types;
use tidemark_grpc::proto::messaging_service_client::MessagingServiceClient;
use tidemark_grpc::proto::*;
use tidemark_grpc::tonic;
use tidemark_grpc::tonic::transport::Channel;
use tidemark_grpc::tonic::Request;

use super::grpc_wire::WireClient;
use super::{group_or_fresh, progress, Common, ConsumeArgs, Stats};

/// A receive's deadline: room for the 1 s long poll asked for, and for RocketMQ's proxy, which
/// raises any long poll to at least 5 s and refuses one the deadline does not cover.
const RECEIVE_DEADLINE: Duration = Duration::from_secs(10);

fn resource(name: &str) -> Resource {
    Resource {
        resource_namespace: String::new(),
        name: name.to_owned(),
    }
}

/// Whether a call's status says it succeeded.
fn answered_ok(status: Option<&Status>) -> bool {
    status.is_some_and(|status| status.code == Code::Ok as i32)
}

fn request<T>(message: T, client_id: &str, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    if let Ok(value) = client_id.parse() {
        request.metadata_mut().insert("x-mq-client-id", value);
    }
    // What every 5.x client says about itself (RocketMQ's proxy refuses a stream without them).
    let metadata = request.metadata_mut();
    metadata.insert(
        "x-mq-language",
        tonic::metadata::MetadataValue::from_static("RUST"),
    );
    metadata.insert(
        "x-mq-protocol",
        tonic::metadata::MetadataValue::from_static("v2"),
    );
    metadata.insert(
        "x-mq-client-version",
        tonic::metadata::MetadataValue::from_static(env!("CARGO_PKG_VERSION")),
    );
    request.set_timeout(timeout);
    request
}

/// Opens the client's Telemetry stream with its settings and waits for the server's answer, as
/// a 5.x client does before its first call (RocketMQ's proxy serves receives only to clients
/// whose settings it has). The returned sender keeps the stream open.
async fn hello(
    client: &mut MessagingServiceClient<Channel>,
    client_id: &str,
    settings: Settings,
) -> anyhow::Result<tokio::sync::mpsc::Sender<TelemetryCommand>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    sender
        .send(TelemetryCommand {
            status: None,
            command: Some(telemetry_command::Command::Settings(settings)),
        })
        .await
        .context("telemetry stream")?;
    let mut answers = client
        .telemetry(request(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
            client_id,
            Duration::from_secs(3_600),
        ))
        .await
        .context("telemetry stream")?
        .into_inner();
    tokio::time::timeout(Duration::from_secs(10), answers.message())
        .await
        .context("no settings answer within 10 s")?
        .context("telemetry stream")?;
    // Later commands (none are expected in a bench) are read and dropped.
    tokio::spawn(async move { while let Ok(Some(_)) = answers.message().await {} });
    Ok(sender)
}

async fn connect(endpoint: &str) -> anyhow::Result<MessagingServiceClient<Channel>> {
    let url = if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("http://{endpoint}")
    };
    MessagingServiceClient::connect(url.clone())
        .await
        .with_context(|| format!("cannot reach gRPC endpoint {url}"))
}

/// `producers` senders sharing one client's HTTP/2 connection (as a 5.x client's producers share
/// its channel to an endpoint, and the remoting bench's senders share one producer's
/// connection), until the duration is up.
pub async fn produce(
    endpoint: &str,
    common: &Common,
    producers: usize,
    size: usize,
    stats: Arc<Stats>,
) -> anyhow::Result<()> {
    let mut shared = connect(endpoint).await?;
    let route = shared
        .query_route(request(
            QueryRouteRequest {
                topic: Some(resource(&common.topic)),
                endpoints: None,
            },
            "bench-producer",
            Duration::from_secs(5),
        ))
        .await?
        .into_inner();
    let queues = route.message_queues.len().max(1) as i32;
    let body = vec![b'x'; size];
    let deadline = Instant::now() + common.run_for();
    let mut tasks = Vec::new();
    let client_id = "bench-producer".to_owned();
    let settings = Settings {
        client_type: Some(ClientType::Producer as i32),
        pub_sub: Some(settings::PubSub::Publishing(Publishing {
            topics: vec![resource(&common.topic)],
            ..Publishing::default()
        })),
        ..Settings::default()
    };
    let telemetry = hello(&mut shared, &client_id, settings).await?;
    let wire = WireClient::connect(endpoint, &client_id).await?;
    for sender in 0..producers.max(1) {
        let client = wire.clone();
        let (stats, topic, body) = (stats.clone(), common.topic.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut sequence = 0u64;
            while Instant::now() < deadline {
                sequence += 1;
                let message = Message {
                    topic: Some(resource(&topic)),
                    user_properties: Default::default(),
                    system_properties: Some(SystemProperties {
                        message_id: format!("BENCH{sender:04}{sequence:016}"),
                        body_encoding: Encoding::Identity as i32,
                        message_type: MessageType::Normal as i32,
                        queue_id: (sequence % queues as u64) as i32,
                        ..SystemProperties::default()
                    }),
                    body: body.clone(),
                };
                let started = Instant::now();
                let sent = client
                    .call::<_, SendMessageResponse>(
                        "SendMessage",
                        &SendMessageRequest {
                            messages: vec![message],
                        },
                        Duration::from_secs(5),
                    )
                    .await;
                match sent {
                    Ok(answers)
                        if answers
                            .first()
                            .is_some_and(|answer| answered_ok(answer.status.as_ref())) =>
                    {
                        stats.record(size, started.elapsed())
                    }
                    _ => stats.error(),
                }
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    drop(telemetry);
    stats.stopped.store(true, Ordering::Release);
    Ok(())
}

/// `consumers` receive loops of one group, each acknowledging everything it receives.
pub async fn consume(args: &ConsumeArgs) -> anyhow::Result<()> {
    let endpoint = args.common.grpc.clone().unwrap_or_default();
    let group = group_or_fresh(&args.group, "grpc_consume");
    let stats = args.common.stats();
    let reporter = progress(stats.clone(), "received+acked");
    let deadline = Instant::now() + args.common.run_for();
    let mut loops = Vec::new();
    for index in 0..args.consumers.max(1) {
        let mut client = connect(&endpoint).await?;
        let client_id = format!("bench-consumer-{index}");
        let (topic, group) = (args.common.topic.clone(), group.clone());
        let settings = Settings {
            client_type: Some(ClientType::SimpleConsumer as i32),
            pub_sub: Some(settings::PubSub::Subscription(Subscription {
                group: Some(resource(&group)),
                subscriptions: vec![SubscriptionEntry {
                    topic: Some(resource(&topic)),
                    expression: Some(FilterExpression {
                        r#type: FilterType::Tag as i32,
                        expression: "*".into(),
                    }),
                }],
                ..Subscription::default()
            })),
            ..Settings::default()
        };
        let telemetry = hello(&mut client, &client_id, settings).await?;
        // Each broker of the topic is assigned separately; the loop takes them in turn.
        let assignments: Vec<MessageQueue> = client
            .query_assignment(request(
                QueryAssignmentRequest {
                    topic: Some(resource(&topic)),
                    group: Some(resource(&group)),
                    endpoints: None,
                },
                &client_id,
                Duration::from_secs(5),
            ))
            .await?
            .into_inner()
            .assignments
            .into_iter()
            .filter_map(|assignment| assignment.message_queue)
            .collect();
        anyhow::ensure!(
            !assignments.is_empty(),
            "no queue of {topic} is assigned to group {group}"
        );
        let wire = WireClient::connect(&endpoint, &client_id).await?;
        let stats = stats.clone();
        loops.push(tokio::spawn(async move {
            let _telemetry = telemetry;
            // Setup went over tonic's client; it stays open with the telemetry stream.
            let _setup = client;
            let mut turn = 0usize;
            while Instant::now() < deadline {
                turn += 1;
                let receive = ReceiveMessageRequest {
                    group: Some(resource(&group)),
                    message_queue: Some(assignments[turn % assignments.len()].clone()),
                    filter_expression: Some(FilterExpression {
                        r#type: FilterType::Tag as i32,
                        expression: "*".into(),
                    }),
                    batch_size: 32,
                    invisible_duration: Some(prost_types::Duration {
                        seconds: 60,
                        nanos: 0,
                    }),
                    auto_renew: false,
                    long_polling_timeout: Some(prost_types::Duration {
                        seconds: 1,
                        nanos: 0,
                    }),
                    attempt_id: None,
                };
                let frames = match wire
                    .call::<_, ReceiveMessageResponse>("ReceiveMessage", &receive, RECEIVE_DEADLINE)
                    .await
                {
                    Ok(frames) => frames,
                    Err(_) => {
                        stats.error();
                        continue;
                    }
                };
                let mut handles = Vec::new();
                for frame in frames {
                    match frame.content {
                        Some(receive_message_response::Content::Message(message)) => {
                            let system = message.system_properties.unwrap_or_default();
                            handles.push((
                                system.message_id,
                                system.receipt_handle.unwrap_or_default(),
                                message.body.len(),
                            ));
                        }
                        Some(receive_message_response::Content::Status(status))
                            if status.code != Code::Ok as i32
                                && status.code != Code::MessageNotFound as i32 =>
                        {
                            let first = stats.errors.fetch_add(1, Ordering::Relaxed) == 0;
                            if first {
                                eprintln!("receive refused: {} {}", status.code, status.message);
                            }
                        }
                        _ => {}
                    }
                }
                let mut acks = tokio::task::JoinSet::new();
                for (message_id, handle, bytes) in handles {
                    let (wire, stats) = (wire.clone(), stats.clone());
                    let (group, topic) = (group.clone(), topic.clone());
                    acks.spawn(async move {
                        let started = Instant::now();
                        let acked = wire
                            .call::<_, AckMessageResponse>(
                                "AckMessage",
                                &AckMessageRequest {
                                    group: Some(resource(&group)),
                                    topic: Some(resource(&topic)),
                                    entries: vec![AckMessageEntry {
                                        message_id,
                                        receipt_handle: handle,
                                        lite_topic: None,
                                    }],
                                },
                                Duration::from_secs(5),
                            )
                            .await;
                        match acked {
                            Ok(answers)
                                if answers
                                    .first()
                                    .is_some_and(|answer| answered_ok(answer.status.as_ref())) =>
                            {
                                stats.record(bytes, started.elapsed())
                            }
                            _ => stats.error(),
                        }
                    });
                }
                while acks.join_next().await.is_some() {}
            }
        }));
    }
    for task in loops {
        task.await?;
    }
    stats.stopped.store(true, Ordering::Release);
    reporter.abort();
    stats.print_summary(
        if args.consumers > 1 {
            "grpc-consume-n"
        } else {
            "grpc-consume"
        },
        0,
        args.common.json,
        args.common.measured(),
    )
}
