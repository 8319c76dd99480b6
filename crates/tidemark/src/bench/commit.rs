//! `tidemark bench commit`: synchronous UPDATE_CONSUMER_OFFSET requests straight to a broker,
//! spread over many (group, queue) entries — durable offset commits per second.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_protocol::headers::UpdateConsumerOffsetRequestHeader;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig as RemotingConfig, RemotingClient};

use super::{progress, CommitArgs};

/// The `index`-th (group, queue) of the commit bench's key space: 8 queues per group.
fn commit_key(index: usize) -> (String, i32) {
    (format!("bench_commit_g{}", index / 8), (index % 8) as i32)
}

fn commit_request(topic: &str, index: usize, offset: i64, binary: bool) -> RemotingCommand {
    let (group, queue_id) = commit_key(index);
    let mut request = RemotingCommand::request_with_header(
        RequestCode::UpdateConsumerOffset,
        &UpdateConsumerOffsetRequestHeader {
            consumer_group: group,
            topic: topic.to_owned(),
            queue_id,
            commit_offset: offset,
            broker_name: None,
        },
    );
    if binary {
        request.serialize_type = tidemark_protocol::SerializeType::RocketMq;
    }
    request
}

pub(crate) async fn run(args: CommitArgs) -> anyhow::Result<()> {
    let entries = args.entries.max(1);
    let clients: Vec<Arc<RemotingClient>> = (0..args.clients.max(1))
        .map(|_| Arc::new(RemotingClient::new(RemotingConfig::default(), None)))
        .collect();
    let topic = args.common.topic.clone();
    let binary =
        args.common.client_config()?.serialize_type == tidemark_protocol::SerializeType::RocketMq;
    eprintln!("filling the offset table with {entries} entries");
    for index in 0..entries {
        let client = &clients[index % clients.len()];
        client
            .invoke_oneway(&args.broker, commit_request(&topic, index, 1, binary))
            .await?;
    }
    // One answered request per connection: everything sent before it has been applied.
    for client in &clients {
        client
            .invoke(
                &args.broker,
                commit_request(&topic, 0, 1, binary),
                Duration::from_secs(30),
            )
            .await?;
    }
    let stats = args.common.stats();
    let reporter = progress(stats.clone(), "committed");
    let deadline = Instant::now() + args.common.run_for();
    let total_tasks = clients.len() * args.inflight.max(1);
    let mut tasks = Vec::new();
    for task in 0..total_tasks {
        let client = clients[task % clients.len()].clone();
        let (stats, broker, topic, oneway) = (
            stats.clone(),
            args.broker.clone(),
            topic.clone(),
            args.oneway,
        );
        tasks.push(tokio::spawn(async move {
            let mut round = 0usize;
            while Instant::now() < deadline {
                round += 1;
                let index = (task + round * total_tasks) % entries;
                let request = commit_request(&topic, index, 1 + round as i64, binary);
                let started = Instant::now();
                let outcome = if oneway {
                    client.invoke_oneway(&broker, request).await.is_ok()
                } else {
                    matches!(
                        client.invoke(&broker, request, Duration::from_secs(10)).await,
                        Ok(response) if response.response_code() == ResponseCode::Success
                    )
                };
                if outcome {
                    stats.record(0, started.elapsed());
                } else {
                    stats.error();
                }
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    stats.stopped.store(true, Ordering::Release);
    reporter.abort();
    for client in &clients {
        client.shutdown();
    }
    stats.print_summary(
        if args.oneway {
            "commit-oneway"
        } else {
            "commit"
        },
        0,
        args.common.json,
        args.common.measured(),
    )
}
