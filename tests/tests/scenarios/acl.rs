//! RocketMQ ACL on `tidemark dev --acl-file`: the Rust client signing as an account, the
//! allowed/denied matrix through the real network path, `tidemark admin` with and without admin
//! rights, and a changed file taking effect while the server runs.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use tidemark_client::{ClientConfig, Message, Producer};
use tidemark_protocol::headers::{
    GetMaxOffsetRequestHeader, OffsetResponseHeader, SendMessageRequestHeaderV2,
};
use tidemark_protocol::message::{encode_batch, BatchEntry, Properties};
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::Credentials;
use tidemark_tests::counting::CountingConsumer;
use tidemark_tests::{init_logging, tidemark_binary, wait_until, wait_until_async, DevServer};

fn rules(white_list: &str) -> String {
    format!(
        "globalWhiteRemoteAddresses:{white_list}
accounts:
  - accessKey: alice-key
    secretKey: alice-secret
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - orders=PUB|SUB
      - audit=DENY
    groupPerms:
      - billing=SUB
  - accessKey: admin-key
    secretKey: admin-secret
    admin: true
"
    )
}

fn client(ns: &str, account: Option<(&str, &str)>) -> ClientConfig {
    let mut config = ClientConfig::new(ns);
    config.credentials = account.map(|(key, secret)| Credentials::new(key, secret));
    config
}

async fn send(ns: &str, account: Option<(&str, &str)>, topic: &str) -> Result<(), String> {
    let producer = Producer::builder("acl-producers")
        .client_config(client(ns, account))
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let outcome = producer
        .send(Message::new(topic, "payload"))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    producer.shutdown().await;
    outcome
}

fn admin(ns: &str, account: (&str, &str), args: &[&str]) -> std::process::Output {
    Command::new(tidemark_binary())
        .args(["admin"])
        .args(args)
        .args([
            "-n",
            ns,
            "--access-key",
            account.0,
            "--secret-key",
            account.1,
        ])
        .output()
        .expect("run tidemark admin")
}

/// `tidemark dev` checking ACL with [`rules`] (no white list) in a file of its own; the
/// directory holding the file lives as long as the returned guard.
fn start_with_rules(name: &str) -> (tempfile::TempDir, std::path::PathBuf, DevServer) {
    init_logging();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("plain_acl.yml");
    std::fs::write(&file, rules("")).expect("write ACL file");
    let file_arg = file.display().to_string();
    let server = DevServer::start(
        name,
        &[
            "--acl-file",
            &file_arg,
            "--acl-access-key",
            "admin-key",
            "--acl-secret-key",
            "admin-secret",
        ],
    );
    (dir, file, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_are_checked_on_every_path_and_the_file_reloads() {
    let (_dir, file, server) = start_with_rules("acl");
    let ns = server.namesrv_addr();
    let broker = server.broker_addr();
    let alice = Some(("alice-key", "alice-secret"));

    // Allowed: send, then consume through heartbeats, pulls and offset commits.
    assert_eq!(
        send(&ns, alice, "orders").await,
        Ok(()),
        "{}",
        server.tail_text()
    );
    let consumer = CountingConsumer::start(client(&ns, alice), "billing", "orders").await;
    assert!(
        consumer.reaches(1).await,
        "alice's consumer in billing received nothing: {}",
        server.tail_text()
    );
    consumer.shutdown().await;
    println!("allowed: alice send orders, consume orders as billing");

    let refusals = [
        (alice, "audit", "No default permission for topic:audit"),
        (
            alice,
            "elsewhere",
            "No default permission for topic:elsewhere",
        ),
        (
            Some(("alice-key", "wrong-secret")),
            "orders",
            "Check signature failed for accessKey=alice-key",
        ),
        (
            Some(("bob-key-12", "bob-secret")),
            "orders",
            "No acl config for bob-key-12",
        ),
        (None, "orders", "No accessKey is configured"),
    ];
    for (account, topic, reason) in refusals {
        let outcome = send(&ns, account, topic).await;
        let error = outcome.err().unwrap_or_default();
        assert!(
            error.contains(reason),
            "{account:?} → {topic}: expected {reason:?}, got {error:?}"
        );
        assert!(
            error.contains("NoPermission") || error.contains("NO_PERMISSION"),
            "{error}"
        );
        println!("refused: {account:?} send {topic}: {reason}");
    }

    // Admin request codes need an admin account.
    let create = [
        "topic-create",
        "-b",
        &broker,
        "-t",
        "made-by-admin",
        "--json",
    ];
    let refused = admin(&ns, ("alice-key", "alice-secret"), &create);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr
            .contains("Need admin permission for request code=17, but accessKey=alice-key is not"),
        "{stderr}"
    );
    let created = admin(&ns, ("admin-key", "admin-secret"), &create);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    println!("refused: alice topic-create; allowed: admin topic-create");

    // Operators' moves of progress are recorded with the account that signed them; only an
    // admin reads the history.
    let skip = [
        "skip-accumulated",
        "-g",
        "billing",
        "-t",
        "orders",
        "--yes",
        "--json",
    ];
    let skipped = admin(&ns, ("admin-key", "admin-secret"), &skip);
    assert!(
        skipped.status.success(),
        "{}",
        String::from_utf8_lossy(&skipped.stderr)
    );
    let history = ["progress-history", "-g", "billing", "--json"];
    let refused = admin(&ns, ("alice-key", "alice-secret"), &history);
    assert!(!refused.status.success(), "alice read the progress history");
    let read = admin(&ns, ("admin-key", "admin-secret"), &history);
    let text = String::from_utf8_lossy(&read.stdout);
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    assert!(
        text.contains("\"kind\":\"skip\"") && text.contains("\"account\":\"admin-key\""),
        "the skip and its account: {text}"
    );
    println!("recorded: admin-key skipped billing; refused: alice progress-history");

    // Undoing it: the plan first; without --yes and no terminal, nothing is applied.
    let id = text
        .split("\"id\":")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .expect("the entry's id")
        .to_owned();
    let undo = ["progress-restore", "-g", "billing", "--undo", &id, "--json"];
    let dry: Vec<&str> = undo.iter().copied().chain(["--dry-run"]).collect();
    let planned = admin(&ns, ("admin-key", "admin-secret"), &dry);
    let plan = String::from_utf8_lossy(&planned.stdout);
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    assert!(
        plan.contains("\"applied\":false"),
        "a plan, not applied: {plan}"
    );
    let unconfirmed = admin(&ns, ("admin-key", "admin-secret"), &undo);
    assert!(!unconfirmed.status.success(), "applied without --yes");
    assert!(
        String::from_utf8_lossy(&unconfirmed.stderr).contains("--yes"),
        "{}",
        String::from_utf8_lossy(&unconfirmed.stderr)
    );
    let confirmed: Vec<&str> = undo.iter().copied().chain(["--yes"]).collect();
    let applied = admin(&ns, ("admin-key", "admin-secret"), &confirmed);
    let outcome = String::from_utf8_lossy(&applied.stdout);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(outcome.contains("\"applied\":true"), "{outcome}");
    println!("undone: the skip, after a dry run and a refusal without --yes");

    // A changed file takes effect without a restart; a broken one leaves the rules in force.
    std::fs::write(&file, "accounts:\n  - accessKey: [broken\n").expect("break the file");
    // The watcher read the broken file once it says so; then the old rules must still hold.
    let rejected = wait_until(Duration::from_secs(20), || {
        server
            .tail_text()
            .contains("previous ACL rules stay in force")
    })
    .await;
    assert!(
        rejected,
        "the broken file was not reported\n{}",
        server.tail_text()
    );
    assert_eq!(
        send(&ns, alice, "orders").await,
        Ok(()),
        "a broken file changed nothing"
    );
    std::fs::write(&file, rules("\n  - 127.0.0.1")).expect("white-list the test's address");
    let whitelisted = wait_until_async(Duration::from_secs(20), || {
        let ns = ns.clone();
        async move { send(&ns, None, "orders").await.is_ok() }
    })
    .await;
    assert!(
        whitelisted,
        "white-listed address still refused: {}",
        server.tail_text()
    );
    println!("allowed after reload: unsigned send from the white-listed 127.0.0.1");
}

/// One HTTP/1.1 request to the console, with Basic credentials if given: (status, headers and body).
async fn console_request(
    port: u16,
    method: &str,
    path: &str,
    account: Option<(&str, &str)>,
    body: &str,
) -> (u16, String) {
    use base64::Engine;
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect to the console");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        request.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    if let Some((user, password)) = account {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request.push_str(&format!("Authorization: Basic {encoded}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut answer),
    )
    .await
    .expect("an answer within 30 s")
    .expect("read the answer");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_asks_for_an_account_and_acts_as_it() {
    init_logging();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("plain_acl.yml");
    std::fs::write(&file, rules("")).expect("write ACL file");
    let file_arg = file.display().to_string();
    let server = DevServer::start_with_console(
        "acl-console",
        &[
            "--acl-file",
            &file_arg,
            "--acl-access-key",
            "admin-key",
            "--acl-secret-key",
            "admin-secret",
        ],
    );
    let port = server.http_port();
    let alice = Some(("alice-key", "alice-secret"));
    let admin = Some(("admin-key", "admin-secret"));

    let (status, answer) = console_request(port, "GET", "/", None, "").await;
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer.contains("WWW-Authenticate: Basic") || answer.contains("www-authenticate: Basic"),
        "{answer}"
    );
    assert!(answer.contains("No accessKey is configured"), "{answer}");
    let (status, answer) =
        console_request(port, "GET", "/", Some(("alice-key", "wrong-secret")), "").await;
    assert_eq!(status, 401);
    assert!(
        answer.contains("Check signature failed for accessKey=alice-key"),
        "{answer}"
    );
    let (status, page) = console_request(port, "GET", "/topics", alice, "").await;
    assert_eq!(status, 200, "{page}");
    // The metrics endpoint stays open for scrapers.
    let (status, _) = console_request(port, "GET", "/metrics", None, "").await;
    assert_eq!(status, 200);

    // Actions are signed as the operator: alice may not create topics, the admin may.
    let marker = "name=\"csrf\" value=\"";
    let start = page.find(marker).expect("a form with a token") + marker.len();
    let token = &page[start..start + 32];
    let form = format!("csrf={token}&topic=MadeInConsole&read_queues=2&write_queues=2&perm=6");
    let (status, answer) = console_request(port, "POST", "/topics", alice, &form).await;
    assert_ne!(status, 303, "{answer}");
    assert!(
        answer
            .contains("Need admin permission for request code=17, but accessKey=alice-key is not"),
        "{answer}"
    );
    let (status, answer) = console_request(port, "POST", "/topics", admin, &form).await;
    assert_eq!(status, 303, "{answer}\n{}", server.tail_text());
    println!("console: 401 without or with a wrong account; alice sees pages, her topic-create refused; admin's done");
}

/// A raw remoting caller signing as `account`, for requests no client would build.
fn signed_caller(account: (&str, &str)) -> tidemark_remoting::RemotingClient {
    let mut config = tidemark_remoting::ClientConfig::default();
    config.channel.signer = Some(Arc::new(Credentials::new(account.0, account.1)));
    tidemark_remoting::RemotingClient::new(config, None)
}

/// A short-form send (SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE) writing to `short_topic`, with a
/// long-form `topic` field naming `long_topic` beside it.
fn short_form_send(code: RequestCode, short_topic: &str, long_topic: &str) -> RemotingCommand {
    let header = SendMessageRequestHeaderV2 {
        producer_group: "acl-producers".into(),
        topic: short_topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 0,
        sys_flag: 0,
        born_timestamp: 1,
        flag: 0,
        properties: Some(String::new()),
        reconsume_times: Some(0),
        unit_mode: false,
        max_reconsume_times: None,
        batch: code == RequestCode::SendBatchMessage,
        broker_name: None,
    };
    let mut request = RemotingCommand::request_with_header(code, &header);
    request.ext_fields.insert("topic", long_topic);
    let body = if code == RequestCode::SendBatchMessage {
        let entries: Vec<BatchEntry> = (0..5)
            .map(|i| BatchEntry {
                flag: 0,
                body: format!("batched-{i}").into(),
                properties: Properties::new(),
            })
            .collect();
        encode_batch(&entries).expect("encode batch")
    } else {
        "single".into()
    };
    request.with_body(body)
}

/// How many messages `topic`'s queues hold, asked as the admin account.
async fn stored(admin: &tidemark_remoting::RemotingClient, broker: &str, topic: &str) -> i64 {
    let mut total = 0;
    for queue_id in 0..16 {
        let header = GetMaxOffsetRequestHeader {
            topic: topic.into(),
            queue_id,
            committed: None,
            broker_name: None,
        };
        let request = RemotingCommand::request_with_header(RequestCode::GetMaxOffset, &header);
        let response = admin
            .invoke(broker, request, Duration::from_secs(5))
            .await
            .expect("GET_MAX_OFFSET answered");
        if response.response_code() == ResponseCode::Success {
            total += response
                .decode_header::<OffsetResponseHeader>()
                .map_or(0, |header| header.offset);
        }
    }
    total
}

/// A batch is checked on the topic it writes (the short form's `b`), whatever a long-form
/// `topic` field beside it says: refused, nothing stored, no topic created. Before the fix the
/// ACL read `topic` for SEND_BATCH_MESSAGE and these batches were stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_checked_on_the_topic_they_write() {
    let (_dir, _file, server) = start_with_rules("acl-batch");
    let (ns, broker) = (server.namesrv_addr(), server.broker_addr());
    let created = admin(
        &ns,
        ("admin-key", "admin-secret"),
        &["topic-create", "-b", &broker, "-t", "audit", "--json"],
    );
    assert!(created.status.success(), "{created:?}");
    let admin_caller = signed_caller(("admin-key", "admin-secret"));
    let alice = signed_caller(("alice-key", "alice-secret"));

    // The Rust client's batch, as alice: allowed on orders, refused on audit.
    let producer = Producer::builder("acl-producers")
        .client_config(client(&ns, Some(("alice-key", "alice-secret"))))
        .start()
        .await
        .expect("producer");
    let batch = |topic: &str| {
        (0..5)
            .map(|i| Message::new(topic, format!("m{i}")))
            .collect()
    };
    producer
        .send_batch(batch("orders"))
        .await
        .expect("a batch to a permitted topic is stored");
    let refused = producer.send_batch(batch("audit")).await;
    producer.shutdown().await;
    let refused = refused.expect_err("a batch to a denied topic").to_string();
    assert!(refused.contains("topic:audit"), "{refused}");

    // Raw short-form sends naming a permitted topic in the long-form field.
    let fresh = tidemark_tests::unique("acl-fresh");
    for code in [RequestCode::SendBatchMessage, RequestCode::SendMessageV2] {
        for target in ["audit", fresh.as_str()] {
            let response = alice
                .invoke(
                    &broker,
                    short_form_send(code, target, "orders"),
                    Duration::from_secs(5),
                )
                .await
                .expect("answered");
            assert_eq!(
                response.response_code(),
                ResponseCode::NoPermission,
                "{code:?} to {target} with topic=orders: {response:?}"
            );
            assert!(
                response
                    .remark
                    .as_deref()
                    .is_some_and(|remark| remark.contains(&format!("topic:{target}"))),
                "{response:?}"
            );
        }
    }
    assert_eq!(stored(&admin_caller, &broker, "audit").await, 0);
    let configs = admin_caller
        .invoke(
            &broker,
            RemotingCommand::request(RequestCode::GetAllTopicConfig),
            Duration::from_secs(5),
        )
        .await
        .expect("GET_ALL_TOPIC_CONFIG answered");
    let configs = String::from_utf8_lossy(&configs.body);
    assert!(configs.contains("\"audit\""), "{configs}");
    assert!(!configs.contains(&fresh), "a refused batch created {fresh}");
    // The same raw batch to the permitted topic is stored: the refusals were the ACL's.
    let response = alice
        .invoke(
            &broker,
            short_form_send(RequestCode::SendBatchMessage, "orders", "audit"),
            Duration::from_secs(5),
        )
        .await
        .expect("answered");
    assert_eq!(
        response.response_code(),
        ResponseCode::Success,
        "{response:?}"
    );
    assert_eq!(stored(&admin_caller, &broker, "orders").await, 10);
    println!("refused: alice batches and V2 sends to audit/{fresh}; stored: her batches to orders");
}
