//! `tidemark bench produce|consume|e2e|commit`: load generators in the spirit of RocketMQ's
//! benchmark tools (`commit`: durable consumer-offset commits through a broker). A live progress line goes to stderr every second; the summary (msgs/s, MB/s, latency
//! percentiles, errors) to stdout, as text or `--json`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use tidemark_client::{
    concurrent_fn, ClientConfig, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer,
    PushConsumer, SimpleConsumer,
};
use tidemark_protocol::headers::UpdateConsumerOffsetRequestHeader;
use tidemark_protocol::json::{self, Object, Value, WriteOptions};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{now_ms, ClientConfig as RemotingConfig, RemotingClient};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Send as fast as `--producers` concurrent senders can (sync sends).
    Produce(ProduceArgs),
    /// Consume a topic and measure the rate and born-to-consume latency.
    Consume(ConsumeArgs),
    /// Produce and consume at once; latency is born-to-consume.
    E2e(E2eArgs),
    /// Synchronous UPDATE_CONSUMER_OFFSET requests straight to a broker, spread over many
    /// (topic, group, queue) entries: durable offset commits per second and their latency.
    Commit(CommitArgs),
}

#[derive(Debug, Args, Clone)]
pub struct CommitArgs {
    #[command(flatten)]
    pub common: Common,
    /// The broker to commit to (its listen address).
    #[arg(short = 'b', long, default_value = "127.0.0.1:10911")]
    pub broker: String,
    /// Connections to the broker.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Commits each connection keeps in flight.
    #[arg(long, default_value_t = 16)]
    pub inflight: usize,
    /// (topic, group, queue) entries the commits are spread over; the table is filled with
    /// them (oneway) before measuring.
    #[arg(long, default_value_t = 10_000)]
    pub entries: usize,
    /// Send the measured commits oneway (nothing waits for durability).
    #[arg(long)]
    pub oneway: bool,
}

#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Name server address(es).
    #[arg(short = 'n', long, default_value = "127.0.0.1:9876")]
    pub namesrv: String,
    #[arg(short = 't', long, default_value = "BenchmarkTopic")]
    pub topic: String,
    /// Seconds to run.
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Request header form: `json` (Java's default) or `rocketmq` (binary).
    #[arg(long, default_value = "json")]
    pub serialize: String,
    /// Speak RocketMQ 5's gRPC to this endpoint (`host:port`) instead of remoting through the
    /// name server (produce and POP consume).
    #[arg(long)]
    pub grpc: Option<String>,
    /// ACL account to sign requests with (servers that check RocketMQ ACL).
    #[arg(long, requires = "secret_key")]
    pub access_key: Option<String>,
    #[arg(long, requires = "access_key")]
    pub secret_key: Option<String>,
    #[command(flatten)]
    pub tls: crate::tls_args::ClientTlsArgs,
}

impl Common {
    fn client_config(&self) -> anyhow::Result<ClientConfig> {
        let mut config = ClientConfig::new(&self.namesrv);
        config.tls = self.tls.client_tls()?;
        config.serialize_type = match self.serialize.as_str() {
            "json" => tidemark_protocol::SerializeType::Json,
            "rocketmq" => tidemark_protocol::SerializeType::RocketMq,
            other => anyhow::bail!("--serialize must be json or rocketmq, not {other:?}"),
        };
        if let (Some(access_key), Some(secret_key)) = (&self.access_key, &self.secret_key) {
            config.credentials = Some(tidemark_remoting::Credentials::new(
                access_key.as_str(),
                secret_key.as_str(),
            ));
        }
        Ok(config)
    }
}

#[derive(Debug, Args, Clone)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub common: Common,
    /// Concurrent senders.
    #[arg(long, default_value_t = 8)]
    pub producers: usize,
    /// Body size in bytes.
    #[arg(long, default_value_t = 128)]
    pub size: usize,
    /// Send each message in a transaction (half message, local transaction that commits,
    /// END_TRANSACTION); the latency is the whole of it.
    #[arg(long, conflicts_with = "grpc")]
    pub transactional: bool,
}

#[derive(Debug, Args, Clone)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub common: Common,
    #[arg(short = 'g', long, default_value = "benchmark_consumer")]
    pub group: String,
    /// Consumer instances in the group.
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// POP (RocketMQ 5): each consumer receives batches of 32 and acknowledges every message;
    /// the latency reported is the acknowledgement's round trip.
    #[arg(long)]
    pub pop: bool,
}

#[derive(Debug, Args, Clone)]
pub struct E2eArgs {
    #[command(flatten)]
    pub common: Common,
    #[arg(long, default_value_t = 8)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    #[arg(long, default_value_t = 128)]
    pub size: usize,
    #[arg(short = 'g', long, default_value = "benchmark_e2e")]
    pub group: String,
}

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Produce(args) => {
            let stats = Arc::new(Stats::default());
            let reporter = progress(stats.clone(), "sent");
            let producing = match &args.common.grpc {
                Some(endpoint) => {
                    crate::bench_grpc::produce(
                        endpoint,
                        &args.common,
                        args.producers,
                        args.size,
                        stats.clone(),
                    )
                    .await
                }
                None if args.transactional => {
                    produce_transactional(&args.common, args.producers, args.size, stats.clone())
                        .await
                }
                None => produce(&args.common, args.producers, args.size, stats.clone()).await,
            };
            reporter.abort();
            producing?;
            stats.print_summary(
                if args.common.grpc.is_some() {
                    "grpc-produce"
                } else if args.transactional {
                    "transactional-produce"
                } else {
                    "produce"
                },
                args.size,
                args.common.json,
                Duration::from_secs(args.common.duration),
            )
        }
        BenchCommand::Consume(args) if args.common.grpc.is_some() => {
            crate::bench_grpc::consume(&args).await
        }
        BenchCommand::Consume(args) if args.pop => pop_consume(&args).await,
        BenchCommand::Consume(args) => {
            let stats = Arc::new(Stats::default());
            let reporter = progress(stats.clone(), "consumed");
            let consumers =
                start_consumers(&args.common, &args.group, args.consumers, 0, stats.clone())
                    .await?;
            tokio::time::sleep(Duration::from_secs(args.common.duration)).await;
            stats.stopped.store(true, Ordering::Release);
            reporter.abort();
            for consumer in consumers {
                consumer.shutdown().await;
            }
            stats.print_summary(
                "consume",
                0,
                args.common.json,
                Duration::from_secs(args.common.duration),
            )
        }
        BenchCommand::E2e(args) => {
            let sent = Arc::new(Stats::default());
            let received = Arc::new(Stats::default());
            let consumers = start_consumers(
                &args.common,
                &args.group,
                args.consumers,
                1,
                received.clone(),
            )
            .await?;
            let reporter = progress(received.clone(), "end-to-end");
            let producing = produce(&args.common, args.producers, args.size, sent.clone()).await;
            // Let the consumers drain what is still in flight.
            tokio::time::sleep(Duration::from_secs(2)).await;
            received.stopped.store(true, Ordering::Release);
            reporter.abort();
            for consumer in consumers {
                consumer.shutdown().await;
            }
            producing?;
            if !args.common.json {
                println!(
                    "sent: {} msgs, {} errors",
                    sent.count.load(Ordering::Relaxed),
                    sent.errors.load(Ordering::Relaxed)
                );
            }
            received.print_summary(
                "e2e",
                args.size,
                args.common.json,
                Duration::from_secs(args.common.duration),
            )
        }
        BenchCommand::Commit(args) => commit(args).await,
    }
}

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

async fn commit(args: CommitArgs) -> anyhow::Result<()> {
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
    let stats = Arc::new(Stats::default());
    let reporter = progress(stats.clone(), "committed");
    let deadline = Instant::now() + Duration::from_secs(args.common.duration);
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
                    stats.errors.fetch_add(1, Ordering::Relaxed);
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
        Duration::from_secs(args.common.duration),
    )
}

/// Counters and latency samples of one run.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) count: AtomicU64,
    bytes: AtomicU64,
    pub(crate) errors: AtomicU64,
    /// Latencies in microseconds.
    latencies: Mutex<Vec<u64>>,
    pub(crate) stopped: AtomicBool,
}

impl Stats {
    pub(crate) fn record(&self, bytes: usize, latency: Duration) {
        if self.stopped.load(Ordering::Acquire) {
            return;
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        if let Ok(mut samples) = self.latencies.lock() {
            samples.push(latency.as_micros() as u64);
        }
    }

    pub(crate) fn print_summary(
        &self,
        mode: &str,
        size: usize,
        json_output: bool,
        elapsed: Duration,
    ) -> anyhow::Result<()> {
        let mut samples = self
            .latencies
            .lock()
            .map(|samples| samples.clone())
            .unwrap_or_default();
        samples.sort_unstable();
        let percentile = |p: f64| -> f64 {
            if samples.is_empty() {
                return 0.0;
            }
            let index = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[index] as f64 / 1000.0
        };
        let seconds = elapsed.as_secs_f64().max(0.001);
        let count = self.count.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        let errors = self.errors.load(Ordering::Relaxed);
        let rate = count as f64 / seconds;
        let mbps = bytes as f64 / seconds / (1024.0 * 1024.0);
        let (p50, p99, p999) = (percentile(0.50), percentile(0.99), percentile(0.999));
        if json_output {
            let mut object = Object::new();
            let mut put = |name: &str, value: Value| object.push(Value::String(name.into()), value);
            put("mode", Value::String(mode.into()));
            put("size", Value::Int(size as i64));
            put("seconds", Value::Float(seconds));
            put("messages", Value::Int(count as i64));
            put("errors", Value::Int(errors as i64));
            put("msgsPerSec", Value::Float(rate));
            put("mbPerSec", Value::Float(mbps));
            put("p50Ms", Value::Float(p50));
            put("p99Ms", Value::Float(p99));
            put("p999Ms", Value::Float(p999));
            println!(
                "{}",
                json::write(&Value::Object(object), WriteOptions::STANDARD)
            );
        } else {
            println!(
                "{mode}: {count} msgs in {seconds:.1} s = {rate:.0} msgs/s, {mbps:.2} MB/s; \
                 latency p50 {p50:.3} ms, p99 {p99:.3} ms, p999 {p999:.3} ms; errors {errors}"
            );
        }
        Ok(())
    }
}

/// Prints `[Ns] <what> <count> (<rate>/s) errors <n>` to stderr every second.
pub(crate) fn progress(stats: Arc<Stats>, what: &'static str) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let count = stats.count.load(Ordering::Relaxed);
            let errors = stats.errors.load(Ordering::Relaxed);
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "[{:>3}s] {what} {count} ({}/s) errors {errors}",
                started.elapsed().as_secs(),
                count - last
            );
            last = count;
        }
    })
}

async fn produce(
    common: &Common,
    producers: usize,
    size: usize,
    stats: Arc<Stats>,
) -> anyhow::Result<()> {
    let producer = Producer::builder("benchmark_producer")
        .client_config(common.client_config()?)
        .start()
        .await?;
    let body = bytes::Bytes::from(vec![b'x'; size]);
    let deadline = Instant::now() + Duration::from_secs(common.duration);
    let mut tasks = Vec::new();
    for _ in 0..producers.max(1) {
        let producer = producer.clone();
        let stats = stats.clone();
        let topic = common.topic.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let started = Instant::now();
                match producer.send(Message::new(&topic, body.clone())).await {
                    Ok(_) => stats.record(size, started.elapsed()),
                    Err(_) => {
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
    producer.shutdown().await;
    Ok(())
}

/// Commits every local transaction; a check-back (the END_TRANSACTION was lost) commits too.
struct CommitAll;

impl tidemark_client::TransactionListener for CommitAll {
    fn execute(
        &self,
        _message: &Message,
        _sent: &tidemark_client::SendResult,
    ) -> tidemark_client::BoxFuture<'static, tidemark_client::LocalTransactionState> {
        Box::pin(async { tidemark_client::LocalTransactionState::CommitMessage })
    }

    fn check(
        &self,
        _message: &tidemark_client::MessageExt,
    ) -> tidemark_client::BoxFuture<'static, tidemark_client::LocalTransactionState> {
        Box::pin(async { tidemark_client::LocalTransactionState::CommitMessage })
    }
}

async fn produce_transactional(
    common: &Common,
    producers: usize,
    size: usize,
    stats: Arc<Stats>,
) -> anyhow::Result<()> {
    let producer = Producer::builder("benchmark_transactional_producer")
        .client_config(common.client_config()?)
        .start_transactional(Arc::new(CommitAll))
        .await?;
    let body = bytes::Bytes::from(vec![b'x'; size]);
    let deadline = Instant::now() + Duration::from_secs(common.duration);
    let mut tasks = Vec::new();
    for _ in 0..producers.max(1) {
        let (producer, stats, topic, body) = (
            producer.clone(),
            stats.clone(),
            common.topic.clone(),
            body.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let started = Instant::now();
                match producer
                    .send_in_transaction(Message::new(&topic, body.clone()))
                    .await
                {
                    Ok(_) => stats.record(size, started.elapsed()),
                    Err(_) => {
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
    producer.shutdown().await;
    Ok(())
}

/// POP consumption: `consumers` receive loops, each acknowledging every message it got (all of
/// a batch's acknowledgements in flight at once, as the 5.x clients send them).
async fn pop_consume(args: &ConsumeArgs) -> anyhow::Result<()> {
    let stats = Arc::new(Stats::default());
    let reporter = progress(stats.clone(), "popped+acked");
    let deadline = Instant::now() + Duration::from_secs(args.common.duration);
    let mut loops = Vec::new();
    for _ in 0..args.consumers.max(1) {
        let consumer = Arc::new(
            SimpleConsumer::builder(&args.group)
                .client_config(args.common.client_config()?)
                .subscribe(&args.common.topic, "*")
                .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
                .invisible_duration(Duration::from_secs(60))
                .await_duration(Duration::from_secs(1))
                .start()
                .await?,
        );
        let stats = stats.clone();
        loops.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let batch = match consumer.receive(32).await {
                    Ok(batch) => batch,
                    Err(_) => {
                        stats.errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                let mut acks = tokio::task::JoinSet::new();
                for message in batch {
                    let (consumer, stats) = (consumer.clone(), stats.clone());
                    acks.spawn(async move {
                        let started = Instant::now();
                        match consumer.ack(&message).await {
                            Ok(()) => stats.record(message.message.body.len(), started.elapsed()),
                            Err(_) => {
                                stats.errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                }
                while acks.join_next().await.is_some() {}
            }
            consumer.shutdown().await;
        }));
    }
    for task in loops {
        task.await?;
    }
    stats.stopped.store(true, Ordering::Release);
    reporter.abort();
    stats.print_summary(
        if args.consumers > 1 {
            "pop-consume-n"
        } else {
            "pop-consume"
        },
        0,
        args.common.json,
        Duration::from_secs(args.common.duration),
    )
}

/// `from_born_after`: count only messages born after the consumers started (e2e) when 1.
async fn start_consumers(
    common: &Common,
    group: &str,
    count: usize,
    from_born_after: u8,
    stats: Arc<Stats>,
) -> anyhow::Result<Vec<PushConsumer>> {
    let started_ms = now_ms();
    let mut consumers = Vec::new();
    for _ in 0..count.max(1) {
        let stats = stats.clone();
        let consumer = PushConsumer::builder(group)
            .client_config(common.client_config()?)
            .subscribe(&common.topic, "*")
            .consume_from_where(ConsumeFromWhere::ConsumeFromLastOffset)
            .consume_batch_max_size(32)
            .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
                let stats = stats.clone();
                async move {
                    let now = now_ms();
                    for message in &messages {
                        if from_born_after == 1 && message.born_timestamp < started_ms {
                            continue;
                        }
                        let latency =
                            Duration::from_millis((now - message.born_timestamp).max(0) as u64);
                        stats.record(message.body.len(), latency);
                    }
                    ConsumeStatus::Success
                }
            }))
            .await?;
        consumers.push(consumer);
    }
    Ok(consumers)
}
