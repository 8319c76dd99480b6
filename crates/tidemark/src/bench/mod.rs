//! `tidemark bench produce|consume|e2e|commit`: load generators in the spirit of RocketMQ's
//! benchmark tools (`commit`: durable consumer-offset commits through a broker). Each run
//! makes its topic when missing, uses a group of its own unless `--group` names one, leaves
//! its first `--warmup` seconds out of the figures and records latency in a histogram of
//! microseconds. A live progress line goes to stderr every second; the summary (msgs/s, MB/s,
//! latency p50/p99/p999/max, errors) to stdout, as text or `--json`.

mod commit;
mod consume;
mod grpc;
mod grpc_wire;
mod prepare;
mod produce;
mod rtt;
mod stats;

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use tidemark_client::ClientConfig;
use tidemark_remoting::now_ms;

pub(crate) use stats::{progress, Stats};

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
    /// Round trips of a bare frame over loopback TCP between two tokio runtimes: the floor
    /// under any synchronous call here, to read `produce --producers 1` against.
    Rtt(rtt::RttArgs),
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
    /// Queues on each master of a topic the bench makes (a topic that exists keeps its own).
    // A negative number reaches the range check, which names the option and the range.
    #[arg(
        long,
        default_value_t = 8,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(1..=65_535)
    )]
    pub queues: i32,
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Seconds run first and left out of the figures (connections, routes, caches settle).
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
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
    /// Warm-up and measured time together: how long the load runs.
    pub(crate) fn run_for(&self) -> Duration {
        Duration::from_secs(self.warmup + self.duration)
    }

    /// The measured part, which rates are computed over.
    pub(crate) fn measured(&self) -> Duration {
        Duration::from_secs(self.duration)
    }

    pub(crate) fn stats(&self) -> Arc<Stats> {
        Arc::new(Stats::new(Duration::from_secs(self.warmup)))
    }

    pub(crate) fn client_config(&self) -> anyhow::Result<ClientConfig> {
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
    /// How each sender sends: `sync` (one at a time), `async` (`--inflight` outstanding),
    /// `oneway` (no answer; the latency is handing it to the connection) or `batch` (`--batch`
    /// messages per send; the latency is the batch's).
    #[arg(long, value_enum, default_value_t = SendMode::Sync)]
    pub mode: SendMode,
    /// Messages per batch with `--mode batch`.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Sends each sender keeps outstanding with `--mode async`.
    #[arg(long, default_value_t = 32)]
    pub inflight: usize,
    /// Send each message in a transaction (half message, local transaction that commits,
    /// END_TRANSACTION); the latency is the whole of it.
    #[arg(long, conflicts_with = "grpc")]
    pub transactional: bool,
    /// Spread the sends over this many topics (`TOPIC`, `TOPIC-1` … `TOPIC-{N-1}`, made before
    /// the run), each sender taking them in turn: the cost of many topics. 1: just `--topic`.
    #[arg(long, default_value_t = 1, conflicts_with_all = ["grpc", "transactional"])]
    pub topics: usize,
    /// Keep this many other connections open to the broker through the run (each asks one
    /// question, then stays quiet): the cost of idle connections.
    #[arg(long, default_value_t = 0, conflicts_with = "grpc")]
    pub idle_connections: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SendMode {
    Sync,
    Async,
    Oneway,
    Batch,
}

#[derive(Debug, Args, Clone)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub common: Common,
    /// The consumer group; a new one per run by default, which reads the topic from its
    /// first message.
    #[arg(short = 'g', long)]
    pub group: Option<String>,
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
    /// The consumer group; a new one per run by default.
    #[arg(short = 'g', long)]
    pub group: Option<String>,
    /// Total sends per second across the senders (open loop: each sender keeps to its share
    /// of the schedule); without it they send as fast as they can.
    #[arg(long)]
    pub rate: Option<u64>,
}

/// `--group`, or a group of this run's own.
fn group_or_fresh(group: &Option<String>, kind: &str) -> String {
    group
        .clone()
        .unwrap_or_else(|| format!("bench_{kind}_{}_{}", std::process::id(), now_ms()))
}

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Produce(args) => {
            if args.transactional && args.mode != SendMode::Sync {
                anyhow::bail!("--transactional sends one at a time: it takes no --mode");
            }
            let mut route = None;
            if args.common.grpc.is_none() {
                route = prepare::ensure_topic(&args.common).await?;
            }
            let topics = produce::topic_names(&args.common.topic, args.topics);
            if topics.len() > 1 {
                prepare::ensure_topics(&args.common, &topics[1..]).await?;
            }
            let _idle = match route {
                Some(route) if args.idle_connections > 0 => {
                    Some(prepare::idle_connections(&route, args.idle_connections).await?)
                }
                _ => None,
            };
            let stats = args.common.stats();
            let reporter = progress(stats.clone(), "sent");
            let producing = match &args.common.grpc {
                Some(endpoint) => {
                    grpc::produce(
                        endpoint,
                        &args.common,
                        args.producers,
                        args.size,
                        stats.clone(),
                    )
                    .await
                }
                None if args.transactional => {
                    produce::transactional(&args.common, args.producers, args.size, stats.clone())
                        .await
                }
                None => produce::run(&args, stats.clone()).await,
            };
            reporter.abort();
            producing?;
            let mode = match (&args.common.grpc, args.transactional, args.mode) {
                (Some(_), _, _) => "grpc-produce",
                (None, true, _) => "transactional-produce",
                (None, false, SendMode::Sync) => "produce",
                (None, false, SendMode::Async) => "produce-async",
                (None, false, SendMode::Oneway) => "produce-oneway",
                (None, false, SendMode::Batch) => "produce-batch",
            };
            stats.print_summary(mode, args.size, args.common.json, args.common.measured())
        }
        BenchCommand::Consume(args) if args.common.grpc.is_some() => grpc::consume(&args).await,
        BenchCommand::Consume(args) if args.pop => consume::pop(&args).await,
        BenchCommand::Consume(args) => consume::push(&args).await,
        BenchCommand::E2e(args) => consume::end_to_end(&args).await,
        BenchCommand::Commit(args) => commit::run(args).await,
        BenchCommand::Rtt(args) => rtt::run(args).await,
    }
}
