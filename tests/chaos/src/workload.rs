//! The queue workload, on the client host: producers that send unique values (sync, async,
//! batch, in sequence per key to a fixed queue, and in transactions: `tx_workload`), consumer
//! groups that record every delivery (two concurrent groups, one of them with two members that
//! rebalance, and an orderly group; a POP group in `pop_workload`), an operator who rewinds
//! group one now and then, and a watcher that records each group's committed offsets as the
//! masters answer them. At the end it drains, reads every queue whole and returns.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tidemark_client::{
    concurrent_fn, orderly_fn, Admin, ClientConfig, ClientError, ConsumeFromWhere, ConsumeStatus,
    Message, MessageExt, OrderlyStatus, Producer, PushConsumer, SendResult, SendStatus,
};
use tidemark_protocol::body::MessageQueue;

use crate::checker::Expectations;
use crate::go_app::{GO_GROUP, GO_TOPIC, GRPC_GROUP, GRPC_TOPIC};
use crate::history::{ordered_value, Kind, Outcome, QueueRef, Recorder, SendMode};
use crate::pop_workload::{self, POP_GROUP};
use crate::tx_workload;

pub const QUEUE_TOPIC: &str = "chaos-queue";
pub const ORDERED_TOPIC: &str = "chaos-ordered";
/// Queues per topic on each broker set.
pub const QUEUES: u32 = 4;
const GROUP_ONE: &str = "chaos-g1";
/// Two members: queues move between them at every rebalance.
const GROUP_TWO: &str = "chaos-g2";
const GROUP_ORDERLY: &str = "chaos-orderly";
const KEYS: [&str; 4] = ["k0", "k1", "k2", "k3"];
const SEND_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the end waits for the routes to name every master.
const DRAIN_WAIT: Duration = Duration::from_secs(60);
/// The end waits for every group to catch up as long as deliveries still come: a group that
/// got nothing new for this long is stuck (and its values are flagged never delivered)…
const DRAIN_STALL: Duration = Duration::from_secs(30);
/// …and at most this long in all: a group far behind after a fault catches up slowly (a POP
/// consumer's receive from a broker with nothing waits out its long poll before it asks the
/// next one), and slow is not lost.
const DRAIN_MAX: Duration = Duration::from_secs(240);

/// What the checker expects of this workload (`pop`: whether the POP group ran).
pub fn expectations(pop: bool) -> Expectations {
    let mut expected = Expectations {
        subscriptions: vec![
            (GROUP_ONE.into(), QUEUE_TOPIC.into()),
            (GROUP_TWO.into(), QUEUE_TOPIC.into()),
            (GROUP_ORDERLY.into(), ORDERED_TOPIC.into()),
            (GO_GROUP.into(), GO_TOPIC.into()),
            (GRPC_GROUP.into(), GRPC_TOPIC.into()),
        ],
        orderly_groups: [GROUP_ORDERLY.to_owned()].into(),
        // The Rust client moves a send that waited 0.5 s off a master that does not answer.
        moved_after_ms: 500.0,
        clock_steps: Vec::new(),
    };
    if pop {
        expected
            .subscriptions
            .push((POP_GROUP.into(), QUEUE_TOPIC.into()));
    }
    expected
}

fn client_config(namesrv: &str) -> ClientConfig {
    let mut config = ClientConfig::new(namesrv);
    // Routes every second: a client otherwise keeps a dead master's address for 30 s.
    config.poll_name_server_interval = Duration::from_secs(1);
    config
}

fn queue_ref(queue: &MessageQueue) -> QueueRef {
    QueueRef {
        topic: queue.topic.clone(),
        broker: queue.broker_name.clone(),
        queue: queue.queue_id,
    }
}

fn outcome_of(result: &Result<SendResult, ClientError>) -> Outcome {
    match result {
        Ok(result) if result.status == SendStatus::SendOk => Outcome::Ok,
        // Stored on the master, not yet on its slave: may or may not survive.
        Ok(_) => Outcome::Unknown,
        Err(error) if never_left(error) => Outcome::Fail,
        Err(_) => Outcome::Unknown,
    }
}

/// Whether a failed send certainly stored nothing: it never left the client.
fn never_left(error: &ClientError) -> bool {
    match error {
        ClientError::SendFailed { last, .. } => never_left(last),
        ClientError::NoRoute { .. }
        | ClientError::BrokerNotFound { .. }
        | ClientError::InvalidArgument(_)
        | ClientError::State(_) => true,
        _ => false,
    }
}

/// Records a send of `values` made at `invoked`.
fn record_send(
    recorder: &Recorder,
    process: &str,
    invoked: f64,
    mode: SendMode,
    values: Vec<String>,
    result: &Result<SendResult, ClientError>,
) {
    let (queue, offset) = match result {
        Ok(sent) => (Some(queue_ref(&sent.queue)), Some(sent.queue_offset)),
        Err(_) => (None, None),
    };
    recorder.complete(
        process,
        invoked,
        outcome_of(result),
        Kind::Send {
            mode,
            values,
            queue,
            offset,
        },
    );
}

async fn producer(namesrv: &str, group: &str) -> Result<Producer, ClientError> {
    Producer::builder(group)
        .client_config(client_config(namesrv))
        // A retried send would store a value twice on purpose: the checker counts the log's.
        .retry_times(0)
        .send_timeout(SEND_TIMEOUT)
        .start()
        .await
}

/// Sends `s<n>` one at a time until `stop`.
async fn send_sync(producer: Producer, recorder: Recorder, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let value = format!("s{n}");
        n += 1;
        let invoked = recorder.now();
        let result = producer
            .send(Message::new(QUEUE_TOPIC, value.clone()))
            .await;
        record_send(
            &recorder,
            "producer-sync",
            invoked,
            SendMode::Sync,
            vec![value],
            &result,
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Keeps up to 8 sends of `a<n>` in flight until `stop`.
async fn send_async(producer: Producer, recorder: Recorder, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    let mut in_flight = tokio::task::JoinSet::new();
    while !stop.load(Ordering::Relaxed) {
        while in_flight.len() < 8 {
            let value = format!("a{n}");
            n += 1;
            let invoked = recorder.now();
            let handle = producer.send_async(Message::new(QUEUE_TOPIC, value.clone()));
            let recorder = recorder.clone();
            in_flight.spawn(async move {
                let result = match handle.await {
                    Ok(result) => result,
                    Err(join) => Err(ClientError::State(format!("send task: {join}"))),
                };
                record_send(
                    &recorder,
                    "producer-async",
                    invoked,
                    SendMode::Async,
                    vec![value],
                    &result,
                );
            });
        }
        in_flight.join_next().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    while in_flight.join_next().await.is_some() {}
}

/// Sends batches of three `b<n>-<i>` until `stop`.
async fn send_batches(producer: Producer, recorder: Recorder, stop: Arc<AtomicBool>) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let values: Vec<String> = (0..3).map(|i| format!("b{n}-{i}")).collect();
        n += 1;
        let messages = values
            .iter()
            .map(|value| Message::new(QUEUE_TOPIC, value.clone()))
            .collect();
        let invoked = recorder.now();
        let result = producer.send_batch(messages).await;
        record_send(
            &recorder,
            "producer-batch",
            invoked,
            SendMode::Batch,
            values,
            &result,
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Each key's values in sequence, every one to the key's own queue, until `stop`.
async fn send_ordered(
    producer: Producer,
    brokers: Vec<String>,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
) {
    let mut next: BTreeMap<&str, u64> = BTreeMap::new();
    let mut turn = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let key = KEYS[turn % KEYS.len()];
        turn += 1;
        let seq = next.entry(key).or_default();
        let value = ordered_value(key, *seq);
        *seq += 1;
        let index = KEYS.iter().position(|known| *known == key).unwrap_or(0);
        let queue = MessageQueue {
            topic: ORDERED_TOPIC.into(),
            broker_name: brokers[index % brokers.len()].clone(),
            queue_id: (index / brokers.len()) as i32,
        };
        let message = Message::new(ORDERED_TOPIC, value.clone()).with_keys([key]);
        let invoked = recorder.now();
        let result = producer.send_to_queue(message, queue).await;
        record_send(
            &recorder,
            "producer-ordered",
            invoked,
            SendMode::Ordered,
            vec![value],
            &result,
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn record_deliveries(recorder: &Recorder, group: &str, consumer: &str, messages: &[MessageExt]) {
    for message in messages {
        recorder.event(
            consumer,
            Kind::Deliver {
                group: group.to_owned(),
                consumer: consumer.to_owned(),
                value: String::from_utf8_lossy(&message.body).into_owned(),
                queue: queue_ref(&message.queue),
                offset: message.queue_offset,
            },
        );
    }
}

async fn concurrent_member(
    namesrv: &str,
    group: &'static str,
    member: &str,
    recorder: Recorder,
) -> Result<PushConsumer, ClientError> {
    let name = format!("{group}/{member}");
    let mut config = client_config(namesrv);
    config.instance_name = Some(member.to_owned());
    PushConsumer::builder(group)
        .client_config(config)
        .subscribe(QUEUE_TOPIC, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rebalance_interval(Duration::from_secs(1))
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            record_deliveries(&recorder, group, &name, &messages);
            async { ConsumeStatus::Success }
        }))
        .await
}

async fn orderly_member(namesrv: &str, recorder: Recorder) -> Result<PushConsumer, ClientError> {
    let name = format!("{GROUP_ORDERLY}/m0");
    PushConsumer::builder(GROUP_ORDERLY)
        .client_config(client_config(namesrv))
        .subscribe(ORDERED_TOPIC, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rebalance_interval(Duration::from_secs(1))
        .start_orderly(orderly_fn(move |messages: Vec<MessageExt>| {
            record_deliveries(&recorder, GROUP_ORDERLY, &name, &messages);
            async { OrderlyStatus::Success }
        }))
        .await
}

/// An operator's rewinds, every 8 s until `stop`: group one goes back to where it was 3 s
/// before (only backwards; the group's online members follow).
async fn rewind_now_and_then(namesrv: String, recorder: Recorder, stop: Arc<AtomicBool>) {
    let Ok(admin) = Admin::connect(client_config(&namesrv)).await else {
        return;
    };
    loop {
        for _ in 0..80 {
            if stop.load(Ordering::Relaxed) {
                admin.shutdown().await;
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let to = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as i64)
            - 3000;
        let invoked = recorder.now();
        let moved = tokio::time::timeout(
            SEND_TIMEOUT,
            admin.reset_offset_by_timestamp(QUEUE_TOPIC, GROUP_ONE, to, false),
        )
        .await;
        // Recorded whatever the answer: a master may have moved before the answer was lost.
        let outcome = match moved {
            Ok(Ok(_)) => Outcome::Ok,
            _ => Outcome::Unknown,
        };
        recorder.complete(
            "operator",
            invoked,
            outcome,
            Kind::ProgressMoved {
                group: GROUP_ONE.into(),
                topic: QUEUE_TOPIC.into(),
            },
        );
    }
}

/// The moves the brokers' progress history says they made for group one, each as an operation
/// at the moment it was applied: a reset whose answer was lost (a partition, a timeout) may
/// still have been applied, seconds after the operator gave up on it.
async fn record_applied_moves(admin: &Admin, recorder: &Recorder) -> Result<(), ClientError> {
    for broker in admin.progress_history(GROUP_ONE, None, false).await? {
        for entry in broker.entries {
            if !matches!(entry.kind.as_str(), "reset" | "skip" | "restore" | "clone") {
                continue;
            }
            let applied = recorder.ms_of_unix_us(entry.time_ms.saturating_mul(1000));
            for topic in entry
                .queues
                .iter()
                .map(|queue| queue.topic.clone())
                .collect::<std::collections::BTreeSet<_>>()
            {
                // Applied within a few milliseconds of the time it was recorded with.
                recorder.complete_at(
                    &format!("history/{}", broker.broker_name),
                    applied,
                    applied + 50.0,
                    Outcome::Ok,
                    Kind::ProgressMoved {
                        group: GROUP_ONE.into(),
                        topic,
                    },
                );
            }
        }
    }
    Ok(())
}

/// Reads every group's committed offsets every 300 ms until `stop`; records each that changed.
async fn watch_commits(namesrv: String, recorder: Recorder, stop: Arc<AtomicBool>) {
    let mut last: BTreeMap<(String, QueueRef), i64> = BTreeMap::new();
    let Ok(admin) = Admin::connect(client_config(&namesrv)).await else {
        return;
    };
    while !stop.load(Ordering::Relaxed) {
        read_commits(&admin, &recorder, &mut last).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    read_commits(&admin, &recorder, &mut last).await;
    admin.shutdown().await;
}

async fn read_commits(
    admin: &Admin,
    recorder: &Recorder,
    last: &mut BTreeMap<(String, QueueRef), i64>,
) {
    for (group, topic) in expectations(true).subscriptions {
        let invoked = recorder.now();
        let reading = tokio::time::timeout(SEND_TIMEOUT, admin.consume_stats(&group, Some(&topic)));
        let Ok(Ok(stats)) = reading.await else {
            continue;
        };
        for (queue, line) in stats.offset_table {
            let queue = queue_ref(&queue);
            if queue.topic != topic {
                continue;
            }
            let key = (group.clone(), queue.clone());
            if last.get(&key) == Some(&line.consumer_offset) {
                continue;
            }
            last.insert(key, line.consumer_offset);
            recorder.complete(
                "watcher",
                invoked,
                Outcome::Ok,
                Kind::Committed {
                    group: group.clone(),
                    queue,
                    offset: line.consumer_offset,
                },
            );
        }
    }
}

/// Waits (up to 60 s) until the route of `topic` names a master for every broker set: a name
/// server restarted by a fault knows a broker only from its next registration (every 30 s),
/// and a read of the route it answers meanwhile would skip that broker's queues.
async fn wait_for_masters(
    admin: &Admin,
    topic: &str,
    brokers: &[String],
) -> Result<(), ClientError> {
    let deadline = tokio::time::Instant::now() + DRAIN_WAIT;
    loop {
        let route = admin.topic_route(topic).await.ok().flatten();
        let missing: Vec<&String> = brokers
            .iter()
            .filter(|name| {
                !route.as_ref().is_some_and(|route| {
                    route.broker_datas.iter().any(|broker| {
                        &broker.broker_name == *name && broker.master_addr().is_some()
                    })
                })
            })
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
                reason: format!("no master of {missing:?} routed within 60 s"),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every queue of `topic` read whole from its master, one `LogRead` per queue.
async fn read_log(
    admin: &Admin,
    topic: &str,
    brokers: &[String],
    recorder: &Recorder,
) -> Result<(), ClientError> {
    wait_for_masters(admin, topic, brokers).await?;
    let invoked = recorder.now();
    let mut queues: BTreeMap<QueueRef, Vec<(i64, String)>> = BTreeMap::new();
    admin
        .scan_topic(topic, 0, usize::MAX, |message| {
            queues.entry(queue_ref(&message.queue)).or_default().push((
                message.queue_offset,
                String::from_utf8_lossy(&message.body).into_owned(),
            ));
        })
        .await?;
    for (queue, values) in queues {
        recorder.complete(
            "reader",
            invoked,
            Outcome::Ok,
            Kind::LogRead { queue, values },
        );
    }
    Ok(())
}

/// Whether every group has had every acknowledged value of its topic.
/// How many (group, value) deliveries are still missing.
fn undelivered(recorder: &Recorder, pop: bool) -> usize {
    crate::checker::check(&recorder.snapshot(), &expectations(pop))
        .anomalies
        .iter()
        .filter(|anomaly| matches!(anomaly, crate::checker::Anomaly::NeverDelivered { .. }))
        .count()
}

/// Waits until every group has every value, while deliveries still come
/// ([`DRAIN_STALL`], [`DRAIN_MAX`]).
async fn drain(recorder: &Recorder, pop: bool) {
    let start = tokio::time::Instant::now();
    let (mut fewest, mut progressed) = (usize::MAX, start);
    loop {
        let missing = undelivered(recorder, pop);
        let now = tokio::time::Instant::now();
        if missing < fewest {
            (fewest, progressed) = (missing, now);
        }
        if missing == 0 || now - progressed >= DRAIN_STALL || now - start >= DRAIN_MAX {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs the workload until `stop`, then drains and reads the log. `brokers`: the broker
/// sets' names (the ordered producer's fixed queues are spread over them).
pub async fn run(
    namesrv: String,
    brokers: Vec<String>,
    pop: bool,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
) -> Result<(), ClientError> {
    let members = [
        concurrent_member(&namesrv, GROUP_ONE, "m0", recorder.clone()).await?,
        concurrent_member(&namesrv, GROUP_TWO, "m0", recorder.clone()).await?,
        concurrent_member(&namesrv, GROUP_TWO, "m1", recorder.clone()).await?,
        orderly_member(&namesrv, recorder.clone()).await?,
    ];
    let pop_enabled = pop;
    let pop = match pop {
        true => Some(pop_workload::start(client_config(&namesrv), QUEUE_TOPIC).await?),
        false => None,
    };
    let producers = [
        producer(&namesrv, "chaos-p-sync").await?,
        producer(&namesrv, "chaos-p-async").await?,
        producer(&namesrv, "chaos-p-batch").await?,
        producer(&namesrv, "chaos-p-ordered").await?,
    ];
    let transactions = tx_workload::start(client_config(&namesrv)).await?;
    let sending = stop.clone();
    let mut senders = tokio::task::JoinSet::new();
    senders.spawn(tx_workload::send(
        transactions.clone(),
        QUEUE_TOPIC,
        recorder.clone(),
        sending.clone(),
    ));
    senders.spawn(send_sync(
        producers[0].clone(),
        recorder.clone(),
        sending.clone(),
    ));
    senders.spawn(send_async(
        producers[1].clone(),
        recorder.clone(),
        sending.clone(),
    ));
    senders.spawn(send_batches(
        producers[2].clone(),
        recorder.clone(),
        sending.clone(),
    ));
    senders.spawn(send_ordered(
        producers[3].clone(),
        brokers.clone(),
        recorder.clone(),
        sending.clone(),
    ));
    senders.spawn(rewind_now_and_then(
        namesrv.clone(),
        recorder.clone(),
        sending,
    ));
    let watching = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch_commits(
        namesrv.clone(),
        recorder.clone(),
        watching.clone(),
    ));
    let popping = pop.map(|pop| {
        tokio::spawn(pop_workload::consume(
            pop,
            recorder.clone(),
            watching.clone(),
        ))
    });
    while senders.join_next().await.is_some() {}
    drain(&recorder, pop_enabled).await;
    // Time for the last commits to be reported and read.
    tokio::time::sleep(Duration::from_secs(2)).await;
    watching.store(true, Ordering::Relaxed);
    let _ = watcher.await;
    if let Some(popping) = popping {
        let _ = popping.await;
    }
    for member in &members {
        member.shutdown().await;
    }
    for producer in &producers {
        producer.shutdown().await;
    }
    // Last: the drain above waited for the check-backs it answers.
    transactions.shutdown().await;
    let admin = Admin::connect(client_config(&namesrv)).await?;
    record_applied_moves(&admin, &recorder).await?;
    for topic in [QUEUE_TOPIC, ORDERED_TOPIC, GO_TOPIC, GRPC_TOPIC] {
        read_log(&admin, topic, &brokers, &recorder).await?;
    }
    admin.shutdown().await;
    Ok(())
}
