//! Three controllers in one process, on 127.0.0.1, driven through the remoting protocol as
//! brokers drive them: ids, registration, election, SyncStateSet changes, a dead master
//! replaced, the Raft leader lost and a controller restarted from its files.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_controller::{Controller, ControllerSettings};
use tidemark_protocol::body::{BrokerReplicasInfo, ElectMasterResponseBody, SyncStateSet};
use tidemark_protocol::headers::{
    AlterSyncStateSetRequestHeader, ApplyBrokerIdRequestHeader, BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader, ElectMasterResponseHeader, GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader, GetNextBrokerIdResponseHeader, GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader, RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{CommandHeader, RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig, RemotingClient, ServerConfig};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(15);

struct Node {
    controller: Arc<Controller>,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<()>,
}

struct Group {
    peers: BTreeMap<u64, String>,
    dirs: BTreeMap<u64, tempfile::TempDir>,
    nodes: BTreeMap<u64, Node>,
}

impl Group {
    async fn start(count: u64) -> Group {
        let mut listeners = BTreeMap::new();
        for id in 1..=count {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            listeners.insert(id, listener);
        }
        let peers: BTreeMap<u64, String> = listeners
            .iter()
            .map(|(id, listener)| (*id, listener.local_addr().expect("addr").to_string()))
            .collect();
        let dirs = (1..=count)
            .map(|id| (id, tempfile::tempdir().expect("temp dir")))
            .collect();
        let mut group = Group {
            peers,
            dirs,
            nodes: BTreeMap::new(),
        };
        for (id, listener) in listeners {
            group.serve(id, listener).await;
        }
        group
    }

    async fn serve(&mut self, id: u64, listener: TcpListener) {
        let mut settings =
            ControllerSettings::new(id, self.peers.clone(), self.dirs[&id].path().to_path_buf());
        settings.broker_timeout_default = Duration::from_secs(2);
        settings.scan_interval = Duration::from_millis(200);
        let controller = Controller::start(settings)
            .await
            .expect("controller starts");
        let (stop, stopped) = oneshot::channel();
        let served = tokio::spawn(tidemark_controller::serve(
            listener,
            controller.clone(),
            ServerConfig::default(),
            None,
            async {
                let _ = stopped.await;
            },
        ));
        self.nodes.insert(
            id,
            Node {
                controller,
                stop: Some(stop),
                served,
            },
        );
    }

    /// Stops a controller as a crash would look to its peers (its port closes).
    async fn stop(&mut self, id: u64) {
        let mut node = self.nodes.remove(&id).expect("running");
        node.controller.shutdown().await;
        if let Some(stop) = node.stop.take() {
            let _ = stop.send(());
        }
        let _ = node.served.await;
    }

    async fn restart(&mut self, id: u64) {
        let listener = TcpListener::bind(&self.peers[&id]).await.expect("rebind");
        self.serve(id, listener).await;
    }

    /// Replaces a stopped controller's files with an empty folder (a replaced disk).
    fn wipe(&mut self, id: u64) {
        self.dirs.insert(id, tempfile::tempdir().expect("temp dir"));
    }

    async fn stop_all(&mut self) {
        for id in self.nodes.keys().copied().collect::<Vec<_>>() {
            self.stop(id).await;
        }
    }

    /// The id of the leader all running controllers agree on.
    async fn leader(&self) -> u64 {
        let deadline = Instant::now() + WAIT;
        loop {
            let leaders: BTreeSet<Option<u64>> = self
                .nodes
                .values()
                .map(|node| node.controller.leadership().leader)
                .collect();
            if let Some(Some(leader)) = leaders.iter().next().filter(|_| leaders.len() == 1) {
                if self.nodes.contains_key(leader) {
                    return *leader;
                }
            }
            assert!(Instant::now() < deadline, "no agreed leader: {leaders:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn call(
    client: &RemotingClient,
    addr: &str,
    code: RequestCode,
    header: Option<&dyn Fn(RemotingCommand) -> RemotingCommand>,
    body: Option<Vec<u8>>,
) -> RemotingCommand {
    let mut request = RemotingCommand::request(code);
    if let Some(add) = header {
        request = add(request);
    }
    if let Some(body) = body {
        request = request.with_body(body);
    }
    client
        .invoke(addr, request, Duration::from_secs(5))
        .await
        .expect("the controller answers")
}

fn with<H: CommandHeader>(header: H) -> impl Fn(RemotingCommand) -> RemotingCommand {
    move |request| request.with_header(&header)
}

async fn request<H: CommandHeader>(
    client: &RemotingClient,
    addr: &str,
    code: RequestCode,
    header: H,
    body: Option<Vec<u8>>,
) -> RemotingCommand {
    call(client, addr, code, Some(&with(header)), body).await
}

fn beat(id: i64, address: &str, max_offset: i64) -> BrokerHeartbeatRequestHeader {
    BrokerHeartbeatRequestHeader {
        cluster_name: "c".to_owned(),
        broker_addr: address.to_owned(),
        broker_name: "broker-a".to_owned(),
        broker_id: Some(id),
        epoch: Some(1),
        max_offset: Some(max_offset),
        confirm_offset: Some(max_offset),
        heartbeat_timeout_mills: Some(2_000),
        election_priority: Some(0),
    }
}

/// Sends `header` to every controller every 300 ms, as a broker does, until aborted.
fn keep_beating(
    client: Arc<RemotingClient>,
    peers: &BTreeMap<u64, String>,
    header: BrokerHeartbeatRequestHeader,
) -> JoinHandle<()> {
    let peers: Vec<String> = peers.values().cloned().collect();
    tokio::spawn(async move {
        loop {
            for addr in &peers {
                let request =
                    RemotingCommand::request(RequestCode::BrokerHeartbeat).with_header(&header);
                // A stopped controller does not answer; the others still count.
                let _ = client
                    .invoke(addr, request, Duration::from_millis(500))
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

/// A broker joining the set: next id, apply it, register.
async fn join(client: &RemotingClient, leader: &str, address: &str) -> i64 {
    let next = request(
        client,
        leader,
        RequestCode::ControllerGetNextBrokerId,
        GetNextBrokerIdRequestHeader {
            cluster_name: "c".to_owned(),
            broker_name: "broker-a".to_owned(),
        },
        None,
    )
    .await;
    assert_eq!(next.response_code(), ResponseCode::Success, "{next:?}");
    let id = next
        .decode_header::<GetNextBrokerIdResponseHeader>()
        .expect("header")
        .next_broker_id
        .expect("an id");
    let applied = request(
        client,
        leader,
        RequestCode::ControllerApplyBrokerId,
        ApplyBrokerIdRequestHeader {
            cluster_name: "c".to_owned(),
            broker_name: "broker-a".to_owned(),
            applied_broker_id: id,
            register_check_code: format!("{address};{id}"),
        },
        None,
    )
    .await;
    assert_eq!(
        applied.response_code(),
        ResponseCode::Success,
        "{applied:?}"
    );
    let registered = request(
        client,
        leader,
        RequestCode::ControllerRegisterBroker,
        RegisterBrokerToControllerRequestHeader {
            cluster_name: "c".to_owned(),
            broker_name: "broker-a".to_owned(),
            broker_id: id,
            broker_address: address.to_owned(),
            invoke_time: None,
        },
        None,
    )
    .await;
    assert_eq!(
        registered.response_code(),
        ResponseCode::Success,
        "{registered:?}"
    );
    id
}

async fn replica_info(
    client: &RemotingClient,
    leader: &str,
) -> (GetReplicaInfoResponseHeader, SyncStateSet) {
    let info = request(
        client,
        leader,
        RequestCode::ControllerGetReplicaInfo,
        GetReplicaInfoRequestHeader {
            broker_name: "broker-a".to_owned(),
        },
        None,
    )
    .await;
    assert_eq!(info.response_code(), ResponseCode::Success, "{info:?}");
    (
        info.decode_header().expect("header"),
        SyncStateSet::from_json_bytes(&info.body).expect("body"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_elect_replace_a_dead_master_and_survive_losing_their_leader() {
    let mut group = Group::start(3).await;
    let leader = group.leader().await;
    let leader_addr = group.peers[&leader].clone();
    let admin = RemotingClient::new(ClientConfig::default(), None);

    // Every controller names the same leader; a follower refuses leader-only requests.
    for addr in group.peers.values() {
        let meta = call(
            &admin,
            addr,
            RequestCode::ControllerGetMetadataInfo,
            None,
            None,
        )
        .await;
        let header: GetMetaDataResponseHeader = meta.decode_header().expect("header");
        assert_eq!(header.controller_leader_id, Some(leader.to_string()));
        assert_eq!(header.is_leader, *addr == leader_addr);
    }
    let follower_addr = group
        .peers
        .iter()
        .find(|(id, _)| **id != leader)
        .map(|(_, addr)| addr.clone())
        .expect("a follower");
    let refused = request(
        &admin,
        &follower_addr,
        RequestCode::ControllerGetNextBrokerId,
        GetNextBrokerIdRequestHeader {
            cluster_name: "c".to_owned(),
            broker_name: "broker-a".to_owned(),
        },
        None,
    )
    .await;
    assert_eq!(refused.response_code(), ResponseCode::ControllerNotLeader);

    // Two brokers join; each sends heartbeats to every controller on its own connections.
    let broker1 = Arc::new(RemotingClient::new(ClientConfig::default(), None));
    let broker2 = Arc::new(RemotingClient::new(ClientConfig::default(), None));
    assert_eq!(join(&broker1, &leader_addr, "10.0.0.1:10911").await, 1);
    assert_eq!(join(&broker2, &leader_addr, "10.0.0.2:10911").await, 2);
    // Before the election and the SyncStateSet change, every controller (the leader among
    // them) has recorded a heartbeat of each broker: it answers once recorded.
    for (broker, header) in [
        (&broker1, beat(1, "10.0.0.1:10911", 100)),
        (&broker2, beat(2, "10.0.0.2:10911", 90)),
    ] {
        for addr in group.peers.values() {
            let ok = request(
                broker,
                addr,
                RequestCode::BrokerHeartbeat,
                header.clone(),
                None,
            )
            .await;
            assert_eq!(ok.response_code(), ResponseCode::Success, "{addr}: {ok:?}");
        }
    }
    let beating1 = keep_beating(
        broker1.clone(),
        &group.peers,
        beat(1, "10.0.0.1:10911", 100),
    );
    let beating2 = keep_beating(broker2.clone(), &group.peers, beat(2, "10.0.0.2:10911", 90));

    // Broker 1 asks first and becomes master at epoch 1; broker 2 asking next is told so.
    let elected = request(
        &broker1,
        &leader_addr,
        RequestCode::ControllerElectMaster,
        ElectMasterRequestHeader {
            cluster_name: "c".to_owned(),
            broker_name: "broker-a".to_owned(),
            broker_id: 1,
            designate_elect: false,
            invoke_time: None,
        },
        None,
    )
    .await;
    assert_eq!(
        elected.response_code(),
        ResponseCode::Success,
        "{elected:?}"
    );
    let header: ElectMasterResponseHeader = elected.decode_header().expect("header");
    assert_eq!(
        (header.master_broker_id, header.master_epoch),
        (Some(1), Some(1))
    );
    let body = ElectMasterResponseBody::from_json_bytes(&elected.body).expect("body");
    assert_eq!(body.sync_state_set, BTreeSet::from([1]));
    let again = request(
        &broker2,
        &leader_addr,
        RequestCode::ControllerElectMaster,
        ElectMasterRequestHeader {
            cluster_name: "c".to_owned(),
            broker_name: "broker-a".to_owned(),
            broker_id: 2,
            designate_elect: false,
            invoke_time: None,
        },
        None,
    )
    .await;
    assert_eq!(
        again.response_code(),
        ResponseCode::ControllerMasterStillExist
    );
    // Registering again (a restarted slave) names the live master.
    let registered = request(
        &broker2,
        &leader_addr,
        RequestCode::ControllerRegisterBroker,
        RegisterBrokerToControllerRequestHeader {
            cluster_name: "c".to_owned(),
            broker_name: "broker-a".to_owned(),
            broker_id: 2,
            broker_address: "10.0.0.2:10911".to_owned(),
            invoke_time: None,
        },
        None,
    )
    .await;
    let header: RegisterBrokerToControllerResponseHeader =
        registered.decode_header().expect("header");
    assert_eq!(header.master_broker_id, Some(1));
    assert_eq!(header.master_address.as_deref(), Some("10.0.0.1:10911"));

    // The master reports broker 2 in sync.
    let altered = request(
        &broker1,
        &leader_addr,
        RequestCode::ControllerAlterSyncStateSet,
        AlterSyncStateSetRequestHeader {
            broker_name: "broker-a".to_owned(),
            master_broker_id: 1,
            master_epoch: 1,
            invoke_time: None,
        },
        Some(
            SyncStateSet {
                sync_state_set: BTreeSet::from([1, 2]),
                sync_state_set_epoch: 1,
            }
            .to_json_bytes(),
        ),
    )
    .await;
    assert_eq!(
        altered.response_code(),
        ResponseCode::Success,
        "{altered:?}"
    );
    let (info, set) = replica_info(&admin, &leader_addr).await;
    assert_eq!(
        (info.master_broker_id, info.master_epoch),
        (Some(1), Some(1))
    );
    assert_eq!(set.sync_state_set, BTreeSet::from([1, 2]));
    assert_eq!(set.sync_state_set_epoch, 2);

    // Broker 1 dies: its connections close, the leader elects broker 2 (in sync) at epoch 2.
    let killed = Instant::now();
    beating1.abort();
    broker1.shutdown();
    let deadline = killed + WAIT;
    let (info, set) = loop {
        let (info, set) = replica_info(&admin, &leader_addr).await;
        if info.master_broker_id == Some(2) {
            break (info, set);
        }
        assert!(Instant::now() < deadline, "no new master: {info:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let failover = killed.elapsed();
    assert_eq!(info.master_epoch, Some(2));
    assert_eq!(info.master_address.as_deref(), Some("10.0.0.2:10911"));
    assert_eq!(set.sync_state_set, BTreeSet::from([2]));
    println!(
        "master replaced {} ms after its broker's connections closed",
        failover.as_millis()
    );

    // The Raft leader goes: the other two elect a leader that knows all of the above.
    group.stop(leader).await;
    let new_leader = group.leader().await;
    assert_ne!(new_leader, leader);
    let new_leader_addr = group.peers[&new_leader].clone();
    let (info, set) = replica_info(&admin, &new_leader_addr).await;
    assert_eq!(
        (info.master_broker_id, info.master_epoch),
        (Some(2), Some(2))
    );
    assert_eq!(set.sync_state_set, BTreeSet::from([2]));

    // The old leader comes back from its files and catches up.
    group.restart(leader).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let caught_up = group.nodes[&leader].controller.read(|sets| {
            sets.get("broker-a")
                .map(|set| (set.master, set.master_epoch))
                == Some((Some(2), 2))
        });
        if caught_up {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted controller never caught up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The operator's view: both replicas, only broker 2 alive and in sync.
    let data = call(
        &admin,
        &group.peers[&group.leader().await],
        RequestCode::ControllerGetSyncStateData,
        None,
        Some(br#"["broker-a"]"#.to_vec()),
    )
    .await;
    assert_eq!(data.response_code(), ResponseCode::Success, "{data:?}");
    let table = BrokerReplicasInfo::from_json_bytes(&data.body)
        .expect("body")
        .replicas_info_table;
    let replicas = &table["broker-a"];
    assert_eq!(replicas.master_broker_id, Some(2));
    assert_eq!(
        replicas
            .in_sync_replicas
            .iter()
            .map(|replica| replica.broker_id)
            .collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(
        replicas
            .not_in_sync_replicas
            .iter()
            .map(|replica| replica.broker_id)
            .collect::<Vec<_>>(),
        vec![1]
    );

    beating2.abort();
    broker2.shutdown();
    admin.shutdown();
    group.stop_all().await;
}

/// Broker set `broker-{index}` with one broker, as the leader applied it.
async fn register_sets(client: &RemotingClient, leader: &str, sets: std::ops::Range<usize>) {
    for index in sets {
        let applied = request(
            client,
            leader,
            RequestCode::ControllerApplyBrokerId,
            ApplyBrokerIdRequestHeader {
                cluster_name: "c".to_owned(),
                broker_name: format!("broker-{index}"),
                applied_broker_id: 1,
                register_check_code: format!("10.1.0.{}:10911;1", index % 250),
            },
            None,
        )
        .await;
        assert_eq!(
            applied.response_code(),
            ResponseCode::Success,
            "{applied:?}"
        );
    }
}

async fn wait_for_sets(group: &Group, id: u64, count: usize) {
    let deadline = Instant::now() + WAIT;
    loop {
        let known = group.nodes[&id].controller.read(|sets| sets.sets().count());
        if known == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "controller {id} knows {known} of {count} broker sets"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_group_keeps_every_change_and_a_wiped_member_catches_up_from_a_snapshot() {
    let mut group = Group::start(3).await;
    let admin = RemotingClient::new(ClientConfig::default(), None);
    let leader = group.leader().await;
    register_sets(&admin, &group.peers[&leader], 0..150).await;
    // Snapshots on every member; then more changes, past what a snapshot keeps of the log.
    for node in group.nodes.values() {
        node.controller.snapshot_now().await.expect("snapshot");
    }
    register_sets(&admin, &group.peers[&leader], 150..300).await;
    for node in group.nodes.values() {
        node.controller.snapshot_now().await.expect("snapshot");
    }
    register_sets(&admin, &group.peers[&leader], 300..320).await;
    for id in 1..=3 {
        wait_for_sets(&group, id, 320).await;
    }

    // All stop; one loses its disk; all start again.
    group.stop_all().await;
    let wiped = leader % 3 + 1;
    group.wipe(wiped);
    for id in 1..=3 {
        group.restart(id).await;
    }
    let leader = group.leader().await;
    for id in 1..=3 {
        wait_for_sets(&group, id, 320).await;
    }
    let restored = group.nodes[&wiped].controller.leadership();
    assert!(
        restored.snapshot_index.is_some_and(|index| index >= 200),
        "the wiped controller was sent a snapshot, not the whole log: {restored:?}"
    );
    let reference = group.nodes[&leader].controller.read(|sets| sets.clone());
    for id in 1..=3 {
        let copy = group.nodes[&id].controller.read(|sets| sets.clone());
        assert!(copy == reference, "controller {id} differs from the leader");
    }
    // And the group still takes changes.
    register_sets(&admin, &group.peers[&leader], 320..321).await;
    admin.shutdown();
    group.stop_all().await;
}
