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
}

impl Default for NameServerConfig {
    fn default() -> Self {
        Self {
            broker_expiry: Duration::from_secs(120),
            scan_interval: Duration::from_secs(10),
            server: ServerConfig::default(),
        }
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
        let state = Arc::new(NameServerState::default());
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
        tidemark_remoting::serve(listener, Arc::new(handler), config.server, shutdown).await;
        housekeeping.abort();
    }
}
