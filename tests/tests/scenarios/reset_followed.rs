//! A POP consumer (the Rust client's SimpleConsumer, RocketMQ 5's POP over remoting) follows an
//! operator's reset made while it is online: it has received and acknowledged twenty messages of
//! a one-queue topic; the group is reset to the store time of the eleventh; what it receives next
//! is every message from that one on, once more and in order, nothing before it, and its
//! acknowledgements of the replay move the group to the end again.

use std::collections::BTreeMap;
use std::time::Duration;

use tidemark_client::{Admin, ClientConfig, ConsumeFromWhere, Message, Producer, SimpleConsumer};
use tidemark_tests::{init_logging, unique, wait_for_route, DevServer};

const COUNT: i64 = 20;
const RESET_AT: i64 = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_consumer_follows_a_reset_made_while_it_is_online() {
    init_logging();
    let server = DevServer::start("reset-followed", &[]);
    let ns = server.namesrv_addr();
    let (topic, group) = (unique("ResetPop"), unique("ResetPopG"));
    let admin = Admin::connect(ClientConfig::new(ns.as_str()))
        .await
        .expect("admin");
    admin
        .create_topic(
            &server.broker_addr(),
            &tidemark_protocol::body::TopicConfig {
                topic_name: topic.clone(),
                read_queue_nums: 1,
                write_queue_nums: 1,
                ..tidemark_protocol::body::TopicConfig::default()
            },
        )
        .await
        .expect("a one-queue topic");
    assert!(wait_for_route(&ns, &topic).await, "{topic} never routed");
    let producer = Producer::builder(unique("ResetPopP"))
        .namesrv_addr(&ns)
        .start()
        .await
        .expect("producer");
    for index in 0..COUNT {
        producer
            .send(Message::new(topic.as_str(), format!("m{index}")))
            .await
            .expect("sent");
        // Distinct store times: a reset by time names exactly one offset.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    producer.shutdown().await;

    let consumer = SimpleConsumer::builder(&group)
        .namesrv_addr(&ns)
        .subscribe(topic.as_str(), "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .invisible_duration(Duration::from_secs(60))
        .await_duration(Duration::from_secs(1))
        .start()
        .await
        .expect("simple consumer");
    let mut stored_at = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while (stored_at.len() as i64) < COUNT && tokio::time::Instant::now() < deadline {
        for received in consumer.receive(32).await.unwrap_or_default() {
            consumer.ack(&received).await.expect("ack");
            stored_at.insert(
                received.message.queue_offset,
                received.message.store_timestamp,
            );
        }
    }
    assert_eq!(stored_at.len() as i64, COUNT, "the first pass");

    let at = stored_at[&RESET_AT];
    let target = *stored_at
        .iter()
        .find(|(_, stored)| **stored >= at)
        .expect("the target")
        .0;
    let reset = admin
        .reset_offset_by_timestamp(&topic, &group, at, true)
        .await
        .expect("reset");
    assert_eq!(reset.values().copied().collect::<Vec<_>>(), [target]);

    let mut replay = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while (replay.len() as i64) < COUNT - target && tokio::time::Instant::now() < deadline {
        for received in consumer.receive(32).await.unwrap_or_default() {
            replay.push(received.message.queue_offset);
            consumer.ack(&received).await.expect("ack");
        }
    }
    consumer.shutdown().await;
    assert_eq!(
        replay,
        (target..COUNT).collect::<Vec<_>>(),
        "after the reset to {target} the consumer received"
    );
    let stats = admin
        .consume_stats(&group, Some(&topic))
        .await
        .expect("consume stats");
    let committed: Vec<i64> = stats
        .offset_table
        .values()
        .map(|line| line.consumer_offset)
        .collect();
    admin.shutdown().await;
    assert_eq!(committed, [COUNT], "the replay acknowledged to the end");
    println!("POP consumer reset to {target}: received {replay:?} again");
}
