//! `/metrics` of `tidemark controller`: its Raft role and what the replicated state says about
//! each broker set (master, epochs, SyncStateSet, registered replicas, which of them heartbeat).
//! These are what "no master for a broker set", "a slave out of the SyncStateSet" and
//! "controllers without a leader" alerts read (deploy/prometheus/).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tidemark_controller::replicas::BrokerSet;
use tidemark_controller::{Controller, RaftRole};
use tokio::net::TcpListener;
use tracing::info;

use crate::metrics::{family, labels, IntGauges};
use crate::METRICS_CONTENT_TYPE;

/// The number RocketMQ 5's controller `role` gauge gives each role, kept so its dashboards read
/// ours (0 unknown, 1 candidate, 2 follower, 3 leader).
fn role_number(role: RaftRole) -> i64 {
    match role {
        RaftRole::Other => 0,
        RaftRole::Candidate => 1,
        RaftRole::Follower => 2,
        RaftRole::Leader => 3,
    }
}

/// The controller's metrics at `now`, as OpenMetrics text.
pub fn render(controller: &Controller, now: Instant) -> String {
    let mut registry = Registry::default();
    let id = controller.settings().id.to_string();
    let leadership = controller.leadership();
    let this = labels(&[("controller_id", &id)]);
    let raft: [(&str, &str, i64); 4] = [
        (
            "tidemark_controller_role",
            "This controller's Raft role: 0 none, 1 candidate, 2 follower, 3 leader",
            role_number(leadership.role),
        ),
        (
            "tidemark_controller_leader_known",
            "1 while this controller knows which controller leads",
            i64::from(leadership.leader.is_some()),
        ),
        (
            "tidemark_controller_term",
            "The Raft term this controller is in",
            i64::try_from(leadership.term).unwrap_or(i64::MAX),
        ),
        (
            "tidemark_controller_applied_index",
            "The last Raft log entry this controller applied to its state",
            leadership
                .applied_index
                .map_or(-1, |index| i64::try_from(index).unwrap_or(i64::MAX)),
        ),
    ];
    for (name, help, value) in raft {
        let gauges: IntGauges = family(&mut registry, name, help);
        gauges.get_or_create(&this).set(value);
    }

    broker_sets(&mut registry, controller, now);
    // A gauge with no labels, so a scrape always has at least one series of the controller.
    let peers: Gauge = Gauge::default();
    peers.set(controller.settings().peers.len() as i64);
    registry.register(
        "tidemark_controller_peers",
        "Controllers in the Raft group this controller was started with",
        peers,
    );

    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}

/// Each broker set as the replicated state has it, and which replicas heartbeat to this
/// controller.
fn broker_sets(registry: &mut Registry, controller: &Controller, now: Instant) {
    let has_master: IntGauges = family(
        registry,
        "tidemark_controller_broker_set_has_master",
        "1 while the broker set has an elected master and it heartbeats to this controller",
    );
    let master_epoch: IntGauges = family(
        registry,
        "tidemark_controller_broker_set_master_epoch",
        "The broker set's master epoch: raised by every election",
    );
    let sync_state_set_size: IntGauges = family(
        registry,
        "tidemark_controller_sync_state_set_size",
        "Replicas in the broker set's SyncStateSet (the master included)",
    );
    let replicas: IntGauges = family(
        registry,
        "tidemark_controller_replicas",
        "Replicas registered in the broker set",
    );
    let in_sync: IntGauges = family(
        registry,
        "tidemark_controller_replica_in_sync_state_set",
        "1 while the replica is in its broker set's SyncStateSet",
    );
    let alive: IntGauges = family(
        registry,
        "tidemark_controller_replica_alive",
        "1 while this controller has a recent heartbeat from the replica (the leader's view is the one elections use)",
    );
    let is_master: IntGauges = family(
        registry,
        "tidemark_controller_replica_is_master",
        "1 for the replica that is its broker set's master",
    );
    let liveness = controller.liveness();
    // Copied out first: liveness has its own lock, not to be taken under the state's.
    let sets: Vec<BrokerSet> = controller.read(|sets| sets.sets().cloned().collect());
    for set in &sets {
        let set_labels = labels(&[("cluster", &set.cluster), ("broker_set", &set.name)]);
        // A master every replica of which is dead stays on record (no election without a live
        // replica), yet serves nothing: it counts only while it heartbeats.
        let master_alive = set
            .master
            .is_some_and(|master| liveness.is_alive(&set.name, master, now));
        has_master
            .get_or_create(&set_labels)
            .set(i64::from(master_alive));
        master_epoch
            .get_or_create(&set_labels)
            .set(i64::from(set.master_epoch));
        sync_state_set_size
            .get_or_create(&set_labels)
            .set(set.sync_state_set.len() as i64);
        replicas
            .get_or_create(&set_labels)
            .set(set.replicas.len() as i64);
        for (broker_id, replica) in &set.replicas {
            let broker_id_text = broker_id.to_string();
            let replica_labels = labels(&[
                ("cluster", &set.cluster),
                ("broker_set", &set.name),
                ("broker_id", &broker_id_text),
                ("address", &replica.address),
            ]);
            in_sync
                .get_or_create(&replica_labels)
                .set(i64::from(set.sync_state_set.contains(broker_id)));
            alive
                .get_or_create(&replica_labels)
                .set(i64::from(liveness.is_alive(&set.name, *broker_id, now)));
            is_master
                .get_or_create(&replica_labels)
                .set(i64::from(set.master == Some(*broker_id)));
        }
    }
}

async fn metrics(State(controller): State<Arc<Controller>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        render(&controller, Instant::now()),
    )
}

/// Serves the controller's `/metrics` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    controller: Arc<Controller>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let port = listener.local_addr()?.port();
    let router = Router::new()
        .route("/metrics", get(metrics))
        .with_state(controller);
    info!(port, "HTTP serving the controller's /metrics");
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
