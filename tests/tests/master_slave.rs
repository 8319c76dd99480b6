//! Master and slave as separate processes: replication, SYNC_MASTER acknowledgements, slave
//! synchronisation, and consumer progress through a master failover (issue 7).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tidemark_client::{
    concurrent_fn, ClientConfig, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer,
    PushConsumer, SendStatus,
};
use tidemark_protocol::body::{
    ConsumerOffsetWrapper, DelayOffsetWrapper, SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
};
use tidemark_protocol::headers::{
    pull_sys_flag, GetMaxOffsetRequestHeader, OffsetResponseHeader, PullMessageRequestHeader,
    PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingClient;
use tidemark_tests::{
    init_logging, tidemark_binary, unique, wait_until, wait_until_async, BrokerSet,
};

const CALL: Duration = Duration::from_secs(3);
const QUEUES: i32 = 4;

fn raw() -> RemotingClient {
    RemotingClient::new(Default::default(), None)
}

async fn max_offset(
    client: &RemotingClient,
    addr: &str,
    topic: &str,
    queue_id: i32,
) -> Option<i64> {
    let header = GetMaxOffsetRequestHeader {
        topic: topic.to_owned(),
        queue_id,
        committed: None,
        broker_name: None,
    };
    offset_call(
        client,
        addr,
        RemotingCommand::request_with_header(RequestCode::GetMaxOffset, &header),
    )
    .await
}

/// A request answered with an `offset` header: `None` on any failure or refusal.
async fn offset_call(client: &RemotingClient, addr: &str, request: RemotingCommand) -> Option<i64> {
    let response = client.invoke(addr, request, CALL).await.ok()?;
    if response.response_code() != ResponseCode::Success {
        return None;
    }
    response
        .decode_header::<OffsetResponseHeader>()
        .ok()
        .map(|header| header.offset)
}

async fn committed(
    client: &RemotingClient,
    addr: &str,
    group: &str,
    topic: &str,
    queue_id: i32,
) -> Option<i64> {
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: group.to_owned(),
        topic: topic.to_owned(),
        queue_id,
        set_zero_if_not_found: Some(false),
        broker_name: None,
    };
    offset_call(
        client,
        addr,
        RemotingCommand::request_with_header(RequestCode::QueryConsumerOffset, &header),
    )
    .await
}

/// Every stored record of a queue, concatenated, as the broker serves them to pulls.
async fn pull_all(
    client: &RemotingClient,
    addr: &str,
    topic: &str,
    queue_id: i32,
    end: i64,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < end {
        let header = PullMessageRequestHeader {
            consumer_group: "ms_compare".into(),
            topic: topic.to_owned(),
            queue_id,
            queue_offset: offset,
            max_msg_nums: 32,
            sys_flag: pull_sys_flag::SUBSCRIPTION,
            commit_offset: 0,
            suspend_timeout_millis: 0,
            subscription: Some("*".into()),
            sub_version: 0,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            broker_name: None,
        };
        let response = client
            .invoke(
                addr,
                RemotingCommand::request_with_header(RequestCode::PullMessage, &header),
                CALL,
            )
            .await
            .expect("pull");
        assert_eq!(
            response.response_code(),
            ResponseCode::Success,
            "pull {topic}/{queue_id}@{offset} from {addr}"
        );
        let header: PullMessageResponseHeader = response.decode_header().expect("pull header");
        // Without slave reads enabled, consumers are always sent back to the master.
        assert_eq!(
            header.suggest_which_broker_id, 0,
            "suggested broker for {addr}"
        );
        out.extend_from_slice(&response.body);
        offset = header.next_begin_offset;
    }
    out
}

async fn fetch_body(client: &RemotingClient, addr: &str, code: RequestCode) -> Option<Bytes> {
    let response = client
        .invoke(addr, RemotingCommand::request(code), CALL)
        .await
        .ok()?;
    (response.response_code() == ResponseCode::Success).then_some(response.body)
}

async fn producer(set: &BrokerSet) -> Producer {
    Producer::builder(unique("producer"))
        .namesrv_addr(set.namesrv_addr())
        .default_topic_queue_nums(QUEUES)
        .start()
        .await
        .expect("producer")
}

/// Waits until the slave's queues of `topic` are as long as the master's.
async fn wait_replicated(set: &BrokerSet, topic: &str) -> bool {
    let client = raw();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let mut same = true;
        for queue_id in 0..QUEUES {
            let master = max_offset(&client, &set.broker_addr(0), topic, queue_id).await;
            let slave = max_offset(&client, &set.broker_addr(1), topic, queue_id).await;
            same &= master.is_some() && master == slave;
        }
        if same {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_makes_every_message_readable_on_the_slave_byte_identical() {
    init_logging();
    // Pulls need the topic's config, which the slave gets from slave synchronisation.
    let set = BrokerSet::start(
        "ms-repl",
        &["ASYNC_MASTER", "SLAVE"],
        "slave_sync_interval_ms = 1000",
    );
    let topic = unique("MS1");
    let producer = producer(&set).await;
    for i in 0..120 {
        let body = if i % 40 == 0 {
            "z".repeat(9000)
        } else {
            format!("replicated-{i}")
        };
        producer
            .send(
                Message::new(&topic, body)
                    .with_tags("T")
                    .with_keys([format!("k{i}")]),
            )
            .await
            .expect("send");
    }
    assert!(
        wait_replicated(&set, &topic).await,
        "the slave did not catch up\n{}",
        set.tails()
    );
    let client = raw();
    for queue_id in 0..QUEUES {
        let end = max_offset(&client, &set.broker_addr(0), &topic, queue_id)
            .await
            .expect("max");
        let on_master = pull_all(&client, &set.broker_addr(0), &topic, queue_id, end).await;
        let on_slave = pull_all(&client, &set.broker_addr(1), &topic, queue_id, end).await;
        assert!(!on_master.is_empty());
        assert!(
            on_slave == on_master,
            "queue {queue_id}: the slave's records differ from the master's"
        );
    }
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_master_acknowledges_after_the_slave_and_says_when_it_cannot() {
    init_logging();
    let mut set = BrokerSet::start("ms-sync", &["SYNC_MASTER", "SLAVE"], "slave_timeout = 1500");
    let topic = unique("MS2");
    let producer = producer(&set).await;
    // Until the slave has connected, sends are stored but answered SLAVE_NOT_AVAILABLE.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut status = SendStatus::SlaveNotAvailable;
    while status != SendStatus::SendOk && Instant::now() < deadline {
        status = producer
            .send(Message::new(&topic, "probe"))
            .await
            .expect("send")
            .status;
        if status != SendStatus::SendOk {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    assert_eq!(
        status,
        SendStatus::SendOk,
        "never acknowledged through the slave\n{}",
        set.tails()
    );
    for i in 0..20 {
        let sent = producer
            .send(Message::new(&topic, format!("s{i}")))
            .await
            .expect("send");
        assert_eq!(sent.status, SendStatus::SendOk);
    }

    // A slave that stops answering: the send waits slave_timeout, then FLUSH_SLAVE_TIMEOUT.
    set.brokers[1].signal("STOP");
    let started = Instant::now();
    let sent = producer
        .send(Message::new(&topic, "while stopped"))
        .await
        .expect("send");
    assert_eq!(sent.status, SendStatus::FlushSlaveTimeout);
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "answered before the timeout"
    );
    set.brokers[1].signal("CONT");

    // A slave that is gone: SLAVE_NOT_AVAILABLE at once, the message still stored.
    set.brokers[1].kill();
    let mut gone = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while gone.is_none() && Instant::now() < deadline {
        let sent = producer
            .send(Message::new(&topic, "after the slave died"))
            .await
            .expect("send");
        if sent.status == SendStatus::SlaveNotAvailable {
            gone = Some(sent);
        }
    }
    let gone = gone.expect("SLAVE_NOT_AVAILABLE once the slave is gone");
    let client = raw();
    let stored = max_offset(&client, &set.broker_addr(0), &topic, gone.queue.queue_id)
        .await
        .expect("max");
    assert!(
        stored > gone.queue_offset,
        "the message is stored on the master"
    );
    producer.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slave_synchronisation_copies_topics_groups_and_offsets_within_an_interval() {
    init_logging();
    let set = BrokerSet::start(
        "ms-meta",
        &["ASYNC_MASTER", "SLAVE"],
        "slave_sync_interval_ms = 2000\nflush_consumer_offset_interval = 1000\nmessage_delay_level = \"1s 2s 3s\"",
    );
    let topic = unique("MS3");
    let group = unique("GMS3");
    let producer = producer(&set).await;
    for i in 0..10 {
        producer
            .send(Message::new(&topic, format!("m{i}")))
            .await
            .expect("send");
    }
    producer
        .send(Message::new(&topic, "delayed").with_delay_level(1))
        .await
        .expect("delayed send");
    let seen = Arc::new(Mutex::new(0usize));
    let counter = seen.clone();
    let consumer = PushConsumer::builder(&group)
        .namesrv_addr(set.namesrv_addr())
        .subscribe(&topic, "*")
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
    assert!(
        wait_until(Duration::from_secs(30), || *seen.lock().expect("lock")
            >= 11)
        .await
    );
    consumer.shutdown().await;

    let client = raw();
    let master = set.broker_addr(0);
    let slave = set.broker_addr(1);
    let expected_offsets = {
        let body = fetch_body(&client, &master, RequestCode::GetAllConsumerOffset)
            .await
            .expect("master offsets");
        ConsumerOffsetWrapper::from_json_bytes(&body)
            .expect("parse")
            .offset_table
    };
    let key = format!("{topic}@{group}");
    assert!(expected_offsets.contains_key(&key), "{expected_offsets:?}");

    let synced = wait_until_async(Duration::from_secs(10), || async {
        let topics = fetch_body(&client, &slave, RequestCode::GetAllTopicConfig).await;
        let groups = fetch_body(&client, &slave, RequestCode::GetAllSubscriptionGroupConfig).await;
        let offsets = fetch_body(&client, &slave, RequestCode::GetAllConsumerOffset).await;
        let delays = fetch_body(&client, &slave, RequestCode::GetAllDelayOffset).await;
        let (Some(topics), Some(groups), Some(offsets), Some(delays)) =
            (topics, groups, offsets, delays)
        else {
            return false;
        };
        let topics =
            TopicConfigSerializeWrapper::from_json_bytes(&topics).map(|w| w.topic_config_table);
        let groups =
            SubscriptionGroupWrapper::from_json_bytes(&groups).map(|w| w.subscription_group_table);
        let offsets = ConsumerOffsetWrapper::from_json_bytes(&offsets).map(|w| w.offset_table);
        let delays = DelayOffsetWrapper::from_json_bytes(&delays).map(|w| w.offset_table);
        matches!(topics, Ok(t) if t.contains_key(&topic))
            && matches!(groups, Ok(g) if g.contains_key(&group))
            && matches!(offsets, Ok(o) if o.get(&key) == expected_offsets.get(&key))
            && matches!(delays, Ok(d) if d.get(&1).is_some_and(|offset| *offset >= 1))
    })
    .await;
    assert!(
        synced,
        "the slave did not take the master's metadata\n{}",
        set.tails()
    );
    // And persisted it.
    let config = set.store_root(1).join("config");
    for file in [
        "topics.json",
        "subscriptionGroup.json",
        "consumerOffset.json",
        "delayOffset.json",
    ] {
        // Consumer offsets are written by the next offset flush (1 s here).
        let written = wait_until(Duration::from_secs(10), || {
            !std::fs::read_to_string(config.join(file))
                .unwrap_or_default()
                .is_empty()
        })
        .await;
        assert!(written, "{file} not written on the slave\n{}", set.tails());
    }
    assert!(std::fs::read_to_string(config.join("topics.json"))
        .unwrap_or_default()
        .contains(&topic));
    producer.shutdown().await;
}

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
    tokio::time::sleep(Duration::from_secs(3)).await;
    let master_after = offsets_on(&client, &set.broker_addr(0), &group, &topic).await;
    let slave_after = offsets_on(&client, &set.broker_addr(1), &group, &topic).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_reads_are_steered_to_the_slave_when_slave_reads_are_enabled() {
    init_logging();
    // Every read counts as cold at a 0 % in-memory ratio.
    let set = BrokerSet::start(
        "ms-steer",
        &["ASYNC_MASTER", "SLAVE"],
        "slave_read_enable = true\naccess_message_in_memory_max_ratio = 0",
    );
    let topic = unique("MSS");
    let producer = producer(&set).await;
    for i in 0..8 {
        producer
            .send(Message::new(&topic, format!("c{i}")))
            .await
            .expect("send");
    }
    let client = raw();
    let mut suggested = Vec::new();
    for queue_id in 0..QUEUES {
        if max_offset(&client, &set.broker_addr(0), &topic, queue_id)
            .await
            .unwrap_or(0)
            == 0
        {
            continue;
        }
        let header = PullMessageRequestHeader {
            consumer_group: "ms_steer".into(),
            topic: topic.clone(),
            queue_id,
            queue_offset: 0,
            max_msg_nums: 1,
            sys_flag: pull_sys_flag::SUBSCRIPTION,
            commit_offset: 0,
            suspend_timeout_millis: 0,
            subscription: Some("*".into()),
            sub_version: 0,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            broker_name: None,
        };
        let response = client
            .invoke(
                &set.broker_addr(0),
                RemotingCommand::request_with_header(RequestCode::PullMessage, &header),
                CALL,
            )
            .await
            .expect("pull");
        assert_eq!(response.response_code(), ResponseCode::Success);
        let header: PullMessageResponseHeader = response.decode_header().expect("header");
        suggested.push(header.suggest_which_broker_id);
    }
    assert!(!suggested.is_empty());
    assert!(
        suggested.iter().all(|id| *id == 1),
        "the group's whichBrokerWhenConsumeSlowly (1) is suggested for cold reads: {suggested:?}"
    );
    producer.shutdown().await;
}
