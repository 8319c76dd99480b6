//! SQL92 subscriptions, through the request handler: a pull with the selector in its header, a pull relying on
//! the group's registered (heartbeat) subscription, and a POP each deliver exactly the messages
//! the selector picks; unmatched messages are skipped, not left blocking the queue; a selector
//! that does not compile is refused at CHECK_CLIENT_CONFIG, at pull and at pop.

use std::collections::BTreeSet;

use crate::common::*;
use tidemark_protocol::body::{CheckClientRequestBody, ConsumeType};
use tidemark_protocol::headers::PopMessageRequestHeader;

const SQL_TOPIC: &str = "SqlTopic";

fn send(i: i32) -> RemotingCommand {
    let mut request = send_request(
        &format!("m{i}"),
        if i % 2 == 0 { "TagA" } else { "TagB" },
        0,
    );
    request.ext_fields.insert("b", SQL_TOPIC);
    let request = with_property(request, "a", &i.to_string());
    let request = with_property(request, "color", ["red", "green", "blue"][(i % 3) as usize]);
    if i % 4 == 0 {
        request
    } else {
        with_property(request, "region", &format!("eu-{}", i % 3))
    }
}

fn sql_pull(group: &str, selector: Option<&str>, offset: i64) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::PullMessage,
        &PullMessageRequestHeader {
            consumer_group: group.into(),
            topic: SQL_TOPIC.into(),
            queue_id: 0,
            queue_offset: offset,
            max_msg_nums: 32,
            sys_flag: pull_sys_flag::build(false, false, selector.is_some(), false),
            commit_offset: 0,
            suspend_timeout_millis: 0,
            subscription: selector.map(str::to_owned),
            sub_version: 1,
            expression_type: Some("SQL92".into()),
            max_msg_bytes: None,
            broker_name: None,
        },
    )
}

/// The `a` values a pull consumer gets, reading the queue to its end.
async fn pulled(client: &Connection, group: &str, selector: Option<&str>) -> BTreeSet<i32> {
    let mut seen = BTreeSet::new();
    let mut offset = 0;
    for _ in 0..100 {
        let response = client.call(sql_pull(group, selector, offset)).await;
        let header = response
            .decode_header::<PullMessageResponseHeader>()
            .expect("pull header");
        if response.response_code() == ResponseCode::Success {
            for record in decode_records(&response.body, DecodeOptions::default()).expect("records")
            {
                seen.insert(
                    record
                        .properties
                        .get("a")
                        .and_then(|a| a.parse().ok())
                        .expect("a"),
                );
            }
        } else if header.next_begin_offset == offset {
            return seen;
        }
        offset = header.next_begin_offset;
    }
    panic!("the queue never ended");
}

fn expected(pick: impl Fn(i32) -> bool) -> BTreeSet<i32> {
    (0..40).filter(|i| pick(*i)).collect()
}

#[tokio::test]
async fn sql92_subscriptions_deliver_exactly_what_the_selector_picks() {
    let broker = HandlerHarness::open(|_| {}).await;
    let client = broker.connect();
    for i in 0..40 {
        send_ok(&client, send(i)).await;
    }

    // The selector in the pull's header.
    let cases: Vec<(&str, BTreeSet<i32>)> = vec![
        ("a > 30", expected(|i| i > 30)),
        ("a BETWEEN 5 AND 9", expected(|i| (5..=9).contains(&i))),
        (
            "color IN ('red', 'blue') AND a < 10",
            expected(|i| i < 10 && i % 3 != 1),
        ),
        ("region IS NULL", expected(|i| i % 4 == 0)),
        ("region <> 'eu-1'", expected(|i| i % 4 != 0 && i % 3 != 1)),
        (
            "NOT (color = 'blue') AND TAGS = 'TagA'",
            expected(|i| i % 3 != 2 && i % 2 == 0),
        ),
        (
            "region STARTSWITH 'eu' AND a >= 36",
            expected(|i| i >= 36 && i % 4 != 0),
        ),
        ("color > 3", BTreeSet::new()),
    ];
    for (selector, want) in &cases {
        let got = pulled(&client, "sql_pull_group", Some(selector)).await;
        assert_eq!(&got, want, "{selector}");
    }

    // The group's registered subscription (what Java push consumers rely on).
    let registered = "sql_push_group";
    let heartbeat = HeartbeatData {
        client_id: "127.0.0.1@sql".into(),
        consumer_data_set: vec![ConsumerData {
            group_name: registered.into(),
            consume_type: ConsumeType::ConsumePassively,
            message_model: MessageModel::Clustering,
            subscription_data_set: vec![SubscriptionData {
                topic: SQL_TOPIC.into(),
                sub_string: "a < 4 OR a = 39".into(),
                expression_type: "SQL92".into(),
                sub_version: 1,
                ..SubscriptionData::default()
            }],
            ..ConsumerData::default()
        }],
        ..HeartbeatData::default()
    };
    let response = client
        .call(RemotingCommand::request(RequestCode::HeartBeat).with_body(heartbeat.to_json_bytes()))
        .await;
    assert_eq!(response.response_code(), ResponseCode::Success);
    assert_eq!(
        pulled(&client, registered, None).await,
        expected(|i| i < 4 || i == 39)
    );

    // POP with a selector.
    let mut popped = BTreeSet::new();
    for _ in 0..10 {
        let response = client
            .call(RemotingCommand::request_with_header(
                RequestCode::PopMessage,
                &PopMessageRequestHeader {
                    consumer_group: "sql_pop_group".into(),
                    topic: SQL_TOPIC.into(),
                    queue_id: -1,
                    max_msg_nums: 32,
                    invisible_time: 60_000,
                    poll_time: 0,
                    born_time: tidemark_remoting::now_ms(),
                    init_mode: 1,
                    exp_type: Some("SQL92".into()),
                    exp: Some("color = 'green' AND region IS NOT NULL".into()),
                    order: Some(false),
                    attempt_id: None,
                    broker_name: Some("broker-a".into()),
                },
            ))
            .await;
        if response.response_code() != ResponseCode::Success {
            break;
        }
        for record in decode_records(&response.body, DecodeOptions::default()).expect("records") {
            popped.insert(
                record
                    .properties
                    .get("a")
                    .and_then(|a| a.parse::<i32>().ok())
                    .expect("a"),
            );
        }
    }
    assert_eq!(popped, expected(|i| i % 3 == 1 && i % 4 != 0));

    // A selector that does not compile: refused before the consumer starts, and at pull / pop.
    let check = |selector: &str| {
        let body = CheckClientRequestBody {
            client_id: "127.0.0.1@sql".into(),
            group: "sql_check_group".into(),
            subscription_data: Some(SubscriptionData {
                topic: SQL_TOPIC.into(),
                sub_string: selector.into(),
                expression_type: "SQL92".into(),
                ..SubscriptionData::default()
            }),
        };
        RemotingCommand::request(RequestCode::CheckClientConfig).with_body(body.to_json_bytes())
    };
    let good = client.call(check("a > 1")).await;
    assert_eq!(good.response_code(), ResponseCode::Success);
    let bad = client.call(check("a > ")).await;
    assert_eq!(bad.response_code(), ResponseCode::SubscriptionParseFailed);
    let bad_pull = client
        .call(sql_pull("sql_pull_group", Some("a = = 1"), 0))
        .await;
    assert_eq!(
        bad_pull.response_code(),
        ResponseCode::SubscriptionParseFailed
    );
}
