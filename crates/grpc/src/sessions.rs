//! gRPC clients as the broker sees them. Each client (by its `x-mq-client-id`) gets one
//! in-process remoting connection, so the broker's handler serves its calls exactly as it serves
//! a remoting client's — heartbeats register it, the connection's id identifies it — and the
//! settings it sent on its Telemetry stream.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tidemark_protocol::RemotingCommand;
use tidemark_remoting::Channel;
use tokio::sync::mpsc;

use crate::client_status::ConsumerActivity;
use crate::proto::{settings::PubSub, Settings, TelemetryCommand};

/// Where commands for a client's Telemetry stream go (settings, transaction checks, …).
pub type Outbound = mpsc::Sender<Result<TelemetryCommand, tonic::Status>>;

/// One connected gRPC client.
#[derive(Debug)]
pub struct Session {
    pub client_id: String,
    pub channel: Channel,
    /// What it consumed, for GET_CONSUMER_RUNNING_INFO.
    pub activity: ConsumerActivity,
    inner: Mutex<SessionState>,
}

#[derive(Debug, Default)]
struct SessionState {
    settings: Option<Settings>,
    last_seen_ms: i64,
    /// The client's open Telemetry stream: where server commands (check-backs) go.
    telemetry: Option<Outbound>,
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, SessionState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn settings(&self) -> Option<Settings> {
        self.lock().settings.clone()
    }

    pub fn set_settings(&self, settings: Settings) {
        self.lock().settings = Some(settings);
    }

    pub fn set_telemetry(&self, outbound: Outbound) {
        self.lock().telemetry = Some(outbound);
    }

    /// The open Telemetry stream, if the client has one.
    pub fn telemetry(&self) -> Option<Outbound> {
        self.lock()
            .telemetry
            .clone()
            .filter(|outbound| !outbound.is_closed())
    }

    /// Whether the client's settings publish `topic`.
    pub fn publishes(&self, topic: &str) -> bool {
        match self
            .lock()
            .settings
            .as_ref()
            .and_then(|s| s.pub_sub.as_ref())
        {
            Some(PubSub::Publishing(publishing)) => publishing
                .topics
                .iter()
                .any(|resource| crate::convert::full_name(Some(resource)) == topic),
            _ => false,
        }
    }

    /// The topics the client's settings publish.
    pub fn published_topics(&self) -> Vec<String> {
        match self
            .lock()
            .settings
            .as_ref()
            .and_then(|s| s.pub_sub.as_ref())
        {
            Some(PubSub::Publishing(publishing)) => publishing
                .topics
                .iter()
                .map(|resource| crate::convert::full_name(Some(resource)))
                .collect(),
            _ => Vec::new(),
        }
    }

    pub fn touch(&self, now_ms: i64) {
        self.lock().last_seen_ms = now_ms;
    }

    fn last_seen(&self) -> i64 {
        self.lock().last_seen_ms
    }
}

/// Every connected client, by client id. Owns its lock; returns shared sessions.
#[derive(Debug)]
pub struct Sessions {
    clients: Mutex<HashMap<String, Arc<Session>>>,
    /// Where requests the broker sends over a client's connection are queued.
    broker_requests: mpsc::Sender<RemotingCommand>,
}

impl Sessions {
    pub fn new(broker_requests: mpsc::Sender<RemotingCommand>) -> Self {
        Self {
            clients: Mutex::default(),
            broker_requests,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every session, for a look over all clients (each copy shared).
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.lock().values().cloned().collect()
    }

    /// The client's session, opened on its first call.
    pub fn get_or_open(
        &self,
        client_id: &str,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Arc<Session> {
        let now = tidemark_remoting::now_ms();
        let mut clients = self.lock();
        // Looked up before inserting: every call finds its client, and only the first one
        // needs the id as an owned key.
        let session = match clients.get(client_id) {
            Some(session) => session.clone(),
            None => clients
                .entry(client_id.to_owned())
                .or_insert_with(|| {
                    Arc::new(Session {
                        client_id: client_id.to_owned(),
                        channel: Channel::in_process_to(peer, local, self.broker_requests.clone()),
                        activity: ConsumerActivity::new(now),
                        inner: Mutex::new(SessionState::default()),
                    })
                })
                .clone(),
        };
        drop(clients);
        session.touch(now);
        session
    }

    pub fn get(&self, client_id: &str) -> Option<Arc<Session>> {
        self.lock().get(client_id).cloned()
    }

    /// Forgets a client (it said goodbye); its session, if it had one.
    pub fn close(&self, client_id: &str) -> Option<Arc<Session>> {
        self.lock().remove(client_id)
    }

    /// Forgets clients not heard from since `before_ms`; the sessions removed.
    pub fn expire(&self, before_ms: i64) -> Vec<Arc<Session>> {
        let mut clients = self.lock();
        let stale: Vec<String> = clients
            .iter()
            .filter(|(_, session)| session.last_seen() < before_ms)
            .map(|(id, _)| id.clone())
            .collect();
        stale
            .into_iter()
            .filter_map(|id| clients.remove(&id))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
