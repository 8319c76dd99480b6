//! The ACL check in front of a server's request handler.

use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::{Channel, Reply, ReplyFuture, RequestHandler};
use tracing::{error, info};

use crate::access::AccessControl;

/// Serves a request with `inner` only when the ACL allows it; answers NO_PERMISSION with the
/// reason otherwise (RocketMQ 5's code; 4.9 answered SYSTEM_ERROR with the same text).
pub struct AclGuard {
    control: Arc<AccessControl>,
    inner: Arc<dyn RequestHandler>,
}

impl AclGuard {
    pub fn new(control: Arc<AccessControl>, inner: Arc<dyn RequestHandler>) -> Self {
        Self { control, inner }
    }
}

impl std::fmt::Debug for AclGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AclGuard")
            .field("file", &self.control.file())
            .finish_non_exhaustive()
    }
}

impl RequestHandler for AclGuard {
    fn handle(&self, channel: Channel, request: RemotingCommand) -> ReplyFuture {
        match self.control.check(&request, channel.peer_addr().ip()) {
            Ok(()) => self.inner.handle(channel, request),
            Err(reason) => Box::pin(std::future::ready(Reply::Response(
                RemotingCommand::response(ResponseCode::NoPermission, reason),
            ))),
        }
    }

    fn on_close(&self, channel: &Channel) {
        self.inner.on_close(channel);
    }
}

/// Re-reads the ACL file every `interval` until `shutdown` resolves: a changed file that parses
/// takes effect; one that does not is logged with its line and the previous rules stay.
pub async fn watch_file(
    control: Arc<AccessControl>,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let control = control.clone();
        match tokio::task::spawn_blocking(move || control.reload_if_changed()).await {
            Ok(Ok(true)) => info!("ACL file changed: new rules in force"),
            Ok(Ok(false)) => {}
            Ok(Err(failure)) => error!(%failure, "the previous ACL rules stay in force"),
            Err(_) => error!("ACL reload task failed; the previous rules stay in force"),
        }
    }
}
