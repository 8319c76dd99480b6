//! A client keeping one connection per peer address, reconnecting when it is gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tidemark_protocol::RemotingCommand;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::channel::RequestHandler;
use crate::channel::{Channel, ChannelConfig};
use crate::error::RemotingError;
use crate::tls::{ClientTls, Stream};

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Java: `connectTimeoutMillis` 3000.
    pub connect_timeout: Duration,
    pub channel: ChannelConfig,
    /// Dial every peer over TLS (RocketMQ's `tls.enable` on a client).
    pub tls: Option<Arc<ClientTls>>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(3),
            channel: ChannelConfig::default(),
            tls: None,
        }
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Channel>>>;

/// Calls peers by address (`host:port`). Requests the peers send back on the same
/// connections (broker → client) go to the optional handler.
pub struct RemotingClient {
    config: ClientConfig,
    handler: Option<Arc<dyn RequestHandler>>,
    slots: Mutex<HashMap<String, Slot>>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for RemotingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemotingClient")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RemotingClient {
    pub fn new(config: ClientConfig, handler: Option<Arc<dyn RequestHandler>>) -> Self {
        Self {
            config,
            handler,
            slots: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
        }
    }

    /// The open connection to `addr`, connecting (again) if there is none.
    pub async fn channel(&self, addr: &str) -> Result<Channel, RemotingError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            match slots.get(addr) {
                Some(slot) => slot.clone(),
                None => slots.entry(addr.to_owned()).or_default().clone(),
            }
        };
        // One connect per address at a time; callers for other addresses are not held up.
        let mut current = slot.lock().await;
        if let Some(channel) = current.as_ref().filter(|channel| !channel.is_closed()) {
            return Ok(channel.clone());
        }
        if self.shutdown.is_cancelled() {
            return Err(RemotingError::ChannelClosed {
                peer: addr.to_owned(),
            });
        }
        let timeout = self.config.connect_timeout;
        let connect = async {
            let stream =
                TcpStream::connect(addr)
                    .await
                    .map_err(|source| RemotingError::Connect {
                        addr: addr.to_owned(),
                        source,
                    })?;
            match &self.config.tls {
                None => Ok(Stream::Plain(stream)),
                Some(tls) => {
                    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
                    let host = host.trim_start_matches('[').trim_end_matches(']');
                    tls.connect(host, stream)
                        .await
                        .map_err(|source| RemotingError::Connect {
                            addr: addr.to_owned(),
                            source,
                        })
                }
            }
        };
        let stream = tokio::time::timeout(timeout, connect).await.map_err(|_| {
            RemotingError::ConnectTimeout {
                addr: addr.to_owned(),
                timeout,
            }
        })??;
        let (channel, _task) = Channel::start(
            stream,
            self.config.channel.clone(),
            self.handler.clone(),
            self.shutdown.child_token(),
        )?;
        debug!(%addr, "connected");
        *current = Some(channel.clone());
        Ok(channel)
    }

    /// Sends a request to `addr` and waits for the response, for at most `timeout` in all
    /// (connecting included).
    pub async fn invoke(
        &self,
        addr: &str,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        let started = tokio::time::Instant::now();
        let channel = tokio::time::timeout(timeout, self.channel(addr))
            .await
            .map_err(|_| RemotingError::ConnectTimeout {
                addr: addr.to_owned(),
                timeout,
            })??;
        let left = timeout.saturating_sub(started.elapsed());
        channel.request(request, left).await
    }

    /// Sends a oneway request to `addr`.
    pub async fn invoke_oneway(
        &self,
        addr: &str,
        request: RemotingCommand,
    ) -> Result<(), RemotingError> {
        self.channel(addr).await?.oneway(request).await
    }

    /// Closes the connection to `addr`, if any; the next call reconnects.
    pub fn close_channel(&self, addr: &str) {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(addr);
        if let Some(slot) = slot {
            if let Ok(current) = slot.try_lock() {
                if let Some(channel) = current.as_ref() {
                    channel.close();
                }
            }
        }
    }

    /// Closes every connection and refuses new ones.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}
