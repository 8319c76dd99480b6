//! A group's dead letters and retries: `dead-letters` lists them, `dead-letter-resend` sends
//! some or all again (back to the group with a fresh retry count, or to their original
//! topics), `retry-replay` puts the consumed retry messages of one original topic back. The
//! two that send show what they would send first and go on as [`approve_shown`] says; each is
//! recorded in the group's progress history.

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use tidemark_client::{Admin, ResendRequest};
use tidemark_protocol::body::ResentMessages;

use super::groups::parse_time;
use super::history::utc_text;
use super::plan::{approve_shown, Approval};
use super::table::{Format, Table};
use super::{connect, Cluster};

#[derive(Debug, Args)]
pub struct DeadLettersArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    /// Only dead letters first sent to this topic.
    #[arg(short = 't', long)]
    pub topic: Option<String>,
    /// Only this broker's (offsets are each broker's own: page with --from).
    #[arg(short = 'b', long)]
    pub broker_name: Option<String>,
    /// The dead-letter queue offset to start from.
    #[arg(long)]
    pub from: Option<i64>,
    /// At most this many per broker (at most 1024).
    #[arg(long, default_value_t = 32)]
    pub max: i32,
    #[command(flatten)]
    pub format: Format,
}

pub async fn dead_letters(args: DeadLettersArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let found = admin
        .dead_letters(
            &args.group,
            args.topic.as_deref(),
            args.broker_name.as_deref(),
            args.from,
            Some(args.max),
        )
        .await;
    admin.shutdown().await;
    let found = found?;
    if found.is_empty() {
        bail!("no broker lists dead letters (Apache RocketMQ brokers do not)");
    }
    let mut table = Table::new(&[
        ("Broker", "brokerName"),
        ("Offset", "queueOffset"),
        ("Topic", "originalTopic"),
        ("Keys", "keys"),
        ("Tags", "tags"),
        ("Retried", "reconsumeTimes"),
        ("Born (UTC)", "born"),
        ("Died (UTC)", "died"),
        ("Size", "bodySize"),
        ("Message Id", "msgId"),
        ("Origin Id", "originMsgId"),
    ]);
    for broker in &found {
        for letter in &broker.messages {
            table.row(vec![
                broker.broker_name.clone().into(),
                letter.queue_offset.into(),
                letter.original_topic.clone().into(),
                letter.keys.clone().into(),
                letter.tags.clone().into(),
                letter.reconsume_times.into(),
                utc_text(letter.born_timestamp).into(),
                utc_text(letter.died_timestamp).into(),
                letter.body_size.into(),
                letter.msg_id.clone().into(),
                letter.origin_msg_id.clone().into(),
            ]);
        }
        if broker.next_offset < broker.max_offset {
            eprintln!(
                "{}: more from --from {} -b {}",
                broker.broker_name, broker.next_offset, broker.broker_name
            );
        }
    }
    table.print(args.format)
}

/// Where resent dead letters go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Destination {
    /// Back to the group through its retry topic, with a fresh retry count.
    Retry,
    /// To the topic each was first sent to: every group subscribed to it gets it.
    Origin,
}

#[derive(Debug, Args)]
pub struct ResendArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    /// Dead-letter queue offsets, comma-separated (`dead-letters` shows them; give -b with
    /// more than one master).
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "all",
        required_unless_present = "all"
    )]
    pub offsets: Option<Vec<i64>>,
    /// Every dead letter of the group (of -t/--topic only, if given).
    #[arg(long)]
    pub all: bool,
    /// With --all: only dead letters first sent to this topic.
    #[arg(short = 't', long, requires = "all")]
    pub topic: Option<String>,
    /// The broker whose dead letters --offsets names.
    #[arg(short = 'b', long)]
    pub broker_name: Option<String>,
    #[arg(long, value_enum, default_value = "retry")]
    pub to: Destination,
    #[command(flatten)]
    pub approval: Approval,
    #[command(flatten)]
    pub format: Format,
}

pub async fn resend(args: ResendArgs) -> anyhow::Result<()> {
    let mut request = ResendRequest {
        group: args.group.clone(),
        offsets: args.offsets.clone(),
        topic: args.topic.clone(),
        to_origin: args.to == Destination::Origin,
        dry_run: true,
    };
    let admin = connect(&args.cluster).await?;
    let outcome = send_again(&admin, &mut request, &args).await;
    admin.shutdown().await;
    outcome
}

async fn send_again(
    admin: &Admin,
    request: &mut ResendRequest,
    args: &ResendArgs,
) -> anyhow::Result<()> {
    let broker = args.broker_name.as_deref();
    let plan = admin.resend_dead_letters(request, broker).await?;
    if !worth_sending(&plan, "dead letters")? {
        return Ok(());
    }
    if args.to == Destination::Origin {
        eprintln!("note: every group subscribed to the original topics gets these messages");
    }
    if !approve_shown(true, args.approval, || sent_table(&plan).print(args.format))? {
        return Ok(());
    }
    request.dry_run = false;
    let sent = admin.resend_dead_letters(request, broker).await?;
    sent_table(&sent).print(args.format)
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    /// The topic whose retry messages are replayed (the others in the retry topic are not).
    #[arg(short = 't', long)]
    pub topic: String,
    /// Retry messages stored since: epoch ms, or a time before now (`-10m`, `-2h`, `-1d`).
    // A time before now starts with `-`: it is this option's value, not a flag.
    #[arg(long, allow_hyphen_values = true)]
    pub since: String,
    #[command(flatten)]
    pub approval: Approval,
    #[command(flatten)]
    pub format: Format,
}

pub async fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let since = parse_time(&args.since, tidemark_remoting::now_ms()).context("--since")?;
    let admin = connect(&args.cluster).await?;
    let outcome = replay_on(&admin, &args, since).await;
    admin.shutdown().await;
    outcome
}

async fn replay_on(admin: &Admin, args: &ReplayArgs, since: i64) -> anyhow::Result<()> {
    let plan = admin
        .replay_retries(&args.group, &args.topic, since, true)
        .await?;
    if !worth_sending(&plan, "consumed retry messages of that topic")? {
        return Ok(());
    }
    if !approve_shown(true, args.approval, || sent_table(&plan).print(args.format))? {
        return Ok(());
    }
    let sent = admin
        .replay_retries(&args.group, &args.topic, since, false)
        .await?;
    sent_table(&sent).print(args.format)
}

/// Whether a plan names anything to send; says why not otherwise.
fn worth_sending(plan: &[ResentMessages], what: &str) -> anyhow::Result<bool> {
    if plan.is_empty() {
        bail!("no broker can send {what} again (Apache RocketMQ brokers cannot)");
    }
    if plan.iter().all(|broker| broker.messages.is_empty()) {
        eprintln!("no {what} to send");
        return Ok(false);
    }
    Ok(true)
}

/// What would be sent or was: per message, where it sits and where it goes.
fn sent_table(brokers: &[ResentMessages]) -> Table {
    let mut table = Table::new(&[
        ("Broker", "brokerName"),
        ("From Offset", "sourceOffset"),
        ("Message Id", "msgId"),
        ("To", "topic"),
        ("Entry", "entry"),
    ]);
    for broker in brokers {
        for message in &broker.messages {
            table.row(vec![
                broker.broker_name.clone().into(),
                message.source_offset.into(),
                message.msg_id.clone().into(),
                message.topic.clone().into(),
                broker.entry.into(),
            ]);
        }
    }
    table
}
