//! Apache's Go clients as applications in the run, each a process on the client host sending
//! its own topic one message at a time and consuming it in its own group, its stdout lines
//! operations of the history:
//! - [`Flavor::Remoting`]: rocketmq-client-go v2, `compat/remoting-go/cmd/faultclient` with
//!   `-history`, a producer and a push consumer (values `g<incarnation>-<n>`);
//! - [`Flavor::Grpc`]: rocketmq-clients Go v5, `compat/grpc-go/cmd/faultclient`, a producer and a
//!   simple consumer over gRPC to every broker's gRPC port (values `r<incarnation>-<n>`), which
//!   acknowledges, extends and leaves messages like the POP group.
//!
//! The nemesis may SIGKILL one; it then starts again as a new incarnation, and every send it had
//! in flight is recorded with an unknown outcome.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, CLIENT_HOST};
use crate::history::{Kind, Outcome, QueueRef, Recorder, SendMode};

pub const GO_TOPIC: &str = "chaos-go";
pub const GO_GROUP: &str = "chaos-go-group";
pub const GRPC_TOPIC: &str = "chaos-grpc";
pub const GRPC_GROUP: &str = "chaos-grpc-group";

/// Which of Apache's Go clients an application is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Remoting,
    Grpc,
}

impl Flavor {
    pub fn topic(self) -> &'static str {
        match self {
            Flavor::Remoting => GO_TOPIC,
            Flavor::Grpc => GRPC_TOPIC,
        }
    }

    pub fn group(self) -> &'static str {
        match self {
            Flavor::Remoting => GO_GROUP,
            Flavor::Grpc => GRPC_GROUP,
        }
    }

    /// The application's name in the history and the fault log.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Remoting => "go-app",
            Flavor::Grpc => "grpc-app",
        }
    }
}
const READY_WAIT: Duration = Duration::from_secs(60);

/// What the reader thread shares with the application's owner.
#[derive(Debug, Default)]
struct Shared {
    ready: bool,
    stopped_sending: bool,
    /// Sends reported started and not yet finished: body → invoked (ms of the run).
    pending: BTreeMap<String, f64>,
}

#[derive(Debug)]
pub struct GoApp {
    flavor: Flavor,
    /// The name servers (remoting) or every broker's gRPC endpoint (gRPC), `;`-separated.
    servers: String,
    program: std::path::PathBuf,
    args_prefix: Vec<String>,
    incarnation: u32,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    shared: Arc<Mutex<Shared>>,
    recorder: Recorder,
}

impl GoApp {
    /// Builds the program (once) and starts it on the client host.
    pub fn start(cluster: &Cluster, recorder: Recorder, flavor: Flavor) -> Result<GoApp, String> {
        let (binary, servers) = match flavor {
            Flavor::Remoting => (
                tidemark_tests::go_fault_client::binary(),
                cluster.namesrv_addrs(),
            ),
            Flavor::Grpc => (
                tidemark_tests::go_fault_client::grpc_binary(),
                cluster.grpc_endpoints(),
            ),
        };
        let (program, args_prefix) = cluster.hosts.command(CLIENT_HOST, binary, Vec::new());
        let mut app = GoApp {
            flavor,
            servers,
            program,
            args_prefix,
            incarnation: 0,
            child: None,
            stdin: None,
            shared: Arc::default(),
            recorder,
        };
        app.spawn()?;
        Ok(app)
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    fn process(&self) -> String {
        format!("{}/{}", self.flavor.name(), self.incarnation)
    }

    fn args(&self, log: &std::path::Path) -> Vec<String> {
        let (topic, group) = (
            self.flavor.topic().to_owned(),
            self.flavor.group().to_owned(),
        );
        let mut args = match self.flavor {
            Flavor::Remoting => vec!["-history".into(), "-namesrv".into()],
            Flavor::Grpc => vec!["-endpoints".into()],
        };
        args.extend([
            self.servers.clone(),
            "-topic".into(),
            topic,
            "-group".into(),
            group,
        ]);
        match self.flavor {
            Flavor::Remoting => args.extend([
                "-producer-group".into(),
                "chaos-go-producer".into(),
                "-prefix".into(),
                format!("g{}-", self.incarnation),
                "-log".into(),
                log.display().to_string(),
            ]),
            Flavor::Grpc => args.extend([
                "-prefix".into(),
                format!("r{}-", self.incarnation),
                "-log-dir".into(),
                log.display().to_string(),
            ]),
        }
        args
    }

    fn spawn(&mut self) -> Result<(), String> {
        self.incarnation += 1;
        *self.shared.lock().unwrap_or_else(PoisonError::into_inner) = Shared::default();
        // The remoting client logs to a file, the gRPC one into a directory.
        let log = match self.flavor {
            Flavor::Remoting => format!("go-app-{}.log", std::process::id()),
            Flavor::Grpc => format!("grpc-app-{}", std::process::id()),
        };
        let log = Cluster::log_dir().join(log);
        let _ = std::fs::create_dir_all(match self.flavor {
            Flavor::Remoting => log.parent().unwrap_or(&log),
            Flavor::Grpc => &log,
        });
        // What it says on stderr (why it could not start, a panic) goes next to its log.
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log.with_extension("stderr"))
            .map_or_else(|_| Stdio::null(), Stdio::from);
        let mut child = Command::new(&self.program)
            .args(&self.args_prefix)
            .args(self.args(&log))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|error| format!("start the Go client: {error}"))?;
        let stdout = child.stdout.take().ok_or("the Go client's stdout")?;
        self.stdin = child.stdin.take();
        self.child = Some(child);
        let reader = Reader {
            flavor: self.flavor,
            shared: self.shared.clone(),
            recorder: self.recorder.clone(),
            process: self.process(),
        };
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                reader.take(&line);
            }
        });
        let start = Instant::now();
        while !self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ready
        {
            if start.elapsed() > READY_WAIT {
                return Err(format!("{} was not ready within 60 s", self.flavor.name()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// SIGKILL: what it had in flight is recorded as unknown.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stdin = None;
        let pending = std::mem::take(
            &mut self
                .shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pending,
        );
        let now = self.recorder.now();
        for (body, invoked) in pending {
            self.recorder.complete_at(
                &self.process(),
                invoked,
                now,
                Outcome::Unknown,
                send(self.flavor, body, None, None),
            );
        }
    }

    /// Starts it again after a kill, as the next incarnation.
    pub fn restart(&mut self) -> Result<(), String> {
        self.spawn()
    }

    /// Stops its sends; returns once it said the last send's outcome (at most 10 s).
    pub fn stop_sending(&mut self) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "stop-sending");
            let _ = stdin.flush();
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10)
            && self.child.is_some()
            && !self
                .shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .stopped_sending
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Closes its stdin so it shuts down (killed after 10 s).
    pub fn shutdown(mut self) {
        self.stdin = None;
        if let Some(mut child) = self.child.take() {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for GoApp {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn send(flavor: Flavor, body: String, queue: Option<QueueRef>, offset: Option<i64>) -> Kind {
    Kind::Send {
        mode: match flavor {
            Flavor::Remoting => SendMode::GoSync,
            Flavor::Grpc => SendMode::GrpcSync,
        },
        values: vec![body],
        queue,
        offset,
    }
}

fn queue(topic: &str, broker: &str, queue: &str) -> Option<QueueRef> {
    Some(QueueRef {
        topic: topic.to_owned(),
        broker: broker.to_owned(),
        queue: queue.parse().ok()?,
    })
}

/// Turns one application's stdout lines into operations.
struct Reader {
    flavor: Flavor,
    shared: Arc<Mutex<Shared>>,
    recorder: Recorder,
    process: String,
}

impl Reader {
    fn at(&self, unix_us: &str) -> Option<f64> {
        let us = unix_us.parse::<i64>().ok()?;
        Some(self.recorder.ms_of_unix_us(us))
    }

    fn take(&self, line: &str) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        match fields.as_slice() {
            ["ready"] => shared.ready = true,
            ["stopped-sending"] => shared.stopped_sending = true,
            ["send", body, invoked] => {
                if let Some(invoked) = self.at(invoked) {
                    shared.pending.insert((*body).to_owned(), invoked);
                }
            }
            ["sent", body, outcome, completed, rest @ ..] => {
                let Some(invoked) = shared.pending.remove(*body) else {
                    return;
                };
                drop(shared);
                self.sent(body, *outcome == "ok", invoked, completed, rest);
            }
            _ => {
                drop(shared);
                self.settled(&fields);
            }
        }
    }

    /// A send's outcome. The remoting client names the queue and offset; a gRPC answer names
    /// neither, so the value is known only to belong to the application's topic.
    fn sent(&self, body: &str, ok: bool, invoked: f64, completed: &str, rest: &[&str]) {
        let completed = self.at(completed).unwrap_or_else(|| self.recorder.now());
        let topic = self.flavor.topic();
        let (outcome, queue, offset) = match (ok, self.flavor, rest) {
            (false, ..) => (Outcome::Unknown, None, None),
            (true, Flavor::Remoting, [broker, queue_id, offset]) => (
                Outcome::Ok,
                queue(topic, broker, queue_id),
                offset.parse().ok(),
            ),
            (true, ..) => (Outcome::Ok, queue(topic, "", "-1"), None),
        };
        let kind = send(self.flavor, body.to_owned(), queue, offset);
        self.recorder
            .complete_at(&self.process, invoked, completed, outcome, kind);
    }

    /// Deliveries, and the gRPC consumer's acknowledgements and changes of invisibility.
    fn settled(&self, fields: &[&str]) {
        let group = self.flavor.group().to_owned();
        let (delivered, place, body) = match (self.flavor, fields) {
            (Flavor::Remoting, ["deliver", at, broker, queue_id, offset, body]) => (
                at,
                queue(GO_TOPIC, broker, queue_id).zip(offset.parse().ok()),
                body,
            ),
            (Flavor::Grpc, ["deliver", at, topic, broker, queue_id, offset, _, body]) => (
                at,
                queue(topic, broker, queue_id).zip(offset.parse().ok()),
                body,
            ),
            (
                Flavor::Grpc,
                [verb @ ("ack" | "change"), body, outcome, invoked, completed, until],
            ) => {
                let (Some(invoked), Some(completed), Some(until)) =
                    (self.at(invoked), self.at(completed), self.at(until))
                else {
                    return;
                };
                let value = (*body).to_owned();
                let kind = if *verb == "ack" {
                    Kind::PopAck {
                        group,
                        value,
                        visible_until_ms: until,
                    }
                } else {
                    Kind::ChangeInvisible {
                        group,
                        value,
                        visible_until_ms: until,
                    }
                };
                let outcome = if *outcome == "ok" {
                    Outcome::Ok
                } else {
                    Outcome::Unknown
                };
                self.recorder
                    .complete_at(&self.process, invoked, completed, outcome, kind);
                return;
            }
            _ => return,
        };
        let (Some(delivered), Some((queue, offset))) = (self.at(delivered), place) else {
            return;
        };
        let kind = Kind::Deliver {
            group,
            consumer: self.process.clone(),
            value: (*body).to_owned(),
            queue,
            offset,
        };
        self.recorder
            .complete_at(&self.process, delivered, delivered, Outcome::Ok, kind);
    }
}
