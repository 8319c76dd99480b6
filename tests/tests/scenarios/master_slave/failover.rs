//! Consumer progress through a master failover, a returning master, and resets.

use super::*;

/// Deliveries per message id.
#[derive(Clone, Default)]
struct Tally(Arc<Mutex<BTreeMap<String, usize>>>);

impl Tally {
    fn listener(&self, delay: Duration) -> impl tidemark_client::ConcurrentListener {
        let tally = self.0.clone();
        concurrent_fn(move |messages: Vec<MessageExt>| {
            let tally = tally.clone();
            async move {
                tokio::time::sleep(delay).await;
                let mut tally = tally.lock().expect("lock");
                for message in messages {
                    *tally.entry(message.msg_id).or_default() += 1;
                }
                ConsumeStatus::Success
            }
        })
    }

    fn distinct(&self) -> usize {
        self.0.lock().expect("lock").len()
    }

    fn snapshot(&self) -> BTreeMap<String, usize> {
        self.0.lock().expect("lock").clone()
    }
}

fn consumer(set: &BrokerSet, group: &str, topic: &str) -> tidemark_client::PushConsumerBuilder {
    let mut config = ClientConfig::new(set.namesrv_addr());
    config.poll_name_server_interval = Duration::from_secs(1);
    config.persist_offset_interval = Duration::from_secs(1);
    PushConsumer::builder(group)
        .client_config(config)
        .subscribe(topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rebalance_interval(Duration::from_secs(1))
        .consume_concurrency(1)
        .pull_batch_size(4)
}

async fn offsets_on(
    client: &RemotingClient,
    addr: &str,
    group: &str,
    topic: &str,
) -> BTreeMap<i32, i64> {
    let mut offsets = BTreeMap::new();
    for queue_id in 0..QUEUES {
        if let Some(offset) = committed(client, addr, group, topic, queue_id).await {
            offsets.insert(queue_id, offset);
        }
    }
    offsets
}

/// The failover run: consume steadily, SIGKILL the master, keep consuming from the slave, then
/// bring the master back (`outage` later) and consume what was produced after. With
/// `fresh_consumer` the first consumer stops during the outage and a new one takes over after
/// the master is back — it finds its progress only if the master learned what was committed
/// on the slave (RocketMQ's slave sync would instead overwrite the slave with the master's
/// stale offsets, and the new consumer would replay the outage).
async fn failover(name: &str, outage: Duration, fresh_consumer: bool) {
    init_logging();
    let mut set = BrokerSet::start(
        name,
        &["ASYNC_MASTER", "SLAVE"],
        "slave_sync_interval_ms = 2000\nflush_consumer_offset_interval = 1000",
    );
    let topic = unique("MSF");
    let group = unique("GMSF");
    let producer = producer(&set).await;
    let mut sent = BTreeSet::new();
    for i in 0..240 {
        sent.insert(
            producer
                .send(Message::new(&topic, format!("before-{i}")))
                .await
                .expect("send")
                .msg_id,
        );
    }
    assert!(wait_replicated(&set, &topic).await, "{}", set.tails());

    let tally = Tally::default();
    let first = consumer(&set, &group, &topic)
        .start_concurrently(tally.listener(Duration::from_millis(15)))
        .await
        .expect("consumer");
    assert!(
        wait_until(Duration::from_secs(60), || tally.distinct() >= 80).await,
        "{}",
        set.tails()
    );
    let client = raw();
    let master_before = offsets_on(&client, &set.broker_addr(0), &group, &topic).await;
    let slave_before = offsets_on(&client, &set.broker_addr(1), &group, &topic).await;
    let unconsumed = 240 - tally.distinct();
    set.brokers[0].kill();
    let killed_at = Instant::now();

    // Consumption continues from the slave.
    assert!(
        wait_until(Duration::from_secs(90), || tally.distinct() == 240).await,
        "consumption stalled after the master died: {} of 240\n{}",
        tally.distinct(),
        set.tails()
    );
    if fresh_consumer {
        first.shutdown().await;
    }
    tokio::time::sleep(outage.saturating_sub(killed_at.elapsed())).await;
    let slave_during = offsets_on(&raw(), &set.broker_addr(1), &group, &topic).await;
    set.brokers[0].restart();
    if fresh_consumer {
        // No consumer is running: the master can learn the progress made during the outage
        // only from the slave.
        let learned = wait_until_async(Duration::from_secs(30), || async {
            let master = offsets_on(&raw(), &set.broker_addr(0), &group, &topic).await;
            slave_during
                .iter()
                .all(|(queue, offset)| master.get(queue).is_some_and(|m| m >= offset))
        })
        .await;
        assert!(
            learned,
            "the master never learned the slave's offsets {slave_during:?}\n{}",
            set.tails()
        );
    }

    let producer_after = producer_with_retry(&set).await;
    for i in 0..40 {
        sent.insert(
            producer_after
                .send(Message::new(&topic, format!("after-{i}")))
                .await
                .expect("send")
                .msg_id,
        );
    }
    let second = if fresh_consumer {
        Some(
            consumer(&set, &group, &topic)
                .start_concurrently(tally.listener(Duration::from_millis(1)))
                .await
                .expect("second consumer"),
        )
    } else {
        None
    };
    let everything = wait_until(Duration::from_secs(90), || tally.distinct() == sent.len()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let counts = tally.snapshot();
    let lost: Vec<_> = sent.iter().filter(|id| !counts.contains_key(*id)).collect();
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    println!(
        "{name}: {} messages, {} deliveries, {duplicates} duplicates, {} lost; not yet consumed at the kill: {unconsumed}",
        sent.len(),
        counts.values().sum::<usize>(),
        lost.len()
    );
    assert!(
        everything && lost.is_empty(),
        "lost {lost:?}\n{}",
        set.tails()
    );
    // Up to a pull batch per queue may be in a process queue, plus one in the listener.
    let bound = (4 * QUEUES + 1) as usize;
    assert!(
        duplicates <= bound,
        "{duplicates} duplicates (bound {bound})"
    );

    if let Some(second) = second {
        second.shutdown().await;
    } else {
        first.shutdown().await;
    }
    // The consumer's last commits went to the master; the slave has them after a slave sync
    // (every 2 s here), and it sends the master what it holds ahead: the two agree then.
    let synced = wait_until_async(Duration::from_secs(30), || async {
        let master = offsets_on(&client, &set.broker_addr(0), &group, &topic).await;
        let slave = offsets_on(&client, &set.broker_addr(1), &group, &topic).await;
        !master.is_empty() && master == slave
    })
    .await;
    let master_after = offsets_on(&client, &set.broker_addr(0), &group, &topic).await;
    let slave_after = offsets_on(&client, &set.broker_addr(1), &group, &topic).await;
    assert!(
        synced,
        "the slave's offsets {slave_after:?} never matched the master's {master_after:?}\n{}",
        set.tails()
    );
    for (queue_id, before) in master_before.iter().chain(slave_before.iter()) {
        for (side, after) in [("master", &master_after), ("slave", &slave_after)] {
            let now = after.get(queue_id).copied().unwrap_or(-1);
            assert!(
                now >= *before,
                "{side} offset of queue {queue_id} went back: {before} -> {now}"
            );
        }
    }
    producer_after.shutdown().await;
    producer.shutdown().await;
}

/// A producer made after the master returned, once the name server routes to it again.
async fn producer_with_retry(set: &BrokerSet) -> Producer {
    let producer = producer(set).await;
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        match producer.send(Message::new("MS_PROBE", "probe")).await {
            Ok(_) => return producer,
            Err(error) if Instant::now() > deadline => {
                panic!("no master to send to: {error}\n{}", set.tails())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// A master returns after an outage during which the group consumed everything from the slave
/// and committed there. From its very first answer the master knows that progress (it takes
/// its slaves' offsets before it serves), so a consumer that starts the moment it is back gets
/// nothing again. Before, the master answered its pre-crash offsets until the slave's next sync
/// (up to `slave_sync_interval_ms`, 10 s here): 13,028 duplicates were measured that way, the
/// shape of apache/rocketmq#1094.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_master_answers_with_the_progress_made_on_its_slave() {
    init_logging();
    let mut set = BrokerSet::start("ms-return", &["ASYNC_MASTER", "SLAVE"], "");
    let topic = unique("MSR");
    let group = unique("GMSR");
    let producer = producer(&set).await;
    for i in 0..400 {
        producer
            .send(Message::new(&topic, format!("m-{i}")))
            .await
            .expect("send");
    }
    assert!(wait_replicated(&set, &topic).await, "{}", set.tails());
    let tally = Tally::default();
    let first = consumer(&set, &group, &topic)
        .start_concurrently(tally.listener(Duration::from_millis(5)))
        .await
        .expect("consumer");
    // Some progress on the master, then it dies and the rest is consumed from the slave.
    assert!(
        wait_until(Duration::from_secs(60), || tally.distinct() >= 100).await,
        "{}",
        set.tails()
    );
    set.brokers[0].kill();
    assert!(
        wait_until(Duration::from_secs(90), || tally.distinct() == 400).await,
        "consumption stalled after the master died: {} of 400\n{}",
        tally.distinct(),
        set.tails()
    );
    first.shutdown().await;
    let client = raw();
    let on_slave = offsets_on(&client, &set.broker_addr(1), &group, &topic).await;
    assert_eq!(on_slave.len(), QUEUES as usize, "{}", set.tails());
    // With the master down, the admin tools read the group's progress and the topic from the
    // slave, and say so. (The slave learns a topic created on the master with its next slave
    // sync, so the topic's status may take up to one interval.)
    for args in [
        vec![
            "consumer-progress",
            "-g",
            group.as_str(),
            "-t",
            topic.as_str(),
        ],
        vec!["topic-status", "-t", topic.as_str()],
    ] {
        let namesrv = set.namesrv_addr();
        let run = || {
            std::process::Command::new(tidemark_binary())
                .arg("admin")
                .args(&args)
                .args(["-n", namesrv.as_str()])
                .output()
                .expect("tidemark admin runs")
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut output = run();
        while !output.status.success() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_secs(1)).await;
            output = run();
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "tidemark admin {args:?} failed while the master is down: {}{}",
            String::from_utf8_lossy(&output.stderr),
            set.tails()
        );
        let answered = format!("answered by {} (slave", set.broker_addr(1));
        assert!(stdout.contains(&answered), "{args:?}:\n{stdout}");
        assert!(
            stdout.lines().count() > QUEUES as usize,
            "a line per queue: {args:?}:\n{stdout}"
        );
    }

    set.brokers[0].restart();
    // The master's first answers, as soon as it gives any.
    let first_answers: Arc<Mutex<BTreeMap<i32, i64>>> = Arc::default();
    let answered = wait_until_async(Duration::from_secs(30), || {
        let (client, addr, group, topic) =
            (raw(), set.broker_addr(0), group.clone(), topic.clone());
        let first_answers = first_answers.clone();
        async move {
            for queue_id in 0..QUEUES {
                if first_answers.lock().expect("lock").contains_key(&queue_id) {
                    continue;
                }
                if let Some(offset) = committed(&client, &addr, &group, &topic, queue_id).await {
                    first_answers.lock().expect("lock").insert(queue_id, offset);
                }
            }
            let answered = first_answers.lock().expect("lock").len() == QUEUES as usize;
            answered
        }
    })
    .await;
    let first_answers = first_answers.lock().expect("lock").clone();
    assert!(answered, "the master never answered\n{}", set.tails());
    for (queue_id, slave_offset) in &on_slave {
        assert!(
            first_answers[queue_id] >= *slave_offset,
            "queue {queue_id}: the returning master first answered {} though {slave_offset} was committed on the slave\n{}",
            first_answers[queue_id],
            set.tails()
        );
    }
    let before = tally.snapshot();
    let second = consumer(&set, &group, &topic)
        .start_concurrently(tally.listener(Duration::from_millis(1)))
        .await
        .expect("second consumer");
    tokio::time::sleep(Duration::from_secs(5)).await;
    second.shutdown().await;
    let after = tally.snapshot();
    let again: usize = after
        .iter()
        .map(|(id, count)| count - before.get(id).copied().unwrap_or(0))
        .sum();
    println!(
        "returning master: first answers {first_answers:?}, slave had {on_slave:?}; a consumer started right after got {again} again (before: up to everything consumed during the outage)"
    );
    assert_eq!(
        again, 0,
        "messages delivered again after the master returned"
    );
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_keeps_progress_through_a_short_master_outage() {
    failover("ms-failover-short", Duration::from_secs(1), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_keeps_progress_when_the_master_is_away_longer_than_slave_sync() {
    failover("ms-failover-long", Duration::from_secs(8), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reset_reaches_the_slave_and_no_stale_copy_undoes_it() {
    init_logging();
    let set = BrokerSet::start(
        "ms-reset",
        &["ASYNC_MASTER", "SLAVE"],
        "slave_sync_interval_ms = 1000\nflush_consumer_offset_interval = 1000",
    );
    let topic = unique("MSR");
    let group = unique("GMSR");
    let producer = producer(&set).await;
    for i in 0..40 {
        producer
            .send(Message::new(&topic, format!("r{i}")))
            .await
            .expect("send");
    }
    let tally = Tally::default();
    let first = consumer(&set, &group, &topic)
        .start_concurrently(tally.listener(Duration::from_millis(0)))
        .await
        .expect("consumer");
    assert!(wait_until(Duration::from_secs(60), || tally.distinct() == 40).await);
    first.shutdown().await;
    let client = raw();
    let consumed = wait_until_async(Duration::from_secs(20), || async {
        let on_slave = offsets_on(&client, &set.broker_addr(1), &group, &topic).await;
        on_slave.values().sum::<i64>() == 40
    })
    .await;
    assert!(
        consumed,
        "the slave never saw the group's progress\n{}",
        set.tails()
    );

    let admin = tidemark_client::Admin::connect(ClientConfig::new(set.namesrv_addr()))
        .await
        .expect("admin");
    let reset = admin
        .reset_offset_by_timestamp(&topic, &group, 0, true)
        .await
        .expect("reset");
    assert!(reset.values().all(|offset| *offset == 0), "{reset:?}");
    // The slave takes the lower, reset offsets (a newer epoch) ...
    let adopted = wait_until_async(Duration::from_secs(15), || async {
        let on_slave = offsets_on(&client, &set.broker_addr(1), &group, &topic).await;
        !on_slave.is_empty() && on_slave.values().all(|offset| *offset == 0)
    })
    .await;
    assert!(
        adopted,
        "the slave kept its pre-reset offsets\n{}",
        set.tails()
    );
    // ... and never pushes its old ones back to the master.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let on_master = offsets_on(&client, &set.broker_addr(0), &group, &topic).await;
    assert!(
        on_master.values().all(|offset| *offset == 0),
        "the reset was undone: {on_master:?}"
    );
    // A consumer of the group now reads everything again.
    let again = Tally::default();
    let second = consumer(&set, &group, &topic)
        .start_concurrently(again.listener(Duration::from_millis(0)))
        .await
        .expect("consumer");
    assert!(wait_until(Duration::from_secs(60), || again.distinct() == 40).await);
    second.shutdown().await;
    admin.shutdown().await;
    producer.shutdown().await;
}
