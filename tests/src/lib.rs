//! `tidemark-tests` holds the cross-process scenarios: Tidemark's Rust client against a server
//! started in a child process — `tidemark dev` by default, or any binary with the same command
//! line named by `TIDEMARK_TEST_SERVER` (the test script points it at
//! `compat/java/scripts/apache-dev`, Apache RocketMQ's own name server and broker).
//!
//! [`DevServer`] starts the server on free loopback ports in a temporary data directory, waits
//! for its ready line, and stops it (and deletes the directory) when dropped. [`BrokerSet`]
//! starts a name server and a master with its slaves as separate `tidemark` processes.

pub mod admin_cli;
mod brokers;
pub mod certs;
pub mod controller_pair;
pub mod counting;
pub mod go_fault_client;
pub mod netns;
pub mod offsets;
pub mod prometheus;
pub mod replica_set;
pub mod webdriver;

pub use brokers::{
    free_broker_port, start_broker_process, start_broker_process_on, start_namesrv, BrokerSet,
};

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// What the server prints once the name server and broker are up.
pub const READY_LINE: &str = "tidemark dev ready";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
const TAIL_LINES: usize = 60;
/// How long the output threads of a server that exited may take to reach the pipes' end. They
/// are done at once unless a process it started still holds the pipes (a stand-in script's
/// JVM): then the tail is read as it is.
const PIPE_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Starts of a server whose port was taken between choosing it and binding it, before giving up.
const PORT_ATTEMPTS: usize = 5;

/// Short delay levels for retry tests: level n is n seconds.
pub const SHORT_DELAY_LEVELS: &str =
    "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s";

/// The server binary: `TIDEMARK_TEST_SERVER`, else the workspace's `target/debug/tidemark`,
/// brought up to date once per test process (`cargo test -p tidemark-tests` builds libraries
/// and test targets but not another package's binary).
pub fn server_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("TIDEMARK_TEST_SERVER") {
        return PathBuf::from(bin);
    }
    tidemark_binary()
}

/// The workspace's `target/debug/tidemark`, rebuilt if stale (once per test process).
///
/// It is built the way `scripts/test` builds it, by the workspace's test build (the binary's own
/// integration tests need it), so after that build this finds everything fresh in a second.
/// `cargo build -p tidemark` would resolve other features for tokio, hyper, tonic and the rest
/// and compile most of the workspace a second time, in the middle of the test run.
pub fn tidemark_binary() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args([
                "test",
                "--workspace",
                "--all-targets",
                "--no-run",
                "--quiet",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        // cargo runs a test with the variables it also gives build scripts (CARGO_PKG_NAME,
        // CARGO_MANIFEST_DIR, ...). Build scripts that ask to rerun when those change (ring's
        // do) would see them changed, run again and rebuild their crate and all above it.
        for (name, _) in std::env::vars_os() {
            if set_by_cargo_for_this_package(&name.to_string_lossy()) {
                build.env_remove(&name);
            }
        }
        let status = build.status();
        if !matches!(status, Ok(status) if status.success()) {
            eprintln!(
                "warning: building the tidemark binary failed ({status:?}); using what is there"
            );
        }
    });
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    target.join("debug").join("tidemark")
}

/// Variables cargo sets for the package whose test is running, which a nested cargo must not see.
fn set_by_cargo_for_this_package(name: &str) -> bool {
    const PREFIXES: [&str; 6] = [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
    ];
    name == "OUT_DIR" || PREFIXES.iter().any(|prefix| name.starts_with(prefix))
}

/// Whether the scenarios run against Apache RocketMQ (the stand-in script) rather than Tidemark.
pub fn against_apache() -> bool {
    server_binary()
        .file_name()
        .is_some_and(|name| name.to_string_lossy().contains("apache"))
}

/// A free loopback port for a server, below the kernel's ephemeral range: a server restarted
/// on its port (after a kill) would otherwise find it taken by some connection's local end
/// meanwhile (CI failed that way once).
pub fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let low = 10_000u32;
    let span = ephemeral_low.saturating_sub(low).max(1);
    // Test processes run side by side: each starts at its own place in the range.
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
    for _ in 0..span.min(5_000) {
        let step = NEXT.fetch_add(7, std::sync::atomic::Ordering::Relaxed);
        let port = low + seed.wrapping_add(step) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
    listener.local_addr().expect("local address").port()
}

/// A server in a child process: started with its command line, ready once it prints its ready
/// line, stopped (SIGTERM) when dropped. Output goes to a log file; its tail is kept for
/// failure messages.
#[derive(Debug)]
pub struct ServerProcess {
    bin: PathBuf,
    args: Vec<String>,
    ready_line: String,
    child: Option<Child>,
    tail: Arc<Mutex<VecDeque<String>>>,
    /// The line that said the server was ready (the last start's).
    ready_text: Arc<Mutex<Option<String>>>,
    log_path: PathBuf,
}

fn log_dir() -> PathBuf {
    let logs = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|root| root.join("target").join("tidemark-test-logs"))
        .unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&logs).expect("create the log directory");
    logs
}

impl ServerProcess {
    /// Starts `bin args…` and waits until it prints `ready_line`.
    pub fn start(name: &str, bin: PathBuf, args: Vec<String>, ready_line: &str) -> ServerProcess {
        ServerProcess::try_start(name, bin, args, ready_line)
            .unwrap_or_else(|failure| panic!("{failure}"))
    }

    /// As [`start`](Self::start), but a server that exits before it is ready is an `Err` with
    /// its last lines, for callers that can retry (a port taken between choosing and binding).
    pub fn try_start(
        name: &str,
        bin: PathBuf,
        args: Vec<String>,
        ready_line: &str,
    ) -> Result<ServerProcess, String> {
        assert!(
            bin.exists(),
            "server binary {} not found; build it with `cargo build -p tidemark` or set TIDEMARK_TEST_SERVER",
            bin.display()
        );
        let mut server = ServerProcess {
            bin,
            args,
            ready_line: ready_line.to_owned(),
            child: None,
            tail: Arc::new(Mutex::new(VecDeque::new())),
            ready_text: Arc::default(),
            log_path: log_dir().join(format!("{name}-{}.log", std::process::id())),
        };
        server.try_launch()?;
        Ok(server)
    }

    /// Starts a server on ports of its own, waiting until it prints `ready_line`: `choose`
    /// picks the ports ([`free_port`], [`free_broker_port`], a tuple of them…) and `args` makes
    /// the command line from them (writing a configuration file first if need be). A port
    /// checked free can be taken (by any connection's local end) before the server binds it:
    /// then it chooses again. Returns the server and the ports it runs on.
    pub fn start_on_free_ports<P>(
        name: &str,
        bin: PathBuf,
        mut choose: impl FnMut() -> P,
        mut args: impl FnMut(&P) -> Vec<String>,
        ready_line: &str,
    ) -> (ServerProcess, P) {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let ports = choose();
            match ServerProcess::try_start(name, bin.clone(), args(&ports), ready_line) {
                Ok(server) => return (server, ports),
                Err(failure) if attempts < PORT_ATTEMPTS && port_taken(&failure) => {
                    eprintln!("{name}: a port was taken meanwhile; trying others");
                }
                Err(failure) => panic!("{failure}"),
            }
        }
    }

    fn launch(&mut self) {
        if let Err(failure) = self.try_launch() {
            panic!("{failure}");
        }
    }

    fn try_launch(&mut self) -> Result<(), String> {
        let mut child = Command::new(&self.bin)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", self.bin.display()));
        let log = Arc::new(Mutex::new(
            File::options()
                .create(true)
                .append(true)
                .open(&self.log_path)
                .expect("open the server log"),
        ));
        if let Ok(mut file) = log.lock() {
            let _ = writeln!(file, "==== {} {}", self.bin.display(), self.args.join(" "));
        }
        let (ready_tx, ready_rx) = mpsc::channel();
        let mut drains = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            drains.push(self.drain(stdout, log.clone(), Some(ready_tx.clone())));
        }
        // Tidemark prints its ready line on stdout; other servers (Prometheus) log theirs.
        if let Some(stderr) = child.stderr.take() {
            drains.push(self.drain(stderr, log, Some(ready_tx.clone())));
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if ready_rx.recv_timeout(Duration::from_millis(100)).is_ok() {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                // The output threads may still be copying its last lines (which say whether a
                // port was taken): they end at the pipes' end.
                join_drains(drains, PIPE_DRAIN_TIMEOUT);
                return Err(format!(
                    "server exited with {status} before it was ready\n{}",
                    self.tail_text()
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "server not ready within {READY_TIMEOUT:?}\n{}",
                    self.tail_text()
                );
            }
        }
        self.child = Some(child);
        Ok(())
    }

    /// Copies `stream` to the log and the tail until it ends; the thread's handle.
    fn drain(
        &self,
        stream: impl std::io::Read + Send + 'static,
        log: Arc<Mutex<File>>,
        ready: Option<mpsc::Sender<()>>,
    ) -> std::thread::JoinHandle<()> {
        let tail = self.tail.clone();
        let ready_text = self.ready_text.clone();
        let ready_line = self.ready_line.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if let Ok(mut file) = log.lock() {
                    let _ = writeln!(file, "{line}");
                }
                if let Some(ready) = &ready {
                    if line.contains(&ready_line) {
                        if let Ok(mut text) = ready_text.lock() {
                            *text = Some(line.clone());
                        }
                        let _ = ready.send(());
                    }
                }
                if let Ok(mut tail) = tail.lock() {
                    tail.push_back(line);
                    while tail.len() > TAIL_LINES {
                        tail.pop_front();
                    }
                }
            }
        })
    }

    /// The line with which the server said it was ready (the last start's), for what it
    /// reports there: ports chosen by the system, for one.
    pub fn ready_text(&self) -> Option<String> {
        self.ready_text.lock().ok().and_then(|text| text.clone())
    }

    /// The last lines the server printed, for failure messages.
    pub fn tail_text(&self) -> String {
        let tail = self
            .tail
            .lock()
            .map(|tail| tail.iter().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        format!(
            "---- {} ----\n{}\n---- end ----",
            self.log_path.display(),
            tail.join("\n")
        )
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The running process's id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends a signal by name (`STOP`, `CONT`, …) to the running process; for `STOP`, returns
    /// once every thread of the process is stopped (a test acting on a process it believes
    /// frozen must not race the signal's delivery), for `CONT` once none is.
    pub fn signal(&self, name: &str) {
        let Some(child) = &self.child else {
            return;
        };
        let pid = child.id();
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status();
        assert!(
            sent.as_ref().is_ok_and(|status| status.success()),
            "kill -{name} {pid} failed: {sent:?}"
        );
        // A signal stops (or resumes) the threads one by one: the main thread's state alone
        // says nothing of the others. (A thread on its way out, `Z` or `X`, does not count.)
        let settled: Option<fn(&[char]) -> bool> = match name {
            "STOP" => Some(|states| {
                states.contains(&'T') && states.iter().all(|state| matches!(state, 'T' | 'Z' | 'X'))
            }),
            "CONT" => Some(|states| !states.contains(&'T')),
            _ => None,
        };
        if let Some(settled) = settled {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let states = thread_states(pid);
                if settled(&states) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "process {pid}'s threads not settled 10 s after SIG{name}: {states:?}"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// Graceful stop (SIGTERM), waiting for the process to exit.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if !terminate(&mut child) {
            panic!(
                "server did not stop within {STOP_TIMEOUT:?} of SIGTERM\n{}",
                self.tail_text()
            );
        }
    }

    /// SIGKILL: nothing gets a chance to persist.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again with the same command line.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop() or kill() before restart()");
        self.launch();
    }
}

/// Waits (up to `timeout`) until the output threads have copied everything to the end.
fn join_drains(drains: Vec<std::thread::JoinHandle<()>>, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while drains.iter().any(|drain| !drain.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    for drain in drains {
        if drain.is_finished() {
            let _ = drain.join();
        }
    }
}

/// Whether a server's start failed because a port was taken (by any connection's local end)
/// between choosing it and binding it: the cue to choose again.
pub fn port_taken(failure: &str) -> bool {
    // Rust's std says "Address already in use", Go's (Prometheus) "address already in use".
    failure.contains("Address already in use") || failure.contains("address already in use")
}

/// SIGTERM, then SIGKILL after [`STOP_TIMEOUT`]; whether it stopped in time.
fn terminate(child: &mut Child) -> bool {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + STOP_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child);
        }
    }
}

/// `tidemark dev` (or its stand-in) on free loopback ports in a temporary data directory.
#[derive(Debug)]
pub struct DevServer {
    process: ServerProcess,
    namesrv_port: u16,
    broker_port: u16,
    grpc_port: u16,
    http_port: Option<u16>,
    _data_dir: tempfile::TempDir,
}

impl DevServer {
    /// Starts a server; `extra_args` are appended to the `dev` command line.
    pub fn start(name: &str, extra_args: &[&str]) -> DevServer {
        DevServer::launch(name, extra_args, false)
    }

    /// As [`start`](Self::start), with the metrics endpoint and web console on a free port of
    /// their own ([`http_port`](Self::http_port)), chosen with the others.
    pub fn start_with_console(name: &str, extra_args: &[&str]) -> DevServer {
        DevServer::launch(name, extra_args, true)
    }

    fn launch(name: &str, extra_args: &[&str], console: bool) -> DevServer {
        let data_dir = tempfile::Builder::new()
            .prefix("tidemark-test-")
            .tempdir()
            .expect("create a data directory");
        let data_dir_text = data_dir.path().display().to_string();
        let (process, (namesrv_port, broker_port, grpc_port, http_port)) =
            ServerProcess::start_on_free_ports(
                name,
                server_binary(),
                || {
                    (
                        free_port(),
                        free_broker_port(),
                        free_port(),
                        console.then(free_port),
                    )
                },
                |(namesrv_port, broker_port, grpc_port, http_port)| {
                    let mut args = vec![
                        "dev".to_owned(),
                        "--data-dir".to_owned(),
                        data_dir_text.clone(),
                        "--namesrv-port".to_owned(),
                        namesrv_port.to_string(),
                        "--broker-port".to_owned(),
                        broker_port.to_string(),
                        "--grpc-port".to_owned(),
                        grpc_port.to_string(),
                    ];
                    if let Some(http_port) = http_port {
                        args.extend(["--http-port".to_owned(), http_port.to_string()]);
                    }
                    args.extend(extra_args.iter().map(|arg| (*arg).to_owned()));
                    args
                },
                READY_LINE,
            );
        DevServer {
            process,
            namesrv_port,
            broker_port,
            grpc_port,
            http_port,
            _data_dir: data_dir,
        }
    }

    /// The metrics endpoint and web console's port (servers started with
    /// [`start_with_console`](Self::start_with_console)).
    pub fn http_port(&self) -> u16 {
        self.http_port
            .expect("started without a console port: use DevServer::start_with_console")
    }

    pub fn namesrv_addr(&self) -> String {
        format!("127.0.0.1:{}", self.namesrv_port)
    }

    pub fn broker_addr(&self) -> String {
        format!("127.0.0.1:{}", self.broker_port)
    }

    /// RocketMQ 5's gRPC endpoint (Tidemark only: Apache's stand-ins serve no gRPC port).
    pub fn grpc_addr(&self) -> String {
        format!("127.0.0.1:{}", self.grpc_port)
    }

    pub fn tail_text(&self) -> String {
        self.process.tail_text()
    }

    /// The server process's id.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    pub fn stop(&mut self) {
        self.process.stop();
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }

    pub fn restart(&mut self) {
        self.process.restart();
    }
}

/// Polls `condition` every 100 ms until it holds or `timeout` passes.
pub async fn wait_until<F: FnMut() -> bool>(timeout: Duration, mut condition: F) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Like [`wait_until`], for a condition that has to ask a server (polled every 250 ms).
pub async fn wait_until_async<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits (up to 10 s) until the name server at `namesrv` answers `topic`'s route: a consumer
/// started before that finds no queues until its next rebalance, seconds later.
pub async fn wait_for_route(namesrv: &str, topic: &str) -> bool {
    use tidemark_protocol::headers::GetRouteInfoRequestHeader;
    use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
    let client =
        tidemark_remoting::RemotingClient::new(tidemark_remoting::ClientConfig::default(), None);
    let found = wait_until_async(Duration::from_secs(10), || {
        let header = GetRouteInfoRequestHeader {
            topic: topic.to_owned(),
            accept_standard_json_only: None,
        };
        let request =
            RemotingCommand::request_with_header(RequestCode::GetRouteInfoByTopic, &header);
        let client = &client;
        async move {
            matches!(
                client.invoke(namesrv, request, Duration::from_secs(2)).await,
                Ok(response) if response.response_code() == ResponseCode::Success
            )
        }
    })
    .await;
    client.shutdown();
    found
}

/// A unique name for a topic or group of one test.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// The state letter of every thread of a process, from `/proc/<pid>/task/*/stat` (`T` when
/// stopped). A thread that ends while they are read is left out.
fn thread_states(pid: u32) -> Vec<char> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
            // The command name is in parentheses and may hold spaces: the state follows the
            // last ')'.
            stat.rsplit_once(')')?.1.trim_start().chars().next()
        })
        .collect()
}
