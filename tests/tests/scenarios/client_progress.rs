//! Scenarios 6, 8 and 9 of the compatibility suite — where consumer progress is kept and how it
//! shows — driven by the Rust client.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_client::{
    concurrent_fn, Admin, ClientConfig, ConsumeFromWhere, ConsumeStats, ConsumeStatus,
    LitePullConsumer, Message, MessageExt, MessageQueue, Producer, PushConsumer,
};
use tidemark_tests::{against_apache, init_logging, unique, DevServer};

async fn producer(server: &DevServer) -> Producer {
    Producer::builder(unique("producer"))
        .namesrv_addr(server.namesrv_addr())
        .start()
        .await
        .expect("producer")
}

/// Sends `count` messages; returns how many went to each queue.
async fn send(
    producer: &Producer,
    topic: &str,
    prefix: &str,
    count: usize,
) -> BTreeMap<MessageQueue, i64> {
    let mut per_queue = BTreeMap::new();
    for i in 0..count {
        let sent = producer
            .send(Message::new(topic, format!("{prefix}-{i}")))
            .await
            .expect("send");
        let highest = per_queue.entry(sent.queue.clone()).or_insert(0);
        *highest = (*highest).max(sent.queue_offset + 1);
    }
    per_queue
}

async fn consume_stats(admin: &Admin, group: &str, topic: &str) -> Option<ConsumeStats> {
    admin.consume_stats(group, Some(topic)).await.ok()
}

/// Committed offsets of `topic`'s queues as the broker reports them.
fn committed(stats: &ConsumeStats, topic: &str) -> BTreeMap<MessageQueue, i64> {
    stats
        .offset_table
        .iter()
        .filter(|(queue, _)| queue.topic == topic)
        .map(|(queue, line)| (queue.clone(), line.consumer_offset))
        .collect()
}

/// A consumer that consumes everything, until every queue's commit reaches `expected`.
async fn consume_until_committed(
    server: &DevServer,
    admin: &Admin,
    group: &str,
    topic: &str,
    expected: &BTreeMap<MessageQueue, i64>,
) -> usize {
    let count = Arc::new(Mutex::new(0usize));
    let counter = count.clone();
    let consumer = PushConsumer::builder(group)
        .namesrv_addr(server.namesrv_addr())
        .subscribe(topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rebalance_interval(Duration::from_secs(1))
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let counter = counter.clone();
            async move {
                *counter.lock().expect("lock") += messages.len();
                ConsumeStatus::Success
            }
        }))
        .await
        .expect("consumer");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = BTreeMap::new();
    while Instant::now() < deadline {
        if let Some(stats) = consume_stats(admin, group, topic).await {
            last = committed(&stats, topic);
            if expected
                .iter()
                .all(|(queue, offset)| last.get(queue) == Some(offset))
            {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    consumer.shutdown().await;
    assert!(
        expected
            .iter()
            .all(|(queue, offset)| last.get(queue) == Some(offset)),
        "commits never reached {expected:?}; last {last:?}\n{}",
        server.tail_text()
    );
    let consumed = *count.lock().expect("lock");
    consumed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario06_offsets_survive_broker_restarts() {
    init_logging();
    let mut server = DevServer::start("client-s06", &[]);
    let topic = unique("S06");
    let group = unique("G06");
    let first_producer = producer(&server).await;
    let expected = send(&first_producer, &topic, "a", 40).await;
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    consume_until_committed(&server, &admin, &group, &topic, &expected).await;
    admin.shutdown().await;
    first_producer.shutdown().await;

    // Graceful restart: exactly the same offsets.
    server.stop();
    server.restart();
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    let after = wait_for_commits(&admin, &group, &topic, &expected).await;
    assert_eq!(
        after,
        expected,
        "after a graceful restart\n{}",
        server.tail_text()
    );
    admin.shutdown().await;

    // More messages, committed, then a SIGKILL after the broker's periodic flush (5 s; Apache's
    // first flush comes 10 s after start) had time to run: nothing committed is lost.
    let producer = producer(&server).await;
    let more = send(&producer, &topic, "b", 20).await;
    let mut expected_now = expected.clone();
    for (queue, offset) in more {
        expected_now.insert(queue, offset);
    }
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    let redone = consume_until_committed(&server, &admin, &group, &topic, &expected_now).await;
    assert_eq!(
        redone, 20,
        "the group resumed from its offsets after the restart"
    );
    admin.shutdown().await;
    producer.shutdown().await;
    // Apache persists offsets every 5 s, first 10 s after start: wait for one that follows the
    // commits. Tidemark needs no wait: the consumer's shutdown commit is answered only once the
    // journal is durable up to it, which covers every earlier commit of the group.
    if against_apache() {
        tokio::time::sleep(Duration::from_secs(12)).await;
    }
    server.kill();
    server.restart();
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    let after_kill = wait_for_commits(&admin, &group, &topic, &expected_now).await;
    assert_eq!(
        after_kill,
        expected_now,
        "after SIGKILL\n{}",
        server.tail_text()
    );
    admin.shutdown().await;
}

/// Polls the broker (up to 30 s, while it starts up) until its commits equal `expected`;
/// returns the last commits seen.
async fn wait_for_commits(
    admin: &Admin,
    group: &str,
    topic: &str,
    expected: &BTreeMap<MessageQueue, i64>,
) -> BTreeMap<MessageQueue, i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = BTreeMap::new();
    while Instant::now() < deadline {
        if let Some(stats) = consume_stats(admin, group, topic).await {
            last = committed(&stats, topic);
            if &last == expected {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario08_lite_pull_commit_sync_decides_what_is_seen_again() {
    init_logging();
    let server = DevServer::start("client-s08", &[]);
    let topic = unique("S08");
    let group = unique("G08");
    let producer = producer(&server).await;
    send(&producer, &topic, "l", 100).await;

    let lite = || {
        LitePullConsumer::builder(&group)
            .namesrv_addr(server.namesrv_addr())
            .subscribe(&topic, "*")
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .rebalance_interval(Duration::from_secs(1))
            .auto_commit(false)
            .start()
    };
    let first = lite().await.expect("lite consumer");
    let mut committed_bodies = BTreeSet::new();
    while committed_bodies.len() < 40 {
        let polled = first.poll_for(Duration::from_secs(10)).await;
        assert!(
            !polled.is_empty(),
            "nothing to poll\n{}",
            server.tail_text()
        );
        committed_bodies.extend(
            polled
                .iter()
                .map(|m| String::from_utf8_lossy(&m.body).into_owned()),
        );
    }
    first.commit_sync();
    let mut uncommitted = BTreeSet::new();
    for _ in 0..2 {
        let polled = first.poll_for(Duration::from_secs(5)).await;
        uncommitted.extend(
            polled
                .iter()
                .map(|m| String::from_utf8_lossy(&m.body).into_owned()),
        );
    }
    assert!(!uncommitted.is_empty());
    first.shutdown().await;

    let second = lite().await.expect("second lite consumer");
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() + committed_bodies.len() < 100 && Instant::now() < deadline {
        let polled = second.poll_for(Duration::from_secs(2)).await;
        seen.extend(
            polled
                .iter()
                .map(|m| String::from_utf8_lossy(&m.body).into_owned()),
        );
    }
    second.shutdown().await;
    let again: Vec<_> = seen.intersection(&committed_bodies).collect();
    assert!(
        again.is_empty(),
        "committed messages were seen again: {again:?}"
    );
    assert!(
        uncommitted.is_subset(&seen),
        "uncommitted messages must be seen again"
    );
    let all: BTreeSet<String> = (0..100).map(|i| format!("l-{i}")).collect();
    let union: BTreeSet<String> = seen.union(&committed_bodies).cloned().collect();
    assert_eq!(union, all, "nothing is lost");
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario08b_lite_pull_assign_and_seek() {
    init_logging();
    let server = DevServer::start("client-s08b", &[]);
    let topic = unique("S08b");
    let producer = producer(&server).await;
    let per_queue = send(&producer, &topic, "s", 20).await;
    let consumer = LitePullConsumer::builder(unique("G08b"))
        .namesrv_addr(server.namesrv_addr())
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .auto_commit(false)
        .start()
        .await
        .expect("lite consumer");
    let queues = consumer.fetch_message_queues(&topic).await.expect("queues");
    let (queue, count) = per_queue
        .iter()
        .next()
        .map(|(q, c)| (q.clone(), *c))
        .expect("a queue");
    assert!(queues.contains(&queue));
    consumer.assign([queue.clone()]).await;
    let mut offsets = Vec::new();
    while (offsets.len() as i64) < count {
        let polled = consumer.poll_for(Duration::from_secs(10)).await;
        assert!(!polled.is_empty(), "nothing polled from {queue:?}");
        assert!(polled.iter().all(|m| m.queue.queue_id == queue.queue_id));
        offsets.extend(polled.iter().map(|m| m.queue_offset));
    }
    assert_eq!(offsets, (0..count).collect::<Vec<_>>());
    consumer.seek(&queue, 1).await.expect("seek");
    let again = consumer.poll_for(Duration::from_secs(10)).await;
    assert_eq!(
        again.first().map(|m| m.queue_offset),
        Some(1),
        "seek restarts the pull at 1"
    );
    assert!(
        consumer.seek(&queue, count + 5).await.is_err(),
        "seek past the end is refused"
    );
    consumer.shutdown().await;
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario09_consume_stats_match_what_was_sent_and_consumed() {
    init_logging();
    let server = DevServer::start("client-s09", &[]);
    let topic = unique("S09");
    let group = unique("G09");
    let producer = producer(&server).await;
    let consumed = send(&producer, &topic, "c", 40).await;
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    consume_until_committed(&server, &admin, &group, &topic, &consumed).await;
    // Twelve more that nobody consumes: the lag.
    let mut total = consumed.clone();
    for (queue, offset) in send(&producer, &topic, "lag", 12).await {
        total.insert(queue, offset);
    }
    let stats = admin
        .consume_stats(&group, Some(&topic))
        .await
        .expect("stats");
    let mut lag = 0;
    for (queue, line) in stats
        .offset_table
        .iter()
        .filter(|(queue, _)| queue.topic == topic)
    {
        assert_eq!(
            Some(&line.broker_offset),
            total.get(queue).or(Some(&0)),
            "broker offset of {queue:?}"
        );
        assert_eq!(
            Some(&line.consumer_offset),
            consumed.get(queue).or(Some(&0)),
            "consumer offset of {queue:?}"
        );
        lag += line.broker_offset - line.consumer_offset;
    }
    assert_eq!(lag, 12, "{stats:?}");
    admin.shutdown().await;
    producer.shutdown().await;
}

/// A lite pull consumer of `topic` from its first offset, with auto-commit every
/// `auto_commit_interval`, that has polled exactly `count` messages.
async fn lite_consumer_that_polled(
    server: &DevServer,
    group: &str,
    topic: &str,
    auto_commit_interval: Duration,
    count: usize,
) -> LitePullConsumer {
    let consumer = LitePullConsumer::builder(group)
        .namesrv_addr(server.namesrv_addr())
        .subscribe(topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rebalance_interval(Duration::from_secs(1))
        .auto_commit_interval(auto_commit_interval)
        .start()
        .await
        .expect("lite consumer");
    let mut polled = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while polled < count && Instant::now() < deadline {
        polled += consumer.poll_for(Duration::from_secs(2)).await.len();
    }
    assert_eq!(polled, count);
    consumer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario08c_lite_pull_auto_commit_reaches_the_broker() {
    init_logging();
    let server = DevServer::start("client-s08c", &[]);
    let topic = unique("S08c");
    let group = unique("G08c");
    let producer = producer(&server).await;
    let expected = send(&producer, &topic, "a", 30).await;
    let consumer =
        lite_consumer_that_polled(&server, &group, &topic, Duration::from_secs(1), 30).await;
    // The next poll after the interval commits; the periodic persist takes it to the broker.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    consumer.poll_for(Duration::from_millis(100)).await;
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    let reached = wait_for_commits(&admin, &group, &topic, &expected).await;
    assert_eq!(reached, expected, "auto-committed offsets at the broker");
    consumer.shutdown().await;
    admin.shutdown().await;
    producer.shutdown().await;
}

/// A deliberate rewind by the queue's own consumer is stored, as RocketMQ stores it: a lite pull
/// consumer that seeks back and commits the lower offset finds it at the broker, and a
/// successor starts there. (Tidemark ignores lower commits only from a group member that no
/// longer pulls the queue.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_rewinds_its_own_commit_is_believed() {
    init_logging();
    let server = DevServer::start("client-rewind", &[]);
    let topic = unique("SRew");
    let group = unique("GRew");
    let producer = producer(&server).await;
    let expected = send(&producer, &topic, "a", 20).await;
    let consumer =
        lite_consumer_that_polled(&server, &group, &topic, Duration::from_secs(600), 20).await;
    consumer
        .commit_and_persist(expected.clone())
        .await
        .expect("commit everything");
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    assert_eq!(
        wait_for_commits(&admin, &group, &topic, &expected).await,
        expected
    );
    let (queue, end) = expected
        .iter()
        .find(|(_, end)| **end >= 2)
        .map(|(queue, end)| (queue.clone(), *end))
        .expect("a queue with two messages");
    consumer.seek(&queue, 1).await.expect("seek back");
    consumer
        .commit_and_persist([(queue.clone(), 1)].into())
        .await
        .expect("commit the rewind");
    let mut rewound = expected.clone();
    rewound.insert(queue.clone(), 1);
    assert_eq!(
        wait_for_commits(&admin, &group, &topic, &rewound).await,
        rewound,
        "the broker stores the consumer's deliberate rewind on {queue:?} (was {end})"
    );
    consumer.shutdown().await;
    admin.shutdown().await;
    producer.shutdown().await;
}

/// A push consumer dropped without `shutdown` shuts itself down in the background: its last
/// progress reaches the broker and it leaves the group, so a successor resumes exactly where
/// it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_push_consumer_leaves_the_group_with_its_progress() {
    init_logging();
    let server = DevServer::start("client-drop", &[]);
    let topic = unique("SDROP");
    let group = unique("GDROP");
    let producer = producer(&server).await;
    send(&producer, &topic, "a", 20).await;
    let start = |seen: Arc<Mutex<Vec<String>>>| {
        PushConsumer::builder(group.clone())
            .namesrv_addr(server.namesrv_addr())
            .subscribe(topic.clone(), "*")
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
                let seen = seen.clone();
                async move {
                    seen.lock().expect("lock").extend(
                        messages
                            .iter()
                            .map(|message| String::from_utf8_lossy(&message.body).into_owned()),
                    );
                    ConsumeStatus::Success
                }
            }))
    };
    let first_seen = Arc::new(Mutex::new(Vec::new()));
    let first = start(first_seen.clone()).await.expect("first consumer");
    assert!(
        tidemark_tests::wait_until(Duration::from_secs(60), || first_seen
            .lock()
            .expect("lock")
            .len()
            >= 20)
        .await,
        "the first consumer never saw the first 20 messages"
    );
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    let id = first.client_id().to_owned();
    assert!(admin
        .consumer_ids(&group)
        .await
        .expect("consumer ids")
        .contains(&id));

    drop(first);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ids = admin.consumer_ids(&group).await.expect("consumer ids");
        if !ids.contains(&id) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dropped consumer is still in the group: {ids:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let second_seen = Arc::new(Mutex::new(Vec::new()));
    let second = start(second_seen.clone()).await.expect("second consumer");
    send(&producer, &topic, "b", 5).await;
    assert!(
        tidemark_tests::wait_until(Duration::from_secs(60), || second_seen
            .lock()
            .expect("lock")
            .len()
            >= 5)
        .await,
        "the successor never saw the new messages"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut seen = second_seen.lock().expect("lock").clone();
    seen.sort();
    assert_eq!(
        seen,
        (0..5).map(|i| format!("b-{i}")).collect::<Vec<_>>(),
        "the successor saw exactly what came after the dropped consumer's progress"
    );
    second.shutdown().await;
    producer.shutdown().await;
    admin.shutdown().await;
}

/// A lite pull consumer dropped without `shutdown` commits what it polled (auto-commit) and
/// shuts down in the background: the offsets reach the broker and the group empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lite_pull_consumer_commits_what_it_polled_and_leaves() {
    init_logging();
    let server = DevServer::start("client-drop-lite", &[]);
    let topic = unique("SDROPL");
    let group = unique("GDROPL");
    let producer = producer(&server).await;
    let expected = send(&producer, &topic, "a", 30).await;
    // Auto-commit far away: only the drop can commit what was polled.
    let consumer =
        lite_consumer_that_polled(&server, &group, &topic, Duration::from_secs(600), 30).await;
    let admin = Admin::connect(ClientConfig::new(server.namesrv_addr()))
        .await
        .expect("admin");
    assert!(!admin
        .consumer_ids(&group)
        .await
        .expect("consumer ids")
        .is_empty());

    drop(consumer);
    let reached = wait_for_commits(&admin, &group, &topic, &expected).await;
    assert_eq!(
        reached, expected,
        "the dropped consumer's polled offsets at the broker"
    );
    assert!(
        tidemark_tests::wait_until_async(Duration::from_secs(30), || async {
            admin
                .consumer_ids(&group)
                .await
                .is_ok_and(|ids| ids.is_empty())
        })
        .await,
        "the dropped consumer is still in the group"
    );
    admin.shutdown().await;
    producer.shutdown().await;
}
