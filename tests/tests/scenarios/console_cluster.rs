//! The console of one broker shows the whole cluster, in headless Chromium: two broker sets with
//! a slave each, a topic on both, a group consumed across both. The overview lists every replica
//! with its role; the group page has both brokers' queues, lag matching the cluster's consume
//! stats; a reset made there moves the second broker's queues too; the topic page lists both
//! brokers' queues; charts carry axes and hover read-outs; topics are created on the broker set
//! chosen. Then `tidemark console` on its own shows and steers the same cluster. Screenshots go to
//! `target/console-screenshots/` (the docs' pictures are these).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tidemark_client::{Admin, ClientConfig, Message, Producer};
use tidemark_protocol::body::TopicConfig;
use tidemark_tests::counting::CountingConsumer;
use tidemark_tests::replica_set::ReplicaSet;
use tidemark_tests::webdriver::{csrf_token, http, Driver};
use tidemark_tests::{
    free_port, init_logging, start_broker_process_on, start_namesrv, tidemark_binary, unique,
    wait_until_async, ServerProcess,
};

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|root| root.join("target").join("console-screenshots"))
        .expect("workspace root")
}

/// A master and its slave of `name`; the master's console port when `console`.
fn broker_set(
    dir: &std::path::Path,
    name: &str,
    namesrv: &str,
    console: bool,
) -> (Vec<ServerProcess>, Vec<String>, Option<u16>) {
    let mut processes = Vec::new();
    let mut addrs = Vec::new();
    let mut http = None;
    for (id, role) in [(0, "SYNC_MASTER"), (1, "SLAVE")] {
        let (process, port, http_port) = start_broker_process_on(
            &format!("console-cluster-{name}-{id}"),
            dir,
            &format!("{name}-{id}"),
            &format!(
                "broker_name = \"{name}\"\nbroker_id = {id}\nbroker_role = \"{role}\"\n\
                 namesrv_addr = \"{namesrv}\"\nregister_name_server_period = 2000"
            ),
            console && id == 0,
        );
        processes.push(process);
        addrs.push(format!("127.0.0.1:{port}"));
        http = http.or(http_port);
    }
    (processes, addrs, http)
}

/// The group's committed offsets on `broker`'s queues of `topic`.
async fn committed_on(admin: &Admin, group: &str, topic: &str, broker: &str) -> Vec<i64> {
    let stats = admin
        .consume_stats(group, Some(topic))
        .await
        .expect("consume stats");
    stats
        .offset_table
        .iter()
        .filter(|(queue, _)| queue.topic == topic && queue.broker_name == broker)
        .map(|(_, line)| line.consumer_offset)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_console_shows_and_steers_a_two_broker_cluster() {
    init_logging();
    let dir = tempfile::tempdir().expect("temp dir");
    let (_namesrv, namesrv_port) = start_namesrv("console-cluster-namesrv", &[]);
    let ns = format!("127.0.0.1:{namesrv_port}");
    let (_a, a_addrs, http) = broker_set(dir.path(), "broker-a", &ns, true);
    let (_b, b_addrs, _) = broker_set(dir.path(), "broker-b", &ns, false);
    let port = http.expect("broker-a's console port");
    let base = format!("http://127.0.0.1:{port}");
    let admin = Admin::connect(ClientConfig::new(&ns)).await.expect("admin");
    assert!(
        wait_until_async(Duration::from_secs(30), || async {
            admin
                .cluster_info()
                .await
                .map(|info| {
                    info.broker_addr_table
                        .values()
                        .map(|data| data.broker_addrs.len())
                        .sum::<usize>()
                        == 4
                })
                .unwrap_or(false)
        })
        .await,
        "four replicas registered"
    );

    let topic = unique("ClusterTopic");
    for master in [&a_addrs[0], &b_addrs[0]] {
        admin
            .create_topic(
                master,
                &TopicConfig {
                    topic_name: topic.clone(),
                    read_queue_nums: 2,
                    write_queue_nums: 2,
                    ..TopicConfig::default()
                },
            )
            .await
            .expect("topic on both broker sets");
    }
    assert!(
        wait_until_async(Duration::from_secs(30), || async {
            admin
                .topic_route(&topic)
                .await
                .ok()
                .flatten()
                .is_some_and(|route| route.queue_datas.len() == 2)
        })
        .await,
        "{topic} routed on both brokers"
    );
    let producer = Producer::builder(unique("cluster_producer"))
        .namesrv_addr(&ns)
        .start()
        .await
        .expect("producer");
    for i in 0..40 {
        producer
            .send(Message::new(&topic, format!("first-{i}")))
            .await
            .expect("send");
    }
    let group = unique("cluster_group");
    let consumer = CountingConsumer::start(ClientConfig::new(&ns), &group, &topic).await;
    assert!(consumer.reaches(40).await);
    consumer.shutdown().await;
    for i in 0..20 {
        producer
            .send(Message::new(&topic, format!("later-{i}")))
            .await
            .expect("send");
    }
    producer.shutdown().await;
    for broker in ["broker-a", "broker-b"] {
        let committed: i64 = committed_on(&admin, &group, &topic, broker)
            .await
            .iter()
            .sum();
        assert!(committed > 0, "{broker} has committed progress");
    }

    let driver = Driver::start().await;
    let browser = driver.session().await;
    let shots = screenshots();

    // The overview: both broker sets, a master and a slave each.
    browser.open(&format!("{base}/")).await;
    let overview = browser.source().await;
    for addr in a_addrs.iter().chain(&b_addrs) {
        assert!(
            overview.contains(addr.as_str()),
            "{addr} listed: {overview}"
        );
    }
    assert_eq!(
        overview.matches("<td>master (sync)</td>").count(),
        2,
        "{overview}"
    );
    assert_eq!(overview.matches("<td>slave</td>").count(), 2, "{overview}");
    browser
        .screenshot(&shots.join("cluster-overview.png"))
        .await;

    // The group: queues of both brokers, lag as the cluster's consume stats say.
    let stats = admin
        .consume_stats(&group, Some(&topic))
        .await
        .expect("consume stats");
    let lag: i64 = stats
        .offset_table
        .iter()
        .filter(|(queue, _)| queue.topic == topic)
        .map(|(_, line)| line.broker_offset - line.consumer_offset)
        .sum();
    assert_eq!(lag, 20);
    browser.open(&format!("{base}/groups/{group}")).await;
    let page = browser.source().await;
    assert!(page.contains("<p>Lag 20 messages"), "{page}");
    assert!(
        page.contains("<td>broker-a</td>") && page.contains("<td>broker-b</td>"),
        "both brokers' queues: {page}"
    );
    browser.screenshot(&shots.join("cluster-group.png")).await;

    // A reset from broker-a's console moves broker-b's queues too.
    browser
        .clear_and_type("#reset-offset input[name=time]", "0")
        .await;
    browser.click("#reset-offset button").await;
    browser.wait_for_title("Confirm").await;
    let plan = browser.source().await;
    assert!(plan.contains("broker-b"), "the plan names broker-b: {plan}");
    browser.click("#confirm button").await;
    browser.wait_for_title("Consumer group").await;
    for broker in ["broker-a", "broker-b"] {
        let offsets = committed_on(&admin, &group, &topic, broker).await;
        assert!(
            !offsets.is_empty() && offsets.iter().all(|offset| *offset == 0),
            "{broker} reset: {offsets:?}"
        );
    }

    // The topic: both brokers' queues; a chart with axes and hover titles.
    browser.open(&format!("{base}/topics/{topic}")).await;
    let page = browser.source().await;
    assert_eq!(page.matches("<td>broker-b</td>").count(), 2, "{page}");
    assert_eq!(page.matches("<td>broker-a</td>").count(), 2, "{page}");
    assert!(page.contains("class=\"axis-time\""), "{page}");
    browser.screenshot(&shots.join("cluster-topic.png")).await;

    // A topic created from broker-a's console on broker-b only.
    let only_b = unique("OnlyOnB");
    browser.open(&format!("{base}/topics")).await;
    browser
        .clear_and_type("#create-topic input[name=topic]", &only_b)
        .await;
    browser
        .execute(
            "document.querySelector('#create-topic select[name=place]').value = 'broker:broker-b';",
        )
        .await;
    browser.click("#create-topic button").await;
    browser.wait_for_title(&format!("Topic {only_b}")).await;
    assert_eq!(
        routed_brokers(&admin, &only_b).await,
        vec!["broker-b".to_owned()]
    );
    browser.close().await;

    standalone_console_sees_the_same(&ns, &admin, &group, &topic, &a_addrs, &b_addrs).await;
    admin.shutdown().await;
}

/// `tidemark console -n NAMESRV`, no broker in its process: the same cluster over plain HTTP —
/// every replica, the group's queues on both brokers, a topic created on broker-a only.
async fn standalone_console_sees_the_same(
    ns: &str,
    admin: &Admin,
    group: &str,
    topic: &str,
    a_addrs: &[String],
    b_addrs: &[String],
) {
    let (_console, port) = ServerProcess::start_on_free_ports(
        "console-standalone",
        tidemark_binary(),
        free_port,
        |port| {
            vec![
                "console".to_owned(),
                "-n".to_owned(),
                ns.to_owned(),
                "--listen".to_owned(),
                format!("127.0.0.1:{port}"),
            ]
        },
        "tidemark console ready",
    );
    let (status, overview) = http(port, "GET", "/", &[], "").await;
    assert_eq!(status, 200, "{overview}");
    for addr in a_addrs.iter().chain(b_addrs) {
        assert!(
            overview.contains(addr.as_str()),
            "{addr} listed: {overview}"
        );
    }
    assert!(
        !overview.contains("id=\"broker\""),
        "no broker of its own: {overview}"
    );
    let (_, groups) = http(port, "GET", "/groups", &[], "").await;
    assert!(groups.contains(group), "{groups}");
    let (status, page) = http(port, "GET", &format!("/groups/{group}"), &[], "").await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("<td>broker-a</td>") && page.contains("<td>broker-b</td>"),
        "{page}"
    );
    let (status, page) = http(port, "GET", &format!("/topics/{topic}"), &[], "").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page.matches("<td>broker-a</td>").count(), 2, "{page}");
    let (status, _) = http(port, "GET", "/metrics", &[], "").await;
    assert_eq!(status, 404, "a console on its own serves no broker metrics");

    let (_, topics) = http(port, "GET", "/topics", &[], "").await;
    let token = csrf_token(&topics);
    let only_a = unique("OnlyOnA");
    let (status, answer) = http(
        port,
        "POST",
        "/topics",
        &[],
        &format!(
            "csrf={token}&topic={only_a}&read_queues=2&write_queues=2&perm=6&place=broker%3Abroker-a"
        ),
    )
    .await;
    assert_eq!(status, 303, "{answer}");
    assert_eq!(
        routed_brokers(admin, &only_a).await,
        vec!["broker-a".to_owned()]
    );
}

/// The brokers the name server routes `topic` to, once it routes it anywhere (a broker
/// registers a new topic at its next round, 2 s here); empty when none did within 30 s.
async fn routed_brokers(admin: &Admin, topic: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let route = admin.topic_route(topic).await.ok().flatten();
        let brokers: Vec<String> = route
            .iter()
            .flat_map(|route| &route.queue_datas)
            .map(|queue| queue.broker_name.clone())
            .collect();
        if !brokers.is_empty() || Instant::now() > deadline {
            return brokers;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The table row of `page` that holds `needle`.
fn row_with<'a>(page: &'a str, needle: &str) -> &'a str {
    let at = page
        .find(needle)
        .unwrap_or_else(|| panic!("{needle} not on the page: {page}"));
    let start = page[..at].rfind("<tr>").unwrap_or(0);
    let end = page[at..].find("</tr>").map_or(page.len(), |end| at + end);
    &page[start..end]
}

/// Controller mode: `tidemark console --controllers` shows the three controllers, the one that
/// leads, and both replicas of the broker set in its SyncStateSet with their roles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_controllers_and_the_sync_state_set() {
    init_logging();
    let set = ReplicaSet::start(2, 3).await;
    let controllers = set.controllers_arg();
    let (_console, port) = ServerProcess::start_on_free_ports(
        "console-controllers",
        tidemark_binary(),
        free_port,
        |port| {
            vec![
                "console".to_owned(),
                "-n".to_owned(),
                set.namesrv.clone(),
                "--listen".to_owned(),
                format!("127.0.0.1:{port}"),
                "--controllers".to_owned(),
                controllers.clone(),
            ]
        },
        "tidemark console ready",
    );
    // Both replicas registered with the name server, as the overview shows them.
    let mut overview = String::new();
    for _ in 0..60 {
        overview = http(port, "GET", "/", &[], "").await.1;
        if set
            .replica_addrs
            .iter()
            .all(|addr| overview.contains(addr.as_str()))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let view = set.view();
    let master = view.master().expect("a master").to_owned();
    for addr in &set.replica_addrs {
        let row = row_with(&overview, addr);
        let role = if *addr == master { "master" } else { "slave" };
        assert!(row.contains(role), "{addr} is the {role}: {row}");
        assert!(row.contains("<td>yes</td>"), "{addr} is in sync: {row}");
    }
    assert!(overview.contains("id=\"controllers\""), "{overview}");
    for addr in &set.controller_addrs {
        let row = row_with(&overview, &format!("<td>{addr}</td>"));
        assert!(row.contains("<td>yes</td>"), "{addr} answers: {row}");
    }
    assert_eq!(overview.matches("<b>leader</b>").count(), 1, "{overview}");
    assert!(
        !overview.contains("not registered"),
        "the controllers' replicas are the name server's: {overview}"
    );
}
