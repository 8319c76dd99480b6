//! `tidemark admin progress-history`: who moved a group's committed offsets, when, from where
//! to where (Tidemark's TIDEMARK_GET_PROGRESS_HISTORY, from every master).

use anyhow::Context;
use clap::Args;
use tidemark_protocol::message::civil_from_days;

use super::groups::parse_time;
use super::table::{Format, Table};
use super::{connect, Cluster};

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[arg(short = 'g', long)]
    pub group: String,
    /// Only entries since: epoch ms, or a time before now (`-10m`, `-2h`, `-1d`).
    // A time before now starts with `-`: it is this option's value, not a flag.
    #[arg(long, allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Also the checkpoints of routine progress (one an interval for each queue that moved).
    #[arg(long)]
    pub checkpoints: bool,
    #[command(flatten)]
    pub format: Format,
}

pub async fn progress_history(args: HistoryArgs) -> anyhow::Result<()> {
    let since = match &args.since {
        Some(text) => Some(parse_time(text, tidemark_remoting::now_ms()).context("--since")?),
        None => None,
    };
    let admin = connect(&args.cluster).await?;
    let found = admin
        .progress_history(&args.group, since, args.checkpoints)
        .await;
    admin.shutdown().await;
    let mut table = Table::new(&[
        ("Broker", "brokerName"),
        ("Entry", "id"),
        ("Time (UTC)", "time"),
        ("Kind", "kind"),
        ("Account", "account"),
        ("Address", "address"),
        ("Topic", "topic"),
        ("QID", "queueId"),
        ("Before", "before"),
        ("After", "after"),
        ("Detail", "detail"),
    ]);
    for broker in found? {
        for entry in &broker.entries {
            // A change that moved no queue (a reset of a group with no offsets) still shows.
            let none = [None];
            let queues: Vec<_> = if entry.queues.is_empty() {
                none.to_vec()
            } else {
                entry.queues.iter().map(Some).collect()
            };
            for queue in queues {
                table.row(vec![
                    broker.broker_name.clone().into(),
                    entry.id.into(),
                    utc_text(entry.time_ms).into(),
                    entry.kind.clone().into(),
                    entry.account.clone().into(),
                    entry.address.clone().into(),
                    queue
                        .map_or(String::new(), |queue| queue.topic.clone())
                        .into(),
                    queue.map_or(-1, |queue| queue.queue_id).into(),
                    queue.map_or(-1, |queue| queue.before).into(),
                    queue.map_or(-1, |queue| queue.after).into(),
                    entry.detail.clone().unwrap_or_default().into(),
                ]);
            }
        }
    }
    table.print(args.format)
}

/// `2026-12-07T03:14:33.120Z` for epoch ms.
pub(super) fn utc_text(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_print_as_utc() {
        assert_eq!(super::utc_text(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::utc_text(1_796_612_145_074),
            "2026-12-07T02:55:45.074Z"
        );
    }
}
