//! The cluster under test: three `tidemark controller`s, two name servers and two broker sets
//! of a master and a slave each in controller mode, every process on a host of its own (a
//! network namespace, `tidemark_tests::netns`), and a host for the clients.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tidemark_tests::netns::Hosts;

use crate::clocks::Clocks;
use crate::disks::Disks;
use tidemark_tests::replica_set::{parse_view, SetView};
use tidemark_tests::{tidemark_binary, ServerProcess};

/// Names a `tidemark` binary to run instead of the workspace's own, which the harness would
/// otherwise rebuild: a soak of hours pins what it tests while the tree changes under it.
pub const PINNED_BINARY: &str = "TIDEMARK_CHAOS_BIN";

fn server_binary() -> PathBuf {
    std::env::var_os(PINNED_BINARY).map_or_else(tidemark_binary, PathBuf::from)
}

const CONTROLLER_PORT: u16 = 9878;
const NAMESRV_PORT: u16 = 9876;
const BROKER_PORT: u16 = 10911;
const GRPC_PORT: u16 = 8081;
/// Where the clients and the run's own tools live.
pub const CLIENT_HOST: &str = "client";
pub const CONTROLLER_HOSTS: [&str; 3] = ["c1", "c2", "c3"];
pub const NAMESRV_HOSTS: [&str; 2] = ["n1", "n2"];
/// Broker sets: (broker name, its replicas' hosts).
pub const BROKER_SETS: [(&str, [&str; 2]); 2] =
    [("chaos-a", ["a1", "a2"]), ("chaos-b", ["b1", "b2"])];
/// How a start that failed because network namespaces cannot be made here begins (not root,
/// no `ip`, no veth or bridge support).
pub const NO_NAMESPACES: &str = "cannot create network namespaces here";
/// How long setting up or settling may take before the run gives up.
const SETTLE_WAIT: Duration = Duration::from_secs(90);

/// Every process of the cluster by host name. Fields drop in order: processes, then the
/// brokers' disks, then their files, then the namespaces they ran in.
#[derive(Debug)]
pub struct Cluster {
    pub processes: BTreeMap<String, ServerProcess>,
    disks: Disks,
    clocks: Clocks,
    dir: tempfile::TempDir,
    pub hosts: Hosts,
}

impl Cluster {
    /// Starts the whole cluster and waits until both broker sets have a master with its slave
    /// in sync; with `step_clocks`, brokers whose wall clocks can be stepped. `Err` says why
    /// network namespaces cannot be made here.
    pub fn start(label: &str, step_clocks: bool) -> Result<Cluster, String> {
        let names: Vec<&str> = CONTROLLER_HOSTS
            .iter()
            .chain(&NAMESRV_HOSTS)
            .chain(BROKER_SETS.iter().flat_map(|(_, hosts)| hosts))
            .chain([&CLIENT_HOST])
            .copied()
            .collect();
        let hosts = Hosts::create(&names).map_err(|reason| format!("{NO_NAMESPACES}: {reason}"))?;
        let dir = tempfile::tempdir().map_err(|error| format!("temp dir: {error}"))?;
        let clocks = if step_clocks {
            Clocks::stepped_in(dir.path())
        } else {
            Clocks::default()
        };
        let mut cluster = Cluster {
            processes: BTreeMap::new(),
            disks: Disks::default(),
            clocks,
            dir,
            hosts,
        };
        for host in CONTROLLER_HOSTS {
            let args = cluster.controller_args(host);
            cluster.spawn(label, host, args, "tidemark controller ready");
        }
        for host in NAMESRV_HOSTS {
            let args = vec![
                "namesrv".into(),
                "--listen".into(),
                format!("{}:{NAMESRV_PORT}", cluster.hosts.ip(host)),
            ];
            cluster.spawn(label, host, args, "tidemark namesrv ready");
        }
        for (name, replicas) in BROKER_SETS {
            for host in replicas {
                let store = cluster.dir.path().join(host);
                cluster.disks.mount(&store)?;
                let args = cluster.broker_args(name, host);
                let (program, args) = cluster.clocks.wrap(host, server_binary(), args)?;
                cluster.spawn_program(label, host, program, args, "tidemark broker ready");
            }
        }
        cluster.settled()?;
        Ok(cluster)
    }

    fn spawn(&mut self, label: &str, host: &str, args: Vec<String>, ready: &str) {
        self.spawn_program(label, host, server_binary(), args, ready);
    }

    fn spawn_program(
        &mut self,
        label: &str,
        host: &str,
        program: PathBuf,
        args: Vec<String>,
        ready: &str,
    ) {
        let (program, args) = self.hosts.command(host, program, args);
        let process = ServerProcess::start(&format!("{label}-{host}"), program, args, ready);
        self.processes.insert(host.to_owned(), process);
    }

    fn controller_args(&self, host: &str) -> Vec<String> {
        let id = CONTROLLER_HOSTS
            .iter()
            .position(|known| *known == host)
            .map_or(0, |index| index + 1);
        let peers = CONTROLLER_HOSTS
            .iter()
            .enumerate()
            .map(|(index, peer)| format!("{}={}:{CONTROLLER_PORT}", index + 1, self.hosts.ip(peer)))
            .collect::<Vec<_>>()
            .join(";");
        vec![
            "controller".into(),
            "--id".into(),
            id.to_string(),
            "--peers".into(),
            peers,
            "--listen".into(),
            format!("{}:{CONTROLLER_PORT}", self.hosts.ip(host)),
            "--data-dir".into(),
            self.dir.path().join(host).display().to_string(),
            "--broker-timeout-ms".into(),
            "3000".into(),
        ]
    }

    fn broker_args(&self, name: &str, host: &str) -> Vec<String> {
        let ip = self.hosts.ip(host);
        let config = self.dir.path().join(format!("{host}.toml"));
        let text = format!(
            "broker_name = \"{name}\"\nbroker_ip1 = \"{ip}\"\nlisten_ip = \"{ip}\"\n\
             listen_port = {BROKER_PORT}\ngrpc_listen_port = {GRPC_PORT}\n\
             namesrv_addr = \"{}\"\nstore_path_root_dir = \"{}\"\n\
             enable_controller_mode = true\ncontroller_addr = \"{}\"\n\
             slave_sync_interval_ms = 1000\n\
             transaction_timeout = 2000\ntransaction_check_interval = 2000\n\
             mapped_file_size_commit_log = 67108864\n",
            self.namesrv_addrs(),
            self.dir.path().join(host).display(),
            self.controller_addrs()
        );
        if let Err(error) = std::fs::write(&config, text) {
            panic!("write {}: {error}", config.display());
        }
        vec!["broker".into(), "-c".into(), config.display().to_string()]
    }

    /// `a;b` as clients take them.
    pub fn namesrv_addrs(&self) -> String {
        NAMESRV_HOSTS
            .iter()
            .map(|host| format!("{}:{NAMESRV_PORT}", self.hosts.ip(host)))
            .collect::<Vec<_>>()
            .join(";")
    }

    /// Every broker's gRPC endpoint, `a;b` as the gRPC clients take them: each broker serves
    /// gRPC for the whole cluster, forwarding what belongs to another broker's master.
    pub fn grpc_endpoints(&self) -> String {
        BROKER_SETS
            .iter()
            .flat_map(|(_, hosts)| hosts.iter())
            .map(|host| format!("{}:{GRPC_PORT}", self.hosts.ip(host)))
            .collect::<Vec<_>>()
            .join(";")
    }

    pub fn controller_addrs(&self) -> String {
        CONTROLLER_HOSTS
            .iter()
            .map(|host| format!("{}:{CONTROLLER_PORT}", self.hosts.ip(host)))
            .collect::<Vec<_>>()
            .join(";")
    }

    /// The host a broker or controller address (`ip:port`) belongs to.
    pub fn host_of(&self, addr: &str) -> Option<String> {
        let ip = addr.split(':').next()?;
        self.processes
            .keys()
            .find(|host| self.hosts.ip(host) == ip)
            .cloned()
    }

    /// `tidemark admin <args>` run on the client host: its standard output, or why it failed.
    pub fn admin(&self, args: &[&str]) -> Result<String, String> {
        let mut line = vec!["admin".to_owned()];
        line.extend(args.iter().map(|arg| (*arg).to_owned()));
        let (program, args) = self.hosts.command(CLIENT_HOST, server_binary(), line);
        let output = std::process::Command::new(program)
            .args(&args)
            .output()
            .map_err(|error| format!("run tidemark admin: {error}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(format!(
                "tidemark {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }

    /// What the controllers say now about broker set `name` (empty when none answers).
    pub fn view(&self, name: &str) -> SetView {
        let controllers = self.controller_addrs();
        let args = [
            "controller-status",
            "--controllers",
            &controllers,
            "-b",
            name,
            "--json",
        ];
        self.admin(&args)
            .map(|text| parse_view(&text))
            .unwrap_or_default()
    }

    /// The host of broker set `name`'s master, as the controllers name it.
    pub fn master_of(&self, name: &str) -> Option<String> {
        let view = self.view(name);
        self.host_of(view.master()?)
    }

    /// The host of the controllers' leader.
    pub fn controller_leader(&self) -> Option<String> {
        let view = self.view(BROKER_SETS[0].0);
        self.host_of(view.leader.as_deref()?)
    }

    /// Waits until every process runs, a controller leads, and every broker set has a master
    /// with its slave in sync.
    pub fn settled(&self) -> Result<Duration, String> {
        let start = Instant::now();
        loop {
            let views: Vec<(&str, SetView)> = BROKER_SETS
                .iter()
                .map(|(name, _)| (*name, self.view(name)))
                .collect();
            let whole = views.iter().all(|(_, view)| {
                view.leader.is_some() && view.master().is_some() && view.slaves_in_sync() == 1
            });
            if whole && self.processes.values().all(ServerProcess::is_running) {
                return Ok(start.elapsed());
            }
            if start.elapsed() > SETTLE_WAIT {
                return Err(format!(
                    "the cluster did not settle within {SETTLE_WAIT:?}: {views:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Creates `topic` with `queues` queues on every replica of every set, so whichever is
    /// master serves it at once.
    pub fn create_topic(&self, topic: &str, queues: u32) -> Result<(), String> {
        let namesrv = self.namesrv_addrs();
        let queues = queues.to_string();
        for (_, replicas) in BROKER_SETS {
            for host in replicas {
                let addr = format!("{}:{BROKER_PORT}", self.hosts.ip(host));
                self.admin(&[
                    "topic-create",
                    "-n",
                    &namesrv,
                    "-b",
                    &addr,
                    "-t",
                    topic,
                    "-r",
                    &queues,
                    "-w",
                    &queues,
                ])?;
            }
        }
        Ok(())
    }

    /// Fills the disk of broker `host` (see [`disks`](crate::disks)).
    pub fn fill_disk(&self, host: &str) -> Result<(), String> {
        crate::disks::fill(&self.dir.path().join(host))
    }

    /// Gives broker `host` its disk back.
    pub fn free_disk(&self, host: &str) -> Result<(), String> {
        crate::disks::free(&self.dir.path().join(host))
    }

    /// Whether brokers' wall clocks can be stepped in this run.
    pub fn clocks_step(&self) -> bool {
        self.clocks.enabled()
    }

    /// Sets broker `host`'s wall clock `seconds` off the true one (0: true again).
    pub fn step_clock(&self, host: &str, seconds: i64) -> Result<(), String> {
        self.clocks.step(host, seconds)
    }

    /// Where the run's processes keep their files.
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn log_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/chaos")
    }
}
