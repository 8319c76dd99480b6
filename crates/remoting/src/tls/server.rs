//! The server side: one [`ServerTls`] per kind of port, owning the certificate in force.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use super::pem;
use super::{PemFiles, Stream, TlsError, TlsMode, HANDSHAKE_TIMEOUT_DEFAULT};

/// The first byte of a TLS record carrying a handshake.
const TLS_HANDSHAKE: u8 = 0x16;

/// How a server port does TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsSettings {
    pub mode: TlsMode,
    /// Certificate and key; `None`: a self-signed certificate made at start.
    pub files: Option<PemFiles>,
    /// Names a self-signed certificate is made for, besides `localhost`.
    pub names: Vec<String>,
    /// CA certificates client certificates must chain to; `Some` makes a client certificate
    /// required (RocketMQ's `tls.server.need.client.auth=require`).
    pub client_ca: Option<PathBuf>,
    /// A connection that has not sent its first byte, or not finished its handshake, in this
    /// long is closed.
    pub handshake_timeout: Duration,
}

impl Default for ServerTlsSettings {
    fn default() -> Self {
        Self {
            mode: TlsMode::Permissive,
            files: None,
            names: Vec::new(),
            client_ca: None,
            handshake_timeout: HANDSHAKE_TIMEOUT_DEFAULT,
        }
    }
}

/// The files' modification times the acceptor in force was built from.
type Stamps = Vec<Option<SystemTime>>;

/// TLS for a server port: its mode, and the acceptor built from the current files.
///
/// Invariant: `current` always holds an acceptor built from files that loaded completely; a
/// reload that fails (a half-written key, a certificate that does not match it) keeps the
/// previous one and says why.
pub struct ServerTls {
    settings: ServerTlsSettings,
    alpn: Vec<Vec<u8>>,
    current: RwLock<(TlsAcceptor, Stamps)>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Builds the acceptor (reading files: call off the async threads). `alpn`: the
    /// application protocols the port offers (`h2` for gRPC; none for remoting).
    pub fn new(settings: ServerTlsSettings, alpn: Vec<Vec<u8>>) -> Result<ServerTls, TlsError> {
        let stamps = stamps(&settings);
        let acceptor = build(&settings, &alpn)?;
        Ok(ServerTls {
            settings,
            alpn,
            current: RwLock::new((acceptor, stamps)),
        })
    }

    pub fn mode(&self) -> TlsMode {
        self.settings.mode
    }

    pub fn settings(&self) -> &ServerTlsSettings {
        &self.settings
    }

    fn acceptor(&self) -> TlsAcceptor {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0
            .clone()
    }

    /// Re-reads the files if any changed since they were loaded; `Ok(true)` when a new
    /// certificate is now in force. Blocking file I/O.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        if self.settings.files.is_none() && self.settings.client_ca.is_none() {
            return Ok(false);
        }
        let now = stamps(&self.settings);
        let unchanged = {
            let current = self
                .current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            current.1 == now
        };
        if unchanged {
            return Ok(false);
        }
        let built = build(&self.settings, &self.alpn);
        let mut current = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Either way these stamps are dealt with: a broken file is reported once, not every
        // check, and retried when it changes again.
        current.1 = now;
        current.0 = built?;
        Ok(true)
    }

    /// Sorts an accepted connection by the port's mode: plaintext, or TLS once its handshake
    /// is done. `None`: the connection was closed (refused, stalled, or its handshake failed),
    /// with a log line saying why.
    pub async fn accept(&self, stream: TcpStream, peer: SocketAddr) -> Option<Stream> {
        let timeout = self.settings.handshake_timeout;
        let wants_tls = match self.settings.mode {
            TlsMode::Disabled => return Some(Stream::Plain(stream)),
            // The client speaks first in every protocol served here (a remoting request, an
            // HA slave's offset, an HTTP/2 preface, a TLS ClientHello).
            TlsMode::Permissive | TlsMode::Enforcing => {
                let mut first = [0u8; 1];
                match tokio::time::timeout(timeout, stream.peek(&mut first)).await {
                    Ok(Ok(1)) => first[0] == TLS_HANDSHAKE,
                    Ok(_) => return None,
                    Err(_) => {
                        debug!(%peer, ?timeout, "connection sent nothing; closing it");
                        return None;
                    }
                }
            }
        };
        if !wants_tls {
            if self.settings.mode == TlsMode::Enforcing {
                warn!(%peer, "plaintext connection refused: this port only accepts TLS");
                return None;
            }
            return Some(Stream::Plain(stream));
        }
        match tokio::time::timeout(timeout, self.acceptor().accept(stream)).await {
            Ok(Ok(tls)) => Some(Stream::Server(Box::new(tls))),
            Ok(Err(failure)) => {
                warn!(%peer, %failure, "TLS handshake refused");
                None
            }
            Err(_) => {
                warn!(%peer, ?timeout, "TLS handshake not finished in time; closing the connection");
                None
            }
        }
    }
}

fn stamps(settings: &ServerTlsSettings) -> Stamps {
    let modified = |path: &PathBuf| {
        std::fs::metadata(path)
            .and_then(|metadata| metadata.modified())
            .ok()
    };
    let mut stamps = Vec::new();
    if let Some(files) = &settings.files {
        stamps.push(modified(&files.certificate));
        stamps.push(modified(&files.private_key));
    }
    if let Some(ca) = &settings.client_ca {
        stamps.push(modified(ca));
    }
    stamps
}

fn build(settings: &ServerTlsSettings, alpn: &[Vec<u8>]) -> Result<TlsAcceptor, TlsError> {
    let (chain, key) = match &settings.files {
        Some(files) => pem::identity(files)?,
        None => pem::self_signed(&settings.names)?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|failure| TlsError::Config(failure.to_string()))?;
    let builder = match &settings.client_ca {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for certificate in pem::certificates("client CA", path)? {
                roots.add(certificate).map_err(|failure| TlsError::File {
                    what: "client CA",
                    path: path.clone(),
                    message: failure.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|failure| TlsError::Config(failure.to_string()))?;
            versions.with_client_cert_verifier(verifier)
        }
        None => versions.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|failure| TlsError::Config(format!("certificate and key: {failure}")))?;
    config.alpn_protocols = alpn.to_vec();
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Re-reads `tls`'s files every `interval` until `stop`, so a renewed certificate is served
/// without a restart (connections already open keep the one they started with).
pub async fn watch_files(tls: Arc<ServerTls>, interval: Duration, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = ticker.tick() => {}
        }
        let checked = tls.clone();
        match tokio::task::spawn_blocking(move || checked.reload_if_changed()).await {
            Ok(Ok(true)) => info!("TLS certificate reloaded"),
            Ok(Ok(false)) => {}
            Ok(Err(failure)) => {
                warn!(%failure, "TLS files changed but cannot be used; the previous certificate stays in force")
            }
            Err(failure) => warn!(%failure, "TLS reload task failed"),
        }
    }
}
