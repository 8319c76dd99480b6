//! Scenarios 1–5 of the compatibility suite, driven by Tidemark's Rust client against a server in
//! a child process (`tidemark dev`, or Apache RocketMQ through `TIDEMARK_TEST_SERVER`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_client::{
    concurrent_fn, select_by_key, ConsumeFromWhere, ConsumeStatus, Message, MessageExt,
    MessageModel, OrderlyStatus, Producer, PushConsumer, PushConsumerBuilder, SendStatus,
};
use tidemark_tests::{init_logging, unique, wait_for_route, wait_until, DevServer};

const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything a listener saw, in arrival order.
#[derive(Clone, Default)]
struct Received {
    messages: Arc<Mutex<Vec<MessageExt>>>,
}

impl Received {
    fn listener(&self) -> impl tidemark_client::ConcurrentListener {
        let messages = self.messages.clone();
        concurrent_fn(move |batch: Vec<MessageExt>| {
            let messages = messages.clone();
            async move {
                messages.lock().expect("lock").extend(batch);
                ConsumeStatus::Success
            }
        })
    }

    fn bodies(&self) -> Vec<String> {
        self.messages
            .lock()
            .expect("lock")
            .iter()
            .map(|message| String::from_utf8_lossy(&message.body).into_owned())
            .collect()
    }

    fn distinct_bodies(&self) -> BTreeSet<String> {
        self.bodies().into_iter().collect()
    }

    fn snapshot(&self) -> Vec<MessageExt> {
        self.messages.lock().expect("lock").clone()
    }
}

async fn producer(server: &DevServer) -> Producer {
    Producer::builder(unique("producer"))
        .namesrv_addr(server.namesrv_addr())
        .start()
        .await
        .expect("producer starts")
}

fn consumer(server: &DevServer, group: &str, topic: &str, expression: &str) -> PushConsumerBuilder {
    PushConsumer::builder(group)
        .namesrv_addr(server.namesrv_addr())
        .subscribe(topic, expression)
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rebalance_interval(Duration::from_secs(1))
}

/// Sends `count` messages `{prefix}-{i}` synchronously; returns the bodies.
async fn send_numbered(
    producer: &Producer,
    topic: &str,
    prefix: &str,
    count: usize,
) -> Vec<String> {
    let mut bodies = Vec::with_capacity(count);
    for i in 0..count {
        let body = format!("{prefix}-{i}");
        let sent = producer
            .send(Message::new(topic, body.clone()).with_keys([format!("k{i}")]))
            .await
            .expect("send");
        assert_eq!(sent.status, SendStatus::SendOk);
        bodies.push(body);
    }
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario01_sync_async_oneway_and_batch_sends_all_arrive() {
    init_logging();
    let server = DevServer::start("client-s01", &[]);
    let topic = unique("S01");
    let producer = producer(&server).await;

    let mut expected: BTreeSet<String> = BTreeSet::new();
    let mut sent_ids = BTreeMap::new();
    for i in 0..10 {
        let body = format!("sync-{i}");
        let message = Message::new(&topic, body.clone())
            .with_tags("TagS")
            .with_keys([format!("key-{i}")])
            .with_property("origin", "rust");
        let sent = producer.send(message).await.expect("sync send");
        assert_eq!(sent.status, SendStatus::SendOk);
        assert!(!sent.offset_msg_id.is_empty());
        sent_ids.insert(body.clone(), sent.msg_id);
        expected.insert(body);
    }
    let handles: Vec<_> = (0..10)
        .map(|i| {
            let body = format!("async-{i}");
            expected.insert(body.clone());
            producer.send_async(Message::new(&topic, body))
        })
        .collect();
    for handle in handles {
        handle.await.expect("task").expect("async send");
    }
    for i in 0..10 {
        let body = format!("oneway-{i}");
        producer
            .send_oneway(Message::new(&topic, body.clone()))
            .await
            .expect("oneway send");
        expected.insert(body);
    }
    let batch: Vec<Message> = (0..5)
        .map(|i| {
            let body = format!("batch-{i}");
            expected.insert(body.clone());
            Message::new(&topic, body).with_tags("TagB")
        })
        .collect();
    let batch_result = producer.send_batch(batch).await.expect("batch send");
    assert_eq!(batch_result.msg_id.split(',').count(), 5);
    // A compressed body (over 4 KiB) arrives decompressed.
    let big = "x".repeat(10_000);
    producer
        .send(Message::new(&topic, big.clone()))
        .await
        .expect("big send");
    expected.insert(big);

    let received = Received::default();
    let consumer = consumer(&server, &unique("G01"), &topic, "*")
        .start_concurrently(received.listener())
        .await
        .expect("consumer starts");
    let complete = wait_until(DELIVERY_TIMEOUT, || {
        received.distinct_bodies().is_superset(&expected)
    })
    .await;
    let missing: Vec<_> = expected
        .difference(&received.distinct_bodies())
        .cloned()
        .collect();
    assert!(complete, "missing {missing:?}\n{}", server.tail_text());

    for message in received.snapshot() {
        let body = String::from_utf8_lossy(&message.body).into_owned();
        assert_eq!(message.topic, topic);
        if let Some(id) = sent_ids.get(&body) {
            assert_eq!(&message.msg_id, id, "msg id of {body}");
            assert_eq!(message.tags(), Some("TagS"));
            assert_eq!(message.property("origin"), Some("rust"));
            assert_eq!(message.keys().count(), 1);
        }
        if body.starts_with("batch-") {
            assert_eq!(message.tags(), Some("TagB"));
        }
    }
    consumer.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario02_tag_expression_delivers_exactly_the_matching_tags() {
    init_logging();
    let server = DevServer::start("client-s02", &[]);
    let topic = unique("S02");
    let producer = producer(&server).await;
    let mut expected = BTreeSet::new();
    for i in 0..30 {
        let tag = ["TagA", "TagB", "TagC"][i % 3];
        let body = format!("{tag}-{i}");
        if tag != "TagC" {
            expected.insert(body.clone());
        }
        producer
            .send(Message::new(&topic, body).with_tags(tag))
            .await
            .expect("send");
    }
    let received = Received::default();
    let consumer = consumer(&server, &unique("G02"), &topic, "TagA || TagB")
        .start_concurrently(received.listener())
        .await
        .expect("consumer starts");
    assert!(
        wait_until(DELIVERY_TIMEOUT, || received.distinct_bodies().len()
            >= expected.len())
        .await,
        "got {:?}",
        received.distinct_bodies()
    );
    // Give a wrongly delivered TagC time to show up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(received.distinct_bodies(), expected);
    consumer.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario03_two_consumers_of_a_group_split_the_queues() {
    init_logging();
    let server = DevServer::start("client-s03", &[]);
    let topic = unique("S03");
    let group = unique("G03");
    let producer = producer(&server).await;
    send_numbered(&producer, &topic, "warmup", 4).await;

    let first = Received::default();
    let second = Received::default();
    let a = consumer(&server, &group, &topic, "*")
        .start_concurrently(first.listener())
        .await
        .expect("consumer a");
    let b = consumer(&server, &group, &topic, "*")
        .start_concurrently(second.listener())
        .await
        .expect("consumer b");
    // Stable split: both hold queues of the topic, none held twice, all four covered.
    let split = wait_until(Duration::from_secs(30), || {
        let of = |consumer: &PushConsumer| -> BTreeSet<_> {
            consumer
                .assigned_queues()
                .into_iter()
                .filter(|queue| queue.topic == topic)
                .collect()
        };
        let (qa, qb) = (of(&a), of(&b));
        !qa.is_empty() && !qb.is_empty() && qa.is_disjoint(&qb) && qa.len() + qb.len() == 4
    })
    .await;
    assert!(
        split,
        "a: {:?}\nb: {:?}",
        a.assigned_queues(),
        b.assigned_queues()
    );
    let warmup_done = wait_until(DELIVERY_TIMEOUT, || {
        first.distinct_bodies().len() + second.distinct_bodies().len() >= 4
    })
    .await;
    assert!(warmup_done);

    let before = first.bodies().len() + second.bodies().len();
    let bodies = send_numbered(&producer, &topic, "split", 40).await;
    let all_in = wait_until(DELIVERY_TIMEOUT, || {
        let got: BTreeSet<String> = first
            .distinct_bodies()
            .union(&second.distinct_bodies())
            .cloned()
            .collect();
        bodies.iter().all(|body| got.contains(body))
    })
    .await;
    assert!(all_in, "not every message arrived");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let deliveries = first.bodies().len() + second.bodies().len() - before;
    assert_eq!(
        deliveries,
        bodies.len(),
        "each message exactly once after the split"
    );
    assert!(first.bodies().iter().any(|body| body.starts_with("split")));
    assert!(second.bodies().iter().any(|body| body.starts_with("split")));
    a.shutdown().await;
    b.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario04_broadcasting_consumers_each_receive_everything() {
    init_logging();
    let server = DevServer::start("client-s04", &[]);
    let topic = unique("S04");
    let group = unique("G04");
    let producer = producer(&server).await;
    let bodies: BTreeSet<String> = send_numbered(&producer, &topic, "b", 20)
        .await
        .into_iter()
        .collect();
    let offsets_dir = tempfile::tempdir().expect("tempdir");
    let mut consumers = Vec::new();
    let mut seen = Vec::new();
    for instance in ["one", "two"] {
        let received = Received::default();
        let mut config = tidemark_client::ClientConfig::new(server.namesrv_addr());
        config.instance_name = Some(instance.into());
        let consumer = consumer(&server, &group, &topic, "*")
            .client_config(config)
            .message_model(MessageModel::Broadcasting)
            .offset_store_dir(offsets_dir.path())
            .start_concurrently(received.listener())
            .await
            .expect("consumer starts");
        consumers.push(consumer);
        seen.push(received);
    }
    for received in &seen {
        assert!(
            wait_until(DELIVERY_TIMEOUT, || received.distinct_bodies() == bodies).await,
            "a broadcasting consumer missed messages: {:?}",
            received.distinct_bodies()
        );
    }
    for consumer in &consumers {
        consumer.shutdown().await;
    }
    // Each consumer kept its progress in its own offsets.json.
    for instance in ["one", "two"] {
        let files: Vec<_> = std::fs::read_dir(offsets_dir.path())
            .expect("offsets dir")
            .filter_map(Result::ok)
            .filter(|entry| {
                entry
                    .file_name()
                    .to_string_lossy()
                    .ends_with(&format!("@{instance}"))
            })
            .collect();
        assert_eq!(files.len(), 1, "one client directory for {instance}");
        let file = files[0].path().join(&group).join("offsets.json");
        let text = std::fs::read_to_string(&file).expect("offsets.json written");
        assert!(text.contains(&topic), "{text}");
    }
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario05_a_new_consumer_resumes_from_the_committed_offsets() {
    init_logging();
    let server = DevServer::start("client-s05", &[]);
    let topic = unique("S05");
    let group = unique("G05");
    let producer = producer(&server).await;
    let bodies = send_numbered(&producer, &topic, "r", 200).await;

    // Consumer A: one message at a time, slowly, then shut down mid-stream.
    let first = Received::default();
    let slow_messages = first.messages.clone();
    let a = consumer(&server, &group, &topic, "*")
        .consume_concurrency(1)
        .start_concurrently(concurrent_fn(move |batch: Vec<MessageExt>| {
            let messages = slow_messages.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                messages.lock().expect("lock").extend(batch);
                ConsumeStatus::Success
            }
        }))
        .await
        .expect("consumer a");
    assert!(wait_until(DELIVERY_TIMEOUT, || first.bodies().len() >= 60).await);
    a.shutdown().await;
    let consumed_by_a = first.distinct_bodies();

    let second = Received::default();
    let b = consumer(&server, &group, &topic, "*")
        .start_concurrently(second.listener())
        .await
        .expect("consumer b");
    let everything: BTreeSet<String> = bodies.iter().cloned().collect();
    let complete = wait_until(DELIVERY_TIMEOUT, || {
        consumed_by_a
            .union(&second.distinct_bodies())
            .cloned()
            .collect::<BTreeSet<_>>()
            == everything
    })
    .await;
    assert!(complete, "messages lost across the consumer restart");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let duplicates: Vec<_> = second
        .distinct_bodies()
        .intersection(&consumed_by_a)
        .cloned()
        .collect();
    // One consume task, batch size 1: at most one consumed message can miss the final commit;
    // the bound allows twice that for timing.
    assert!(
        duplicates.len() <= 2,
        "B redid {} of A's messages: {duplicates:?}",
        duplicates.len()
    );
    b.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario07_orderly_consumer_sees_each_key_in_send_order() {
    init_logging();
    let server = DevServer::start("client-s07", &[]);
    let topic = unique("S07");
    let producer = producer(&server).await;
    send_numbered(&producer, &topic, "warmup", 1).await;
    let keys = ["alpha", "beta", "gamma", "delta", "epsilon"];
    for round in 0..20 {
        for key in keys {
            producer
                .send_with_selector(
                    Message::new(&topic, format!("{key}:{round}")).with_keys([key]),
                    |queues, _| select_by_key(queues, key),
                )
                .await
                .expect("ordered send");
        }
    }
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = seen.clone();
    let consumer = consumer(&server, &unique("G07"), &topic, "*")
        .start_orderly(tidemark_client::orderly_fn(
            move |batch: Vec<MessageExt>| {
                let sink = sink.clone();
                async move {
                    let mut sink = sink.lock().expect("lock");
                    for message in batch {
                        sink.push(String::from_utf8_lossy(&message.body).into_owned());
                    }
                    OrderlyStatus::Success
                }
            },
        ))
        .await
        .expect("orderly consumer");
    let all = wait_until(DELIVERY_TIMEOUT, || seen.lock().expect("lock").len() >= 101).await;
    assert!(all, "got {} of 101", seen.lock().expect("lock").len());
    let seen = seen.lock().expect("lock").clone();
    for key in keys {
        let rounds: Vec<u32> = seen
            .iter()
            .filter_map(|body| body.strip_prefix(&format!("{key}:")))
            .filter_map(|round| round.parse().ok())
            .collect();
        assert_eq!(rounds, (0..20).collect::<Vec<_>>(), "order of {key}");
    }
    consumer.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario07b_orderly_suspend_redelivers_in_place_without_breaking_order() {
    init_logging();
    let server = DevServer::start("client-s07b", &[]);
    let topic = unique("S07b");
    let producer = producer(&server).await;
    let first = producer
        .send(Message::new(&topic, "o-0"))
        .await
        .expect("send");
    for i in 1..6 {
        producer
            .send_to_queue(Message::new(&topic, format!("o-{i}")), first.queue.clone())
            .await
            .expect("send");
    }
    let seen: Arc<Mutex<Vec<(String, i32)>>> = Arc::default();
    let sink = seen.clone();
    let consumer = consumer(&server, &unique("G07b"), &topic, "*")
        .suspend_current_queue_time(Duration::from_millis(200))
        .start_orderly(tidemark_client::orderly_fn(
            move |batch: Vec<MessageExt>| {
                let sink = sink.clone();
                async move {
                    let mut sink = sink.lock().expect("lock");
                    let mut status = OrderlyStatus::Success;
                    for message in batch {
                        let body = String::from_utf8_lossy(&message.body).into_owned();
                        if body == "o-2" && message.reconsume_times == 0 {
                            status = OrderlyStatus::SuspendCurrentQueueAMoment;
                        }
                        sink.push((body, message.reconsume_times));
                    }
                    status
                }
            },
        ))
        .await
        .expect("orderly consumer");
    assert!(wait_until(DELIVERY_TIMEOUT, || seen.lock().expect("lock").len() >= 7).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = seen.lock().expect("lock").clone();
    let order: Vec<&str> = seen.iter().map(|(body, _)| body.as_str()).collect();
    assert_eq!(
        order,
        ["o-0", "o-1", "o-2", "o-2", "o-3", "o-4", "o-5"],
        "{seen:?}"
    );
    assert_eq!(seen[3].1, 1, "the retried message counts its reconsume");
    consumer.shutdown().await;
    producer.shutdown().await;
}

/// How many of `topic`'s queues `consumer` is assigned now.
fn owned_queues(consumer: &PushConsumer, topic: &str) -> usize {
    consumer
        .assigned_queues()
        .iter()
        .filter(|queue| queue.topic == topic)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario03b_a_joining_member_triggers_a_rebalance_through_the_broker_notice() {
    init_logging();
    let server = DevServer::start("client-s03b", &[]);
    let topic = unique("S03b");
    let group = unique("G03b");
    let producer = producer(&server).await;
    send_numbered(&producer, &topic, "n", 4).await;
    assert!(wait_for_route(&server.namesrv_addr(), &topic).await);
    // A rebalance period far beyond the test: only NOTIFY_CONSUMER_IDS_CHANGED can move queues.
    let slow = |server: &DevServer| {
        PushConsumer::builder(&group)
            .namesrv_addr(server.namesrv_addr())
            .subscribe(&topic, "*")
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .rebalance_interval(Duration::from_secs(600))
    };
    let first = Received::default();
    let a = slow(&server)
        .start_concurrently(first.listener())
        .await
        .expect("consumer a");
    let owned = |consumer: &PushConsumer| owned_queues(consumer, &topic);
    assert!(
        wait_until(Duration::from_secs(20), || owned(&a) == 4).await,
        "a owns every queue first; it owns {:?}",
        a.assigned_queues()
    );
    let second = Received::default();
    let b = slow(&server)
        .start_concurrently(second.listener())
        .await
        .expect("consumer b");
    let split = wait_until(Duration::from_secs(20), || owned(&a) == 2 && owned(&b) == 2).await;
    assert!(
        split,
        "a: {:?}, b: {:?}",
        a.assigned_queues(),
        b.assigned_queues()
    );
    a.shutdown().await;
    b.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario03c_a_consumer_started_before_its_topic_gets_it_without_waiting_an_interval() {
    init_logging();
    let server = DevServer::start("client-s03c", &[]);
    let topic = unique("S03c");
    let group = unique("G03c");
    let received = Received::default();
    // The first round finds no route; with Java's behaviour nothing would happen for 600 s.
    let consumer = PushConsumer::builder(&group)
        .namesrv_addr(server.namesrv_addr())
        .subscribe(&topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rebalance_interval(Duration::from_secs(600))
        .start_concurrently(received.listener())
        .await
        .expect("consumer");
    let producer = producer(&server).await;
    let sent = send_numbered(&producer, &topic, "late", 4).await;
    let owned = || {
        consumer
            .assigned_queues()
            .iter()
            .filter(|queue| queue.topic == topic)
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(20), || owned() == 4).await,
        "the consumer owns {:?}",
        consumer.assigned_queues()
    );
    assert!(
        wait_until(Duration::from_secs(20), || received.distinct_bodies().len()
            == sent.len())
        .await,
        "received {:?}",
        received.bodies()
    );
    assert_eq!(
        received.distinct_bodies(),
        sent.into_iter().collect::<BTreeSet<_>>()
    );
    consumer.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario01b_binary_request_headers_work_end_to_end() {
    init_logging();
    let server = DevServer::start("client-s01b", &[]);
    let topic = unique("S01b");
    let mut config = tidemark_client::ClientConfig::new(server.namesrv_addr());
    config.serialize_type = tidemark_protocol::SerializeType::RocketMq;
    let producer = Producer::builder(unique("producer"))
        .client_config(config.clone())
        .start()
        .await
        .expect("producer");
    let mut expected = BTreeSet::new();
    for i in 0..10 {
        let body = format!("binary-{i}");
        producer
            .send(
                Message::new(&topic, body.clone())
                    .with_tags("B")
                    .with_keys([format!("k{i}")]),
            )
            .await
            .expect("send with ROCKETMQ headers");
        expected.insert(body);
    }
    let received = Received::default();
    let consumer = consumer(&server, &unique("G01b"), &topic, "B")
        .client_config(config)
        .start_concurrently(received.listener())
        .await
        .expect("consumer");
    assert!(
        wait_until(DELIVERY_TIMEOUT, || received.distinct_bodies() == expected).await,
        "got {:?}",
        received.distinct_bodies()
    );
    consumer.shutdown().await;
    producer.shutdown().await;
}
