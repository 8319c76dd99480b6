//! Tidemark in controller mode on 127.0.0.1, as many processes as a test asks for: Raft
//! controllers, a name server, and the replicas of one broker name (`broker-rs`). For the
//! seeded fault runs, which kill and pause any of them.

use std::path::Path;
use std::time::Duration;

use tidemark_protocol::json::{self, Value};

use crate::{
    free_port, port_taken, start_broker_process, start_namesrv, tidemark_binary, wait_until,
    ServerProcess,
};

/// The broker name every replica of a [`ReplicaSet`] shares.
pub const BROKER_NAME: &str = "broker-rs";

/// `count` `tidemark controller` processes on ports of their own, named `{name}-1`… with their
/// files in `dir`, each given `extra` after the common arguments; and their addresses. A port
/// checked free can be taken (by any connection's local end) before its controller binds it:
/// then all of them start again on other ports, since each names the others' addresses.
pub fn start_controllers(
    name: &str,
    dir: &Path,
    count: usize,
    extra: &[&str],
) -> (Vec<ServerProcess>, Vec<String>) {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let addrs: Vec<String> = (0..count)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let peers = addrs
            .iter()
            .enumerate()
            .map(|(index, addr)| format!("{}={addr}", index + 1))
            .collect::<Vec<_>>()
            .join(";");
        let mut processes = Vec::new();
        let mut taken = false;
        for (index, addr) in addrs.iter().enumerate() {
            let id = index + 1;
            // A failed attempt's files name other addresses: not reused.
            let data_dir = dir.join(format!("{name}-{id}"));
            let _ = std::fs::remove_dir_all(&data_dir);
            let args = [
                "controller".to_owned(),
                "--id".into(),
                id.to_string(),
                "--peers".into(),
                peers.clone(),
                "--listen".into(),
                addr.clone(),
                "--data-dir".into(),
                data_dir.display().to_string(),
            ]
            .into_iter()
            .chain(extra.iter().map(|arg| (*arg).to_owned()))
            .collect();
            match ServerProcess::try_start(
                &format!("{name}-{id}"),
                tidemark_binary(),
                args,
                "tidemark controller ready",
            ) {
                Ok(process) => processes.push(process),
                Err(failure) if attempts < 5 && port_taken(&failure) => {
                    taken = true;
                    break;
                }
                Err(failure) => panic!("{failure}"),
            }
        }
        if !taken {
            return (processes, addrs);
        }
        eprintln!("{name}: a port was taken meanwhile; starting all of them on others");
        // Stopped (dropped) before the next attempt removes their files.
        drop(processes);
    }
}

/// A replica of [`BROKER_NAME`] in controller mode, and the address it serves clients on.
fn start_replica(
    dir: &Path,
    index: usize,
    namesrv: &str,
    controllers: &str,
) -> (ServerProcess, String) {
    let label = format!("replica-{index}");
    let (process, port) = start_broker_process(
        &format!("replica-set-{label}"),
        dir,
        &label,
        &format!(
            "broker_name = \"{BROKER_NAME}\"\nnamesrv_addr = \"{namesrv}\"\n\
             enable_controller_mode = true\ncontroller_addr = \"{controllers}\""
        ),
    );
    (process, format!("127.0.0.1:{port}"))
}

/// One replica as the controllers' leader lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaView {
    pub addr: String,
    pub master: bool,
    /// In the SyncStateSet (the master included).
    pub in_sync: bool,
}

/// What the controllers say now: who leads them, and each replica of [`BROKER_NAME`].
#[derive(Debug, Clone, Default)]
pub struct SetView {
    pub leader: Option<String>,
    pub replicas: Vec<ReplicaView>,
}

impl SetView {
    pub fn master(&self) -> Option<&str> {
        self.replicas
            .iter()
            .find(|replica| replica.master)
            .map(|replica| replica.addr.as_str())
    }

    /// Replicas in the SyncStateSet besides the master.
    pub fn slaves_in_sync(&self) -> usize {
        self.replicas
            .iter()
            .filter(|replica| replica.in_sync && !replica.master)
            .count()
    }
}

/// Controllers, a name server and `replicas` brokers of one name; the first is master, the
/// others in its SyncStateSet. Fields drop in order: processes before the directory.
#[derive(Debug)]
pub struct ReplicaSet {
    pub replicas: Vec<ServerProcess>,
    /// Where each replica serves clients, in the order of `replicas`.
    pub replica_addrs: Vec<String>,
    pub controllers: Vec<ServerProcess>,
    pub controller_addrs: Vec<String>,
    _namesrv: ServerProcess,
    pub namesrv: String,
    _dir: tempfile::TempDir,
}

impl ReplicaSet {
    pub async fn start(replicas: usize, controllers: usize) -> ReplicaSet {
        let dir = tempfile::tempdir().expect("temp dir");
        let (controller_processes, controller_addrs) = start_controllers(
            "replica-set-controller",
            dir.path(),
            controllers,
            // Metrics on a port each chooses (its ready line names it).
            &["--broker-timeout-ms", "3000", "--http-port", "0"],
        );
        let (namesrv_process, namesrv_port) = start_namesrv("replica-set-namesrv", &[]);
        let mut set = ReplicaSet {
            replicas: Vec::new(),
            replica_addrs: Vec::new(),
            controllers: controller_processes,
            controller_addrs,
            _namesrv: namesrv_process,
            namesrv: format!("127.0.0.1:{namesrv_port}"),
            _dir: dir,
        };
        for index in 0..replicas {
            let (process, addr) =
                start_replica(set._dir.path(), index, &set.namesrv, &set.controllers_arg());
            set.replicas.push(process);
            set.replica_addrs.push(addr);
            let wanted = index;
            assert!(
                wait_until(Duration::from_secs(40), || {
                    let view = set.view();
                    view.master().is_some() && view.slaves_in_sync() == wanted
                })
                .await,
                "replica {index} never joined the SyncStateSet: {:?}",
                set.view()
            );
        }
        set
    }

    /// The controllers' addresses as brokers and tools take them, `a;b;c`.
    pub fn controllers_arg(&self) -> String {
        self.controller_addrs.join(";")
    }

    /// Each controller's metrics endpoint, `host:port`, in the order of `controllers`.
    pub fn controller_metrics(&self) -> Vec<String> {
        self.controllers
            .iter()
            .map(|controller| {
                controller
                    .ready_text()
                    .and_then(|line| {
                        line.split_whitespace()
                            .find_map(|word| word.strip_prefix("metrics=http://"))
                            .and_then(|rest| rest.strip_suffix("/metrics"))
                            .map(str::to_owned)
                    })
                    .unwrap_or_else(|| panic!("no metrics address\n{}", controller.tail_text()))
            })
            .collect()
    }

    /// Index of the replica serving at `addr`.
    pub fn replica_at(&self, addr: &str) -> Option<usize> {
        self.replica_addrs.iter().position(|known| known == addr)
    }

    /// What the controllers say now (empty when no majority answers).
    pub fn view(&self) -> SetView {
        view_of(&self.controllers_arg())
    }
}

/// What the controllers at `controllers` (`a;b;c`) say now about [`BROKER_NAME`].
pub fn view_of(controllers: &str) -> SetView {
    let output = std::process::Command::new(tidemark_binary())
        .args([
            "admin",
            "controller-status",
            "--controllers",
            controllers,
            "-b",
            BROKER_NAME,
            "--json",
        ])
        .output()
        .expect("run tidemark admin");
    if !output.status.success() {
        return SetView::default();
    }
    parse_view(&String::from_utf8_lossy(&output.stdout))
}

/// The view `tidemark admin controller-status -b NAME --json` printed: its leaders table,
/// then its replicas table, one JSON array a line.
pub fn parse_view(text: &str) -> SetView {
    let mut tables = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| match json::parse(line.as_bytes()) {
            Ok(Value::Array(rows)) => rows,
            _ => Vec::new(),
        });
    let (leaders, replicas) = (
        tables.next().unwrap_or_default(),
        tables.next().unwrap_or_default(),
    );
    SetView {
        leader: leaders
            .iter()
            .find(|row| matches!(field(row, "isLeader"), Some(Value::Bool(true))))
            .map(|row| text_of(row, "controller")),
        replicas: replicas
            .iter()
            .map(|row| {
                let role = text_of(row, "role");
                ReplicaView {
                    addr: text_of(row, "addr"),
                    master: role == "master",
                    in_sync: role == "master" || role == "in sync",
                }
            })
            .collect(),
    }
}

/// `key` of a JSON object.
pub fn field<'a>(row: &'a Value, key: &str) -> Option<&'a Value> {
    match row {
        Value::Object(object) => object
            .entries()
            .iter()
            .find(|(name, _)| matches!(name, Value::String(name) if name == key))
            .map(|(_, value)| value),
        _ => None,
    }
}

/// `key` of a JSON object as text (a string's own text, anything else its debug form).
pub fn text_of(row: &Value, key: &str) -> String {
    match field(row, key) {
        Some(Value::String(text)) => text.clone(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
