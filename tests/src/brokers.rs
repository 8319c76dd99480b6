//! Name servers and brokers as separate `tidemark` processes: one started on free ports, and
//! [`BrokerSet`], a name server with a master and its slaves.

use std::net::TcpListener;
use std::path::PathBuf;

use crate::{free_port, tidemark_binary, ServerProcess};

/// A broker port whose VIP (`port - 2`) and HA (`port + 1`) neighbours are free too.
pub fn free_broker_port() -> u16 {
    for _ in 0..200 {
        let port = free_port();
        if port < 1030 || port == u16::MAX {
            continue;
        }
        let neighbours_free = [port - 2, port + 1]
            .iter()
            .all(|neighbour| TcpListener::bind(("127.0.0.1", *neighbour)).is_ok());
        if neighbours_free {
            return port;
        }
    }
    panic!("no free broker port with free neighbours");
}

/// `tidemark namesrv` on a free port of 127.0.0.1 with `args` appended (`label` names its log),
/// and that port.
pub fn start_namesrv(label: &str, args: &[&str]) -> (ServerProcess, u16) {
    ServerProcess::start_on_free_ports(
        label,
        tidemark_binary(),
        free_port,
        |port| {
            [
                "namesrv".to_owned(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
            ]
            .into_iter()
            .chain(args.iter().map(|arg| (*arg).to_owned()))
            .collect()
        },
        "tidemark namesrv ready",
    )
}

/// A `tidemark broker -c FILE` process named `label`, serving on 127.0.0.1 on a port checked
/// free (and again on another if that one was taken meanwhile), its store in `dir/stem` and its
/// configuration in `dir/stem.toml`: those lines, then `settings` (TOML lines of its own —
/// broker name, role, name server, …). Returns it and its port.
pub fn start_broker_process(
    label: &str,
    dir: &std::path::Path,
    stem: &str,
    settings: &str,
) -> (ServerProcess, u16) {
    let (process, port, _) = start_broker_process_on(label, dir, stem, settings, false);
    (process, port)
}

/// [`start_broker_process`], with the metrics and console port too when `http` (chosen with the
/// broker's port, and chosen again with it when either was taken): the process, its broker
/// port and its HTTP port.
pub fn start_broker_process_on(
    label: &str,
    dir: &std::path::Path,
    stem: &str,
    settings: &str,
    http: bool,
) -> (ServerProcess, u16, Option<u16>) {
    let config = dir.join(format!("{stem}.toml"));
    let root = dir.join(stem);
    let (process, (port, http_port)) = ServerProcess::start_on_free_ports(
        label,
        tidemark_binary(),
        || (free_broker_port(), http.then(free_port)),
        |(port, http_port)| {
            let http_line = http_port
                .map(|http_port| format!("http_listen_port = {http_port}\n"))
                .unwrap_or_default();
            std::fs::write(
                &config,
                format!(
                    "broker_ip1 = \"127.0.0.1\"\nlisten_ip = \"127.0.0.1\"\nlisten_port = {port}\n\
                     grpc_listen_port = 0\n{http_line}store_path_root_dir = \"{}\"\n{settings}\n",
                    root.display()
                ),
            )
            .expect("write broker config");
            vec!["broker".into(), "-c".into(), config.display().to_string()]
        },
        "tidemark broker ready",
    );
    (process, port, http_port)
}

/// A name server and the brokers of one broker name (a master and its slaves), each a
/// `tidemark namesrv` / `tidemark broker -c FILE` process.
#[derive(Debug)]
pub struct BrokerSet {
    pub namesrv: ServerProcess,
    namesrv_port: u16,
    /// Index 0 is the master; 1.. are slaves.
    pub brokers: Vec<ServerProcess>,
    broker_ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

impl BrokerSet {
    /// `roles[0]` is the master's role (`ASYNC_MASTER` / `SYNC_MASTER`), the rest `SLAVE`.
    /// `extra` is appended to every broker's TOML.
    pub fn start(name: &str, roles: &[&str], extra: &str) -> BrokerSet {
        Self::start_with(name, roles, extra, &[])
    }

    /// [`start`](Self::start), with `namesrv_args` appended to the name server's command line.
    pub fn start_with(name: &str, roles: &[&str], extra: &str, namesrv_args: &[&str]) -> BrokerSet {
        let dir = tempfile::Builder::new()
            .prefix("tidemark-ms-")
            .tempdir()
            .expect("create a data directory");
        let (namesrv, namesrv_port) = start_namesrv(&format!("{name}-namesrv"), namesrv_args);
        let mut brokers = Vec::new();
        let mut broker_ports = Vec::new();
        for (id, role) in roles.iter().enumerate() {
            let (broker, port) = start_broker_process(
                &format!("{name}-broker{id}"),
                dir.path(),
                &format!("broker-{id}"),
                &format!(
                    "broker_name = \"broker-ms\"\nbroker_id = {id}\nbroker_role = \"{role}\"\n\
                     namesrv_addr = \"127.0.0.1:{namesrv_port}\"\n\
                     register_name_server_period = 10000\n{extra}"
                ),
            );
            brokers.push(broker);
            broker_ports.push(port);
        }
        BrokerSet {
            namesrv,
            namesrv_port,
            brokers,
            broker_ports,
            _dir: dir,
        }
    }

    pub fn namesrv_addr(&self) -> String {
        format!("127.0.0.1:{}", self.namesrv_port)
    }

    pub fn broker_addr(&self, index: usize) -> String {
        format!("127.0.0.1:{}", self.broker_ports[index])
    }

    /// The store root (with its `config/` files) of broker `index`.
    pub fn store_root(&self, index: usize) -> PathBuf {
        self._dir.path().join(format!("broker-{index}"))
    }

    /// The tails of every process's log.
    pub fn tails(&self) -> String {
        std::iter::once(&self.namesrv)
            .chain(&self.brokers)
            .map(ServerProcess::tail_text)
            .collect::<Vec<_>>()
            .join("\n")
    }
}
