//! `tidemark admin …`: operator commands over the client crate, named after `mqadmin`'s
//! (sendMessage, consumerProgress, topicStatus, clusterList, …). Listings print a table, or with
//! `--json` one JSON line. They work against Tidemark and against Apache RocketMQ alike.

pub(crate) mod addresses;
mod cluster;
mod consumer_status;
mod controllers;
mod dead_letters;
mod groups;
mod history;
mod moves;
mod plan;
mod query_message;
mod restore;
mod table;
mod topics;

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use tidemark_client::{
    concurrent_fn, Admin, BrokerReader, ClientConfig, ConsumeFromWhere, ConsumeStatus, Message,
    MessageExt, MessageModel, Producer, PushConsumer, SimpleConsumer,
};
use tidemark_protocol::json::{self, Object, Value, WriteOptions};

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Send messages and print one JSON line per send result.
    SendMessage(SendArgs),
    /// Consume messages with a push consumer and print one JSON line per message.
    ConsumeMessage(ConsumeArgs),
    /// Receive messages by POP (RocketMQ 5) and print one JSON line per message, acknowledging
    /// each once printed (up to --ack-limit; the rest stay in flight).
    PopMessage(PopArgs),
    /// A group's progress per queue: broker offset, committed offset, lag.
    ConsumerProgress(ProgressArgs),
    /// Min and max offsets of every queue of a topic.
    TopicStatus(TopicArgs),
    /// A message by its offset message id (with --trace its trace records), by key, or by
    /// queue offset.
    QueryMessage(query_message::QueryArgs),
    /// Clusters, their brokers and each broker's traffic today.
    ClusterList(cluster::ClusterListArgs),
    /// Who leads the controllers, and each broker set's master, epochs and SyncStateSet.
    ControllerStatus(controllers::ControllerStatusArgs),
    /// What brokers report about themselves (GET_BROKER_RUNTIME_INFO).
    BrokerStatus(cluster::BrokerStatusArgs),
    /// Brokers' configuration: `get`, or `set` one key live.
    #[command(subcommand)]
    BrokerConfig(cluster::BrokerConfigCommand),
    /// Every topic the name server knows.
    TopicList(topics::TopicListArgs),
    /// Which brokers serve a topic, with their queues and permissions.
    TopicRoute(topics::TopicRouteArgs),
    /// Creates (or updates) a topic on brokers.
    TopicCreate(topics::TopicCreateArgs),
    /// Deletes a topic from a cluster's brokers and the name servers.
    TopicDelete(topics::TopicDeleteArgs),
    /// The subscription groups brokers know.
    GroupList(groups::GroupListArgs),
    /// Creates (or updates) a subscription group on brokers.
    GroupCreate(groups::GroupCreateArgs),
    /// Deletes a subscription group from brokers.
    GroupDelete(groups::GroupDeleteArgs),
    /// A group's online consumers and what they subscribe.
    ConsumerConnection(groups::ConsumerConnectionArgs),
    /// A producer group's connections.
    ProducerConnection(groups::ProducerConnectionArgs),
    /// What a group's online consumers report about themselves: settings, subscriptions,
    /// queues with cached messages, pull and consume rates.
    ConsumerStatus(consumer_status::ConsumerStatusArgs),
    /// Moves a group's progress in a topic to the first message stored at or after a time.
    ResetOffsetByTime(moves::ResetArgs),
    /// Moves a group's progress in a topic to the end of every queue.
    SkipAccumulated(moves::SkipArgs),
    /// Copies one group's committed offsets to another.
    CloneOffset(moves::CloneArgs),
    /// Who moved a group's committed offsets (reset, skip, clone, rewind, deletion), when,
    /// from where to where; with --checkpoints, routine progress too.
    ProgressHistory(history::HistoryArgs),
    /// Puts a group back where it stood at a time (--at) or before a history entry (--undo):
    /// shows the plan, asks on a terminal, --yes applies, --dry-run only shows.
    ProgressRestore(restore::RestoreArgs),
    /// A group's dead letters: original topic, keys, retries, when each was born and died.
    DeadLetters(dead_letters::DeadLettersArgs),
    /// Sends dead letters again, back to the group (--to retry, a fresh retry count) or to
    /// their original topics (--to origin); shows them first, asks, recorded in the history.
    DeadLetterResend(dead_letters::ResendArgs),
    /// Puts a group's consumed retry messages of one topic back into its retry topic, leaving
    /// the other topics' retries alone; shows them first, asks, recorded in the history.
    RetryReplay(dead_letters::ReplayArgs),
}

#[derive(Debug, Args)]
pub struct Cluster {
    /// Name server address(es), `host:port[;host:port]`.
    #[arg(short = 'n', long, default_value = "127.0.0.1:9876", value_parser = addresses::name_servers)]
    pub namesrv: String,
    /// ACL account to sign requests with (servers that check RocketMQ ACL).
    #[arg(long, requires = "secret_key")]
    pub access_key: Option<String>,
    #[arg(long, requires = "access_key")]
    pub secret_key: Option<String>,
    #[command(flatten)]
    pub tls: crate::tls_args::ClientTlsArgs,
}

impl Cluster {
    pub fn client_config(&self) -> anyhow::Result<ClientConfig> {
        let mut config = ClientConfig::new(&self.namesrv);
        config.tls = self.tls.client_tls()?;
        if let (Some(access_key), Some(secret_key)) = (&self.access_key, &self.secret_key) {
            config.credentials = Some(tidemark_remoting::Credentials::new(
                access_key.as_str(),
                secret_key.as_str(),
            ));
        }
        Ok(config)
    }
}

#[derive(Debug, Args)]
pub struct SendArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 't', long)]
    pub topic: String,
    /// The body; `{i}` is replaced by the message number.
    #[arg(short = 'b', long, default_value = "message {i}")]
    pub body: String,
    #[arg(long, default_value_t = 1)]
    pub count: usize,
    #[arg(long)]
    pub tag: Option<String>,
    /// Message key; `{i}` is replaced by the message number.
    #[arg(short = 'k', long)]
    pub key: Option<String>,
    /// A user property `name=value` (repeatable).
    #[arg(short = 'p', long = "property")]
    pub properties: Vec<String>,
    // Signed options take a negative number as their value, so the range check names the
    // option instead of clap taking `-1` for an unknown flag.
    #[arg(
        long,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(0..)
    )]
    pub delay_level: Option<i32>,
    /// A timer message (RocketMQ 5): delivered this many ms after the broker receives it.
    #[arg(long)]
    pub delay_ms: Option<u64>,
    /// A timer message (RocketMQ 5): delivered at this epoch time in ms.
    #[arg(
        long,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i64).range(0..)
    )]
    pub deliver_at_ms: Option<i64>,
    #[arg(long, default_value = "tidemark-admin-producer")]
    pub group: String,
}

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 't', long)]
    pub topic: String,
    #[arg(short = 'g', long)]
    pub group: String,
    /// Tag expression, `*` or `TagA || TagB`.
    #[arg(short = 's', long, default_value = "*")]
    pub expression: String,
    /// Stop after this many messages (exit code 1 if the timeout comes first).
    #[arg(long)]
    pub count: Option<usize>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
    /// Where a group with no committed offset starts: first, last or timestamp.
    #[arg(long, default_value = "first")]
    pub from: String,
    #[arg(long)]
    pub broadcast: bool,
}

#[derive(Debug, Args)]
pub struct PopArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 't', long)]
    pub topic: String,
    #[arg(short = 'g', long)]
    pub group: String,
    /// Tag expression, `*` or `TagA || TagB`.
    #[arg(short = 's', long, default_value = "*")]
    pub expression: String,
    /// Stop after this many messages (exit code 1 if the timeout comes first).
    #[arg(long)]
    pub count: Option<usize>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
    /// How long a received message stays invisible, ms.
    #[arg(long, default_value_t = 30_000)]
    pub invisible_ms: u64,
    /// Acknowledge only the first this many messages; later ones are printed and left in flight
    /// (they come back to the group once their invisibility ends).
    #[arg(long)]
    pub ack_limit: Option<usize>,
    /// Where a group that never consumed a queue starts: first or last.
    #[arg(long, default_value = "first")]
    pub from: String,
}

#[derive(Debug, Args)]
pub struct ProgressArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    #[arg(short = 't', long)]
    pub topic: Option<String>,
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TopicArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 't', long)]
    pub topic: String,
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(command: AdminCommand) -> anyhow::Result<()> {
    let given = addresses::given(&command);
    dispatch(command)
        .await
        .map_err(|error| addresses::name_the_flag(error, &given))
}

async fn dispatch(command: AdminCommand) -> anyhow::Result<()> {
    match command {
        AdminCommand::SendMessage(args) => send(args).await,
        AdminCommand::ConsumeMessage(args) => consume(args).await,
        AdminCommand::PopMessage(args) => pop(args).await,
        AdminCommand::ConsumerProgress(args) => progress(args).await,
        AdminCommand::TopicStatus(args) => topic_status(args).await,
        AdminCommand::QueryMessage(args) => query_message::query(args).await,
        AdminCommand::ClusterList(args) => cluster::cluster_list(args).await,
        AdminCommand::ControllerStatus(args) => controllers::controller_status(args).await,
        AdminCommand::BrokerStatus(args) => cluster::broker_status(args).await,
        AdminCommand::BrokerConfig(command) => cluster::broker_config(command).await,
        AdminCommand::TopicList(args) => topics::topic_list(args).await,
        AdminCommand::TopicRoute(args) => topics::topic_route(args).await,
        AdminCommand::TopicCreate(args) => topics::topic_create(args).await,
        AdminCommand::TopicDelete(args) => topics::topic_delete(args).await,
        AdminCommand::GroupList(args) => groups::group_list(args).await,
        AdminCommand::GroupCreate(args) => groups::group_create(args).await,
        AdminCommand::GroupDelete(args) => groups::group_delete(args).await,
        AdminCommand::ConsumerConnection(args) => groups::consumer_connection(args).await,
        AdminCommand::ProducerConnection(args) => groups::producer_connection(args).await,
        AdminCommand::ConsumerStatus(args) => consumer_status::consumer_status(args).await,
        AdminCommand::ResetOffsetByTime(args) => moves::reset_offset_by_time(args).await,
        AdminCommand::SkipAccumulated(args) => moves::skip_accumulated(args).await,
        AdminCommand::CloneOffset(args) => moves::clone_offset(args).await,
        AdminCommand::ProgressHistory(args) => history::progress_history(args).await,
        AdminCommand::ProgressRestore(args) => restore::progress_restore(args).await,
        AdminCommand::DeadLetters(args) => dead_letters::dead_letters(args).await,
        AdminCommand::DeadLetterResend(args) => dead_letters::resend(args).await,
        AdminCommand::RetryReplay(args) => dead_letters::replay(args).await,
    }
}

/// An admin client of the cluster's name servers.
async fn connect(cluster: &Cluster) -> anyhow::Result<Admin> {
    Ok(Admin::connect(cluster.client_config()?).await?)
}

fn string(text: impl Into<String>) -> Value {
    Value::String(text.into())
}

fn print_json(object: Object) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    write_json(&mut out, object)?;
    out.flush()?;
    Ok(())
}

/// `object` as one line of standard JSON (what `--json` prints).
fn write_json(out: &mut impl Write, object: Object) -> std::io::Result<()> {
    writeln!(
        out,
        "{}",
        json::write(&Value::Object(object), WriteOptions::STANDARD)
    )
}

async fn send(args: SendArgs) -> anyhow::Result<()> {
    let producer = Producer::builder(&args.group)
        .client_config(args.cluster.client_config()?)
        .start()
        .await?;
    let mut properties = Vec::new();
    for pair in &args.properties {
        let (name, value) = pair
            .split_once('=')
            .with_context(|| format!("property {pair:?} is not name=value"))?;
        properties.push((name.to_owned(), value.to_owned()));
    }
    for i in 0..args.count {
        let number = i.to_string();
        let mut message = Message::new(&args.topic, args.body.replace("{i}", &number));
        if let Some(tag) = &args.tag {
            message = message.with_tags(tag);
        }
        if let Some(key) = &args.key {
            message = message.with_keys([key.replace("{i}", &number)]);
        }
        if let Some(delay) = args.delay_ms {
            message = message.with_delay(Duration::from_millis(delay));
        }
        if let Some(at) = args.deliver_at_ms {
            message = message.with_deliver_time_ms(at);
        }
        if let Some(level) = args.delay_level {
            message = message.with_delay_level(level);
        }
        for (name, value) in &properties {
            message = message.with_property(name, value);
        }
        let sent = producer.send(message).await?;
        let mut line = Object::new();
        line.push(string("msgId"), string(sent.msg_id));
        line.push(string("offsetMsgId"), string(sent.offset_msg_id));
        line.push(string("brokerName"), string(sent.queue.broker_name));
        line.push(
            string("queueId"),
            Value::Int(i64::from(sent.queue.queue_id)),
        );
        line.push(string("queueOffset"), Value::Int(sent.queue_offset));
        line.push(string("status"), string(sent.status.java_name()));
        print_json(line)?;
    }
    producer.shutdown().await;
    Ok(())
}

fn message_json(message: &MessageExt) -> Object {
    let mut line = Object::new();
    line.push(string("msgId"), string(message.msg_id.clone()));
    line.push(string("topic"), string(message.topic.clone()));
    line.push(
        string("brokerName"),
        string(message.queue.broker_name.clone()),
    );
    line.push(
        string("queueId"),
        Value::Int(i64::from(message.queue.queue_id)),
    );
    line.push(string("queueOffset"), Value::Int(message.queue_offset));
    line.push(
        string("reconsumeTimes"),
        Value::Int(i64::from(message.reconsume_times)),
    );
    line.push(
        string("body"),
        string(String::from_utf8_lossy(&message.body).into_owned()),
    );
    let mut properties = Object::new();
    for (name, value) in message.properties.iter() {
        properties.push(string(name), string(value));
    }
    line.push(string("properties"), Value::Object(properties));
    line
}

async fn consume(args: ConsumeArgs) -> anyhow::Result<()> {
    let from = match args.from.as_str() {
        "first" => ConsumeFromWhere::ConsumeFromFirstOffset,
        "last" => ConsumeFromWhere::ConsumeFromLastOffset,
        "timestamp" => ConsumeFromWhere::ConsumeFromTimestamp,
        other => bail!("--from must be first, last or timestamp, not {other:?}"),
    };
    // Each message goes to the printer with a reply slot; the listener acknowledges it only once
    // it was written out. Messages the printer no longer takes (the count was reached) stay in
    // flight until the process ends, so the committed offset stays before them and the group
    // gets them next time.
    let (lines, mut received) =
        tokio::sync::mpsc::unbounded_channel::<(Object, tokio::sync::oneshot::Sender<()>)>();
    let consumer = PushConsumer::builder(&args.group)
        .client_config(args.cluster.client_config()?)
        .subscribe(&args.topic, &args.expression)
        .consume_from_where(from)
        .message_model(if args.broadcast {
            MessageModel::Broadcasting
        } else {
            MessageModel::Clustering
        })
        .rebalance_interval(Duration::from_secs(2))
        // Listener calls of unprinted messages never finish; don't wait long for them.
        .shutdown_wait(Duration::from_secs(1))
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let lines = lines.clone();
            async move {
                for message in &messages {
                    let (printed, was_printed) = tokio::sync::oneshot::channel();
                    if lines.send((message_json(message), printed)).is_err()
                        || was_printed.await.is_err()
                    {
                        std::future::pending::<()>().await;
                    }
                }
                ConsumeStatus::Success
            }
        }))
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut count = 0usize;
    let wanted = args.count.unwrap_or(usize::MAX);
    while count < wanted {
        match tokio::time::timeout_at(deadline, received.recv()).await {
            Ok(Some((line, printed))) => {
                print_json(line)?;
                count += 1;
                let _ = printed.send(());
            }
            _ => break,
        }
    }
    // Whatever is still queued was not printed: dropping it leaves those messages in flight.
    drop(received);
    consumer.shutdown().await;
    if let Some(wanted) = args.count {
        if count < wanted {
            bail!(
                "received {count} of {wanted} messages within {} s",
                args.timeout_secs
            );
        }
    }
    Ok(())
}

async fn pop(args: PopArgs) -> anyhow::Result<()> {
    let from = match args.from.as_str() {
        "first" => ConsumeFromWhere::ConsumeFromFirstOffset,
        "last" => ConsumeFromWhere::ConsumeFromLastOffset,
        other => bail!("--from must be first or last, not {other:?}"),
    };
    let consumer = SimpleConsumer::builder(&args.group)
        .client_config(args.cluster.client_config()?)
        .subscribe(&args.topic, &args.expression)
        .consume_from_where(from)
        .invisible_duration(Duration::from_millis(args.invisible_ms))
        .await_duration(Duration::from_secs(5))
        .start()
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    let wanted = args.count.unwrap_or(usize::MAX);
    let ack_limit = args.ack_limit.unwrap_or(usize::MAX);
    let (mut count, mut acked) = (0usize, 0usize);
    'receiving: while count < wanted && tokio::time::Instant::now() < deadline {
        let batch = match tokio::time::timeout_at(deadline, consumer.receive(32)).await {
            Ok(batch) => batch?,
            Err(_) => break,
        };
        for received in batch {
            if count >= wanted {
                break 'receiving;
            }
            let mut line = message_json(&received.message);
            line.push(string("receipt"), string(received.receipt.encode()));
            print_json(line)?;
            count += 1;
            if acked < ack_limit {
                consumer.ack(&received).await?;
                acked += 1;
            }
        }
    }
    consumer.shutdown().await;
    if let Some(wanted) = args.count {
        if count < wanted {
            bail!(
                "received {count} of {wanted} messages within {} s",
                args.timeout_secs
            );
        }
    }
    Ok(())
}

async fn progress(args: ProgressArgs) -> anyhow::Result<()> {
    let admin = Admin::connect(args.cluster.client_config()?).await?;
    let stats = admin
        .consume_stats(&args.group, args.topic.as_deref())
        .await;
    // Tidemark brokers add time lag and stuck messages; others leave those columns empty.
    let extra = match &stats {
        Ok(_) => admin
            .consumer_progress(&args.group, args.topic.as_deref())
            .await
            .unwrap_or_default(),
        Err(_) => Default::default(),
    };
    let readers = admin
        .readers_for_group(&args.group, args.topic.as_deref())
        .await
        .unwrap_or_default();
    admin.shutdown().await;
    let stats = stats?;
    let now = tidemark_remoting::now_ms();
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut queues = Vec::new();
        for (queue, line) in &stats.offset_table {
            let mut entry = Object::new();
            entry.push(string("topic"), string(queue.topic.clone()));
            entry.push(string("brokerName"), string(queue.broker_name.clone()));
            entry.push(string("queueId"), Value::Int(i64::from(queue.queue_id)));
            entry.push(string("brokerOffset"), Value::Int(line.broker_offset));
            entry.push(string("consumerOffset"), Value::Int(line.consumer_offset));
            entry.push(
                string("lag"),
                Value::Int(line.broker_offset - line.consumer_offset),
            );
            if let Some(view) = extra.get(queue) {
                entry.push(string("timeLagMs"), Value::Int(view.time_lag_ms));
                entry.push(string("ackedAbove"), Value::Int(view.acked_above));
                entry.push(string("stuckOffset"), Value::Int(view.stuck_offset));
                entry.push(string("stuckSinceMs"), Value::Int(view.stuck_since_ms));
                if let Some(in_flight) = view.pop_in_flight {
                    entry.push(string("popInFlight"), Value::Int(in_flight));
                    entry.push(
                        string("popNextOffset"),
                        Value::Int(view.pop_next_offset.unwrap_or(0)),
                    );
                    if let Some(at) = view.pop_visible_again_at_ms {
                        entry.push(string("popVisibleAgainAtMs"), Value::Int(at));
                    }
                }
            }
            queues.push(Value::Object(entry));
        }
        let mut object = Object::new();
        object.push(string("group"), string(args.group));
        object.push(string("queues"), Value::Array(queues));
        object.push(string("answeredBy"), answered_by_json(&readers));
        write_json(&mut out, object)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<40} {:<16} {:>5} {:>14} {:>16} {:>10} {:>10} {:>22} {:>22}",
        "#Topic",
        "#Broker",
        "#QID",
        "#Broker Offset",
        "#Consumer Offset",
        "#Diff",
        "#Time Lag",
        "#Stuck (offset, for)",
        "#POP in flight (next in)"
    )?;
    let mut total_lag = 0;
    for (queue, line) in &stats.offset_table {
        let lag = line.broker_offset - line.consumer_offset;
        total_lag += lag;
        let popped = match extra
            .get(queue)
            .and_then(|view| view.pop_in_flight.map(|n| (n, view)))
        {
            Some((0, _)) => "0".to_owned(),
            Some((in_flight, view)) => match view.pop_visible_again_at_ms {
                Some(at) => format!("{in_flight} ({})", format_duration_ms(at - now)),
                None => in_flight.to_string(),
            },
            None => "-".to_owned(),
        };
        let (time_lag, stuck) = match extra.get(queue) {
            Some(view) => (
                format_duration_ms(view.time_lag_ms),
                if view.stuck_offset >= 0 {
                    format!(
                        "{} for {}",
                        view.stuck_offset,
                        format_duration_ms(now - view.stuck_since_ms)
                    )
                } else {
                    "-".to_owned()
                },
            ),
            None => ("-".to_owned(), "-".to_owned()),
        };
        writeln!(
            out,
            "{:<40} {:<16} {:>5} {:>14} {:>16} {:>10} {:>10} {:>22} {:>22}",
            queue.topic,
            queue.broker_name,
            queue.queue_id,
            line.broker_offset,
            line.consumer_offset,
            lag,
            time_lag,
            stuck,
            popped
        )?;
    }
    writeln!(out, "\nConsume TPS: {:.2}", stats.consume_tps)?;
    writeln!(out, "Diff Total: {total_lag}")?;
    write_answered_by(&mut out, &readers)?;
    Ok(())
}

/// Which address answered for each broker, saying when a slave stood in for its master.
fn write_answered_by(out: &mut impl Write, readers: &[BrokerReader]) -> std::io::Result<()> {
    for reader in readers {
        let role = if reader.is_master {
            "master"
        } else {
            "slave: its master is away, figures as the slave last received them"
        };
        writeln!(
            out,
            "{} answered by {} ({role})",
            reader.broker_name, reader.addr
        )?;
    }
    Ok(())
}

fn answered_by_json(readers: &[BrokerReader]) -> Value {
    Value::Array(
        readers
            .iter()
            .map(|reader| {
                let mut entry = Object::new();
                entry.push(string("brokerName"), string(reader.broker_name.clone()));
                entry.push(string("addr"), string(reader.addr.clone()));
                entry.push(
                    string("role"),
                    string(if reader.is_master { "master" } else { "slave" }),
                );
                Value::Object(entry)
            })
            .collect(),
    )
}

/// `850ms`, `12.3s`, `4m05s`, `2h07m`.
fn format_duration_ms(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

async fn topic_status(args: TopicArgs) -> anyhow::Result<()> {
    let admin = Admin::connect(args.cluster.client_config()?).await?;
    let stats = admin.topic_stats(&args.topic).await;
    let readers = admin.readers_of(&args.topic).await.unwrap_or_default();
    admin.shutdown().await;
    let stats = stats?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let queues = stats
            .offset_table
            .iter()
            .map(|(queue, line)| {
                let mut entry = Object::new();
                entry.push(string("brokerName"), string(queue.broker_name.clone()));
                entry.push(string("queueId"), Value::Int(i64::from(queue.queue_id)));
                entry.push(string("minOffset"), Value::Int(line.min_offset));
                entry.push(string("maxOffset"), Value::Int(line.max_offset));
                Value::Object(entry)
            })
            .collect();
        let mut object = Object::new();
        object.push(string("topic"), string(args.topic));
        object.push(string("queues"), Value::Array(queues));
        object.push(string("answeredBy"), answered_by_json(&readers));
        write_json(&mut out, object)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<16} {:>5} {:>14} {:>14}",
        "#Broker", "#QID", "#Min Offset", "#Max Offset"
    )?;
    for (queue, line) in &stats.offset_table {
        writeln!(
            out,
            "{:<16} {:>5} {:>14} {:>14}",
            queue.broker_name, queue.queue_id, line.min_offset, line.max_offset
        )?;
    }
    write_answered_by(&mut out, &readers)?;
    Ok(())
}
