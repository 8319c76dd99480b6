//! A Tidemark broker set in controller mode on 127.0.0.1: one controller, a name server, and
//! brokers A and B of one broker name, B in A's SyncStateSet. For the failover scenarios.

use std::time::Duration;

use crate::{
    free_broker_port, free_port, start_namesrv, tidemark_binary, wait_until, ServerProcess,
};

/// A broker of the set and the address it serves on.
fn broker(
    dir: &std::path::Path,
    label: &str,
    namesrv: &str,
    controller: &str,
) -> (ServerProcess, String) {
    let config = dir.join(format!("{label}.toml"));
    let (process, port) = ServerProcess::start_on_free_ports(
        &format!("controller-failover-{label}"),
        tidemark_binary(),
        free_broker_port,
        |port| {
            std::fs::write(
                &config,
                format!(
                    "broker_name = \"broker-cf\"\nbroker_ip1 = \"127.0.0.1\"\nlisten_ip = \"127.0.0.1\"\n\
                     listen_port = {port}\ngrpc_listen_port = 0\nnamesrv_addr = \"{namesrv}\"\n\
                     store_path_root_dir = \"{}\"\nenable_controller_mode = true\n\
                     controller_addr = \"{controller}\"\n",
                    dir.join(label).display()
                ),
            )
            .expect("write broker config");
            vec!["broker".into(), "-c".into(), config.display().to_string()]
        },
        "tidemark broker ready",
    );
    (process, format!("127.0.0.1:{port}"))
}

/// Replicas the controller lists as in sync (not the master, not "not in sync").
pub fn in_sync(status: &str) -> usize {
    status
        .lines()
        .filter(|line| line.contains("in sync") && !line.contains("not in sync"))
        .count()
}

pub fn admin_status(controller: &str) -> String {
    let output = std::process::Command::new(tidemark_binary())
        .args([
            "admin",
            "controller-status",
            "--controllers",
            controller,
            "-b",
            "broker-cf",
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
    _controller: ServerProcess,
    _namesrv: ServerProcess,
    pub controller: String,
    pub namesrv: String,
    _dir: tempfile::TempDir,
}

pub async fn start_pair() -> Pair {
    let dir = tempfile::tempdir().expect("temp dir");
    let (controller_process, controller) = ServerProcess::start_on_free_ports(
        "controller-failover-controller",
        tidemark_binary(),
        || format!("127.0.0.1:{}", free_port()),
        |controller| {
            // A failed start's files (it wrote them for another address) are not reused.
            let data_dir = dir.path().join("controller");
            let _ = std::fs::remove_dir_all(&data_dir);
            vec![
                "controller".into(),
                "--id".into(),
                "1".into(),
                "--peers".into(),
                format!("1={controller}"),
                "--listen".into(),
                controller.clone(),
                "--data-dir".into(),
                data_dir.display().to_string(),
                "--broker-timeout-ms".into(),
                "3000".into(),
            ]
        },
        "tidemark controller ready",
    );
    let (namesrv_process, namesrv_port) = start_namesrv("controller-failover-namesrv", &[]);
    let namesrv = format!("127.0.0.1:{namesrv_port}");
    let (a, a_addr) = broker(dir.path(), "a", &namesrv, &controller);
    assert!(
        wait_until(Duration::from_secs(20), || admin_status(&controller)
            .contains("master"))
        .await,
        "A never became master:\n{}",
        admin_status(&controller)
    );
    let (b, b_addr) = broker(dir.path(), "b", &namesrv, &controller);
    assert!(
        wait_until(Duration::from_secs(30), || in_sync(&admin_status(
            &controller
        )) == 1)
        .await,
        "B never joined the SyncStateSet:\n{}",
        admin_status(&controller)
    );
    Pair {
        a,
        b,
        a_addr,
        b_addr,
        _controller: controller_process,
        _namesrv: namesrv_process,
        controller,
        namesrv,
        _dir: dir,
    }
}
