//! The one way a change to topics leaves the broker: the tables are made durable, then the
//! name servers, whose routes clients read, are told. Every path that creates, changes or
//! deletes a topic (sends, admin requests, heartbeats and retries that make a retry topic,
//! POP revive and transaction discards that make theirs, gRPC's route query) goes through
//! here, so none of them can answer before the change would survive a crash. Groups alone are
//! made durable by `BrokerState::persist_metadata_now`: the name servers do not hold them.
//! Request handlers take the door from `BrokerState::topic_changes`; services hold a
//! [`TopicChanges`].

use std::sync::Arc;
use std::time::Duration;

use tidemark_storage::atomic_file::PersistError;
use tracing::debug;

use crate::persister::PersistedTables;
use crate::persister::{ConfigFile, Persister, METADATA};
use crate::registration::RegistrationRounds;

/// How long a request that changed topics waits for the name servers to know it.
const REGISTRATION_WAIT: Duration = Duration::from_secs(3);

/// Who waits for the name servers to learn of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    /// The request that made the change is answered once the name servers registered it, as
    /// RocketMQ's broker does: a client asking for the route next (a consumer starting,
    /// mqadmin's next subcommand, a gRPC client's route query) finds it. A name server that
    /// does not answer in [`REGISTRATION_WAIT`] leaves it to the next round.
    BeforeAnswer,
    /// The registration loop is woken and nobody waits: heartbeats, retries and background
    /// services, whose topics clients look up later.
    Soon,
}

/// The door a topic change leaves through: the tables it makes durable and the registration
/// rounds that announce them. A cheap handle; services that create topics hold one, request
/// handlers take one from `BrokerState::topic_changes`.
#[derive(Debug, Clone)]
pub struct TopicChanges {
    tables: PersistedTables,
    registrations: Arc<RegistrationRounds>,
}

impl TopicChanges {
    pub fn new(tables: PersistedTables, registrations: Arc<RegistrationRounds>) -> Self {
        Self {
            tables,
            registrations,
        }
    }

    /// Makes the topic (and group) tables durable, then announces them.
    pub async fn publish(self, announce: Announce) -> Result<(), PersistError> {
        self.publish_files(METADATA, announce).await
    }

    /// [`Self::publish`] with the files a change touched (a deletion also drops the topic's
    /// offsets).
    pub async fn publish_files(
        self,
        files: &[ConfigFile],
        announce: Announce,
    ) -> Result<(), PersistError> {
        Persister::flush(&self.tables, files).await?;
        self.announce(announce).await;
        Ok(())
    }

    /// [`Self::publish`] for a blocking thread; the name servers hear of it soon.
    pub fn publish_blocking(&self) -> Result<(), PersistError> {
        self.tables.persister.write(
            &self.tables.metadata,
            &self.tables.progress,
            METADATA,
            false,
        )?;
        self.announce_soon();
        Ok(())
    }

    /// Tells the name servers the topics changed, waiting as `announce` says; for changes that
    /// are durable already or are not this broker's to keep (a master's topics on a slave, a
    /// role or permission change).
    pub async fn announce(&self, announce: Announce) {
        match announce {
            Announce::Soon => self.announce_soon(),
            Announce::BeforeAnswer => {
                let ticket = self.registrations.ask();
                if !self.registrations.wait(ticket, REGISTRATION_WAIT).await {
                    debug!("changed topics are not registered yet; the next round registers them");
                }
            }
        }
    }

    /// Wakes the registration loop; nobody waits for it.
    pub fn announce_soon(&self) {
        self.registrations.wake();
    }
}
