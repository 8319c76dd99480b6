//! A Tidemark broker set in controller mode on 127.0.0.1: one controller, a name server, and
//! brokers A and B of one broker name, B in A's SyncStateSet — a [`ReplicaSet`] of two, with
//! the replicas by name. For the failover scenarios.

use crate::replica_set::{ReplicaSet, BROKER_NAME};
use crate::{tidemark_binary, ServerProcess};

/// Replicas the controller lists as in sync (not the master, not "not in sync").
pub fn in_sync(status: &str) -> usize {
    status
        .lines()
        .filter(|line| line.contains("in sync") && !line.contains("not in sync"))
        .count()
}

/// `tidemark admin controller-status` for the pair, as text.
pub fn admin_status(controller: &str) -> String {
    let output = std::process::Command::new(tidemark_binary())
        .args([
            "admin",
            "controller-status",
            "--controllers",
            controller,
            "-b",
            BROKER_NAME,
        ])
        .output()
        .expect("run tidemark admin");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A controller, a name server, A the master and B in its SyncStateSet.
/// Fields drop in order: the processes before the directory they write to.
#[derive(Debug)]
pub struct Pair {
    pub a: ServerProcess,
    pub b: ServerProcess,
    /// Where A and B serve clients.
    pub a_addr: String,
    pub b_addr: String,
    pub controller: String,
    pub namesrv: String,
    /// The rest of the set: the controller, the name server and the directory.
    _set: ReplicaSet,
}

pub async fn start_pair() -> Pair {
    let mut set = ReplicaSet::start(2, 1).await;
    let b = set.replicas.pop().expect("replica B");
    let a = set.replicas.pop().expect("replica A");
    Pair {
        a,
        b,
        a_addr: set.replica_addrs[0].clone(),
        b_addr: set.replica_addrs[1].clone(),
        controller: set.controllers_arg(),
        namesrv: set.namesrv.clone(),
        _set: set,
    }
}
