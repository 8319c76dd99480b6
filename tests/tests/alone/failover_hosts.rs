//! Controller-mode failover across hosts: three controllers, a name server, brokers A and B of
//! one broker name and the client, each in its own network namespace (`tidemark_tests::netns`).
//! A steady producer (every send SYNC: SEND_OK only once every in-sync replica has it) and a
//! push consumer run in the client's namespace while a fault is injected:
//!
//! - the master is SIGKILLed, then restarted (it must cut what the new master never had);
//! - the controller leader is SIGKILLed, then the master too (the new leader must elect);
//! - the master is cut off from the controllers and from B but not from clients (it must stop
//!   acknowledging), then the partition heals;
//! - B is throttled until the master drops it from the SyncStateSet, then freed to rejoin.
//!
//! Each prints: acknowledged messages lost, duplicates in the log (a fresh group reads every
//! queue from the start; every send attempt has its own body and the producer does not retry,
//! so a body twice is the log's doing), the longest gap between acknowledged sends after the
//! fault, messages the consumer got twice, and offset regressions (a queue's committed offset
//! below one read earlier, once the failover settled). Skipped, saying so, where network
//! namespaces cannot be created (not root).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_client::{
    concurrent_fn, Admin, ClientConfig, ConsumeFromWhere, ConsumeStatus, Message, MessageExt,
    Producer, PushConsumer, SendStatus,
};
use tidemark_tests::netns::Hosts;
use tidemark_tests::{against_apache, init_logging, tidemark_binary, unique, ServerProcess};

const CONTROLLER_PORT: u16 = 9878;
const NAMESRV_PORT: u16 = 9876;
const BROKER_PORT: u16 = 10911;
const BROKER_NAME: &str = "broker-hosts";
/// Bounded waits: setup, recovery, draining.
const WAIT: Duration = Duration::from_secs(60);

struct Cluster {
    controllers: Vec<ServerProcess>,
    _namesrv: ServerProcess,
    a: ServerProcess,
    b: ServerProcess,
    /// Dropped after every process in it stopped (fields drop in order): removed under running
    /// brokers, their last writes would leave it behind.
    _dir: tempfile::TempDir,
    /// Last: dropped after every process in it stopped.
    hosts: Hosts,
}

fn controller_list(hosts: &Hosts) -> String {
    (1..=3)
        .map(|id| format!("{}:{CONTROLLER_PORT}", hosts.ip(&format!("c{id}"))))
        .collect::<Vec<_>>()
        .join(";")
}

fn start_controller(hosts: &Hosts, dir: &Path, id: usize) -> ServerProcess {
    let peers = (1..=3)
        .map(|peer| format!("{peer}={}:{CONTROLLER_PORT}", hosts.ip(&format!("c{peer}"))))
        .collect::<Vec<_>>()
        .join(";");
    let host = format!("c{id}");
    let (program, args) = hosts.command(
        &host,
        tidemark_binary(),
        vec![
            "controller".into(),
            "--id".into(),
            id.to_string(),
            "--peers".into(),
            peers,
            "--listen".into(),
            format!("{}:{CONTROLLER_PORT}", hosts.ip(&host)),
            "--data-dir".into(),
            dir.join(&host).display().to_string(),
            "--broker-timeout-ms".into(),
            "3000".into(),
        ],
    );
    ServerProcess::start(
        &format!("hosts-controller-{id}"),
        program,
        args,
        "tidemark controller ready",
    )
}

fn start_broker(hosts: &Hosts, dir: &Path, host: &str) -> ServerProcess {
    let ip = hosts.ip(host);
    let config = dir.join(format!("{host}.toml"));
    std::fs::write(
        &config,
        format!(
            "broker_name = \"{BROKER_NAME}\"\nbroker_ip1 = \"{ip}\"\nlisten_ip = \"{ip}\"\n\
             listen_port = {BROKER_PORT}\ngrpc_listen_port = 0\n\
             namesrv_addr = \"{}:{NAMESRV_PORT}\"\nstore_path_root_dir = \"{}\"\n\
             enable_controller_mode = true\ncontroller_addr = \"{}\"\n\
             slave_sync_interval_ms = 1000\n",
            hosts.ip("ns"),
            dir.join(host).display(),
            controller_list(hosts)
        ),
    )
    .expect("write broker config");
    let (program, args) = hosts.command(
        host,
        tidemark_binary(),
        vec!["broker".into(), "-c".into(), config.display().to_string()],
    );
    ServerProcess::start(
        &format!("hosts-broker-{host}"),
        program,
        args,
        "tidemark broker ready",
    )
}

/// `tidemark admin controller-status` run from the client's host: (leader address, lines of
/// the replicas table).
fn controller_status(hosts: &Hosts) -> (Option<String>, Vec<String>) {
    let (program, args) = hosts.command(
        "client",
        tidemark_binary(),
        vec![
            "admin".into(),
            "controller-status".into(),
            "--controllers".into(),
            controller_list(hosts),
            "-b".into(),
            BROKER_NAME.into(),
        ],
    );
    let Ok(output) = std::process::Command::new(program).args(args).output() else {
        return (None, Vec::new());
    };
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    // The leaders table: a row per controller, ending `true` on the leader's own row.
    let leader = text
        .lines()
        .find(|line| line.split_whitespace().last() == Some("true"))
        .and_then(|line| line.split_whitespace().next().map(str::to_owned));
    let replicas = text
        .lines()
        .filter(|line| line.contains(BROKER_NAME))
        .map(str::to_owned)
        .collect();
    (leader, replicas)
}

/// The replica at `ip`'s role as the controllers list it ("master", "in sync", …).
fn role_of(replicas: &[String], ip: &str) -> Option<String> {
    replicas
        .iter()
        .find(|line| line.contains(&format!("{ip}:{BROKER_PORT}")))
        .map(|line| {
            if line.contains("not in sync") {
                "not in sync".to_owned()
            } else if line.contains("in sync") {
                "in sync".to_owned()
            } else if line.contains("master") {
                "master".to_owned()
            } else {
                line.clone()
            }
        })
}

fn wait_for(what: &str, hosts: &Hosts, mut condition: impl FnMut(&[String]) -> bool) -> Duration {
    let start = Instant::now();
    loop {
        let (_, replicas) = controller_status(hosts);
        if condition(&replicas) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < WAIT,
            "{what} not within {WAIT:?}; the controllers list:\n{}",
            replicas.join("\n")
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Waits until `master` is master and `slave` in its SyncStateSet.
fn wait_in_sync(hosts: &Hosts, master: &str, slave: &str) -> Duration {
    let (master_ip, slave_ip) = (hosts.ip(master), hosts.ip(slave));
    wait_for(
        &format!("{master} master with {slave} in sync"),
        hosts,
        |replicas| {
            role_of(replicas, &master_ip).as_deref() == Some("master")
                && role_of(replicas, &slave_ip).as_deref() == Some("in sync")
        },
    )
}

impl Cluster {
    /// `None` (after saying why) where namespaces cannot be made.
    fn start(test: &str) -> Option<Cluster> {
        let hosts = match Hosts::create(&["c1", "c2", "c3", "ns", "a", "b", "client"]) {
            Ok(hosts) => hosts,
            Err(reason) => {
                eprintln!("skipped {test}: cannot create network namespaces here ({reason})");
                return None;
            }
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let controllers = (1..=3)
            .map(|id| start_controller(&hosts, dir.path(), id))
            .collect();
        let (program, args) = hosts.command(
            "ns",
            tidemark_binary(),
            vec![
                "namesrv".into(),
                "--listen".into(),
                format!("{}:{NAMESRV_PORT}", hosts.ip("ns")),
            ],
        );
        let namesrv =
            ServerProcess::start("hosts-namesrv", program, args, "tidemark namesrv ready");
        let a = start_broker(&hosts, dir.path(), "a");
        let a_ip = hosts.ip("a");
        wait_for("A master", &hosts, |replicas| {
            role_of(replicas, &a_ip).as_deref() == Some("master")
        });
        let b = start_broker(&hosts, dir.path(), "b");
        wait_in_sync(&hosts, "a", "b");
        Some(Cluster {
            _dir: dir,
            controllers,
            _namesrv: namesrv,
            a,
            b,
            hosts,
        })
    }

    fn namesrv_addr(&self) -> String {
        format!("{}:{NAMESRV_PORT}", self.hosts.ip("ns"))
    }
}

/// What the client side saw.
#[derive(Debug, Default)]
struct Observed {
    /// Acknowledged bodies, with when.
    acked: Vec<(String, Instant)>,
    failed_sends: usize,
    /// Per queue, the highest committed offset read so far.
    committed_max: BTreeMap<String, i64>,
    /// Readings below an earlier one, as (queue, earlier, now, when).
    regressions: Vec<(String, i64, i64, Instant)>,
}

/// How often each send attempt was received.
type Counts = Arc<Mutex<HashMap<String, usize>>>;

/// A push consumer of `topic` from its first offset that counts what it receives.
async fn counting_consumer(
    group: &str,
    namesrv: &str,
    topic: &str,
    counts: Counts,
) -> PushConsumer {
    PushConsumer::builder(group)
        .client_config(client_config(namesrv))
        .subscribe(topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let counts = counts.clone();
            async move {
                let mut counts = counts.lock().expect("lock");
                for message in messages {
                    *counts.entry(attempt_name(&message.body)).or_default() += 1;
                }
                ConsumeStatus::Success
            }
        }))
        .await
        .expect("a consumer")
}

/// The send attempt a body came from (its text before the padding).
fn attempt_name(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.split('|').next().unwrap_or_default().to_owned()
}

/// The figures a scenario prints.
#[derive(Debug)]
struct Figures {
    acknowledged: usize,
    lost: usize,
    /// Which acknowledged sends the live consumer and the fresh reader of the log missed.
    missing: String,
    log_duplicates: usize,
    longest_gap_ms: u128,
    failed_sends: usize,
    consumer_duplicates: usize,
    regressions_after_settling: usize,
    stale_readings: usize,
}

fn client_config(namesrv: &str) -> ClientConfig {
    let mut config = ClientConfig::new(namesrv);
    // Routes polled every second (the Java default is 30 s): a producer otherwise keeps the
    // dead master's address that long.
    config.poll_name_server_interval = Duration::from_secs(1);
    config
}

/// The client side: produce, consume and read committed offsets until `stop`; then drain, read
/// the whole log with a fresh group, and work out the figures.
async fn traffic(
    body_size: usize,
    namesrv: String,
    topic: String,
    observed: Arc<Mutex<Observed>>,
    stop: Arc<AtomicBool>,
    fault_at: Arc<Mutex<Option<Instant>>>,
    settled_at: Arc<Mutex<Option<Instant>>>,
) -> Figures {
    let producer = Producer::builder(unique("HostsP"))
        .client_config(client_config(&namesrv))
        .retry_times(0)
        .send_timeout(Duration::from_secs(3))
        .start()
        .await
        .expect("producer");
    let group = unique("HostsG");
    let consumed: Counts = Arc::default();
    let consumer = counting_consumer(&group, &namesrv, &topic, consumed.clone()).await;
    let admin = Admin::connect(client_config(&namesrv))
        .await
        .expect("admin");
    let mut attempt = 0u64;
    let mut last_poll = Instant::now();
    while !stop.load(Ordering::Acquire) {
        let body = format!("m-{attempt}");
        attempt += 1;
        // The body is the attempt's name, padded to the scenario's size with letters that do
        // not compress (the client compresses bodies over 4 KiB).
        let mut payload = format!("{body}|").into_bytes();
        let mut seed = attempt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        while payload.len() < body_size {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            payload.push(b'a' + (seed % 26) as u8);
        }
        match producer.send(Message::new(topic.as_str(), payload)).await {
            Ok(result) if result.status == SendStatus::SendOk => observed
                .lock()
                .expect("lock")
                .acked
                .push((body, Instant::now())),
            _ => {
                observed.lock().expect("lock").failed_sends += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        if last_poll.elapsed() >= Duration::from_millis(500) {
            last_poll = Instant::now();
            if let Ok(stats) = admin.consume_stats(&group, Some(&topic)).await {
                let mut observed = observed.lock().expect("lock");
                for (queue, offsets) in stats.offset_table {
                    let key = format!("{}/{}", queue.broker_name, queue.queue_id);
                    let max = observed.committed_max.entry(key.clone()).or_insert(0);
                    let earlier = *max;
                    *max = earlier.max(offsets.consumer_offset);
                    if offsets.consumer_offset < earlier {
                        observed.regressions.push((
                            key,
                            earlier,
                            offsets.consumer_offset,
                            Instant::now(),
                        ));
                    }
                }
            }
        }
    }
    producer.shutdown().await;

    // Everything acknowledged reaches the steady consumer.
    let acked: BTreeSet<String> = observed
        .lock()
        .expect("lock")
        .acked
        .iter()
        .map(|(body, _)| body.clone())
        .collect();
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        let all_seen = {
            let seen = consumed.lock().expect("lock");
            acked.iter().all(|body| seen.contains_key(body))
        };
        if all_seen {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    consumer.shutdown().await;

    // A fresh group reads every queue from the start: what the log holds.
    let in_log: Counts = Arc::default();
    let reader = counting_consumer(&unique("HostsLog"), &namesrv, &topic, in_log.clone()).await;
    let deadline = Instant::now() + WAIT;
    let mut quiet_since = (Instant::now(), 0usize);
    while Instant::now() < deadline {
        let count = in_log.lock().expect("lock").len();
        let complete = acked
            .iter()
            .all(|body| in_log.lock().expect("lock").contains_key(body));
        if count != quiet_since.1 {
            quiet_since = (Instant::now(), count);
        } else if complete && quiet_since.0.elapsed() > Duration::from_secs(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    reader.shutdown().await;
    admin.shutdown().await;

    let observed = observed.lock().expect("lock");
    let in_log = in_log.lock().expect("lock");
    let consumed = consumed.lock().expect("lock");
    let fault = fault_at.lock().expect("lock").unwrap_or_else(Instant::now);
    let settled = settled_at
        .lock()
        .expect("lock")
        .unwrap_or_else(Instant::now);
    let mut longest_gap = Duration::ZERO;
    let mut previous = fault;
    for (_, at) in observed.acked.iter().filter(|(_, at)| *at >= fault) {
        longest_gap = longest_gap.max(at.saturating_duration_since(previous));
        previous = *at;
    }
    Figures {
        acknowledged: acked.len(),
        lost: acked
            .iter()
            .filter(|body| !consumed.contains_key(*body) || !in_log.contains_key(*body))
            .count(),
        missing: {
            let missed = |seen: &HashMap<String, usize>| {
                acked
                    .iter()
                    .filter(|body| !seen.contains_key(*body))
                    .cloned()
                    .collect::<Vec<_>>()
            };
            format!(
                "not consumed by the group: {:?}; not in the log read from offset 0: {:?}",
                missed(&consumed),
                missed(&in_log)
            )
        },
        log_duplicates: in_log.values().filter(|count| **count > 1).count(),
        longest_gap_ms: longest_gap.as_millis(),
        failed_sends: observed.failed_sends,
        consumer_duplicates: consumed.values().filter(|count| **count > 1).count(),
        regressions_after_settling: observed
            .regressions
            .iter()
            .filter(|(_, _, _, at)| *at > settled)
            .count(),
        stale_readings: observed
            .regressions
            .iter()
            .filter(|(_, _, _, at)| *at <= settled)
            .count(),
    }
}

/// Runs `fault` against a fresh cluster under steady traffic, then checks and prints the
/// figures. `fault` returns once the cluster settled again (the returning replica in sync).
fn scenario(
    name: &str,
    body_size: usize,
    max_gap: Duration,
    fault: impl FnOnce(&mut Cluster, &dyn Fn() -> usize),
) {
    // Each scenario runs seven processes on two cores: nothing else runs beside it.
    let _alone = crate::ALONE.blocking_lock();
    if against_apache() {
        eprintln!("skipped {name}: starts Tidemark controllers and brokers itself");
        return;
    }
    init_logging();
    let Some(mut cluster) = Cluster::start(name) else {
        return;
    };
    let observed: Arc<Mutex<Observed>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let fault_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let settled_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let client = {
        let (namesrv, topic) = (cluster.namesrv_addr(), unique("Hosts"));
        let (observed, stop) = (observed.clone(), stop.clone());
        let (fault_at, settled_at) = (fault_at.clone(), settled_at.clone());
        cluster.hosts.run_in("client", move || {
            traffic(
                body_size, namesrv, topic, observed, stop, fault_at, settled_at,
            )
        })
    };
    let acked = || observed.lock().expect("lock").acked.len();
    let start = Instant::now();
    while acked() < 100 {
        assert!(
            start.elapsed() < WAIT,
            "{name}: fewer than 100 sends acknowledged before the fault ({})",
            acked()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    *fault_at.lock().expect("lock") = Some(Instant::now());
    fault(&mut cluster, &acked);
    *settled_at.lock().expect("lock") = Some(Instant::now());
    // Some traffic on the settled cluster, then the drain.
    let before = acked();
    let start = Instant::now();
    while acked() < before + 50 {
        assert!(
            start.elapsed() < WAIT,
            "{name}: sends stopped after the cluster settled"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Release);
    let figures = client.join().expect("client thread");
    println!(
        "{name}: acknowledged {}, lost {}, duplicates in the log {}, writes resumed within {} ms \
         (longest gap between acknowledged sends after the fault; {} sends refused or timed out), \
         consumer duplicates {}, offset regressions {} (stale readings while failing over {})",
        figures.acknowledged,
        figures.lost,
        figures.log_duplicates,
        figures.longest_gap_ms,
        figures.failed_sends,
        figures.consumer_duplicates,
        figures.regressions_after_settling,
        figures.stale_readings
    );
    let tails = || format!("{}\n{}", cluster.a.tail_text(), cluster.b.tail_text());
    assert_eq!(
        figures.lost,
        0,
        "{name}: acknowledged messages lost ({})\n{}",
        figures.missing,
        tails()
    );
    assert_eq!(
        figures.log_duplicates,
        0,
        "{name}: messages twice in the log\n{}",
        tails()
    );
    assert_eq!(
        figures.regressions_after_settling, 0,
        "{name}: committed offsets went backwards"
    );
    assert!(
        figures.longest_gap_ms < max_gap.as_millis(),
        "{name}: writes stopped for {} ms (bound {max_gap:?})",
        figures.longest_gap_ms
    );
}

#[test]
fn master_sigkill_across_hosts() {
    // Issue 21's target: writes back within 10 s of a master SIGKILL.
    scenario(
        "master SIGKILL",
        64,
        Duration::from_secs(10),
        |cluster, _acked| {
            cluster.a.kill();
            let b_ip = cluster.hosts.ip("b");
            let elected = wait_for("B elected", &cluster.hosts, |replicas| {
                role_of(replicas, &b_ip).as_deref() == Some("master")
            });
            println!(
                "master SIGKILL: B elected {} ms after the kill",
                elected.as_millis()
            );
            cluster.a.restart();
            let back = wait_in_sync(&cluster.hosts, "b", "a");
            println!(
                "master SIGKILL: old master back in sync {} ms after its restart",
                back.as_millis()
            );
        },
    );
}

#[test]
fn controller_leader_sigkill_then_master_sigkill_across_hosts() {
    scenario(
        "controller leader SIGKILL",
        64,
        Duration::from_secs(10),
        |cluster, _acked| {
            let (leader, _) = controller_status(&cluster.hosts);
            let leader = leader.expect("the controllers name a leader");
            let index = (1..=3)
                .position(|id| {
                    leader.starts_with(&format!("{}:", cluster.hosts.ip(&format!("c{id}"))))
                })
                .expect("the leader is one of the three");
            cluster.controllers[index].kill();
            // A new leader takes over; the master keeps its role meanwhile.
            let start = Instant::now();
            let new_leader = loop {
                if let (Some(now), _) = controller_status(&cluster.hosts) {
                    if now != leader {
                        break now;
                    }
                }
                assert!(start.elapsed() < WAIT, "no new controller leader");
                std::thread::sleep(Duration::from_millis(300));
            };
            println!(
                "controller leader SIGKILL: {new_leader} leads {} ms after {leader} died",
                start.elapsed().as_millis()
            );
            // The new leader elects when the master dies.
            cluster.a.kill();
            let b_ip = cluster.hosts.ip("b");
            let elected = wait_for("B elected by the new leader", &cluster.hosts, |replicas| {
                role_of(replicas, &b_ip).as_deref() == Some("master")
            });
            println!(
                "controller leader SIGKILL: then the master SIGKILLed, B elected {} ms later",
                elected.as_millis()
            );
            cluster.controllers[index].restart();
            cluster.a.restart();
            wait_in_sync(&cluster.hosts, "b", "a");
        },
    );
}

#[test]
fn partition_isolating_the_master_across_hosts() {
    // Heartbeat timeout (3 s), election, then the producer's next route poll and slave timeout.
    scenario(
        "master partitioned",
        64,
        Duration::from_secs(15),
        |cluster, _acked| {
            for other in ["c1", "c2", "c3", "b"] {
                cluster.hosts.cut("a", other);
            }
            let b_ip = cluster.hosts.ip("b");
            let elected = wait_for("B elected", &cluster.hosts, |replicas| {
                role_of(replicas, &b_ip).as_deref() == Some("master")
            });
            println!(
                "master partitioned: B elected {} ms after the cut",
                elected.as_millis()
            );
            // Clients still reach A; it must not acknowledge what B never gets. Keep the partition
            // long enough for the producer to try both.
            std::thread::sleep(Duration::from_secs(5));
            for other in ["c1", "c2", "c3", "b"] {
                cluster.hosts.heal("a", other);
            }
            let back = wait_in_sync(&cluster.hosts, "b", "a");
            println!(
                "master partitioned: A back in sync as a slave {} ms after the partition healed",
                back.as_millis()
            );
        },
    );
}

#[test]
fn slow_replica_leaves_and_rejoins_the_sync_state_set_across_hosts() {
    // 16 KiB bodies through a 16 kbit/s link: even one send per slave timeout (3 s) outruns it.
    // Sends wait for B until the master drops it: 15 s after B last caught up, plus a round.
    // B last catches up some seconds into the throttle (the token bucket's burst and queue
    // still carry part of the traffic), and later on a loaded machine: B left 24.5 s after the
    // throttle with the machine to itself, 38.5 s beside CI's other lane (writes stopped 42 s).
    scenario(
        "slow replica",
        16 * 1024,
        Duration::from_secs(60),
        |cluster, _acked| {
            cluster.hosts.throttle("b", Some("16kbit"));
            let b_ip = cluster.hosts.ip("b");
            let dropped = wait_for(
                "B dropped from the SyncStateSet",
                &cluster.hosts,
                |replicas| role_of(replicas, &b_ip).as_deref() == Some("not in sync"),
            );
            println!(
                "slow replica: B out of the SyncStateSet {} ms after it was throttled",
                dropped.as_millis()
            );
            cluster.hosts.throttle("b", None);
            let back = wait_in_sync(&cluster.hosts, "a", "b");
            println!(
                "slow replica: B back in sync {} ms after the throttle was lifted",
                back.as_millis()
            );
        },
    );
}

/// Benchmark (issue 21): elect and resume, 20 times on one cluster — the master SIGKILLed under
/// the steady producer, the time until the next acknowledged send, the old master restarted and
/// back in sync, then the other one killed. Prints each run, the median and the maximum.
///
///     cargo test -p tidemark-tests --test alone -- --ignored --nocapture failover_hosts::elect_and_resume_twenty_times_across_hosts
#[test]
#[ignore = "about three minutes; run by hand for the figures"]
fn elect_and_resume_twenty_times_across_hosts() {
    scenario(
        "20 elections",
        64,
        Duration::from_secs(10),
        |cluster, acked| {
            let mut resumed = Vec::new();
            for run in 0..20 {
                let a_ip = cluster.hosts.ip("a");
                let (_, replicas) = controller_status(&cluster.hosts);
                let a_master = role_of(&replicas, &a_ip).as_deref() == Some("master");
                let before = acked();
                let killed = Instant::now();
                if a_master {
                    cluster.a.kill();
                } else {
                    cluster.b.kill();
                }
                while acked() <= before {
                    assert!(killed.elapsed() < WAIT, "run {run}: writes never resumed");
                    std::thread::sleep(Duration::from_millis(5));
                }
                let took = killed.elapsed();
                println!(
                    "20 elections: run {run}: writes resumed {} ms after the kill",
                    took.as_millis()
                );
                resumed.push(took);
                if a_master {
                    cluster.a.restart();
                    wait_in_sync(&cluster.hosts, "b", "a");
                } else {
                    cluster.b.restart();
                    wait_in_sync(&cluster.hosts, "a", "b");
                }
            }
            resumed.sort();
            println!(
                "20 elections: writes resumed after a master SIGKILL in median {} ms, max {} ms",
                resumed[resumed.len() / 2].as_millis(),
                resumed[resumed.len() - 1].as_millis()
            );
        },
    );
}
