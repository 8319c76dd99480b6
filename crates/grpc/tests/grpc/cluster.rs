//! One gateway in front of a two-broker cluster, as RocketMQ's proxy in cluster mode: the route
//! lists both brokers' queues, sends are spread over them (a message group keeps to one queue),
//! each broker is assigned and popped, and acks, invisibility changes and offsets reach the
//! broker that holds the message — checked on the brokers themselves over remoting.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use tidemark_grpc::proto::*;
use tidemark_protocol::body::TopicRouteData;
use tidemark_protocol::headers::{
    CreateTopicRequestHeader, GetMaxOffsetRequestHeader, GetRouteInfoRequestHeader,
    OffsetResponseHeader, QueryConsumerOffsetRequestHeader,
};
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::{ClientConfig, RemotingClient};

const TIMEOUT: Duration = Duration::from_secs(3);

async fn create_topic(remoting: &RemotingClient, broker: &str, topic: &str) {
    let header = CreateTopicRequestHeader {
        topic: topic.into(),
        default_topic: "TBW102".into(),
        read_queue_nums: 2,
        write_queue_nums: 2,
        perm: 6,
        topic_filter_type: "SINGLE_TAG".into(),
        topic_sys_flag: Some(0),
        order: false,
        attributes: None,
        force: None,
    };
    let response = remoting
        .invoke(
            broker,
            RemotingCommand::request_with_header(RequestCode::UpdateAndCreateTopic, &header),
            TIMEOUT,
        )
        .await
        .expect("create topic");
    assert_eq!(response.response_code(), ResponseCode::Success);
}

/// Waits until the name server routes `topic` to `brokers` brokers.
async fn await_route(remoting: &RemotingClient, namesrv: &str, topic: &str, brokers: usize) {
    for _ in 0..100 {
        let request = RemotingCommand::request_with_header(
            RequestCode::GetRouteInfoByTopic,
            &GetRouteInfoRequestHeader {
                topic: topic.into(),
                accept_standard_json_only: None,
            },
        );
        if let Ok(response) = remoting.invoke(namesrv, request, TIMEOUT).await {
            if let Ok(route) = TopicRouteData::from_json_bytes(&response.body) {
                if route.queue_datas.len() == brokers {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{topic} never routed to {brokers} brokers");
}

/// Messages stored in the topic's queues on one broker.
async fn stored(remoting: &RemotingClient, broker: &str, topic: &str) -> i64 {
    let mut total = 0;
    for queue_id in 0..2 {
        let header = GetMaxOffsetRequestHeader {
            topic: topic.into(),
            queue_id,
            committed: Some(true),
            broker_name: None,
        };
        let response = remoting
            .invoke(
                broker,
                RemotingCommand::request_with_header(RequestCode::GetMaxOffset, &header),
                TIMEOUT,
            )
            .await
            .expect("max offset");
        total += response
            .decode_header::<OffsetResponseHeader>()
            .expect("offset header")
            .offset;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gateway_serves_every_broker_of_the_cluster() {
    let (namesrv, _namesrv_stop) = start_namesrv().await;
    let a = start_broker(&namesrv, "broker-a", true).await;
    let b = start_broker(&namesrv, "broker-b", false).await;
    let remoting = RemotingClient::new(ClientConfig::default(), None);
    let topic = "ClusterTopic";
    let fifo_topic = "ClusterFifoTopic";
    let group = "cluster_group";
    for name in [topic, fifo_topic] {
        create_topic(&remoting, &a.broker, name).await;
        create_topic(&remoting, &b.broker, name).await;
        await_route(&remoting, &namesrv, name, 2).await;
    }
    let mut client = client(&a).await;

    // Route and assignment: both brokers' queues, all reached through this gateway.
    let route = client
        .query_route(with_client_id(
            QueryRouteRequest {
                topic: Some(resource(topic)),
                endpoints: None,
            },
            "cluster-client",
        ))
        .await
        .expect("route")
        .into_inner();
    assert_eq!(code(&route.status), Code::Ok);
    let mut by_broker: BTreeMap<String, usize> = BTreeMap::new();
    for queue in &route.message_queues {
        let broker = queue.broker.as_ref().expect("broker");
        *by_broker.entry(broker.name.clone()).or_default() += 1;
        let port = broker.endpoints.as_ref().map(|e| e.addresses[0].port);
        assert_eq!(
            port.map(|p| p.to_string()),
            a.grpc.rsplit(':').next().map(str::to_owned),
            "every queue is reached through the gateway"
        );
    }
    assert_eq!(
        by_broker,
        BTreeMap::from([("broker-a".to_owned(), 2), ("broker-b".to_owned(), 2)])
    );
    let assignment = client
        .query_assignment(with_client_id(
            QueryAssignmentRequest {
                topic: Some(resource(topic)),
                group: Some(resource(group)),
                endpoints: None,
            },
            "cluster-client",
        ))
        .await
        .expect("assignment")
        .into_inner();
    let assigned: Vec<(String, i32)> = assignment
        .assignments
        .iter()
        .filter_map(|a| a.message_queue.as_ref())
        .map(|q| (q.broker.as_ref().expect("broker").name.clone(), q.id))
        .collect();
    assert_eq!(
        assigned,
        vec![("broker-a".to_owned(), -1), ("broker-b".to_owned(), -1)]
    );

    // Twenty sends are spread over both brokers.
    let messages: Vec<Message> = (0..20)
        .map(|i| message(topic, &format!("id-{i}"), &format!("body-{i}"), "TagA"))
        .collect();
    let sent = client
        .send_message(with_client_id(
            SendMessageRequest { messages },
            "cluster-client",
        ))
        .await
        .expect("send")
        .into_inner();
    assert_eq!(code(&sent.status), Code::Ok);
    let on_a = stored(&remoting, &a.broker, topic).await;
    let on_b = stored(&remoting, &b.broker, topic).await;
    assert_eq!(on_a + on_b, 20);
    assert!(on_a > 0 && on_b > 0, "{on_a} on a, {on_b} on b");

    // A message group keeps to one queue: five consecutive offsets of one queue.
    let mut grouped = Vec::new();
    for i in 0..5 {
        let mut m = message(fifo_topic, &format!("fifo-{i}"), "in order", "TagA");
        if let Some(system) = m.system_properties.as_mut() {
            system.message_group = Some("order-7".into());
            system.message_type = MessageType::Fifo as i32;
        }
        grouped.push(m);
    }
    let sent = client
        .send_message(with_client_id(
            SendMessageRequest { messages: grouped },
            "cluster-client",
        ))
        .await
        .expect("send")
        .into_inner();
    let offsets: Vec<i64> = sent.entries.iter().map(|e| e.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);

    // Receive from each broker; put one of b's back at once, acknowledge the rest.
    let mut received = Vec::new();
    for broker in ["broker-a", "broker-b"] {
        let (status, got) = receive_at(&mut client, group, topic, Some(broker), 30_000).await;
        assert_eq!(status, Code::Ok, "{broker}");
        received.extend(got.into_iter().map(|m| (broker, m)));
    }
    assert_eq!(received.len(), 20);
    let (_, put_back) = received
        .iter()
        .find(|(broker, _)| *broker == "broker-b")
        .expect("one from b");
    let changed = client
        .change_invisible_duration(with_client_id(
            ChangeInvisibleDurationRequest {
                group: Some(resource(group)),
                topic: Some(resource(topic)),
                receipt_handle: handle(put_back),
                invisible_duration: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 0,
                }),
                message_id: put_back
                    .system_properties
                    .as_ref()
                    .map(|s| s.message_id.clone())
                    .unwrap_or_default(),
                ..ChangeInvisibleDurationRequest::default()
            },
            "cluster-client",
        ))
        .await
        .expect("change")
        .into_inner();
    assert_eq!(code(&changed.status), Code::Ok);
    let put_back_id = put_back
        .system_properties
        .as_ref()
        .map(|s| s.message_id.clone());
    let entries: Vec<AckMessageEntry> = received
        .iter()
        .filter(|(_, m)| m.system_properties.as_ref().map(|s| s.message_id.clone()) != put_back_id)
        .map(|(_, m)| AckMessageEntry {
            message_id: m
                .system_properties
                .as_ref()
                .map(|s| s.message_id.clone())
                .unwrap_or_default(),
            receipt_handle: handle(m),
            ..AckMessageEntry::default()
        })
        .collect();
    let acked = ack(&mut client, group, topic, entries, "cluster-client").await;
    assert_eq!(code(&acked.status), Code::Ok);
    assert_eq!(acked.entries.len(), 19);

    // The one put back comes again from b, second attempt; acknowledged, nothing is left.
    let (status, again) = receive_at(&mut client, group, topic, Some("broker-b"), 30_000).await;
    assert_eq!(status, Code::Ok);
    assert_eq!(again.len(), 1);
    let system = again[0].system_properties.as_ref().expect("system");
    assert_eq!(Some(system.message_id.clone()), put_back_id);
    assert_eq!(system.delivery_attempt, Some(2));
    let acked = ack(
        &mut client,
        group,
        topic,
        vec![AckMessageEntry {
            message_id: system.message_id.clone(),
            receipt_handle: handle(&again[0]),
            ..AckMessageEntry::default()
        }],
        "cluster-client",
    )
    .await;
    assert_eq!(code(&acked.status), Code::Ok);
    for broker in ["broker-a", "broker-b"] {
        let (status, rest) = receive_at(&mut client, group, topic, Some(broker), 30_000).await;
        assert_eq!(status, Code::MessageNotFound, "{broker}: {rest:?}");
    }

    // Offsets of b's queue are b's: committed through the gateway, read on b itself.
    let queue_b = MessageQueue {
        topic: Some(resource(topic)),
        id: 1,
        broker: Some(Broker {
            name: "broker-b".into(),
            ..Broker::default()
        }),
        ..MessageQueue::default()
    };
    let updated = client
        .update_offset(with_client_id(
            UpdateOffsetRequest {
                group: Some(resource("offset_group")),
                message_queue: Some(queue_b.clone()),
                offset: 3,
            },
            "cluster-client",
        ))
        .await
        .expect("update offset")
        .into_inner();
    assert_eq!(code(&updated.status), Code::Ok);
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: "offset_group".into(),
        topic: topic.into(),
        queue_id: 1,
        set_zero_if_not_found: Some(false),
        broker_name: None,
    };
    let on_b = remoting
        .invoke(
            &b.broker,
            RemotingCommand::request_with_header(RequestCode::QueryConsumerOffset, &header),
            TIMEOUT,
        )
        .await
        .expect("query offset on b");
    assert_eq!(
        on_b.decode_header::<OffsetResponseHeader>()
            .expect("offset")
            .offset,
        3
    );
    let on_a = remoting
        .invoke(
            &a.broker,
            RemotingCommand::request_with_header(RequestCode::QueryConsumerOffset, &header),
            TIMEOUT,
        )
        .await
        .expect("query offset on a");
    assert_eq!(on_a.response_code(), ResponseCode::QueryNotFound);

    // A broker the cluster does not have: an error status, and the gateway keeps serving.
    let (status, _) = receive_at(&mut client, group, topic, Some("broker-z"), 30_000).await;
    assert_eq!(status, Code::InternalServerError);
    remoting.shutdown();
}

/// A gRPC client's route query for a topic nobody made creates it (auto-create on), and is
/// answered only once the name server routes it: a 4.x client or a second gateway asking the
/// name server next finds the topic, as after a 4.x send that creates its topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_query_that_creates_its_topic_answers_once_the_name_server_knows_it() {
    let (namesrv, _namesrv_stop) = start_namesrv().await;
    // The broker reaches the name server only through a link that holds each request 300 ms;
    // the test asks the name server directly, so an answer that did not wait shows.
    let slow_link = delaying_link(&namesrv, Duration::from_millis(300)).await;
    let gateway = start_broker(&slow_link, "broker-a", true).await;
    let remoting = RemotingClient::new(ClientConfig::default(), None);
    let mut client = client(&gateway).await;
    let topic = "MadeByRouteQuery";

    let route = client
        .query_route(with_client_id(
            QueryRouteRequest {
                topic: Some(resource(topic)),
                endpoints: None,
            },
            "route-client",
        ))
        .await
        .expect("route")
        .into_inner();
    assert_eq!(code(&route.status), Code::Ok, "{:?}", route.status);
    assert!(!route.message_queues.is_empty());

    // Asked once, not polled: the answer above waited for the registration.
    let request = RemotingCommand::request_with_header(
        RequestCode::GetRouteInfoByTopic,
        &GetRouteInfoRequestHeader {
            topic: topic.into(),
            accept_standard_json_only: None,
        },
    );
    let response = remoting
        .invoke(&namesrv, request, TIMEOUT)
        .await
        .expect("name server answers");
    assert_eq!(response.response_code(), ResponseCode::Success);
    let route = TopicRouteData::from_json_bytes(&response.body).expect("route body");
    assert_eq!(route.queue_datas.len(), 1, "the gateway's broker routes it");
}

/// A local address that forwards to `upstream`, holding each chunk sent upstream for `delay`
/// (answers come back at once). Lives as long as the test's runtime.
async fn delaying_link(upstream: &str, delay: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("bound").to_string();
    let upstream = upstream.to_owned();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(&upstream).await else {
                continue;
            };
            let (mut from_client, mut to_client) = inbound.into_split();
            let (mut from_server, mut to_server) = outbound.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            });
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut chunk = vec![0u8; 64 * 1024];
                while let Ok(read) = from_client.read(&mut chunk).await {
                    if read == 0 {
                        break;
                    }
                    tokio::time::sleep(delay).await;
                    if to_server.write_all(&chunk[..read]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}
