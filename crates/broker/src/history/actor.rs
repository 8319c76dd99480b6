//! Who asked for a change, as a history entry records it.

use tidemark_acl::{AccessControl, Principal};
use tidemark_protocol::RemotingCommand;
use tidemark_remoting::Channel;

use super::Actor;

/// The extension field in which the gRPC gateway names the ACL account it verified for a
/// request it hands to this broker's handler in the same process: its commands carry no
/// remoting signature. Read only on in-process connections; a network peer setting it is
/// ignored.
pub const GATEWAY_ACCOUNT: &str = "tidemarkGatewayAccount";

impl Actor {
    /// The actor of `request` arriving on `channel`: the ACL account whose signature the broker
    /// checked (or the gateway verified), `white-listed` for an address ACL does not check,
    /// `open` on a broker without ACL; the address, and the client's language and version.
    pub fn of_request(
        acl: Option<&AccessControl>,
        channel: &Channel,
        request: &RemotingCommand,
    ) -> Actor {
        let peer = channel.peer_addr();
        let vouched = channel
            .is_in_process()
            .then(|| request.ext_fields.get(GATEWAY_ACCOUNT))
            .flatten();
        let account = match (acl, vouched) {
            (None, _) => "open".to_owned(),
            (Some(_), Some(account)) => account.to_owned(),
            (Some(acl), None) => match acl.principal(request, peer.ip()) {
                Ok(Principal::Account(account)) => account,
                Ok(Principal::WhiteListed) => "white-listed".to_owned(),
                // The guard refused such requests before any handler ran; a record names it
                // still.
                Err(_) => "unverified".to_owned(),
            },
        };
        Actor {
            account,
            address: peer.to_string(),
            client: format!("{} {}", request.language.name(), request.version),
        }
    }
}
