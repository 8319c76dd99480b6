//! Apache's Go client (rocketmq-client-go v2) as an application in the run: the program in
//! `compat/remoting-go/cmd/faultclient` with `-history`, on the client host, sending its own
//! topic one message at a time and consuming it in its own group. Its stdout lines become
//! operations of the history. The nemesis may SIGKILL it; it then starts again as a new
//! incarnation (its values start with `g<incarnation>-`), and every send it had in flight is
//! recorded with an unknown outcome.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, CLIENT_HOST};
use crate::history::{Kind, Outcome, QueueRef, Recorder, SendMode};

pub const GO_TOPIC: &str = "chaos-go";
pub const GO_GROUP: &str = "chaos-go-group";
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
    namesrv: String,
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
    pub fn start(cluster: &Cluster, recorder: Recorder) -> Result<GoApp, String> {
        let binary = tidemark_tests::go_fault_client::binary();
        let (program, args_prefix) = cluster.hosts.command(CLIENT_HOST, binary, Vec::new());
        let mut app = GoApp {
            namesrv: cluster.namesrv_addrs(),
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

    fn process(&self) -> String {
        format!("go-app/{}", self.incarnation)
    }

    fn spawn(&mut self) -> Result<(), String> {
        self.incarnation += 1;
        *self.shared.lock().unwrap_or_else(PoisonError::into_inner) = Shared::default();
        let log = Cluster::log_dir().join(format!("go-app-{}.log", std::process::id()));
        if let Some(parent) = log.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let namesrv = self.namesrv.clone();
        let mut child = Command::new(&self.program)
            .args(&self.args_prefix)
            .args([
                "-history", "-namesrv", &namesrv, "-topic", GO_TOPIC, "-group", GO_GROUP,
            ])
            .args(["-producer-group", "chaos-go-producer"])
            .args(["-prefix", &format!("g{}-", self.incarnation)])
            .arg("-log")
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| format!("start the Go client: {error}"))?;
        let stdout = child.stdout.take().ok_or("the Go client's stdout")?;
        self.stdin = child.stdin.take();
        self.child = Some(child);
        let (shared, recorder, process) =
            (self.shared.clone(), self.recorder.clone(), self.process());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                take(&line, &shared, &recorder, &process);
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
                return Err("the Go client was not ready within 60 s".into());
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
                send(body, None, None),
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

fn send(body: String, queue: Option<QueueRef>, offset: Option<i64>) -> Kind {
    Kind::Send {
        mode: SendMode::GoSync,
        values: vec![body],
        queue,
        offset,
    }
}

fn queue(broker: &str, queue: &str) -> Option<QueueRef> {
    Some(QueueRef {
        topic: GO_TOPIC.into(),
        broker: broker.to_owned(),
        queue: queue.parse().ok()?,
    })
}

/// One line of the program's history.
fn take(line: &str, shared: &Mutex<Shared>, recorder: &Recorder, process: &str) {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let at = |text: &str| {
        text.parse::<i64>()
            .ok()
            .map(|us| recorder.ms_of_unix_us(us))
    };
    let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
    match fields.as_slice() {
        ["ready"] => shared.ready = true,
        ["stopped-sending"] => shared.stopped_sending = true,
        ["send", body, invoked] => {
            if let Some(invoked) = at(invoked) {
                shared.pending.insert((*body).to_owned(), invoked);
            }
        }
        ["sent", body, outcome, completed, broker, queue_id, offset] => {
            let Some(invoked) = shared.pending.remove(*body) else {
                return;
            };
            let completed = at(completed).unwrap_or_else(|| recorder.now());
            let (outcome, queue, offset) = if *outcome == "ok" {
                (Outcome::Ok, queue(broker, queue_id), offset.parse().ok())
            } else {
                (Outcome::Unknown, None, None)
            };
            drop(shared);
            recorder.complete_at(
                process,
                invoked,
                completed,
                outcome,
                send((*body).to_owned(), queue, offset),
            );
        }
        ["deliver", delivered, broker, queue_id, offset, body] => {
            let (Some(delivered), Some(queue), Ok(offset)) = (
                at(delivered),
                queue(broker, queue_id),
                offset.parse::<i64>(),
            ) else {
                return;
            };
            drop(shared);
            recorder.complete_at(
                process,
                delivered,
                delivered,
                Outcome::Ok,
                Kind::Deliver {
                    group: GO_GROUP.into(),
                    consumer: process.to_owned(),
                    value: (*body).to_owned(),
                    queue,
                    offset,
                },
            );
        }
        _ => {}
    }
}
