//! Noticing a failover while pulls are held on the old master. A paused or unreachable master
//! never answers a held pull, and its broker name is routed elsewhere only after the next route
//! poll (30 s by default), so RocketMQ's clients sit out the pull's 30 s timeout. Here a pull
//! held longer than a long poll needs to start has its broker probed; a broker that does not
//! answer makes the client fetch its routes again, and a pull whose broker the routes no
//! longer name moves to the one they do.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode};
use tokio::sync::Notify;
use tracing::debug;

use super::{lock, ClientInstance};

/// How long a pull is held before its broker is asked whether it still answers.
const PROBE_AFTER: Duration = Duration::from_secs(2);
/// The least time between two probes of one broker, however many pulls wait on it.
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// A broker that takes longer than this to answer a heartbeat counts as gone.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// When each broker was last probed, and a signal for routes that changed.
#[derive(Debug, Default)]
pub(crate) struct BrokerWatch {
    probed: Mutex<HashMap<String, Instant>>,
    routes_changed: Notify,
}

impl BrokerWatch {
    /// Whether `addr` may be probed now; if so, records that it is.
    fn probe_due(&self, addr: &str, now: Instant) -> bool {
        let mut probed = lock(&self.probed);
        probed.retain(|_, at| now.saturating_duration_since(*at) < PROBE_EVERY * 60);
        match probed.get(addr) {
            Some(at) if now.saturating_duration_since(*at) < PROBE_EVERY => false,
            _ => {
                probed.insert(addr.to_owned(), now);
                true
            }
        }
    }

    /// Some broker address in the routes changed.
    pub(crate) fn announce_change(&self) {
        self.routes_changed.notify_waiters();
    }
}

impl ClientInstance {
    /// Sends `addr` a heartbeat (at most one per [`PROBE_EVERY`]); if it does not answer in
    /// time, fetches every route again.
    pub(crate) async fn probe_broker(&self, addr: &str) {
        if !self.broker_watch.probe_due(addr, Instant::now()) {
            return;
        }
        let body = Bytes::from(self.heartbeat_data().to_json_bytes());
        let request = RemotingCommand::request(RequestCode::HeartBeat).with_body(body);
        if let Err(error) = self.call_with_timeout(addr, request, PROBE_TIMEOUT).await {
            debug!(%addr, %error, "broker does not answer; fetching routes again");
            self.refresh_all_routes().await;
        }
    }

    /// Resolves once the routes name another address than `addr` for `broker_id` of
    /// `broker_name`, probing `addr` from [`PROBE_AFTER`] on; never while they still name it.
    pub(crate) async fn until_moved_from(&self, addr: &str, broker_name: &str, broker_id: i64) {
        let mut next_probe = tokio::time::Instant::now() + PROBE_AFTER;
        loop {
            let changed = self.broker_watch.routes_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.routed_elsewhere(addr, broker_name, broker_id) {
                return;
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(next_probe) => {
                    self.probe_broker(addr).await;
                    next_probe = tokio::time::Instant::now() + PROBE_EVERY;
                }
            }
        }
    }

    /// Whether the routes now send pulls for `broker_id` of `broker_name` somewhere else.
    pub(crate) fn routed_elsewhere(&self, addr: &str, broker_name: &str, broker_id: i64) -> bool {
        self.subscribe_addr(broker_name, broker_id)
            .is_some_and(|(now, _)| now != addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_probe_per_broker_per_period() {
        let watch = BrokerWatch::default();
        let start = Instant::now();
        assert!(watch.probe_due("a:1", start));
        assert!(!watch.probe_due("a:1", start + PROBE_EVERY / 2));
        assert!(watch.probe_due("b:1", start + PROBE_EVERY / 2));
        assert!(watch.probe_due("a:1", start + PROBE_EVERY));
    }
}
