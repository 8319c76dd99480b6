//! The broker's TLS keys: their checks, and the settings its ports and its own connections
//! are built from.

use std::time::Duration;

use tidemark_remoting::tls::{ClientTlsSettings, PemFiles, ServerTlsSettings, TlsMode};

use crate::config::BrokerConfig;

pub(crate) fn check(config: &BrokerConfig, key: &dyn Fn(&str) -> String) -> Result<(), String> {
    config
        .tls_mode
        .parse::<TlsMode>()
        .map_err(|failure| format!("{}: {failure}", key("tls_mode")))?;
    let pairs = [
        (
            "tls_certificate",
            "tls_private_key",
            &config.tls_certificate,
            &config.tls_private_key,
        ),
        (
            "tls_client_certificate",
            "tls_client_private_key",
            &config.tls_client_certificate,
            &config.tls_client_private_key,
        ),
    ];
    for (certificate, private_key, first, second) in pairs {
        if first.is_some() != second.is_some() {
            return Err(format!(
                "{} and {} go together: set both or neither",
                key(certificate),
                key(private_key)
            ));
        }
    }
    if config.tls_handshake_timeout_ms == 0 {
        return Err(format!(
            "{} must be above 0",
            key("tls_handshake_timeout_ms")
        ));
    }
    Ok(())
}

impl BrokerConfig {
    /// The TLS mode of the broker's ports (checked by `validate`; an unknown spelling reads as
    /// RocketMQ's default, permissive).
    pub fn tls_mode(&self) -> TlsMode {
        self.tls_mode.parse().unwrap_or_default()
    }

    /// How the remoting ports (main, VIP, HA) do TLS.
    pub fn server_tls_settings(&self) -> ServerTlsSettings {
        ServerTlsSettings {
            mode: self.tls_mode(),
            files: pem_files(&self.tls_certificate, &self.tls_private_key),
            names: vec![self.broker_ip1.clone()],
            client_ca: self.tls_client_ca.clone(),
            handshake_timeout: Duration::from_millis(self.tls_handshake_timeout_ms),
        }
    }

    /// How the gRPC port does TLS: the remoting ports' settings, with the gRPC certificate
    /// when one is set.
    pub fn grpc_tls_settings(&self) -> ServerTlsSettings {
        let mut settings = self.server_tls_settings();
        if let Some(files) = pem_files(&self.grpc_tls_certificate, &self.grpc_tls_private_key) {
            settings.files = Some(files);
        }
        settings
    }

    /// How the broker's own connections do TLS; `None`: plaintext.
    pub fn client_tls_settings(&self) -> Option<ClientTlsSettings> {
        self.tls_enable.then(|| ClientTlsSettings {
            trust: self.tls_client_trust.clone(),
            identity: pem_files(&self.tls_client_certificate, &self.tls_client_private_key),
        })
    }
}

fn pem_files(
    certificate: &Option<std::path::PathBuf>,
    private_key: &Option<std::path::PathBuf>,
) -> Option<PemFiles> {
    Some(PemFiles {
        certificate: certificate.clone()?,
        private_key: private_key.clone()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_keys_are_checked_and_read_under_rocketmq_names() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("broker.conf");
        std::fs::write(
            &path,
            "tlsServerMode=enforcing\ntlsServerCertPath=/etc/tm/cert.pem\ntlsServerKeyPath=/etc/tm/key.pem\ntlsEnable=true\n",
        )
        .expect("write");
        let config = BrokerConfig::load(&path).expect("loads");
        assert_eq!(config.tls_mode(), TlsMode::Enforcing);
        let settings = config.server_tls_settings();
        assert_eq!(
            settings.files.map(|files| files.certificate),
            Some("/etc/tm/cert.pem".into())
        );
        assert!(config.client_tls_settings().is_some());

        std::fs::write(&path, "tlsServerMode=strict\n").expect("write");
        let refused = BrokerConfig::load(&path).err().map(|e| e.to_string());
        assert!(
            refused
                .as_deref()
                .is_some_and(|text| text.contains("tls_mode") && text.contains("\"strict\"")),
            "{refused:?}"
        );
        std::fs::write(&path, "tls_certificate = \"/etc/tm/cert.pem\"\n").expect("write");
        let toml = dir.path().join("broker.toml");
        std::fs::rename(&path, &toml).expect("rename");
        let refused = BrokerConfig::load(&toml).err().map(|e| e.to_string());
        assert!(
            refused
                .as_deref()
                .is_some_and(|text| text.contains("tls_private_key")),
            "{refused:?}"
        );
    }
}
