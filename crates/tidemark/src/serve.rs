//! `tidemark dev`, `tidemark namesrv` and `tidemark broker`: the servers, with graceful
//! shutdown on SIGINT/SIGTERM.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use tidemark_broker::{Broker, BrokerConfig};
use tidemark_namesrv::{NameServer, NameServerConfig};
use tidemark_protocol::body::ClusterInfo;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode};
use tidemark_remoting::tls::{ClientTls, TlsMode};
use tidemark_remoting::{ClientConfig, RemotingClient};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::acl_args::{open_acl, ServerAclArgs};
use crate::tls_args::ServerTlsArgs;

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Where the broker keeps its store and config files.
    #[arg(long, default_value = "./tidemark-data")]
    pub data_dir: PathBuf,
    /// Address both servers bind to (and the broker advertises).
    #[arg(long, default_value = "127.0.0.1")]
    pub listen_ip: IpAddr,
    #[arg(long, default_value_t = 9876)]
    pub namesrv_port: u16,
    /// The broker's port; it also serves `port - 2` (VIP channel).
    #[arg(long, default_value_t = 10911)]
    pub broker_port: u16,
    /// RocketMQ 5's gRPC port (what 5.x clients' endpoints name; TLS or plaintext); 0: none.
    #[arg(long, default_value_t = 8081)]
    pub grpc_port: u16,
    /// Threads serving the gRPC port; 0: one per CPU core, at most 8.
    #[arg(long, default_value_t = 0)]
    pub grpc_threads: usize,
    /// The metrics endpoint's HTTP port (`/metrics`); 0: none. If it is taken, `tidemark dev`
    /// runs without it and says so.
    #[arg(long, default_value_t = 8082)]
    pub http_port: u16,
    /// The web console on the HTTP port shows but changes nothing.
    #[arg(long)]
    pub console_read_only: bool,
    /// Acknowledge sends only after fsync.
    #[arg(long)]
    pub sync_flush: bool,
    /// Connections the broker serves at once on each port (more wait in the listen backlog).
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,
    /// Delay of each level (RocketMQ's messageDelayLevel), e.g. "1s 5s 10s 30s 1m".
    #[arg(
        long,
        default_value = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    )]
    pub message_delay_level: String,
    /// How often unresolved transactional (half) messages are checked back with their
    /// producers, ms (RocketMQ's transactionCheckInterval).
    #[arg(long, default_value_t = 60_000)]
    pub transaction_check_interval_ms: u64,
    /// How old a half message must be before its first check-back, ms (RocketMQ's
    /// transactionTimeOut).
    #[arg(long, default_value_t = 6_000)]
    pub transaction_timeout_ms: u64,
    #[command(flatten)]
    pub acl: ServerAclArgs,
    #[command(flatten)]
    pub tls: ServerTlsArgs,
}

#[derive(Debug, Args)]
pub struct NamesrvArgs {
    #[arg(long, default_value = "0.0.0.0:9876")]
    pub listen: SocketAddr,
    /// Check every request against this ACL file (RocketMQ's `plain_acl.yml`), re-read when it
    /// changes: reading routes needs a known account or a white-listed address, changing them
    /// (broker registration included) an admin account.
    #[arg(long)]
    pub acl_file: Option<PathBuf>,
    #[command(flatten)]
    pub tls: ServerTlsArgs,
}

/// Opens an ACL file off the async threads.
#[derive(Debug, Args)]
pub struct BrokerArgs {
    /// Config file: TOML, or RocketMQ's broker.conf (Java properties).
    #[arg(short = 'c', long)]
    pub config: Option<PathBuf>,
    /// Name servers, `host:port;host:port` (overrides the file's namesrvAddr).
    #[arg(short = 'n', long)]
    pub namesrv: Option<String>,
}

/// The one line on standard output that scripts wait for; a closed stdout is not an error.
pub(crate) fn announce(line: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// Resolves on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

pub(crate) async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} ({what})"))
}

/// `with_ha`: a standalone broker (`tidemark broker`) serves the HA port and announces itself;
/// `tidemark dev` has no slaves and announces itself once both servers are up. `http`: the
/// metrics endpoint's listener, bound by the caller.
async fn serve_broker(
    config: BrokerConfig,
    stop: watch::Receiver<bool>,
    with_ha: bool,
    http: Option<TcpListener>,
) -> anyhow::Result<()> {
    let ip: IpAddr = config
        .listen_ip
        .parse()
        .with_context(|| format!("listen_ip {:?} is not an IP address", config.listen_ip))?;
    let main = bind(SocketAddr::new(ip, config.listen_port), "broker").await?;
    let vip = bind(
        SocketAddr::new(ip, config.listen_port - 2),
        "broker VIP channel",
    )
    .await?;
    // Masters serve their slaves on listen_port + 1 (RocketMQ's HA port).
    let ha = if with_ha && !config.is_slave() {
        Some(bind(SocketAddr::new(ip, config.ha_port()), "broker HA port").await?)
    } else {
        None
    };
    let ready = format!(
        "tidemark broker ready name={} id={} role={:?} listen={}:{}",
        config.broker_name,
        config.broker_id,
        config.broker_role,
        config.broker_ip1,
        config.listen_port
    );
    let grpc = match config.grpc_listen_port {
        0 => None,
        port => Some(bind(SocketAddr::new(ip, port), "gRPC").await?),
    };
    let broker = tokio::task::spawn_blocking(move || Broker::open(config))
        .await
        .context("broker start-up task")??;
    let state = broker.state().clone();
    let grpc_task = match grpc {
        Some(listener) => {
            let threads = match state.config.grpc_server_threads {
                0 => std::thread::available_parallelism()
                    .map_or(1, std::num::NonZeroUsize::get)
                    .min(8),
                configured => configured,
            };
            let threads =
                std::num::NonZeroUsize::new(threads).unwrap_or(std::num::NonZeroUsize::MIN);
            let listener = listener.into_std().context("gRPC listener")?;
            Some(tidemark_grpc::serve_on_threads(
                listener,
                state.clone(),
                threads,
                crate::collect_when_idle,
                stop.clone(),
            )?)
        }
        None => None,
    };
    let http_task = http.map(|listener| {
        let mut stop = stop.clone();
        tokio::spawn(tidemark_console::serve(
            listener,
            state.clone(),
            async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            },
        ))
    });
    let mut stop = stop;
    let serving = tokio::spawn(broker.serve_with_ha(main, vip, ha, async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    }));
    if with_ha {
        // Ready means clients can find it: a name server has its registration (bounded wait;
        // without any name server the broker still serves, and says so).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !state.registered.load(std::sync::atomic::Ordering::Acquire)
            && tokio::time::Instant::now() < deadline
            && !serving.is_finished()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if !state.registered.load(std::sync::atomic::Ordering::Acquire) {
            warn!(
                "no name server accepted the registration yet; clients will not find this broker"
            );
        }
        announce(&ready);
    }
    serving.await.context("broker task")??;
    if let Some(task) = grpc_task {
        task.await.context("gRPC port")?;
    }
    if let Some(task) = http_task {
        task.await
            .context("metrics task")?
            .context("metrics endpoint")?;
    }
    Ok(())
}

/// Waits until the name server lists the broker, so clients find it at once.
async fn wait_until_registered(
    namesrv: &str,
    broker_name: &str,
    client_config: ClientConfig,
) -> anyhow::Result<()> {
    let client = RemotingClient::new(client_config, None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(response) = client
            .invoke(
                namesrv,
                RemotingCommand::request(RequestCode::GetBrokerClusterInfo),
                Duration::from_secs(3),
            )
            .await
        {
            if let Ok(info) = ClusterInfo::from_json_bytes(&response.body) {
                if info.broker_addr_table.contains_key(broker_name) {
                    client.shutdown();
                    return Ok(());
                }
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("the broker did not register with the name server within 20 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn dev(args: DevArgs) -> anyhow::Result<()> {
    let advertised = if args.listen_ip.is_unspecified() {
        "127.0.0.1".to_owned()
    } else {
        args.listen_ip.to_string()
    };
    let namesrv_listener = bind(
        SocketAddr::new(args.listen_ip, args.namesrv_port),
        "name server",
    )
    .await?;
    let namesrv_addr = format!("{advertised}:{}", args.namesrv_port);
    let config = BrokerConfig {
        broker_ip1: advertised.clone(),
        listen_ip: args.listen_ip.to_string(),
        listen_port: args.broker_port,
        grpc_listen_port: args.grpc_port,
        grpc_server_threads: args.grpc_threads,
        http_listen_port: args.http_port,
        console_read_only: args.console_read_only,
        namesrv_addr: namesrv_addr.clone(),
        store_path_root_dir: args.data_dir.join("broker"),
        message_delay_level: args.message_delay_level.clone(),
        transaction_check_interval: args.transaction_check_interval_ms,
        transaction_timeout: args.transaction_timeout_ms,
        acl_enable: args.acl.acl_file.is_some(),
        acl_file: args.acl.acl_file.clone(),
        acl_access_key: args.acl.acl_access_key.clone(),
        acl_secret_key: args
            .acl
            .acl_secret_key
            .clone()
            .map(tidemark_broker::SecretText::new),
        tls_mode: args.tls.mode()?.to_string(),
        tls_certificate: args.tls.tls_certificate.clone(),
        tls_private_key: args.tls.tls_private_key.clone(),
        tls_client_ca: args.tls.tls_client_ca.clone(),
        // The broker registers with the name server beside it: over TLS when that port takes
        // nothing else, presenting its own certificate when client certificates are required.
        tls_enable: args.tls.mode()? == TlsMode::Enforcing,
        tls_client_certificate: args
            .tls
            .tls_client_ca
            .as_ref()
            .and(args.tls.tls_certificate.clone()),
        tls_client_private_key: args
            .tls
            .tls_client_ca
            .as_ref()
            .and(args.tls.tls_private_key.clone()),
        flush_disk_type: if args.sync_flush {
            tidemark_broker::FlushDiskType::SyncFlush
        } else {
            tidemark_broker::FlushDiskType::AsyncFlush
        },
        max_connections: args.max_connections,
        // Registration is immediate on topic changes; the period is the heartbeat.
        ..BrokerConfig::default()
    };
    // Errors name the flags the values came from.
    config.validate_naming_keys(&|key| match key {
        "listen_port" => "--broker-port".to_owned(),
        "message_delay_level" => "--message-delay-level".to_owned(),
        "listen_ip" => "--listen-ip".to_owned(),
        "max_connections" => "--max-connections".to_owned(),
        "grpc_listen_port" => "--grpc-port".to_owned(),
        "grpc_server_threads" => "--grpc-threads".to_owned(),
        "http_listen_port" => "--http-port".to_owned(),
        "transaction_check_interval" => "--transaction-check-interval-ms".to_owned(),
        "acl_access_key" => "--acl-access-key".to_owned(),
        "acl_secret_key" => "--acl-secret-key".to_owned(),
        other => other.to_owned(),
    })?;
    let mut namesrv_config = NameServerConfig {
        acl: open_acl(args.acl.acl_file.clone()).await?,
        ..NameServerConfig::default()
    };
    namesrv_config.server.tls = Some(args.tls.server_tls(vec![advertised.clone()]).await?);
    let mut client_config = config.remoting_client_config();
    if let Some(settings) = config.client_tls_settings() {
        client_config.tls = Some(Arc::new(
            tokio::task::spawn_blocking(move || ClientTls::new(&settings))
                .await
                .context("TLS set-up task")??,
        ));
    }
    let broker_name = config.broker_name.clone();
    let broker_addr = config.broker_addr();
    // The broker stops first, so it can still unregister from the name server.
    let (stop_namesrv, namesrv_stopping) = watch::channel(false);
    let (stop, stopping) = watch::channel(false);
    let namesrv = {
        let mut stopping = namesrv_stopping;
        tokio::spawn(NameServer::serve(
            namesrv_listener,
            namesrv_config,
            async move {
                let _ = stopping.wait_for(|stopped| *stopped).await;
            },
        ))
    };
    // A taken metrics port does not stop a development server: it runs without the endpoint.
    let http = match args.http_port {
        0 => None,
        port => match bind(SocketAddr::new(args.listen_ip, port), "metrics").await {
            Ok(listener) => Some(listener),
            Err(failure) => {
                warn!("{failure:#}; running without the metrics endpoint (choose one with --http-port)");
                None
            }
        },
    };
    let (http_addr, console_addr) = match &http {
        Some(_) => (
            format!("http://{advertised}:{}/metrics", args.http_port),
            format!("http://{advertised}:{}/", args.http_port),
        ),
        None => ("off".to_owned(), "off".to_owned()),
    };
    let mut broker = tokio::spawn(serve_broker(config, stopping, false, http));
    tokio::select! {
        registered = wait_until_registered(&namesrv_addr, &broker_name, client_config) => registered?,
        outcome = &mut broker => return ended_unasked(outcome),
    }
    let grpc_addr = match args.grpc_port {
        0 => "off".to_owned(),
        port => format!("{advertised}:{port}"),
    };
    announce(&format!(
        "tidemark dev ready namesrv={namesrv_addr} broker={broker_addr} grpc={grpc_addr} metrics={http_addr} console={console_addr} data={}",
        args.data_dir.display()
    ));
    info!(%namesrv_addr, %broker_addr, "tidemark dev ready; point clients at the name server");
    shutdown_signal().await;
    info!("shutting down");
    let _ = stop.send(true);
    let outcome = broker.await.context("broker task")?;
    let _ = stop_namesrv.send(true);
    let _ = namesrv.await;
    outcome
}

/// The outcome of a broker task that ended before it was asked to stop: its own error (a port
/// in use, an unreadable store…) when it has one.
fn ended_unasked(
    outcome: Result<anyhow::Result<()>, tokio::task::JoinError>,
) -> anyhow::Result<()> {
    match outcome {
        Ok(Err(error)) => Err(error.context("the broker stopped")),
        Ok(Ok(())) => bail!("the broker stopped unasked (see the log above)"),
        Err(error) => Err(anyhow::Error::new(error).context("the broker task failed")),
    }
}

pub async fn namesrv(args: NamesrvArgs) -> anyhow::Result<()> {
    let listener = bind(args.listen, "name server").await?;
    let mut config = NameServerConfig {
        acl: open_acl(args.acl_file).await?,
        ..NameServerConfig::default()
    };
    config.server.tls = Some(
        args.tls
            .server_tls(vec![args.listen.ip().to_string()])
            .await?,
    );
    announce(&format!("tidemark namesrv ready listen={}", args.listen));
    NameServer::serve(listener, config, shutdown_signal()).await;
    Ok(())
}

pub async fn broker(args: BrokerArgs) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => BrokerConfig::load(path)?,
        None => BrokerConfig::default(),
    };
    if let Some(namesrv) = args.namesrv {
        config.namesrv_addr = namesrv;
    }
    config.validate()?;
    info!(?config, "effective configuration");
    let http = match config.http_listen_port {
        0 => None,
        port => {
            let ip: IpAddr = config.listen_ip.parse().with_context(|| {
                format!("listen_ip {:?} is not an IP address", config.listen_ip)
            })?;
            Some(bind(SocketAddr::new(ip, port), "metrics").await?)
        }
    };
    let (stop, stopping) = watch::channel(false);
    let mut broker = tokio::spawn(serve_broker(config, stopping, true, http));
    tokio::select! {
        _ = shutdown_signal() => {}
        outcome = &mut broker => return ended_unasked(outcome),
    }
    let _ = stop.send(true);
    broker.await.context("broker task")?
}
