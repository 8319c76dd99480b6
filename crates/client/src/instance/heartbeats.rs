//! Heartbeats: what brokers know of this client (its producer groups and consumers), sent to
//! every broker each period, at once to a broker that lost it, and before a broker may need to
//! ask a transactional producer back.

use bytes::Bytes;
use tidemark_protocol::body::{HeartbeatData, ProducerData};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tracing::{debug, warn};

use super::{lock, ClientInstance, CLIENT_INNER_PRODUCER_GROUP};

impl ClientInstance {
    /// A broker does not know this client's consumers (it restarted, or expired them): send
    /// heartbeats now instead of at the next period (30 s), at most once a second. RocketMQ's
    /// clients wait for the period, stalling consumption after every broker restart.
    pub async fn heartbeat_now(&self) {
        let now = tidemark_remoting::now_ms();
        let last = self
            .unscheduled_heartbeat_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        if now - last < 1_000
            || self
                .unscheduled_heartbeat_ms
                .compare_exchange(
                    last,
                    now,
                    std::sync::atomic::Ordering::Relaxed,
                    std::sync::atomic::Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        self.send_heartbeats().await;
    }

    /// Whether brokers must know this client before they can serve it: it has consumers, or a
    /// producer that answers the brokers' requests (transaction check-backs).
    pub(super) fn must_be_known(&self) -> bool {
        !lock(&self.consumers).is_empty() || self.router.target.get().is_some()
    }

    pub(super) fn heartbeat_data(&self) -> HeartbeatData {
        let mut producers: Vec<ProducerData> = lock(&self.producer_groups)
            .iter()
            .map(|group| ProducerData {
                group_name: group.clone(),
            })
            .collect();
        producers.push(ProducerData {
            group_name: CLIENT_INNER_PRODUCER_GROUP.into(),
        });
        HeartbeatData {
            client_id: self.client_id().to_owned(),
            producer_data_set: producers,
            consumer_data_set: lock(&self.consumers).clone(),
            ..HeartbeatData::default()
        }
    }

    /// HEART_BEAT to every known broker (masters only when there are no consumers).
    pub async fn send_heartbeats(&self) {
        let data = self.heartbeat_data();
        let with_slaves = !data.consumer_data_set.is_empty();
        let body = Bytes::from(data.to_json_bytes());
        let targets: Vec<String> = lock(&self.brokers)
            .all_addresses()
            .filter(|(_, id, _)| with_slaves || *id == tidemark_protocol::body::MASTER_ID)
            .map(|(_, _, addr)| addr.to_owned())
            .collect();
        for addr in targets {
            self.heartbeat_to(&addr, body.clone()).await;
        }
    }

    /// One HEART_BEAT to `addr`; remembers that it answered.
    pub(super) async fn heartbeat_to(&self, addr: &str, body: Bytes) {
        let request = RemotingCommand::request(RequestCode::HeartBeat).with_body(body);
        match self.call(addr, request).await {
            Ok(response) if response.response_code() == ResponseCode::Success => {
                lock(&self.heard_by).insert(addr.to_owned());
            }
            Ok(response) => warn!(%addr, code = ?response.response_code(), "heartbeat refused"),
            Err(error) => debug!(%addr, %error, "heartbeat failed"),
        }
    }

    /// Sends `addr` this client's heartbeat now unless it already answered one: a broker that
    /// stored a transaction's half must know the producer before it checks back (a new topic's
    /// first send, a new master after a failover — the periodic heartbeat is 30 s away).
    pub(crate) async fn make_known_to(&self, addr: &str) {
        if lock(&self.heard_by).contains(addr) {
            return;
        }
        let body = Bytes::from(self.heartbeat_data().to_json_bytes());
        self.heartbeat_to(addr, body).await;
    }
}
