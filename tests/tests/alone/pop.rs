//! POP consumption (RocketMQ 5) across processes, with counts: the broker keeps each popped
//! message's state exactly, so
//! - a consumer SIGKILLed with 100 messages in flight: exactly those 100 come back, once their
//!   invisibility ends, and none of the acknowledged ones;
//! - the broker SIGKILLed 10 times while a consumer pops and acknowledges at random: no
//!   acknowledged message is handed out again, none is lost;
//! - a slow consumer (one at a time, 100 ms each, batches of 32 — apache/rocketmq #3787's shape)
//!   sees no spurious redelivery;
//! - a message whose invisibility ends comes back within 100 ms of it (p99).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_client::{
    Admin, ClientConfig, ConsumeFromWhere, Message, Producer, ReceivedMessage, SimpleConsumer,
};
use tidemark_protocol::json::{self, Value};
use tidemark_tests::{
    init_logging, tidemark_binary, unique, wait_for_route, wait_until, DevServer,
};

async fn send_all(server: &DevServer, topic: &str, count: usize) {
    let producer = Producer::builder(unique("producer"))
        .namesrv_addr(server.namesrv_addr())
        .start()
        .await
        .expect("producer");
    for chunk in 0..count.div_ceil(50) {
        let batch: Vec<Message> = (chunk * 50..((chunk + 1) * 50).min(count))
            .map(|i| Message::new(topic, format!("m-{i}")))
            .collect();
        producer.send_batch(batch).await.expect("send");
    }
    producer.shutdown().await;
    // The first send created the topic; the broker registers it with the name server right
    // after, not before answering, and a POP consumer's start needs the route.
    assert!(
        wait_for_route(&server.namesrv_addr(), topic).await,
        "{topic} never reached the name server"
    );
}

async fn consumer(
    server: &DevServer,
    topic: &str,
    group: &str,
    invisible: Duration,
) -> SimpleConsumer {
    SimpleConsumer::builder(group)
        .client_config(ClientConfig::new(server.namesrv_addr()))
        .subscribe(topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .invisible_duration(invisible)
        .await_duration(Duration::from_secs(1))
        .start()
        .await
        .expect("simple consumer")
}

fn body(message: &ReceivedMessage) -> String {
    String::from_utf8_lossy(&message.message.body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_consumers_unacknowledged_messages_and_only_those_come_back() {
    let _alone = crate::ALONE.lock().await;
    init_logging();
    let server = DevServer::start("pop-consumer-kill", &[]);
    let topic = unique("PopKill");
    let group = unique("pop_kill");
    send_all(&server, &topic, 500).await;
    let mut child = Command::new(tidemark_binary())
        .args([
            "admin",
            "pop-message",
            "-n",
            &server.namesrv_addr(),
            "-t",
            &topic,
            "-g",
            &group,
        ])
        .args([
            "--invisible-ms",
            "3000",
            "--ack-limit",
            "400",
            "--timeout-secs",
            "120",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tidemark admin pop-message");
    let printed: Arc<Mutex<Vec<String>>> = Arc::default();
    let reader = {
        let printed = printed.clone();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let Ok(Value::Object(object)) = json::parse(line.as_bytes()) else {
                    continue;
                };
                if let Some(Value::String(body)) = object.get("body") {
                    printed.lock().expect("lock").push(body.clone());
                }
            }
        })
    };
    assert!(
        wait_until(Duration::from_secs(60), || printed
            .lock()
            .expect("lock")
            .len()
            >= 500)
        .await,
        "the first consumer printed {} of 500",
        printed.lock().expect("lock").len()
    );
    child.kill().expect("SIGKILL the consumer");
    let killed_at = tidemark_remoting::now_ms();
    let _ = child.wait();
    let _ = reader.join();
    let printed = printed.lock().expect("lock").clone();
    let acked: BTreeSet<String> = printed[..400].iter().cloned().collect();
    let held: BTreeSet<String> = printed[400..].iter().cloned().collect();
    assert_eq!((acked.len(), held.len()), (400, 100), "each printed once");

    let second = consumer(&server, &topic, &group, Duration::from_secs(30)).await;
    let mut back: BTreeMap<String, ReceivedMessage> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while back.len() < 100 && Instant::now() < deadline {
        for message in second.receive(32).await.expect("receive") {
            let arrived = tidemark_remoting::now_ms();
            let first_pop: i64 = message
                .message
                .property("1ST_POP_TIME")
                .and_then(|value| value.parse().ok())
                .expect("a retry copy carries its first pop time");
            assert!(
                arrived >= first_pop + 3_000,
                "{} came back {} ms before its invisibility ended",
                body(&message),
                first_pop + 3_000 - arrived
            );
            assert!(
                back.insert(body(&message), message).is_none(),
                "came back twice"
            );
        }
    }
    // Nothing else comes: wait past another invisibility period.
    let late = second.receive(32).await.expect("receive");
    let got: BTreeSet<String> = back.keys().cloned().collect();
    assert_eq!(got, held, "exactly the 100 in flight at the kill came back");
    assert!(
        late.is_empty(),
        "more came back: {:?}",
        late.iter().map(body).collect::<Vec<_>>()
    );
    let counts: Vec<i32> = back
        .values()
        .map(|message| message.message.reconsume_times)
        .collect();
    // At least 1: a copy the killed consumer had popped again (its first invisibility ended
    // before the kill) but not printed was in flight too, and comes back counted twice.
    assert!(
        counts.iter().all(|count| *count >= 1),
        "reconsume counts {counts:?}"
    );
    assert!(got.is_disjoint(&acked));
    println!(
        "pop consumer kill: printed=500 acked=400 inFlight=100 cameBack={} ackedRedelivered=0 firstBackAfterKillMs={}",
        back.len(),
        back.values().map(|m| m.receipt.pop_time).min().unwrap_or(0) - killed_at
    );
    for message in back.values() {
        second.ack(message).await.expect("ack");
    }
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_kills_during_pop_lose_nothing_and_redeliver_nothing_acknowledged() {
    let _alone = crate::ALONE.lock().await;
    init_logging();
    const MESSAGES: usize = 3_000;
    let mut server = DevServer::start("pop-broker-kill", &[]);
    let topic = unique("PopCrash");
    let group = unique("pop_crash");
    send_all(&server, &topic, MESSAGES).await;
    let consumer = Arc::new(consumer(&server, &topic, &group, Duration::from_secs(2)).await);
    // What the broker confirmed acknowledged, and every delivery after that confirmation.
    let acked: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    // Acks whose answer never came (the broker was killed with the ack on the wire or in its
    // journal): the broker may or may not have applied them. Which it was is decided below by
    // the broker's own view: an ack it did not apply leaves the message in flight, so it comes
    // back and is acknowledged again.
    let unknown: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let deliveries = Arc::new(Mutex::new(0usize));
    let stop = tokio_util_stop();
    let worker = {
        let (consumer, acked, unknown, violations, deliveries, stop) = (
            consumer.clone(),
            acked.clone(),
            unknown.clone(),
            violations.clone(),
            deliveries.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let mut coin = 0x2545_f491_4f6c_dd1du64;
            while !*stop.lock().expect("lock") {
                let batch = match consumer.receive(32).await {
                    Ok(batch) => batch,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                for message in batch {
                    *deliveries.lock().expect("lock") += 1;
                    let name = body(&message);
                    if acked.lock().expect("lock").contains(&name) {
                        violations.lock().expect("lock").push(name.clone());
                    }
                    coin ^= coin << 13;
                    coin ^= coin >> 7;
                    coin ^= coin << 17;
                    if coin % 10 < 7 {
                        if consumer.ack(&message).await.is_ok() {
                            acked.lock().expect("lock").insert(name);
                        } else {
                            unknown.lock().expect("lock").insert(name);
                        }
                    }
                }
            }
        })
    };
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        server.kill();
        server.restart();
    }
    let settled = |acked: &BTreeSet<String>, unknown: &BTreeSet<String>| {
        acked.len() + unknown.difference(acked).count() >= MESSAGES
    };
    let all_answered = wait_until(Duration::from_secs(90), || {
        settled(&acked.lock().expect("lock"), &unknown.lock().expect("lock"))
    })
    .await;
    // The broker's view: nothing in flight and every queue's POP cursor at its end means every
    // message was acknowledged there — including those whose ack answer was lost.
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    let mut in_flight = i64::MAX;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        // Every topic of the group: redelivered copies live in its POP retry topic.
        if let Ok(view) = admin.consumer_progress(&group, None).await {
            let queues: Vec<_> = view.values().collect();
            let done = queues.iter().any(|queue| queue.topic == topic)
                && queues.iter().all(|queue| {
                    queue.pop_next_offset.unwrap_or(queue.consumer_offset) >= queue.broker_offset
                });
            in_flight = queues
                .iter()
                .map(|queue| queue.pop_in_flight.unwrap_or(0))
                .sum();
            if done && in_flight == 0 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    *stop.lock().expect("lock") = true;
    let _ = tokio::time::timeout(Duration::from_secs(10), worker).await;
    admin.shutdown().await;
    let acked = acked.lock().expect("lock").clone();
    let unknown: BTreeSet<String> = unknown
        .lock()
        .expect("lock")
        .difference(&acked)
        .cloned()
        .collect();
    let violations = violations.lock().expect("lock").clone();
    let lost = MESSAGES - acked.len() - unknown.len();
    println!(
        "pop broker kills=10 messages={MESSAGES} deliveries={} acked={} ackAnswerLost={} \
         brokerInFlight={in_flight} ackedRedelivered={} lost={lost}",
        deliveries.lock().expect("lock"),
        acked.len(),
        unknown.len(),
        violations.len(),
    );
    assert!(
        violations.is_empty(),
        "acknowledged messages handed out again: {violations:?}"
    );
    assert!(
        all_answered && lost == 0,
        "{lost} of {MESSAGES} never acknowledged{}",
        server.tail_text()
    );
    assert_eq!(
        in_flight, 0,
        "the broker still holds messages in flight (acks it never applied, yet not redelivered)"
    );
    consumer.shutdown().await;
}

fn tokio_util_stop() -> Arc<Mutex<bool>> {
    Arc::new(Mutex::new(false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_sees_no_spurious_redelivery() {
    let _alone = crate::ALONE.lock().await;
    init_logging();
    let server = DevServer::start("pop-slow", &[]);
    let topic = unique("PopSlow");
    let group = unique("pop_slow");
    send_all(&server, &topic, 96).await;
    let consumer = consumer(&server, &topic, &group, Duration::from_secs(10)).await;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while seen.len() < 96 && Instant::now() < deadline {
        for message in consumer.receive(32).await.expect("receive") {
            tokio::time::sleep(Duration::from_millis(100)).await;
            consumer.ack(&message).await.expect("ack");
            *seen.entry(body(&message)).or_default() += 1;
        }
    }
    // Anything spuriously revived would arrive within a few seconds of its invisibility.
    let extra = consumer.receive(32).await.expect("receive");
    let redelivered = seen.values().filter(|count| **count > 1).count() + extra.len();
    println!(
        "pop slow consumer: messages={} redelivered={redelivered}",
        seen.len()
    );
    assert_eq!(seen.len(), 96);
    assert_eq!(redelivered, 0);
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invisibility_ends_on_time() {
    let _alone = crate::ALONE.lock().await;
    init_logging();
    let server = DevServer::start("pop-precision", &[]);
    let topic = unique("PopPrecision");
    let group = unique("pop_precision");
    send_all(&server, &topic, 200).await;
    let consumer = consumer(&server, &topic, &group, Duration::from_secs(2)).await;
    let mut due: HashMap<String, i64> = HashMap::new();
    let mut lateness: Vec<i64> = Vec::new();
    let mut back = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while lateness.len() < 200 && Instant::now() < deadline {
        let batch = consumer.receive(32).await.expect("receive");
        let now = tidemark_remoting::now_ms();
        for message in batch {
            let name = body(&message);
            match due.get(&name) {
                None => {
                    due.insert(name, message.visible_again_at());
                }
                Some(at) => {
                    lateness.push(now - at);
                    // Acknowledged after the loop: acks here would delay the next receive.
                    back.push(message);
                }
            }
        }
    }
    assert_eq!(
        lateness.len(),
        200,
        "every unacknowledged message came back"
    );
    lateness.sort_unstable();
    let p99 = lateness[lateness.len() * 99 / 100 - 1];
    println!(
        "pop invisibility: messages=200 lateMs p50={} p99={p99} max={} earliest={}",
        lateness[100], lateness[199], lateness[0]
    );
    assert!(lateness[0] >= 0, "came back {} ms early", -lateness[0]);
    assert!(p99 <= 100, "p99 late by {p99} ms");
    for message in &back {
        consumer.ack(message).await.expect("ack");
    }
    consumer.shutdown().await;
}
