//! `cluster-list`, `broker-status` and `broker-config get|set`: the brokers as the name server
//! lists them, what each reports about itself, and its configuration.

use anyhow::bail;
use clap::{Args, Subcommand};
use tidemark_client::{Admin, BrokerMaster};
use tidemark_protocol::json::{Object, Value};

use super::table::{print_outcome, Format, Table};
use super::{connect, Cluster};

/// Which brokers a command acts on: one by address, or the masters of a cluster.
#[derive(Debug, Args)]
pub struct Target {
    /// A broker's address, `host:port`.
    #[arg(short = 'b', long = "broker-addr", value_parser = super::addresses::host_port)]
    pub broker_addr: Option<String>,
    /// Every master of this cluster.
    #[arg(short = 'c', long = "cluster")]
    pub cluster_name: Option<String>,
}

impl Target {
    /// The brokers named; with neither option, every master when `all_by_default`.
    pub async fn resolve(
        &self,
        admin: &Admin,
        all_by_default: bool,
    ) -> anyhow::Result<Vec<BrokerMaster>> {
        match (&self.broker_addr, &self.cluster_name) {
            (Some(_), Some(_)) => bail!("give -b ADDR or -c CLUSTER, not both"),
            (Some(addr), None) => {
                // Named as the name server knows it, when it does.
                let known = admin.masters(None).await.unwrap_or_default();
                Ok(vec![known
                    .into_iter()
                    .find(|master| &master.addr == addr)
                    .unwrap_or_else(|| BrokerMaster {
                        cluster: String::new(),
                        broker_name: addr.clone(),
                        addr: addr.clone(),
                    })])
            }
            (None, Some(cluster)) => {
                let masters = admin.masters(Some(cluster)).await?;
                if masters.is_empty() {
                    bail!("cluster {cluster:?} has no master online");
                }
                Ok(masters)
            }
            (None, None) if all_by_default => {
                let masters = admin.masters(None).await?;
                if masters.is_empty() {
                    bail!("the name server lists no broker master");
                }
                Ok(masters)
            }
            (None, None) => bail!("say which brokers: -b ADDR or -c CLUSTER"),
        }
    }
}

#[derive(Debug, Args)]
pub struct ClusterListArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    /// Only this cluster.
    #[arg(short = 'c', long = "cluster")]
    pub cluster_name: Option<String>,
    #[command(flatten)]
    pub format: Format,
}

/// The first of a `putTps`-style value's figures (the last 10 s's rate).
fn first_figure(value: Option<&String>) -> f64 {
    value
        .and_then(|text| text.split_whitespace().next())
        .and_then(|figure| figure.parse().ok())
        .unwrap_or(0.0)
}

pub async fn cluster_list(args: ClusterListArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let outcome = async {
        let info = admin.cluster_info().await?;
        let mut table = Table::new(&[
            ("Cluster Name", "cluster"),
            ("Broker Name", "brokerName"),
            ("BID", "brokerId"),
            ("Addr", "addr"),
            ("Version", "version"),
            ("InTPS", "inTps"),
            ("OutTPS", "outTps"),
            ("InTotalToday", "inTotalToday"),
            ("OutTotalToday", "outTotalToday"),
            ("Role", "role"),
            ("Epoch", "epoch"),
            ("SyncStateSet", "syncStateSet"),
        ]);
        for (cluster, brokers) in &info.cluster_addr_table {
            if args
                .cluster_name
                .as_ref()
                .is_some_and(|wanted| wanted != cluster)
            {
                continue;
            }
            let mut brokers = brokers.clone();
            brokers.sort();
            for broker_name in brokers {
                let Some(data) = info.broker_addr_table.get(&broker_name) else {
                    continue;
                };
                for (id, addr) in &data.broker_addrs {
                    // A broker that does not answer is listed with what the name server knows.
                    let runtime = admin.broker_runtime_info(addr).await.unwrap_or_default();
                    let total = |key: &str| {
                        runtime
                            .get(key)
                            .and_then(|value| value.parse::<i64>().ok())
                            .unwrap_or(0)
                    };
                    table.row(vec![
                        cluster.into(),
                        (&broker_name).into(),
                        (*id).into(),
                        addr.into(),
                        runtime
                            .get("brokerVersionDesc")
                            .cloned()
                            .unwrap_or_else(|| "-".to_owned())
                            .into(),
                        first_figure(runtime.get("putTps")).into(),
                        first_figure(
                            runtime
                                .get("getTransferredTps")
                                .or_else(|| runtime.get("getTransferedTps")),
                        )
                        .into(),
                        total("msgPutTotalTodayNow").into(),
                        total("msgGetTotalTodayNow").into(),
                        if *id == 0 { "master" } else { "slave" }.into(),
                        total("masterEpoch").into(),
                        runtime
                            .get("syncStateSet")
                            .cloned()
                            .unwrap_or_else(|| "-".to_owned())
                            .into(),
                    ]);
                }
            }
        }
        anyhow::Ok(table)
    }
    .await;
    admin.shutdown().await;
    outcome?.print(args.format)
}

#[derive(Debug, Args)]
pub struct BrokerStatusArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[command(flatten)]
    pub target: Target,
    #[command(flatten)]
    pub format: Format,
}

pub async fn broker_status(args: BrokerStatusArgs) -> anyhow::Result<()> {
    let admin = connect(&args.cluster).await?;
    let outcome = async {
        let mut table = Table::new(&[("Broker", "broker"), ("Key", "key"), ("Value", "value")]);
        for broker in args.target.resolve(&admin, true).await? {
            for (key, value) in admin.broker_runtime_info(&broker.addr).await? {
                table.row(vec![(&broker.addr).into(), key.into(), value.into()]);
            }
        }
        anyhow::Ok(table)
    }
    .await;
    admin.shutdown().await;
    outcome?.print(args.format)
}

#[derive(Debug, Subcommand)]
pub enum BrokerConfigCommand {
    /// Every key of the brokers' configuration.
    Get(BrokerConfigGetArgs),
    /// Changes one key on the brokers, live (the broker refuses keys it cannot change running).
    Set(BrokerConfigSetArgs),
}

#[derive(Debug, Args)]
pub struct BrokerConfigGetArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[command(flatten)]
    pub target: Target,
    /// Only this key.
    #[arg(short = 'k', long)]
    pub key: Option<String>,
    #[command(flatten)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct BrokerConfigSetArgs {
    #[command(flatten)]
    pub cluster: Cluster,
    #[command(flatten)]
    pub target: Target,
    #[arg(short = 'k', long)]
    pub key: String,
    /// The new value, as the broker's config file would spell it.
    // The broker judges the value (a negative number included), not the command line.
    #[arg(short = 'v', long, allow_hyphen_values = true)]
    pub value: String,
    #[command(flatten)]
    pub format: Format,
}

pub async fn broker_config(command: BrokerConfigCommand) -> anyhow::Result<()> {
    match command {
        BrokerConfigCommand::Get(args) => {
            let admin = connect(&args.cluster).await?;
            let outcome = async {
                let mut table =
                    Table::new(&[("Broker", "broker"), ("Key", "key"), ("Value", "value")]);
                for broker in args.target.resolve(&admin, true).await? {
                    for (key, value) in admin.broker_config(&broker.addr).await? {
                        if args.key.as_ref().is_none_or(|wanted| *wanted == key) {
                            table.row(vec![(&broker.addr).into(), key.into(), value.into()]);
                        }
                    }
                }
                if table.is_empty() {
                    if let Some(key) = &args.key {
                        bail!("no broker has a configuration key {key:?}");
                    }
                }
                anyhow::Ok(table)
            }
            .await;
            admin.shutdown().await;
            outcome?.print(args.format)
        }
        BrokerConfigCommand::Set(args) => {
            let admin = connect(&args.cluster).await?;
            let outcome = async {
                let brokers = args.target.resolve(&admin, false).await?;
                for broker in &brokers {
                    admin
                        .update_broker_config(&broker.addr, &args.key, &args.value)
                        .await?;
                }
                anyhow::Ok(brokers)
            }
            .await;
            admin.shutdown().await;
            let brokers = outcome?;
            let addrs: Vec<String> = brokers.iter().map(|broker| broker.addr.clone()).collect();
            let mut object = Object::new();
            object.push(Value::String("key".into()), Value::String(args.key.clone()));
            object.push(
                Value::String("value".into()),
                Value::String(args.value.clone()),
            );
            object.push(
                Value::String("brokers".into()),
                Value::Array(addrs.iter().cloned().map(Value::String).collect()),
            );
            print_outcome(
                args.format,
                &format!("{} = {} set on {}", args.key, args.value, addrs.join(", ")),
                object,
            )
        }
    }
}
