//! Who asked for a change, as a history entry records it.

use std::net::SocketAddr;

use tidemark_acl::{AccessControl, Principal};
use tidemark_protocol::RemotingCommand;

use super::Actor;

impl Actor {
    /// The actor of `request` from `peer`: the ACL account whose signature the broker checked
    /// (`white-listed` for an address ACL does not check, `open` on a broker without ACL),
    /// the address, and the client's language and version.
    pub fn of_request(
        acl: Option<&AccessControl>,
        peer: SocketAddr,
        request: &RemotingCommand,
    ) -> Actor {
        let account = match acl.map(|acl| acl.principal(request, peer.ip())) {
            None => "open".to_owned(),
            Some(Ok(Principal::Account(account))) => account,
            Some(Ok(Principal::WhiteListed)) => "white-listed".to_owned(),
            // The guard refused such requests before any handler ran; a record names it still.
            Some(Err(_)) => "unverified".to_owned(),
        };
        Actor {
            account,
            address: peer.to_string(),
            client: format!("{} {}", request.language.name(), request.version),
        }
    }
}
