//! Who is using the console, when it checks ACL (its broker does, or `tidemark console` was
//! given `--acl-file`): an account of the ACL file, given by HTTP Basic authentication (access
//! key as user, secret as password), or a white-listed address. The console's admin requests
//! are then signed as that account, so the name server and the brokers allow exactly what the
//! account may do (mqadmin's rules, not the console's).
//! Send the console over TLS or keep it on a trusted network: Basic credentials are plain text.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use tidemark_protocol::RequestCode;
use tidemark_remoting::Credentials;

use super::{error_page, Console};

tokio::task_local! {
    /// The credentials of the request being served (none: ACL off, or a white-listed address).
    static OPERATOR: Option<Credentials>;
}

/// The credentials the current request's admin calls sign with.
pub(super) fn current() -> Option<Credentials> {
    OPERATOR.try_with(Clone::clone).ok().flatten()
}

fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?.trim();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// Equal bytes, compared in time that does not depend on where they differ.
fn same_secret(expected: &[u8], given: &[u8]) -> bool {
    expected.len() == given.len()
        && expected
            .iter()
            .zip(given)
            .fold(0u8, |difference, (a, b)| difference | (a ^ b))
            == 0
}

/// Lets the request through as its operator, or answers 401 asking for credentials.
pub(super) async fn authenticate(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let Some(acl) = console.acl.clone() else {
        return OPERATOR.scope(None, next.run(request)).await;
    };
    let given = basic_credentials(request.headers());
    let outcome = acl.authenticate(
        peer.ip(),
        given.as_ref().map(|(user, _)| user.as_str()),
        |secret| {
            given
                .as_ref()
                .is_some_and(|(_, password)| same_secret(secret.as_bytes(), password.as_bytes()))
        },
    );
    acl.count(&outcome, peer.ip(), RequestCode::Unknown(0));
    match outcome {
        Ok(_) => {
            let credentials = given.map(|(user, password)| Credentials::new(user, password));
            OPERATOR.scope(credentials, next.run(request)).await
        }
        Err(reason) => {
            let mut response = error_page(
                StatusCode::UNAUTHORIZED,
                &format!("Sign in with an account of the cluster's ACL file: {reason}"),
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"Tidemark\", charset=\"UTF-8\""),
            );
            response.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_read_and_secrets_compared_whole() {
        let mut headers = HeaderMap::new();
        // "alice-key:alice-secret"
        headers.insert(
            header::AUTHORIZATION,
            header::HeaderValue::from_static("Basic YWxpY2Uta2V5OmFsaWNlLXNlY3JldA=="),
        );
        assert_eq!(
            basic_credentials(&headers),
            Some(("alice-key".into(), "alice-secret".into()))
        );
        headers.insert(
            header::AUTHORIZATION,
            header::HeaderValue::from_static("Basic !!"),
        );
        assert_eq!(basic_credentials(&headers), None);
        assert!(same_secret(b"secret", b"secret"));
        assert!(!same_secret(b"secret", b"secreT"));
        assert!(!same_secret(b"secret", b"secret2"));
    }
}
