//! Sends and pulls over loopback with an in-process name server, driven by raw remoting
//! requests: a topic a send creates is routable once the send is answered; send, heartbeat,
//! pull (long polling included), commits by request and by pull, and all of it again after a
//! restart; what only the broker may write into a message. (Compatibility with the real Java
//! client is proven by compat/java's suite.)

use crate::common::*;
use tidemark_protocol::headers::GetRouteInfoRequestHeader;

/// RocketMQ's broker registers a topic a send created before it answers the send: a client
/// that asks the name server for the route next (a consumer starting, a producer listing the
/// topic's queues) finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_a_send_creates_is_routable_once_the_send_is_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    for index in 0..5 {
        let topic = format!("CreatedBySend{index}");
        send_ok(
            (&client, &cluster.broker),
            send_request_to(&topic, "m", "", 0),
        )
        .await;
        let route = client
            .invoke(
                &cluster.namesrv,
                RemotingCommand::request_with_header(
                    RequestCode::GetRouteInfoByTopic,
                    &GetRouteInfoRequestHeader {
                        topic: topic.clone(),
                        accept_standard_json_only: None,
                    },
                ),
                WAIT,
            )
            .await
            .expect("answered");
        assert_eq!(
            route.response_code(),
            ResponseCode::Success,
            "{topic}: {:?}",
            route.remark
        );
    }
    client.shutdown();
    let _ = cluster.stop_broker().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_consume_commit_and_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let broker = cluster.broker.clone();
    for index in 0..6 {
        let tag = if index % 2 == 0 { "TagA" } else { "TagB" };
        let response = send_ok(
            (&client, &broker),
            send_request(&format!("m{index}"), tag, 0),
        )
        .await;
        let header: SendMessageResponseHeader = response
            .decode_header()
            .expect("complete send response header");
        assert_eq!((header.queue_id, header.queue_offset), (0, index));
        assert_eq!(response.ext_fields.get("MSG_REGION"), Some("DefaultRegion"));
    }
    // Pulls need the subscription from a heartbeat first.
    let early = client
        .invoke(&broker, pull_request(0, None, 0), WAIT)
        .await
        .expect("answered");
    assert_eq!(early.response_code(), ResponseCode::SubscriptionNotExist);
    assert_eq!(
        client
            .invoke(&broker, heartbeat(), WAIT)
            .await
            .expect("answered")
            .response_code(),
        ResponseCode::Success
    );
    let pulled = client
        .invoke(&broker, pull_request(0, None, 0), WAIT)
        .await
        .expect("answered");
    assert_eq!(pulled.response_code(), ResponseCode::Success);
    let header: PullMessageResponseHeader = pulled
        .decode_header()
        .expect("complete pull response header");
    assert_eq!(
        (
            header.next_begin_offset,
            header.min_offset,
            header.max_offset
        ),
        (6, 0, 6)
    );
    let records = decode_records(
        &pulled.body,
        DecodeOptions {
            verify_body_crc: true,
        },
    )
    .expect("stored records");
    assert_eq!(
        records
            .iter()
            .map(|record| String::from_utf8_lossy(&record.body).into_owned())
            .collect::<Vec<_>>(),
        vec!["m0", "m2", "m4"]
    );

    // No offset yet: QUERY_NOT_FOUND when asked not to apply the young-queue rule.
    assert_eq!(
        query_offset(&client, &broker).await.response_code(),
        ResponseCode::QueryNotFound
    );
    // Long polling: the pull waits, the send wakes it, and its commit offset is stored.
    let waiting = {
        let client_for_pull = RemotingClient::new(ClientConfig::default(), None);
        let broker = broker.clone();
        tokio::spawn(async move {
            client_for_pull
                .invoke(&broker, pull_request(6, Some(6), 5_000), WAIT)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the pull is held");
    client
        .invoke(&broker, send_request("late", "TagA", 0), WAIT)
        .await
        .expect("answered");
    let woken = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("woken by the send")
        .expect("task")
        .expect("answered");
    assert_eq!(woken.response_code(), ResponseCode::Success);
    let stored: OffsetResponseHeader = query_offset(&client, &broker)
        .await
        .decode_header()
        .expect("offset");
    assert_eq!(stored.offset, 6, "the piggy-backed commit was stored");
    // A oneway commit moves it on; an older one does not move it back.
    for offset in [7, 3] {
        let mut update = commit_request(offset);
        update.mark_oneway();
        client.invoke_oneway(&broker, update).await.expect("sent");
    }
    // No wait needed: the commits and the query travel in order on the client's one connection
    // to the broker, and the server reads a connection's next frame only after the request
    // before it ran up to its first wait (tidemark-remoting's read loop answers requests that
    // complete without waiting in place). A oneway commit applies the offset before any wait
    // (a synchronous one waits only for the journal afterwards), so the query sees both.
    let stored: OffsetResponseHeader = query_offset(&client, &broker)
        .await
        .decode_header()
        .expect("offset");
    assert_eq!(stored.offset, 7);
    client.shutdown();

    // Graceful restart keeps messages and offsets.
    let (namesrv, stop_namesrv) = cluster.stop_broker().await;
    let persisted =
        std::fs::read_to_string(dir.path().join("config/consumerOffset.json")).expect("persisted");
    assert!(
        persisted.contains("\"LoopbackTopic@loopback_group\":{0:7"),
        "{persisted}"
    );
    let (broker, stop_broker, task) = start_broker(config(dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let stored: OffsetResponseHeader = query_offset(&client, &broker)
        .await
        .decode_header()
        .expect("offset");
    assert_eq!(stored.offset, 7);
    client
        .invoke(&broker, heartbeat(), WAIT)
        .await
        .expect("answered");
    let pulled = client
        .invoke(&broker, pull_request(0, None, 0), WAIT)
        .await
        .expect("answered");
    assert_eq!(
        decode_records(&pulled.body, DecodeOptions::default())
            .expect("records")
            .len(),
        4
    );
    client.shutdown();
    let _ = stop_broker.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

/// The mark of a POP copy (`TIDEMARK_POP_ORIGIN`) finishes the message it names when the broker
/// finds the copy after a crash or an election: a client's send may not carry it, or it could
/// finish another consumer's message undelivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cannot_mark_its_message_as_a_pop_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let retry = tidemark_protocol::headers::PopSource::RetryV1.real_topic("pop_group", TOPIC);
    let mut request = send_request_to(&retry, "forged", "", 0);
    let mut properties = Properties::parse(request.ext_fields.get("i").unwrap_or(""));
    properties.insert(
        tidemark_protocol::message::property::POP_ORIGIN,
        format!("pop_group {TOPIC} 0 0"),
    );
    request.ext_fields.insert("i", properties.encode());
    send_ok((&client, &cluster.broker), request).await;
    let stored = pull_all((&client, &cluster.broker), &retry, 0, 1).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0]
            .properties
            .get(tidemark_protocol::message::property::POP_ORIGIN),
        None,
        "a client's message was stored as a POP copy"
    );
    let _ = cluster.stop_broker().await;
    client.shutdown();
}
