//! What each background service and each resolution is given: the parts of the broker's
//! state it uses, built here from [`BrokerState`], so the services themselves never see the
//! whole broker (and do not import `state`).

use std::sync::Arc;

use crate::metadata_change::TopicChanges;
use crate::pop::revive::Reviver;
use crate::progress_stream::ProgressReplication;
use crate::registration::Registrar;
use crate::slave_sync::SlaveSync;
use crate::state::BrokerState;
use crate::transaction::check::TransactionChecker;
use crate::transaction::resolve::TransactionLog;

impl BrokerState {
    /// The door for a topic change made by a request.
    pub fn topic_changes(&self) -> TopicChanges {
        TopicChanges::new(self.persisted_tables(), self.registrations.clone())
    }

    /// The progress stream's parts (its publisher on a master, its follower on a replica).
    pub fn progress_replication(&self) -> ProgressReplication {
        ProgressReplication {
            log: self.log_handle(),
            stream: self.progress_stream.clone(),
            progress: self.progress.clone(),
            pop: self.pop.clone(),
            timers: self.timers.clone(),
            controller_mode: self.config.enable_controller_mode,
            store_host: self.store_host(),
        }
    }

    /// The revive service's parts.
    pub fn reviver(&self) -> Reviver {
        Reviver {
            log: self.log_handle(),
            pop: self.pop.clone(),
            metadata: self.metadata.clone(),
            progress: self.progress.clone(),
            topic_changes: self.topic_changes(),
            store_host: self.store_host(),
        }
    }

    /// The parts a resolution works with.
    pub fn transaction_log(&self) -> TransactionLog {
        TransactionLog {
            log: self.log_handle(),
            transactions: self.transactions.clone(),
            metadata: self.metadata.clone(),
            topic_changes: self.topic_changes(),
            store_host: self.store_host(),
            delay_levels: self.delay_level_count(),
        }
    }

    /// The check-back service's parts.
    pub fn transaction_checker(&self) -> TransactionChecker {
        TransactionChecker {
            log: self.transaction_log(),
            clients: self.clients.clone(),
            broker_name: self.config.broker_name.clone(),
        }
    }

    /// The registration service's parts.
    pub fn registrar(&self) -> Registrar {
        Registrar {
            config: Arc::new(self.config.clone()),
            client_config: self.remoting_client_config(),
            metadata: self.metadata.clone(),
            log: self.log_handle(),
            master: self.master.clone(),
            registered: self.registered.clone(),
            rounds: self.registrations.clone(),
        }
    }

    /// The slave sync service's parts.
    pub fn slave_sync(&self) -> SlaveSync {
        SlaveSync {
            client_config: self.remoting_client_config(),
            broker_addr: self.config.broker_addr(),
            broker_name: self.config.broker_name.clone(),
            live: self.live.clone(),
            role: self.role.clone(),
            master: self.master.clone(),
            metadata: self.metadata.clone(),
            progress: self.progress.clone(),
            pop: self.pop.clone(),
            topic_changes: self.topic_changes(),
        }
    }
}
