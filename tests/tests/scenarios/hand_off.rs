//! Queues handed over in a rebalance: with a steady stream, a group scales from 1 to 4 Rust push
//! consumers and back to 1. A consumer giving a queue up lets its running listener calls finish
//! and commits its final progress (offset and acknowledged ranges) as a release; the one taking
//! the queue over waits for that before it pulls. So no message whose consumption completed is
//! delivered again. RocketMQ's rebalance has no hand-off: the new owner starts from the last
//! offset the old one happened to commit, and everything consumed since comes again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_client::{
    concurrent_fn, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer,
};
use tidemark_tests::{against_apache, init_logging, unique, wait_until, DevServer};

/// Completed deliveries per message body.
type Completed = Arc<Mutex<BTreeMap<String, usize>>>;

async fn consumer(namesrv: &str, group: &str, topic: &str, completed: &Completed) -> PushConsumer {
    let completed = completed.clone();
    PushConsumer::builder(group)
        .namesrv_addr(namesrv)
        .subscribe(topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .rebalance_interval(Duration::from_secs(2))
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let completed = completed.clone();
            async move {
                // Some work, so messages are in flight whenever a queue moves.
                tokio::time::sleep(Duration::from_millis(10)).await;
                let mut completed = completed.lock().expect("lock");
                for message in messages {
                    *completed
                        .entry(String::from_utf8_lossy(&message.body).into_owned())
                        .or_default() += 1;
                }
                ConsumeStatus::Success
            }
        }))
        .await
        .expect("consumer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_one_to_four_to_one_redelivers_nothing_completed() {
    if against_apache() {
        eprintln!("skipped: hand-off is Tidemark's extension");
        return;
    }
    init_logging();
    let server = DevServer::start("hand-off", &[]);
    let namesrv = server.namesrv_addr();
    let topic = unique("HandOffT");
    let group = unique("HandOffG");
    let producer = Producer::builder(unique("producer"))
        .namesrv_addr(&namesrv)
        .start()
        .await
        .expect("producer");
    producer
        .send(Message::new(topic.as_str(), "m-first"))
        .await
        .expect("send");
    let sent = Arc::new(AtomicUsize::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    // About 500 messages a second.
    let stream = {
        let (producer, topic, sent, stop) =
            (producer.clone(), topic.clone(), sent.clone(), stop.clone());
        tokio::spawn(async move {
            let mut next = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let batch = (0..10)
                    .map(|i| Message::new(topic.as_str(), format!("m-{}", next + i)))
                    .collect();
                producer.send_batch(batch).await.expect("send batch");
                next += 10;
                sent.fetch_add(10, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let completed: Completed = Arc::default();
    let first = consumer(&namesrv, &group, &topic, &completed).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut more = Vec::new();
    for _ in 0..3 {
        more.push(consumer(&namesrv, &group, &topic, &completed).await);
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    for consumer in more {
        consumer.shutdown().await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);
    stream.await.expect("stream");
    producer.shutdown().await;
    let total = sent.load(Ordering::Relaxed);
    let all = wait_until(Duration::from_secs(60), || {
        completed.lock().expect("lock").len() >= total
    })
    .await;
    first.shutdown().await;
    let completed = completed.lock().expect("lock").clone();
    assert!(
        all,
        "{} of {total} messages consumed\n{}",
        completed.len(),
        server.tail_text()
    );
    let duplicates: Vec<(&String, &usize)> =
        completed.iter().filter(|(_, count)| **count > 1).collect();
    println!(
        "scale 1 -> 4 -> 1 at ~500 msg/s: {total} messages, {} delivered again after completing \
         (RocketMQ: whatever each old owner consumed since its last commit)",
        duplicates.len()
    );
    assert!(
        duplicates.is_empty(),
        "{} messages delivered again after completing, e.g. {:?}",
        duplicates.len(),
        &duplicates[..duplicates.len().min(5)]
    );
}
