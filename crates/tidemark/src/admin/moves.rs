//! Moving a group's progress: `reset-offset-by-time`, `skip-accumulated`, `clone-offset`. Each
//! shows its plan first (TIDEMARK_PLAN_PROGRESS_MOVE, worked out by the brokers with the code
//! the move runs) and goes on as [`approve`] says; the move itself is RocketMQ's request, so
//! mqadmin's moves and these are the same to a broker (and both are in its history).

use anyhow::{bail, Context};
use clap::Args;
use tidemark_client::{Admin, ProgressMove};
use tidemark_protocol::json::{Object, Value};

use super::groups::parse_time;
use super::plan::{approve, Approval};
use super::table::{print_outcome, Format, Table};
use super::{connect, Cluster};

#[derive(Debug, Args)]
pub struct ResetArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    #[arg(short = 't', long)]
    pub topic: String,
    /// Where to: `now`, epoch ms, or a time before now (`-10m`, `-2h`, `-1d`).
    // A time before now starts with `-`: it is this option's value, not a flag.
    #[arg(short = 's', long, allow_hyphen_values = true)]
    pub timestamp: String,
    /// Only ever move the group backwards (a queue already before the time stays).
    #[arg(long)]
    pub backwards_only: bool,
    #[command(flatten)]
    pub approval: Approval,
    #[command(flatten)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct SkipArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    #[arg(short = 't', long)]
    pub topic: String,
    #[command(flatten)]
    pub approval: Approval,
    #[command(flatten)]
    pub format: Format,
}

pub async fn reset_offset_by_time(args: ResetArgs) -> anyhow::Result<()> {
    let at = parse_time(&args.timestamp, tidemark_remoting::now_ms()).context("-s/--timestamp")?;
    move_group(
        &args.cluster,
        &args.group,
        &args.topic,
        at,
        !args.backwards_only,
        args.approval,
        args.format,
    )
    .await
}

pub async fn skip_accumulated(args: SkipArgs) -> anyhow::Result<()> {
    // −1: the end of every queue (RocketMQ's skipAccumulatedMessage).
    move_group(
        &args.cluster,
        &args.group,
        &args.topic,
        -1,
        true,
        args.approval,
        args.format,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn move_group(
    cluster: &Cluster,
    group: &str,
    topic: &str,
    at_ms: i64,
    force: bool,
    approval: Approval,
    format: Format,
) -> anyhow::Result<()> {
    let admin = connect(cluster).await?;
    let outcome = reset(&admin, group, topic, at_ms, force, approval, format).await;
    admin.shutdown().await;
    outcome
}

async fn reset(
    admin: &Admin,
    group: &str,
    topic: &str,
    at_ms: i64,
    force: bool,
    approval: Approval,
    format: Format,
) -> anyhow::Result<()> {
    let movement = ProgressMove::Reset {
        topic: topic.to_owned(),
        timestamp_ms: at_ms,
        force,
    };
    let plans = admin.plan_progress_move(group, &movement).await?;
    if !approve(&plans, approval, format)? {
        return Ok(());
    }
    let moved = admin
        .reset_offset_by_timestamp(topic, group, at_ms, force)
        .await?;
    let mut table = Table::new(&[
        ("Broker", "brokerName"),
        ("QID", "queueId"),
        ("Offset", "offset"),
    ]);
    for (queue, offset) in moved {
        table.row(vec![
            queue.broker_name.into(),
            queue.queue_id.into(),
            offset.into(),
        ]);
    }
    table.print(format)
}

#[derive(Debug, Args)]
pub struct CloneArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    /// The group whose offsets are copied.
    #[arg(short = 's', long)]
    pub src_group: String,
    /// The group that gets them.
    #[arg(short = 'd', long)]
    pub dest_group: String,
    /// Only this topic (default: every topic the source group has offsets for).
    #[arg(short = 't', long)]
    pub topic: Option<String>,
    /// Also topics the online source group does not subscribe.
    #[arg(short = 'o', long)]
    pub offline: bool,
    #[command(flatten)]
    pub approval: Approval,
    #[command(flatten)]
    pub format: Format,
}

pub async fn clone_offset(args: CloneArgs) -> anyhow::Result<()> {
    if args.src_group == args.dest_group {
        bail!("the source and destination groups are the same");
    }
    let admin = connect(&args.cluster).await?;
    let outcome = clone(&admin, &args).await;
    admin.shutdown().await;
    let Some(brokers) = outcome? else {
        return Ok(());
    };
    let mut object = Object::new();
    object.push(s("srcGroup"), s(&args.src_group));
    object.push(s("destGroup"), s(&args.dest_group));
    object.push(s("brokers"), Value::Array(brokers.iter().map(s).collect()));
    print_outcome(
        args.format,
        &format!(
            "offsets of {} cloned to {} on {}",
            args.src_group,
            args.dest_group,
            brokers.join(", ")
        ),
        object,
    )
}

/// The clone's plan, then the clone if approved; `None` when it was not applied.
async fn clone(admin: &Admin, args: &CloneArgs) -> anyhow::Result<Option<Vec<String>>> {
    let movement = ProgressMove::Clone {
        src_group: args.src_group.clone(),
        topic: args.topic.clone(),
        offline: args.offline,
    };
    let plans = admin
        .plan_progress_move(&args.dest_group, &movement)
        .await?;
    if !approve(&plans, args.approval, args.format)? {
        return Ok(None);
    }
    let brokers = admin
        .clone_group_offset(
            &args.src_group,
            &args.dest_group,
            args.topic.as_deref(),
            args.offline,
        )
        .await?;
    Ok(Some(brokers))
}

fn s(text: impl AsRef<str>) -> Value {
    Value::String(text.as_ref().to_owned())
}
