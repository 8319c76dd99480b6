//! RocketMQ 5's controller mode, broker side: the broker learns its id and role from the
//! controllers instead of its configuration.
//!
//! - Identity: `broker_identity` in the store root holds the id the controllers gave this
//!   broker and the check code it applied with (`address;timestamp`), so a restart re-registers
//!   as the same replica.
//! - Joining: find the leader (GET_METADATA_INFO on each controller), apply for an id if there
//!   is none (GET_NEXT_BROKER_ID, APPLY_BROKER_ID), register (REGISTER_BROKER); with a live
//!   master, follow it; without one, ask to be elected (ELECT_MASTER).
//! - Then every second, and at once when a controller announces a role change
//!   (NOTIFY_BROKER_ROLE_CHANGED): heartbeats to every controller (last epoch, log end), and
//!   the replica info from the leader; a higher master epoch than the one applied changes the
//!   role.
//!
//! - A slave reconciles with its master before replicating ([`reconcile_with_master`]): it
//!   cuts its log back to the last offset both epoch histories agree on.
//! - A master keeps the SyncStateSet: it asks the controllers to drop slaves that stopped
//!   catching up and to add those that caught up; its SYNC sends wait for every slave the
//!   controllers count in the set.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::headers::{
    ApplyBrokerIdRequestHeader, BrokerHeartbeatRequestHeader, ElectMasterRequestHeader,
    ElectMasterResponseHeader, GetMetaDataResponseHeader, GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader, GetReplicaInfoRequestHeader, GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader, RegisterBrokerToControllerResponseHeader,
};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::now_ms;
use tidemark_remoting::RemotingClient;
use tidemark_storage::atomic_file;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::BrokerRole;
use crate::role::RoleNow;
use crate::state::BrokerState;
use sync_state_set::{maintain_sync_state_set, Term};

mod sync_state_set;

const CALL_TIMEOUT: Duration = Duration::from_secs(3);
const TICK: Duration = Duration::from_secs(1);

/// The id the controllers gave this broker, and the code it applied with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    broker_id: i64,
    check_code: String,
}

fn identity_path(state: &BrokerState) -> PathBuf {
    state.config.store_path_root_dir.join("broker_identity")
}

fn parse_identity(bytes: &[u8]) -> Result<Identity, String> {
    let text = std::str::from_utf8(bytes).map_err(|error| error.to_string())?;
    let (id, code) = text
        .trim()
        .split_once(' ')
        .ok_or_else(|| format!("{text:?} is not `id check-code`"))?;
    Ok(Identity {
        broker_id: id.parse().map_err(|_| format!("bad broker id {id:?}"))?,
        check_code: code.to_owned(),
    })
}

/// What the broker last applied: the master epoch its role comes from, and as master the
/// replicas counted in its SyncStateSet before they are proposed to the controllers.
#[derive(Debug, Default, Clone)]
struct Applied {
    master_epoch: i32,
    /// Each joining replica's id and the log end read once it was counted: sends acknowledged
    /// before it was counted end below that, so it is proposed only once it has that much.
    joining: BTreeMap<i64, u64>,
}

/// Runs the broker's side of controller mode until `stop` turns true.
pub(crate) async fn run(state: Arc<BrokerState>, mut stop: watch::Receiver<bool>) {
    let controllers: Vec<String> = state
        .config
        .controller_addr
        .split(';')
        .map(str::trim)
        .filter(|addr| !addr.is_empty())
        .map(str::to_owned)
        .collect();
    let client = RemotingClient::new(state.remoting_client_config(), None);
    let mut applied = Applied::default();
    let mut identity: Option<Identity> = None;
    loop {
        if *stop.borrow() {
            break;
        }
        let step = async {
            let leader = find_leader(&client, &controllers).await?;
            let known = match identity.clone() {
                Some(known) => known,
                None => {
                    let joined = join(&state, &client, &leader).await?;
                    identity = Some(joined.clone());
                    joined
                }
            };
            heartbeat(&state, &client, &controllers, known.broker_id).await;
            follow_decision(&state, &client, &leader, known.broker_id, &mut applied).await
        };
        if let Err(reason) = step.await {
            warn!(%reason, "controller mode: will try again");
        }
        tokio::select! {
            _ = stop.changed() => {}
            _ = tokio::time::sleep(TICK) => {}
            _ = state.role_change_announced.notified() => {}
            // A slave that cut its log leaves the SyncStateSet at once, not a tick later.
            _ = state.ha.replica_fell_back() => {}
        }
    }
    client.shutdown();
}

async fn find_leader(client: &RemotingClient, controllers: &[String]) -> Result<String, String> {
    for controller in controllers {
        let Ok(response) = client
            .invoke(
                controller,
                RemotingCommand::request(RequestCode::ControllerGetMetadataInfo),
                CALL_TIMEOUT,
            )
            .await
        else {
            continue;
        };
        if let Ok(header) = response.decode_header::<GetMetaDataResponseHeader>() {
            if let Some(leader) = header
                .controller_leader_address
                .filter(|addr| !addr.is_empty())
            {
                return Ok(leader);
            }
        }
    }
    Err(format!("no controller of {controllers:?} names a leader"))
}

pub(super) async fn call(
    client: &RemotingClient,
    addr: &str,
    request: RemotingCommand,
) -> Result<RemotingCommand, String> {
    client
        .invoke(addr, request, CALL_TIMEOUT)
        .await
        .map_err(|error| format!("{addr}: {error}"))
}

/// Loads or obtains this broker's id, and registers it.
async fn join(
    state: &Arc<BrokerState>,
    client: &RemotingClient,
    leader: &str,
) -> Result<Identity, String> {
    let path = identity_path(state);
    let storage = tidemark_storage::io::FsStorage;
    let stored = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || atomic_file::load(&storage, &path, parse_identity))
            .await
            .map_err(|error| error.to_string())?
            .map_err(|error| error.to_string())?
    };
    let identity = match stored {
        Some(identity) => identity,
        None => {
            let cluster = state.config.broker_cluster_name.clone();
            let name = state.config.broker_name.clone();
            let next = call(
                client,
                leader,
                RemotingCommand::request_with_header(
                    RequestCode::ControllerGetNextBrokerId,
                    &GetNextBrokerIdRequestHeader {
                        cluster_name: cluster.clone(),
                        broker_name: name.clone(),
                    },
                ),
            )
            .await?;
            let broker_id = next
                .decode_header::<GetNextBrokerIdResponseHeader>()
                .ok()
                .and_then(|header| header.next_broker_id)
                .ok_or_else(|| format!("no next broker id: {next:?}"))?;
            let check_code = format!("{};{}", state.config.broker_addr(), now_ms());
            let applied = call(
                client,
                leader,
                RemotingCommand::request_with_header(
                    RequestCode::ControllerApplyBrokerId,
                    &ApplyBrokerIdRequestHeader {
                        cluster_name: cluster,
                        broker_name: name,
                        applied_broker_id: broker_id,
                        register_check_code: check_code.clone(),
                    },
                ),
            )
            .await?;
            if applied.response_code() != ResponseCode::Success {
                return Err(format!(
                    "applying for id {broker_id}: {}",
                    applied.remark.unwrap_or_default()
                ));
            }
            let identity = Identity {
                broker_id,
                check_code,
            };
            let text = format!("{} {}\n", identity.broker_id, identity.check_code);
            tokio::task::spawn_blocking(move || {
                atomic_file::write_atomically(&storage, &path, text.as_bytes(), true)
            })
            .await
            .map_err(|error| error.to_string())?
            .map_err(|error| error.to_string())?;
            identity
        }
    };
    let registered = call(
        client,
        leader,
        RemotingCommand::request_with_header(
            RequestCode::ControllerRegisterBroker,
            &RegisterBrokerToControllerRequestHeader {
                cluster_name: state.config.broker_cluster_name.clone(),
                broker_name: state.config.broker_name.clone(),
                broker_id: identity.broker_id,
                broker_address: state.config.broker_addr(),
                invoke_time: Some(now_ms()),
            },
        ),
    )
    .await?;
    if registered.response_code() != ResponseCode::Success {
        return Err(format!(
            "registering as {}: {}",
            identity.broker_id,
            registered.remark.unwrap_or_default()
        ));
    }
    let header: RegisterBrokerToControllerResponseHeader = registered
        .decode_header()
        .map_err(|error| error.to_string())?;
    info!(broker_id = identity.broker_id, master = ?header.master_broker_id, "registered with the controllers");
    Ok(identity)
}

async fn heartbeat(
    state: &BrokerState,
    client: &RemotingClient,
    controllers: &[String],
    broker_id: i64,
) {
    let (_, written, _) = state.log().positions();
    let live = state.live.get();
    let header = BrokerHeartbeatRequestHeader {
        cluster_name: state.config.broker_cluster_name.clone(),
        broker_addr: state.config.broker_addr(),
        broker_name: state.config.broker_name.clone(),
        broker_id: Some(broker_id),
        epoch: state.log().epochs().last_epoch(),
        max_offset: Some(i64::try_from(written).unwrap_or(i64::MAX)),
        confirm_offset: Some(i64::try_from(written).unwrap_or(i64::MAX)),
        heartbeat_timeout_mills: Some(
            i64::try_from(live.controller_heartbeat_timeout_ms).unwrap_or(i64::MAX),
        ),
        election_priority: Some(live.broker_election_priority),
    };
    for controller in controllers {
        let request = RemotingCommand::request_with_header(RequestCode::BrokerHeartbeat, &header);
        // Oneway, as RocketMQ's brokers send it; a controller that is down misses one beat.
        let _ = tokio::time::timeout(CALL_TIMEOUT, client.invoke_oneway(controller, request)).await;
    }
}

/// Reads the set's master from the leader; asks to be elected when there is none; applies a
/// newer master epoch.
async fn follow_decision(
    state: &Arc<BrokerState>,
    client: &RemotingClient,
    leader: &str,
    broker_id: i64,
    applied: &mut Applied,
) -> Result<(), String> {
    let info = call(
        client,
        leader,
        RemotingCommand::request_with_header(
            RequestCode::ControllerGetReplicaInfo,
            &GetReplicaInfoRequestHeader {
                broker_name: state.config.broker_name.clone(),
            },
        ),
    )
    .await?;
    let header: GetReplicaInfoResponseHeader =
        info.decode_header().map_err(|error| error.to_string())?;
    if let (Some(master), Some(epoch)) = (header.master_broker_id, header.master_epoch) {
        if master == broker_id && epoch == applied.master_epoch {
            use tidemark_protocol::json::JsonBody;
            let current = tidemark_protocol::body::SyncStateSet::from_json_bytes(&info.body)
                .map_err(|error| error.to_string())?;
            let as_master = Term {
                own_id: broker_id,
                master_epoch: epoch,
            };
            return maintain_sync_state_set(
                state,
                client,
                leader,
                as_master,
                &current,
                &mut applied.joining,
            )
            .await;
        }
    }
    let (master, epoch, master_addr) = match (header.master_broker_id, header.master_epoch) {
        (Some(master), Some(epoch)) => (master, epoch, header.master_address),
        _ => {
            let elected = call(
                client,
                leader,
                RemotingCommand::request_with_header(
                    RequestCode::ControllerElectMaster,
                    &ElectMasterRequestHeader {
                        cluster_name: state.config.broker_cluster_name.clone(),
                        broker_name: state.config.broker_name.clone(),
                        broker_id,
                        designate_elect: false,
                        invoke_time: Some(now_ms()),
                    },
                ),
            )
            .await?;
            let header: ElectMasterResponseHeader =
                elected.decode_header().map_err(|error| error.to_string())?;
            match (header.master_broker_id, header.master_epoch) {
                (Some(master), Some(epoch)) => (master, epoch, header.master_address),
                _ => {
                    return Err(format!(
                        "no master elected: {}",
                        elected.remark.unwrap_or_default()
                    ))
                }
            }
        }
    };
    if epoch <= applied.master_epoch {
        return Ok(());
    }
    state.ha.set_in_sync(0, Vec::new());
    if master == broker_id {
        // A record the old master was streaming when it died may be half here: the new
        // epoch begins after the last whole one.
        let cut = state
            .log()
            .cut_partial_record()
            .await
            .map_err(|error| error.to_string())?;
        if cut > 0 {
            warn!(cut, "cut a half-copied record before taking writes");
        }
        // Progress the old master published is in this log: the table takes all of it before
        // this broker answers as master, so no offset it acknowledged is answered older.
        let applied =
            crate::progress_stream::drain(&Arc::new(state.progress_replication())).await?;
        info!(
            messages = applied,
            "applied the old master's progress before taking writes"
        );
        let (_, written, _) = state.log().positions();
        if state.log().epochs().last_epoch() == Some(epoch) {
            // Restarted while the controllers still name this broker master of the epoch it
            // led (no other replica could be elected meanwhile): it goes on writing that
            // epoch. An epoch is one election's, so this log's last one is this broker's.
            info!(
                epoch,
                "still master of the epoch it led before it restarted"
            );
        } else {
            state
                .log()
                .epochs()
                .begin(epoch, i64::try_from(written).unwrap_or(i64::MAX))
                .map_err(|error| error.to_string())?;
        }
        // Half messages and their resolutions came with the log: what is pending is read from
        // it again (recovery may append op records, so only once the new epoch has begun).
        let pending = crate::transaction::recovery::recover_for_new_master(
            &state.log_handle(),
            state.store_host(),
            state.live.get().transaction_timeout,
        )
        .await
        .map_err(|error| error.to_string())?;
        state.transactions.replace_with(pending);
        // Alone in its SyncStateSet until slaves catch up: nothing to wait for yet.
        state.role.set(RoleNow {
            role: BrokerRole::AsyncMaster,
            broker_id: 0,
        });
        info!(epoch, "became master");
    } else {
        // Follow the broker the controllers name, not the one a name server may still have
        // registered as master (replication would dial a paused old master until its
        // registration expires).
        match master_addr.as_deref().filter(|addr| !addr.is_empty()) {
            Some(addr) => state.master.appoint(addr, epoch),
            None => warn!(epoch, master, "the controllers gave no master address"),
        }
        state.role.set(RoleNow {
            role: BrokerRole::Slave,
            broker_id,
        });
        info!(epoch, master, addr = ?master_addr, "following the master");
    }
    applied.master_epoch = epoch;
    applied.joining.clear();
    state.topic_changes().announce_soon();
    Ok(())
}

/// Before a slave follows its master (controller mode): compares epoch histories and cuts this
/// log back to where it agrees with the master's, then takes the master's history as its own,
/// so nothing a former master wrote that the new one never had survives.
pub(crate) async fn reconcile_with_master(state: &Arc<BrokerState>) -> Result<(), String> {
    use tidemark_protocol::body::EpochEntryCache;
    use tidemark_protocol::json::JsonBody;
    use tidemark_store::epochs::EpochSpan;
    let master = state
        .master
        .broker_addr()
        .ok_or("the master's address is not known yet")?;
    let client = RemotingClient::new(state.remoting_client_config(), None);
    let answer = call(
        &client,
        &master,
        RemotingCommand::request(RequestCode::GetBrokerEpochCache),
    )
    .await;
    client.shutdown();
    let answer = answer?;
    if answer.response_code() != ResponseCode::Success {
        return Err(format!(
            "{master} answered {} to GET_BROKER_EPOCH_CACHE",
            answer.response_code()
        ));
    }
    let cache =
        EpochEntryCache::from_json_bytes(&answer.body).map_err(|error| error.to_string())?;
    // A master answers before it has recorded the epoch it was elected in (the controllers tell
    // its replicas at once): a history without that epoch would be taken as this replica's and
    // cut, at the next reconcile, everything copied in it. Wait for the master to begin it.
    if let Some(expected) = state.master.appointed_epoch() {
        let begun = cache.epoch_list.iter().map(|entry| entry.epoch).max();
        if begun.is_none_or(|epoch| epoch < expected) {
            return Err(format!(
                "{master} has not begun epoch {expected} yet (its last: {begun:?})"
            ));
        }
    }
    let remote: Vec<EpochSpan> = cache
        .epoch_list
        .iter()
        .map(|entry| EpochSpan {
            epoch: entry.epoch,
            start_offset: entry.start_offset,
            end_offset: entry.end_offset.min(cache.max_offset),
        })
        .collect();
    let following = state.clone();
    let (cut, forfeited) = tokio::task::spawn_blocking(move || {
        let cut = following.log().follow_history(&remote)?;
        if cut > 0 {
            crate::progress_stream::after_log_cut(&following.progress_replication());
        }
        // What this broker changed as a master the new one may never have had, as with the
        // log: its own rewinds lose their precedence, and the master's tables decide.
        let forfeited = following.progress.offsets.forfeit_rewinds();
        Ok::<_, tidemark_store::StoreError>((cut, forfeited))
    })
    .await
    .map_err(|error| error.to_string())?
    .map_err(|error| format!("following {master}: {error}"))?;
    if cut > 0 {
        warn!(
            cut,
            "cut this log back to where it agrees with the new master"
        );
    }
    if forfeited > 0 {
        info!(
            queues = forfeited,
            "the master's progress decides over this broker's own resets"
        );
    }
    Ok(())
}

/// This broker's controller-given id while it follows a master in controller mode (sent to the
/// master in the HA hello, for its SyncStateSet).
pub(crate) fn own_controller_id(state: &BrokerState) -> Option<i64> {
    state
        .config
        .enable_controller_mode
        .then(|| state.role.now().broker_id)
        .filter(|id| *id > 0)
}
