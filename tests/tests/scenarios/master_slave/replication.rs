//! Replication, SYNC_MASTER acknowledgements and the slave's synchronisation of metadata.

use super::*;

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
