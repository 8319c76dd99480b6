//! `tidemark-controller`: the controllers of RocketMQ 5's controller mode. Three or five of
//! them replicate, through Raft ([`openraft`]), which brokers form each broker set, who is
//! master and at which epoch, and which replicas are in sync with it; when a master stops
//! sending heartbeats, the leader elects a new one from its SyncStateSet.
//!
//! - [`replicas`] — the replicated state and its deterministic commands;
//! - [`raft`] — openraft's log (a [`Journal`](tidemark_storage::journal::Journal)), state
//!   machine and peer transport;
//! - [`liveness`] — broker heartbeats, local to each controller;
//! - [`controller`] — one controller: Raft, state, elections, role-change notices;
//! - [`requests`] — the remoting requests brokers and `mqadmin` send (Apache's codes).

pub mod controller;
pub mod liveness;
pub mod raft;
pub mod replicas;
pub mod requests;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use controller::{Controller, ControllerError, ControllerSettings, Leadership};
pub use requests::ControllerHandler;

/// Serves `controller` on `listener` until `shutdown` resolves (brokers, admin tools and the
/// other controllers all use this port).
pub async fn serve(
    listener: TcpListener,
    controller: Arc<Controller>,
    config: tidemark_remoting::ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    tidemark_remoting::serve(
        listener,
        Arc::new(ControllerHandler::new(controller)),
        config,
        shutdown,
    )
    .await;
}
