//! Two name servers and two broker groups (broker-a and broker-b, each a master registered with
//! both name servers): a topic's queues on both; a producer and a push consumer use both; one
//! name server SIGKILLed, then one whole broker group — what is left keeps working and every
//! message acknowledged to the producer while the group lived is consumed.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_client::{
    concurrent_fn, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer,
};
use tidemark_tests::{
    against_apache, init_logging, start_broker_process, start_namesrv, tidemark_binary, unique,
    wait_until, ServerProcess,
};

/// A name server (`label` names its log) and its port.
fn namesrv(label: &str) -> (ServerProcess, u16) {
    start_namesrv(&format!("two-groups-namesrv-{label}"), &[])
}

fn broker(dir: &std::path::Path, name: &str, namesrv: &str) -> (ServerProcess, String) {
    let (process, port) = start_broker_process(
        &format!("two-groups-{name}"),
        dir,
        name,
        &format!(
            "broker_name = \"{name}\"\nbroker_id = 0\nbroker_role = \"ASYNC_MASTER\"\n\
             namesrv_addr = \"{namesrv}\"\nregister_name_server_period = 2000"
        ),
    );
    (process, format!("127.0.0.1:{port}"))
}

type Seen = Arc<Mutex<BTreeSet<String>>>;

/// Sends `count` messages `{prefix}-{i}`; returns the bodies acknowledged, by broker name.
async fn send(
    producer: &Producer,
    topic: &str,
    prefix: &str,
    count: usize,
) -> BTreeMap<String, Vec<String>> {
    let mut acked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for index in 0..count {
        let body = format!("{prefix}-{index}");
        if let Ok(result) = producer.send(Message::new(topic, body.clone())).await {
            acked
                .entry(result.queue.broker_name.clone())
                .or_default()
                .push(body);
        }
    }
    acked
}

fn all(acked: &BTreeMap<String, Vec<String>>) -> BTreeSet<String> {
    acked.values().flatten().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rest_keeps_working_when_a_name_server_and_then_a_broker_group_die() {
    if against_apache() {
        eprintln!("skipped: starts Tidemark name servers and brokers itself");
        return;
    }
    init_logging();
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut ns1, ns1_port) = namesrv("1");
    let (_ns2, ns2_port) = namesrv("2");
    let namesrvs = format!("127.0.0.1:{ns1_port};127.0.0.1:{ns2_port}");
    let (_broker_a, _) = broker(dir.path(), "broker-a", &namesrvs);
    let (mut broker_b, _) = broker(dir.path(), "broker-b", &namesrvs);

    // The topic on every master of the cluster, 4 queues each.
    let topic = unique("TwoGroups");
    let created = Command::new(tidemark_binary())
        .args([
            "admin",
            "topic-create",
            "-n",
            &namesrvs,
            "-c",
            "DefaultCluster",
            "-t",
            &topic,
            "-r",
            "4",
            "-w",
            "4",
            "--json",
        ])
        .output()
        .expect("run tidemark admin");
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );

    let producer = Producer::builder(unique("TwoGroupsP"))
        .namesrv_addr(&namesrvs)
        .start()
        .await
        .expect("producer");
    let seen: Seen = Arc::default();
    let consumer = {
        let seen = seen.clone();
        PushConsumer::builder(unique("TwoGroupsG"))
            .namesrv_addr(&namesrvs)
            .subscribe(topic.as_str(), "*")
            .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
            .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
                let seen = seen.clone();
                async move {
                    let mut seen = seen.lock().expect("lock");
                    for message in messages {
                        seen.insert(String::from_utf8_lossy(&message.body).into_owned());
                    }
                    ConsumeStatus::Success
                }
            }))
            .await
            .expect("consumer")
    };
    let consumed = |wanted: &BTreeSet<String>| seen.lock().expect("lock").is_superset(wanted);

    // Both groups take messages; everything is consumed.
    let first = send(&producer, &topic, "both", 200).await;
    assert_eq!(all(&first).len(), 200, "every send is acknowledged");
    assert_eq!(
        first.keys().cloned().collect::<Vec<_>>(),
        vec!["broker-a".to_owned(), "broker-b".to_owned()],
        "the producer spreads over both groups"
    );
    let wanted = all(&first);
    assert!(
        wait_until(Duration::from_secs(60), || consumed(&wanted)).await,
        "consumed {} of 200 from both groups",
        seen.lock().expect("lock").len()
    );

    // One name server goes: clients and brokers carry on with the other.
    ns1.kill();
    let second = send(&producer, &topic, "one-namesrv", 200).await;
    assert_eq!(all(&second).len(), 200, "sends with one name server left");
    let wanted = all(&second);
    assert!(
        wait_until(Duration::from_secs(60), || consumed(&wanted)).await,
        "consumed {} after losing a name server",
        seen.lock().expect("lock").len()
    );

    // A whole broker group goes: the producer moves to broker-a, the consumer keeps consuming.
    broker_b.kill();
    let third = send(&producer, &topic, "one-group", 200).await;
    let acked = all(&third);
    assert!(
        acked.len() >= 190,
        "only {} of 200 sends acknowledged with one group left",
        acked.len()
    );
    assert!(
        third.keys().all(|broker| broker == "broker-a"),
        "acknowledged by a dead group: {:?}",
        third.keys().collect::<Vec<_>>()
    );
    assert!(
        wait_until(Duration::from_secs(60), || consumed(&acked)).await,
        "consumed {} of the {} acknowledged by broker-a",
        acked
            .iter()
            .filter(|body| seen.lock().expect("lock").contains(*body))
            .count(),
        acked.len()
    );
    println!(
        "two groups: 200 over both ({} on broker-a, {} on broker-b); after a name server's SIGKILL \
         200 of 200 acknowledged and consumed; after broker-b's SIGKILL {} of 200 acknowledged \
         (all by broker-a) and all consumed",
        first.get("broker-a").map_or(0, Vec::len),
        first.get("broker-b").map_or(0, Vec::len),
        acked.len()
    );
    consumer.shutdown().await;
    producer.shutdown().await;
}
