//! `tidemark admin query-message`: a message by its offset message id (`--id`, as a send result
//! or `mqadmin queryMsgById` names it), by key through the brokers' index (`--topic --key`,
//! with `--unique` a client message id), or by its place (`--topic --broker --queue
//! --offset`). With `--id … --trace`, what the trace topic says about it — sent by which
//! producer group, stored where, consumed by which groups, how often retried, with what
//! outcome (RocketMQ's `queryMsgTraceById`).
//!
//! The trace is found by reading the trace topic from shortly before the message was stored
//! (or `--trace-since-minutes` back for a client message id), at most `--trace-scan-limit`
//! trace messages.

use std::io::Write;

use clap::Args;
use tidemark_client::{Admin, MessageExt};
use tidemark_protocol::json::{Object, Value};
use tidemark_protocol::message::decode_offset_msg_id;
use tidemark_protocol::trace::{decode_trace_data, TraceRecord, DEFAULT_TRACE_TOPIC};

#[derive(Debug, Args)]
pub struct QueryArgs {
    #[command(flatten)]
    pub cluster: super::Cluster,
    /// The offset message id (store host + commit-log offset), or with `--trace` the client's
    /// message id (`UNIQ_KEY`) too.
    #[arg(long, conflicts_with_all = ["key", "offset"])]
    pub id: Option<String>,
    /// The topic, for a lookup by key or by queue offset.
    #[arg(short = 't', long)]
    pub topic: Option<String>,
    /// A key the message was sent with (`KEYS`), looked up in the brokers' index.
    #[arg(short = 'k', long, requires = "topic")]
    pub key: Option<String>,
    /// The key is a client message id (`UNIQ_KEY`, what a send result calls msgId).
    #[arg(long, requires = "key")]
    pub unique: bool,
    /// Messages per broker at most, for a lookup by key.
    // Signed options take a negative number as their value, so the range check names the
    // option instead of clap taking `-1` for an unknown flag.
    #[arg(
        long,
        default_value_t = 64,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(1..)
    )]
    pub max: i32,
    /// The broker name, for a lookup by queue offset.
    #[arg(short = 'b', long, requires = "offset")]
    pub broker: Option<String>,
    /// The queue id, for a lookup by queue offset.
    #[arg(
        short = 'q',
        long,
        requires = "offset",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(0..)
    )]
    pub queue: Option<i32>,
    /// The queue offset (with --topic, --broker and --queue).
    #[arg(
        short = 'o',
        long,
        requires_all = ["topic", "broker", "queue"],
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i64).range(0..)
    )]
    pub offset: Option<i64>,
    /// Also show the message's trace records.
    #[arg(long)]
    pub trace: bool,
    /// The topic clients write traces to.
    #[arg(long, default_value = DEFAULT_TRACE_TOPIC)]
    pub trace_topic: String,
    /// For a client message id: how far back the trace topic is read, minutes.
    #[arg(
        long,
        default_value_t = 60,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i64).range(0..)
    )]
    pub trace_since_minutes: i64,
    /// Trace messages read at most.
    #[arg(long, default_value_t = 100_000)]
    pub trace_scan_limit: usize,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Trace records are written a moment after the event; a little before the store time
/// covers clocks that disagree.
const TRACE_SLACK_MS: i64 = 60_000;

pub async fn query(args: QueryArgs) -> anyhow::Result<()> {
    if args.id.is_none() && args.key.is_none() && args.offset.is_none() {
        anyhow::bail!(
            "say which message: --id, --topic with --key, or --topic --broker --queue --offset"
        );
    }
    if args.trace && args.id.is_none() {
        anyhow::bail!("--trace goes with --id");
    }
    let admin = Admin::connect(args.cluster.client_config()?).await?;
    let outcome = find(&admin, &args).await;
    admin.shutdown().await;
    let (messages, trace) = outcome?;
    if messages.is_empty() && !args.trace {
        anyhow::bail!("no such message");
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut object = Object::new();
        if args.id.is_some() {
            if let Some(message) = messages.first() {
                object.push(s("message"), Value::Object(message_json(message)));
            }
        } else {
            object.push(
                s("messages"),
                Value::Array(
                    messages
                        .iter()
                        .map(|message| Value::Object(message_json(message)))
                        .collect(),
                ),
            );
        }
        if args.trace {
            object.push(
                s("trace"),
                Value::Array(trace.iter().map(|r| Value::Object(trace_json(r))).collect()),
            );
        }
        super::write_json(&mut out, object)?;
        return Ok(());
    }
    for (index, message) in messages.iter().enumerate() {
        if index > 0 {
            writeln!(out)?;
        }
        writeln!(out, "{:<16}{}", "Topic:", message.topic)?;
        writeln!(out, "{:<16}{}", "Msg id:", message.msg_id)?;
        writeln!(out, "{:<16}{}", "Offset id:", message.offset_msg_id)?;
        writeln!(out, "{:<16}{}", "Broker:", message.queue.broker_name)?;
        writeln!(out, "{:<16}{}", "Queue:", message.queue.queue_id)?;
        writeln!(out, "{:<16}{}", "Queue offset:", message.queue_offset)?;
        writeln!(out, "{:<16}{}", "Tags:", message.tags().unwrap_or(""))?;
        writeln!(
            out,
            "{:<16}{}",
            "Keys:",
            message.keys().collect::<Vec<_>>().join(" ")
        )?;
        writeln!(out, "{:<16}{}", "Born:", message.born_timestamp)?;
        writeln!(out, "{:<16}{}", "Stored:", message.store_timestamp)?;
        writeln!(out, "{:<16}{}", "Store host:", message.store_host)?;
        writeln!(out, "{:<16}{}", "Reconsumed:", message.reconsume_times)?;
        writeln!(out, "{:<16}{} bytes", "Body:", message.body.len())?;
        for (name, value) in message.properties.iter() {
            writeln!(out, "  {name} = {value}")?;
        }
    }
    if args.trace {
        writeln!(out, "Trace ({} records):", trace.len())?;
        writeln!(
            out,
            "  {:<15} {:<15} {:<32} {:<8} {:<8} {:<6} #Host",
            "#Type", "#Time", "#Group", "#Cost", "#Status", "#Retry"
        )?;
        for record in &trace {
            writeln!(out, "  {}", trace_line(record))?;
        }
    }
    Ok(())
}

async fn find(
    admin: &Admin,
    args: &QueryArgs,
) -> anyhow::Result<(Vec<MessageExt>, Vec<TraceRecord>)> {
    let topic = args.topic.as_deref().unwrap_or_default();
    if let Some(key) = &args.key {
        let found = admin
            .query_messages_by_key(topic, key, args.unique, args.max, (0, i64::MAX))
            .await?;
        return Ok((found, Vec::new()));
    }
    if let (Some(broker), Some(queue), Some(offset)) = (&args.broker, args.queue, args.offset) {
        let found = admin.message_at(topic, broker, queue, offset).await?;
        return Ok((found.into_iter().collect(), Vec::new()));
    }
    let Some(id) = &args.id else {
        return Ok((Vec::new(), Vec::new()));
    };
    let (message, trace) = by_id(admin, args, id).await?;
    Ok((message.into_iter().collect(), trace))
}

async fn by_id(
    admin: &Admin,
    args: &QueryArgs,
    id: &str,
) -> anyhow::Result<(Option<MessageExt>, Vec<TraceRecord>)> {
    let message = if decode_offset_msg_id(id).is_ok() {
        Some(admin.view_message(id).await?)
    } else if args.trace {
        None
    } else {
        anyhow::bail!(
            "{id:?} is not an offset message id; a message is looked up by its offset id (add --trace to find a client message id's trace, or use --topic --key {id} --unique)"
        );
    };
    if !args.trace {
        return Ok((message, Vec::new()));
    }
    let since = match &message {
        Some(message) => message.store_timestamp - TRACE_SLACK_MS,
        None => tidemark_remoting::now_ms() - args.trace_since_minutes.saturating_mul(60_000),
    };
    let client_id = message.as_ref().map(|m| m.msg_id.clone());
    let mut trace = Vec::new();
    admin
        .scan_topic(
            &args.trace_topic,
            since,
            args.trace_scan_limit,
            |trace_message| {
                let data = String::from_utf8_lossy(&trace_message.body);
                trace.extend(decode_trace_data(&data).into_iter().filter(|record| {
                    record.is_about(id)
                        || client_id.as_deref().is_some_and(|id| record.is_about(id))
                }));
            },
        )
        .await?;
    trace.sort_by_key(|record| record.timestamp_ms().unwrap_or(i64::MAX));
    Ok((message, trace))
}

fn s(text: impl Into<String>) -> Value {
    Value::String(text.into())
}

fn message_json(message: &MessageExt) -> Object {
    let mut object = Object::new();
    object.push(s("topic"), s(message.topic.clone()));
    object.push(s("msgId"), s(message.msg_id.clone()));
    object.push(s("offsetMsgId"), s(message.offset_msg_id.clone()));
    object.push(s("queueId"), Value::Int(i64::from(message.queue.queue_id)));
    object.push(s("queueOffset"), Value::Int(message.queue_offset));
    object.push(s("bornTimestamp"), Value::Int(message.born_timestamp));
    object.push(s("storeTimestamp"), Value::Int(message.store_timestamp));
    object.push(s("storeHost"), s(message.store_host.to_string()));
    object.push(
        s("reconsumeTimes"),
        Value::Int(i64::from(message.reconsume_times)),
    );
    object.push(s("bodyLength"), Value::Int(message.body.len() as i64));
    let mut properties = Object::new();
    for (name, value) in message.properties.iter() {
        properties.push(s(name), s(value));
    }
    object.push(s("properties"), Value::Object(properties));
    object
}

/// (group, cost ms, status, retry times, host) of a record, as far as it says.
fn trace_columns(record: &TraceRecord) -> (String, Option<i64>, String, Option<i64>, String) {
    let status = |success: &Option<bool>| match success {
        Some(true) => "success".to_owned(),
        Some(false) => "failed".to_owned(),
        None => String::new(),
    };
    match record {
        TraceRecord::Pub {
            producer_group,
            cost_ms,
            success,
            store_host,
            ..
        } => (
            producer_group.clone(),
            *cost_ms,
            status(success),
            None,
            store_host.clone(),
        ),
        TraceRecord::SubBefore {
            consumer_group,
            retry_times,
            ..
        } => (
            consumer_group.clone(),
            None,
            String::new(),
            *retry_times,
            String::new(),
        ),
        TraceRecord::SubAfter {
            cost_ms, success, ..
        } => (
            String::new(),
            *cost_ms,
            status(success),
            None,
            String::new(),
        ),
        TraceRecord::EndTransaction {
            producer_group,
            state,
            store_host,
            ..
        } => (
            producer_group.clone(),
            None,
            state.clone(),
            None,
            store_host.clone(),
        ),
    }
}

fn trace_line(record: &TraceRecord) -> String {
    let (group, cost, status, retry, host) = trace_columns(record);
    let show = |value: Option<i64>| value.map_or_else(String::new, |v| v.to_string());
    format!(
        "{:<15} {:<15} {:<32} {:<8} {:<8} {:<6} {}",
        record.kind(),
        show(record.timestamp_ms()),
        group,
        show(cost),
        status,
        show(retry),
        host
    )
}

fn trace_json(record: &TraceRecord) -> Object {
    let (group, cost, status, retry, host) = trace_columns(record);
    let mut object = Object::new();
    object.push(s("type"), s(record.kind()));
    object.push(s("msgId"), s(record.msg_id()));
    if let Some(at) = record.timestamp_ms() {
        object.push(s("timestamp"), Value::Int(at));
    }
    object.push(s("group"), s(group));
    if let Some(cost) = cost {
        object.push(s("costMs"), Value::Int(cost));
    }
    object.push(s("status"), s(status));
    if let Some(retry) = retry {
        object.push(s("retryTimes"), Value::Int(retry));
    }
    object.push(s("host"), s(host));
    object
}
