//! `tidemark dev` as a child process: free ports, a temporary data folder, readiness from its
//! log, and a stop that always removes the folder.

use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_GRACE: Duration = Duration::from_secs(10);
const START_ATTEMPTS: u32 = 5;
const ADDRESS_IN_USE: &str = "Address already in use";

pub struct Server {
    binary: PathBuf,
    /// Runs `admin` commands: the binary itself, or `TIDEMARK_CLI` when the binary is a stand-in
    /// for another server (Apache's proxy) that has no `admin`.
    cli: PathBuf,
    dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    pub namesrv: String,
    pub grpc: String,
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A name server port, a broker port `p` with `p-2`, `p-1` and `p+1` free too (the broker's
/// VIP-channel and HA ports sit around it), and a gRPC port.
fn free_ports() -> Result<(u16, u16, u16), String> {
    let namesrv = free_port()?;
    let grpc = free_port()?;
    for _ in 0..50 {
        let p = free_port()?;
        if !(1026..=65534).contains(&p) {
            continue;
        }
        let around = [p - 2, p - 1, p + 1];
        if around.iter().any(|n| *n == namesrv || *n == grpc) {
            continue;
        }
        if around.iter().all(|n| port_free(*n)) {
            return Ok((namesrv, p, grpc));
        }
    }
    Err("no free broker port block".to_string())
}

impl Server {
    pub fn start(binary: PathBuf, cli: PathBuf) -> Result<Server, String> {
        let dir = std::env::temp_dir().join(format!(
            "tidemark-grpc-rust-{}-{}",
            std::process::id(),
            super::unique_suffix()
        ));
        fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let log_path = dir.join("server.log");
        let mut server = Server {
            binary,
            cli,
            dir,
            log_path,
            child: None,
            namesrv: String::new(),
            grpc: String::new(),
        };
        // The ports were free when picked; another process (a test running beside this one) may
        // take one before the server binds it. Then the server exits saying so: fresh ports.
        // On failure the partly started server is dropped, which stops it and removes its folder.
        let mut attempt = 1;
        loop {
            match server.spawn_and_wait() {
                Err(problem) if problem.contains(ADDRESS_IN_USE) && attempt < START_ATTEMPTS => {
                    super::log(&format!(
                        "a port was taken before tidemark bound it (attempt {attempt}); fresh ports"
                    ));
                    attempt += 1;
                }
                outcome => return outcome.map(|()| server),
            }
        }
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let (namesrv, broker, grpc) = free_ports()?;
        self.namesrv = format!("127.0.0.1:{namesrv}");
        let out = fs::File::create(&self.log_path).map_err(|e| format!("server log: {e}"))?;
        let err = out.try_clone().map_err(|e| format!("server log: {e}"))?;
        let child = Command::new(&self.binary)
            .arg("dev")
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--namesrv-port", &namesrv.to_string()])
            .args(["--broker-port", &broker.to_string()])
            .args(["--grpc-port", &grpc.to_string()])
            // Check-backs every second for half messages a second old, so that the transaction
            // check's window sees any check of an ended transaction (the default is 60 s).
            .args(["--transaction-check-interval-ms", "1000"])
            .args(["--transaction-timeout-ms", "1000"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("start {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            let tail = self.tail(400);
            let ready = tail.lines().find(|l| l.starts_with("tidemark dev ready"));
            if let Some(field) = ready.and_then(|l| {
                l.split_whitespace()
                    .find_map(|f| f.strip_prefix("grpc=").map(str::to_string))
            }) {
                self.grpc = field;
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(format!(
                    "tidemark exited ({status}) before it was ready:\n{}",
                    self.tail(20)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "tidemark was not ready within 30 s:\n{}",
            self.tail(20)
        ))
    }

    fn admin(&self, args: &[&str]) -> Result<String, String> {
        let output = Command::new(&self.cli)
            .args(["admin", args[0], "-n", &self.namesrv])
            .args(&args[1..])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("tidemark admin {}: {e}", args[0]))?;
        if !output.status.success() {
            return Err(format!(
                "tidemark admin {args:?} failed ({}): {}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `tidemark admin group-create --orderly`: FIFO delivery needs the group's orderly flag.
    pub fn create_orderly_group(&self, group: &str) -> Result<(), String> {
        self.admin(&[
            "group-create",
            "-c",
            "DefaultCluster",
            "-g",
            group,
            "--orderly",
        ])
        .map(drop)
    }

    /// `tidemark admin topic-create -a +message.type=TYPE` (4 queues), then waits until the name
    /// server routes it: RocketMQ 5 producers are held to the topic's message type, and Apache's
    /// proxy creates no topics on first use.
    pub fn create_topic(&self, topic: &str, message_type: &str) -> Result<(), String> {
        let attribute = format!("+message.type={message_type}");
        self.admin(&[
            "topic-create",
            "-c",
            "DefaultCluster",
            "-t",
            topic,
            "-r",
            "4",
            "-w",
            "4",
            "-a",
            &attribute,
        ])?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match self.admin(&["topic-route", "-t", topic]) {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("topic {topic} not routed within 15 s: {e}"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    pub fn tail(&self, lines: usize) -> String {
        match fs::read_to_string(&self.log_path) {
            Ok(text) => {
                let all: Vec<&str> = text.lines().collect();
                all[all.len().saturating_sub(lines)..].join("\n")
            }
            Err(e) => format!("(no server log: {e})"),
        }
    }

    /// SIGTERM, then SIGKILL after the grace period; removes the data folder either way.
    pub fn stop(&mut self) -> String {
        let outcome = match self.child.take() {
            None => "not started".to_string(),
            Some(mut child) => match child.try_wait() {
                Ok(Some(status)) => format!("had already exited ({status})"),
                _ => {
                    let started = Instant::now();
                    let _ = Command::new("kill")
                        .args(["-TERM", &child.id().to_string()])
                        .status();
                    let mut exited = None;
                    while started.elapsed() < STOP_GRACE {
                        if let Ok(Some(status)) = child.try_wait() {
                            exited = Some(status);
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    match exited {
                        Some(status) => format!(
                            "exited ({status}) after SIGTERM in {:.3}s",
                            started.elapsed().as_secs_f64()
                        ),
                        None => {
                            let _ = child.kill();
                            let _ = child.wait();
                            format!("WARNING: still running {STOP_GRACE:?} after SIGTERM; killed")
                        }
                    }
                }
            },
        };
        let _ = fs::remove_dir_all(&self.dir);
        outcome
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
    }
}
