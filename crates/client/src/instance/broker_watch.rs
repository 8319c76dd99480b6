//! Noticing a failover while pulls are held on the old master. A paused or unreachable master
//! never answers a held pull, and its broker name is routed elsewhere only after the next route
//! poll (30 s by default), so RocketMQ's clients sit out the pull's 30 s timeout. Here a pull
//! held longer than a long poll needs to start has its broker probed; a broker that does not
//! answer makes the client fetch its routes again, and a pull whose broker the routes no
//! longer name moves to the one they do. Sends are watched the same way, sooner: a send that
//! the old master cannot answer moves to the new one within the send's timeout, and a send
//! that failed makes the client ask for its topic's route before the next attempt.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidemark_protocol::body::MASTER_ID;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode};
use tokio::sync::Notify;
use tracing::debug;

use super::{lock, ClientInstance};
use crate::error::{ClientError, Result};

/// How long a pull is held before its broker is asked whether it still answers.
pub(crate) const HELD_PULL_PROBE_AFTER: Duration = Duration::from_secs(2);
/// How long a send waits before its broker is asked whether it still answers: well under the
/// send timeout (3 s by default), well over what a replicated write takes.
const SEND_PROBE_AFTER: Duration = Duration::from_millis(500);
/// The least time between two route fetches for one topic after failed sends.
const RECHECK_EVERY: Duration = Duration::from_millis(500);
/// The least time between two probes of one broker, however many pulls wait on it.
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// A broker that takes longer than this to answer a heartbeat counts as gone.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// When each broker was last probed, and a signal for routes that changed.
#[derive(Debug, Default)]
pub(crate) struct BrokerWatch {
    probed: Mutex<HashMap<String, Instant>>,
    rechecked: Mutex<HashMap<String, Instant>>,
    routes_changed: Notify,
}

impl BrokerWatch {
    /// Whether `addr` may be probed now; if so, records that it is.
    fn probe_due(&self, addr: &str, now: Instant) -> bool {
        due(&self.probed, addr, now, PROBE_EVERY)
    }

    /// Whether `topic`'s route may be fetched again now; if so, records that it is.
    fn recheck_due(&self, topic: &str, now: Instant) -> bool {
        due(&self.rechecked, topic, now, RECHECK_EVERY)
    }

    /// Some broker address in the routes changed.
    pub(crate) fn announce_change(&self) {
        self.routes_changed.notify_waiters();
    }
}

/// Whether `key` was last recorded at least `every` ago (or never); if so, records `now`.
fn due(last: &Mutex<HashMap<String, Instant>>, key: &str, now: Instant, every: Duration) -> bool {
    let mut last = lock(last);
    last.retain(|_, at| now.saturating_duration_since(*at) < every * 60);
    match last.get(key) {
        Some(at) if now.saturating_duration_since(*at) < every => false,
        _ => {
            last.insert(key.to_owned(), now);
            true
        }
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
    /// `broker_name`, probing `addr` from `probe_after` on; never while they still name it.
    pub(crate) async fn until_moved_from(
        &self,
        addr: &str,
        broker_name: &str,
        broker_id: i64,
        probe_after: Duration,
    ) {
        let mut next_probe = tokio::time::Instant::now() + probe_after;
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

    /// Sends `request` to `addr`, the master of `broker_name`, and waits up to `timeout` for the
    /// answer; gives up early with [`ClientError::MasterMoved`] once the routes name another
    /// master. Retrying then is what retrying after a timeout would be, only sooner: a master
    /// that cannot answer is not storing, and one deposed meanwhile truncates what it stored
    /// after the new master's history forked from it.
    pub(crate) async fn call_master(
        &self,
        addr: &str,
        broker_name: &str,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        tokio::select! {
            answer = self.call_with_timeout(addr, request, timeout) => answer,
            _ = self.until_moved_from(addr, broker_name, MASTER_ID, SEND_PROBE_AFTER) => {
                Err(ClientError::MasterMoved {
                    broker_name: broker_name.to_owned(),
                    from: addr.to_owned(),
                })
            }
        }
    }

    /// After a send to `topic` failed as a failover would make it fail, fetches the topic's
    /// route again (at most once per [`RECHECK_EVERY`]), so the next attempt goes to the master
    /// the name server names now instead of the one the last route poll saw.
    pub(crate) async fn recheck_route(&self, topic: &str) {
        if !self.broker_watch.recheck_due(topic, Instant::now()) {
            return;
        }
        if let Err(error) = self.update_route(topic).await {
            debug!(%topic, %error, "route recheck after a failed send failed");
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

    #[test]
    fn route_rechecks_are_spaced_per_topic() {
        let watch = BrokerWatch::default();
        let start = Instant::now();
        assert!(watch.recheck_due("T", start));
        assert!(!watch.recheck_due("T", start + RECHECK_EVERY / 2));
        assert!(watch.recheck_due("U", start + RECHECK_EVERY / 2));
        assert!(watch.recheck_due("T", start + RECHECK_EVERY));
        // Probes and rechecks are counted apart.
        assert!(watch.probe_due("T", start));
    }
}
