//! Apache's Go client (rocketmq-client-go v2) as an application in a fault run: the program in
//! `compat/remoting-go/cmd/faultclient` sends and consumes one topic and reports each
//! acknowledged send and each delivery on its stdout, which a thread here collects.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What the Go application reported so far.
#[derive(Debug, Clone, Default)]
pub struct GoEvents {
    pub ready: bool,
    /// Each acknowledged body and the commit-log offset its send result named.
    pub acked: BTreeMap<String, u64>,
    /// The furthest of those offsets.
    pub furthest_acked: Option<u64>,
    /// How many times each body was delivered.
    pub deliveries: BTreeMap<String, usize>,
    /// Each delivery's queue id and when it was reported.
    pub delivered_at: Vec<(i32, Instant)>,
    pub stopped_sending: bool,
}

impl GoEvents {
    fn take(&mut self, line: &str) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["ready"] => self.ready = true,
            ["stopped-sending"] => self.stopped_sending = true,
            ["acked", body, offset_msg_id] => {
                if let Some(offset) = commit_log_offset(offset_msg_id) {
                    self.acked.insert((*body).to_owned(), offset);
                    self.furthest_acked = self.furthest_acked.max(Some(offset));
                }
            }
            ["delivered", queue, body] => {
                *self.deliveries.entry((*body).to_owned()).or_default() += 1;
                self.delivered_at
                    .push((queue.parse().unwrap_or(-1), Instant::now()));
            }
            _ => eprintln!("go fault client said: {line}"),
        }
    }
}

/// The commit-log offset inside a message id: its last 16 hex digits (the store host's
/// address comes before them).
pub fn commit_log_offset(offset_msg_id: &str) -> Option<u64> {
    let start = offset_msg_id.len().checked_sub(16)?;
    u64::from_str_radix(offset_msg_id.get(start..)?, 16).ok()
}

/// The running Go application; killed when dropped.
#[derive(Debug)]
pub struct GoFaultClient {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Arc<Mutex<GoEvents>>,
    _logs: tempfile::TempDir,
}

impl GoFaultClient {
    /// Starts it against `namesrv` (the topic must exist) and waits until it is ready.
    pub fn start(namesrv: &str, topic: &str, group: &str) -> GoFaultClient {
        let logs = tempfile::tempdir().expect("temp dir");
        let stderr = std::fs::File::create(logs.path().join("stderr.log")).expect("stderr log");
        let mut child = Command::new(binary())
            .args(["-namesrv", namesrv, "-topic", topic, "-group", group])
            .args(["-producer-group", &format!("{group}-producer")])
            .arg("-log")
            .arg(logs.path().join("client.log"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start the Go fault client");
        let stdout = child.stdout.take().expect("piped stdout");
        let events: Arc<Mutex<GoEvents>> = Arc::default();
        let collected = events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                collected
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take(&line);
            }
        });
        let client = GoFaultClient {
            stdin: child.stdin.take(),
            child,
            events,
            _logs: logs,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !client.events().ready {
            assert!(
                Instant::now() < deadline,
                "the Go fault client never started: {}",
                client.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        client
    }

    /// The commit-log offset of the furthest record it had acknowledged so far.
    pub fn furthest_acked(&self) -> Option<u64> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .furthest_acked
    }

    /// A copy of what it reported so far.
    pub fn events(&self) -> GoEvents {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stops its sends and waits until the last one's outcome is reported.
    pub fn stop_sending(&mut self) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "stop-sending");
            let _ = stdin.flush();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.events().stopped_sending && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What it wrote on stderr (its failed sends), for a failure message.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self._logs.path().join("stderr.log")).unwrap_or_default()
    }

    /// Closes its stdin, so it shuts down; killed if it takes over 10 s.
    pub fn shutdown(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for GoFaultClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fault client, built once per test process into the workspace's `target/`.
pub fn binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| build("compat/remoting-go", "target/go-faultclient/faultclient"))
        .clone()
}

/// Its gRPC twin, `compat/grpc-go/cmd/faultclient` (rocketmq-clients Go v5), built the same way.
pub fn grpc_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| build("compat/grpc-go", "target/go-faultclient/grpc-faultclient"))
        .clone()
}

fn build(module: &str, out: &str) -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let out = workspace.join(out);
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg("./cmd/faultclient")
        .current_dir(workspace.join(module))
        .status()
        .expect("run go build (Go is installed by scripts/install-deps)");
    assert!(status.success(), "building {module}'s fault client failed");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_offset_out_of_a_message_id() {
        // 127.0.0.1:10911, commit-log offset 0x1F4 (500).
        assert_eq!(
            commit_log_offset("7F00000100002A9F00000000000001F4"),
            Some(500)
        );
        assert_eq!(commit_log_offset("short"), None);
        assert_eq!(commit_log_offset("7F00000100002A9FZZ000000000001F4"), None);
    }

    #[test]
    fn collects_the_event_lines() {
        let mut events = GoEvents::default();
        for line in [
            "ready",
            "acked go-0 7F00000100002A9F0000000000000010",
            "delivered 3 go-0",
            "delivered 3 go-0",
            "stopped-sending",
        ] {
            events.take(line);
        }
        assert!(events.ready && events.stopped_sending);
        assert_eq!(events.acked["go-0"], 16);
        assert_eq!(events.furthest_acked, Some(16));
        assert_eq!(events.deliveries["go-0"], 2);
        assert_eq!(events.delivered_at.len(), 2);
        assert_eq!(events.delivered_at[0].0, 3);
    }
}
