//! Reading certificates and keys from PEM files, and making a self-signed one.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::{PemFiles, TlsError};

pub(super) type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

pub(super) fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let failed = |message: String| TlsError::File {
        what,
        path: path.to_path_buf(),
        message,
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|failure| failed(failure.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|failure| failed(failure.to_string()))?;
    if chain.is_empty() {
        return Err(failed("holds no PEM certificate".to_owned()));
    }
    Ok(chain)
}

pub(super) fn identity(files: &PemFiles) -> Result<Identity, TlsError> {
    let chain = certificates("certificate", &files.certificate)?;
    let key =
        PrivateKeyDer::from_pem_file(&files.private_key).map_err(|failure| TlsError::File {
            what: "private key",
            path: files.private_key.clone(),
            message: failure.to_string(),
        })?;
    Ok((chain, key))
}

/// A certificate for `localhost` and `names`, signed by its own key.
pub(super) fn self_signed(names: &[String]) -> Result<Identity, TlsError> {
    let generated = rcgen::generate_simple_self_signed(subjects(names))
        .map_err(|failure| TlsError::Generate(failure.to_string()))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(generated.key_pair.serialize_der()));
    Ok((vec![generated.cert.der().clone()], key))
}

/// A self-signed certificate and its key as PEM text (`tidemark` tools and tests write them
/// to files).
pub fn self_signed_pem(names: &[String]) -> Result<(String, String), TlsError> {
    let generated = rcgen::generate_simple_self_signed(subjects(names))
        .map_err(|failure| TlsError::Generate(failure.to_string()))?;
    Ok((generated.cert.pem(), generated.key_pair.serialize_pem()))
}

fn subjects(names: &[String]) -> Vec<String> {
    let mut subjects = vec!["localhost".to_owned()];
    subjects.extend(
        names
            .iter()
            .filter(|name| !name.is_empty() && name.as_str() != "localhost")
            .cloned(),
    );
    subjects
}
