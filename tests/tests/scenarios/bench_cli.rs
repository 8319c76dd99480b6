//! `tidemark bench` in test mode (a second or two each) against `tidemark dev`: every produce
//! mode, sends spread over many topics with idle connections held, consume (pull, POP and
//! gRPC), gRPC sends, e2e on a topic that does not exist yet, commit, and the loopback floor —
//! each measuring real messages with no errors, and its figures consistent with what the server
//! holds.

use std::process::Command;

use tidemark_client::{Admin, ClientConfig};
use tidemark_protocol::json::{self, Value};
use tidemark_tests::{init_logging, tidemark_binary, unique, DevServer};

/// Runs `tidemark bench <args…> --json` and returns its summary, the run having succeeded.
async fn bench(args: &[&str]) -> Value {
    let mut line: Vec<String> = vec!["bench".into()];
    line.extend(args.iter().map(|word| (*word).to_owned()));
    line.push("--json".into());
    let shown = line.join(" ");
    let output = tokio::task::spawn_blocking(move || {
        Command::new(tidemark_binary())
            .args(&line)
            .output()
            .expect("run tidemark bench")
    })
    .await
    .expect("bench thread");
    assert!(
        output.status.success(),
        "{shown} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    json::parse(last.as_bytes())
        .unwrap_or_else(|failure| panic!("{shown} printed no JSON summary ({failure}): {stdout}"))
}

fn int(summary: &Value, key: &str) -> i64 {
    match summary.get(key) {
        Some(Value::Int(value)) => *value,
        other => panic!("{key}: expected a number, got {other:?} in {summary:?}"),
    }
}

/// Messages measured, no errors, and latency percentiles in order.
fn check(summary: &Value, mode: &str) -> i64 {
    assert_eq!(
        summary.get("mode"),
        Some(&Value::String(mode.into())),
        "{summary:?}"
    );
    let messages = int(summary, "messages");
    assert!(messages > 0, "{mode} measured no messages: {summary:?}");
    assert_eq!(int(summary, "errors"), 0, "{summary:?}");
    let (p50, p99, p999, max) = (
        int(summary, "p50Us"),
        int(summary, "p99Us"),
        int(summary, "p999Us"),
        int(summary, "maxUs"),
    );
    assert!(
        0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= max,
        "{mode}: percentiles out of order: {summary:?}"
    );
    messages
}

/// The loopback floor needs no server: it measures its own echo.
#[tokio::test]
async fn the_loopback_floor_measures_round_trips() {
    let summary = bench(&["rtt", "--duration", "1", "--warmup", "0", "--size", "64"]).await;
    let round_trips = check(&summary, "rtt");
    // 64 bytes each way per round trip, counted once.
    let measured = match summary.get("mbPerSec") {
        Some(Value::Float(rate)) => *rate,
        Some(Value::Int(rate)) => *rate as f64,
        other => panic!("mbPerSec: {other:?}"),
    };
    let expected = round_trips as f64 * 64.0 / (1024.0 * 1024.0);
    assert!(
        (measured - expected).abs() <= expected * 0.01 + 1e-9,
        "{round_trips} round trips of 64 B in 1 s, {measured} MB/s reported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bench_measures_real_messages() {
    init_logging();
    let server = DevServer::start("bench-cli", &[]);
    let ns = server.namesrv_addr();
    let short = ["--duration", "1", "--warmup", "1"];

    // Each produce mode on a topic the bench makes itself.
    let topic = unique("BenchTopic");
    let mut measured = 0;
    for (mode, name) in [
        ("sync", "produce"),
        ("async", "produce-async"),
        ("oneway", "produce-oneway"),
        ("batch", "produce-batch"),
    ] {
        let mut args = vec!["produce", "-n", &ns, "-t", &topic, "--producers", "2"];
        args.extend(["--mode", mode, "--batch", "8", "--inflight", "8"]);
        args.extend(short);
        let summary = bench(&args).await;
        measured += check(&summary, name);
        if mode == "batch" {
            assert_eq!(
                int(&summary, "messages") % 8,
                0,
                "batches count their messages: {summary:?}"
            );
        }
    }
    // The warm-up's messages are stored too, so the topic holds at least what was measured.
    let admin = Admin::connect(ClientConfig::new(&ns)).await.expect("admin");
    let stats = admin.topic_stats(&topic).await.expect("topic stats");
    let stored: i64 = stats
        .offset_table
        .values()
        .map(|queue| queue.max_offset)
        .sum();
    admin.shutdown().await;
    assert!(
        stored >= measured,
        "{stored} stored, {measured} measured as sent"
    );

    // Sends spread over five topics the bench makes with three queues each, with idle
    // connections held meanwhile: every topic gets messages, in its three queues.
    let spread = unique("BenchSpread");
    let mut args = vec!["produce", "-n", &ns, "-t", &spread, "--producers", "2"];
    args.extend(["--topics", "5", "--queues", "3", "--idle-connections", "20"]);
    args.extend(short);
    check(&bench(&args).await, "produce");
    let admin = Admin::connect(ClientConfig::new(&ns)).await.expect("admin");
    for name in std::iter::once(spread.clone()).chain((1..5).map(|i| format!("{spread}-{i}"))) {
        let stats = admin.topic_stats(&name).await.expect("topic stats");
        let stored: i64 = stats.offset_table.values().map(|q| q.max_offset).sum();
        assert!(stored > 0, "{name} got no messages");
        assert_eq!(stats.offset_table.len(), 3, "{name}'s queues: {stats:?}");
    }
    admin.shutdown().await;

    // A fresh group reads the topic from its first message.
    let summary = bench(&[
        "consume",
        "-n",
        &ns,
        "-t",
        &topic,
        "--duration",
        "2",
        "--warmup",
        "0",
    ])
    .await;
    check(&summary, "consume");

    // POP, then RocketMQ 5's gRPC: sends, and a fresh group receiving and acknowledging.
    let pop = ["consume", "--pop", "-n", &ns, "-t", &topic];
    let summary = bench(&[&pop[..], &["--duration", "2", "--warmup", "0"]].concat()).await;
    check(&summary, "pop-consume");
    let grpc = server.grpc_addr();
    let mut args = vec!["produce", "--grpc", &grpc, "-n", &ns, "-t", &topic];
    args.extend(["--producers", "2"]);
    args.extend(short);
    check(&bench(&args).await, "grpc-produce");
    let receive = ["consume", "--grpc", &grpc, "-n", &ns, "-t", &topic];
    let summary = bench(&[&receive[..], &["--duration", "2", "--warmup", "0"]].concat()).await;
    check(&summary, "grpc-consume");

    // End to end on a topic that does not exist yet, paced at 400 sends/s: only messages made
    // after the warm-up count, so about 400 in the measured second.
    let fresh = unique("BenchE2e");
    let summary = bench(&[
        "e2e",
        "-n",
        &ns,
        "-t",
        &fresh,
        "--producers",
        "2",
        "--rate",
        "400",
        "--duration",
        "1",
        "--warmup",
        "1",
    ])
    .await;
    let received = check(&summary, "e2e");
    assert!(
        (200..=440).contains(&received),
        "e2e at 400/s for 1 s received {received}: {summary:?}"
    );

    // Durable offset commits straight to the broker.
    let broker = server.broker_addr();
    let summary = bench(&[
        "commit",
        "-b",
        &broker,
        "-t",
        &topic,
        "--entries",
        "64",
        "--clients",
        "2",
        "--inflight",
        "4",
        "--duration",
        "1",
        "--warmup",
        "0",
    ])
    .await;
    check(&summary, "commit");
}
