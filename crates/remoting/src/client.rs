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

/// One peer address: its open connection, read under the client's lock so a call on a live
/// connection never waits; and the lock a (re)connect holds, so one address dials once at a
/// time while calls to other addresses go on.
#[derive(Default)]
struct Slot {
    open: Option<Channel>,
    connecting: Arc<tokio::sync::Mutex<()>>,
}

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

    /// The open connection to `addr`, if there is one; never waits.
    fn open_channel(&self, addr: &str) -> Option<Channel> {
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots
            .get(addr)
            .and_then(|slot| slot.open.as_ref())
            .filter(|channel| !channel.is_closed())
            .cloned()
    }

    /// The open connection to `addr`, connecting (again) if there is none.
    pub async fn channel(&self, addr: &str) -> Result<Channel, RemotingError> {
        if let Some(channel) = self.open_channel(addr) {
            return Ok(channel);
        }
        let connecting = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            match slots.get(addr) {
                Some(slot) => slot.connecting.clone(),
                None => slots.entry(addr.to_owned()).or_default().connecting.clone(),
            }
        };
        // One connect per address at a time; callers for other addresses are not held up.
        let _connecting = connecting.lock().await;
        if let Some(channel) = self.open_channel(addr) {
            return Ok(channel);
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
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if self.shutdown.is_cancelled() {
            // Shut down while dialing: the slots were cleared and must stay so.
            channel.close();
            return Err(RemotingError::ChannelClosed {
                peer: addr.to_owned(),
            });
        }
        slots.entry(addr.to_owned()).or_default().open = Some(channel.clone());
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
        // The usual case, a live connection: no connect deadline to arm.
        if let Some(channel) = self.open_channel(addr) {
            return channel.request(request, timeout).await;
        }
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
        if let Some(channel) = slot.and_then(|slot| slot.open) {
            channel.close();
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
