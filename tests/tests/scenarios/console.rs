//! The web console in headless Chromium (Debian's `chromium` through `chromedriver`): every page
//! opens and is saved as a screenshot (`target/console-screenshots/`), a topic is created and a
//! group reset through the forms, a consumer blocked on one message shows as stuck; then bad
//! input over plain HTTP — no token, a foreign origin, markup in values — and read-only mode.

use std::path::PathBuf;
use std::time::Duration;

use tidemark_client::{
    concurrent_fn, Admin, ClientConfig, ConsumeFromWhere, ConsumeStatus, Message, MessageExt,
    Producer, PushConsumer,
};
use tidemark_tests::counting::CountingConsumer;
use tidemark_tests::webdriver::{csrf_token, http, Driver};
use tidemark_tests::{init_logging, tidemark_binary, unique, wait_for_route, DevServer};

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|root| root.join("target").join("console-screenshots"))
        .expect("workspace root")
}

async fn committed(admin: &Admin, group: &str, topic: &str) -> Vec<i64> {
    let stats = admin
        .consume_stats(group, Some(topic))
        .await
        .expect("consume stats");
    stats
        .offset_table
        .iter()
        .filter(|(queue, _)| queue.topic == topic)
        .map(|(_, line)| line.consumer_offset)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_and_steers_progress_in_a_browser() {
    init_logging();
    let server = DevServer::start_with_console("console", &[]);
    let port = server.http_port();
    let ns = server.namesrv_addr();
    let base = format!("http://127.0.0.1:{port}");
    // Stuck after one second, so the test need not wait a minute.
    let set = std::process::Command::new(tidemark_binary())
        .args([
            "admin",
            "broker-config",
            "set",
            "-n",
            &ns,
            "-b",
            &server.broker_addr(),
        ])
        .args(["-k", "consumerStuckThresholdMs", "-v", "1000"])
        .output()
        .expect("broker-config set");
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );

    let topic = unique("ConsoleTopic");
    let producer = Producer::builder(unique("console_producer"))
        .namesrv_addr(&ns)
        .start()
        .await
        .expect("producer");
    let mut sent = Vec::new();
    for i in 0..20 {
        let message = Message::new(&topic, format!("body-{i}")).with_keys([format!("key-{i}")]);
        sent.push(producer.send(message).await.expect("send"));
    }
    producer.shutdown().await;

    // A group that consumed everything and left, to be reset.
    let done_group = unique("console_done");
    let finished = CountingConsumer::start(ClientConfig::new(&ns), &done_group, &topic).await;
    assert!(finished.reaches(20).await);
    finished.shutdown().await;
    // A group blocked on one message while the rest complete.
    let stuck_group = unique("console_stuck");
    let stuck_body = "body-7".to_owned();
    let blocked = PushConsumer::builder(&stuck_group)
        .client_config(ClientConfig::new(&ns))
        .subscribe(&topic, "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .shutdown_wait(Duration::from_millis(200))
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let blocks = messages
                .iter()
                .any(|message| message.body == stuck_body.as_bytes());
            async move {
                if blocks {
                    std::future::pending::<()>().await;
                }
                ConsumeStatus::Success
            }
        }))
        .await
        .expect("blocked consumer");

    let driver = Driver::start().await;
    let browser = driver.session().await;
    let shots = screenshots();

    browser.open(&format!("{base}/")).await;
    assert!(browser.title().await.starts_with("Overview"));
    let overview = browser.source().await;
    assert!(
        overview.contains("id=\"cluster\"") && overview.contains(&server.broker_addr()),
        "the cluster's brokers are listed: {overview}"
    );
    browser.screenshot(&shots.join("overview.png")).await;

    // A topic created through the form.
    let created = unique("ConsoleCreated");
    browser.open(&format!("{base}/topics")).await;
    assert!(browser.source().await.contains(&topic));
    browser.screenshot(&shots.join("topics.png")).await;
    browser
        .clear_and_type("#create-topic input[name=topic]", &created)
        .await;
    browser
        .clear_and_type("#create-topic input[name=read_queues]", "4")
        .await;
    browser
        .clear_and_type("#create-topic input[name=write_queues]", "4")
        .await;
    browser.click("#create-topic button").await;
    browser.wait_for_title(&format!("Topic {created}")).await;
    assert!(browser.source().await.contains("topic created"));
    browser.screenshot(&shots.join("topic.png")).await;
    // The broker registers the new topic with the name server on its own time.
    assert!(
        wait_for_route(&ns, &created).await,
        "{created} never routed\n{}",
        server.tail_text()
    );
    let admin = Admin::connect(ClientConfig::new(&ns)).await.expect("admin");
    let route = admin
        .topic_route(&created)
        .await
        .expect("route")
        .expect("the new topic is routed");
    assert_eq!(route.queue_datas[0].write_queue_nums, 4);

    // The stuck marker, on the list and on the group's page.
    let groups_url = format!("{base}/groups");
    let mut seen_stuck = false;
    for _ in 0..30 {
        browser.open(&groups_url).await;
        let source = browser.source().await;
        if source.contains(&stuck_group) && source.contains("stuck</span>") {
            seen_stuck = true;
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        seen_stuck,
        "the blocked group shows as stuck: {}",
        browser.source().await
    );
    browser.screenshot(&shots.join("groups.png")).await;
    browser.open(&format!("{base}/groups/{stuck_group}")).await;
    let source = browser.source().await;
    assert!(source.contains("⚠ offset"), "{source}");
    // The blocked consumer reports itself: a push consumer holding the topic's queues.
    assert!(
        source.contains("id=\"clients\"") && source.contains("<td>push</td>"),
        "the client view: {source}"
    );
    assert!(source.contains("class=\"client-queues\""), "{source}");
    browser.screenshot(&shots.join("group.png")).await;

    // A reset to the start, previewed then confirmed.
    assert!(
        committed(&admin, &done_group, &topic)
            .await
            .iter()
            .sum::<i64>()
            == 20
    );
    browser.open(&format!("{base}/groups/{done_group}")).await;
    browser
        .clear_and_type("#reset-offset input[name=time]", "0")
        .await;
    browser.click("#reset-offset button").await;
    browser.wait_for_title("Confirm").await;
    assert!(browser.source().await.contains("id=\"preview\""));
    browser.screenshot(&shots.join("reset-confirm.png")).await;
    browser.click("#confirm button").await;
    browser.wait_for_title("Consumer group").await;
    assert!(
        browser.source().await.contains("queues of"),
        "{}",
        browser.source().await
    );
    assert!(committed(&admin, &done_group, &topic)
        .await
        .iter()
        .all(|offset| *offset == 0));

    // The reset is on the group's timeline; its Undo shows the plan back to 20, then applies it.
    let source = browser.source().await;
    assert!(
        source.contains("id=\"history\"") && source.contains(">reset<"),
        "{source}"
    );
    browser.screenshot(&shots.join("history.png")).await;
    browser.click("#history form.undo button").await;
    browser.wait_for_title("Confirm").await;
    let plan = browser.source().await;
    assert!(
        plan.contains("id=\"preview\"") && plan.contains("skips"),
        "{plan}"
    );
    browser.screenshot(&shots.join("undo-confirm.png")).await;
    browser.click("#confirm button").await;
    browser.wait_for_title("Consumer group").await;
    assert!(
        browser.source().await.contains("undone"),
        "{}",
        browser.source().await
    );
    assert_eq!(
        committed(&admin, &done_group, &topic)
            .await
            .iter()
            .sum::<i64>(),
        20,
        "the undo put the group back"
    );
    assert!(browser.source().await.contains(">restore<"));

    // A message by key, with its properties (the key index is built behind the appends: the
    // lookup is repeated until it has the message).
    let mut source = String::new();
    for _ in 0..30 {
        browser.open(&format!("{base}/messages")).await;
        browser
            .clear_and_type("#by-key input[name=topic]", &topic)
            .await;
        browser
            .clear_and_type("#by-key input[name=key]", "key-3")
            .await;
        browser.click("#by-key button").await;
        for _ in 0..50 {
            source = browser.source().await;
            if source.contains("class=\"message\"") || source.contains("id=\"error\"") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if source.contains(&sent[3].msg_id) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(source.contains(&sent[3].msg_id), "{source}");
    browser.screenshot(&shots.join("message.png")).await;
    browser.close().await;
    blocked.shutdown().await;

    // Bad input over plain HTTP.
    let (_, topics_page) = http(port, "GET", "/topics", &[], "").await;
    let token = csrf_token(&topics_page);
    let (status, _) = http(
        port,
        "POST",
        "/topics",
        &[],
        "topic=NoToken&read_queues=1&write_queues=1&perm=6",
    )
    .await;
    assert_eq!(status, 403, "no token, no change");
    let (status, _) = http(
        port,
        "POST",
        "/topics",
        &[("Origin", "http://evil.example")],
        &format!("csrf={token}&topic=Foreign&read_queues=1&write_queues=1&perm=6"),
    )
    .await;
    assert_eq!(status, 403, "another origin, no change");
    let (status, body) = http(
        port,
        "POST",
        "/topics",
        &[],
        &format!("csrf={token}&topic=%3Cscript%3Ealert(1)%3C%2Fscript%3E&read_queues=1&write_queues=1&perm=6"),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body.contains("&lt;script&gt;") && !body.contains("<script>alert"),
        "{body}"
    );
    let (status, _) = http(
        port,
        "POST",
        "/topics",
        &[],
        &format!("csrf={token}&topic=Huge&read_queues=99999999999&write_queues=1&perm=6"),
    )
    .await;
    assert_eq!(status, 400, "a queue count out of range is refused");
    let (status, body) = http(
        port,
        "POST",
        &format!("/groups/{done_group}/reset"),
        &[],
        &format!("csrf={token}&topic={topic}&time=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"),
    )
    .await;
    assert_eq!(status, 400);
    assert!(!body.contains("<img"), "{body}");
    let (_, body) = http(port, "GET", "/messages?topic=%3Cb%3E&key=%3Ci%3Ex", &[], "").await;
    assert!(!body.contains("<b>") && !body.contains("<i>x"), "{body}");
    let (status, _) = http(port, "GET", "/topics/NoSuchTopic", &[], "").await;
    assert_eq!(status, 404);
    for refused in ["NoToken", "Foreign", "Huge"] {
        assert!(
            admin.topic_route(refused).await.expect("route").is_none(),
            "{refused} was not created"
        );
    }
    admin.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_console_changes_nothing() {
    init_logging();
    let server = DevServer::start_with_console("console-read-only", &["--console-read-only"]);
    let port = server.http_port();
    let (status, page) = http(port, "GET", "/topics", &[], "").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("read-only") && !page.contains("method=\"post\""),
        "{page}"
    );
    let (status, body) = http(
        port,
        "POST",
        "/topics",
        &[],
        "topic=Nope&read_queues=1&write_queues=1&perm=6",
    )
    .await;
    assert_eq!(status, 403);
    assert!(body.contains("read-only"), "{body}");
}
