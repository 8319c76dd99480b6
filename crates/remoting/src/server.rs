//! The accept loop: bounded connections, one [`Channel`] per connection, graceful shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::channel::RequestHandler;
use crate::channel::{Channel, ChannelConfig};

/// Limits of a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Connections served at once; further peers wait in the listen backlog.
    pub connections_max: usize,
    pub channel: ChannelConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            connections_max: 10_000,
            channel: ChannelConfig {
                idle_timeout: Some(Duration::from_secs(120)),
                ..ChannelConfig::default()
            },
        }
    }
}

/// Serves `listener` until `shutdown` resolves, then stops accepting, lets every connection
/// finish its in-flight requests (bounded by the drain timeout) and returns when all are closed.
///
/// The caller binds the listener, so tests can use `127.0.0.1:0` and learn the port first.
pub async fn serve(
    listener: TcpListener,
    handler: Arc<dyn RequestHandler>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    let local = listener
        .local_addr()
        .map(|addr| addr.to_string())
        .unwrap_or_default();
    let limit = Arc::new(Semaphore::new(config.connections_max));
    let stop = CancellationToken::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    info!(%local, "serving");
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = limit.clone().acquire_owned() => permit,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Usually EMFILE or a reset during the handshake: back off briefly, keep serving.
                warn!(%local, %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match Channel::start(
            stream,
            config.channel.clone(),
            Some(handler.clone()),
            stop.child_token(),
        ) {
            Ok((channel, task)) => {
                debug!(peer = %channel.peer_addr(), "connection accepted");
                connections.spawn(async move {
                    let _ = task.await;
                    drop(permit);
                });
            }
            Err(error) => debug!(%error, "connection lost before it started"),
        }
    }
    drop(listener);
    info!(%local, connections = connections.len(), "shutting down");
    stop.cancel();
    let grace = config.channel.drain_timeout + Duration::from_secs(1);
    if tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        warn!(%local, "connections still open after the drain timeout; aborting them");
        connections.shutdown().await;
    }
}
