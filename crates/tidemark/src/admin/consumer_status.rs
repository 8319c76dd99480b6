//! `consumer-status`: what a group's online consumers report about themselves — settings,
//! subscriptions, each queue they hold with its cached messages (a POP consumer: its messages in
//! flight per queue), and pull and consume rates
//! (mqadmin `consumerStatus`; the consumer answers through the broker).

use std::io::Write;

use anyhow::bail;
use clap::Args;
use tidemark_protocol::body::ConsumerRunningInfo;
use tidemark_protocol::json::{self, Object, Value, WriteOptions};

use super::table::{Format, Table};
use super::{connect, Cluster};

#[derive(Debug, Args)]
pub struct ConsumerStatusArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    /// Only this client (default: every online consumer of the group).
    #[arg(short = 'i', long)]
    pub client_id: Option<String>,
    #[command(flatten)]
    pub format: Format,
}

fn s(text: impl AsRef<str>) -> Value {
    Value::String(text.as_ref().to_owned())
}

fn queues_table(info: &ConsumerRunningInfo) -> Table {
    let mut table = Table::new(&[
        ("Topic", "topic"),
        ("Broker", "brokerName"),
        ("QID", "queueId"),
        ("Commit Offset", "commitOffset"),
        ("Cached", "cachedMsgCount"),
        ("Cached Min", "cachedMsgMinOffset"),
        ("Cached Max", "cachedMsgMaxOffset"),
        ("Locked", "locked"),
        ("Last Pull", "lastPullTimestamp"),
        ("Last Consume", "lastConsumeTimestamp"),
    ]);
    for (queue, line) in &info.mq_table {
        table.row(vec![
            (&queue.topic).into(),
            (&queue.broker_name).into(),
            queue.queue_id.into(),
            line.commit_offset.into(),
            line.cached_msg_count.into(),
            line.cached_msg_min_offset.into(),
            line.cached_msg_max_offset.into(),
            line.locked.into(),
            line.last_pull_timestamp.into(),
            line.last_consume_timestamp.into(),
        ]);
    }
    table
}

/// The queues a POP consumer (a gRPC one, say) has messages of in flight.
fn pop_queues_table(info: &ConsumerRunningInfo) -> Table {
    let mut table = Table::new(&[
        ("Topic", "topic"),
        ("Broker", "brokerName"),
        ("QID", "queueId"),
        ("Waiting Ack", "waitAckCount"),
        ("Last Pop", "lastPopTimestamp"),
    ]);
    for (queue, line) in &info.mq_pop_table {
        table.row(vec![
            (&queue.topic).into(),
            (&queue.broker_name).into(),
            queue.queue_id.into(),
            line.wait_ack_count.into(),
            line.last_pop_timestamp.into(),
        ]);
    }
    table
}

fn rates_table(info: &ConsumerRunningInfo) -> Table {
    let mut table = Table::new(&[
        ("Topic", "topic"),
        ("Pull RT ms", "pullRT"),
        ("Pull TPS", "pullTPS"),
        ("Consume RT ms", "consumeRT"),
        ("Consume OK TPS", "consumeOKTPS"),
        ("Consume Failed TPS", "consumeFailedTPS"),
        ("Failed Last Hour", "consumeFailedMsgs"),
    ]);
    for (topic, status) in &info.status_table {
        table.row(vec![
            topic.into(),
            status.pull_rt.into(),
            status.pull_tps.into(),
            status.consume_rt.into(),
            status.consume_ok_tps.into(),
            status.consume_failed_tps.into(),
            status.consume_failed_msgs.into(),
        ]);
    }
    table
}

fn info_json(client_id: &str, info: &ConsumerRunningInfo) -> Value {
    let mut object = Object::new();
    object.push(s("clientId"), s(client_id));
    let mut properties = Object::new();
    for (key, value) in &info.properties {
        properties.push(s(key), s(value));
    }
    object.push(s("properties"), Value::Object(properties));
    object.push(
        s("subscriptions"),
        Value::Array(
            info.subscription_set
                .iter()
                .map(|subscription| {
                    let mut entry = Object::new();
                    entry.push(s("topic"), s(&subscription.topic));
                    entry.push(s("expression"), s(&subscription.sub_string));
                    entry.push(s("expressionType"), s(&subscription.expression_type));
                    Value::Object(entry)
                })
                .collect(),
        ),
    );
    object.push(s("queues"), queues_table(info).json());
    object.push(s("popQueues"), pop_queues_table(info).json());
    object.push(s("rates"), rates_table(info).json());
    Value::Object(object)
}

pub async fn consumer_status(args: ConsumerStatusArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let outcome = async {
        let clients = match &args.client_id {
            Some(client_id) => vec![client_id.clone()],
            None => admin.consumer_ids(&args.group).await?,
        };
        if clients.is_empty() {
            bail!("no consumer of group {} is online", args.group);
        }
        let mut answers = Vec::new();
        for client_id in clients {
            let info = admin.consumer_running_info(&args.group, &client_id).await?;
            answers.push((client_id, info));
        }
        anyhow::Ok(answers)
    }
    .await;
    admin.shutdown().await;
    let answers = outcome?;
    let mut out = std::io::stdout().lock();
    if args.format.json {
        let all = Value::Array(
            answers
                .iter()
                .map(|(client_id, info)| info_json(client_id, info))
                .collect(),
        );
        writeln!(out, "{}", json::write(&all, WriteOptions::STANDARD))?;
        return Ok(());
    }
    for (index, (client_id, info)) in answers.iter().enumerate() {
        if index > 0 {
            writeln!(out)?;
        }
        writeln!(out, "#Client {client_id}")?;
        writeln!(out, "#Consumer Properties#")?;
        for (key, value) in &info.properties {
            writeln!(out, "{key:<40}: {value}")?;
        }
        writeln!(out, "\n#Consumer Subscription#")?;
        for (number, subscription) in info.subscription_set.iter().enumerate() {
            writeln!(
                out,
                "{:03} Topic: {:<40} SubExpression: {}",
                number + 1,
                subscription.topic,
                subscription.sub_string
            )?;
        }
        writeln!(out, "\n#Consumer Queues#")?;
        queues_table(info).write_text(&mut out)?;
        if !info.mq_pop_table.is_empty() {
            writeln!(out, "\n#Consumer POP Queues#")?;
            pop_queues_table(info).write_text(&mut out)?;
        }
        writeln!(out, "\n#Consumer RT&TPS#")?;
        rates_table(info).write_text(&mut out)?;
    }
    out.flush()?;
    Ok(())
}
