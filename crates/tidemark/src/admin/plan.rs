//! The plan every command that moves a group's progress shows first — per queue, the committed
//! offset now, where it goes, and how many messages that replays or skips — and the one rule
//! for going on: `--dry-run` only shows it, `--yes` applies it, a terminal is asked, anything
//! else is refused (a script must say `--yes`).

use std::io::{BufRead, IsTerminal, Write};

use anyhow::bail;
use clap::Args;
use tidemark_protocol::body::ProgressPlan;

use super::table::{Format, Table};

/// `--dry-run` and `--yes`, shared by every command that moves progress.
#[derive(Debug, Args, Clone, Copy)]
pub struct Approval {
    /// Only show the plan.
    #[arg(long)]
    pub dry_run: bool,
    /// Apply without asking.
    #[arg(short = 'y', long)]
    pub yes: bool,
}

/// Shows `plans` as `approval` says and tells whether to apply them. No plan at all means
/// brokers that cannot plan (Apache's): the move can still be applied, but only knowingly.
pub fn approve(plans: &[ProgressPlan], approval: Approval, format: Format) -> anyhow::Result<bool> {
    if plans.iter().any(|plan| plan.broadcasting == Some(true)) {
        eprintln!(
            "note: the group's online consumers broadcast: each keeps its own offsets, which \
             this does not move (only the broker's copy)"
        );
    }
    approve_shown(!plans.is_empty(), approval, || table(plans).print(format))
}

/// The rule itself, for any plan: `show` prints it (when there is one, `planned`).
pub fn approve_shown(
    planned: bool,
    approval: Approval,
    show: impl Fn() -> anyhow::Result<()>,
) -> anyhow::Result<bool> {
    if !planned {
        eprintln!("no plan: the brokers cannot work one out (Apache RocketMQ brokers do not)");
    }
    if approval.dry_run {
        if planned {
            show()?;
        }
        return Ok(false);
    }
    if approval.yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        bail!(
            "not applied: give --yes to apply it without asking, or --dry-run to only see the plan"
        );
    }
    if planned {
        show()?;
    }
    if !confirmed(planned)? {
        bail!("not applied");
    }
    Ok(true)
}

fn confirmed(planned: bool) -> anyhow::Result<bool> {
    let mut out = std::io::stderr();
    if planned {
        write!(out, "Move these queues? [y/N] ")?;
    } else {
        write!(out, "Move the group without a plan? [y/N] ")?;
    }
    out.flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// A plan, or what was applied: per queue, now → target and what that means.
pub fn table(plans: &[ProgressPlan]) -> Table {
    let mut table = Table::new(&[
        ("Broker", "brokerName"),
        ("Topic", "topic"),
        ("QID", "queueId"),
        ("Current", "current"),
        ("Target", "target"),
        ("Change", "change"),
        ("Applied", "applied"),
        ("Entry", "entry"),
    ]);
    for plan in plans {
        for line in &plan.queues {
            table.row(vec![
                plan.broker_name.clone().into(),
                line.topic.clone().into(),
                line.queue_id.into(),
                line.current.into(),
                line.target.into(),
                line.effect().into(),
                plan.applied.into(),
                plan.entry.into(),
            ]);
        }
    }
    table
}
