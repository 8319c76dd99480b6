//! `tidemark admin`'s daily commands against `tidemark dev`: each one run as an operator runs it
//! (the binary, `--json` read back, the table checked once), with its effect checked through
//! the client's own view of the broker.

use std::collections::BTreeMap;
use std::time::Duration;

use tidemark_client::{Admin, ClientConfig, Message, Producer, SendResult};
use tidemark_protocol::json::{self, Value};
use tidemark_tests::admin_cli::{admin, admin_json, int, rows, text};
use tidemark_tests::counting::CountingConsumer;
use tidemark_tests::{init_logging, unique, wait_until_async, DevServer};

async fn committed(admin: &Admin, group: &str, topic: &str) -> BTreeMap<i32, i64> {
    let stats = admin
        .consume_stats(group, Some(topic))
        .await
        .expect("consume stats");
    stats
        .offset_table
        .iter()
        .filter(|(queue, _)| queue.topic == topic)
        .map(|(queue, line)| (queue.queue_id, line.consumer_offset))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daily_admin_commands_do_what_they_say() {
    init_logging();
    let server = DevServer::start("admin-commands", &[]);
    let ns = server.namesrv_addr();
    let broker = server.broker_addr();

    // The cluster and its broker.
    let clusters = rows(&admin_json(&["cluster-list"], &ns, &[]).await);
    assert_eq!(clusters.len(), 1, "{clusters:?}");
    let row = &clusters[0];
    assert_eq!(text(row, "addr"), broker);
    assert_eq!(text(row, "role"), "master");
    assert_eq!(int(row, "brokerId"), 0);
    assert_ne!(
        text(row, "version"),
        "-",
        "the broker answered its runtime info"
    );
    let cluster = text(row, "cluster").to_owned();
    let broker_name = text(row, "brokerName").to_owned();
    let table = admin(&["cluster-list"], &ns, &[]).await;
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.starts_with("#Cluster Name"), "{table}");
    assert!(table.contains(&broker), "{table}");

    let status = rows(&admin_json(&["broker-status"], &ns, &["-b", &broker]).await);
    assert!(status
        .iter()
        .any(|row| text(row, "key") == "brokerVersionDesc"));

    // Broker configuration, read and changed live.
    let name = rows(
        &admin_json(
            &["broker-config", "get"],
            &ns,
            &["-b", &broker, "-k", "brokerName"],
        )
        .await,
    );
    assert_eq!(name.len(), 1);
    assert_eq!(text(&name[0], "value"), broker_name);
    admin_json(
        &["broker-config", "set"],
        &ns,
        &["-b", &broker, "-k", "shortPollingTimeMills", "-v", "1500"],
    )
    .await;
    let changed = rows(
        &admin_json(
            &["broker-config", "get"],
            &ns,
            &["-c", &cluster, "-k", "shortPollingTimeMills"],
        )
        .await,
    );
    assert_eq!(text(&changed[0], "value"), "1500");
    let refused = admin(
        &["broker-config", "set"],
        &ns,
        &["-b", &broker, "-k", "brokerName", "-v", "other"],
    )
    .await;
    assert!(!refused.status.success(), "a read-only key is refused");

    // A topic created, routed, listed.
    let topic = unique("AdminTopic");
    let created = admin_json(
        &["topic-create"],
        &ns,
        &[
            "-b",
            &broker,
            "-t",
            &topic,
            "-r",
            "4",
            "-w",
            "4",
            "-a",
            "+message.type=NORMAL",
        ],
    )
    .await;
    assert_eq!(
        created
            .get("attributes")
            .and_then(|a| a.get("message.type")),
        Some(&Value::String("NORMAL".into())),
        "{created:?}"
    );
    let route_ns = ns.clone();
    let route_topic = topic.clone();
    assert!(
        wait_until_async(Duration::from_secs(15), || {
            let (ns, topic) = (route_ns.clone(), route_topic.clone());
            async move {
                let output = admin(&["topic-route"], &ns, &["-t", &topic, "--json"]).await;
                output.status.success()
                    && json::parse(&output.stdout).is_ok_and(|value| {
                        matches!(&value, Value::Array(rows) if rows.iter().any(|row| {
                            row.get("readQueueNums") == Some(&Value::Int(4))
                                && row.get("writeQueueNums") == Some(&Value::Int(4))
                                && row.get("perm") == Some(&Value::String("RW".into()))
                        }))
                    })
            }
        })
        .await,
        "the new topic's route shows its 4 queues"
    );
    let topics = rows(&admin_json(&["topic-list"], &ns, &[]).await);
    assert!(topics.iter().any(|row| text(row, "topic") == topic));
    let status = admin_json(&["topic-status"], &ns, &["-t", &topic]).await;
    let queues = rows(status.get("queues").expect("topic-status lists queues"));
    assert_eq!(
        queues.len(),
        4,
        "one line per queue of the new topic: {status:?}"
    );
    assert!(
        queues
            .iter()
            .all(|queue| queue.get("maxOffset") == Some(&Value::Int(0))),
        "nothing sent to it yet: {status:?}"
    );

    // Messages sent with keys, looked up by key, by client id and by queue offset.
    let producer_group = unique("admin_producer");
    let mut config = ClientConfig::new(&ns);
    config.heartbeat_interval = Duration::from_millis(500);
    let producer = Producer::builder(&producer_group)
        .client_config(config)
        .start()
        .await
        .expect("producer");
    let mut sent: Vec<SendResult> = Vec::new();
    for i in 0..12 {
        let message = Message::new(&topic, format!("body-{i}")).with_keys([format!("key-{i}")]);
        sent.push(producer.send(message).await.expect("send"));
    }
    // The key index is built behind the appends: wait until it has the last message sent.
    let (index_ns, index_topic) = (ns.clone(), topic.clone());
    assert!(
        wait_until_async(Duration::from_secs(15), || {
            let (ns, topic) = (index_ns.clone(), index_topic.clone());
            async move {
                admin(&["query-message"], &ns, &["-t", &topic, "-k", "key-11"])
                    .await
                    .status
                    .success()
            }
        })
        .await,
        "the key index has the sent messages"
    );
    let by_key = admin_json(&["query-message"], &ns, &["-t", &topic, "-k", "key-5"]).await;
    let found = rows(by_key.get("messages").expect("messages"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(text(&found[0], "msgId"), sent[5].msg_id);
    let by_id = admin_json(
        &["query-message"],
        &ns,
        &["-t", &topic, "-k", &sent[7].msg_id, "--unique"],
    )
    .await;
    let found = rows(by_id.get("messages").expect("messages"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(text(&found[0], "offsetMsgId"), sent[7].offset_msg_id);
    let queue = sent[3].queue.queue_id.to_string();
    let offset = sent[3].queue_offset.to_string();
    let at = admin_json(
        &["query-message"],
        &ns,
        &[
            "-t",
            &topic,
            "-b",
            &broker_name,
            "-q",
            &queue,
            "-o",
            &offset,
        ],
    )
    .await;
    let found = rows(at.get("messages").expect("messages"));
    assert_eq!(text(&found[0], "msgId"), sent[3].msg_id);
    let missing = admin(
        &["query-message"],
        &ns,
        &["-t", &topic, "-k", "no-such-key"],
    )
    .await;
    assert!(!missing.status.success(), "an unknown key is an error");

    // The producer's connection.
    let (pns, ptopic, pgroup) = (ns.clone(), topic.clone(), producer_group.clone());
    assert!(
        wait_until_async(Duration::from_secs(15), || {
            let (ns, topic, group) = (pns.clone(), ptopic.clone(), pgroup.clone());
            async move {
                let output = admin(
                    &["producer-connection"],
                    &ns,
                    &["-g", &group, "-t", &topic, "--json"],
                )
                .await;
                output.status.success()
                    && json::parse(&output.stdout).is_ok_and(|value| {
                        // The Rust client introduces itself as Java (version 4.9.8), as Apache
                        // brokers expect.
                        matches!(&value, Value::Array(rows) if rows.iter().any(|row| row.get("version") == Some(&Value::Int(409))))
                    })
            }
        })
        .await,
        "the producer group's connection shows: {}",
        String::from_utf8_lossy(
            &admin(&["producer-connection"], &ns, &["-g", &producer_group, "-t", &topic, "--json"])
                .await
                .stdout
        )
    );
    producer.shutdown().await;

    // Groups created, listed, deleted.
    let spare = unique("admin_spare");
    admin_json(
        &["group-create"],
        &ns,
        &["-b", &broker, "-g", &spare, "--retry-max-times", "3"],
    )
    .await;
    let groups = rows(&admin_json(&["group-list"], &ns, &["-b", &broker]).await);
    let created = groups
        .iter()
        .find(|row| text(row, "group") == spare)
        .expect("the new group is listed");
    assert_eq!(int(created, "retryMaxTimes"), 3);

    // A consumer group consumes everything; its connection shows while it is online.
    let group = unique("admin_group");
    let consumer = CountingConsumer::start(ClientConfig::new(&ns), &group, &topic).await;
    assert!(consumer.reaches(12).await);
    let connection = admin_json(&["consumer-connection"], &ns, &["-g", &group]).await;
    let clients = rows(connection.get("connections").expect("connections"));
    assert_eq!(clients.len(), 1, "{connection:?}");
    assert_eq!(int(&clients[0], "version"), 409);
    let subscriptions = rows(connection.get("subscriptions").expect("subscriptions"));
    assert!(subscriptions.iter().any(|row| text(row, "topic") == topic));
    assert_eq!(text(&connection, "messageModel"), "CLUSTERING");
    // What the consumer says about itself, relayed by the broker.
    let client_id = text(&clients[0], "clientId").to_owned();
    let status =
        rows(&admin_json(&["consumer-status"], &ns, &["-g", &group, "-i", &client_id]).await);
    assert_eq!(status.len(), 1);
    let properties = status[0].get("properties").expect("properties");
    assert_eq!(text(properties, "PROP_CONSUME_TYPE"), "CONSUME_PASSIVELY");
    assert_eq!(text(properties, "PROP_CONSUMEORDERLY"), "false");
    assert!(text(properties, "PROP_CONSUMER_START_TIMESTAMP")
        .parse::<i64>()
        .is_ok());
    let queues = rows(status[0].get("queues").expect("queues"));
    let held: Vec<&Value> = queues
        .iter()
        .filter(|row| text(row, "topic") == topic)
        .collect();
    assert_eq!(held.len(), 4, "{queues:?}");
    let rates = rows(status[0].get("rates").expect("rates"));
    let topic_rates = rates
        .iter()
        .find(|row| text(row, "topic") == topic)
        .expect("the topic's rates");
    let ok_tps = match topic_rates.get("consumeOKTPS") {
        Some(Value::Float(tps)) => *tps,
        Some(Value::Int(tps)) => *tps as f64,
        other => panic!("consumeOKTPS: {other:?}"),
    };
    assert!(ok_tps > 0.0, "{topic_rates:?}");
    let unknown = admin(
        &["consumer-status"],
        &ns,
        &["-g", &group, "-i", "no-such-client"],
    )
    .await;
    assert!(!unknown.status.success(), "an unknown client is an error");
    consumer.shutdown().await;

    let client = Admin::connect(ClientConfig::new(&ns)).await.expect("admin");
    let all_sent: i64 = 12;
    let end = committed(&client, &group, &topic).await;
    assert_eq!(end.values().sum::<i64>(), all_sent, "{end:?}");

    // The plan first: each queue now → 0, replaying what was consumed; nothing moves.
    let plan = rows(
        &admin_json(
            &["reset-offset-by-time"],
            &ns,
            &["-g", &group, "-t", &topic, "-s", "0", "--dry-run"],
        )
        .await,
    );
    assert_eq!(plan.len(), 4, "{plan:?}");
    assert_eq!(
        plan.iter().map(|row| int(row, "current")).sum::<i64>(),
        all_sent,
        "{plan:?}"
    );
    assert!(plan.iter().all(|row| int(row, "target") == 0), "{plan:?}");
    assert!(
        plan.iter().all(
            |row| text(row, "change") == format!("replays {}", int(row, "current"))
                || int(row, "current") == 0
        ),
        "{plan:?}"
    );
    assert_eq!(
        committed(&client, &group, &topic).await,
        end,
        "a dry run moved the group"
    );
    // A script that does not say --yes is refused, and nothing moves.
    let unconfirmed = admin(
        &["reset-offset-by-time"],
        &ns,
        &["-g", &group, "-t", &topic, "-s", "0"],
    )
    .await;
    assert!(!unconfirmed.status.success());
    assert!(String::from_utf8_lossy(&unconfirmed.stderr).contains("--yes"));
    assert_eq!(
        committed(&client, &group, &topic).await,
        end,
        "applied without --yes"
    );

    // Back to the start, forward to the end, copied to another group.
    let reset = rows(
        &admin_json(
            &["reset-offset-by-time"],
            &ns,
            &["-g", &group, "-t", &topic, "-s", "0", "--yes"],
        )
        .await,
    );
    assert_eq!(reset.len(), 4, "{reset:?}");
    assert!(reset.iter().all(|row| int(row, "offset") == 0), "{reset:?}");
    let now = committed(&client, &group, &topic).await;
    assert!(now.values().all(|offset| *offset == 0), "{now:?}");
    let skipped = rows(
        &admin_json(
            &["skip-accumulated"],
            &ns,
            &["-g", &group, "-t", &topic, "--yes"],
        )
        .await,
    );
    assert_eq!(
        skipped.iter().map(|row| int(row, "offset")).sum::<i64>(),
        all_sent
    );
    assert_eq!(committed(&client, &group, &topic).await, end);
    let copy = unique("admin_copy");
    admin_json(
        &["clone-offset"],
        &ns,
        &[
            "-s",
            &group,
            "-d",
            &copy,
            "-t",
            &topic,
            "--offline",
            "--yes",
        ],
    )
    .await;
    assert_eq!(committed(&client, &copy, &topic).await, end);
    client.shutdown().await;

    // Progress shows the copy caught up.
    let progress = admin_json(&["consumer-progress"], &ns, &["-g", &copy, "-t", &topic]).await;
    let queues = rows(progress.get("queues").expect("queues"));
    assert!(queues.iter().all(|row| int(row, "lag") == 0), "{queues:?}");

    // Deletions.
    admin_json(
        &["group-delete"],
        &ns,
        &["-b", &broker, "-g", &spare, "--remove-offsets"],
    )
    .await;
    let groups = rows(&admin_json(&["group-list"], &ns, &["-b", &broker]).await);
    assert!(!groups.iter().any(|row| text(row, "group") == spare));
    admin_json(&["topic-delete"], &ns, &["-c", &cluster, "-t", &topic]).await;
    let topics = rows(&admin_json(&["topic-list"], &ns, &[]).await);
    assert!(!topics.iter().any(|row| text(row, "topic") == topic));

    // Bad input: a clear error, nothing done.
    for (command, args) in [
        (
            &["topic-create"][..],
            &["-b", broker.as_str(), "-t", "Bad", "-r", "0"][..],
        ),
        (
            &["topic-create"][..],
            &[
                "-b",
                broker.as_str(),
                "-t",
                "Bad",
                "-a",
                "message.type=FIFO",
            ][..],
        ),
        // Well formed, refused by the broker: not one of RocketMQ's message types.
        (
            &["topic-create"][..],
            &[
                "-b",
                broker.as_str(),
                "-t",
                "Bad",
                "-a",
                "+message.type=WEIRD",
            ][..],
        ),
        (
            &["reset-offset-by-time"][..],
            &[
                "-g",
                group.as_str(),
                "-t",
                topic.as_str(),
                "-s",
                "yesterday",
            ][..],
        ),
        (&["broker-config", "set"][..], &["-k", "x", "-v", "y"][..]),
        (
            &["clone-offset"][..],
            &["-s", group.as_str(), "-d", group.as_str()][..],
        ),
        (&["query-message"][..], &[][..]),
    ] {
        let output = admin(command, &ns, args).await;
        assert!(!output.status.success(), "{command:?} {args:?} should fail");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.trim().is_empty(), "{command:?} says why it failed");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
