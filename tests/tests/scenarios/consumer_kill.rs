//! A Rust push consumer (`tidemark admin consume-message`, which acknowledges a message only once
//! it printed it) is SIGKILLed in the middle of a stream; a new consumer of the group then
//! redelivers only what the killed one had not reported — about one progress-report interval
//! (100 ms) of work. RocketMQ's clients report every 5 s (and on pulls), so a kill there replays
//! up to 5 s. The consumer works through a backlog at about 1,000 msg/s, held to that pace by the
//! test reading its output slowly.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemark_client::{Message, Producer};
use tidemark_tests::{
    against_apache, init_logging, tidemark_binary, unique, wait_until, wait_until_async, BrokerSet,
    DevServer,
};

/// The first consumer is killed once the test read this many of its lines.
const KILL_AFTER: usize = 2_000;
/// The first consumer's pace: about 1,000 messages a second.
const FIRST_LINE_DELAY: Duration = Duration::from_millis(1);
const BACKLOG: usize = 6_000;

/// (queue id, queue offset) of every message a consume-message process printed.
type Printed = Arc<Mutex<BTreeSet<(i64, i64)>>>;

/// A consume-message process and what it printed: the messages, how many lines, and when the
/// first came.
struct Consumer {
    child: Child,
    /// The thread reading its stdout: done once the pipe is closed and drained.
    reader: Option<std::thread::JoinHandle<()>>,
    printed: Printed,
    lines: Arc<Mutex<usize>>,
    first_line_at: Arc<Mutex<Option<Instant>>>,
}

/// `line_delay`: the reader takes this long per line, so a full pipe holds the consumer to that
/// pace (its listener acknowledges a message once the line is written).
impl Consumer {
    /// SIGKILL, then wait until the reader has handled every line the process printed (the pipe
    /// is closed once the process is gone, so the reader ends after draining it).
    async fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            tokio::task::spawn_blocking(move || reader.join())
                .await
                .expect("join task")
                .expect("the reader thread did not panic");
        }
    }
}

fn spawn_consumer(namesrv: &str, topic: &str, group: &str, line_delay: Duration) -> Consumer {
    let mut child = Command::new(tidemark_binary())
        .args([
            "admin",
            "consume-message",
            "-n",
            namesrv,
            "-t",
            topic,
            "-g",
            group,
        ])
        .args(["--timeout-secs", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tidemark admin consume-message");
    let printed: Printed = Arc::default();
    let lines = Arc::new(Mutex::new(0usize));
    let stdout = child.stdout.take().expect("stdout");
    let first_line_at = Arc::new(Mutex::new(None));
    let (sink, count, first) = (printed.clone(), lines.clone(), first_line_at.clone());
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Ok(value) = tidemark_protocol::json::parse(line.as_bytes()) else {
                continue;
            };
            let field = |name: &str| match value.get(name) {
                Some(tidemark_protocol::json::Value::Int(number)) => *number,
                _ => -1,
            };
            sink.lock()
                .expect("lock")
                .insert((field("queueId"), field("queueOffset")));
            *count.lock().expect("lock") += 1;
            first.lock().expect("lock").get_or_insert_with(Instant::now);
            if !line_delay.is_zero() {
                std::thread::sleep(line_delay);
            }
        }
    });
    Consumer {
        child,
        reader: Some(reader),
        printed,
        lines,
        first_line_at,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_rust_consumer_replays_about_one_report_interval() {
    if against_apache() {
        eprintln!("skipped: runs the tidemark binary's consumer");
        return;
    }
    init_logging();
    let server = DevServer::start("consumer-kill", &[]);
    let topic = unique("KillT");
    let group = unique("KillG");
    let producer = Producer::builder(unique("producer"))
        .namesrv_addr(server.namesrv_addr())
        .start()
        .await
        .expect("producer");
    for chunk in 0..BACKLOG / 50 {
        let batch = (0..50)
            .map(|i| Message::new(topic.as_str(), format!("m-{}", chunk * 50 + i)))
            .collect();
        producer.send_batch(batch).await.expect("send batch");
    }
    producer.shutdown().await;
    let total = BACKLOG;

    let mut first = spawn_consumer(&server.namesrv_addr(), &topic, &group, FIRST_LINE_DELAY);
    assert!(
        wait_until(Duration::from_secs(90), || *first
            .lines
            .lock()
            .expect("lock")
            >= KILL_AFTER)
        .await,
        "the first consumer printed only {} messages\n{}",
        first.lines.lock().expect("lock"),
        server.tail_text()
    );
    let consuming_for = first
        .first_line_at
        .lock()
        .expect("lock")
        .map_or(Duration::from_secs(1), |at| at.elapsed());
    // What it printed before the kill may still sit in the pipe: `kill` returns once the reader
    // has drained it.
    first.kill().await;
    let first_set = first.printed.lock().expect("lock").clone();
    let rate = first_set.len() as f64 / consuming_for.as_secs_f64().max(0.01);

    let mut second = spawn_consumer(&server.namesrv_addr(), &topic, &group, Duration::ZERO);
    let second_printed = second.printed.clone();
    let all_seen = wait_until(Duration::from_secs(90), || {
        let second = second_printed.lock().expect("lock");
        first_set.union(&second).count() >= total
    })
    .await;
    second.kill().await;
    let second_set = second_printed.lock().expect("lock").clone();
    assert!(
        all_seen,
        "the group lost messages: {} + {} distinct of {total}",
        first_set.len(),
        second_set.len()
    );
    let duplicates = first_set.intersection(&second_set).count();
    // One report interval (100 ms) of work at the consumer's pace, with room for a busy machine and
    // what was delivered out of order above the lowest unfinished message; RocketMQ's clients
    // report every 5 s.
    // Measured here: 29 at 1,000 msg/s; 253 with the reporter off (progress then rides only on
    // pulls), thousands with RocketMQ's 5 s persist alone.
    let bound = (rate * 0.15) as usize + 60;
    println!(
        "consumer SIGKILL with a backlog after {} of {total} messages at {rate:.0} msg/s: {duplicates} \
         redelivered (bound {bound}; RocketMQ's 5 s persist: up to {:.0})",
        first_set.len(),
        rate * 5.0
    );
    assert!(
        duplicates <= bound,
        "{duplicates} messages redelivered after the kill (bound {bound})"
    );
}

/// Messages after the stuck one.
const AFTER_STUCK: usize = 1_500;

/// Runs only as the child of `one_stuck_message_is_all_the_next_consumer_gets_again`: a push
/// consumer whose listener never returns for the message with body `stuck` and prints
/// `consumed <offset>` for every other one, until the parent kills it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a scenario; does nothing on its own"]
async fn stuck_consumer_child() {
    let (Ok(namesrv), Ok(topic), Ok(group)) = (
        std::env::var("TIDEMARK_CHILD_NAMESRV"),
        std::env::var("TIDEMARK_CHILD_TOPIC"),
        std::env::var("TIDEMARK_CHILD_GROUP"),
    ) else {
        return;
    };
    let _consumer = tidemark_client::PushConsumer::builder(group)
        .namesrv_addr(namesrv)
        .subscribe(topic, "*")
        .consume_from_where(tidemark_client::ConsumeFromWhere::ConsumeFromFirstOffset)
        .start_concurrently(tidemark_client::concurrent_fn(
            |messages: Vec<tidemark_client::MessageExt>| async move {
                for message in &messages {
                    if &message.body[..] == b"stuck" {
                        std::future::pending::<()>().await;
                    }
                    println!("consumed {}", message.queue_offset);
                }
                tidemark_client::ConsumeStatus::Success
            },
        ))
        .await
        .expect("child consumer");
    // Killed long before this.
    tokio::time::sleep(Duration::from_secs(120)).await;
}

/// The listener blocks on one message while the 1,500 after it complete; the consumer is
/// SIGKILLed; the next consumer of the group gets only the stuck message again, because the
/// killed one reported the completed ones as acknowledged ranges above its commit offset.
/// RocketMQ (offset only): all 1,501.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stuck_message_is_all_the_next_consumer_gets_again() {
    if against_apache() {
        eprintln!("skipped: acknowledged ranges are Tidemark's extension");
        return;
    }
    init_logging();
    // Stuck after one second, so the operator's view shows it while the test runs.
    let server = BrokerSet::start(
        "stuck-message",
        &["ASYNC_MASTER"],
        "consumer_stuck_threshold_ms = 1000\n",
    );
    let topic = unique("StuckT");
    let group = unique("StuckG");
    let producer = Producer::builder(unique("producer"))
        .namesrv_addr(server.namesrv_addr())
        .start()
        .await
        .expect("producer");
    let first = producer
        .send(Message::new(topic.as_str(), "stuck"))
        .await
        .expect("send");
    // Everything in the stuck message's queue, after it.
    for i in 0..AFTER_STUCK {
        producer
            .send_to_queue(
                Message::new(topic.as_str(), format!("m-{i}")),
                first.queue.clone(),
            )
            .await
            .expect("send");
    }
    producer.shutdown().await;

    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            own_test("stuck_consumer_child").as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("TIDEMARK_CHILD_NAMESRV", server.namesrv_addr())
        .env("TIDEMARK_CHILD_TOPIC", &topic)
        .env("TIDEMARK_CHILD_GROUP", &group)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the child consumer");
    let consumed = Arc::new(Mutex::new(BTreeSet::new()));
    let stdout = child.stdout.take().expect("stdout");
    let sink = consumed.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(offset) = line
                .strip_prefix("consumed ")
                .and_then(|o| o.parse::<i64>().ok())
            {
                sink.lock().expect("lock").insert(offset);
            }
        }
    });
    let done = wait_until(Duration::from_secs(90), || {
        consumed.lock().expect("lock").len() >= AFTER_STUCK
    })
    .await;
    if !done {
        let _ = child.kill();
        panic!(
            "the child consumed {} of {AFTER_STUCK}\n{}",
            consumed.lock().expect("lock").len(),
            server.tails()
        );
    }
    // What an operator sees meanwhile: the group held at the stuck message's offset, its age as
    // time lag, the later messages done; and the broker says so once in its log.
    let stuck_view = wait_until_async(Duration::from_secs(30), || {
        let (namesrv, topic, group) = (server.namesrv_addr(), topic.clone(), group.clone());
        let stuck_offset = first.queue_offset;
        async move {
            let output = tokio::task::spawn_blocking(move || {
                Command::new(tidemark_binary())
                    .args(["admin", "consumer-progress", "-n", &namesrv, "-g", &group])
                    .args(["-t", &topic, "--json"])
                    .output()
            })
            .await;
            let Ok(Ok(output)) = output else { return false };
            let Ok(value) = tidemark_protocol::json::parse(&output.stdout) else {
                return false;
            };
            let Some(tidemark_protocol::json::Value::Array(queues)) = value.get("queues") else {
                return false;
            };
            queues.iter().any(|queue| {
                let field = |name: &str| match queue.get(name) {
                    Some(tidemark_protocol::json::Value::Int(number)) => *number,
                    _ => -2,
                };
                field("stuckOffset") == stuck_offset
                    && field("ackedAbove") == AFTER_STUCK as i64
                    && field("timeLagMs") > 0
            })
        }
    })
    .await;
    assert!(
        stuck_view,
        "consumer-progress never showed the stuck message\n{}",
        server.tails()
    );
    let logged = wait_until(Duration::from_secs(20), || {
        server.tails().contains("held back by one message")
    })
    .await;
    assert!(
        logged,
        "the broker did not log the stuck group\n{}",
        server.tails()
    );
    child.kill().expect("SIGKILL");
    let _ = child.wait();

    let redelivered = Arc::new(Mutex::new(Vec::new()));
    let sink = redelivered.clone();
    let next = tidemark_client::PushConsumer::builder(group.as_str())
        .namesrv_addr(server.namesrv_addr())
        .subscribe(topic.as_str(), "*")
        .start_concurrently(tidemark_client::concurrent_fn(
            move |messages: Vec<tidemark_client::MessageExt>| {
                let sink = sink.clone();
                async move {
                    let mut seen = sink.lock().expect("lock");
                    seen.extend(
                        messages
                            .into_iter()
                            .map(|m| String::from_utf8_lossy(&m.body).into_owned()),
                    );
                    tidemark_client::ConsumeStatus::Success
                }
            },
        ))
        .await
        .expect("next consumer");
    assert!(
        wait_until(Duration::from_secs(60), || !redelivered
            .lock()
            .expect("lock")
            .is_empty())
        .await,
        "the stuck message never came back\n{}",
        server.tails()
    );
    // Anything else would arrive with it or right after.
    tokio::time::sleep(Duration::from_secs(3)).await;
    next.shutdown().await;
    let redelivered = redelivered.lock().expect("lock").clone();
    println!(
        "stuck message, {AFTER_STUCK} later ones completed, consumer SIGKILLed: the next consumer got {} \
         (RocketMQ: {})",
        redelivered.len(),
        AFTER_STUCK + 1
    );
    assert_eq!(
        redelivered.len(),
        1,
        "redelivered {} messages, the first: {:?}",
        redelivered.len(),
        &redelivered[..redelivered.len().min(5)]
    );
    assert_eq!(redelivered[0], "stuck");
}

/// The full name of `test` in this binary, where this file is a module: what `--exact` needs.
fn own_test(test: &str) -> String {
    let module = module_path!()
        .split_once("::")
        .map_or("", |(_, module)| module);
    format!("{module}::{test}")
}
