//! TLS flags shared by the servers (`dev`, `namesrv`) and the tools (`admin`, `bench`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tidemark_remoting::tls::{
    ClientTls, ClientTlsSettings, PemFiles, ServerTls, ServerTlsSettings, TlsMode,
};

#[derive(Debug, Args, Clone)]
pub struct ServerTlsArgs {
    /// TLS on every port: `disabled`, `permissive` (TLS and plaintext clients on one port,
    /// RocketMQ's default) or `enforcing` (TLS only).
    #[arg(long, default_value = "permissive")]
    pub tls_mode: String,
    /// PEM certificate chain served over TLS (re-read when it changes); without it, a
    /// self-signed certificate made at start.
    #[arg(long, requires = "tls_private_key")]
    pub tls_certificate: Option<PathBuf>,
    #[arg(long, requires = "tls_certificate")]
    pub tls_private_key: Option<PathBuf>,
    /// Require TLS clients to present a certificate signed by one of these CAs (PEM).
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,
}

impl ServerTlsArgs {
    pub fn mode(&self) -> anyhow::Result<TlsMode> {
        self.tls_mode.parse().context("--tls-mode")
    }

    pub fn files(&self) -> Option<PemFiles> {
        Some(PemFiles {
            certificate: self.tls_certificate.clone()?,
            private_key: self.tls_private_key.clone()?,
        })
    }

    /// The port's TLS, files read off the async threads.
    pub async fn server_tls(&self, names: Vec<String>) -> anyhow::Result<Arc<ServerTls>> {
        let settings = ServerTlsSettings {
            mode: self.mode()?,
            files: self.files(),
            names,
            client_ca: self.tls_client_ca.clone(),
            ..ServerTlsSettings::default()
        };
        let built = tokio::task::spawn_blocking(move || ServerTls::new(settings, Vec::new()))
            .await
            .context("TLS set-up task")?
            .context("TLS")?;
        Ok(Arc::new(built))
    }
}

#[derive(Debug, Args, Clone)]
pub struct ClientTlsArgs {
    /// Dial TLS (the Java client's `-Dtls.enable=true`); the servers' certificates are not
    /// checked unless --tls-trust names the CAs to check them against.
    #[arg(long)]
    pub tls: bool,
    #[arg(long, requires = "tls")]
    pub tls_trust: Option<PathBuf>,
    /// A client certificate (PEM) for servers that require one.
    #[arg(long, requires_all = ["tls", "tls_client_private_key"])]
    pub tls_client_certificate: Option<PathBuf>,
    #[arg(long, requires = "tls_client_certificate")]
    pub tls_client_private_key: Option<PathBuf>,
}

impl ClientTlsArgs {
    pub fn client_tls(&self) -> anyhow::Result<Option<Arc<ClientTls>>> {
        if !self.tls {
            return Ok(None);
        }
        let identity = match (&self.tls_client_certificate, &self.tls_client_private_key) {
            (Some(certificate), Some(private_key)) => Some(PemFiles {
                certificate: certificate.clone(),
                private_key: private_key.clone(),
            }),
            _ => None,
        };
        let settings = ClientTlsSettings {
            trust: self.tls_trust.clone(),
            identity,
        };
        Ok(Some(Arc::new(ClientTls::new(&settings).context("TLS")?)))
    }
}
