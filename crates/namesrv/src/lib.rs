//! `tidemark-namesrv` is the name server: brokers register their topics, clients ask which
//! brokers serve a topic, admins read cluster info (RocketMQ's `NamesrvController`).
//!
//! [`RouteTable`] is the state, a plain type; [`NameServerHandler`] maps requests onto it;
//! [`NameServer`] serves it over TCP and expires brokers that stop registering.

mod processor;
mod route_table;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tidemark_remoting::ServerConfig;
use tokio::net::TcpListener;
use tracing::info;

pub use processor::{NameServerHandler, NameServerState, ORDER_TOPIC_CONFIG_NAMESPACE};
pub use route_table::{Registration, RegistrationReply, RouteTable};

/// Name-server settings.
#[derive(Debug, Clone)]
pub struct NameServerConfig {
    /// Brokers silent this long are dropped from routes (120 s).
    pub broker_expiry: Duration,
    /// How often expiry is checked (10 s).
    pub scan_interval: Duration,
    pub server: ServerConfig,
    /// Checks every request against these ACL rules when set: reading routes needs a known,
    /// correctly signed account (or a white-listed address), and changing them (broker
    /// registration, KV config, topic deletion) an admin account.
    pub acl: Option<Arc<tidemark_acl::AccessControl>>,
}

impl Default for NameServerConfig {
    fn default() -> Self {
        Self {
            broker_expiry: Duration::from_secs(120),
            scan_interval: Duration::from_secs(10),
            server: ServerConfig::default(),
            acl: None,
        }
    }
}

impl NameServerConfig {
    /// The settings under RocketMQ's names, as GET_NAMESRV_CONFIG (mqadmin `getNamesrvConfig`)
    /// shows them. `brokerChannelExpiredTime` is a constant in RocketMQ; the fixed values are
    /// what a Tidemark name server does (no order-topic config, no cluster-test mode).
    pub fn properties(&self, listen_port: u16) -> std::collections::BTreeMap<String, String> {
        [
            ("listenPort", listen_port.to_string()),
            (
                "scanNotActiveBrokerInterval",
                self.scan_interval.as_millis().to_string(),
            ),
            (
                "brokerChannelExpiredTime",
                self.broker_expiry.as_millis().to_string(),
            ),
            ("orderMessageEnable", "false".to_owned()),
            ("clusterTest", "false".to_owned()),
            ("productEnvName", "center".to_owned()),
            (
                "serverChannelMaxIdleTimeSeconds",
                self.server
                    .channel
                    .idle_timeout
                    .map_or(0, |idle| idle.as_secs())
                    .to_string(),
            ),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
    }
}

/// A running name server.
#[derive(Debug)]
pub struct NameServer;

impl NameServer {
    /// Serves `listener` until `shutdown` resolves; expires silent brokers meanwhile.
    pub async fn serve(
        listener: TcpListener,
        config: NameServerConfig,
        shutdown: impl Future<Output = ()>,
    ) {
        let port = listener.local_addr().map_or(0, |addr| addr.port());
        let state = Arc::new(NameServerState {
            settings: config.properties(port),
            ..NameServerState::default()
        });
        let handler = NameServerHandler::new(state.clone());
        let housekeeping = {
            let state = state.clone();
            let config = config.clone();
            tokio::spawn(async move {
                let mut ticker = tokio::time::interval(config.scan_interval);
                loop {
                    ticker.tick().await;
                    let expired = state
                        .routes
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .expire_inactive(
                            processor::now_ms(),
                            config.broker_expiry.as_millis() as i64,
                        );
                    for addr in expired {
                        info!(broker = %addr, "broker expired: no registration within the expiry time");
                    }
                }
            })
        };
        let mut handler: Arc<dyn tidemark_remoting::RequestHandler> = Arc::new(handler);
        let mut acl_watch = None;
        if let Some(acl) = &config.acl {
            info!(file = %acl.file().display(), "ACL enabled");
            handler = Arc::new(tidemark_acl::AclGuard::new(acl.clone(), handler));
            acl_watch = Some(tokio::spawn(tidemark_acl::watch_file(
                acl.clone(),
                Duration::from_secs(2),
                std::future::pending(),
            )));
        }
        let tls_watch = config.server.tls.clone().map(|tls| {
            info!(mode = %tls.mode(), "TLS");
            tokio::spawn(tidemark_remoting::tls::watch_files(
                tls,
                Duration::from_secs(2),
                std::future::pending(),
            ))
        });
        tidemark_remoting::serve(listener, handler, config.server, shutdown).await;
        housekeeping.abort();
        if let Some(watch) = tls_watch {
            watch.abort();
        }
        if let Some(watch) = acl_watch {
            watch.abort();
        }
    }
}
