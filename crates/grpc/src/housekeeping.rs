//! The gateway's periodic work, apart from any call: renewing auto-renewed messages, telling
//! the cluster's other brokers of its producers, and forgetting clients that went silent.

use std::sync::Arc;
use std::time::Duration;

use crate::gateway::Gateway;

/// A client not heard from for this long (no heartbeat, no call) is forgotten.
const CLIENT_IDLE_MS: i64 = 120_000;

/// Renews auto-renewed messages and forgets silent clients.
pub(crate) async fn housekeeping(gateway: Arc<Gateway>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut seconds = 0u64;
    loop {
        tick.tick().await;
        gateway.renew_due().await;
        seconds += 1;
        if seconds.is_multiple_of(20) {
            gateway.register_producers_elsewhere().await;
        }
        if seconds.is_multiple_of(10) {
            let before = tidemark_remoting::now_ms() - CLIENT_IDLE_MS;
            for session in gateway.sessions.expire(before) {
                gateway.forget(session).await;
            }
        }
    }
}
