//! `tidemark dev`, `tidemark namesrv` and `tidemark broker`: the servers, with graceful
//! shutdown on SIGINT/SIGTERM.
//!
//! One rule for the ports they open. The name server's and the broker's remoting ports are
//! what clients and the broker's own registration need: taken, the start fails naming the
//! address and the setting that chooses it. The listeners the servers can run without (gRPC,
//! the metrics endpoint and console) are [`ListenPort`]s: one the user asked for must be had
//! too, but a default that something else holds (a second `tidemark dev`, a RocketMQ proxy on
//! 8081) is left out with a warning naming the setting, and the rest runs.

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
    /// The name server's port; it must be free.
    #[arg(long, default_value_t = 9876)]
    pub namesrv_port: u16,
    /// The broker's port; it also serves `port - 2` (VIP channel). Both must be free.
    #[arg(long, default_value_t = 10911)]
    pub broker_port: u16,
    /// RocketMQ 5's gRPC port (what 5.x clients' endpoints name; TLS or plaintext); 0: none.
    /// Default 8081: if that is taken, `tidemark dev` runs without gRPC and says so. A port
    /// given here must be free.
    // No clap default: whether the user gave a port decides what a taken one means.
    #[arg(long, value_name = "PORT")]
    pub grpc_port: Option<u16>,
    /// Threads serving the gRPC port; 0: one per CPU core, at most 8.
    #[arg(long, default_value_t = 0)]
    pub grpc_threads: usize,
    /// The HTTP port of the metrics endpoint (`/metrics`) and the web console; 0: none.
    /// Default 8082: if that is taken, `tidemark dev` runs without them and says so. A port
    /// given here must be free.
    #[arg(long, value_name = "PORT")]
    pub http_port: Option<u16>,
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

/// `tidemark dev`'s gRPC port when `--grpc-port` is not given (the RocketMQ proxy's).
pub const DEV_GRPC_PORT_DEFAULT: u16 = 8081;
/// `tidemark dev`'s metrics and console port when `--http-port` is not given.
pub const DEV_HTTP_PORT_DEFAULT: u16 = 8082;

impl DevArgs {
    pub fn grpc_listen_port(&self) -> ListenPort {
        ListenPort::new(self.grpc_port, DEV_GRPC_PORT_DEFAULT)
    }

    pub fn http_listen_port(&self) -> ListenPort {
        ListenPort::new(self.http_port, DEV_HTTP_PORT_DEFAULT)
    }
}

/// The port of a listener the servers can run without (gRPC, the metrics endpoint and
/// console): one the user asked for (a flag, a config-file key), or a default nobody chose,
/// which anything else on the machine may hold. 0 is none either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenPort {
    Asked(u16),
    Default(u16),
}

impl ListenPort {
    /// The port given, else `default`.
    pub fn new(given: Option<u16>, default: u16) -> ListenPort {
        given.map_or(ListenPort::Default(default), ListenPort::Asked)
    }

    pub fn number(self) -> u16 {
        match self {
            ListenPort::Asked(port) | ListenPort::Default(port) => port,
        }
    }
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

/// Binds the listener of `what` on `port` unless it is 0. A port the user asked for must be
/// had: the error names the address and `setting`. A default port that cannot be had is left
/// out (`None`) with a warning naming `setting`: nobody chose it, and the servers work without
/// `what`.
pub(crate) async fn bind_optional(
    ip: IpAddr,
    port: ListenPort,
    what: &str,
    setting: &str,
) -> anyhow::Result<Option<TcpListener>> {
    if port.number() == 0 {
        return Ok(None);
    }
    let addr = SocketAddr::new(ip, port.number());
    match TcpListener::bind(addr).await {
        Ok(listener) => Ok(Some(listener)),
        Err(error) => match port {
            ListenPort::Asked(_) => {
                Err(error).with_context(|| format!("cannot listen on {addr} ({what}, {setting})"))
            }
            ListenPort::Default(_) => {
                warn!(
                    "cannot listen on {addr}, the default port of {what}: {error}; running \
                     without {what} (choose another port with {setting}, 0 for none)"
                );
                Ok(None)
            }
        },
    }
}

/// The listeners a broker can run without, bound by the caller ([`bind_optional`]); `None`
/// when off or left out.
struct OptionalListeners {
    grpc: Option<TcpListener>,
    /// The metrics endpoint and web console.
    http: Option<TcpListener>,
}

/// `with_ha`: a standalone broker (`tidemark broker`) serves the HA port and announces itself;
/// `tidemark dev` has no slaves and announces itself once both servers are up. `setting`: what
/// the user sets a configuration key with, for errors.
async fn serve_broker(
    mut config: BrokerConfig,
    stop: watch::Receiver<bool>,
    with_ha: bool,
    optional: OptionalListeners,
    setting: fn(&str) -> String,
) -> anyhow::Result<()> {
    let ip: IpAddr = config
        .listen_ip
        .parse()
        .with_context(|| format!("listen_ip {:?} is not an IP address", config.listen_ip))?;
    let port_setting = setting("listen_port");
    let main = bind(
        SocketAddr::new(ip, config.listen_port),
        &format!("broker, {port_setting}"),
    )
    .await?;
    let vip = bind(
        SocketAddr::new(ip, config.listen_port - 2),
        &format!("broker VIP channel, {port_setting} - 2"),
    )
    .await?;
    // Masters serve their slaves on listen_port + 1 (RocketMQ's HA port).
    let ha = if with_ha && !config.is_slave() {
        let addr = SocketAddr::new(ip, config.ha_port());
        Some(bind(addr, &format!("broker HA port, {port_setting} + 1")).await?)
    } else {
        None
    };
    // The configuration the broker reports (GET_BROKER_CONFIG) says what runs.
    if optional.grpc.is_none() {
        config.grpc_listen_port = 0;
    }
    if optional.http.is_none() {
        config.http_listen_port = 0;
    }
    let ready = format!(
        "tidemark broker ready name={} id={} role={:?} listen={}:{}",
        config.broker_name,
        config.broker_id,
        config.broker_role,
        config.broker_ip1,
        config.listen_port
    );
    let broker = tokio::task::spawn_blocking(move || Broker::open(config))
        .await
        .context("broker start-up task")??;
    let state = broker.state().clone();
    let grpc_task = match optional.grpc {
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
    let http_task = optional.http.map(|listener| {
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
        "name server, --namesrv-port",
    )
    .await?;
    let (grpc_port, http_port) = (args.grpc_listen_port(), args.http_listen_port());
    let namesrv_addr = format!("{advertised}:{}", args.namesrv_port);
    let config = BrokerConfig {
        broker_ip1: advertised.clone(),
        listen_ip: args.listen_ip.to_string(),
        listen_port: args.broker_port,
        grpc_listen_port: grpc_port.number(),
        grpc_server_threads: args.grpc_threads,
        http_listen_port: http_port.number(),
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
        // A development broker serves every feature a client may try (a configured broker
        // keeps RocketMQ's default, off).
        recall_message_enable: true,
        // Registration is immediate on topic changes; the period is the heartbeat.
        ..BrokerConfig::default()
    };
    config.validate_naming_keys(&dev_flag)?;
    let optional = OptionalListeners {
        grpc: bind_optional(args.listen_ip, grpc_port, "gRPC", "--grpc-port").await?,
        http: bind_optional(
            args.listen_ip,
            http_port,
            "the metrics endpoint and web console",
            "--http-port",
        )
        .await?,
    };
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
    let (http_addr, console_addr) = match &optional.http {
        Some(_) => (
            format!("http://{advertised}:{}/metrics", http_port.number()),
            format!("http://{advertised}:{}/", http_port.number()),
        ),
        None => ("off".to_owned(), "off".to_owned()),
    };
    let grpc_addr = match &optional.grpc {
        Some(_) => format!("{advertised}:{}", grpc_port.number()),
        None => "off".to_owned(),
    };
    let mut broker = tokio::spawn(serve_broker(config, stopping, false, optional, dev_flag));
    tokio::select! {
        registered = wait_until_registered(&namesrv_addr, &broker_name, client_config) => registered?,
        outcome = &mut broker => return ended_unasked(outcome),
    }
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

/// The `tidemark dev` flag a configuration key's value came from, for errors.
fn dev_flag(key: &str) -> String {
    match key {
        "listen_port" => "--broker-port",
        "message_delay_level" => "--message-delay-level",
        "listen_ip" => "--listen-ip",
        "max_connections" => "--max-connections",
        "grpc_listen_port" => "--grpc-port",
        "grpc_server_threads" => "--grpc-threads",
        "http_listen_port" => "--http-port",
        "transaction_check_interval" => "--transaction-check-interval-ms",
        "acl_access_key" => "--acl-access-key",
        "acl_secret_key" => "--acl-secret-key",
        other => other,
    }
    .to_owned()
}

/// A `tidemark broker` configuration key, for errors.
fn file_key(key: &str) -> String {
    format!("{key} in the config file")
}

/// Whether a broker config file's text sets any of `keys`, spelled as serde reads them
/// (snake_case or RocketMQ's camelCase). The settings are flat, so a line scan reads both
/// formats: `key = value` (TOML) and `key=value` / `key: value` (properties).
fn config_text_sets(text: &str, keys: &[&str]) -> bool {
    let folded = |name: &str| -> String {
        name.trim()
            .trim_matches('"')
            .chars()
            .filter(|c| *c != '_')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let wanted: Vec<String> = keys.iter().map(|key| folded(key)).collect();
    text.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#') && !line.starts_with('!'))
        .filter_map(|line| line.split_once(['=', ':']))
        .any(|(key, _)| wanted.contains(&folded(key)))
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
    // The gRPC port is the user's only if the file sets it (else BrokerConfig's default);
    // the HTTP port is 0 unless the file sets it.
    let grpc_set = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            config_text_sets(&text, &["grpc_listen_port", "grpcServerPort"])
        }
        None => false,
    };
    let grpc_port = if grpc_set {
        ListenPort::Asked(config.grpc_listen_port)
    } else {
        ListenPort::Default(config.grpc_listen_port)
    };
    let ip: IpAddr = config
        .listen_ip
        .parse()
        .with_context(|| format!("listen_ip {:?} is not an IP address", config.listen_ip))?;
    let optional = OptionalListeners {
        grpc: bind_optional(ip, grpc_port, "gRPC", &file_key("grpc_listen_port")).await?,
        http: bind_optional(
            ip,
            ListenPort::Asked(config.http_listen_port),
            "the metrics endpoint and web console",
            &file_key("http_listen_port"),
        )
        .await?,
    };
    let (stop, stopping) = watch::channel(false);
    let mut broker = tokio::spawn(serve_broker(config, stopping, true, optional, file_key));
    tokio::select! {
        _ = shutdown_signal() => {}
        outcome = &mut broker => return ended_unasked(outcome),
    }
    let _ = stop.send(true);
    broker.await.context("broker task")?
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::{bind_optional, config_text_sets, ListenPort};

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    /// A port this test holds, so nothing else can listen on it until the guard drops.
    fn taken_port() -> (std::net::TcpListener, u16) {
        let holder = std::net::TcpListener::bind((LOOPBACK, 0)).expect("bind a loopback port");
        let port = holder.local_addr().expect("its address").port();
        (holder, port)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("a runtime")
    }

    #[test]
    fn a_taken_default_port_is_left_out_and_the_start_goes_on() {
        let (_holder, port) = taken_port();
        let bound = runtime().block_on(bind_optional(
            LOOPBACK,
            ListenPort::Default(port),
            "gRPC",
            "--grpc-port",
        ));
        assert!(matches!(bound, Ok(None)), "{bound:?}");
    }

    #[test]
    fn a_taken_port_the_user_asked_for_is_an_error_naming_address_and_flag() {
        let (_holder, port) = taken_port();
        let bound = runtime().block_on(bind_optional(
            LOOPBACK,
            ListenPort::Asked(port),
            "gRPC",
            "--grpc-port",
        ));
        let message = match bound {
            Err(error) => format!("{error:#}"),
            Ok(listener) => panic!("a taken port was bound: {listener:?}"),
        };
        assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
        assert!(message.contains("--grpc-port"), "{message}");
    }

    #[test]
    fn free_ports_are_bound_whoever_chose_them_and_zero_is_none() {
        let runtime = runtime();
        for port in [ListenPort::Asked(0), ListenPort::Default(0)] {
            let bound = runtime.block_on(bind_optional(LOOPBACK, port, "gRPC", "--grpc-port"));
            assert!(matches!(bound, Ok(None)), "{port:?}: {bound:?}");
        }
        for choose in [ListenPort::Asked, ListenPort::Default] {
            let (holder, port) = taken_port();
            drop(holder);
            let bound =
                runtime.block_on(bind_optional(LOOPBACK, choose(port), "gRPC", "--grpc-port"));
            assert!(
                matches!(bound, Ok(Some(_))),
                "{:?}: {bound:?}",
                choose(port)
            );
        }
    }

    #[test]
    fn a_config_file_sets_the_grpc_port_only_when_a_line_names_it() {
        let keys = ["grpc_listen_port", "grpcServerPort"];
        for set in [
            "grpc_listen_port = 9081",
            "brokerName = b\ngrpcServerPort=9081",
            "  grpcServerPort : 9081",
            "\"grpc_listen_port\" = 0",
        ] {
            assert!(config_text_sets(set, &keys), "{set:?}");
        }
        for unset in [
            "",
            "# grpc_listen_port = 9081",
            "! grpcServerPort=9081",
            "grpc_server_threads = 4\nhttp_listen_port = 8082",
            "[grpc_listen_port]",
        ] {
            assert!(!config_text_sets(unset, &keys), "{unset:?}");
        }
    }
}
