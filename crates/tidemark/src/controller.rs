//! `tidemark controller`: one member of the Raft group that elects masters (RocketMQ 5's
//! controller mode).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use std::sync::Arc;

use tidemark_controller::{Controller, ControllerSettings};
use tidemark_remoting::{Credentials, ServerConfig};

use crate::acl_args::{open_acl, ServerAclArgs};
use crate::serve::{announce, bind, shutdown_signal};
use crate::tls_args::{ClientTlsArgs, ServerTlsArgs};

#[derive(Debug, Args)]
pub struct ControllerArgs {
    #[arg(long, default_value = "0.0.0.0:9878")]
    pub listen: SocketAddr,
    /// This controller's id: one of the ids in `--peers`.
    #[arg(long)]
    pub id: u64,
    /// Every controller, this one included: `1=host:port;2=host:port;3=host:port` (RocketMQ's
    /// `n1-host:port;n2-host:port` is read too). Brokers, tools and the other controllers reach
    /// each controller at its address here.
    #[arg(long)]
    pub peers: String,
    /// The Raft log and the state snapshot (default `./tidemark-controller-<id>`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// A broker whose heartbeats name no timeout is dead after this long without one.
    #[arg(long, default_value_t = 5_000)]
    pub broker_timeout_ms: u64,
    /// How often the leader looks for dead masters (a closed connection counts at once).
    #[arg(long, default_value_t = 500)]
    pub scan_interval_ms: u64,
    /// When no replica of the SyncStateSet is alive, elect any live replica (may lose
    /// acknowledged messages).
    #[arg(long)]
    pub unclean_election: bool,
    /// Serve Prometheus `/metrics` on this port of `--listen`'s address (off when not given).
    #[arg(long)]
    pub http_port: Option<u16>,
    #[command(flatten)]
    pub acl: ServerAclArgs,
    /// TLS of this controller's port.
    #[command(flatten)]
    pub tls: ServerTlsArgs,
    /// TLS of its own connections (to the other controllers and to brokers): `--tls`.
    #[command(flatten)]
    pub peer_tls: ClientTlsArgs,
}

/// Parses `--peers`.
pub fn parse_peers(text: &str) -> anyhow::Result<BTreeMap<u64, String>> {
    let mut peers = BTreeMap::new();
    for entry in text
        .split([';', ','])
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        let (id, addr) = entry
            .split_once('=')
            .or_else(|| {
                entry
                    .strip_prefix('n')
                    .and_then(|rest| rest.split_once('-'))
            })
            .with_context(|| format!("peer {entry:?} is not id=host:port"))?;
        let id: u64 = id
            .trim()
            .parse()
            .with_context(|| format!("peer {entry:?}: {id:?} is not a number"))?;
        let addr = addr.trim();
        if addr
            .rsplit_once(':')
            .is_none_or(|(_, port)| port.parse::<u16>().is_err())
        {
            bail!("peer {entry:?}: {addr:?} is not host:port");
        }
        if peers.insert(id, addr.to_owned()).is_some() {
            bail!("peer id {id} is listed twice");
        }
    }
    if peers.is_empty() {
        bail!("--peers lists no controller");
    }
    Ok(peers)
}

pub async fn run(args: ControllerArgs) -> anyhow::Result<()> {
    let peers = parse_peers(&args.peers)?;
    let data_dir = args
        .data_dir
        .unwrap_or_else(|| PathBuf::from(format!("tidemark-controller-{}", args.id)));
    let mut settings = ControllerSettings::new(args.id, peers, data_dir);
    settings.broker_timeout_default = Duration::from_millis(args.broker_timeout_ms.max(1));
    settings.scan_interval = Duration::from_millis(args.scan_interval_ms.max(10));
    settings.unclean_election = args.unclean_election;
    settings.client.tls = args.peer_tls.client_tls()?;
    if let Some((access_key, secret_key)) = args.acl.account() {
        settings.client.channel.signer = Some(Arc::new(Credentials::new(access_key, secret_key)));
    }
    let acl = open_acl(args.acl.acl_file.clone()).await?;
    let server = ServerConfig {
        tls: Some(
            args.tls
                .server_tls(vec![args.listen.ip().to_string()])
                .await?,
        ),
        ..ServerConfig::default()
    };
    let listener = bind(args.listen, "controller").await?;
    let http = match args.http_port {
        Some(port) => Some(bind(SocketAddr::new(args.listen.ip(), port), "--http-port").await?),
        None => None,
    };
    let controller = Controller::start(settings)
        .await
        .context("starting the controller")?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let metrics_addr = match &http {
        Some(listener) => {
            let addr = listener.local_addr().context("--http-port")?;
            format!(" metrics=http://{addr}/metrics")
        }
        None => String::new(),
    };
    let http_task = match http {
        Some(listener) => {
            let mut stopped = stopped.clone();
            Some(tokio::spawn(tidemark_console::controller::serve(
                listener,
                controller.clone(),
                async move {
                    let _ = stopped.wait_for(|stopped| *stopped).await;
                },
            )))
        }
        None => None,
    };
    announce(&format!(
        "tidemark controller ready listen={} id={}{metrics_addr}",
        args.listen, args.id
    ));
    let mut stopped = stopped;
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop.send(true);
    });
    tidemark_controller::serve(listener, controller.clone(), server, acl, async move {
        let _ = stopped.wait_for(|stopped| *stopped).await;
    })
    .await;
    controller.shutdown().await;
    if let Some(task) = http_task {
        task.await
            .context("metrics task")?
            .context("metrics endpoint")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_read_in_both_spellings() {
        let peers = parse_peers("1=127.0.0.1:9878; n2-127.0.0.1:9879,3=h:1").expect("peers");
        assert_eq!(peers.len(), 3);
        assert_eq!(peers[&2], "127.0.0.1:9879");
        assert!(parse_peers("1=host").is_err());
        assert!(parse_peers("x=h:1").is_err());
        assert!(parse_peers("1=h:1;1=h:2").is_err());
        assert!(parse_peers("").is_err());
    }
}
