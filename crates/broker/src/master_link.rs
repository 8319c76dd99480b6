//! Where a slave's master is, as the name servers and the controllers tell it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Where a slave's master is: learned at registration with the name servers, or, in controller
/// mode, appointed by the controllers with the master's epoch. An appointment wins: a name
/// server may still name a master the controllers replaced (a paused old master keeps its
/// registration until it expires), so a registration answer naming another broker is ignored
/// until the next appointment; one naming the appointed master gives its configured HA address.
#[derive(Debug, Default)]
pub struct MasterLink {
    inner: Mutex<LearnedMaster>,
}

#[derive(Debug, Default, Clone)]
struct LearnedMaster {
    broker_addr: Option<String>,
    ha_addr: Option<String>,
    /// The controllers' master epoch this address was appointed with.
    appointed_epoch: Option<i32>,
}

impl MasterLink {
    fn lock(&self) -> MutexGuard<'_, LearnedMaster> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the registration answer; returns whether the master's broker address changed.
    /// An HA address is kept once learned (replication keeps trying it while the master is
    /// away).
    pub fn learn(&self, broker_addr: Option<String>, ha_addr: Option<String>) -> bool {
        let mut inner = self.lock();
        if inner.appointed_epoch.is_some() && broker_addr != inner.broker_addr {
            return false;
        }
        let changed = inner.broker_addr != broker_addr;
        inner.broker_addr = broker_addr;
        if ha_addr.is_some() {
            inner.ha_addr = ha_addr;
        }
        changed
    }

    /// The controllers' master for `epoch`, at `broker_addr`. Its HA port is taken to be the
    /// broker port + 1 (RocketMQ's and Tidemark's default) until a registration answer naming
    /// the same master gives the configured one.
    pub fn appoint(&self, broker_addr: &str, epoch: i32) {
        let mut inner = self.lock();
        if inner.broker_addr.as_deref() != Some(broker_addr) || inner.ha_addr.is_none() {
            inner.ha_addr = default_ha_addr(broker_addr);
        }
        inner.broker_addr = Some(broker_addr.to_owned());
        inner.appointed_epoch = Some(epoch);
    }

    pub fn broker_addr(&self) -> Option<String> {
        self.lock().broker_addr.clone()
    }

    pub fn ha_addr(&self) -> Option<String> {
        self.lock().ha_addr.clone()
    }

    /// The master epoch the controllers appointed the master with, in controller mode.
    pub fn appointed_epoch(&self) -> Option<i32> {
        self.lock().appointed_epoch
    }
}

/// `host:port+1` for a broker at `host:port`.
fn default_ha_addr(broker_addr: &str) -> Option<String> {
    let (host, port) = broker_addr.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    Some(format!("{host}:{}", port.checked_add(1)?))
}

#[cfg(test)]
mod tests {
    use super::MasterLink;

    #[test]
    fn a_stale_registration_does_not_undo_the_controllers_master() {
        let link = MasterLink::default();
        assert!(link.learn(Some("10.0.0.1:10911".into()), Some("10.0.0.1:10912".into())));
        link.appoint("10.0.0.2:10911", 8);
        assert_eq!(link.broker_addr().as_deref(), Some("10.0.0.2:10911"));
        assert_eq!(link.ha_addr().as_deref(), Some("10.0.0.2:10912"));
        assert_eq!(link.appointed_epoch(), Some(8));
        // The name server still names the old master: ignored.
        assert!(!link.learn(Some("10.0.0.1:10911".into()), Some("10.0.0.1:10912".into())));
        assert_eq!(link.ha_addr().as_deref(), Some("10.0.0.2:10912"));
        // Naming the appointed master, it gives the configured HA port.
        link.learn(Some("10.0.0.2:10911".into()), Some("10.0.0.2:20912".into()));
        assert_eq!(link.ha_addr().as_deref(), Some("10.0.0.2:20912"));
        // A later appointment of the same master keeps the configured HA port.
        link.appoint("10.0.0.2:10911", 9);
        assert_eq!(link.ha_addr().as_deref(), Some("10.0.0.2:20912"));
    }

    #[test]
    fn an_unreadable_master_address_gives_no_ha_address() {
        let link = MasterLink::default();
        link.appoint("no-port", 3);
        assert_eq!(link.ha_addr(), None);
        assert_eq!(link.broker_addr().as_deref(), Some("no-port"));
    }
}
