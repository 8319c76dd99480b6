//! TLS and plaintext on one port, as RocketMQ's proxy serves them: the 5.x Java and Go clients
//! dial TLS by default (and trust any certificate), others dial plaintext. A connection whose
//! first byte is a TLS handshake record (0x16) is served over TLS with the configured
//! certificate, or one generated at start for `localhost` and the broker's address; anything
//! else is plaintext HTTP/2.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::debug;

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;
/// A connection that sends nothing (or does not finish its handshake) in this time is dropped.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);

/// One accepted connection, plaintext or TLS.
#[derive(Debug)]
pub enum Connection {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection {
    fn tcp(&self) -> &TcpStream {
        match self {
            Connection::Plain(stream) => stream,
            Connection::Tls(stream) => stream.get_ref().0,
        }
    }
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.tcp().local_addr().ok(),
            remote_addr: self.tcp().peer_addr().ok(),
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Connection::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Connection::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Connection::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Connection::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Where the server's certificate comes from.
#[derive(Debug, Clone, Default)]
pub struct TlsIdentity {
    /// PEM certificate chain and private key; `None`: a self-signed one made at start.
    pub files: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Names the generated certificate is for (besides `localhost`).
    pub names: Vec<String>,
}

fn load_pem(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|failure| format!("certificate {}: {failure}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|failure| format!("certificate {}: {failure}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "certificate {} holds no certificate",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|failure| format!("private key {}: {failure}", key.display()))?;
    Ok((chain, key))
}

fn self_signed(
    names: &[String],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let mut subjects = vec!["localhost".to_owned()];
    subjects.extend(names.iter().filter(|name| !name.is_empty()).cloned());
    let generated = rcgen::generate_simple_self_signed(subjects)
        .map_err(|failure| format!("self-signed certificate: {failure}"))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(generated.key_pair.serialize_der()));
    Ok((vec![generated.cert.der().clone()], key))
}

/// The TLS side of the port: HTTP/2 only (ALPN `h2`), ring as the crypto provider.
pub fn acceptor(identity: &TlsIdentity) -> Result<TlsAcceptor, String> {
    let (chain, key) = match &identity.files {
        Some((cert, key)) => load_pem(cert, key)?,
        None => self_signed(&identity.names)?,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|failure| format!("TLS versions: {failure}"))?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(|failure| format!("TLS certificate: {failure}"))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts connections, sorts them by their first byte, finishes TLS handshakes off the accept
/// loop, and yields ready connections.
pub fn incoming(
    listener: TcpListener,
    acceptor: TlsAcceptor,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Connection>> {
    let (sender, receiver) = mpsc::channel(128);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(failure) => {
                    debug!(%failure, "gRPC accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if sender.is_closed() {
                return;
            }
            let (sender, acceptor) = (sender.clone(), acceptor.clone());
            tokio::spawn(async move {
                if let Some(connection) = classify(stream, peer, acceptor).await {
                    let _ = sender.send(Ok(connection)).await;
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

async fn classify(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
) -> Option<Connection> {
    let _ = stream.set_nodelay(true);
    let mut first = [0u8; 1];
    match tokio::time::timeout(FIRST_BYTES_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {
            match tokio::time::timeout(FIRST_BYTES_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => Some(Connection::Tls(Box::new(tls))),
                Ok(Err(failure)) => {
                    debug!(%peer, %failure, "TLS handshake failed");
                    None
                }
                Err(_) => None,
            }
        }
        Ok(Ok(1)) => Some(Connection::Plain(stream)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_identity_builds_an_acceptor() {
        let identity = TlsIdentity {
            files: None,
            names: vec!["127.0.0.1".into()],
        };
        assert!(acceptor(&identity).is_ok());
        let missing = TlsIdentity {
            files: Some((
                "/nonexistent/cert.pem".into(),
                "/nonexistent/key.pem".into(),
            )),
            names: Vec::new(),
        };
        let refused = acceptor(&missing).err().unwrap_or_default();
        assert!(refused.contains("/nonexistent/cert.pem"), "{refused}");
    }
}
