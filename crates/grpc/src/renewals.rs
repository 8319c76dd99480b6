//! Messages a push consumer receives stay invisible until it acknowledges or puts them back:
//! the gateway renews their invisibility on the consumer's behalf, as RocketMQ's proxy does for
//! `auto_renew` receives. This table is what is being renewed; `receive` fills and renews it,
//! `ack` takes from it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tidemark_protocol::headers::{ChangeInvisibleTimeRequestHeader, PopReceipt};

/// How long an auto-renewed message stays invisible per renewal (the proxy's default).
pub const AUTO_RENEW_INVISIBLE_MS: i64 = 60_000;
/// Renewed this long before its invisibility would end.
const RENEW_AHEAD_MS: i64 = 10_000;
/// Auto-renewal stops after this long; the message then comes back as usual.
const RENEW_FOR_MS: i64 = 3 * 3_600_000;

/// A message being kept invisible for a push consumer, by the receipt handle it was given.
#[derive(Debug, Clone)]
pub struct Renewal {
    pub client_id: String,
    pub group: String,
    pub topic: String,
    /// The broker's current receipt (each renewal issues a new one).
    pub current: PopReceipt,
    pub started_ms: i64,
}

impl Renewal {
    /// The broker request that makes its message invisible for `invisible_ms` from now.
    pub(crate) fn change_request(&self, invisible_ms: i64) -> ChangeInvisibleTimeRequestHeader {
        let receipt = &self.current;
        ChangeInvisibleTimeRequestHeader {
            consumer_group: self.group.clone(),
            topic: receipt.source.real_topic(&self.group, &self.topic),
            queue_id: receipt.queue_id,
            extra_info: receipt.encode(),
            offset: receipt.queue_offset,
            invisible_time: invisible_ms,
            broker_name: None,
        }
    }
}

/// Messages kept invisible on their consumers' behalf. Owns its lock.
#[derive(Debug, Default)]
pub struct Renewals {
    inner: Mutex<HashMap<String, Renewal>>,
}

impl Renewals {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Renewal>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn add(&self, handle: String, renewal: Renewal) {
        self.lock().insert(handle, renewal);
    }

    /// The broker's current receipt for the handle a client holds, if it is being renewed.
    pub fn current(&self, handle: &str) -> Option<PopReceipt> {
        self.lock()
            .get(handle)
            .map(|renewal| renewal.current.clone())
    }

    /// Stops renewing (acknowledged, put back, or given up).
    pub fn remove(&self, handle: &str) -> Option<Renewal> {
        self.lock().remove(handle)
    }

    /// Stops renewing a client's messages; the ones it held, to be released.
    pub fn take_client(&self, client_id: &str) -> Vec<Renewal> {
        let mut inner = self.lock();
        let handles: Vec<String> = inner
            .iter()
            .filter(|(_, renewal)| renewal.client_id == client_id)
            .map(|(handle, _)| handle.clone())
            .collect();
        handles
            .into_iter()
            .filter_map(|handle| inner.remove(&handle))
            .collect()
    }

    pub(crate) fn update(&self, handle: &str, receipt: PopReceipt) {
        if let Some(renewal) = self.lock().get_mut(handle) {
            renewal.current = receipt;
        }
    }

    /// Renewals due by `now`; those renewed for too long are dropped (they come back).
    pub(crate) fn due(&self, now: i64) -> Vec<(String, Renewal)> {
        let mut inner = self.lock();
        inner.retain(|_, renewal| now - renewal.started_ms < RENEW_FOR_MS);
        inner
            .iter()
            .filter(|(_, renewal)| renewal.current.visible_again_at() - now <= RENEW_AHEAD_MS)
            .map(|(handle, renewal)| (handle.clone(), renewal.clone()))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidemark_protocol::headers::PopSource;

    fn receipt(pop_time: i64) -> PopReceipt {
        PopReceipt {
            start_offset: 0,
            pop_time,
            invisible_time: AUTO_RENEW_INVISIBLE_MS,
            revive_qid: 0,
            source: PopSource::Topic,
            broker_name: "b".into(),
            queue_id: 0,
            queue_offset: 0,
            commit_log_offset: Some(0),
        }
    }

    #[test]
    fn renewals_come_due_ahead_of_the_invisibility_and_stop_after_three_hours() {
        let renewals = Renewals::default();
        renewals.add(
            "h".into(),
            Renewal {
                client_id: "c".into(),
                group: "G".into(),
                topic: "T".into(),
                current: receipt(0),
                started_ms: 0,
            },
        );
        assert!(renewals.due(40_000).is_empty());
        assert_eq!(renewals.due(50_000).len(), 1);
        renewals.update("h", receipt(50_000));
        assert!(renewals.due(60_000).is_empty());
        assert_eq!(renewals.current("h").map(|r| r.pop_time), Some(50_000));
        assert!(renewals.due(RENEW_FOR_MS + 1).is_empty());
        assert!(renewals.is_empty(), "given up after three hours");
    }
}
