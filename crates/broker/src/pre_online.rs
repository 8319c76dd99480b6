//! A master that starts takes its slaves' consumer progress before it serves (RocketMQ 5's
//! "pre-online" step, which Apache runs only in slave-acting-master mode). While the master was
//! away, consumers committed to the slaves; a master that answered QUERY_CONSUMER_OFFSET with
//! its pre-crash offsets would send a consumer that starts now back over everything consumed
//! meanwhile (apache/rocketmq#1094), until the slave's next sync told it otherwise.
//!
//! Before the broker accepts a single request: ask the name servers for the cluster
//! (GET_BROKER_CLUSTER_INFO), find the other members of this broker name, fetch each one's
//! offsets (GET_ALL_CONSUMER_OFFSET, acknowledged ranges included) and merge them by the same
//! rule slaves use (a newer reset epoch wins, otherwise the larger offset; ranges are joined).
//! Bounded by `pre_online_timeout_ms`; a broker with no slaves, or none answering, goes online
//! with what it has.

use std::time::Duration;

use tidemark_protocol::body::{ClusterInfo, ConsumerOffsetWrapper, MASTER_ID};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingClient;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::offsets::ConsumerOffsetTable;
use crate::state::BrokerState;

/// One call to a name server or a slave waits at most this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// What the step did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PreOnline {
    /// The other members of this broker name found at the name servers.
    pub peers: Vec<String>,
    /// The peers whose offsets were merged.
    pub answered: usize,
    /// Queue entries whose stored progress changed.
    pub changed: usize,
}

/// Runs the step (masters only); see the module documentation.
pub(crate) async fn take_slaves_progress(state: &BrokerState) -> PreOnline {
    let timeout = Duration::from_millis(state.config.pre_online_timeout_ms);
    if state.config.is_slave() || timeout.is_zero() {
        return PreOnline::default();
    }
    let deadline = Instant::now() + timeout;
    let client = RemotingClient::new(state.remoting_client_config(), None);
    let mut outcome = PreOnline::default();
    let own = state.config.broker_addr();
    for namesrv in state.config.name_servers() {
        let left = deadline.saturating_duration_since(Instant::now());
        let request = RemotingCommand::request(RequestCode::GetBrokerClusterInfo);
        let Ok(response) = client
            .invoke(&namesrv, request, left.min(CALL_TIMEOUT))
            .await
        else {
            continue;
        };
        if response.response_code() != ResponseCode::Success {
            continue;
        }
        let Ok(cluster) = ClusterInfo::from_json_bytes(&response.body) else {
            warn!(%namesrv, "cluster info unreadable; asking the next name server");
            continue;
        };
        if let Some(members) = cluster.broker_addr_table.get(&state.config.broker_name) {
            outcome.peers = members
                .broker_addrs
                .iter()
                .filter(|(id, addr)| **id != MASTER_ID && **addr != own)
                .map(|(_, addr)| addr.clone())
                .collect();
        }
        break;
    }
    for peer in &outcome.peers {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            warn!(%peer, "pre-online time is up; going online without this slave's progress");
            break;
        }
        let request = RemotingCommand::request(RequestCode::GetAllConsumerOffset);
        let response = match client.invoke(peer, request, left.min(CALL_TIMEOUT)).await {
            Ok(response) => response,
            Err(error) => {
                warn!(%peer, %error, "slave did not answer; going online without its progress");
                continue;
            }
        };
        outcome.answered += 1;
        // A slave with no offsets at all answers an error: nothing to take.
        if response.response_code() != ResponseCode::Success {
            continue;
        }
        match ConsumerOffsetWrapper::from_json_bytes(&response.body) {
            Ok(wrapper) => {
                let theirs = ConsumerOffsetTable::from_wrapper(&wrapper);
                outcome.changed += state.progress.offsets.merge_from_peer(&theirs);
            }
            Err(error) => warn!(%peer, %error, "slave's consumer offsets unreadable"),
        }
    }
    client.shutdown();
    if !outcome.peers.is_empty() {
        info!(
            slaves = outcome.peers.len(),
            answered = outcome.answered,
            changed = outcome.changed,
            "took the slaves' consumer progress before going online"
        );
    }
    outcome
}
