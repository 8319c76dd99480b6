//! Request signing as RocketMQ's ACL defines it (the Java client's `AclClientRPCHook`, verified
//! by the broker's `PlainAccessValidator`): an HMAC-SHA1 over the request's extension field
//! values, in key order, followed by the body, sent base64-encoded in the `Signature` field.
//!
//! Clients sign with [`Credentials`] set on a [`ChannelConfig`](crate::ChannelConfig); servers
//! check with [`signature_matches`]. Both use [`signed_content`], so the two sides cannot drift.

use std::fmt;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use tidemark_protocol::RemotingCommand;

/// Extension field naming the account.
pub const ACCESS_KEY: &str = "AccessKey";
/// Extension field carrying the base64 HMAC-SHA1 signature.
pub const SIGNATURE: &str = "Signature";
/// Extension field carrying an optional session token (signed like any other field).
pub const SECURITY_TOKEN: &str = "SecurityToken";
/// Set by the Java admin tool on message queries; the broker leaves it out of the signed
/// content because the client adds it after signing.
const UNIQUE_KEY_QUERY: &str = "_UNIQUE_KEY_QUERY";

/// The bytes a signature covers: every extension field value except the signature itself (and
/// the unique-key query flag), ordered by field name, then the body.
pub fn signed_content(request: &RemotingCommand) -> Vec<u8> {
    let mut fields: Vec<(&str, &str)> = request
        .ext_fields
        .iter()
        .filter(|(key, _)| *key != SIGNATURE && *key != UNIQUE_KEY_QUERY)
        .collect();
    // Java sorts with a TreeMap (UTF-16 order); for the ASCII names of real headers byte
    // order is the same.
    fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let length = fields.iter().map(|(_, value)| value.len()).sum::<usize>() + request.body.len();
    let mut content = Vec::with_capacity(length);
    for (_, value) in fields {
        content.extend_from_slice(value.as_bytes());
    }
    content.extend_from_slice(&request.body);
    content
}

/// The HMAC-SHA1 of `content` under `secret_key`, not yet finalized. HMAC takes keys of any
/// length, so this is always `Some`; there is still no panic path for a key.
fn mac_of(secret_key: &str, content: &[u8]) -> Option<Hmac<Sha1>> {
    let mut mac = Hmac::<Sha1>::new_from_slice(secret_key.as_bytes()).ok()?;
    mac.update(content);
    Some(mac)
}

/// The base64 signature of `content` under `secret_key`.
pub fn sign_content(content: &[u8], secret_key: &str) -> String {
    mac_of(secret_key, content)
        .map(|mac| base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()))
        .unwrap_or_default()
}

/// The hex HMAC-SHA1 of `content` under `secret_key`: the signature RocketMQ 5's gRPC clients
/// put in their `authorization` header (over the call's `x-mq-date-time`).
pub fn sign_content_hex(content: &[u8], secret_key: &str) -> String {
    mac_of(secret_key, content)
        .map(|mac| tidemark_protocol::hex::encode_upper(&mac.finalize().into_bytes()))
        .unwrap_or_default()
}

/// Whether `signature` (base64, as sent) is `content`'s signature under `secret_key`. The
/// comparison takes the same time wherever the first wrong byte is.
pub fn signature_matches(content: &[u8], secret_key: &str, signature: &str) -> bool {
    // A signature is 20 bytes: anything much longer is refused before decoding it.
    if signature.len() > 64 {
        return false;
    }
    let Ok(tag) = base64::engine::general_purpose::STANDARD.decode(signature) else {
        return false;
    };
    hmac_matches(content, secret_key, &tag)
}

/// Whether `tag` is the raw HMAC-SHA1 of `content` under `secret_key` (RocketMQ 5's gRPC
/// clients send it hex-encoded), compared in constant time.
pub fn hmac_matches(content: &[u8], secret_key: &str, tag: &[u8]) -> bool {
    mac_of(secret_key, content).is_some_and(|mac| mac.verify_slice(tag).is_ok())
}

/// An account's credentials, used to sign every request a client sends.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
    pub security_token: Option<String>,
}

impl Credentials {
    pub fn new(access_key: impl Into<String>, secret_key: impl Into<String>) -> Self {
        Self {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            security_token: None,
        }
    }

    /// Adds the account fields and the signature to `request` (which must not change after).
    pub fn sign(&self, request: &mut RemotingCommand) {
        request.ext_fields.remove(SIGNATURE);
        request
            .ext_fields
            .insert(ACCESS_KEY, self.access_key.as_str());
        if let Some(token) = &self.security_token {
            request.ext_fields.insert(SECURITY_TOKEN, token.as_str());
        }
        let signature = sign_content(&signed_content(request), &self.secret_key);
        request.ext_fields.insert(SIGNATURE, signature);
    }
}

impl fmt::Debug for Credentials {
    // The secret and the token never reach a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_protocol::RequestCode;

    #[test]
    fn a_signed_request_verifies_and_a_changed_one_does_not() {
        let credentials = Credentials::new("alice-key", "alice-secret");
        let mut request = RemotingCommand::request(RequestCode::SendMessage).with_body("hello");
        request.ext_fields.insert("topic", "orders");
        request.ext_fields.insert("a", "producer-group");
        credentials.sign(&mut request);
        let signature = request
            .ext_fields
            .get(SIGNATURE)
            .unwrap_or_default()
            .to_owned();
        let content = signed_content(&request);
        assert!(signature_matches(&content, "alice-secret", &signature));
        assert!(!signature_matches(&content, "wrong-secret", &signature));

        request.ext_fields.insert("topic", "payments");
        assert!(!signature_matches(
            &signed_content(&request),
            "alice-secret",
            &signature
        ));
        assert!(!signature_matches(&content, "alice-secret", "not base64!"));
        assert!(!signature_matches(
            &content,
            "alice-secret",
            &"A".repeat(500)
        ));
    }

    #[test]
    fn content_is_field_values_in_name_order_then_the_body() {
        let mut request = RemotingCommand::request(RequestCode::SendMessage).with_body("B");
        request.ext_fields.insert("b", "2");
        request.ext_fields.insert("a", "1");
        request.ext_fields.insert(SIGNATURE, "ignored");
        request.ext_fields.insert(UNIQUE_KEY_QUERY, "ignored");
        assert_eq!(signed_content(&request), b"12B");
    }

    #[test]
    fn signature_is_java_hmac_sha1_base64() {
        // HMAC-SHA1 with key "12345678" over "abc", base64 (Python hmac and javax.crypto agree).
        assert_eq!(
            sign_content(b"abc", "12345678"),
            "BOigG5+Fiv0354g5bQuwOUOPMp0="
        );
    }
}
