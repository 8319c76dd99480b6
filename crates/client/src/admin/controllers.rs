//! The controllers as an operator asks them (mqadmin `getControllerMetaData` and
//! `getSyncStateSet`): who leads, and each broker set's master, epochs and SyncStateSet as the
//! leader has them. Free functions over a remoting client (asking controllers needs no name
//! server), and the same through an [`Admin`].

use std::time::Duration;

use tidemark_protocol::body::BrokerReplicasInfo;
use tidemark_protocol::headers::GetMetaDataResponseHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingClient;

use super::Admin;
use crate::error::Result;
use crate::instance::{bad_response, broker_error};

/// One controller's answer about the Raft group; `None` where it did not answer.
#[derive(Debug, Clone)]
pub struct ControllerAnswer {
    pub addr: String,
    pub metadata: Option<GetMetaDataResponseHeader>,
}

impl ControllerAnswer {
    /// The leader's address this controller names, if any.
    pub fn leader_addr(&self) -> Option<&str> {
        self.metadata
            .as_ref()
            .and_then(|header| header.controller_leader_address.as_deref())
            .filter(|addr| !addr.is_empty())
    }
}

/// What each of `controllers` says of who leads (CONTROLLER_GET_METADATA_INFO), in order.
pub async fn controller_metadata(
    remoting: &RemotingClient,
    controllers: &[String],
    timeout: Duration,
) -> Vec<ControllerAnswer> {
    let mut answers = Vec::with_capacity(controllers.len());
    for addr in controllers {
        let request = RemotingCommand::request(RequestCode::ControllerGetMetadataInfo);
        let metadata = remoting
            .invoke(addr, request, timeout)
            .await
            .ok()
            .filter(|response| response.response_code() == ResponseCode::Success)
            .and_then(|response| response.decode_header::<GetMetaDataResponseHeader>().ok());
        answers.push(ControllerAnswer {
            addr: addr.clone(),
            metadata,
        });
    }
    answers
}

/// The leader among `answers`: the one that says it leads, else the one any names.
pub fn controller_leader(answers: &[ControllerAnswer]) -> Option<String> {
    answers
        .iter()
        .find(|answer| answer.metadata.as_ref().is_some_and(|m| m.is_leader))
        .and_then(ControllerAnswer::leader_addr)
        .or_else(|| answers.iter().find_map(ControllerAnswer::leader_addr))
        .map(str::to_owned)
}

/// `broker_names`' replicas as the controller `leader` has them
/// (CONTROLLER_GET_SYNC_STATE_DATA).
pub async fn sync_state_data(
    remoting: &RemotingClient,
    leader: &str,
    broker_names: &[String],
    timeout: Duration,
) -> Result<BrokerReplicasInfo> {
    let request = RemotingCommand::request(RequestCode::ControllerGetSyncStateData)
        .with_body(broker_names.to_vec().to_json_bytes());
    let response = remoting.invoke(leader, request, timeout).await?;
    if response.response_code() != ResponseCode::Success {
        return Err(broker_error(leader, response.response_code(), &response));
    }
    BrokerReplicasInfo::from_json_bytes(&response.body).map_err(|error| bad_response(leader, error))
}

impl Admin {
    /// [`controller_metadata`] over this admin's connections.
    pub async fn controller_metadata(&self, controllers: &[String]) -> Vec<ControllerAnswer> {
        let (remoting, timeout) = self.instance.remoting_and_timeout();
        controller_metadata(remoting, controllers, timeout).await
    }

    /// [`sync_state_data`] over this admin's connections.
    pub async fn sync_state_data(
        &self,
        leader: &str,
        broker_names: &[String],
    ) -> Result<BrokerReplicasInfo> {
        let (remoting, timeout) = self.instance.remoting_and_timeout();
        sync_state_data(remoting, leader, broker_names, timeout).await
    }
}
