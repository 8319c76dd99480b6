//! Consumer groups and who is connected: `group-list|create|delete`,
//! `consumer-connection`, `producer-connection`; and how people write times.

use anyhow::{bail, Context};
use clap::Args;
use tidemark_protocol::body::SubscriptionGroupConfig;
use tidemark_protocol::json::{Object, Value};

use super::cluster::Target;
use super::table::{print_outcome, Format, Table};
use super::{connect, Cluster};

#[derive(Debug, Args)]
pub struct GroupListArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[command(flatten)]
    pub target: Target,
    #[command(flatten)]
    pub format: Format,
}

pub async fn group_list(args: GroupListArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let outcome = async {
        let mut table = Table::new(&[
            ("Broker", "broker"),
            ("Group", "group"),
            ("Consume", "consumeEnable"),
            ("Broadcast", "consumeBroadcastEnable"),
            ("Orderly", "consumeMessageOrderly"),
            ("Retry Max", "retryMaxTimes"),
            ("Retry Queues", "retryQueueNums"),
        ]);
        for broker in args.target.resolve(&admin, true).await? {
            let mut groups = admin.subscription_groups(&broker.addr).await?;
            groups.sort_by(|a, b| a.group_name.cmp(&b.group_name));
            for group in groups {
                table.row(vec![
                    (&broker.broker_name).into(),
                    group.group_name.into(),
                    group.consume_enable.into(),
                    group.consume_broadcast_enable.into(),
                    group.consume_message_orderly.unwrap_or(false).into(),
                    group.retry_max_times.into(),
                    group.retry_queue_nums.into(),
                ]);
            }
        }
        anyhow::Ok(table)
    }
    .await;
    admin.shutdown().await;
    outcome?.print(args.format)
}

#[derive(Debug, Args)]
pub struct GroupCreateArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[command(flatten)]
    pub target: Target,
    #[arg(short = 'g', long)]
    pub group: String,
    /// Failed deliveries before a message goes to the group's dead-letter topic.
    // A negative count reaches the range check below, which says what is allowed.
    #[arg(long, default_value_t = 16, allow_negative_numbers = true)]
    pub retry_max_times: i32,
    /// Refuse broadcasting consumers of the group.
    #[arg(long)]
    pub no_broadcast: bool,
    /// Create it with consumption switched off.
    #[arg(long)]
    pub consume_disabled: bool,
    /// RocketMQ 5: the group consumes in order (FIFO for gRPC clients).
    #[arg(long)]
    pub orderly: bool,
    #[command(flatten)]
    pub format: Format,
}

pub async fn group_create(args: GroupCreateArgs) -> anyhow::Result<()> {
    if !(0..=10_000).contains(&args.retry_max_times) {
        bail!(
            "--retry-max-times must be 0 to 10000, not {}",
            args.retry_max_times
        );
    }
    let config = SubscriptionGroupConfig {
        group_name: args.group.clone(),
        retry_max_times: args.retry_max_times,
        consume_broadcast_enable: !args.no_broadcast,
        consume_enable: !args.consume_disabled,
        consume_message_orderly: args.orderly.then_some(true),
        ..SubscriptionGroupConfig::default()
    };
    let admin = connect(&args.cluster).await?;
    let outcome = async {
        let brokers = args.target.resolve(&admin, false).await?;
        for broker in &brokers {
            admin.create_group(&broker.addr, &config).await?;
        }
        anyhow::Ok(brokers)
    }
    .await;
    admin.shutdown().await;
    let addrs: Vec<String> = outcome?.into_iter().map(|broker| broker.addr).collect();
    let mut object = Object::new();
    object.push(s("group"), s(&args.group));
    object.push(s("brokers"), Value::Array(addrs.iter().map(s).collect()));
    print_outcome(
        args.format,
        &format!(
            "group {} created or updated on {}",
            args.group,
            addrs.join(", ")
        ),
        object,
    )
}

#[derive(Debug, Args)]
pub struct GroupDeleteArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[command(flatten)]
    pub target: Target,
    #[arg(short = 'g', long)]
    pub group: String,
    /// Drop the group's committed offsets too.
    #[arg(long)]
    pub remove_offsets: bool,
    #[command(flatten)]
    pub format: Format,
}

pub async fn group_delete(args: GroupDeleteArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let outcome = async {
        let brokers = args.target.resolve(&admin, false).await?;
        for broker in &brokers {
            admin
                .delete_group(&broker.addr, &args.group, args.remove_offsets)
                .await?;
        }
        anyhow::Ok(brokers)
    }
    .await;
    admin.shutdown().await;
    let addrs: Vec<String> = outcome?.into_iter().map(|broker| broker.addr).collect();
    let mut object = Object::new();
    object.push(s("group"), s(&args.group));
    object.push(s("offsetsRemoved"), Value::Bool(args.remove_offsets));
    object.push(s("brokers"), Value::Array(addrs.iter().map(s).collect()));
    print_outcome(
        args.format,
        &format!(
            "group {} deleted from {}{}",
            args.group,
            addrs.join(", "),
            if args.remove_offsets {
                " with its offsets"
            } else {
                ""
            }
        ),
        object,
    )
}

#[derive(Debug, Args)]
pub struct ConsumerConnectionArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    #[command(flatten)]
    pub format: Format,
}

pub async fn consumer_connection(args: ConsumerConnectionArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let found = admin.consumer_connection(&args.group).await;
    admin.shutdown().await;
    let connection = found?;
    let mut clients = Table::new(&[
        ("ClientId", "clientId"),
        ("ClientAddr", "clientAddr"),
        ("Language", "language"),
        ("Version", "version"),
    ]);
    for client in &connection.connection_set {
        clients.row(vec![
            (&client.client_id).into(),
            (&client.client_addr).into(),
            (&client.language).into(),
            client.version.into(),
        ]);
    }
    let mut subscriptions = Table::new(&[("Topic", "topic"), ("Expression", "expression")]);
    for (topic, subscription) in &connection.subscription_table {
        subscriptions.row(vec![topic.into(), (&subscription.sub_string).into()]);
    }
    let consume_type = connection
        .consume_type
        .map_or("-", |value| value.java_name());
    let message_model = connection
        .message_model
        .map_or("-", |value| value.java_name());
    let from_where = connection
        .consume_from_where
        .map_or("-", |value| value.java_name());
    if args.format.json {
        let mut object = Object::new();
        object.push(s("group"), s(&args.group));
        object.push(s("connections"), clients.json());
        object.push(s("subscriptions"), subscriptions.json());
        object.push(s("consumeType"), s(consume_type));
        object.push(s("messageModel"), s(message_model));
        object.push(s("consumeFromWhere"), s(from_where));
        super::print_json(object)?;
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    clients.write_text(&mut out)?;
    use std::io::Write;
    writeln!(out, "\nSubscriptions:")?;
    subscriptions.write_text(&mut out)?;
    writeln!(out, "\nConsume type: {consume_type}")?;
    writeln!(out, "Message model: {message_model}")?;
    writeln!(out, "Consume from where: {from_where}")?;
    Ok(())
}

#[derive(Debug, Args)]
pub struct ProducerConnectionArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    /// A topic the group sends to (its brokers are asked).
    #[arg(short = 't', long)]
    pub topic: String,
    #[command(flatten)]
    pub format: Format,
}

pub async fn producer_connection(args: ProducerConnectionArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let found = admin.producer_connection(&args.group, &args.topic).await;
    admin.shutdown().await;
    let mut table = Table::new(&[
        ("ClientId", "clientId"),
        ("ClientAddr", "clientAddr"),
        ("Language", "language"),
        ("Version", "version"),
    ]);
    for client in found?.connection_set {
        table.row(vec![
            client.client_id.into(),
            client.client_addr.into(),
            client.language.into(),
            client.version.into(),
        ]);
    }
    table.print(args.format)
}

/// `now`, epoch milliseconds, or a time before now: `-90s`, `-10m`, `-2h`, `-1d`.
pub fn parse_time(text: &str, now_ms: i64) -> anyhow::Result<i64> {
    let text = text.trim();
    if text == "now" {
        return Ok(now_ms);
    }
    if let Some(ago) = text.strip_prefix('-') {
        let split = ago
            .find(|c: char| !c.is_ascii_digit())
            .with_context(|| format!("{text:?}: a time before now needs a unit (s, m, h, d)"))?;
        let (number, unit) = ago.split_at(split);
        let number: i64 = number
            .parse()
            .with_context(|| format!("{text:?}: no number before the unit"))?;
        let unit_ms = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            other => bail!("{text:?}: unit {other:?} is not s, m, h or d"),
        };
        let back = number
            .checked_mul(unit_ms)
            .with_context(|| format!("{text:?} is too far back"))?;
        return Ok(now_ms.saturating_sub(back));
    }
    let epoch: i64 = text.parse().with_context(|| {
        format!("{text:?} is not `now`, epoch milliseconds, or a time before now like -10m")
    })?;
    if epoch < 0 {
        bail!("{text:?}: epoch milliseconds cannot be negative");
    }
    Ok(epoch)
}

fn s(text: impl AsRef<str>) -> Value {
    Value::String(text.as_ref().to_owned())
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn times_are_now_epochs_or_before_now() {
        let now = 1_000_000_000;
        assert_eq!(parse_time("now", now).ok(), Some(now));
        assert_eq!(parse_time("1234", now).ok(), Some(1234));
        assert_eq!(parse_time("-10m", now).ok(), Some(now - 600_000));
        assert_eq!(parse_time("-2h", now).ok(), Some(now - 7_200_000));
        assert!(parse_time("-10", now).is_err());
        assert!(parse_time("-10w", now).is_err());
        assert!(parse_time("yesterday", now).is_err());
        assert!(parse_time("-99999999999999999d", now).is_err());
    }
}
