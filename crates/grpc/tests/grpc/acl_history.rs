//! A gRPC caller's deliberate rewind (UpdateOffset below the committed offset) on a broker
//! that checks ACL: the progress history names the account that signed the call, as it does
//! for a remoting caller, though the gateway's request to the broker carries no remoting
//! signature of its own.

use std::io::Write;

use crate::common::*;
use tidemark_broker::history::ChangeKind;
use tidemark_grpc::proto::*;
use tonic::Request;

const RULES: &str = "accounts:
  - accessKey: alice-key
    secretKey: alice-secret
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
";

/// `request` signed as RocketMQ 5's clients sign a call: HMAC-SHA1 of `x-mq-date-time`.
fn signed<T>(message: T, access_key: &str, secret_key: &str) -> Request<T> {
    let mut request = with_client_id(message, "alice-client");
    let date_time = "20261207T090000Z";
    let signature = tidemark_remoting::signing::sign_content_hex(date_time.as_bytes(), secret_key);
    let authorization = format!(
        "MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={signature}"
    );
    let metadata = request.metadata_mut();
    metadata.insert("x-mq-date-time", date_time.parse().expect("ascii"));
    metadata.insert("authorization", authorization.parse().expect("ascii"));
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_rewind_is_recorded_under_the_account_that_signed_it() {
    let mut rules = tempfile::NamedTempFile::new().expect("acl file");
    rules.write_all(RULES.as_bytes()).expect("written");
    let server = start_configured(|config| {
        config.acl_enable = true;
        config.acl_file = Some(rules.path().to_path_buf());
    })
    .await;
    let mut client = client(&server).await;
    let (topic, group) = ("AclRewindTopic", "acl_rewind_group");

    for index in 0..24 {
        let one = message(topic, &format!("id-{index}"), "body", "TagA");
        let answer = client
            .send_message(signed(
                SendMessageRequest {
                    messages: vec![one],
                },
                "alice-key",
                "alice-secret",
            ))
            .await
            .expect("send")
            .into_inner();
        assert_eq!(code(&answer.status), Code::Ok, "{answer:?}");
    }
    let route = client
        .query_route(signed(
            QueryRouteRequest {
                topic: Some(resource(topic)),
                endpoints: None,
            },
            "alice-key",
            "alice-secret",
        ))
        .await
        .expect("route")
        .into_inner();
    // The queue that holds the most of them (at least three of 24 in eight queues or fewer).
    let mut fullest = None;
    for candidate in &route.message_queues {
        let end = client
            .query_offset(signed(
                QueryOffsetRequest {
                    message_queue: Some(candidate.clone()),
                    query_offset_policy: QueryOffsetPolicy::End as i32,
                    timestamp: None,
                },
                "alice-key",
                "alice-secret",
            ))
            .await
            .expect("query offset")
            .into_inner();
        if fullest.as_ref().is_none_or(|(most, _)| end.offset > *most) {
            fullest = Some((end.offset, candidate.clone()));
        }
    }
    let (end, queue) = fullest.expect("the topic's queues");
    assert!(end >= 3, "the fullest queue holds {end}");

    for offset in [end, 1] {
        let updated = client
            .update_offset(signed(
                UpdateOffsetRequest {
                    group: Some(resource(group)),
                    message_queue: Some(queue.clone()),
                    offset,
                },
                "alice-key",
                "alice-secret",
            ))
            .await
            .expect("update offset")
            .into_inner();
        assert_eq!(code(&updated.status), Code::Ok, "update to {offset}");
    }

    let entries = server.state.progress.history.entries(group, 0, false);
    let rewinds: Vec<_> = entries
        .iter()
        .filter(|entry| entry.kind == ChangeKind::Rewind)
        .collect();
    assert_eq!(rewinds.len(), 1, "one rewind recorded: {entries:?}");
    assert_eq!(rewinds[0].actor.account, "alice-key", "{:?}", rewinds[0]);
    let moved = &rewinds[0].queues;
    assert_eq!(
        moved
            .iter()
            .map(|queue| (queue.before, queue.after))
            .collect::<Vec<_>>(),
        [(Some(end), Some(1))]
    );
}
