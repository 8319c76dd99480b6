//! TLS on Tidemark's ports, with rustls (ring as the crypto provider).
//!
//! A server port runs in one of RocketMQ's three modes (Java `TlsMode`, set there by the
//! `tls.server.mode` system property): disabled, permissive (TLS and plaintext on the same
//! port, told apart by the connection's first byte) or enforcing. Its certificate and key come
//! from PEM files, re-read when they change, or — without files — from a self-signed
//! certificate made at start, which is what RocketMQ's servers do in their default test mode
//! and what its clients accept by default (they do not check the server's certificate unless
//! told to). Client certificates are asked for and checked only when a CA file is given.
//!
//! Clients ([`ClientTls`]) trust any server certificate unless given a CA file to check it
//! against, as RocketMQ's clients do (`tls.client.authServer` is off by default), and can
//! present a certificate of their own.

mod client;
mod pem;
mod server;
pub(crate) mod stream;

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

pub use client::{ClientTls, ClientTlsSettings};
pub use pem::self_signed_pem;
pub use server::{watch_files, ServerTls, ServerTlsSettings};
pub use stream::Stream;

impl From<tokio::net::TcpStream> for Stream {
    fn from(stream: tokio::net::TcpStream) -> Self {
        Stream::Plain(stream)
    }
}

/// How a server port treats TLS (RocketMQ's `tls.server.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// Plaintext only; a TLS client's handshake is read as a malformed frame.
    Disabled,
    /// TLS and plaintext clients on the same port (RocketMQ's default).
    #[default]
    Permissive,
    /// TLS only; a plaintext client is disconnected.
    Enforcing,
}

impl TlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disabled => "disabled",
            TlsMode::Permissive => "permissive",
            TlsMode::Enforcing => "enforcing",
        }
    }
}

impl std::fmt::Display for TlsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TlsMode {
    type Err = TlsError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "disabled" => Ok(TlsMode::Disabled),
            "permissive" => Ok(TlsMode::Permissive),
            "enforcing" => Ok(TlsMode::Enforcing),
            _ => Err(TlsError::Mode(text.to_owned())),
        }
    }
}

/// A certificate chain and its private key, PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemFiles {
    pub certificate: PathBuf,
    pub private_key: PathBuf,
}

/// A handshake (or the first byte before it) that takes longer than this is abandoned.
pub const HANDSHAKE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// What can go wrong setting TLS up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    #[error("TLS mode {0:?} is not one of disabled, permissive, enforcing")]
    Mode(String),
    #[error("{what} {path}: {message}")]
    File {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("self-signed certificate: {0}")]
    Generate(String),
    #[error("TLS configuration: {0}")]
    Config(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_rocketmq_spells_them() {
        for mode in [TlsMode::Disabled, TlsMode::Permissive, TlsMode::Enforcing] {
            assert_eq!(mode.as_str().parse::<TlsMode>().ok(), Some(mode));
        }
        assert_eq!(
            "ENFORCING".parse::<TlsMode>().ok(),
            Some(TlsMode::Enforcing)
        );
        let refused = "strict".parse::<TlsMode>().err().map(|e| e.to_string());
        assert!(refused.is_some_and(|text| text.contains("strict")));
    }
}
