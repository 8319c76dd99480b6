//! `tidemark bench produce|consume --grpc ENDPOINT`: the same load over RocketMQ 5's gRPC
//! (MessagingService) instead of remoting, so the two protocols' cost per message can be set
//! side by side in one run. Senders send one message per SendMessage call; consumers receive
//! batches of 32 (ReceiveMessage) and acknowledge every message with its own AckMessage, all of
//! a batch's in flight at once — as the 5.x SimpleConsumer does.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tidemark_grpc::prost_types;
use tidemark_grpc::proto::messaging_service_client::MessagingServiceClient;
use tidemark_grpc::proto::*;
use tidemark_grpc::tonic::transport::Channel;
use tidemark_grpc::tonic::Request;

use crate::bench::{progress, Common, ConsumeArgs, Stats};

fn resource(name: &str) -> Resource {
    Resource {
        resource_namespace: String::new(),
        name: name.to_owned(),
    }
}

fn request<T>(message: T, client_id: &str, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    if let Ok(value) = client_id.parse() {
        request.metadata_mut().insert("x-mq-client-id", value);
    }
    request.set_timeout(timeout);
    request
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

/// `producers` senders, each on its own HTTP/2 connection, until the duration is up.
pub async fn produce(
    endpoint: &str,
    common: &Common,
    producers: usize,
    size: usize,
    stats: Arc<Stats>,
) -> anyhow::Result<()> {
    let mut probe = connect(endpoint).await?;
    let route = probe
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
    let deadline = Instant::now() + Duration::from_secs(common.duration);
    let mut tasks = Vec::new();
    for sender in 0..producers.max(1) {
        let mut client = connect(endpoint).await?;
        let (stats, topic, body) = (stats.clone(), common.topic.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let client_id = format!("bench-producer-{sender}");
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
                    .send_message(request(
                        SendMessageRequest {
                            messages: vec![message],
                        },
                        &client_id,
                        Duration::from_secs(5),
                    ))
                    .await;
                match sent {
                    Ok(response)
                        if response
                            .get_ref()
                            .status
                            .as_ref()
                            .is_some_and(|status| status.code == Code::Ok as i32) =>
                    {
                        stats.record(size, started.elapsed())
                    }
                    _ => {
                        stats.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    stats.stopped.store(true, Ordering::Release);
    Ok(())
}

/// `consumers` receive loops of one group, each acknowledging everything it receives.
pub async fn consume(args: &ConsumeArgs) -> anyhow::Result<()> {
    let endpoint = args.common.grpc.clone().unwrap_or_default();
    let stats = Arc::new(Stats::default());
    let reporter = progress(stats.clone(), "received+acked");
    let deadline = Instant::now() + Duration::from_secs(args.common.duration);
    let mut loops = Vec::new();
    for index in 0..args.consumers.max(1) {
        let client = connect(&endpoint).await?;
        let (stats, topic, group) = (stats.clone(), args.common.topic.clone(), args.group.clone());
        loops.push(tokio::spawn(async move {
            let client_id = format!("bench-consumer-{index}");
            while Instant::now() < deadline {
                let receive = ReceiveMessageRequest {
                    group: Some(resource(&group)),
                    message_queue: Some(MessageQueue {
                        topic: Some(resource(&topic)),
                        id: -1,
                        ..MessageQueue::default()
                    }),
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
                let mut stream = match client
                    .clone()
                    .receive_message(request(receive, &client_id, Duration::from_secs(5)))
                    .await
                {
                    Ok(response) => response.into_inner(),
                    Err(_) => {
                        stats.errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                let mut handles = Vec::new();
                while let Ok(Some(frame)) = stream.message().await {
                    if let Some(receive_message_response::Content::Message(message)) = frame.content
                    {
                        let system = message.system_properties.unwrap_or_default();
                        handles.push((
                            system.message_id,
                            system.receipt_handle.unwrap_or_default(),
                            message.body.len(),
                        ));
                    }
                }
                let mut acks = tokio::task::JoinSet::new();
                for (message_id, handle, bytes) in handles {
                    let (mut client, stats, client_id) =
                        (client.clone(), stats.clone(), client_id.clone());
                    let (group, topic) = (group.clone(), topic.clone());
                    acks.spawn(async move {
                        let started = Instant::now();
                        let acked = client
                            .ack_message(request(
                                AckMessageRequest {
                                    group: Some(resource(&group)),
                                    topic: Some(resource(&topic)),
                                    entries: vec![AckMessageEntry {
                                        message_id,
                                        receipt_handle: handle,
                                        lite_topic: None,
                                    }],
                                },
                                &client_id,
                                Duration::from_secs(5),
                            ))
                            .await;
                        match acked {
                            Ok(response)
                                if response
                                    .get_ref()
                                    .status
                                    .as_ref()
                                    .is_some_and(|status| status.code == Code::Ok as i32) =>
                            {
                                stats.record(bytes, started.elapsed())
                            }
                            _ => {
                                stats.errors.fetch_add(1, Ordering::Relaxed);
                            }
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
        Duration::from_secs(args.common.duration),
    )
}
