//! `tidemark dev` and the ports it opens, as a user starts it: a port given with a flag that
//! something else holds stops the start with an error naming the address and the flag (exit
//! code 1); a default port that something else holds is left out with a warning naming the
//! flag, and the rest runs.
//!
//! Each test holds the contested port itself (a listener of its own), and starts `tidemark dev`
//! on free ports otherwise, in a data directory of its own that is deleted afterwards. Waits
//! are bounded; a server still running at the end is killed.

use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Long enough for a debug build to open its store and register, on a busy machine.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// `tidemark dev` in a child process, with its output collected; killed and its data
/// directory deleted when dropped.
struct Dev {
    child: Child,
    data_dir: PathBuf,
    stdout_lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
    /// The threads copying its stdout and stderr: done at the pipes' end.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Dev {
    fn start(name: &str, args: &[String]) -> Dev {
        let data_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("dev-ports-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        let mut child = Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .arg("dev")
            .arg("--data-dir")
            .arg(&data_dir)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tidemark dev");
        let (line_tx, stdout_lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        let stdout_reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = line_tx.send(line);
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("piped stderr");
        let collected = stderr.clone();
        let stderr_reader = std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(read) = pipe.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                if let Ok(mut text) = collected.lock() {
                    text.push_str(&String::from_utf8_lossy(&buffer[..read]));
                }
            }
        });
        Dev {
            child,
            data_dir,
            stdout_lines,
            stderr,
            readers: vec![stdout_reader, stderr_reader],
        }
    }

    /// Once it exited: waits (bounded) until its output is copied to the end.
    fn join_readers(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.readers.iter().any(|reader| !reader.is_finished()) {
            assert!(
                Instant::now() < deadline,
                "its output did not end 10 s after it exited"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        for reader in self.readers.drain(..) {
            reader.join().expect("the reader thread did not panic");
        }
    }

    fn stderr(&self) -> String {
        self.stderr
            .lock()
            .map(|text| text.clone())
            .unwrap_or_default()
    }

    /// The first line of its log that `wanted` picks; panics (with the log) if none comes
    /// within a few seconds (the log is copied by a thread of its own).
    fn log_line(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let log = self.stderr();
            if let Some(line) = log.lines().find(|line| wanted(line)) {
                return line.to_owned();
            }
            if Instant::now() >= deadline {
                panic!("no such line in the log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How it exited, or `None` if it still runs (or printed its ready line) at the deadline.
    fn exit_status(&mut self) -> Option<ExitStatus> {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                // The output threads may still be copying its last lines.
                self.join_readers();
                return Some(status);
            }
            if let Ok(line) = self.stdout_lines.recv_timeout(Duration::from_millis(100)) {
                if line.starts_with("tidemark dev ready") {
                    return None;
                }
            }
        }
        None
    }

    /// Its ready line; panics (with its log) if it exits or is not ready in time.
    fn ready_line(&mut self) -> String {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(line) = self.stdout_lines.recv_timeout(Duration::from_millis(100)) {
                if line.starts_with("tidemark dev ready") {
                    return line;
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                self.join_readers();
                panic!("tidemark dev exited with {status}:\n{}", self.stderr());
            }
        }
        panic!(
            "tidemark dev not ready in {START_TIMEOUT:?}:\n{}",
            self.stderr()
        );
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// A port on `ip` that is free now (the kernel's choice).
fn free_port(ip: IpAddr) -> u16 {
    let listener = TcpListener::bind((ip, 0)).expect("bind a free port");
    listener.local_addr().expect("its address").port()
}

/// A free broker port: the broker also listens on `port - 2` (its VIP channel).
fn free_broker_port(ip: IpAddr) -> u16 {
    for _ in 0..100 {
        let port = free_port(ip);
        if port > 1026 && TcpListener::bind((ip, port - 2)).is_ok() {
            return port;
        }
    }
    panic!("no free port with a free port - 2 on {ip} in 100 tries");
}

/// A port this test holds until the listener drops.
fn held_port(ip: IpAddr) -> (TcpListener, u16) {
    let holder = TcpListener::bind((ip, 0)).expect("bind a port to hold");
    let port = holder.local_addr().expect("its address").port();
    (holder, port)
}

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[test]
fn a_grpc_port_given_that_is_taken_stops_dev_naming_the_address_and_flag() {
    let (_holder, taken) = held_port(LOOPBACK);
    let mut dev = Dev::start(
        "grpc-given",
        &words(&format!(
            "--namesrv-port {} --broker-port {} --grpc-port {taken} --http-port 0",
            free_port(LOOPBACK),
            free_broker_port(LOOPBACK)
        )),
    );
    let status = dev.exit_status();
    let log = dev.stderr();
    assert_eq!(status.and_then(|status| status.code()), Some(1), "{log}");
    assert!(log.contains(&format!("127.0.0.1:{taken}")), "{log}");
    assert!(log.contains("--grpc-port"), "{log}");
}

#[test]
fn an_http_port_given_that_is_taken_stops_dev_naming_the_address_and_flag() {
    let (_holder, taken) = held_port(LOOPBACK);
    let mut dev = Dev::start(
        "http-given",
        &words(&format!(
            "--namesrv-port {} --broker-port {} --grpc-port 0 --http-port {taken}",
            free_port(LOOPBACK),
            free_broker_port(LOOPBACK)
        )),
    );
    let status = dev.exit_status();
    let log = dev.stderr();
    assert_eq!(status.and_then(|status| status.code()), Some(1), "{log}");
    assert!(log.contains(&format!("127.0.0.1:{taken}")), "{log}");
    assert!(log.contains("--http-port"), "{log}");
}

/// The default ports are fixed numbers, so this test takes them on a loopback address of its
/// own (Linux routes all of 127.0.0.0/8 to loopback): nothing else there is disturbed, and if
/// something already holds one, it is taken all the same.
#[test]
fn taken_default_ports_are_left_out_with_warnings_naming_the_flags() {
    let last_octet = u8::try_from(2 + std::process::id() % 250).unwrap_or(2);
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, last_octet));
    let _holders: Vec<TcpListener> = [8081u16, 8082]
        .into_iter()
        .filter_map(|port| TcpListener::bind(SocketAddr::new(ip, port)).ok())
        .collect();
    let mut dev = Dev::start(
        "defaults-taken",
        &words(&format!(
            "--listen-ip {ip} --namesrv-port {} --broker-port {}",
            free_port(ip),
            free_broker_port(ip)
        )),
    );
    let ready = dev.ready_line();
    assert!(ready.contains(" grpc=off "), "{ready}");
    assert!(ready.contains(" metrics=off "), "{ready}");
    for (address, flag) in [
        (format!("{ip}:8081"), "--grpc-port"),
        (format!("{ip}:8082"), "--http-port"),
    ] {
        let warning = dev.log_line(|line| line.contains("WARN") && line.contains(&address));
        assert!(warning.contains(flag), "{warning}");
    }
}
