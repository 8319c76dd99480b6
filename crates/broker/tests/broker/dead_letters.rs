//! Dead letters an operator can act on, over the request handlers: three messages of the tests'
//! topic and one of another die (CONSUMER_SEND_MSG_BACK past the limit);
//! TIDEMARK_GET_DEAD_LETTERS lists them with their original topic, keys and retry count, by
//! page and by topic; TIDEMARK_RESEND_DEAD_LETTERS sends one back through the group's retry
//! topic with a fresh count and the rest to their original topics; TIDEMARK_REPLAY_RETRIES puts
//! back only the consumed retry messages of one original topic. Each is in the group's history.

use tidemark_protocol::body::{DeadLetterList, ProgressHistory, ResentMessages};
use tidemark_protocol::headers::{
    ConsumerSendMsgBackRequestHeader, GetDeadLettersRequestHeader, GetProgressHistoryRequestHeader,
    ReplayRetriesRequestHeader, ResendDeadLettersRequestHeader, SendMessageResponseHeader,
    UpdateConsumerOffsetRequestHeader,
};
use tidemark_protocol::message::{decode_offset_msg_id, property, DecodeOptions, MessageRecord};

use crate::common::*;

const OTHER: &str = "OtherTopic";

/// Sends `body` to `topic` with key `key`, then fails it straight into the dead-letter queue.
async fn dies(operator: &Connection, topic: &str, body: &str, key: &str) {
    let sent = operator
        .succeeds(with_property(
            send_request_to(topic, body, "TagA", 0),
            property::KEYS,
            key,
        ))
        .await;
    let sent: SendMessageResponseHeader = sent.decode_header().expect("send header");
    let (_, offset) = decode_offset_msg_id(&sent.msg_id).expect("offset id");
    let back = RemotingCommand::request_with_header(
        RequestCode::ConsumerSendMsgBack,
        &ConsumerSendMsgBackRequestHeader {
            offset,
            group: GROUP.into(),
            // −1: no more retries, straight to the dead-letter queue.
            delay_level: -1,
            origin_msg_id: None,
            origin_topic: Some(topic.into()),
            unit_mode: false,
            max_reconsume_times: None,
            broker_name: None,
        },
    );
    operator.succeeds(back).await;
}

async fn listed(
    operator: &Connection,
    topic: Option<&str>,
    offset: Option<i64>,
    max_count: Option<i32>,
) -> DeadLetterList {
    let request = RemotingCommand::request_with_header(
        RequestCode::GetDeadLetters,
        &GetDeadLettersRequestHeader {
            consumer_group: GROUP.into(),
            topic: topic.map(str::to_owned),
            offset,
            max_count,
        },
    );
    DeadLetterList::from_json_bytes(&operator.succeeds(request).await.body).expect("list")
}

async fn resend(
    operator: &Connection,
    offsets: Option<&str>,
    destination: &str,
) -> RemotingCommand {
    resend_or_plan(operator, offsets, destination, false).await
}

async fn resend_or_plan(
    operator: &Connection,
    offsets: Option<&str>,
    destination: &str,
    dry_run: bool,
) -> RemotingCommand {
    let request = RemotingCommand::request_with_header(
        RequestCode::ResendDeadLetters,
        &ResendDeadLettersRequestHeader {
            consumer_group: GROUP.into(),
            offsets: offsets.map(str::to_owned),
            topic: None,
            destination: Some(destination.to_owned()),
            dry_run: Some(dry_run),
        },
    );
    operator.call(request).await
}

/// Every message in a queue, decoded.
async fn messages(broker: &HandlerHarness, topic: &str, queue_id: i32) -> Vec<MessageRecord> {
    let state = &broker.state;
    let got = state
        .log()
        .get(topic, queue_id, 0, 1000, 64 << 20, |_| true)
        .expect("readable");
    got.messages
        .iter()
        .map(|raw| {
            MessageRecord::decode(raw, 0, DecodeOptions::default())
                .expect("decodes")
                .0
        })
        .collect()
}

#[tokio::test]
async fn dead_letters_are_listed_resent_and_retries_replayed_by_topic() {
    let broker = HandlerHarness::open(|_| {}).await;
    let operator = broker.connect();
    operator
        .succeeds(send_request_to(OTHER, "create", "TagA", 0))
        .await;
    for index in 0..3 {
        dies(
            &operator,
            TOPIC,
            &format!("dead-{index}"),
            &format!("k{index}"),
        )
        .await;
    }
    dies(&operator, OTHER, "dead-other", "k-other").await;

    let all = listed(&operator, None, None, None).await;
    assert_eq!(all.messages.len(), 4);
    assert_eq!((all.next_offset, all.max_offset), (4, 4));
    let first = &all.messages[0];
    assert_eq!(first.original_topic, TOPIC);
    assert_eq!(first.keys, "k0");
    assert_eq!(first.tags, "TagA");
    assert_eq!(first.reconsume_times, 1);
    assert!(first.died_timestamp >= first.born_timestamp);
    assert!(!first.origin_msg_id.is_empty());
    let page = listed(&operator, None, Some(1), Some(2)).await;
    let offsets: Vec<i64> = page.messages.iter().map(|m| m.queue_offset).collect();
    assert_eq!((offsets, page.next_offset), (vec![1, 2], 3));
    let other = listed(&operator, Some(OTHER), None, None).await;
    assert_eq!(other.messages.len(), 1);
    assert_eq!(other.messages[0].keys, "k-other");

    // A plan first: what would go where; nothing is sent.
    let plan = resend_or_plan(&operator, None, "origin", true).await;
    let plan = ResentMessages::from_json_bytes(&plan.body).expect("plan");
    let planned: Vec<(i64, &str)> = plan
        .messages
        .iter()
        .map(|m| (m.source_offset, m.topic.as_str()))
        .collect();
    assert_eq!(planned, [(0, TOPIC), (1, TOPIC), (2, TOPIC), (3, OTHER)]);
    assert_eq!(plan.messages[0].msg_id, all.messages[0].msg_id);
    assert_eq!(plan.entry, -1);

    // One back to the group, fresh; the rest to where they were first sent.
    let to_retry = resend(&operator, Some("1"), "retry").await;
    let to_retry = ResentMessages::from_json_bytes(&to_retry.body).expect("resent");
    assert_eq!(to_retry.messages.len(), 1);
    let retry_topic = format!("%RETRY%{GROUP}");
    assert_eq!(to_retry.messages[0].topic, retry_topic);
    let retried = messages(&broker, &retry_topic, 0).await;
    assert_eq!(retried.len(), 1);
    assert_eq!(String::from_utf8_lossy(&retried[0].body), "dead-1");
    assert_eq!(retried[0].reconsume_times, 0, "a fresh count");
    assert_eq!(
        retried[0].properties.get(property::RETRY_TOPIC),
        Some(TOPIC)
    );
    let to_origin = resend(&operator, Some("0,2,3"), "origin").await;
    assert_eq!(
        to_origin.response_code(),
        ResponseCode::Success,
        "{:?}",
        to_origin.remark
    );
    let to_origin = ResentMessages::from_json_bytes(&to_origin.body).expect("resent");
    let topics: Vec<&str> = to_origin
        .messages
        .iter()
        .map(|m| m.topic.as_str())
        .collect();
    assert_eq!(topics, [TOPIC, TOPIC, OTHER]);
    let queues = broker
        .state
        .metadata
        .topics
        .get(TOPIC)
        .expect("the topic")
        .write_queue_nums;
    let mut bodies = Vec::new();
    for queue in 0..queues {
        bodies.extend(
            messages(&broker, TOPIC, queue)
                .await
                .iter()
                .map(|record| String::from_utf8_lossy(&record.body).into_owned())
                .filter(|body| body.starts_with("dead-")),
        );
    }
    assert_eq!(bodies.len(), 5, "3 originals and 2 copies: {bodies:?}");

    // Bad requests change nothing.
    let missing = resend(&operator, Some("99"), "retry").await;
    assert_eq!(missing.response_code(), ResponseCode::SystemError);
    let nowhere = resend(&operator, Some("1"), "elsewhere").await;
    assert_eq!(nowhere.response_code(), ResponseCode::SystemError);
    assert_eq!(messages(&broker, &retry_topic, 0).await.len(), 1);

    // The group consumed its retry message; a replay of another topic's finds nothing, a
    // replay of this topic's puts it back.
    let consumed = RemotingCommand::request_with_header(
        RequestCode::UpdateConsumerOffset,
        &UpdateConsumerOffsetRequestHeader {
            consumer_group: GROUP.into(),
            topic: retry_topic.clone(),
            queue_id: 0,
            commit_offset: 1,
            broker_name: None,
        },
    );
    operator.succeeds(consumed).await;
    let replay = |topic: &str| {
        RemotingCommand::request_with_header(
            RequestCode::ReplayRetries,
            &ReplayRetriesRequestHeader {
                consumer_group: GROUP.into(),
                topic: topic.into(),
                since_ms: 0,
                dry_run: None,
            },
        )
    };
    let none = operator.succeeds(replay(OTHER)).await;
    let none = ResentMessages::from_json_bytes(&none.body).expect("replayed");
    assert!(none.messages.is_empty());
    assert_eq!(none.entry, -1, "nothing sent, nothing recorded");
    let replayed = operator.succeeds(replay(TOPIC)).await;
    let replayed = ResentMessages::from_json_bytes(&replayed.body).expect("replayed");
    assert_eq!(replayed.messages.len(), 1);
    let retried = messages(&broker, &retry_topic, 0).await;
    assert_eq!(retried.len(), 2);
    assert_eq!(String::from_utf8_lossy(&retried[1].body), "dead-1");

    let history = RemotingCommand::request_with_header(
        RequestCode::GetProgressHistory,
        &GetProgressHistoryRequestHeader {
            consumer_group: GROUP.into(),
            since_ms: None,
            checkpoints: None,
        },
    );
    let history =
        ProgressHistory::from_json_bytes(&operator.succeeds(history).await.body).expect("history");
    let recorded: Vec<(&str, Option<&str>)> = history
        .entries
        .iter()
        .map(|entry| (entry.kind.as_str(), entry.detail.as_deref()))
        .collect();
    assert_eq!(recorded.len(), 3, "{recorded:?}");
    assert_eq!(recorded[0].0, "resend");
    assert!(recorded[0]
        .1
        .is_some_and(|detail| detail.contains("1 from offsets 1")));
    assert!(recorded[1]
        .1
        .is_some_and(|detail| detail.contains("0, 2, 3")));
    assert_eq!(recorded[2].0, "retry-replay");
}
