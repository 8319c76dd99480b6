//! Three `tidemark controller` processes on 127.0.0.1 with their files on disk: brokers (played
//! by a remoting client) register and are elected; the Raft leader's process is SIGKILLed and
//! the others carry on with everything it had agreed to; it comes back from its files; then all
//! three are SIGKILLed at once and come back with every change. `tidemark admin
//! controller-status` shows it all.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use tidemark_protocol::body::SyncStateSet;
use tidemark_protocol::headers::{
    AlterSyncStateSetRequestHeader, ApplyBrokerIdRequestHeader, BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader, GetMetaDataResponseHeader, GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader, RegisterBrokerToControllerRequestHeader,
};
use tidemark_protocol::json::{self, JsonBody, Value};
use tidemark_protocol::{CommandHeader, RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig, RemotingClient};
use tidemark_tests::replica_set::{field, start_controllers, text_of};
use tidemark_tests::{init_logging, tidemark_binary, wait_until_async};

const WAIT: Duration = Duration::from_secs(30);
const CALL: Duration = Duration::from_secs(3);

/// One heartbeat of broker `id` (of broker-x at 10.9.0.`id`:10911).
fn beat(id: i64) -> BrokerHeartbeatRequestHeader {
    BrokerHeartbeatRequestHeader {
        cluster_name: "c".into(),
        broker_addr: format!("10.9.0.{id}:10911"),
        broker_name: "broker-x".into(),
        broker_id: Some(id),
        epoch: Some(0),
        max_offset: Some(0),
        confirm_offset: Some(0),
        heartbeat_timeout_mills: Some(60_000),
        election_priority: Some(id as i32),
    }
}

/// `tidemark admin controller-status --json`: the leaders table and the replicas table.
async fn status(controllers: &str) -> Option<(Vec<Value>, Vec<Value>)> {
    let controllers = controllers.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(tidemark_binary())
            .args([
                "admin",
                "controller-status",
                "--controllers",
                &controllers,
                "-b",
                "broker-x",
                "--json",
            ])
            .output()
            .expect("run tidemark admin")
    })
    .await
    .expect("admin thread");
    if !output.status.success() {
        eprintln!(
            "controller-status failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut lines = text.lines().filter(|line| !line.trim().is_empty());
    let table = |line: Option<&str>| match line.map(|line| json::parse(line.as_bytes())) {
        Some(Ok(Value::Array(rows))) => Some(rows),
        _ => None,
    };
    Some((table(lines.next())?, table(lines.next())?))
}

/// The leader's address once the controllers agree on one.
async fn leader(controllers: &str) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some((leaders, _)) = status(controllers).await {
            let named: BTreeSet<String> = leaders
                .iter()
                .map(|row| text_of(row, "leaderAddr"))
                .filter(|addr| !addr.is_empty())
                .collect();
            let leading = leaders
                .iter()
                .filter(|row| matches!(field(row, "isLeader"), Some(Value::Bool(true))))
                .count();
            if named.len() == 1 && leading == 1 {
                return named.into_iter().next().unwrap_or_default();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the controllers never agreed on a leader"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Sends `request` to the leader, as a broker does: a controller that is not (or no longer)
/// the leader answers CONTROLLER_NOT_LEADER, and the broker asks who leads and tries again.
async fn call(
    client: &RemotingClient,
    controllers: &str,
    request: RemotingCommand,
) -> RemotingCommand {
    for _ in 0..40 {
        let leader = leader(controllers).await;
        let answer = client.invoke(&leader, request.clone(), CALL).await;
        match answer {
            Ok(response) if response.response_code() != ResponseCode::ControllerNotLeader => {
                return response;
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    panic!("no leader answered {request:?}");
}

fn request(code: RequestCode, header: &impl CommandHeader) -> RemotingCommand {
    RemotingCommand::request_with_header(code, header)
}

async fn replica_info(
    client: &RemotingClient,
    leader: &str,
) -> (GetReplicaInfoResponseHeader, SyncStateSet) {
    let info = call(
        client,
        leader,
        request(
            RequestCode::ControllerGetReplicaInfo,
            &GetReplicaInfoRequestHeader {
                broker_name: "broker-x".into(),
            },
        ),
    )
    .await;
    assert_eq!(info.response_code(), ResponseCode::Success, "{info:?}");
    (
        info.decode_header().expect("header"),
        SyncStateSet::from_json_bytes(&info.body).expect("body"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_survive_sigkill_of_their_leader_and_of_all_of_them() {
    init_logging();
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut processes, addrs) = start_controllers(
        "controller",
        dir.path(),
        3,
        &["--broker-timeout-ms", "3000"],
    );
    let controllers = addrs.join(";");
    leader(&controllers).await;

    // Two brokers apply for ids 1 and 2, register, send heartbeats to every controller.
    let client = Arc::new(RemotingClient::new(ClientConfig::default(), None));
    for id in 1..=2i64 {
        let applied = call(
            &client,
            &controllers,
            request(
                RequestCode::ControllerApplyBrokerId,
                &ApplyBrokerIdRequestHeader {
                    cluster_name: "c".into(),
                    broker_name: "broker-x".into(),
                    applied_broker_id: id,
                    register_check_code: format!("10.9.0.{id}:10911;{id}"),
                },
            ),
        )
        .await;
        assert_eq!(
            applied.response_code(),
            ResponseCode::Success,
            "{applied:?}"
        );
        let registered = call(
            &client,
            &controllers,
            request(
                RequestCode::ControllerRegisterBroker,
                &RegisterBrokerToControllerRequestHeader {
                    cluster_name: "c".into(),
                    broker_name: "broker-x".into(),
                    broker_id: id,
                    broker_address: format!("10.9.0.{id}:10911"),
                    invoke_time: None,
                },
            ),
        )
        .await;
        assert_eq!(
            registered.response_code(),
            ResponseCode::Success,
            "{registered:?}"
        );
    }
    // Whichever controller leads when the election is asked for has both brokers alive: each
    // has recorded a heartbeat of each (it answers once recorded).
    for addr in &addrs {
        for id in 1..=2i64 {
            let answer = client
                .invoke(addr, request(RequestCode::BrokerHeartbeat, &beat(id)), CALL)
                .await
                .expect("the controller answers a heartbeat");
            assert_eq!(answer.response_code(), ResponseCode::Success, "{answer:?}");
        }
    }
    let beating = {
        let (client, addrs) = (client.clone(), addrs.clone());
        tokio::spawn(async move {
            loop {
                for addr in &addrs {
                    for id in 1..=2i64 {
                        let _ = client
                            .invoke(addr, request(RequestCode::BrokerHeartbeat, &beat(id)), CALL)
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let elected = call(
        &client,
        &controllers,
        request(
            RequestCode::ControllerElectMaster,
            &ElectMasterRequestHeader {
                cluster_name: "c".into(),
                broker_name: "broker-x".into(),
                broker_id: 1,
                designate_elect: false,
                invoke_time: None,
            },
        ),
    )
    .await;
    assert_eq!(
        elected.response_code(),
        ResponseCode::Success,
        "{elected:?}"
    );
    let altered = call(
        &client,
        &controllers,
        request(
            RequestCode::ControllerAlterSyncStateSet,
            &AlterSyncStateSetRequestHeader {
                broker_name: "broker-x".into(),
                master_broker_id: 1,
                master_epoch: 1,
                invoke_time: None,
            },
        )
        .with_body(
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

    // The operator's view.
    let (_, replicas) = status(&controllers).await.expect("controller-status");
    let roles: Vec<(String, String)> = replicas
        .iter()
        .map(|row| (text_of(row, "brokerId"), text_of(row, "role")))
        .collect();
    assert_eq!(roles.len(), 2, "{replicas:?}");
    assert!(
        roles[0].1 == "master" && roles[1].1 == "in sync",
        "{roles:?}"
    );

    // SIGKILL the leader's process: the other two elect a leader that knows all of it.
    let first_leader = leader(&controllers).await;
    let leader_index = addrs
        .iter()
        .position(|addr| *addr == first_leader)
        .expect("the leader is one of them");
    processes[leader_index].kill();
    let second_leader = leader(&controllers).await;
    assert_ne!(second_leader, first_leader);
    let (info, set) = replica_info(&client, &controllers).await;
    assert_eq!(
        (info.master_broker_id, info.master_epoch),
        (Some(1), Some(1))
    );
    assert_eq!(set.sync_state_set, BTreeSet::from([1, 2]));

    // It comes back from its files.
    processes[leader_index].restart();
    let agreed = wait_until_async(WAIT, || async {
        status(&controllers).await.is_some_and(|(leaders, _)| {
            leaders
                .iter()
                .all(|row| text_of(row, "leaderAddr") == second_leader)
        })
    })
    .await;
    assert!(agreed, "the restarted controller never followed the leader");

    // All three SIGKILLed at once; all come back with every change.
    for process in &mut processes {
        process.kill();
    }
    for process in &mut processes {
        process.restart();
    }
    leader(&controllers).await;
    let (info, set) = replica_info(&client, &controllers).await;
    assert_eq!(
        (info.master_broker_id, info.master_epoch),
        (Some(1), Some(1))
    );
    assert_eq!(set.sync_state_set, BTreeSet::from([1, 2]));
    assert_eq!(set.sync_state_set_epoch, 2);

    beating.abort();
    client.shutdown();
}

/// Controllers that take only TLS and check ACL: they form their group over TLS, signing with
/// an admin account; a broker signing as that account registers; a plaintext client, an
/// unsigned one and a non-admin account get nothing that changes state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_with_tls_and_acl_refuse_strangers() {
    use tidemark_remoting::tls::{ClientTls, ClientTlsSettings};
    use tidemark_remoting::Credentials;
    use tidemark_tests::certs::TestAuthority;
    init_logging();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestAuthority::new(dir.path(), "controllers");
    let server = ca.issue("server", false);
    let acl = dir.path().join("plain_acl.yml");
    std::fs::write(
        &acl,
        "accounts:\n  - accessKey: ops-key\n    secretKey: ops-secret\n    admin: true\n  \
         - accessKey: alice-key\n    secretKey: alice-secret\n",
    )
    .expect("ACL file");
    let (certificate, private_key, trust, acl) = (
        server.certificate.display().to_string(),
        server.private_key.display().to_string(),
        ca.ca_file().display().to_string(),
        acl.display().to_string(),
    );
    let (_processes, addrs) = start_controllers(
        "secure-controller",
        dir.path(),
        3,
        &[
            "--tls-mode",
            "enforcing",
            "--tls-certificate",
            &certificate,
            "--tls-private-key",
            &private_key,
            "--tls",
            "--tls-trust",
            &trust,
            "--acl-file",
            &acl,
            "--acl-access-key",
            "ops-key",
            "--acl-secret-key",
            "ops-secret",
        ],
    );
    let tls = Arc::new(
        ClientTls::new(&ClientTlsSettings {
            trust: Some(ca.ca_file()),
            identity: None,
        })
        .expect("client TLS"),
    );
    let client = |account: Option<(&str, &str)>, tls: Option<Arc<ClientTls>>| {
        let mut config = ClientConfig {
            tls,
            ..ClientConfig::default()
        };
        config.channel.signer =
            account.map(|(key, secret)| Arc::new(Credentials::new(key, secret)));
        RemotingClient::new(config, None)
    };
    let ops = client(Some(("ops-key", "ops-secret")), Some(tls.clone()));

    // The group formed over TLS with signed Raft messages: someone leads.
    let deadline = tokio::time::Instant::now() + WAIT;
    let leader = 'found: loop {
        for addr in &addrs {
            let request = RemotingCommand::request(RequestCode::ControllerGetMetadataInfo);
            let Ok(answer) = ops.invoke(addr, request, CALL).await else {
                continue;
            };
            if answer
                .decode_header::<GetMetaDataResponseHeader>()
                .is_ok_and(|header| header.is_leader)
            {
                break 'found addr.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader among TLS + ACL controllers"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    let apply = |id: i64| {
        request(
            RequestCode::ControllerApplyBrokerId,
            &ApplyBrokerIdRequestHeader {
                cluster_name: "c".into(),
                broker_name: "broker-s".into(),
                applied_broker_id: id,
                register_check_code: format!("10.8.0.{id}:10911;{id}"),
            },
        )
    };
    // Plaintext: no answer at all (the port is TLS only).
    let plain = client(Some(("ops-key", "ops-secret")), None);
    assert!(
        plain.invoke(&leader, apply(1), CALL).await.is_err(),
        "plaintext answered"
    );
    // Unsigned and non-admin: refused with RocketMQ's texts.
    let unsigned = client(None, Some(tls.clone()));
    let refused = unsigned
        .invoke(&leader, apply(1), CALL)
        .await
        .expect("answered");
    assert_eq!(
        refused.response_code(),
        ResponseCode::NoPermission,
        "{refused:?}"
    );
    let alice = client(Some(("alice-key", "alice-secret")), Some(tls.clone()));
    let refused = alice
        .invoke(&leader, apply(1), CALL)
        .await
        .expect("answered");
    assert_eq!(
        refused.response_code(),
        ResponseCode::NoPermission,
        "{refused:?}"
    );
    assert!(
        refused
            .remark
            .as_deref()
            .unwrap_or_default()
            .contains("Need admin permission"),
        "{refused:?}"
    );
    // alice may read.
    let read = alice
        .invoke(
            &leader,
            RemotingCommand::request(RequestCode::ControllerGetMetadataInfo),
            CALL,
        )
        .await
        .expect("answered");
    assert_eq!(read.response_code(), ResponseCode::Success);
    // The admin account (what a broker signs with) changes state.
    let applied = ops.invoke(&leader, apply(1), CALL).await.expect("answered");
    assert_eq!(
        applied.response_code(),
        ResponseCode::Success,
        "{applied:?}"
    );
    for client in [ops, plain, unsigned, alice] {
        client.shutdown();
    }
}
