//! The controller's remoting requests, answered as RocketMQ 5's controller answers them (codes,
//! headers, bodies), plus the Raft messages between controllers on the same port.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_protocol::body::{BrokerReplicasInfo, ReplicaIdentity, ReplicasInfo, SyncStateSet};
use tidemark_protocol::headers::{
    AlterSyncStateSetRequestHeader, AlterSyncStateSetResponseHeader, ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader, BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader, ElectMasterRequestHeader, GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader, GetNextBrokerIdResponseHeader, GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader, RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{CommandHeader, RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{Channel, Reply, ReplyFuture, RequestHandler};

use crate::controller::{election_body, election_header, Controller, ElectionOutcome};
use crate::liveness::Heartbeat;
use crate::raft::serve_raft_request;
use crate::replicas::{Applied, Command, Refusal};

/// Serves a controller's port.
#[derive(Debug, Clone)]
pub struct ControllerHandler {
    controller: Arc<Controller>,
}

impl ControllerHandler {
    pub fn new(controller: Arc<Controller>) -> Self {
        Self { controller }
    }
}

impl RequestHandler for ControllerHandler {
    fn handle(&self, channel: Channel, request: RemotingCommand) -> ReplyFuture {
        let controller = self.controller.clone();
        Box::pin(async move {
            if let Some(answer) = serve_raft_request(controller.raft(), &request).await {
                return Reply::Response(answer);
            }
            match answer(&controller, &channel, &request).await {
                Some(Ok(response)) => Reply::Response(response),
                Some(Err(refusal)) => Reply::Response(refuse(&refusal)),
                None => Reply::Unsupported,
            }
        })
    }

    fn on_close(&self, channel: &Channel) {
        self.controller.channel_closed(channel.id());
    }
}

fn refuse(refusal: &Refusal) -> RemotingCommand {
    RemotingCommand::response(refusal.response_code(), refusal.reason.clone())
}

fn header<H: CommandHeader>(request: &RemotingCommand) -> Result<H, Refusal> {
    request.decode_header().map_err(|error| {
        Refusal::new(
            ResponseCode::ControllerInvalidRequest,
            format!("{}: {error}", request.request_code()),
        )
    })
}

fn success() -> RemotingCommand {
    RemotingCommand::response(ResponseCode::Success, None)
}

type Answer = Option<Result<RemotingCommand, Refusal>>;

async fn answer(controller: &Controller, channel: &Channel, request: &RemotingCommand) -> Answer {
    Some(match request.request_code() {
        RequestCode::ControllerGetMetadataInfo => Ok(metadata(controller)),
        RequestCode::BrokerHeartbeat => heartbeat(controller, channel, request),
        RequestCode::ControllerGetNextBrokerId => next_broker_id(controller, request).await,
        RequestCode::ControllerApplyBrokerId => apply_broker_id(controller, request).await,
        RequestCode::ControllerRegisterBroker => register(controller, request).await,
        RequestCode::ControllerElectMaster => elect(controller, request).await,
        RequestCode::ControllerAlterSyncStateSet => alter_sync_state_set(controller, request).await,
        RequestCode::ControllerGetReplicaInfo => replica_info(controller, request).await,
        RequestCode::ControllerGetSyncStateData => sync_state_data(controller, request).await,
        RequestCode::CleanBrokerData => clean(controller, request).await,
        RequestCode::GetControllerConfig => Ok(config(controller)),
        _ => return None,
    })
}

fn metadata(controller: &Controller) -> RemotingCommand {
    let leadership = controller.leadership();
    let peers = controller
        .settings()
        .peers
        .iter()
        .map(|(id, addr)| format!("{id}:{addr}"))
        .collect::<Vec<_>>()
        .join(";");
    success().with_header(&GetMetaDataResponseHeader {
        group: Some("tidemark-controllers".to_owned()),
        controller_leader_id: leadership.leader.map(|id| id.to_string()),
        controller_leader_address: leadership.leader_address,
        is_leader: leadership.is_leader,
        peers: Some(peers),
    })
}

fn heartbeat(
    controller: &Controller,
    channel: &Channel,
    request: &RemotingCommand,
) -> Result<RemotingCommand, Refusal> {
    let beat: BrokerHeartbeatRequestHeader = header(request)?;
    let Some(broker_id) = beat.broker_id else {
        return Err(Refusal::new(
            ResponseCode::ControllerInvalidRequest,
            "a heartbeat without brokerId",
        ));
    };
    let timeout = beat
        .heartbeat_timeout_mills
        .filter(|millis| *millis > 0)
        .map_or(controller.settings().broker_timeout_default, |millis| {
            Duration::from_millis(millis.unsigned_abs())
        });
    controller.liveness().beat(
        Heartbeat {
            cluster: beat.cluster_name,
            broker_name: beat.broker_name,
            broker_id,
            address: beat.broker_addr,
            timeout,
            epoch: beat.epoch.unwrap_or(0),
            max_offset: beat.max_offset.unwrap_or(0),
            confirm_offset: beat.confirm_offset.unwrap_or(0),
            priority: beat.election_priority.unwrap_or(i32::MAX),
            channel_id: Some(channel.id()),
        },
        Instant::now(),
    );
    Ok(RemotingCommand::response(
        ResponseCode::Success,
        "heartbeat recorded".to_owned(),
    ))
}

async fn next_broker_id(
    controller: &Controller,
    request: &RemotingCommand,
) -> Result<RemotingCommand, Refusal> {
    let asked: GetNextBrokerIdRequestHeader = header(request)?;
    controller.lead_for_read().await?;
    let next = controller.read(|sets| sets.next_broker_id(&asked.broker_name));
    Ok(success().with_header(&GetNextBrokerIdResponseHeader {
        cluster_name: Some(asked.cluster_name),
        broker_name: Some(asked.broker_name),
        next_broker_id: Some(next),
    }))
}

async fn apply_broker_id(
    controller: &Controller,
    request: &RemotingCommand,
) -> Result<RemotingCommand, Refusal> {
    let asked: ApplyBrokerIdRequestHeader = header(request)?;
    controller.lead_for_read().await?;
    controller.read(|sets| {
        sets.check_apply_broker_id(
            &asked.broker_name,
            asked.applied_broker_id,
            &asked.register_check_code,
        )
    })?;
    let address = asked
        .register_check_code
        .split(';')
        .next()
        .unwrap_or_default()
        .to_owned();
    let applied = controller
        .propose(Command::ApplyBrokerId {
            cluster: asked.cluster_name.clone(),
            broker_name: asked.broker_name.clone(),
            broker_id: asked.applied_broker_id,
            address,
            check_code: asked.register_check_code,
        })
        .await?;
    expect_applied(applied, |applied| {
        matches!(applied, Applied::BrokerIdApplied)
    })?;
    Ok(success().with_header(&ApplyBrokerIdResponseHeader {
        cluster_name: Some(asked.cluster_name),
        broker_name: Some(asked.broker_name),
    }))
}

async fn register(
    controller: &Controller,
    request: &RemotingCommand,
) -> Result<RemotingCommand, Refusal> {
    let asked: RegisterBrokerToControllerRequestHeader = header(request)?;
    controller.lead_for_read().await?;
    let known_address = controller.read(|sets| {
        sets.get(&asked.broker_name)
            .map(|set| set.address(asked.broker_id).map(str::to_owned))
    });
    let known_address = match known_address {
        None => {
            return Err(Refusal::new(
                ResponseCode::ControllerBrokerNeedToBeRegistered,
                format!(
                    "broker set {} is not registered with the controller",
                    asked.broker_name
                ),
            ))
        }
        Some(None) => {
            return Err(Refusal::new(
                ResponseCode::ControllerBrokerNeedToBeRegistered,
                format!(
                    "broker id {} is not registered in broker set {}",
                    asked.broker_id, asked.broker_name
                ),
            ))
        }
        Some(Some(address)) => address,
    };
    if known_address != asked.broker_address {
        let applied = controller
            .propose(Command::UpdateBrokerAddress {
                broker_name: asked.broker_name.clone(),
                broker_id: asked.broker_id,
                address: asked.broker_address.clone(),
            })
            .await?;
        expect_applied(applied, |applied| {
            matches!(applied, Applied::BrokerAddressUpdated)
        })?;
    }
    let now = Instant::now();
    let (response_header, sync_state_set) = controller
        .read(|sets| {
            let set = sets.get(&asked.broker_name)?;
            let live_master = set
                .master
                .filter(|master| controller.liveness().is_alive(&set.name, *master, now));
            Some((
                RegisterBrokerToControllerResponseHeader {
                    cluster_name: Some(asked.cluster_name.clone()),
                    broker_name: Some(asked.broker_name.clone()),
                    master_broker_id: live_master,
                    master_address: live_master.and_then(|id| set.address(id).map(str::to_owned)),
                    master_epoch: live_master.map(|_| set.master_epoch),
                    sync_state_set_epoch: live_master.map(|_| set.sync_state_set_epoch),
                },
                SyncStateSet {
                    sync_state_set: set.sync_state_set.clone(),
                    sync_state_set_epoch: set.sync_state_set_epoch,
                },
            ))
        })
        .ok_or_else(|| {
            Refusal::new(
                ResponseCode::ControllerBrokerNeedToBeRegistered,
                format!("broker set {} was removed meanwhile", asked.broker_name),
            )
        })?;
    Ok(success()
        .with_header(&response_header)
        .with_body(sync_state_set.to_json_bytes()))
}

async fn elect(
    controller: &Controller,
    request: &RemotingCommand,
) -> Result<RemotingCommand, Refusal> {
    let asked: ElectMasterRequestHeader = header(request)?;
    controller.lead_for_read().await?;
    let request_id = (asked.broker_id >= 0).then_some(asked.broker_id);
    match controller
        .elect(&asked.broker_name, request_id, asked.designate_elect)
        .await?
    {
        ElectionOutcome::Elected(election) => Ok(success()
            .with_header(&election_header(&election))
            .with_body(election_body(&election).to_json_bytes())),
        ElectionOutcome::StillMaster(election) => Ok(RemotingCommand::response(
            ResponseCode::ControllerMasterStillExist,
            format!(
                "the master {} of {} is alive; no election needed",
                election.master, election.broker_name
            ),
        )
        .with_header(&election_header(&election))
        .with_body(election_body(&election).to_json_bytes())),
    }
}

async fn alter_sync_state_set(
    controller: &Controller,
    request: &RemotingCommand,
) -> Result<RemotingCommand, Refusal> {
    let asked: AlterSyncStateSetRequestHeader = header(request)?;
    let proposed = SyncStateSet::from_json_bytes(&request.body).map_err(|error| {
        Refusal::new(
            ResponseCode::ControllerInvalidRequest,
            format!("the new SyncStateSet is unreadable: {error}"),
        )
    })?;
    controller.lead_for_read().await?;
    let command = Command::AlterSyncStateSet {
        broker_name: asked.broker_name.clone(),
        master: asked.master_broker_id,
        master_epoch: asked.master_epoch,
        at_sync_state_set_epoch: proposed.sync_state_set_epoch,
        sync_state_set: proposed.sync_state_set.clone(),
    };
    let now = Instant::now();
    controller.read(|sets| {
        sets.check_alter_sync_state_set(&command, |id| {
            controller.liveness().is_alive(&asked.broker_name, id, now)
        })
    })?;
    match controller.propose(command).await? {
        Applied::SyncStateSetAltered {
            sync_state_set_epoch,
        } => Ok(success()
            .with_header(&AlterSyncStateSetResponseHeader {
                new_sync_state_set_epoch: sync_state_set_epoch,
            })
            .with_body(
                SyncStateSet {
                    sync_state_set: proposed.sync_state_set,
                    sync_state_set_epoch,
                }
                .to_json_bytes(),
            )),
        Applied::Refused(refusal) => Err(refusal),
        other => Err(unexpected(&other)),
    }
}

async fn replica_info(
    controller: &Controller,
    request: &RemotingCommand,
) -> Result<RemotingCommand, Refusal> {
    let asked: GetReplicaInfoRequestHeader = header(request)?;
    controller.lead_for_read().await?;
    controller.read(|sets| {
        let Some(set) = sets.get(&asked.broker_name) else {
            return Err(crate::replicas::metadata_missing(&asked.broker_name));
        };
        Ok(success()
            .with_header(&GetReplicaInfoResponseHeader {
                master_broker_id: set.master,
                master_address: set.master_address().map(str::to_owned),
                master_epoch: Some(set.master_epoch),
            })
            .with_body(
                SyncStateSet {
                    sync_state_set: set.sync_state_set.clone(),
                    sync_state_set_epoch: set.sync_state_set_epoch,
                }
                .to_json_bytes(),
            ))
    })
}

async fn sync_state_data(
    controller: &Controller,
    request: &RemotingCommand,
) -> Result<RemotingCommand, Refusal> {
    let names = Vec::<String>::from_json_bytes(&request.body).map_err(|error| {
        Refusal::new(
            ResponseCode::ControllerInvalidRequest,
            format!("the body must be a list of broker names: {error}"),
        )
    })?;
    controller.lead_for_read().await?;
    let now = Instant::now();
    let table = controller.read(|sets| {
        names
            .iter()
            .filter_map(|name| sets.get(name))
            .map(|set| {
                let (in_sync, not_in_sync): (Vec<_>, Vec<_>) = set
                    .replicas
                    .iter()
                    .map(|(id, replica)| ReplicaIdentity {
                        alive: Some(controller.liveness().is_alive(&set.name, *id, now)),
                        broker_address: replica.address.clone(),
                        broker_id: *id,
                        broker_name: set.name.clone(),
                    })
                    .partition(|replica| set.sync_state_set.contains(&replica.broker_id));
                (
                    set.name.clone(),
                    ReplicasInfo {
                        in_sync_replicas: in_sync,
                        master_address: set.master_address().map(str::to_owned),
                        master_broker_id: set.master,
                        master_epoch: set.master_epoch,
                        not_in_sync_replicas: not_in_sync,
                        sync_state_set_epoch: set.sync_state_set_epoch,
                    },
                )
            })
            .collect()
    });
    Ok(success().with_body(
        BrokerReplicasInfo {
            replicas_info_table: table,
        }
        .to_json_bytes(),
    ))
}

async fn clean(
    controller: &Controller,
    request: &RemotingCommand,
) -> Result<RemotingCommand, Refusal> {
    let asked: CleanControllerBrokerDataRequestHeader = header(request)?;
    let ids = match asked
        .broker_controller_ids_to_clean
        .as_deref()
        .map(str::trim)
        .filter(|ids| !ids.is_empty())
    {
        None => None,
        Some(ids) => Some(
            ids.split(';')
                .map(|id| id.trim().parse::<i64>())
                .collect::<Result<BTreeSet<i64>, _>>()
                .map_err(|error| {
                    Refusal::new(
                        ResponseCode::ControllerInvalidCleanBrokerMetadata,
                        format!("brokerControllerIdsToClean must be ids separated by ';': {error}"),
                    )
                })?,
        ),
    };
    controller.lead_for_read().await?;
    let now = Instant::now();
    let name = asked.broker_name.clone();
    controller.read(|sets| {
        let Some(set) = sets.get(&name) else {
            return Err(Refusal::new(
                ResponseCode::ControllerInvalidCleanBrokerMetadata,
                format!("broker set {name} does not exist"),
            ));
        };
        if asked.is_clean_living_broker {
            return Ok(());
        }
        let living = match &ids {
            None => set
                .replicas
                .keys()
                .find(|id| controller.liveness().is_alive(&name, **id, now)),
            Some(ids) => ids
                .iter()
                .find(|id| controller.liveness().is_alive(&name, **id, now)),
        };
        match living {
            Some(id) => Err(Refusal::new(
                ResponseCode::ControllerInvalidCleanBrokerMetadata,
                format!("broker {id} of {name} is alive; not cleaned (isCleanLivingBroker=true forces it)"),
            )),
            None => Ok(()),
        }
    })?;
    let applied = controller
        .propose(Command::CleanBrokerData {
            broker_name: name,
            broker_ids: ids,
        })
        .await?;
    expect_applied(applied, |applied| matches!(applied, Applied::Cleaned))?;
    Ok(success())
}

fn config(controller: &Controller) -> RemotingCommand {
    let settings = controller.settings();
    let text = format!(
        "controllerId={}\npeers={}\ncontrollerStorePath={}\nbrokerTimeoutDefaultMillis={}\n\
         scanNotActiveBrokerInterval={}\nenableElectUncleanMaster={}\nnotifyBrokerRoleChanged={}\n",
        settings.id,
        settings
            .peers
            .iter()
            .map(|(id, addr)| format!("{id}:{addr}"))
            .collect::<Vec<_>>()
            .join(";"),
        settings.data_dir.display(),
        settings.broker_timeout_default.as_millis(),
        settings.scan_interval.as_millis(),
        settings.unclean_election,
        settings.notify_role_changes,
    );
    success().with_body(text.into_bytes())
}

fn expect_applied(applied: Applied, expected: impl Fn(&Applied) -> bool) -> Result<(), Refusal> {
    match applied {
        Applied::Refused(refusal) => Err(refusal),
        applied if expected(&applied) => Ok(()),
        other => Err(unexpected(&other)),
    }
}

fn unexpected(applied: &Applied) -> Refusal {
    Refusal::new(
        ResponseCode::SystemError,
        format!("the change applied as {applied:?}"),
    )
}
