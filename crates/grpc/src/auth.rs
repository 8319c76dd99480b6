//! ACL for gRPC callers, when the broker checks ACL: RocketMQ 5's clients sign each call's
//! `x-mq-date-time` header with their secret and send it in `authorization`:
//! `MQv2-HMAC-SHA1 Credential=<access key>[/...], SignedHeaders=x-mq-date-time, Signature=<hex>`.
//! The same rules as the remoting port apply (the broker's `plain_acl.yml`); what each call
//! touches is checked on the remoting request the gateway makes of it.

use std::net::IpAddr;

use tidemark_acl::{AccessControl, Perm, Principal, Resource};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::signing::hmac_matches;
use tonic::metadata::MetadataMap;

const AUTHORIZATION: &str = "authorization";
const DATE_TIME: &str = "x-mq-date-time";

/// The access key and the raw signature of an `authorization` value; `None` when it names no
/// access key (the Python client sends an empty `Credential=` without credentials).
fn parse_authorization(value: &str) -> Result<Option<(String, Vec<u8>)>, String> {
    let malformed = || format!("malformed authorization header: {value:?}");
    // The scheme before the first space is not checked, as RocketMQ does not check it.
    let (_, fields) = value.trim().split_once(' ').ok_or_else(malformed)?;
    let mut access_key = None;
    let mut signature = None;
    for field in fields.split(',') {
        let (name, content) = field.trim().split_once('=').ok_or_else(malformed)?;
        match name.trim() {
            // The Go client appends `//Rocketmq` to the key.
            "Credential" => {
                access_key = content.split('/').next().map(str::trim).map(str::to_owned)
            }
            "Signature" => signature = Some(content.trim().to_owned()),
            _ => {}
        }
    }
    let Some(access_key) = access_key.filter(|key| !key.is_empty()) else {
        return Ok(None);
    };
    let signature = signature.ok_or_else(malformed)?;
    // Java sends upper-case hex, Go and Python lower-case: either decodes.
    let tag = tidemark_protocol::hex::decode(&signature)
        .ok_or_else(|| format!("the signature of {access_key} is not hex"))?;
    Ok(Some((access_key, tag)))
}

/// Who is calling, from the call's metadata: the refusal's text when the call may not go on.
pub fn authenticate(
    acl: &AccessControl,
    metadata: &MetadataMap,
    peer: IpAddr,
) -> Result<Principal, String> {
    let text = |name: &str| metadata.get(name).and_then(|value| value.to_str().ok());
    let credentials = match text(AUTHORIZATION) {
        Some(value) => parse_authorization(value),
        None => Ok(None),
    };
    let outcome = credentials.and_then(|credentials| {
        let (access_key, tag) = match credentials {
            Some((key, tag)) => (Some(key), tag),
            None => (None, Vec::new()),
        };
        let date_time = text(DATE_TIME).unwrap_or_default();
        acl.authenticate(peer, access_key.as_deref(), |secret| {
            hmac_matches(date_time.as_bytes(), secret, &tag)
        })
    });
    acl.count(&outcome, peer, RequestCode::Unknown(0));
    outcome
}

/// Whether `principal` may make `command`: `None`, or the NO_PERMISSION answer.
pub fn authorize_command(
    acl: &AccessControl,
    principal: &Principal,
    peer: IpAddr,
    command: &RemotingCommand,
) -> Option<RemotingCommand> {
    let code = command.request_code();
    let outcome = match principal {
        // Nothing is checked for a white-listed address, so nothing needs reading.
        Principal::WhiteListed => return None,
        Principal::Account(_) => tidemark_acl::needed(command)
            .map_err(|unreadable| unreadable.to_string())
            .and_then(|needs| acl.authorize(principal, code, &needs)),
    };
    answer(acl, outcome, peer, code)
}

/// Whether `principal` may learn `topic`'s route (RocketMQ: PUB or SUB on it).
pub fn authorize_route(
    acl: &AccessControl,
    principal: &Principal,
    peer: IpAddr,
    topic: &str,
) -> Option<RemotingCommand> {
    let needs = [(Resource::topic(topic), Perm::ANY)];
    refusal(
        acl,
        principal,
        peer,
        RequestCode::GetRouteInfoByTopic,
        &needs,
    )
}

fn refusal(
    acl: &AccessControl,
    principal: &Principal,
    peer: IpAddr,
    code: RequestCode,
    needs: &[(Resource, Perm)],
) -> Option<RemotingCommand> {
    answer(acl, acl.authorize(principal, code, needs), peer, code)
}

/// Counts a refusal and turns it into the NO_PERMISSION answer.
fn answer(
    acl: &AccessControl,
    outcome: Result<(), String>,
    peer: IpAddr,
    code: RequestCode,
) -> Option<RemotingCommand> {
    acl.count(&outcome, peer, code);
    outcome
        .err()
        .map(|reason| RemotingCommand::response(ResponseCode::NoPermission, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_clients_authorization_form_parses() {
        let java =
            "MQv2-HMAC-SHA1 Credential=alice-key, SignedHeaders=x-mq-date-time, Signature=0A1B";
        assert_eq!(
            parse_authorization(java),
            Ok(Some(("alice-key".into(), vec![0x0a, 0x1b])))
        );
        let go = "MQv2-HMAC-SHA1 Credential=alice-key//Rocketmq, SignedHeaders=x-mq-date-time, Signature=0a1b";
        assert_eq!(
            parse_authorization(go),
            Ok(Some(("alice-key".into(), vec![0x0a, 0x1b])))
        );
        let python_anonymous =
            "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=00";
        assert_eq!(parse_authorization(python_anonymous), Ok(None));
        assert!(parse_authorization("garbage").is_err());
        assert!(parse_authorization("MQv2 Credential=a, Signature=zz").is_err());
        assert!(parse_authorization("MQv2 Credential=a, noequals").is_err());
    }
}
