//! `tidemark console`: the web console on its own, over a whole cluster — every broker set, the
//! controllers, each topic and group across brokers — reached through the name server, with
//! no broker in the same process.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tidemark_client::ClientConfig;
use tidemark_console::web::{split_addresses, ClusterSettings};
use tidemark_remoting::Credentials;

use crate::acl_args::{open_acl, ServerAclArgs};
use crate::serve::{announce, bind, shutdown_signal};
use crate::tls_args::ClientTlsArgs;

#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Name server address(es), `host:port[;host:port]`.
    #[arg(short = 'n', long, default_value = "127.0.0.1:9876", value_parser = crate::admin::addresses::name_servers)]
    pub namesrv: String,
    /// Where the console listens.
    #[arg(long, default_value = "127.0.0.1:8082")]
    pub listen: SocketAddr,
    /// The cluster new topics go to unless one broker set is chosen.
    #[arg(long, default_value = "DefaultCluster")]
    pub cluster: String,
    /// The controllers (`host:port;host:port;…`), to show who leads them (controller mode).
    #[arg(long)]
    pub controllers: Option<String>,
    /// Show everything, change nothing.
    #[arg(long)]
    pub read_only: bool,
    /// Operators sign in with accounts of the cluster's ACL file (`--acl-file`); the console
    /// samples its charts as `--acl-access-key`.
    #[command(flatten)]
    pub acl: ServerAclArgs,
    /// TLS of its connections to name servers and brokers: `--tls`.
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

pub async fn run(args: ConsoleArgs) -> anyhow::Result<()> {
    let mut client = ClientConfig::new(&args.namesrv);
    client.tls = args.tls.client_tls()?;
    if let Some((access_key, secret_key)) = args.acl.account() {
        client.credentials = Some(Credentials::new(access_key, secret_key));
    }
    let acl = open_acl(args.acl.acl_file.clone()).await?;
    let listener = bind(args.listen, "console").await?;
    let addr = listener.local_addr().context("console listener")?;
    let settings = ClusterSettings {
        client,
        cluster: args.cluster,
        controllers: args
            .controllers
            .as_deref()
            .map(split_addresses)
            .unwrap_or_default(),
        acl,
        read_only: args.read_only,
    };
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn(tidemark_console::serve_cluster(
        listener,
        settings,
        async move {
            let _ = stopped.wait_for(|stopped| *stopped).await;
        },
    ));
    announce(&format!(
        "tidemark console ready console=http://{addr}/ namesrv={}",
        args.namesrv
    ));
    let stop = Arc::new(stop);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    serving.await.context("console task")?.context("console")?;
    Ok(())
}
