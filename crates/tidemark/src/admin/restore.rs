//! `tidemark admin progress-restore`: puts a group back where the progress history says it
//! stood at a time (`--at`) or before one of its entries (`--undo`). The plan — each queue's
//! offset now, where it goes, how many messages that replays or skips — is shown first; on a
//! terminal the command asks before applying it, `--yes` applies it without asking and
//! `--dry-run` only shows it.

use super::groups::parse_time;
use super::plan::{approve, table, Approval};
use super::table::Format;
use super::{connect, Cluster};
use anyhow::{bail, Context};
use clap::Args;
use tidemark_client::RestoreRequest;

#[derive(Debug, Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    /// Only this topic's queues (default: every topic the history names for the group).
    #[arg(short = 't', long)]
    pub topic: Option<String>,
    /// Where the group stood then: epoch ms, or a time before now (`-10m`, `-2h`, `-1d`).
    // A time before now starts with `-`: it is this option's value, not a flag.
    #[arg(
        long,
        allow_hyphen_values = true,
        conflicts_with = "undo",
        required_unless_present = "undo"
    )]
    pub at: Option<String>,
    /// Where each queue stood before this history entry (`progress-history` shows the ids;
    /// they are each broker's own, so give -b/--broker-name with more than one master).
    #[arg(long)]
    pub undo: Option<i64>,
    /// The broker whose history entry --undo names.
    #[arg(short = 'b', long)]
    pub broker_name: Option<String>,
    #[command(flatten)]
    pub approval: Approval,
    #[command(flatten)]
    pub format: Format,
}

pub async fn progress_restore(args: RestoreArgs) -> anyhow::Result<()> {
    let at_ms = match &args.at {
        Some(text) => Some(parse_time(text, tidemark_remoting::now_ms()).context("--at")?),
        None => None,
    };
    let mut request = RestoreRequest {
        group: args.group.clone(),
        topic: args.topic.clone(),
        at_ms,
        undo_entry: args.undo,
        dry_run: true,
    };
    let admin = connect(&args.cluster).await?;
    let outcome = restore(&admin, &mut request, &args).await;
    admin.shutdown().await;
    outcome
}

async fn restore(
    admin: &tidemark_client::Admin,
    request: &mut RestoreRequest,
    args: &RestoreArgs,
) -> anyhow::Result<()> {
    let broker = args.broker_name.as_deref();
    if request.undo_entry.is_some() && broker.is_none() && admin.masters(None).await?.len() > 1 {
        bail!("--undo names one broker's entry: give -b/--broker-name (progress-history shows it)");
    }
    let plan = admin.restore_progress(request, broker).await?;
    if plan.is_empty() {
        bail!("no broker keeps a progress history (Apache RocketMQ brokers do not)");
    }
    if !approve(&plan, args.approval, args.format)? {
        return Ok(());
    }
    request.dry_run = false;
    let applied = admin.restore_progress(request, broker).await?;
    table(&applied).print(args.format)
}
