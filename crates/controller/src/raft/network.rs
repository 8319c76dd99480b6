//! Raft messages between controllers, over the same remoting port brokers use: each message is
//! a request with one of Tidemark's Raft codes and openraft's message as a JSON body; the
//! answer's body is the receiving node's whole `Result`, so its refusals (a higher vote, a
//! conflict) reach the sender as they were.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingClient;

use super::{ControllerRaft, NodeId, TypeConfig};

/// Opens connections to peers (one [`RemotingClient`] shared by all of them).
#[derive(Debug, Clone)]
pub struct PeerNetwork {
    client: Arc<RemotingClient>,
}

impl PeerNetwork {
    pub fn new(client: Arc<RemotingClient>) -> Self {
        Self { client }
    }
}

/// One peer, as Raft's replication and election tasks see it.
#[derive(Debug)]
pub struct Peer {
    client: Arc<RemotingClient>,
    id: NodeId,
    addr: String,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            client: self.client.clone(),
            id: target,
            addr: node.addr.clone(),
        }
    }
}

/// A failure before the peer's own answer: not reached, or it answered something unreadable.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TransportError(String);

impl Peer {
    async fn call<Req, Resp, E>(
        &self,
        code: RequestCode,
        message: &Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = serde_json::to_vec(message)
            .map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        let request = RemotingCommand::request(code).with_body(body);
        let response = self
            .client
            .invoke(&self.addr, request, timeout)
            .await
            .map_err(|error| RPCError::Unreachable(Unreachable::new(&error)))?;
        if response.response_code() != ResponseCode::Success {
            let refusal = TransportError(format!(
                "controller {} at {} answered {}: {}",
                self.id,
                self.addr,
                response.response_code(),
                response.remark.clone().unwrap_or_default()
            ));
            return Err(RPCError::Network(NetworkError::new(&refusal)));
        }
        let answer: Result<Resp, E> = serde_json::from_slice(&response.body)
            .map_err(|error| RPCError::Network(NetworkError::new(&error)))?;
        answer.map_err(|refused| RPCError::RemoteError(RemoteError::new(self.id, refused)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(RequestCode::RaftAppendEntries, &rpc, option.hard_ttl())
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(RequestCode::RaftInstallSnapshot, &rpc, option.hard_ttl())
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(RequestCode::RaftVote, &rpc, option.hard_ttl())
            .await
    }
}

/// Serves one Raft request from a peer; `None` when `request` is not a Raft request.
pub async fn serve_raft_request(
    raft: &ControllerRaft,
    request: &RemotingCommand,
) -> Option<RemotingCommand> {
    let body = match request.request_code() {
        RequestCode::RaftAppendEntries => match decode(&request.body) {
            Ok(rpc) => encode(&raft.append_entries(rpc).await),
            Err(refusal) => return Some(refusal),
        },
        RequestCode::RaftVote => match decode(&request.body) {
            Ok(rpc) => encode(&raft.vote(rpc).await),
            Err(refusal) => return Some(refusal),
        },
        RequestCode::RaftInstallSnapshot => match decode(&request.body) {
            Ok(rpc) => encode(&raft.install_snapshot(rpc).await),
            Err(refusal) => return Some(refusal),
        },
        _ => return None,
    };
    Some(match body {
        Ok(body) => RemotingCommand::response(ResponseCode::Success, None).with_body(body),
        Err(refusal) => refusal,
    })
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, RemotingCommand> {
    serde_json::from_slice(body).map_err(|error| {
        RemotingCommand::response(
            ResponseCode::ControllerInvalidRequest,
            format!("unreadable Raft message: {error}"),
        )
    })
}

fn encode<T: Serialize>(answer: &T) -> Result<Vec<u8>, RemotingCommand> {
    serde_json::to_vec(answer).map_err(|error| {
        RemotingCommand::response(
            ResponseCode::SystemError,
            format!("cannot encode the Raft answer: {error}"),
        )
    })
}
