//! The broker's replica role as it is now, and the id it registers under. A broker configured
//! as master or slave keeps what it was configured with; in controller mode the controllers
//! change it while the broker runs, so request handlers read it here, never from the
//! configuration, and background tasks that depend on it watch for changes.

use tokio::sync::watch;

use crate::config::BrokerRole;

/// A role and broker id, as of one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleNow {
    pub role: BrokerRole,
    /// The id registered with the name servers (0 for a master).
    pub broker_id: i64,
}

impl RoleNow {
    pub fn is_slave(&self) -> bool {
        self.role == BrokerRole::Slave
    }

    /// A SYNC_MASTER answers a send only once its slaves have it.
    pub fn waits_for_slaves(&self) -> bool {
        self.role == BrokerRole::SyncMaster
    }

    /// RocketMQ's name for the role (GET_BROKER_RUNTIME_INFO, the console).
    pub fn java_name(&self) -> &'static str {
        match self.role {
            BrokerRole::AsyncMaster => "ASYNC_MASTER",
            BrokerRole::SyncMaster => "SYNC_MASTER",
            BrokerRole::Slave => "SLAVE",
        }
    }
}

/// Holds the current [`RoleNow`]; readers copy it out, changes are broadcast.
#[derive(Debug)]
pub struct Role {
    now: watch::Sender<RoleNow>,
}

impl Role {
    pub fn new(role: BrokerRole, broker_id: i64) -> Self {
        Self {
            now: watch::Sender::new(RoleNow { role, broker_id }),
        }
    }

    pub fn now(&self) -> RoleNow {
        *self.now.borrow()
    }

    pub fn is_slave(&self) -> bool {
        self.now().is_slave()
    }

    /// Changes the role; tasks holding [`subscribe`](Self::subscribe) wake up.
    pub fn set(&self, now: RoleNow) {
        self.now.send_replace(now);
    }

    pub fn subscribe(&self) -> watch::Receiver<RoleNow> {
        self.now.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_seen_by_readers_and_subscribers() {
        let role = Role::new(BrokerRole::SyncMaster, 0);
        assert!(role.now().waits_for_slaves());
        let mut changes = role.subscribe();
        role.set(RoleNow {
            role: BrokerRole::Slave,
            broker_id: 2,
        });
        assert!(role.is_slave());
        assert!(changes.has_changed().unwrap_or(false));
        assert_eq!(changes.borrow_and_update().broker_id, 2);
        assert_eq!(role.now().java_name(), "SLAVE");
    }
}
