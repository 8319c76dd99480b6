//! Retry, dead letters, ack index and delay levels (issue 6) driven by the Rust client.
//!
//! The server runs with delay levels of 1 s .. 18 s, so the broker's retry level 3 +
//! reconsumeTimes means 3 s, 4 s, 5 s ... Timing slack: a retry must never come *before* its
//! level (the broker's guarantee, measured from the listener's return to the next delivery, both
//! on this host's clock), and must come within 20 s (a sanity cap for a loaded 2-core machine).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_client::{
    concurrent_fn, dlq_topic, Admin, ClientConfig, ConsumeFromWhere, ConsumeResult, ConsumeStatus,
    Message, MessageExt, Producer, PushConsumer, SendStatus,
};
use tidemark_tests::{init_logging, unique, wait_until, DevServer, SHORT_DELAY_LEVELS};

const UPPER: Duration = Duration::from_secs(20);

/// One delivery: when the listener returned, and what it saw.
#[derive(Debug, Clone)]
struct Delivery {
    body: String,
    topic: String,
    reconsume_times: i32,
    returned_at: Instant,
}

#[derive(Clone, Default)]
struct Deliveries(Arc<Mutex<Vec<Delivery>>>);

impl Deliveries {
    fn record(&self, messages: &[MessageExt]) {
        let now = Instant::now();
        self.0
            .lock()
            .expect("lock")
            .extend(messages.iter().map(|message| Delivery {
                body: String::from_utf8_lossy(&message.body).into_owned(),
                topic: message.topic.clone(),
                reconsume_times: message.reconsume_times,
                returned_at: now,
            }));
    }

    fn of(&self, body: &str) -> Vec<Delivery> {
        self.0
            .lock()
            .expect("lock")
            .iter()
            .filter(|delivery| delivery.body == body)
            .cloned()
            .collect()
    }

    fn count(&self, body: &str) -> usize {
        self.of(body).len()
    }
}

fn start_server(name: &str) -> DevServer {
    DevServer::start(name, &["--message-delay-level", SHORT_DELAY_LEVELS])
}

/// A consumer of `topic` from its first message, rebalancing every second.
fn subscriber(
    server: &DevServer,
    group: &str,
    topic: &str,
) -> tidemark_client::PushConsumerBuilder {
    PushConsumer::builder(group)
        .namesrv_addr(server.namesrv_addr())
        .subscribe(topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rebalance_interval(Duration::from_secs(1))
}

async fn producer(server: &DevServer) -> Producer {
    Producer::builder(unique("producer"))
        .namesrv_addr(server.namesrv_addr())
        .start()
        .await
        .expect("producer")
}

fn assert_gap(previous: &Delivery, next: &Delivery, level_delay: Duration, server: &DevServer) {
    let gap = next.returned_at.duration_since(previous.returned_at);
    assert!(
        gap >= level_delay,
        "retry came {gap:?} after the failure, before its level ({level_delay:?}) was due\n{}",
        server.tail_text()
    );
    assert!(gap < UPPER, "retry came only {gap:?} after the failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario11_reconsume_later_comes_back_once_after_its_delay() {
    init_logging();
    let server = start_server("client-s11");
    let topic = unique("S11");
    let group = unique("G11");
    let producer = producer(&server).await;
    producer
        .send(Message::new(&topic, "r-0"))
        .await
        .expect("send");

    let deliveries = Deliveries::default();
    let sink = deliveries.clone();
    let consumer = subscriber(&server, &group, &topic)
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let sink = sink.clone();
            async move {
                let first = messages.iter().any(|message| message.reconsume_times == 0);
                sink.record(&messages);
                if first {
                    ConsumeStatus::ReconsumeLater
                } else {
                    ConsumeStatus::Success
                }
            }
        }))
        .await
        .expect("consumer");
    assert!(
        wait_until(Duration::from_secs(60), || deliveries.count("r-0") >= 2).await,
        "no retry arrived\n{}",
        server.tail_text()
    );
    // Long enough for a wrongful third delivery (level 4 = 4 s after the second).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let seen = deliveries.of("r-0");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1].reconsume_times, 1);
    assert_eq!(
        seen[1].topic, topic,
        "the real topic is restored on the retry"
    );
    assert_gap(&seen[0], &seen[1], Duration::from_secs(3), &server);
    consumer.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario12_third_failure_lands_in_the_dead_letter_queue() {
    init_logging();
    let server = start_server("client-s12");
    let topic = unique("S12");
    let group = unique("G12");
    let producer = producer(&server).await;
    producer
        .send(Message::new(&topic, "d-0").with_keys(["dead"]))
        .await
        .expect("send");

    let deliveries = Deliveries::default();
    let sink = deliveries.clone();
    let consumer = subscriber(&server, &group, &topic)
        .max_reconsume_times(2)
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let sink = sink.clone();
            async move {
                sink.record(&messages);
                ConsumeStatus::ReconsumeLater
            }
        }))
        .await
        .expect("consumer");
    assert!(
        wait_until(Duration::from_secs(60), || deliveries.count("d-0") >= 3).await,
        "three deliveries expected\n{}",
        server.tail_text()
    );

    // Read the dead letter back with a consumer of the DLQ topic.
    let dlq = dlq_topic(&group);
    let dead = Deliveries::default();
    let dead_sink = dead.clone();
    let mut dlq_reader = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while dlq_reader.is_none() && Instant::now() < deadline {
        let sink = dead_sink.clone();
        match PushConsumer::builder(unique("G12dlq"))
            .namesrv_addr(server.namesrv_addr())
            .subscribe(&dlq, "*")
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .rebalance_interval(Duration::from_secs(1))
            .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
                let sink = sink.clone();
                async move {
                    sink.record(&messages);
                    ConsumeStatus::Success
                }
            }))
            .await
        {
            Ok(reader) => dlq_reader = Some(reader),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let dlq_reader = dlq_reader.expect("DLQ reader starts");
    assert!(
        wait_until(Duration::from_secs(30), || dead.count("d-0") >= 1).await,
        "the dead letter is not readable from {dlq}\n{}",
        server.tail_text()
    );
    let third = deliveries.of("d-0")[2].returned_at;
    // A wrongful fourth delivery would come 5 s (level 5) after the third failure.
    let watch = (third + Duration::from_secs(8)).saturating_duration_since(Instant::now());
    tokio::time::sleep(watch).await;
    let seen = deliveries.of("d-0");
    assert_eq!(
        seen.len(),
        3,
        "a fourth delivery means the last send-back was retried: {seen:?}"
    );
    for (index, delivery) in seen.iter().enumerate() {
        assert_eq!(delivery.reconsume_times, index as i32);
        assert_eq!(delivery.topic, topic);
    }
    assert_gap(&seen[0], &seen[1], Duration::from_secs(3), &server);
    assert_gap(&seen[1], &seen[2], Duration::from_secs(4), &server);

    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    let stats = admin.topic_stats(&dlq).await.expect("DLQ stats");
    assert_eq!(stats.offset_table.len(), 1, "{dlq} has one queue");
    let only = stats.offset_table.values().next().expect("one queue");
    assert_eq!(
        (only.min_offset, only.max_offset),
        (0, 1),
        "exactly the one dead message"
    );
    admin.shutdown().await;
    dlq_reader.shutdown().await;
    consumer.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario13_only_messages_after_the_ack_index_come_back() {
    init_logging();
    let server = start_server("client-s13");
    let topic = unique("S13");
    let group = unique("G13");
    let producer = producer(&server).await;
    // All four in one queue so they can arrive as one batch.
    let first = producer
        .send(Message::new(&topic, "a-0"))
        .await
        .expect("send");
    let first_queue = first.queue.clone();
    for i in 1..4 {
        let sent = producer
            .send_to_queue(Message::new(&topic, format!("a-{i}")), first_queue.clone())
            .await
            .expect("send");
        assert_eq!(sent.status, SendStatus::SendOk);
    }
    let deliveries = Deliveries::default();
    let sink = deliveries.clone();
    let batches: Arc<Mutex<Vec<usize>>> = Arc::default();
    let batch_sizes = batches.clone();
    let consumer = subscriber(&server, &group, &topic)
        .consume_batch_max_size(4)
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let sink = sink.clone();
            let batch_sizes = batch_sizes.clone();
            async move {
                sink.record(&messages);
                batch_sizes.lock().expect("lock").push(messages.len());
                if messages.len() == 4 && messages.iter().all(|m| m.reconsume_times == 0) {
                    // a-0 and a-1 are consumed; a-2 and a-3 are retried.
                    ConsumeResult::success_up_to(1)
                } else {
                    ConsumeResult::success()
                }
            }
        }))
        .await
        .expect("consumer");
    let retried = wait_until(Duration::from_secs(60), || {
        deliveries.count("a-2") >= 2 && deliveries.count("a-3") >= 2
    })
    .await;
    assert_eq!(
        batches.lock().expect("lock").first(),
        Some(&4),
        "the four came as one batch"
    );
    assert!(
        retried,
        "a-2 and a-3 should come back: {:?}\n{}",
        deliveries.0.lock().expect("lock"),
        server.tail_text()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let counts: BTreeMap<&str, usize> = ["a-0", "a-1", "a-2", "a-3"]
        .into_iter()
        .map(|body| (body, deliveries.count(body)))
        .collect();
    assert_eq!(
        counts,
        BTreeMap::from([("a-0", 1), ("a-1", 1), ("a-2", 2), ("a-3", 2)])
    );
    for body in ["a-2", "a-3"] {
        let seen = deliveries.of(body);
        assert_eq!(seen[1].reconsume_times, 1);
        assert_gap(&seen[0], &seen[1], Duration::from_secs(3), &server);
    }
    consumer.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario14_delayed_messages_arrive_no_earlier_than_their_level() {
    init_logging();
    let mut server = start_server("client-s14");
    let topic = unique("S14");
    let group = unique("G14");
    let producer = producer(&server).await;

    let deliveries = Deliveries::default();
    let sink = deliveries.clone();
    let start_consumer = |server: &DevServer, deliveries: Deliveries| {
        subscriber(server, &group, &topic).start_concurrently(concurrent_fn(
            move |messages: Vec<MessageExt>| {
                let sink = deliveries.clone();
                async move {
                    sink.record(&messages);
                    ConsumeStatus::Success
                }
            },
        ))
    };
    // The topic must exist before the consumer looks for it.
    producer
        .send(Message::new(&topic, "plain"))
        .await
        .expect("send");
    let consumer = start_consumer(&server, sink.clone())
        .await
        .expect("consumer");
    assert!(wait_until(Duration::from_secs(30), || deliveries.count("plain") == 1).await);

    let mut sent_at = BTreeMap::new();
    for level in [1, 2, 4] {
        let body = format!("delay-{level}");
        sent_at.insert(body.clone(), (Instant::now(), level));
        producer
            .send(Message::new(&topic, body).with_delay_level(level))
            .await
            .expect("delayed send");
    }
    for (body, (at, level)) in &sent_at {
        assert!(
            wait_until(Duration::from_secs(30), || deliveries.count(body) >= 1).await,
            "{body} never arrived\n{}",
            server.tail_text()
        );
        let arrived = deliveries.of(body)[0].returned_at;
        let delay = Duration::from_secs(*level as u64);
        assert!(
            arrived.duration_since(*at) >= delay,
            "{body} came after {:?}",
            arrived.duration_since(*at)
        );
    }

    // A message pending across a graceful broker restart is delivered exactly once after it.
    consumer.shutdown().await;
    producer
        .send(Message::new(&topic, "across-restart").with_delay_level(6))
        .await
        .expect("delayed send");
    producer.shutdown().await;
    server.stop();
    server.restart();
    let consumer = start_consumer(&server, sink)
        .await
        .expect("consumer after restart");
    assert!(
        wait_until(Duration::from_secs(40), || deliveries
            .count("across-restart")
            >= 1)
        .await,
        "the pending delayed message was lost across the restart\n{}",
        server.tail_text()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        deliveries.count("across-restart"),
        1,
        "delivered more than once"
    );
    for body in sent_at.keys() {
        assert_eq!(
            deliveries.count(body),
            1,
            "{body} delivered again after the restart"
        );
    }
    consumer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario15_retry_depth_is_visible_in_consume_stats() {
    init_logging();
    let server = start_server("client-s15");
    let topic = unique("S15");
    let group = unique("G15");
    let producer = producer(&server).await;
    for i in 0..3 {
        producer
            .send(Message::new(&topic, format!("v-{i}")))
            .await
            .expect("send");
    }
    let deliveries = Deliveries::default();
    let sink = deliveries.clone();
    let consumer = subscriber(&server, &group, &topic)
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let sink = sink.clone();
            async move {
                sink.record(&messages);
                // Fail every first delivery: three messages enter the retry topic.
                if messages.iter().any(|message| message.reconsume_times == 0) {
                    ConsumeStatus::ReconsumeLater
                } else {
                    ConsumeStatus::Success
                }
            }
        }))
        .await
        .expect("consumer");
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    let retry = tidemark_client::retry_topic(&group);
    let mut last = None;
    let visible = {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut ok = false;
        while Instant::now() < deadline {
            if let Ok(stats) = admin.consume_stats(&group, None).await {
                let retry_depth: i64 = stats
                    .offset_table
                    .iter()
                    .filter(|(queue, _)| queue.topic == retry)
                    .map(|(_, line)| line.broker_offset)
                    .sum();
                let main_committed: i64 = stats
                    .offset_table
                    .iter()
                    .filter(|(queue, _)| queue.topic == topic)
                    .map(|(_, line)| line.consumer_offset)
                    .sum();
                last = Some(stats);
                if retry_depth == 3 && main_committed == 3 {
                    ok = true;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        ok
    };
    assert!(
        visible,
        "retry depth 3 not visible: {last:?}\n{}",
        server.tail_text()
    );
    assert!(
        wait_until(Duration::from_secs(60), || (0..3)
            .all(|i| deliveries.count(&format!("v-{i}")) == 2))
        .await
    );
    admin.shutdown().await;
    consumer.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_past_the_consume_timeout_counts_as_reconsume_later() {
    init_logging();
    let server = start_server("client-timeout");
    let topic = unique("STO");
    let group = unique("GTO");
    let producer = producer(&server).await;
    producer
        .send(Message::new(&topic, "slow-0"))
        .await
        .expect("send");
    let deliveries = Deliveries::default();
    let sink = deliveries.clone();
    let consumer = subscriber(&server, &group, &topic)
        .consume_timeout(Duration::from_secs(1))
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let sink = sink.clone();
            async move {
                sink.record(&messages);
                if messages.iter().any(|message| message.reconsume_times == 0) {
                    // Hangs past the consume timeout: the message must come back anyway.
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                ConsumeStatus::Success
            }
        }))
        .await
        .expect("consumer");
    assert!(
        wait_until(Duration::from_secs(40), || deliveries.count("slow-0") >= 2).await,
        "a timed-out message was not retried\n{}",
        server.tail_text()
    );
    assert_eq!(deliveries.of("slow-0")[1].reconsume_times, 1);
    consumer.shutdown().await;
    producer.shutdown().await;
}
