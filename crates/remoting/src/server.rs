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
use crate::tls::{ServerTls, TlsMode};

/// Limits of a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Connections served at once; further peers wait in the listen backlog.
    pub connections_max: usize,
    pub channel: ChannelConfig,
    /// TLS on this port; `None` is plaintext only (mode disabled).
    pub tls: Option<Arc<ServerTls>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            connections_max: 10_000,
            channel: ChannelConfig {
                idle_timeout: Some(Duration::from_secs(120)),
                ..ChannelConfig::default()
            },
            tls: None,
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
        let accepted = loop {
            tokio::select! {
                _ = &mut shutdown => break None,
                accepted = listener.accept() => break Some(accepted),
                // A closed connection's task is reaped as it ends, not at the next accept:
                // until it is, it keeps its memory (and the set grows).
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        };
        let Some(accepted) = accepted else { break };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Usually EMFILE or a reset during the handshake: back off briefly, keep serving.
                warn!(%local, %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (channel_config, handler, stop) =
            (config.channel.clone(), handler.clone(), stop.child_token());
        match config
            .tls
            .clone()
            .filter(|tls| tls.mode() != TlsMode::Disabled)
        {
            // The first byte and the handshake are awaited on the connection's own task, so a
            // slow or stalled client never holds the accept loop up.
            Some(tls) => {
                connections.spawn(async move {
                    if let Some(stream) = tls.accept(stream, peer).await {
                        run_connection(stream, channel_config, handler, stop).await;
                    }
                    drop(permit);
                });
            }
            None => match Channel::start(stream, channel_config, Some(handler), stop) {
                Ok((channel, task)) => {
                    debug!(peer = %channel.peer_addr(), "connection accepted");
                    connections.spawn(async move {
                        let _ = task.await;
                        drop(permit);
                    });
                }
                Err(error) => debug!(%error, "connection lost before it started"),
            },
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

async fn run_connection(
    stream: crate::tls::Stream,
    config: ChannelConfig,
    handler: Arc<dyn RequestHandler>,
    stop: CancellationToken,
) {
    let tls = stream.is_tls();
    match Channel::start(stream, config, Some(handler), stop) {
        Ok((channel, task)) => {
            debug!(peer = %channel.peer_addr(), tls, "connection accepted");
            let _ = task.await;
        }
        Err(error) => debug!(%error, "connection lost before it started"),
    }
}
