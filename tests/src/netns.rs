//! Separate hosts on one machine for fault tests: each host is a Linux network namespace with
//! one interface (`eth0`, 10.77.0.N/24) plugged into a bridge that lives in a hub namespace of
//! its own. Every address exists only inside namespaces made here, so nothing can reach the
//! machine's real network; [`Hosts`] deletes them all when dropped.
//!
//! Faults: [`Hosts::cut`] drops every packet between two hosts (blackhole routes on both
//! sides: connections stay open and go silent, as in a real partition); [`Hosts::throttle`]
//! limits what reaches a host (a token bucket on its bridge port).
//!
//! Servers run inside a host through `ip netns exec` ([`Hosts::command`]); in-process clients
//! run on a thread that joined the host's namespace ([`Hosts::run_in`]).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

const SUBNET: &str = "10.77.0";

/// A set of hosts joined by one bridge.
#[derive(Debug)]
pub struct Hosts {
    prefix: String,
    names: Vec<String>,
    /// Namespaces created so far (deleted on drop, even after a failed setup).
    created: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|error| format!("cannot run `ip`: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl Hosts {
    /// Creates one host per name. `Err` says why namespaces cannot be made here (not root, no
    /// `ip`, no veth or bridge support); callers skip with that message.
    pub fn create(names: &[&str]) -> Result<Hosts, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let prefix = format!(
            "tm{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut hosts = Hosts {
            prefix,
            names: names.iter().map(|name| (*name).to_owned()).collect(),
            created: Vec::new(),
        };
        let hub = hosts.namespace("hub");
        ip(&["netns", "add", &hub])?;
        hosts.created.push(hub.clone());
        ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        for (index, name) in names.iter().enumerate() {
            let namespace = hosts.namespace(name);
            ip(&["netns", "add", &namespace])?;
            hosts.created.push(namespace.clone());
            let port = format!("p{index}");
            ip(&["-n", &namespace, "link", "set", "lo", "up"])?;
            ip(&[
                "-n", &namespace, "link", "add", "eth0", "type", "veth", "peer", "name", &port,
                "netns", &hub,
            ])?;
            ip(&["-n", &hub, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &hub, "link", "set", &port, "up"])?;
            let address = format!("{}/24", hosts.ip(name));
            ip(&["-n", &namespace, "addr", "add", &address, "dev", "eth0"])?;
            ip(&["-n", &namespace, "link", "set", "eth0", "up"])?;
        }
        Ok(hosts)
    }

    fn namespace(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    fn index(&self, name: &str) -> usize {
        self.names
            .iter()
            .position(|known| known == name)
            .unwrap_or_else(|| panic!("no host named {name}"))
    }

    /// The host's address.
    pub fn ip(&self, name: &str) -> String {
        format!("{SUBNET}.{}", self.index(name) + 1)
    }

    /// `program args…` run inside the host: the program and arguments to start.
    pub fn command(
        &self,
        name: &str,
        program: PathBuf,
        args: Vec<String>,
    ) -> (PathBuf, Vec<String>) {
        let mut line = vec![
            "netns".to_owned(),
            "exec".to_owned(),
            self.namespace(name),
            program.display().to_string(),
        ];
        line.extend(args);
        (PathBuf::from("/usr/sbin/ip"), line)
    }

    /// Drops all traffic between hosts `a` and `b`, both ways.
    pub fn cut(&self, a: &str, b: &str) {
        self.blackhole("add", a, b);
    }

    /// Undoes [`cut`](Self::cut).
    pub fn heal(&self, a: &str, b: &str) {
        self.blackhole("del", a, b);
    }

    fn blackhole(&self, action: &str, a: &str, b: &str) {
        for (from, to) in [(a, b), (b, a)] {
            let (namespace, target) = (self.namespace(from), format!("{}/32", self.ip(to)));
            ip(&["-n", &namespace, "route", action, "blackhole", &target])
                .unwrap_or_else(|failure| panic!("{failure}"));
        }
    }

    /// Limits what reaches host `name` to `rate` (tc's units: `200kbit`), or lifts the limit.
    pub fn throttle(&self, name: &str, rate: Option<&str>) {
        match rate {
            // A token bucket (netem is often not built into CI kernels).
            Some(rate) => self.tc_on_port(
                name,
                ["qdisc", "replace"],
                &[
                    "root", "tbf", "rate", rate, "burst", "3000", "latency", "1s",
                ],
            ),
            None => self.tc_on_port(name, ["qdisc", "del"], &["root"]),
        }
    }

    /// Drops `percent` of the packets to and from host `name` at random, or stops dropping.
    ///
    /// netem is not built into every kernel (not this one); a classic-BPF filter on the host's
    /// bridge port is: it loads the kernel's per-packet random number and answers "shot" below
    /// the threshold, in both directions of the port.
    pub fn lose(&self, name: &str, percent: Option<u32>) {
        let Some(percent) = percent else {
            self.tc_on_port(name, ["qdisc", "del"], &["clsact"]);
            return;
        };
        // ld rand (the ancillary load SKF_AD_OFF + SKF_AD_RAND); if A >= threshold skip one;
        // ret TC_ACT_SHOT; ret TC_ACT_OK.
        let threshold = (u64::from(percent.min(100)) << 32) / 100;
        let program = format!("4,32 0 0 4294963256,53 1 0 {threshold},6 0 0 2,6 0 0 0");
        self.tc_on_port(name, ["qdisc", "replace"], &["clsact"]);
        for direction in ["ingress", "egress"] {
            self.tc_on_port(
                name,
                ["filter", "add"],
                &[direction, "bpf", "da", "bytecode", &program],
            );
        }
    }

    /// Runs `tc OBJECT VERB dev PORT rest…` in the hub on host `name`'s bridge port: every link
    /// fault is shaped there, so the host's own namespace stays untouched.
    fn tc_on_port(&self, name: &str, [object, verb]: [&str; 2], rest: &[&str]) {
        let port = format!("p{}", self.index(name));
        let outcome = Command::new("ip")
            .args(["netns", "exec", &self.namespace("hub"), "tc"])
            .args([object, verb, "dev", &port])
            .args(rest)
            .status();
        assert!(
            outcome.as_ref().is_ok_and(|status| status.success()),
            "tc {object} {verb} {rest:?} on {port} failed: {outcome:?}"
        );
    }

    /// Runs the future `work()` makes on a new thread inside host `name` (a current-thread
    /// tokio runtime there): every socket it opens, and every thread or process it starts,
    /// belongs to that host.
    pub fn run_in<T, F, Fut>(&self, name: &str, work: F) -> std::thread::JoinHandle<T>
    where
        T: Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T>,
    {
        let path = format!("/run/netns/{}", self.namespace(name));
        std::thread::spawn(move || {
            enter(&path);
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the host's thread")
                .block_on(work())
        })
    }
}

/// Removes the namespaces of runs whose process is gone (a harness stopped by a signal never
/// dropped its [`Hosts`]), killing what still runs in them; returns their names.
pub fn remove_orphans() -> Vec<String> {
    let Ok(output) = Command::new("ip").args(["netns", "list"]).output() else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        // tm<pid>-<n>-<host>
        let owner = name
            .strip_prefix("tm")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        let Some(owner) = owner else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        if let Ok(pids) = Command::new("ip").args(["netns", "pids", name]).output() {
            for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        if ip(&["netns", "del", name]).is_ok() {
            removed.push(name.to_owned());
        }
    }
    removed
}

/// Moves the calling thread into the network namespace at `path`.
fn enter(path: &str) {
    use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};
    use std::os::fd::AsFd;
    let file = std::fs::File::open(path).unwrap_or_else(|error| panic!("open {path}: {error}"));
    move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network))
        .unwrap_or_else(|error| panic!("setns({path}): {error}"));
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Deleting a namespace removes its interfaces, and with them their veth peers.
        for namespace in self.created.iter().rev() {
            let _ = ip(&["netns", "del", namespace]);
        }
    }
}
