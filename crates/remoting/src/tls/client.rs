//! The client side: dialing a TLS port.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::pem;
use super::{PemFiles, Stream, TlsError};

/// How a client does TLS.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTlsSettings {
    /// CA certificates the server's certificate must chain to (and name the host dialed);
    /// `None`: any server certificate is accepted, as RocketMQ's clients do by default.
    pub trust: Option<PathBuf>,
    /// A certificate to present to servers that ask for one.
    pub identity: Option<PemFiles>,
}

/// A TLS dialer built from [`ClientTlsSettings`].
#[derive(Clone)]
pub struct ClientTls {
    connector: TlsConnector,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Reads the files (blocking I/O) and builds the dialer.
    pub fn new(settings: &ClientTlsSettings) -> Result<ClientTls, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|failure| TlsError::Config(failure.to_string()))?;
        let builder = match &settings.trust {
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for certificate in pem::certificates("trusted CA", path)? {
                    roots.add(certificate).map_err(|failure| TlsError::File {
                        what: "trusted CA",
                        path: path.clone(),
                        message: failure.to_string(),
                    })?;
                }
                versions.with_root_certificates(roots)
            }
            None => versions
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyServer(provider))),
        };
        let config = match &settings.identity {
            Some(files) => {
                let (chain, key) = pem::identity(files)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|failure| TlsError::Config(format!("client certificate: {failure}")))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(ClientTls {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// Does the handshake over `stream`, to `host` (a name or an IP address, what the
    /// certificate is checked against when it is checked).
    pub async fn connect(&self, host: &str, stream: TcpStream) -> io::Result<Stream> {
        let name = ServerName::try_from(host.to_owned())
            .map_err(|failure| io::Error::new(io::ErrorKind::InvalidInput, failure))?;
        let tls = self.connector.connect(name, stream).await?;
        Ok(Stream::Client(Box::new(tls)))
    }
}

/// Accepts whatever certificate the server shows, still checking that the server holds its
/// key (the handshake signatures).
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
