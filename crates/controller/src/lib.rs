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
use std::time::Duration;

use tokio::net::TcpListener;

pub use controller::{Controller, ControllerError, ControllerSettings, Leadership, RaftRole};
pub use requests::ControllerHandler;

/// Serves `controller` on `listener` until `shutdown` resolves (brokers, admin tools and the
/// other controllers all use this port). With `acl`, every request is checked first (writes
/// need an admin account, reads a known one) and the rules are re-read when the file changes;
/// the TLS certificate of `config.tls` is re-read likewise.
pub async fn serve(
    listener: TcpListener,
    controller: Arc<Controller>,
    config: tidemark_remoting::ServerConfig,
    acl: Option<Arc<tidemark_acl::AccessControl>>,
    shutdown: impl Future<Output = ()>,
) {
    let mut handler: Arc<dyn tidemark_remoting::RequestHandler> =
        Arc::new(ControllerHandler::new(controller));
    let stop = tokio_util::sync::CancellationToken::new();
    if let Some(acl) = acl {
        tracing::info!(file = %acl.file().display(), "ACL enabled");
        handler = Arc::new(tidemark_acl::AclGuard::new(acl.clone(), handler));
        tokio::spawn(tidemark_acl::watch_file(
            acl,
            Duration::from_secs(2),
            stop.clone().cancelled_owned(),
        ));
    }
    if let Some(tls) = config.tls.clone() {
        tokio::spawn(tidemark_remoting::tls::watch_files(
            tls,
            Duration::from_secs(2),
            stop.clone().cancelled_owned(),
        ));
    }
    tidemark_remoting::serve(listener, handler, config, shutdown).await;
    stop.cancel();
}
