//! Broker heartbeats a controller group absorbs: 100 simulated brokers (one connection each)
//! send BROKER_HEARTBEAT to all three controllers as fast as they are answered, against the
//! same loop with GET_METADATA_INFO (the cheapest request: transport and dispatch only) in the
//! same run. Real brokers send one heartbeat a second each; the figure says how far that is
//! from the limit.
//!
//! `cargo bench -p tidemark-controller --bench heartbeats`; `TIDEMARK_BENCH_SECONDS` sets each
//! run's length (default 5), `TIDEMARK_BENCH_BROKERS` the brokers (default 100). Under
//! `cargo test` it is a short smoke pass.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemark_controller::{Controller, ControllerSettings};
use tidemark_protocol::headers::BrokerHeartbeatRequestHeader;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig, RemotingClient, ServerConfig};
use tokio::net::TcpListener;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

async fn start_group(dir: &std::path::Path) -> (Vec<Arc<Controller>>, Vec<String>) {
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
    }
    let peers: BTreeMap<u64, String> = listeners
        .iter()
        .enumerate()
        .map(|(index, listener)| {
            (
                index as u64 + 1,
                listener.local_addr().expect("addr").to_string(),
            )
        })
        .collect();
    let mut controllers = Vec::new();
    for (index, listener) in listeners.into_iter().enumerate() {
        let id = index as u64 + 1;
        let settings = ControllerSettings::new(id, peers.clone(), dir.join(id.to_string()));
        let controller = Controller::start(settings).await.expect("start");
        tokio::spawn(tidemark_controller::serve(
            listener,
            controller.clone(),
            ServerConfig::default(),
            None,
            std::future::pending(),
        ));
        controllers.push(controller);
    }
    (controllers, peers.into_values().collect())
}

/// Requests answered per second by `brokers` clients sending `request(broker)` to every
/// controller in turn, each waiting for its answer.
async fn run(
    addrs: &[String],
    brokers: usize,
    seconds: u64,
    request: impl Fn(usize) -> RemotingCommand + Send + Sync + 'static,
) -> f64 {
    let request = Arc::new(request);
    let answered = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for broker in 0..brokers {
        let (request, answered, stop, addrs) = (
            request.clone(),
            answered.clone(),
            stop.clone(),
            addrs.to_vec(),
        );
        tasks.push(tokio::spawn(async move {
            let client = RemotingClient::new(ClientConfig::default(), None);
            while !stop.load(Ordering::Relaxed) {
                for addr in &addrs {
                    let answer = client
                        .invoke(addr, request(broker), Duration::from_secs(5))
                        .await;
                    if matches!(answer, Ok(response) if response.response_code() == ResponseCode::Success)
                    {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            client.shutdown();
        }));
    }
    // Connections and the first round off the clock.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (start, before) = (Instant::now(), answered.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let done = answered.load(Ordering::Relaxed) - before;
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    done as f64 / elapsed
}

fn heartbeat(broker: usize) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::BrokerHeartbeat,
        &BrokerHeartbeatRequestHeader {
            cluster_name: "bench".into(),
            broker_addr: format!("10.{}.{}.1:10911", broker / 250, broker % 250),
            broker_name: format!("broker-{}", broker / 2),
            broker_id: Some(broker as i64 % 2 + 1),
            epoch: Some(1),
            max_offset: Some(1 << 30),
            confirm_offset: Some(1 << 30),
            heartbeat_timeout_mills: Some(10_000),
            election_priority: Some(0),
        },
    )
}

fn main() {
    let smoke = !std::env::args().any(|arg| arg == "--bench");
    let seconds = if smoke {
        1
    } else {
        env_number("TIDEMARK_BENCH_SECONDS", 5)
    };
    let brokers = if smoke {
        4
    } else {
        env_number("TIDEMARK_BENCH_BROKERS", 100) as usize
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("temp dir");
        let (controllers, addrs) = start_group(dir.path()).await;
        let deadline = Instant::now() + Duration::from_secs(15);
        while !controllers
            .iter()
            .any(|controller| controller.leadership().is_leader)
        {
            assert!(Instant::now() < deadline, "no leader");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let pings = run(&addrs, brokers, seconds, |_| {
            RemotingCommand::request(RequestCode::ControllerGetMetadataInfo)
        })
        .await;
        let beats = run(&addrs, brokers, seconds, heartbeat).await;
        println!(
            "controller heartbeats, {brokers} brokers x 3 controllers, {seconds} s per run: \
             {beats:.0} heartbeats/s answered; GET_METADATA_INFO baseline {pings:.0}/s; \
             ratio {:.2}; at one heartbeat per broker per second that is {:.0}x the load of \
             {brokers} brokers",
            beats / pings.max(1.0),
            beats / (brokers as f64 * 3.0)
        );
        for controller in controllers {
            controller.shutdown().await;
        }
    });
}
