//! Cross-language check: Tidemark's RocketMQ 5 gRPC service against Apache RocketMQ's official
//! Rust client (`rocketmq` 5.0.0 from crates.io, apache/rocketmq-clients/rust).
//!
//! Starts `$TIDEMARK_BIN dev` on free ports with a temporary data directory, then:
//! * a Producer sends 10 normal messages (tag, keys, user property); a SimpleConsumer receives
//!   and acks each exactly once, checking body, tag, keys, properties and delivery attempt 1;
//! * one more is received with a 2 s invisible duration and not acked: it must come back (≥ 2 s
//!   later) with delivery attempt 2; after the acked messages' invisibility ran out, nothing else
//!   comes back;
//! * a delay message (delivery timestamp 2–3 s ahead) is not received before that timestamp;
//! * a transaction producer commits one half message and rolls another back: only the committed
//!   one is ever received;
//! * FIFO: a SimpleConsumer of an orderly group (`tidemark admin group-create --orderly`) receives
//!   three message groups' messages in send order, exactly once, and nothing of a group while it
//!   holds that group's earlier message unacknowledged.
//!
//! Prints `grpc-rust: sent=N received=N redelivered=1 delayed=1 committed=1 fifo=9 ok` and exits
//! 0; exits 1 listing the problems, 2 when TIDEMARK_BIN is unset. The server is always stopped
//! and its folder removed.

mod server;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocketmq::conf::{ClientOption, LoggingFormat, ProducerOption, SimpleConsumerOption};
use rocketmq::model::common::{FilterExpression, FilterType};
use rocketmq::model::message::{MessageBuilder, MessageView};
use rocketmq::model::transaction::{Transaction, TransactionResolution};
use rocketmq::{Producer, SimpleConsumer};

use server::Server;

/// The whole check's bound; the server is stopped when it runs out.
const WATCHDOG: Duration = Duration::from_secs(150);

/// Transaction checks the server asked for: both transactions end explicitly, so any is a lost end.
static TRANSACTION_CHECKS: AtomicUsize = AtomicUsize::new(0);

#[derive(Default)]
struct Report {
    problems: Vec<String>,
    sent: usize,
    received: usize,
    redelivered: usize,
    delayed: usize,
    committed: usize,
    fifo: usize,
}

impl Report {
    fn fail(&mut self, problem: String) {
        println!("grpc-rust: PROBLEM: {problem}");
        self.problems.push(problem);
    }
}

fn log(msg: &str) {
    println!("grpc-rust: {msg}");
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{:08x}",
        (nanos as u64 ^ u64::from(std::process::id())) & 0xffff_ffff
    )
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn client_option(endpoint: &str) -> ClientOption {
    let mut option = ClientOption::default();
    option.set_access_url(endpoint);
    option.set_timeout(Duration::from_secs(5));
    // Each empty receive waits this long on the server: short, so the phases stay quick. This
    // client makes it the call's deadline too, which Apache's proxy refuses below its minimum
    // poll (5 s by default; its stand-in, compat/grpc-java/scripts/apache-dev, allows 1 s).
    option.set_long_polling_timeout(Duration::from_secs(3));
    option
}

async fn producer(endpoint: &str, topic: &str) -> Result<Producer, String> {
    producer_checking_types(endpoint, topic, true).await
}

/// `check_types: false` turns off the client's own check of a message's type against the
/// topic's, so that the server's check can be seen.
async fn producer_checking_types(
    endpoint: &str,
    topic: &str,
    check_types: bool,
) -> Result<Producer, String> {
    let mut option = ProducerOption::default();
    option.set_topics(vec![topic]);
    option.set_logging_format(LoggingFormat::Json);
    option.set_validate_message_type(check_types);
    let mut producer =
        Producer::new(option, client_option(endpoint)).map_err(|e| format!("producer: {e}"))?;
    producer
        .start()
        .await
        .map_err(|e| format!("producer start: {e}"))?;
    Ok(producer)
}

async fn consumer(endpoint: &str, group: &str, topic: &str) -> Result<SimpleConsumer, String> {
    let mut option = SimpleConsumerOption::default();
    option.set_consumer_group(group);
    option.set_topics(vec![topic]);
    option.set_logging_format(LoggingFormat::Json);
    let mut consumer = SimpleConsumer::new(option, client_option(endpoint))
        .map_err(|e| format!("consumer: {e}"))?;
    consumer
        .start()
        .await
        .map_err(|e| format!("consumer start: {e}"))?;
    Ok(consumer)
}

/// Receives up to `batch`; a failed call is a problem and reads as nothing received.
async fn receive(
    consumer: &SimpleConsumer,
    topic: &str,
    batch: i32,
    invisible: Duration,
    report: &mut Report,
) -> Vec<MessageView> {
    let all = FilterExpression::new(FilterType::Tag, "*");
    match consumer.receive_with(topic, &all, batch, invisible).await {
        Ok(messages) => messages,
        Err(e) => {
            report.fail(format!("receive from {topic}: {e}"));
            Vec::new()
        }
    }
}

async fn ack(consumer: &SimpleConsumer, message: &MessageView, report: &mut Report) {
    if let Err(e) = consumer.ack(message).await {
        report.fail(format!("{}: ack: {e}", body_of(message)));
    }
}

fn body_of(message: &MessageView) -> String {
    String::from_utf8_lossy(message.body()).into_owned()
}

struct Expected {
    tag: &'static str,
    keys: Vec<String>,
    properties: HashMap<String, String>,
}

fn verify(message: &MessageView, want: &Expected, attempt: i32, report: &mut Report) {
    let body = body_of(message);
    if message.tag() != Some(want.tag) {
        report.fail(format!(
            "{body}: tag {:?}, want {}",
            message.tag(),
            want.tag
        ));
    }
    let keys: HashSet<&String> = message.keys().iter().collect();
    if keys != want.keys.iter().collect::<HashSet<_>>() {
        report.fail(format!(
            "{body}: keys {:?}, want {:?}",
            message.keys(),
            want.keys
        ));
    }
    if message.properties() != &want.properties {
        report.fail(format!(
            "{body}: user properties {:?}, want {:?}",
            message.properties(),
            want.properties
        ));
    }
    if message.delivery_attempt() != attempt {
        report.fail(format!(
            "{body}: delivery attempt {}, want {attempt}",
            message.delivery_attempt()
        ));
    }
}

async fn send_normal(
    producer: &Producer,
    topic: &str,
    body: &str,
    want: &Expected,
    report: &mut Report,
) {
    let built = MessageBuilder::builder()
        .set_topic(topic)
        .set_body(body.as_bytes().to_vec())
        .set_tag(want.tag)
        .set_keys(want.keys.clone())
        .set_properties(want.properties.clone())
        .build();
    let message = match built {
        Ok(message) => message,
        Err(e) => return report.fail(format!("{body}: build: {e}")),
    };
    match producer.send(message).await {
        Ok(receipt) if !receipt.message_id().is_empty() => report.sent += 1,
        Ok(_) => report.fail(format!("{body}: send receipt without a message id")),
        Err(e) => report.fail(format!("{body}: send: {e}")),
    }
}

/// Normal messages: each received and acked once; an unacked one back with attempt 2; nothing
/// else back after the invisibility ran out.
async fn normal_check(server: &Server, report: &mut Report) -> Result<(), String> {
    let endpoint = server.grpc.as_str();
    let suffix = unique_suffix();
    let topic = format!("rust-compat-{suffix}");
    let group = format!("rust-compat-group-{suffix}");
    server.create_topic(&topic, "NORMAL")?;
    let producer = producer(endpoint, &topic).await?;
    let consumer = consumer(endpoint, &group, &topic).await?;
    let mut expected = BTreeMap::new();
    for i in 0..10 {
        let want = Expected {
            tag: "TagA",
            keys: vec![format!("key-{i}"), "rust-key".to_string()],
            properties: HashMap::from([("idx".to_string(), i.to_string())]),
        };
        let body = format!("normal-{i}");
        send_normal(&producer, &topic, &body, &want, report).await;
        expected.insert(body, want);
    }
    log(&format!("sent {} messages to {topic}", report.sent));

    let invisible = Duration::from_secs(5);
    let mut acked: HashMap<String, Instant> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(45);
    while acked.len() < expected.len() && Instant::now() < deadline {
        for message in receive(&consumer, &topic, 16, invisible, report).await {
            let body = body_of(&message);
            let Some(want) = expected.get(&body) else {
                report.fail(format!("unexpected message {body}"));
                continue;
            };
            if acked.contains_key(&body) {
                report.fail(format!("{body}: received again after it was acked"));
                continue;
            }
            verify(&message, want, 1, report);
            ack(&consumer, &message, report).await;
            acked.insert(body, Instant::now());
            report.received += 1;
        }
    }
    let missing: Vec<&String> = expected
        .keys()
        .filter(|b| !acked.contains_key(*b))
        .collect();
    if !missing.is_empty() {
        report.fail(format!("normal: never received {missing:?}"));
    }
    log(&format!(
        "normal: received and acked {}/{}",
        acked.len(),
        expected.len()
    ));

    let probe = Expected {
        tag: "TagP",
        keys: vec!["probe-key".to_string()],
        properties: HashMap::from([("kind".to_string(), "probe".to_string())]),
    };
    send_normal(&producer, &topic, "probe-0", &probe, report).await;
    let mut first = None;
    let probe_deadline = Instant::now() + Duration::from_secs(20);
    while first.is_none() && Instant::now() < probe_deadline {
        for message in receive(&consumer, &topic, 1, Duration::from_secs(2), report).await {
            verify(&message, &probe, 1, report);
            first = Some(Instant::now());
            report.received += 1;
        }
    }
    match first {
        None => report.fail("redelivery: probe-0 was never received".to_string()),
        Some(first) => {
            let mut back = None;
            while back.is_none() && Instant::now() < probe_deadline + Duration::from_secs(10) {
                for message in receive(&consumer, &topic, 1, Duration::from_secs(10), report).await
                {
                    let after = first.elapsed();
                    verify(&message, &probe, 2, report);
                    if after < Duration::from_millis(1500) {
                        report.fail(format!(
                            "redelivery: probe-0 back after {after:?}, before its 2 s invisibility"
                        ));
                    }
                    ack(&consumer, &message, report).await;
                    report.redelivered += 1;
                    back = Some(after);
                }
            }
            match back {
                None => report.fail("redelivery: unacked probe-0 never came back".to_string()),
                Some(after) => log(&format!(
                    "redelivery: probe-0 back after {:.2}s with attempt 2, acked",
                    after.as_secs_f64()
                )),
            }
        }
    }

    if let Some(last) = acked.values().max() {
        let until = *last + invisible + Duration::from_millis(500);
        tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
    }
    for message in receive(&consumer, &topic, 16, Duration::from_secs(10), report).await {
        report.fail(format!(
            "acked message {} came back (attempt {})",
            body_of(&message),
            message.delivery_attempt()
        ));
    }
    log("normal: nothing came back after the invisibility ran out");
    shutdown(producer, consumer).await;
    Ok(())
}

/// A delay message is received at its delivery timestamp, not before.
async fn delay_check(server: &Server, report: &mut Report) -> Result<(), String> {
    let endpoint = server.grpc.as_str();
    let suffix = unique_suffix();
    let topic = format!("rust-delay-{suffix}");
    let group = format!("rust-delay-group-{suffix}");
    server.create_topic(&topic, "DELAY")?;
    let producer = producer(endpoint, &topic).await?;
    let consumer = consumer(endpoint, &group, &topic).await?;
    // This client takes (and reports) delivery timestamps in whole seconds since the epoch.
    let deliver_at_secs = now_millis() / 1000 + 3;
    let deliver_at = deliver_at_secs * 1000;
    let message =
        MessageBuilder::delay_message_builder(&topic, b"delay-0".to_vec(), deliver_at_secs).build();
    match message {
        Ok(message) => match producer.send(message).await {
            Ok(_) => report.sent += 1,
            Err(e) => report.fail(format!("delay-0: send: {e}")),
        },
        Err(e) => report.fail(format!("delay-0: build: {e}")),
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while report.delayed == 0 && Instant::now() < deadline {
        for message in receive(&consumer, &topic, 1, Duration::from_secs(10), report).await {
            let early = deliver_at - now_millis();
            // Clocks are the same machine's; 100 ms covers rounding between the two reads.
            if early > 100 {
                report.fail(format!(
                    "delay-0 received {early} ms before its delivery time"
                ));
            }
            if message.delivery_timestamp() != Some(deliver_at_secs) {
                report.fail(format!(
                    "delay-0: delivery timestamp {:?} s, want {deliver_at_secs} s",
                    message.delivery_timestamp()
                ));
            }
            ack(&consumer, &message, report).await;
            report.delayed += 1;
            report.received += 1;
            log(&format!(
                "delay: received {} ms after its delivery time",
                -early
            ));
        }
    }
    if report.delayed == 0 {
        report.fail("delay-0 was never received".to_string());
    }
    shutdown(producer, consumer).await;
    Ok(())
}

/// A committed half message is delivered; a rolled-back one never is.
async fn transaction_check(server: &Server, report: &mut Report) -> Result<(), String> {
    let endpoint = server.grpc.as_str();
    let suffix = unique_suffix();
    let topic = format!("rust-txn-{suffix}");
    let group = format!("rust-txn-group-{suffix}");
    server.create_topic(&topic, "TRANSACTION")?;
    let mut option = ProducerOption::default();
    option.set_topics(vec![topic.as_str()]);
    option.set_logging_format(LoggingFormat::Json);
    // Both transactions end explicitly; a check from the server would mean an end was lost.
    let checker = Box::new(|transaction_id: String, _message: MessageView| {
        println!("grpc-rust: server asked to check transaction {transaction_id}");
        TRANSACTION_CHECKS.fetch_add(1, Ordering::SeqCst);
        TransactionResolution::ROLLBACK
    });
    let mut producer = Producer::new_transaction_producer(option, client_option(endpoint), checker)
        .map_err(|e| format!("transaction producer: {e}"))?;
    producer
        .start()
        .await
        .map_err(|e| format!("transaction producer start: {e}"))?;
    let consumer = consumer(endpoint, &group, &topic).await?;
    for (body, commit) in [("txn-commit", true), ("txn-rollback", false)] {
        let message = MessageBuilder::transaction_message_builder(&topic, body.as_bytes().to_vec())
            .set_tag("TagT")
            .build()
            .map_err(|e| format!("{body}: build: {e}"))?;
        let transaction = match producer.send_transaction_message(message).await {
            Ok(transaction) => transaction,
            Err(e) => {
                report.fail(format!("{body}: send half message: {e}"));
                continue;
            }
        };
        report.sent += 1;
        let ended = if commit {
            transaction.commit().await
        } else {
            transaction.rollback().await
        };
        if let Err(e) = ended {
            report.fail(format!("{body}: end transaction: {e}"));
        }
    }
    // The server checks half messages a second old every second (see server.rs), so three
    // seconds after both ends a lost end would have drawn a check-back, and a wrongly delivered
    // rolled-back message would have come with the committed one.
    let ended = Instant::now();
    let no_check_window = Duration::from_secs(3);
    let deadline = ended + Duration::from_secs(12);
    while Instant::now() < deadline && (report.committed == 0 || ended.elapsed() < no_check_window)
    {
        for message in receive(&consumer, &topic, 4, Duration::from_secs(10), report).await {
            match body_of(&message).as_str() {
                "txn-commit" if report.committed == 0 => {
                    report.committed += 1;
                    report.received += 1;
                }
                other => report.fail(format!("transaction: received {other}")),
            }
            ack(&consumer, &message, report).await;
        }
    }
    if report.committed != 1 {
        report.fail("transaction: the committed message was never received".to_string());
    }
    let checks = TRANSACTION_CHECKS.load(Ordering::SeqCst);
    if checks > 0 {
        report.fail(format!(
            "transaction: the server asked for {checks} check(s) of ended transactions"
        ));
    }
    log(&format!(
        "transaction: committed received {}, rolled back never received",
        report.committed
    ));
    shutdown(producer, consumer).await;
    Ok(())
}

/// FIFO in an orderly group: each message group's messages in order, exactly once, and none of a
/// group while its earlier message is held unacknowledged.
async fn fifo_check(server: &Server, report: &mut Report) -> Result<(), String> {
    let suffix = unique_suffix();
    let topic = format!("rust-fifo-{suffix}");
    let group = format!("rust-fifo-group-{suffix}");
    server.create_orderly_group(&group)?;
    server.create_topic(&topic, "FIFO")?;
    let producer = producer(&server.grpc, &topic).await?;
    // A message without a message group is NORMAL: a FIFO topic's server refuses it.
    let unchecked = producer_checking_types(&server.grpc, &topic, false).await?;
    let normal = MessageBuilder::builder()
        .set_topic(&topic)
        .set_body(b"not-fifo".to_vec())
        .build()
        .map_err(|e| format!("not-fifo: build: {e}"))?;
    match unchecked.send(normal).await {
        Ok(receipt) => report.fail(format!(
            "fifo: a NORMAL message to a FIFO topic was accepted ({})",
            receipt.message_id()
        )),
        Err(e) => log(&format!(
            "fifo: a NORMAL message to the FIFO topic refused: {e}"
        )),
    }
    if let Err(e) = unchecked.shutdown().await {
        log(&format!("WARNING: producer shutdown: {e}"));
    }
    let groups = ["order-a", "order-b", "order-c"];
    let per_group = 3;
    for i in 0..per_group {
        for g in groups {
            let body = format!("{g}/{i}");
            let message = MessageBuilder::fifo_message_builder(&topic, body.as_bytes().to_vec(), g)
                .set_tag("TagF")
                .build()
                .map_err(|e| format!("{body}: build: {e}"))?;
            match producer.send(message).await {
                Ok(_) => report.sent += 1,
                Err(e) => report.fail(format!("{body}: send: {e}")),
            }
        }
    }
    let consumer = consumer(&server.grpc, &group, &topic).await?;
    let mut next: HashMap<String, usize> = groups.iter().map(|g| (g.to_string(), 0)).collect();
    let problems_before = report.problems.len();
    let mut rounds = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let hold = Duration::from_secs(20);
    'rounds: while next.values().sum::<usize>() < per_group * groups.len() {
        rounds += 1;
        if Instant::now() > deadline || rounds > 60 {
            report.fail(format!(
                "fifo: received {next:?} of {per_group} per group after {rounds} rounds"
            ));
            break;
        }
        let mut pending = receive(&consumer, &topic, 2, hold, report).await;
        // While those are held unacknowledged (checked in the first rounds; each check waits out
        // a long poll), anything else must be of other groups.
        if rounds <= 3 && !pending.is_empty() {
            let held: HashSet<String> = pending
                .iter()
                .map(|m| m.message_group().unwrap_or_default().to_string())
                .collect();
            for m in receive(&consumer, &topic, 2, hold, report).await {
                let g = m.message_group().unwrap_or_default();
                if held.contains(g) {
                    report.fail(format!(
                        "fifo: received {} while an earlier message of {g} was unacknowledged",
                        body_of(&m)
                    ));
                }
                pending.push(m);
            }
        }
        for m in &pending {
            let g = m.message_group().unwrap_or_default().to_string();
            let seen = next.entry(g.clone()).or_insert(0);
            let want = format!("{g}/{seen}");
            if body_of(m) != want {
                report.fail(format!(
                    "fifo: group {g}: received {}, want {want}",
                    body_of(m)
                ));
                break 'rounds;
            }
            *seen += 1;
        }
        if report.problems.len() > problems_before {
            break;
        }
        for m in &pending {
            ack(&consumer, m, report).await;
            report.fifo += 1;
        }
    }
    let again = receive(&consumer, &topic, 2, hold, report).await;
    if !again.is_empty() {
        report.fail(format!(
            "fifo: {} received again after all were acked",
            again.len()
        ));
    }
    log(&format!(
        "fifo: {} messages in {} groups received in order, exactly once, in {rounds} rounds",
        report.fifo,
        groups.len()
    ));
    shutdown(producer, consumer).await;
    Ok(())
}

async fn shutdown(producer: Producer, consumer: SimpleConsumer) {
    if let Err(e) = consumer.shutdown().await {
        log(&format!("WARNING: consumer shutdown: {e}"));
    }
    if let Err(e) = producer.shutdown().await {
        log(&format!("WARNING: producer shutdown: {e}"));
    }
}

async fn run(server: &Server, report: &mut Report) -> Result<(), String> {
    normal_check(server, report).await?;
    delay_check(server, report).await?;
    transaction_check(server, report).await?;
    fifo_check(server, report).await
}

#[tokio::main]
async fn main() {
    let Some(binary) = std::env::var_os("TIDEMARK_BIN") else {
        eprintln!(
            "grpc-rust: TIDEMARK_BIN is not set; set it to the tidemark binary \
             (e.g. TIDEMARK_BIN=$PWD/target/debug/tidemark); the check starts `tidemark dev` itself"
        );
        std::process::exit(2);
    };
    let started = Instant::now();
    let mut report = Report::default();
    // The client's file logger opens logs/rocketmq_client.log under the working directory (and
    // panics when that folder is missing): give it a temporary one.
    let log_home =
        std::env::temp_dir().join(format!("tidemark-grpc-rust-logs-{}", unique_suffix()));
    let entered = std::fs::create_dir_all(log_home.join("logs"))
        .and_then(|()| std::env::set_current_dir(&log_home));
    if let Err(e) = entered {
        println!(
            "grpc-rust: FAILED: client log folder {}: {e}",
            log_home.display()
        );
        std::process::exit(1);
    }
    let cli = std::env::var_os("TIDEMARK_CLI").unwrap_or_else(|| binary.clone());
    let mut server = match Server::start(binary.into(), cli.into()) {
        Ok(server) => server,
        Err(e) => {
            println!("grpc-rust: FAILED: {e}");
            std::process::exit(1);
        }
    };
    log(&format!("tidemark dev ready: grpc={}", server.grpc));
    match tokio::time::timeout(WATCHDOG, run(&server, &mut report)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => report.fail(e),
        Err(_) => report.fail(format!("the check exceeded {WATCHDOG:?}")),
    }
    let tail = server.tail(30);
    log(&format!("server stop: {}", server.stop()));
    let figures = format!(
        "sent={} received={} redelivered={} delayed={} committed={} fifo={}",
        report.sent,
        report.received,
        report.redelivered,
        report.delayed,
        report.committed,
        report.fifo
    );
    let elapsed = started.elapsed().as_secs_f64();
    if report.problems.is_empty() {
        log(&format!("{figures} ok (elapsed {elapsed:.1}s)"));
        let _ = std::env::set_current_dir(std::env::temp_dir());
        let _ = std::fs::remove_dir_all(&log_home);
        std::process::exit(0);
    }
    log(&figures);
    log(&format!(
        "FAILED with {} problem(s) (elapsed {elapsed:.1}s):",
        report.problems.len()
    ));
    for p in &report.problems {
        log(&format!("  - {p}"));
    }
    log(&format!("server log tail:\n{tail}"));
    log(&format!("client log kept in {}", log_home.display()));
    std::process::exit(1);
}
