//! The overview's cluster part: every broker set the name server knows, each replica with its
//! role, epoch and whether it is in its set's SyncStateSet, what each reports (version, rates,
//! today's totals); and, in controller mode, the controllers with who leads them. Replicas the
//! controllers know and the name server does not (a slave that is down) are listed too.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tidemark_client::{controllers, Admin};
use tidemark_protocol::body::{BrokerReplicasInfo, ClusterInfo, ReplicasInfo};

use super::{escape, Console};

/// One replica's row.
struct Replica {
    id: i64,
    addr: String,
    runtime: BTreeMap<String, String>,
}

pub async fn cluster_html(console: &Console) -> String {
    let admin = match console.admin().await {
        Ok(admin) => admin,
        Err(failure) => {
            return format!(
                "<p class=\"error\">Cluster unknown: {}</p>",
                escape(&failure)
            )
        }
    };
    let info = match admin.cluster_info().await {
        Ok(info) => info,
        Err(failure) => {
            return format!(
                "<p class=\"error\">Cluster unknown: the name server did not answer ({})</p>",
                escape(&failure.to_string())
            )
        }
    };
    let broker_names: Vec<String> = info.broker_addr_table.keys().cloned().collect();
    let (controllers_table, replicas_info) =
        controllers_html(&admin, &console.controllers, &broker_names).await;
    let mut out = broker_sets_html(&admin, &info, replicas_info.as_ref()).await;
    out.push_str(&controllers_table);
    out
}

async fn broker_sets_html(
    admin: &Admin,
    info: &ClusterInfo,
    replicas_info: Option<&BrokerReplicasInfo>,
) -> String {
    let mut out = String::from("<h2>Broker sets</h2><table id=\"cluster\"><tr><th>Cluster</th><th>Broker set</th><th>Id</th><th>Address</th><th>Role</th><th>In sync</th><th>Epoch</th><th>Version</th><th>Put TPS</th><th>Get TPS</th><th>Put today</th><th>Got today</th></tr>");
    for (cluster, brokers) in &info.cluster_addr_table {
        for broker_name in brokers {
            let Some(data) = info.broker_addr_table.get(broker_name) else {
                continue;
            };
            let mut replicas = Vec::new();
            for (id, addr) in &data.broker_addrs {
                // A broker that does not answer is listed with what the name server knows.
                let runtime = admin.broker_runtime_info(addr).await.unwrap_or_default();
                replicas.push(Replica {
                    id: *id,
                    addr: addr.clone(),
                    runtime,
                });
            }
            let set = replicas_info.and_then(|info| info.replicas_info_table.get(broker_name));
            let master_in_sync: Option<Vec<String>> = replicas
                .iter()
                .find(|replica| replica.id == 0)
                .and_then(|master| master.runtime.get("syncStateSet"))
                .map(|ids| ids.split(',').map(str::to_owned).collect());
            for replica in &replicas {
                let in_sync = in_sync_text(replica, set, master_in_sync.as_deref());
                row(&mut out, cluster, broker_name, replica, &in_sync);
            }
            // Known to the controllers, not registered with the name server: down.
            if let Some(set) = set {
                for missing in set
                    .in_sync_replicas
                    .iter()
                    .chain(&set.not_in_sync_replicas)
                    .filter(|known| !replicas.iter().any(|r| r.addr == known.broker_address))
                {
                    let _ = write!(
                        out,
                        "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"stuck\">not registered{}</td><td>{}</td><td colspan=\"6\"></td></tr>",
                        escape(cluster),
                        escape(broker_name),
                        missing.broker_id,
                        escape(&missing.broker_address),
                        if missing.alive == Some(false) { ", not alive" } else { "" },
                        if set.in_sync_replicas.contains(missing) { "yes" } else { "no" }
                    );
                }
            }
        }
    }
    out.push_str("</table>");
    out
}

/// Whether the replica is in its set's SyncStateSet: as the controllers' leader says, else as
/// its master reports (by controller-given id); `-` outside controller mode.
fn in_sync_text(
    replica: &Replica,
    set: Option<&ReplicasInfo>,
    master_in_sync: Option<&[String]>,
) -> String {
    if let Some(set) = set {
        let named = |list: &[tidemark_protocol::body::ReplicaIdentity]| {
            list.iter()
                .any(|known| known.broker_address == replica.addr)
        };
        if named(&set.in_sync_replicas) {
            return "yes".to_owned();
        }
        if named(&set.not_in_sync_replicas) {
            return "<span class=\"stuck\">no</span>".to_owned();
        }
    }
    match master_in_sync {
        Some(_) if replica.id == 0 => "yes".to_owned(),
        Some(ids) if ids.contains(&replica.id.to_string()) => "yes".to_owned(),
        Some(_) => "<span class=\"stuck\">no</span>".to_owned(),
        None => "-".to_owned(),
    }
}

fn role_text(runtime: &BTreeMap<String, String>) -> &'static str {
    match runtime.get("brokerRole").map(String::as_str) {
        Some("SYNC_MASTER") => "master (sync)",
        Some("ASYNC_MASTER") => "master (async)",
        Some("SLAVE") => "slave",
        Some(_) => "other",
        None => "not answering",
    }
}

fn row(out: &mut String, cluster: &str, broker_name: &str, replica: &Replica, in_sync: &str) {
    let field = |key: &str| {
        replica
            .runtime
            .get(key)
            .cloned()
            .unwrap_or_else(|| "-".to_owned())
    };
    let _ = write!(
        out,
        "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{in_sync}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
        escape(cluster),
        escape(broker_name),
        replica.id,
        escape(&replica.addr),
        role_text(&replica.runtime),
        escape(&field("masterEpoch")),
        escape(&field("brokerVersionDesc")),
        escape(&field("putTps")),
        escape(&field("getTransferredTps")),
        escape(&field("msgPutTotalTodayNow")),
        escape(&field("msgGetTotalTodayNow"))
    );
}

/// The controllers table, and the broker sets as their leader has them (controller mode only).
async fn controllers_html(
    admin: &Admin,
    addrs: &[String],
    broker_names: &[String],
) -> (String, Option<BrokerReplicasInfo>) {
    if addrs.is_empty() {
        return (String::new(), None);
    }
    let answers = admin.controller_metadata(addrs).await;
    let mut out = String::from("<h2>Controllers</h2><table id=\"controllers\"><tr><th>Controller</th><th>Answers</th><th>Leads</th><th>Leader</th></tr>");
    for answer in &answers {
        let (answers_text, leads, leader) = match &answer.metadata {
            Some(header) => (
                "yes",
                if header.is_leader {
                    "<b>leader</b>"
                } else {
                    ""
                },
                format!(
                    "{} {}",
                    header.controller_leader_id.clone().unwrap_or_default(),
                    header.controller_leader_address.clone().unwrap_or_default()
                ),
            ),
            None => ("<span class=\"stuck\">no</span>", "", "-".to_owned()),
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{answers_text}</td><td>{leads}</td><td>{}</td></tr>",
            escape(&answer.addr),
            escape(leader.trim())
        );
    }
    out.push_str("</table>");
    let Some(leader) = controllers::controller_leader(&answers) else {
        out.push_str("<p class=\"error\">No controller names a leader: no master can be elected until a majority of them reach each other.</p>");
        return (out, None);
    };
    match admin.sync_state_data(&leader, broker_names).await {
        Ok(info) => (out, Some(info)),
        Err(failure) => {
            let _ = write!(
                out,
                "<p class=\"error\">The leader {} did not say how the broker sets stand: {}</p>",
                escape(&leader),
                escape(&failure.to_string())
            );
            (out, None)
        }
    }
}
