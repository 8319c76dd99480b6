//! `controller-status`: who leads the controllers, and each broker set's master, epochs and
//! SyncStateSet as the leader has them (mqadmin's `getControllerMetaData` and
//! `getSyncStateSet` in one).

use std::collections::BTreeSet;

use anyhow::{bail, Context};
use clap::Args;
use std::time::Duration;

use tidemark_client::controllers;
use tidemark_protocol::body::ReplicaIdentity;
use tidemark_remoting::RemotingClient;

use super::table::{Format, Table};
use super::{connect, Cluster};

const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Args)]
pub struct ControllerStatusArgs {
    /// The controllers, `host:port;host:port;…`.
    #[arg(long)]
    pub controllers: String,
    /// Broker sets to show (repeatable); without it, every broker name the name server knows.
    #[arg(short = 'b', long = "broker-name")]
    pub broker_names: Vec<String>,
    #[command(flatten)]
    pub cluster: Cluster,
    #[command(flatten)]
    pub format: Format,
}

pub async fn controller_status(args: ControllerStatusArgs) -> anyhow::Result<()> {
    let controllers: Vec<String> = args
        .controllers
        .split([';', ','])
        .map(str::trim)
        .filter(|addr| !addr.is_empty())
        .map(str::to_owned)
        .collect();
    if controllers.is_empty() {
        bail!("--controllers names no controller");
    }
    let broker_names = if args.broker_names.is_empty() {
        let admin = connect(&args.cluster).await?;
        let info = admin.cluster_info().await;
        admin.shutdown().await;
        let names: BTreeSet<String> = info
            .context("listing broker names at the name server (or give -b NAME)")?
            .broker_addr_table
            .into_keys()
            .collect();
        names.into_iter().collect()
    } else {
        args.broker_names.clone()
    };
    // Controllers are asked directly: with -b, no name server is needed.
    let client = RemotingClient::new(args.cluster.client_config()?.remoting(), None);
    let outcome = status(&client, &controllers, &broker_names).await;
    client.shutdown();
    let (leaders, replicas) = outcome?;
    leaders.print(args.format)?;
    if !args.format.json {
        println!();
    }
    replicas.print(args.format)
}

async fn status(
    client: &RemotingClient,
    controllers: &[String],
    broker_names: &[String],
) -> anyhow::Result<(Table, Table)> {
    let mut leaders = Table::new(&[
        ("Controller", "controller"),
        ("Leader", "leaderId"),
        ("LeaderAddr", "leaderAddr"),
        ("IsLeader", "isLeader"),
    ]);
    let answers = controllers::controller_metadata(client, controllers, CALL_TIMEOUT).await;
    for answer in &answers {
        match &answer.metadata {
            Some(header) => leaders.row(vec![
                (&answer.addr).into(),
                header
                    .controller_leader_id
                    .clone()
                    .unwrap_or_default()
                    .into(),
                header
                    .controller_leader_address
                    .clone()
                    .unwrap_or_default()
                    .into(),
                header.is_leader.into(),
            ]),
            None => leaders.row(vec![
                (&answer.addr).into(),
                "unreachable".into(),
                "".into(),
                false.into(),
            ]),
        }
    }
    let Some(leader) = controllers::controller_leader(&answers) else {
        bail!("no controller names a leader (is a majority of them up?)");
    };
    let info = controllers::sync_state_data(client, &leader, broker_names, CALL_TIMEOUT)
        .await
        .with_context(|| format!("asking the leader {leader} for the broker sets"))?;
    let mut replicas = Table::new(&[
        ("Broker Name", "brokerName"),
        ("BID", "brokerId"),
        ("Addr", "addr"),
        ("Role", "role"),
        ("Alive", "alive"),
        ("MasterEpoch", "masterEpoch"),
        ("SyncStateSetEpoch", "syncStateSetEpoch"),
    ]);
    for (name, set) in &info.replicas_info_table {
        let mut rows: Vec<(&ReplicaIdentity, &str)> = set
            .in_sync_replicas
            .iter()
            .map(|replica| {
                let role = if Some(replica.broker_id) == set.master_broker_id {
                    "master"
                } else {
                    "in sync"
                };
                (replica, role)
            })
            .chain(
                set.not_in_sync_replicas
                    .iter()
                    .map(|replica| (replica, "not in sync")),
            )
            .collect();
        rows.sort_by_key(|(replica, _)| replica.broker_id);
        for (replica, role) in rows {
            replicas.row(vec![
                name.into(),
                replica.broker_id.into(),
                (&replica.broker_address).into(),
                role.into(),
                replica.alive.unwrap_or(false).into(),
                i64::from(set.master_epoch).into(),
                i64::from(set.sync_state_set_epoch).into(),
            ]);
        }
    }
    Ok((leaders, replicas))
}
