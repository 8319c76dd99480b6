//! Certificate authorities for the TLS scenarios: a CA that signs certificates for
//! localhost / 127.0.0.1, written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

/// A CA whose certificate is at [`ca_file`](Self::ca_file).
#[allow(missing_debug_implementations)]
pub struct TestAuthority {
    cert: rcgen::Certificate,
    key: KeyPair,
    dir: PathBuf,
    name: String,
}

/// A certificate and its key, as files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub certificate: PathBuf,
    pub private_key: PathBuf,
}

impl TestAuthority {
    pub fn new(dir: &Path, name: &str) -> TestAuthority {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        let cert = params.self_signed(&key).expect("CA certificate");
        let authority = TestAuthority {
            cert,
            key,
            dir: dir.to_path_buf(),
            name: name.to_owned(),
        };
        std::fs::write(authority.ca_file(), authority.cert.pem()).expect("write CA");
        authority
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A certificate for localhost and 127.0.0.1; `expired`: valid only in 2020.
    pub fn issue(&self, label: &str, expired: bool) -> CertFiles {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("params");
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 12, 31);
        }
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("certificate");
        let files = CertFiles {
            certificate: self.dir.join(format!("{}-{label}.pem", self.name)),
            private_key: self.dir.join(format!("{}-{label}.key", self.name)),
        };
        std::fs::write(&files.certificate, cert.pem()).expect("write certificate");
        std::fs::write(&files.private_key, key.serialize_pem()).expect("write key");
        files
    }
}
