//! Parts of the broker's state that background services hold on their own, each behind an
//! `Arc`: a service's signature then says what it touches (the persister takes the tables it
//! writes, not the broker). Request handlers keep `&BrokerState`, which holds every part.

use std::sync::Arc;

use crate::delay_offsets::DelayOffsets;
use crate::metadata::{SubscriptionGroupTable, TopicTable};
use crate::offsets::ConsumerOffsets;
use crate::request_modes::RequestModes;

/// What clients and operators configure: topics, subscription groups, and each group's
/// request mode (PULL or POP) per topic.
#[derive(Debug)]
pub struct Metadata {
    pub topics: TopicTable,
    pub groups: SubscriptionGroupTable,
    /// Per (topic, group): PULL or POP, as SET_MESSAGE_REQUEST_MODE stored it.
    pub request_modes: RequestModes,
}

/// The consumer progress written to config files: committed offsets (their journal is the
/// truth, `consumerOffset.json` an export) and the delay levels' offsets.
#[derive(Debug)]
pub struct Progress {
    pub offsets: ConsumerOffsets,
    /// Who moved which group's progress, from where to where; and checkpoints of the rest.
    pub history: crate::history::ProgressHistory,
    pub delay_offsets: DelayOffsets,
}

impl Progress {
    /// Resolves once a change of offsets and its history entry are both durable.
    pub async fn durable(
        &self,
        offsets: crate::offsets::Journaled,
        history: crate::offsets::Journaled,
    ) -> Result<(), tidemark_storage::journal::JournalError> {
        self.offsets.durable(offsets).await?;
        self.history.durable(history).await
    }
}

/// Who may do what, and the TLS of the broker's ports and of its own connections.
#[derive(Debug)]
pub struct Security {
    /// The ACL rules every request is checked against, when `acl_enable` is on.
    pub acl: Option<Arc<tidemark_acl::AccessControl>>,
    /// TLS of the remoting ports (main, VIP, HA), certificate reloaded when its files change.
    pub tls: Arc<tidemark_remoting::tls::ServerTls>,
    /// TLS of the broker's own connections, when `tls_enable` is on.
    pub client_tls: Option<Arc<tidemark_remoting::tls::ClientTls>>,
}
