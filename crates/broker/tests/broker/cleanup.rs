//! Consume queues removed on an operator's request, as mqadmin sends them:
//! CLEAN_EXPIRED_CONSUMEQUEUE (`cleanExpiredCQ`), CLEAN_UNUSED_TOPIC (`cleanUnusedTopic`), and
//! DELETE_TOPIC_IN_BROKER, which takes the topic's messages with it.

use crate::common::*;
use tidemark_protocol::body::TopicConfigSerializeWrapper;
use tidemark_protocol::headers::{
    CreateTopicRequestHeader, DeleteTopicRequestHeader, GetMaxOffsetRequestHeader,
};

fn send_to(topic: &str, body: &str, queue_id: i32) -> RemotingCommand {
    let mut request = send_request(body, "TagA", queue_id);
    // SEND_MESSAGE_V2's short field names: `b` is the topic.
    request.ext_fields.insert("b", topic);
    request
}

/// [`send_ok`], and the queue offset the message was stored at.
async fn send_at(client: &RemotingClient, broker: &str, request: RemotingCommand) -> i64 {
    send_ok((client, broker), request)
        .await
        .decode_header::<SendMessageResponseHeader>()
        .expect("send response header")
        .queue_offset
}

async fn max_offset(client: &RemotingClient, broker: &str, topic: &str, queue_id: i32) -> i64 {
    let request = RemotingCommand::request_with_header(
        RequestCode::GetMaxOffset,
        &GetMaxOffsetRequestHeader {
            topic: topic.into(),
            queue_id,
            committed: None,
            broker_name: None,
        },
    );
    let response = client
        .invoke(broker, request, WAIT)
        .await
        .expect("answered");
    response
        .decode_header::<OffsetResponseHeader>()
        .expect("offset header")
        .offset
}

async fn create_topic(client: &RemotingClient, broker: &str, topic: &str) {
    let request = RemotingCommand::request_with_header(
        RequestCode::UpdateAndCreateTopic,
        &CreateTopicRequestHeader {
            topic: topic.into(),
            default_topic: "TBW102".into(),
            read_queue_nums: 1,
            write_queue_nums: 1,
            perm: 6,
            topic_filter_type: "SINGLE_TAG".into(),
            topic_sys_flag: None,
            order: false,
            attributes: None,
            force: None,
        },
    );
    let response = client
        .invoke(broker, request, WAIT)
        .await
        .expect("answered");
    assert_eq!(response.response_code(), ResponseCode::Success);
}

async fn plain(client: &RemotingClient, broker: &str, code: RequestCode) -> RemotingCommand {
    client
        .invoke(broker, RemotingCommand::request(code), WAIT)
        .await
        .expect("answered")
}

fn small_segments(dir: &Path, namesrv: &str) -> BrokerConfig {
    BrokerConfig {
        mapped_file_size_commit_log: 128 << 10,
        max_message_size: 4096,
        // Every closed segment has expired; DELETE_EXPIRED_COMMITLOG removes them.
        file_reserved_time: 0,
        ..config(dir, namesrv)
    }
}

#[tokio::test]
async fn expired_queues_go_and_live_ones_stay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, _stop_namesrv) = start_namesrv().await;
    let (broker, stop, task) = start_broker(small_segments(dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    create_topic(&client, &broker, "Old").await;
    let body = "x".repeat(3000);
    // "Old" fills the first segments, TOPIC the later ones (about 40 messages a segment).
    for _ in 0..100 {
        send_at(&client, &broker, send_to("Old", &body, 0)).await;
    }
    for _ in 0..90 {
        send_at(&client, &broker, send_to(TOPIC, &body, 0)).await;
    }
    // Nothing has expired yet: the request removes nothing.
    let cleaned = plain(&client, &broker, RequestCode::CleanExpiredConsumeQueue).await;
    assert_eq!(cleaned.response_code(), ResponseCode::Success);
    assert_eq!(cleaned.remark, None);
    assert_eq!(max_offset(&client, &broker, "Old", 0).await, 100);

    let deleted = plain(&client, &broker, RequestCode::DeleteExpiredCommitLog).await;
    assert_eq!(deleted.response_code(), ResponseCode::Success);
    let cleaned = plain(&client, &broker, RequestCode::CleanExpiredConsumeQueue).await;
    assert_eq!(cleaned.response_code(), ResponseCode::Success);
    assert_eq!(
        max_offset(&client, &broker, "Old", 0).await,
        0,
        "every record of Old expired: its queue is gone"
    );
    assert!(!dir.path().join("consumequeue").join("Old").exists());
    assert_eq!(max_offset(&client, &broker, TOPIC, 0).await, 90);
    // Written again, the topic starts over at 0, as on RocketMQ.
    assert_eq!(
        send_at(&client, &broker, send_to("Old", "again", 0)).await,
        0
    );
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
}

#[tokio::test]
async fn deleted_and_unused_topics_lose_their_queues_and_others_keep_theirs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, _stop_namesrv) = start_namesrv().await;
    let (broker, stop, task) = start_broker(config(dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    for topic in ["Deleted", "Unused"] {
        create_topic(&client, &broker, topic).await;
        for index in 0..5 {
            send_at(
                &client,
                &broker,
                send_to(topic, &format!("{topic}-{index}"), 0),
            )
            .await;
        }
    }
    for index in 0..3 {
        send_at(
            &client,
            &broker,
            send_to(TOPIC, &format!("kept-{index}"), 0),
        )
        .await;
    }
    // A delayed message: its queue belongs to the broker's schedule topic, never cleaned.
    send_at(&client, &broker, with_delay(send_to(TOPIC, "later", 0), 3)).await;

    let delete = RemotingCommand::request_with_header(
        RequestCode::DeleteTopicInBroker,
        &DeleteTopicRequestHeader {
            topic: "Deleted".into(),
        },
    );
    let response = client
        .invoke(&broker, delete, WAIT)
        .await
        .expect("answered");
    assert_eq!(response.response_code(), ResponseCode::Success);
    assert_eq!(max_offset(&client, &broker, "Deleted", 0).await, 0);
    create_topic(&client, &broker, "Deleted").await;
    assert_eq!(
        send_at(&client, &broker, send_to("Deleted", "new", 0)).await,
        0,
        "a deleted topic made again starts at 0"
    );

    // "Unused" leaves the broker's topic list while its queues stay: a topic config file
    // edited (or restored from a backup) while the broker was down.
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("stops")
        .expect("task")
        .expect("clean stop");
    let topics_file = dir.path().join("config").join("topics.json");
    let mut wrapper = TopicConfigSerializeWrapper::from_json_bytes(
        &std::fs::read(&topics_file).expect("topics file"),
    )
    .expect("topics parse");
    assert!(wrapper.topic_config_table.remove("Unused").is_some());
    std::fs::write(&topics_file, wrapper.to_json_bytes()).expect("write topics");
    let (broker, stop, task) = start_broker(config(dir.path(), &namesrv)).await;
    assert_eq!(max_offset(&client, &broker, "Unused", 0).await, 5);
    let schedule_queue = 2; // level 3
    let scheduled = max_offset(&client, &broker, "SCHEDULE_TOPIC_XXXX", schedule_queue).await;

    let cleaned = plain(&client, &broker, RequestCode::CleanUnusedTopic).await;
    assert_eq!(
        cleaned.response_code(),
        ResponseCode::Success,
        "{:?}",
        cleaned.remark
    );
    assert_eq!(cleaned.remark, None);
    assert_eq!(max_offset(&client, &broker, "Unused", 0).await, 0);
    assert!(!dir.path().join("consumequeue").join("Unused").exists());
    assert_eq!(max_offset(&client, &broker, TOPIC, 0).await, 3);
    assert_eq!(max_offset(&client, &broker, "Deleted", 0).await, 1);
    assert_eq!(
        max_offset(&client, &broker, "SCHEDULE_TOPIC_XXXX", schedule_queue).await,
        scheduled
    );
    assert!(scheduled >= 1);

    // The destroyed queues' records are still in the log: a restart (here a clean one; the
    // store's crash tests cover the rest) must neither rebuild them nor stop at them.
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("stops")
        .expect("task")
        .expect("clean stop");
    let (broker, stop, task) = start_broker(config(dir.path(), &namesrv)).await;
    assert_eq!(max_offset(&client, &broker, "Unused", 0).await, 0);
    assert_eq!(max_offset(&client, &broker, TOPIC, 0).await, 3);
    assert_eq!(
        send_at(&client, &broker, send_to(TOPIC, "after", 0)).await,
        3
    );
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
}
