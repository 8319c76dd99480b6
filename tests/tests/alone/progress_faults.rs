//! Seeded random faults on a broker set in controller mode while two applications send and
//! consume steadily: Tidemark's Rust client, and Apache's Go client (rocketmq-client-go v2,
//! `compat/remoting-go/cmd/faultclient`), each with its own topic and group. Faults: SIGKILL of
//! the master or of a slave, SIGSTOP of the master (its controller heartbeats stop, so another
//! replica is elected), and with three controllers and three replicas also SIGKILL of the
//! controllers' Raft leader, and a paused master whose successor is SIGKILLed as soon as it is
//! elected. Each is undone after 3–6 s, and the next comes once every replica is in sync again
//! and the Rust client consumes every queue again (or its 5 s are up).
//!
//! At the end, for both applications: no acknowledged send lost; no body stored twice in the
//! log (each topic read whole); no committed offset ever read
//! lower than an earlier reading of the same queue (commits travel with the log, and a master
//! answers offsets only once its in-sync replicas have them); deliveries beyond the first
//! within what a consumer can have in flight at each fault. Throughout: no replica the
//! controllers list in sync lacks a record acknowledged before they were asked. With the Rust
//! client every queue is consumed again within 5 s of each election, the second of two in quick
//! succession included; not timed is the first of those two, whose window the second fault
//! falls in (the Go client's own timers decide for it; its times are printed). The seed is
//! printed;
//! `TIDEMARK_FAULT_SEED=N` replays a run's choice of faults and pauses.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_client::{
    concurrent_fn, ClientConfig, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer,
    PushConsumer, SendStatus,
};
use tidemark_tests::go_fault_client::{commit_log_offset, GoFaultClient};
use tidemark_tests::replica_set::ReplicaSet;
use tidemark_tests::{init_logging, tidemark_binary, unique, wait_until, wait_until_async};

use crate::fault_watch::{
    routed_master, stored_bodies, view, watch_in_sync, watch_offsets, Acknowledged,
};

/// Messages a consumer can hold between pulling and committing them at a fault: a pull batch
/// (32) for each of the topic's queues.
const IN_FLIGHT_PER_FAULT: usize = 4 * 32;
/// How soon after an election the Rust client consumes every queue again.
const RUST_CLIENT_BACK_WITHIN: Duration = Duration::from_secs(5);

/// xorshift64*: a few random choices, reproducible from the seed.
struct Choices(u64);

impl Choices {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    KillMaster,
    KillSlave,
    PauseMaster,
    KillLeaderController,
    /// The master paused, and the replica elected in its place killed at once.
    PauseMasterKillSuccessor,
}

/// A new master, and when the controllers named it (`measured`: whether how soon clients came
/// back is held to the bound — not when a second fault falls inside its window).
struct Election {
    fault: Fault,
    faulted: Instant,
    elected: Option<Instant>,
    measured: bool,
}

/// What the Rust application saw.
#[derive(Default)]
struct RustRecord {
    acked: Vec<String>,
    /// When each of those was acknowledged, for the longest gap between two.
    acked_at: Vec<Instant>,
    deliveries: BTreeMap<String, usize>,
    delivered_at: Vec<(i32, Instant)>,
}

fn seed() -> u64 {
    std::env::var("TIDEMARK_FAULT_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |since| since.as_nanos() as u64)
                | 1
        })
}

/// Waits up to `within` for the controllers to name a master other than `old`.
async fn new_master(controllers: &str, old: &str, within: Duration) -> Option<Instant> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if view(controllers)
            .await
            .master()
            .is_some_and(|master| master != old)
        {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Every replica in sync, a controller leading, and clients routed to the controllers' master.
async fn settled(set: &ReplicaSet) -> bool {
    let controllers = set.controllers_arg();
    let slaves = set.replicas.len() - 1;
    wait_until_async(Duration::from_secs(90), || async {
        let listed = view(&controllers).await;
        let Some(master) = listed.master() else {
            return false;
        };
        listed.leader.is_some()
            && listed.slaves_in_sync() == slaves
            && routed_master(&set.namesrv).await.as_deref() == Some(master)
    })
    .await
}

/// Applies one fault and undoes it; returns the elections it caused.
async fn apply(
    set: &mut ReplicaSet,
    fault: Fault,
    hold: Duration,
    choices: &mut Choices,
) -> Vec<Election> {
    let controllers = set.controllers_arg();
    let listed = view(&controllers).await;
    let master_addr = listed
        .master()
        .expect("the controllers name a master")
        .to_owned();
    let master = set
        .replica_at(&master_addr)
        .expect("a replica of the set is master");
    let faulted = Instant::now();
    let mut elections = Vec::new();
    // A paused master is held 3 s longer: its controller heartbeats must lapse first.
    let paused_hold = hold + Duration::from_secs(3);
    match fault {
        Fault::KillMaster => {
            set.replicas[master].kill();
            let elected = new_master(&controllers, &master_addr, hold).await;
            tokio::time::sleep(hold.saturating_sub(faulted.elapsed())).await;
            set.replicas[master].restart();
            elections.push(Election {
                fault,
                faulted,
                elected,
                measured: true,
            });
        }
        Fault::KillSlave => {
            let slaves: Vec<usize> = (0..set.replicas.len())
                .filter(|index| *index != master)
                .collect();
            let slave = slaves[choices.below(slaves.len() as u64) as usize];
            set.replicas[slave].kill();
            tokio::time::sleep(hold).await;
            set.replicas[slave].restart();
        }
        Fault::PauseMaster => {
            set.replicas[master].signal("STOP");
            let elected = new_master(&controllers, &master_addr, paused_hold).await;
            tokio::time::sleep(paused_hold.saturating_sub(faulted.elapsed())).await;
            set.replicas[master].signal("CONT");
            elections.push(Election {
                fault,
                faulted,
                elected,
                measured: true,
            });
        }
        Fault::KillLeaderController => {
            let leader = listed
                .leader
                .as_deref()
                .and_then(|leader| set.controller_addrs.iter().position(|addr| addr == leader))
                .expect("a controller leads");
            set.controllers[leader].kill();
            tokio::time::sleep(hold).await;
            set.controllers[leader].restart();
        }
        Fault::PauseMasterKillSuccessor => {
            set.replicas[master].signal("STOP");
            let elected = new_master(&controllers, &master_addr, paused_hold).await;
            // Not timed: the second fault falls inside this election's window by design.
            elections.push(Election {
                fault,
                faulted,
                elected,
                measured: false,
            });
            let successor = match elected {
                Some(_) => view(&controllers)
                    .await
                    .master()
                    .and_then(|addr| set.replica_at(addr)),
                None => None,
            };
            if let Some(successor) = successor {
                // Once a third replica is back in the successor's SyncStateSet (the election
                // left the successor alone in it), it is the one to take over: an election
                // in quick succession while the first master is still paused.
                wait_until_async(hold, || async {
                    view(&controllers).await.slaves_in_sync() > 0
                })
                .await;
                let killed = Instant::now();
                let successor_addr = set.replica_addrs[successor].clone();
                set.replicas[successor].kill();
                let elected = new_master(&controllers, &successor_addr, hold).await;
                elections.push(Election {
                    fault,
                    faulted: killed,
                    elected,
                    measured: true,
                });
                set.replicas[successor].restart();
            }
            set.replicas[master].signal("CONT");
        }
    }
    elections
}

/// How long after `elected` every queue was delivered again (`None`: some never was).
fn back_after(
    elected: Instant,
    delivered_at: &[(i32, Instant)],
    queues: usize,
) -> Option<Duration> {
    let mut first_after: BTreeMap<i32, Instant> = BTreeMap::new();
    for (queue, at) in delivered_at {
        if *at > elected {
            first_after.entry(*queue).or_insert(*at);
        }
    }
    (first_after.len() == queues)
        .then(|| {
            first_after
                .values()
                .max()
                .map(|at| at.duration_since(elected))
        })
        .flatten()
}

/// Creates `topic` (4 queues) on every replica, so any of them serves it as master at once.
fn create_topic(set: &ReplicaSet, topic: &str) {
    for addr in &set.replica_addrs {
        let output = std::process::Command::new(tidemark_binary())
            .args([
                "admin",
                "topic-create",
                "-n",
                &set.namesrv,
                "-b",
                addr,
                "-t",
                topic,
            ])
            .args(["-r", "4", "-w", "4"])
            .output()
            .expect("run tidemark admin");
        assert!(
            output.status.success(),
            "topic-create on {addr}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

async fn start_rust_application(
    namesrv: &str,
    topic: &str,
    group: &str,
    record: Arc<Mutex<RustRecord>>,
    acknowledged: Arc<Acknowledged>,
    stop: Arc<AtomicBool>,
) -> (Producer, PushConsumer, tokio::task::JoinHandle<()>) {
    let mut config = ClientConfig::new(namesrv);
    config.poll_name_server_interval = Duration::from_secs(1);
    let producer = Producer::builder(unique("FaultsP"))
        .client_config(config)
        .start()
        .await
        .expect("producer");
    let sending = {
        let (producer, topic, record) = (producer.clone(), topic.to_owned(), record.clone());
        tokio::spawn(async move {
            let mut index = 0;
            while !stop.load(Ordering::Relaxed) {
                let body = format!("m-{index}");
                index += 1;
                match producer
                    .send(Message::new(topic.as_str(), body.clone()))
                    .await
                {
                    Ok(result) if result.status == SendStatus::SendOk => {
                        if let Some(offset) = commit_log_offset(&result.offset_msg_id) {
                            acknowledged.rust_acked(offset);
                        }
                        let mut record = record.lock().expect("lock");
                        record.acked.push(body);
                        record.acked_at.push(Instant::now());
                    }
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    // The consumer keeps the client's default route polling (30 s): how soon it consumes again
    // after a failover is the client's own doing.
    let consumer = PushConsumer::builder(group)
        .namesrv_addr(namesrv)
        .subscribe(topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rebalance_interval(Duration::from_secs(1))
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let record = record.clone();
            async move {
                let now = Instant::now();
                let mut record = record.lock().expect("lock");
                for message in messages {
                    record.delivered_at.push((message.queue.queue_id, now));
                    *record
                        .deliveries
                        .entry(String::from_utf8_lossy(&message.body).into_owned())
                        .or_default() += 1;
                }
                ConsumeStatus::Success
            }
        }))
        .await
        .expect("consumer");
    (producer, consumer, sending)
}

/// Acknowledged and lost, delivered again.
fn tally(acked: &[String], deliveries: &BTreeMap<String, usize>) -> (usize, usize) {
    let lost = acked
        .iter()
        .filter(|body| !deliveries.contains_key(*body))
        .count();
    let again = deliveries.values().map(|count| count - 1).sum();
    (lost, again)
}

/// How many faults a run applies: `default`, or `TIDEMARK_FAULT_ROUNDS` for a longer run by
/// hand (`TIDEMARK_FAULT_ROUNDS=30 cargo test -p tidemark-tests --test alone -- progress_faults
/// --nocapture`).
fn rounds(default: usize) -> usize {
    std::env::var("TIDEMARK_FAULT_ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(default)
}

/// The longest time between two consecutive acknowledgements.
fn longest_gap(acked_at: &[Instant]) -> Duration {
    acked_at
        .windows(2)
        .map(|pair| pair[1].duration_since(pair[0]))
        .max()
        .unwrap_or_default()
}

async fn fault_run(replicas: usize, controllers: usize, rounds: usize, faults: &[Fault]) {
    init_logging();
    let seed = seed();
    println!("fault run seed {seed} (TIDEMARK_FAULT_SEED={seed} replays its choices)");
    let mut choices = Choices(seed);
    let mut set = ReplicaSet::start(replicas, controllers).await;
    let namesrv = set.namesrv.clone();
    let (topic, group) = (unique("Faults"), unique("FaultsG"));
    let (go_topic, go_group) = (unique("GoFaults"), unique("GoFaultsG"));
    create_topic(&set, &topic);
    create_topic(&set, &go_topic);

    let stop = Arc::new(AtomicBool::new(false));
    let stop_sending = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Acknowledged::default());
    let record: Arc<Mutex<RustRecord>> = Arc::default();
    let (producer, consumer, sending) = start_rust_application(
        &namesrv,
        &topic,
        &group,
        record.clone(),
        acknowledged.clone(),
        stop_sending.clone(),
    )
    .await;
    let go = {
        let (namesrv, go_topic, go_group) = (namesrv.clone(), go_topic.clone(), go_group.clone());
        tokio::task::spawn_blocking(move || GoFaultClient::start(&namesrv, &go_topic, &go_group))
            .await
            .expect("Go client start")
    };
    let go = Arc::new(Mutex::new(go));
    acknowledged.follow_go(go.clone());
    let offsets = tokio::spawn(watch_offsets(
        namesrv.clone(),
        vec![
            (group.clone(), topic.clone()),
            (go_group.clone(), go_topic.clone()),
        ],
        stop.clone(),
    ));
    let in_sync = tokio::spawn(watch_in_sync(
        namesrv.clone(),
        set.controllers_arg(),
        acknowledged.clone(),
        stop.clone(),
    ));

    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut done = Vec::new();
    let mut elections = Vec::new();
    for _ in 0..rounds {
        let fault = faults[choices.below(faults.len() as u64) as usize];
        let hold = Duration::from_millis(3_000 + choices.below(3_000));
        let started = Instant::now();
        let caused = apply(&mut set, fault, hold, &mut choices).await;
        assert!(
            settled(&set).await,
            "after {fault:?} the set never had every replica in sync again: {:?}",
            set.view()
        );
        // A fault inside the last election's window would be timed with it: the next one waits
        // until the Rust client is back, or its time is up (the assertion below tells which).
        let last_measured = caused
            .iter()
            .filter(|election| election.measured)
            .filter_map(|election| election.elected)
            .max();
        if let Some(elected) = last_measured {
            let left =
                (elected + RUST_CLIENT_BACK_WITHIN).saturating_duration_since(Instant::now());
            wait_until(left, || {
                back_after(elected, &record.lock().expect("lock").delivered_at, 4).is_some()
            })
            .await;
        }
        elections.extend(caused);
        done.push(format!(
            "{fault:?} {} ms (settled after {} ms)",
            hold.as_millis(),
            started.elapsed().as_millis()
        ));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_sending.store(true, Ordering::Relaxed);
    sending.await.expect("producer task");
    producer.shutdown().await;
    {
        let go = go.clone();
        tokio::task::spawn_blocking(move || go.lock().expect("lock").stop_sending())
            .await
            .expect("Go stop");
    }
    let go_acked_at = go.lock().expect("lock").events().acked;
    let go_acked: Vec<String> = go_acked_at.keys().cloned().collect();
    let rust_acked = record.lock().expect("lock").acked.clone();
    let started = Instant::now();
    let all = wait_until(Duration::from_secs(90), || {
        let go_events = go.lock().expect("lock").events();
        let rust = record.lock().expect("lock");
        rust_acked
            .iter()
            .all(|body| rust.deliveries.contains_key(body))
            && go_acked
                .iter()
                .all(|body| go_events.deliveries.contains_key(body))
    })
    .await;
    let all_consumed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (readings, regressions) = offsets.await.expect("offset watcher");
    let (replica_readings, lacking) = in_sync.await.expect("in-sync watcher");
    consumer.shutdown().await;
    let go_events = go.lock().expect("lock").events();
    let go_stderr = go.lock().expect("lock").stderr();
    if let Ok(go) = Arc::try_unwrap(go) {
        let go = go.into_inner().expect("lock");
        tokio::task::spawn_blocking(move || go.shutdown())
            .await
            .expect("Go shutdown");
    }
    let rust = std::mem::take(&mut *record.lock().expect("lock"));

    // Each attempt has its own body and neither producer retries: a body twice in the log
    // is a record stored twice.
    let rust_stored = stored_bodies(&namesrv, &topic).await;
    let go_stored = stored_bodies(&namesrv, &go_topic).await;
    let twice: Vec<&String> = rust_stored
        .iter()
        .chain(&go_stored)
        .filter(|(_, copies)| **copies > 1)
        .map(|(body, _)| body)
        .collect();
    // A lost record is told by where it was acknowledged, whether a consumer had it and
    // which faults came before, so a run that fails can be read without a replay.
    let mut missing: Vec<String> = rust_acked
        .iter()
        .filter(|body| !rust_stored.contains_key(*body))
        .map(|body| format!("{body} (consumed: {})", rust.deliveries.contains_key(body)))
        .collect();
    missing.extend(
        go_acked_at
            .iter()
            .filter(|(body, _)| !go_stored.contains_key(*body))
            .map(|(body, offset)| {
                format!(
                    "{body} at commit-log offset {offset} (consumed: {})",
                    go_events.deliveries.contains_key(body)
                )
            }),
    );
    assert!(
        missing.is_empty(),
        "acknowledged but not in the log read whole: {missing:?}; every body consumed: {all}; \
         faults: {done:?} (seed {seed})"
    );
    let (rust_lost, rust_again) = tally(&rust_acked, &rust.deliveries);
    let (go_lost, go_again) = tally(&go_acked, &go_events.deliveries);
    let mut slow = Vec::new();
    for election in &elections {
        let Some(elected) = election.elected else {
            println!(
                "fault run seed {seed}: {:?}: no new master within the fault",
                election.fault
            );
            continue;
        };
        let rust_back = back_after(elected, &rust.delivered_at, 4);
        let go_back = back_after(elected, &go_events.delivered_at, 4);
        let shown = |back: Option<Duration>| {
            back.map_or("never".to_owned(), |back| {
                format!("{} ms", back.as_millis())
            })
        };
        // Whether a slow return is the producer's or the consumer's: nothing can be consumed
        // again before it is sent again.
        let rust_sent_again = rust
            .acked_at
            .iter()
            .find(|at| **at > elected)
            .map(|at| at.duration_since(elected));
        println!(
            "fault run seed {seed}: {:?}: new master elected {} ms after the fault; every queue \
             consumed again {} (Rust client, first send acknowledged {}), {} (Go client) after \
             the election{}",
            election.fault,
            elected.duration_since(election.faulted).as_millis(),
            shown(rust_back),
            shown(rust_sent_again),
            shown(go_back),
            if election.measured {
                ""
            } else {
                " (not asserted)"
            }
        );
        if election.measured && rust_back.is_none_or(|back| back > RUST_CLIENT_BACK_WITHIN) {
            slow.push((election.fault, rust_back));
        }
    }
    println!(
        "fault run seed {seed}: {} replicas, {} controllers: {}; Rust client {} acknowledged, \
         {rust_lost} lost, {rust_again} delivered again; Go client {} acknowledged, {go_lost} \
         lost, {go_again} delivered again; {} of {readings} offset readings went back; {} of \
         {replica_readings} in-sync replica readings lacked an acknowledged record; {} bodies \
         stored twice; longest time without a Rust send acknowledged {} ms; all consumed {} ms \
         after sending stopped",
        replicas,
        controllers,
        done.join(", "),
        rust_acked.len(),
        go_acked.len(),
        regressions.len(),
        lacking.len(),
        twice.len(),
        longest_gap(&rust.acked_at).as_millis(),
        all_consumed.as_millis()
    );
    assert!(
        all && rust_lost == 0 && go_lost == 0,
        "acknowledged messages never consumed: {rust_lost} (Rust), {go_lost} (Go) (seed {seed}); \
         Go client's failed sends:\n{go_stderr}"
    );
    assert!(
        twice.is_empty(),
        "stored more than once: {twice:?} (seed {seed})"
    );
    let regressions: Vec<String> = regressions
        .iter()
        .map(|went| {
            format!(
                "{} queue {}: {} then {}",
                went.group, went.queue, went.before, went.after
            )
        })
        .collect();
    assert!(
        regressions.is_empty(),
        "committed offsets read lower than before: {regressions:?} (seed {seed})"
    );
    let lacking: Vec<String> = lacking
        .iter()
        .map(|replica| {
            format!(
                "{}'s log ended at {} with a record acknowledged at {}",
                replica.addr, replica.log_end, replica.acknowledged_at
            )
        })
        .collect();
    assert!(
        lacking.is_empty(),
        "replicas listed in sync without an acknowledged record: {lacking:?} (seed {seed})"
    );
    let bound = rounds * IN_FLIGHT_PER_FAULT;
    assert!(
        rust_again <= bound && go_again <= bound,
        "deliveries beyond the first: {rust_again} (Rust), {go_again} (Go), more than {bound} in \
         flight over {rounds} faults (seed {seed})"
    );
    assert!(
        slow.is_empty(),
        "the Rust client took longer than {RUST_CLIENT_BACK_WITHIN:?} to consume every queue \
         after an election: {slow:?} (seed {seed})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_faults_on_two_replicas_lose_nothing_and_move_no_offset_back() {
    let _alone = crate::ALONE.lock().await;
    fault_run(
        2,
        1,
        rounds(4),
        &[Fault::KillMaster, Fault::KillSlave, Fault::PauseMaster],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_faults_on_three_replicas_and_controllers_lose_nothing_and_move_no_offset_back() {
    let _alone = crate::ALONE.lock().await;
    fault_run(
        3,
        3,
        rounds(6),
        &[
            Fault::KillMaster,
            Fault::KillSlave,
            Fault::PauseMaster,
            Fault::KillLeaderController,
            Fault::PauseMasterKillSuccessor,
        ],
    )
    .await;
}
