//! The Raft underneath the controllers: [`openraft`] with a log kept in a
//! [`Journal`](tidemark_storage::journal::Journal), a state machine over
//! [`ReplicaSets`](crate::replicas::ReplicaSets) whose snapshots are replaced atomically, and
//! peers that talk over the remoting protocol (Tidemark's own request codes).

mod log_store;
mod network;
mod state_machine;

use std::io::Cursor;

pub use log_store::LogStore;
pub use network::{serve_raft_request, PeerNetwork};
pub use state_machine::StateMachineStore;

use crate::replicas::{Applied, Command};

/// A controller's id among its peers (1, 2, 3 …).
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// Types of the controllers' Raft.
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type ControllerRaft = openraft::Raft<TypeConfig>;
pub type RaftEntry = openraft::Entry<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type Membership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
pub type StorageError = openraft::StorageError<NodeId>;
