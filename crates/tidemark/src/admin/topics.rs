//! `topic-list`, `topic-route`, `topic-create` and `topic-delete` (`topic-status` is in the
//! progress commands).

use std::collections::BTreeMap;

use anyhow::bail;
use clap::Args;
use tidemark_protocol::body::{perm, TopicConfig, TopicFilterType};
use tidemark_protocol::json::{Object, Value};

use super::cluster::Target;
use super::table::{print_outcome, Format, Table};
use super::{connect, Cluster};

#[derive(Debug, Args)]
pub struct TopicListArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[command(flatten)]
    pub format: Format,
}

pub async fn topic_list(args: TopicListArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let topics = admin.topic_list().await;
    admin.shutdown().await;
    let mut table = Table::new(&[("Topic", "topic")]);
    for topic in topics? {
        table.row(vec![topic.into()]);
    }
    table.print(args.format)
}

#[derive(Debug, Args)]
pub struct TopicRouteArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 't', long)]
    pub topic: String,
    #[command(flatten)]
    pub format: Format,
}

/// `RW`, `R-`, `-W` or `--` for a permission.
fn perm_text(bits: i32) -> String {
    format!(
        "{}{}",
        if perm::is_readable(bits) { 'R' } else { '-' },
        if perm::is_writeable(bits) { 'W' } else { '-' }
    )
}

pub async fn topic_route(args: TopicRouteArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let route = admin.topic_route(&args.topic).await;
    admin.shutdown().await;
    let Some(route) = route? else {
        bail!("the name server has no route for topic {:?}", args.topic);
    };
    let mut table = Table::new(&[
        ("Broker Name", "brokerName"),
        ("BID", "brokerId"),
        ("Addr", "addr"),
        ("Read Queues", "readQueueNums"),
        ("Write Queues", "writeQueueNums"),
        ("Perm", "perm"),
    ]);
    for broker in &route.broker_datas {
        let queues = route
            .queue_datas
            .iter()
            .find(|data| data.broker_name == broker.broker_name);
        for (id, addr) in &broker.broker_addrs {
            table.row(vec![
                (&broker.broker_name).into(),
                (*id).into(),
                addr.into(),
                queues.map_or(0, |data| data.read_queue_nums).into(),
                queues.map_or(0, |data| data.write_queue_nums).into(),
                perm_text(queues.map_or(0, |data| data.perm)).into(),
            ]);
        }
    }
    table.print(args.format)
}

#[derive(Debug, Args)]
pub struct TopicCreateArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[command(flatten)]
    pub target: Target,
    #[arg(short = 't', long)]
    pub topic: String,
    // Negative numbers reach `topic_create`'s checks, which say what is allowed.
    #[arg(short = 'r', long, default_value_t = 8, allow_negative_numbers = true)]
    pub read_queues: i32,
    #[arg(short = 'w', long, default_value_t = 8, allow_negative_numbers = true)]
    pub write_queues: i32,
    /// Permission bits: 6 read and write, 4 read only, 2 write only.
    #[arg(
        short = 'p',
        long,
        default_value_t = perm::READ | perm::WRITE,
        allow_negative_numbers = true
    )]
    pub perm: i32,
    /// Messages of one sharding key stay in order (an orderly topic).
    #[arg(short = 'o', long)]
    pub order: bool,
    /// RocketMQ 5 topic attributes as mqadmin's `-a` takes them: `+key=value`, comma-separated,
    /// e.g. `+message.type=FIFO` (NORMAL, FIFO, DELAY, TRANSACTION or MIXED), which 5.x
    /// producers are held to.
    #[arg(short = 'a', long, value_name = "+KEY=VALUE,...")]
    pub attributes: Option<String>,
    #[command(flatten)]
    pub format: Format,
}

/// `+key=value,+key=value` into a map; creating a topic only sets attributes, so a `-key`
/// (mqadmin's removal) or anything else is refused rather than ignored.
fn parse_attributes(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut attributes = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((key, value)) = entry.strip_prefix('+').and_then(|e| e.split_once('=')) else {
            bail!("attribute {entry:?} is not +key=value (e.g. +message.type=FIFO)");
        };
        if key.is_empty() || value.is_empty() {
            bail!("attribute {entry:?} has an empty key or value");
        }
        attributes.insert(key.to_owned(), value.to_owned());
    }
    Ok(attributes)
}

pub async fn topic_create(args: TopicCreateArgs) -> anyhow::Result<()> {
    for (name, value) in [("read", args.read_queues), ("write", args.write_queues)] {
        if !(1..=1024).contains(&value) {
            bail!("{name} queues must be 1 to 1024, not {value}");
        }
    }
    if args.perm & !(perm::READ | perm::WRITE | perm::INHERIT) != 0 {
        bail!(
            "perm takes the bits 2 (write), 4 (read) and 1 (inherit), not {}",
            args.perm
        );
    }
    let attributes = match &args.attributes {
        Some(text) => Some(parse_attributes(text)?).filter(|a| !a.is_empty()),
        None => None,
    };
    let admin = connect(&args.cluster).await?;
    let outcome = async {
        let brokers = args.target.resolve(&admin, false).await?;
        let config = TopicConfig {
            topic_name: args.topic.clone(),
            read_queue_nums: args.read_queues,
            write_queue_nums: args.write_queues,
            perm: args.perm,
            order: args.order,
            topic_filter_type: TopicFilterType::SingleTag,
            attributes: attributes.clone(),
            ..TopicConfig::default()
        };
        for broker in &brokers {
            admin.create_topic(&broker.addr, &config).await?;
        }
        anyhow::Ok(brokers)
    }
    .await;
    admin.shutdown().await;
    let brokers = outcome?;
    let addrs: Vec<String> = brokers.iter().map(|broker| broker.addr.clone()).collect();
    let mut object = Object::new();
    object.push(s("topic"), s(&args.topic));
    object.push(s("readQueueNums"), Value::Int(i64::from(args.read_queues)));
    object.push(
        s("writeQueueNums"),
        Value::Int(i64::from(args.write_queues)),
    );
    object.push(s("perm"), Value::Int(i64::from(args.perm)));
    let mut attribute_object = Object::new();
    let mut attribute_text = String::new();
    for (key, value) in attributes.iter().flatten() {
        attribute_object.push(s(key), s(value));
        attribute_text.push_str(&format!(", {key}={value}"));
    }
    object.push(s("attributes"), Value::Object(attribute_object));
    object.push(s("brokers"), Value::Array(addrs.iter().map(s).collect()));
    print_outcome(
        args.format,
        &format!(
            "topic {} created or updated on {} ({} read / {} write queues, {}{attribute_text})",
            args.topic,
            addrs.join(", "),
            args.read_queues,
            args.write_queues,
            perm_text(args.perm)
        ),
        object,
    )
}

#[derive(Debug, Args)]
pub struct TopicDeleteArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    /// The cluster whose masters drop the topic (then the name servers forget it).
    #[arg(short = 'c', long = "cluster")]
    pub cluster_name: String,
    #[arg(short = 't', long)]
    pub topic: String,
    #[command(flatten)]
    pub format: Format,
}

pub async fn topic_delete(args: TopicDeleteArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let outcome = admin.delete_topic(&args.cluster_name, &args.topic).await;
    admin.shutdown().await;
    let brokers = outcome?;
    let addrs: Vec<String> = brokers.iter().map(|broker| broker.addr.clone()).collect();
    let mut object = Object::new();
    object.push(s("topic"), s(&args.topic));
    object.push(s("brokers"), Value::Array(addrs.iter().map(s).collect()));
    print_outcome(
        args.format,
        &format!(
            "topic {} deleted from {} and the name servers",
            args.topic,
            if addrs.is_empty() {
                "no broker".to_owned()
            } else {
                addrs.join(", ")
            }
        ),
        object,
    )
}

fn s(text: impl AsRef<str>) -> Value {
    Value::String(text.as_ref().to_owned())
}

#[cfg(test)]
mod tests {
    use super::parse_attributes;

    #[test]
    fn attributes_are_plus_key_equals_value() {
        let parsed = parse_attributes("+message.type=FIFO, +queue.type=SimpleCQ").expect("parsed");
        assert_eq!(parsed.get("message.type").map(String::as_str), Some("FIFO"));
        assert_eq!(
            parsed.get("queue.type").map(String::as_str),
            Some("SimpleCQ")
        );
        assert!(parse_attributes("").expect("empty").is_empty());
        for bad in [
            "message.type=FIFO",
            "-message.type",
            "+message.type",
            "+=FIFO",
            "+k=",
        ] {
            assert!(parse_attributes(bad).is_err(), "{bad} accepted");
        }
    }
}
