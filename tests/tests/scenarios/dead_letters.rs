//! Dead letters and retries acted on with `tidemark admin`, against `tidemark dev` with the Rust
//! client: one group consumes two topics and fails every message once (max reconsume 0, so
//! each goes straight to `%DLQ%group`). `dead-letters` lists all six with their original
//! topic and keys; `dead-letter-resend --all -t A` sends A's three back through the group's
//! retry topic, and the group gets exactly those again, not B's; `retry-replay -t A` puts the
//! consumed retries of A back, again not B's. Both are in the group's progress history and
//! counted on `/metrics`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemark_client::{
    concurrent_fn, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer,
};
use tidemark_tests::admin_cli::{admin, admin_json, int, rows, text};
use tidemark_tests::webdriver::{csrf_token, http};
use tidemark_tests::{init_logging, unique, wait_until, wait_until_async, DevServer};

type Seen = Arc<Mutex<Vec<String>>>;

/// A push consumer of `group` on both topics: records every body, then fails or succeeds.
async fn consumer(
    namesrv: &str,
    group: &str,
    topics: [&str; 2],
    fail: bool,
) -> (PushConsumer, Seen) {
    let seen: Seen = Arc::default();
    let recording = seen.clone();
    let consumer = PushConsumer::builder(group)
        .namesrv_addr(namesrv)
        .subscribe(topics[0], "*")
        .subscribe(topics[1], "*")
        .consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset)
        .max_reconsume_times(0)
        .rebalance_interval(Duration::from_secs(1))
        .start_concurrently(concurrent_fn(move |messages: Vec<MessageExt>| {
            let seen = recording.clone();
            async move {
                seen.lock().expect("lock").extend(
                    messages
                        .iter()
                        .map(|message| String::from_utf8_lossy(&message.body).into_owned()),
                );
                if fail {
                    ConsumeStatus::ReconsumeLater
                } else {
                    ConsumeStatus::Success
                }
            }
        }))
        .await
        .expect("consumer");
    (consumer, seen)
}

fn bodies(seen: &Seen) -> BTreeSet<String> {
    seen.lock().expect("lock").iter().cloned().collect()
}

fn of_topic(prefix: &str) -> BTreeSet<String> {
    (0..3).map(|index| format!("{prefix}-{index}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_resent_and_retries_replayed_for_one_topic() {
    init_logging();
    let server = DevServer::start_with_console("dead-letters", &[]);
    let ns = server.namesrv_addr();
    let (topic_a, topic_b, group) = (unique("DlqA"), unique("DlqB"), unique("DlqG"));
    let producer = Producer::builder(unique("DlqP"))
        .namesrv_addr(&ns)
        .start()
        .await
        .expect("producer");
    for (topic, prefix) in [(&topic_a, "a"), (&topic_b, "b")] {
        for index in 0..3 {
            let message = Message::new(topic.as_str(), format!("{prefix}-{index}"))
                .with_keys([format!("key-{prefix}-{index}")]);
            producer.send(message).await.expect("sent");
        }
    }
    producer.shutdown().await;

    let (failing, _) = consumer(&ns, &group, [&topic_a, &topic_b], true).await;
    let all_dead = wait_until_async(Duration::from_secs(60), || async {
        let listed = admin(&["dead-letters"], &ns, &["-g", &group, "--json"]).await;
        listed.status.success()
            && tidemark_protocol::json::parse(&listed.stdout)
                .is_ok_and(|value| rows(&value).len() == 6)
    })
    .await;
    failing.shutdown().await;
    assert!(
        all_dead,
        "the six messages never all reached the dead-letter queue"
    );
    let listed = rows(&admin_json(&["dead-letters"], &ns, &["-g", &group]).await);
    let of_a: Vec<_> = listed
        .iter()
        .filter(|row| text(row, "originalTopic") == topic_a)
        .collect();
    assert_eq!(of_a.len(), 3, "{listed:?}");
    assert!(of_a
        .iter()
        .all(|row| text(row, "keys").starts_with("key-a-")));
    assert!(of_a.iter().all(|row| int(row, "reconsumeTimes") >= 1));
    let only_b = rows(&admin_json(&["dead-letters"], &ns, &["-g", &group, "-t", &topic_b]).await);
    assert_eq!(only_b.len(), 3);

    // Resend A's: first what would go, then for real; the group gets A's three, not B's.
    let plan = rows(
        &admin_json(
            &["dead-letter-resend"],
            &ns,
            &["-g", &group, "--all", "-t", &topic_a, "--dry-run"],
        )
        .await,
    );
    assert_eq!(plan.len(), 3, "{plan:?}");
    assert!(plan
        .iter()
        .all(|row| text(row, "topic") == format!("%RETRY%{group}")));
    let refused = admin(
        &["dead-letter-resend"],
        &ns,
        &["-g", &group, "--all", "-t", &topic_a],
    )
    .await;
    assert!(!refused.status.success(), "resent without --yes");
    admin_json(
        &["dead-letter-resend"],
        &ns,
        &["-g", &group, "--all", "-t", &topic_a, "--yes"],
    )
    .await;
    let (again, seen) = consumer(&ns, &group, [&topic_a, &topic_b], false).await;
    let got_a = wait_until(Duration::from_secs(60), || bodies(&seen) == of_topic("a")).await;
    // Shutting down commits the retry topic's offset: the replay below sees them consumed.
    again.shutdown().await;
    assert!(got_a, "after the resend the group got {:?}", bodies(&seen));

    // Replay A's consumed retries: A's three come again, B's never.
    let replayed = rows(
        &admin_json(
            &["retry-replay"],
            &ns,
            &["-g", &group, "-t", &topic_a, "--since", "-1h", "--yes"],
        )
        .await,
    );
    assert_eq!(replayed.len(), 3, "{replayed:?}");
    let (replaying, seen) = consumer(&ns, &group, [&topic_a, &topic_b], false).await;
    let got_a = wait_until(Duration::from_secs(60), || bodies(&seen) == of_topic("a")).await;
    replaying.shutdown().await;
    assert!(got_a, "after the replay the group got {:?}", bodies(&seen));

    let history = rows(&admin_json(&["progress-history"], &ns, &["-g", &group]).await);
    let kinds: Vec<&str> = history.iter().map(|row| text(row, "kind")).collect();
    assert_eq!(kinds, ["resend", "retry-replay"], "{history:?}");
    assert!(text(&history[0], "detail").contains("3 from offsets"));

    // The console lists them too, and resends one of B's back to the group after showing it.
    let port = server.http_port();
    let path = format!("/groups/{group}/dead-letters");
    let (status, listing) = http(port, "GET", &path, &[], "").await;
    assert_eq!(status, 200);
    assert!(
        listing.contains("key-a-0") && listing.contains("key-b-2"),
        "{listing}"
    );
    let token = csrf_token(&listing);
    let b_offset = int(&only_b[0], "queueOffset").to_string();
    let form = format!("csrf={token}&broker=broker-a&offsets={b_offset}&to=retry");
    let (status, plan) = http(port, "POST", &format!("{path}/resend"), &[], &form).await;
    assert_eq!(status, 200);
    assert!(
        plan.contains("id=\"preview\"") && plan.contains(&format!("%RETRY%{group}")),
        "{plan}"
    );
    let (status, _) = http(
        port,
        "POST",
        &format!("{path}/resend"),
        &[],
        &format!("{form}&confirm=yes"),
    )
    .await;
    assert_eq!(status, 303, "redirected once resent");
    let history = rows(&admin_json(&["progress-history"], &ns, &["-g", &group]).await);
    let kinds: Vec<&str> = history.iter().map(|row| text(row, "kind")).collect();
    assert_eq!(kinds, ["resend", "retry-replay", "resend"], "{history:?}");

    // Counted for dashboards: two resends (3 messages, then 1) and a replay of 3.
    let (status, metrics) = http(server.http_port(), "GET", "/metrics", &[], "").await;
    assert_eq!(status, 200);
    for (kind, line, count) in [
        ("resend", "tidemark_progress_operator_changes_total", 2),
        (
            "retry-replay",
            "tidemark_progress_operator_changes_total",
            1,
        ),
    ] {
        let wanted = format!("{line}{{group=\"{group}\",kind=\"{kind}\"}} {count}");
        assert!(metrics.contains(&wanted), "{wanted} in {metrics}");
    }
    for (kind, count) in [("resend", 4), ("retry-replay", 3)] {
        let wanted =
            format!("tidemark_messages_resent_total{{group=\"{group}\",kind=\"{kind}\"}} {count}");
        assert!(metrics.contains(&wanted), "{wanted} in {metrics}");
    }
}
