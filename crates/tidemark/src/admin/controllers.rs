//! `controller-status`: who leads the controllers, and each broker set's master, epochs and
//! SyncStateSet as the leader has them (mqadmin's `getControllerMetaData` and
//! `getSyncStateSet` in one).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use tidemark_protocol::body::{BrokerReplicasInfo, ReplicaIdentity};
use tidemark_protocol::headers::GetMetaDataResponseHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
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
    let mut leader_addr = None;
    for controller in controllers {
        let answer = client
            .invoke(
                controller,
                RemotingCommand::request(RequestCode::ControllerGetMetadataInfo),
                CALL_TIMEOUT,
            )
            .await;
        let header = answer
            .ok()
            .filter(|response| response.response_code() == ResponseCode::Success)
            .and_then(|response| response.decode_header::<GetMetaDataResponseHeader>().ok());
        match header {
            Some(header) => {
                if header.is_leader || leader_addr.is_none() {
                    leader_addr = header
                        .controller_leader_address
                        .clone()
                        .filter(|addr| !addr.is_empty());
                }
                leaders.row(vec![
                    controller.into(),
                    header.controller_leader_id.unwrap_or_default().into(),
                    header.controller_leader_address.unwrap_or_default().into(),
                    header.is_leader.into(),
                ]);
            }
            None => leaders.row(vec![
                controller.into(),
                "unreachable".into(),
                "".into(),
                false.into(),
            ]),
        }
    }
    let Some(leader) = leader_addr else {
        bail!("no controller names a leader (is a majority of them up?)");
    };
    let response = client
        .invoke(
            &leader,
            RemotingCommand::request(RequestCode::ControllerGetSyncStateData)
                .with_body(broker_names.to_vec().to_json_bytes()),
            CALL_TIMEOUT,
        )
        .await
        .with_context(|| format!("asking the leader {leader} for the broker sets"))?;
    if response.response_code() != ResponseCode::Success {
        bail!(
            "the leader {leader} answered {}: {}",
            response.response_code(),
            response.remark.unwrap_or_default()
        );
    }
    let info = BrokerReplicasInfo::from_json_bytes(&response.body)
        .with_context(|| format!("the leader {leader}'s answer"))?;
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
