//! A gRPC consumer's running info, asked of the broker as mqadmin `consumerStatus` asks it
//! (GET_CONSUMER_RUNNING_INFO): the gateway answers for its client with what it saw — the
//! messages held per queue, receive and acknowledge rates, failures, the client's settings.

use std::time::Duration;

use crate::common::*;
use tidemark_grpc::proto::*;
use tidemark_protocol::body::{running_info_property as prop, ConsumerRunningInfo};
use tidemark_protocol::headers::GetConsumerRunningInfoRequestHeader;
use tidemark_protocol::json::JsonBody;
use tidemark_protocol::{RemotingCommand, RequestCode, ResponseCode};
use tidemark_remoting::RemotingClient;

async fn running_info(server: &Server, group: &str, client_id: &str) -> ConsumerRunningInfo {
    let remoting = RemotingClient::new(Default::default(), None);
    let request = RemotingCommand::request_with_header(
        RequestCode::GetConsumerRunningInfo,
        &GetConsumerRunningInfoRequestHeader {
            consumer_group: group.into(),
            client_id: client_id.into(),
            jstack_enable: Some(false),
        },
    );
    let answer = remoting
        .invoke(&server.broker, request, Duration::from_secs(5))
        .await
        .expect("answered in time");
    assert_eq!(
        answer.response_code(),
        ResponseCode::Success,
        "{:?}",
        answer.remark
    );
    ConsumerRunningInfo::from_json_bytes(&answer.body).expect("running info")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_reports_a_grpc_consumers_running_info() {
    let server = start().await;
    let mut client = client(&server).await;
    let (group, topic) = ("status_group", "StatusTopic");
    // The consumer's settings register it with the broker, as its Telemetry stream does.
    let _telemetry =
        open_telemetry(&mut client, "consumer-1", consumer_settings(group, topic)).await;
    for i in 0..3 {
        let sent = client
            .send_message(with_client_id(
                SendMessageRequest {
                    messages: vec![message(topic, &format!("id-{i}"), "body", "TagA")],
                },
                "producer-1",
            ))
            .await
            .expect("send")
            .into_inner();
        assert_eq!(code(&sent.status), Code::Ok);
    }
    let mut held = Vec::new();
    for _ in 0..10 {
        let (_, messages) = receive(&mut client, group, topic, 60_000).await;
        held.extend(messages);
        if held.len() >= 3 {
            break;
        }
    }
    assert_eq!(held.len(), 3);
    let acked = ack(
        &mut client,
        group,
        topic,
        vec![AckMessageEntry {
            message_id: "id".into(),
            receipt_handle: handle(&held[0]),
            lite_topic: None,
        }],
        "consumer-1",
    )
    .await;
    assert_eq!(code(&acked.status), Code::Ok);
    // A simple consumer taking longer: still held, not a failure.
    let changed = client
        .change_invisible_duration(with_client_id(
            ChangeInvisibleDurationRequest {
                group: Some(resource(group)),
                topic: Some(resource(topic)),
                receipt_handle: handle(&held[1]),
                invisible_duration: Some(prost_types::Duration {
                    seconds: 90,
                    nanos: 0,
                }),
                message_id: "id".into(),
                lite_topic: None,
                suspend: None,
            },
            "consumer-1",
        ))
        .await
        .expect("change")
        .into_inner();
    assert_eq!(code(&changed.status), Code::Ok);

    let info = running_info(&server, group, "consumer-1").await;
    let waiting: i32 = info
        .mq_pop_table
        .values()
        .map(|queue| queue.wait_ack_count)
        .sum();
    assert_eq!(waiting, 2, "two held: {info:?}");
    assert!(info.mq_pop_table.keys().all(|queue| queue.topic == topic));
    let status = &info.status_table[topic];
    assert_eq!(status.pull_tps, 3.0 / 60.0, "{status:?}");
    assert_eq!(status.consume_ok_tps, 1.0 / 60.0, "{status:?}");
    assert_eq!(status.consume_failed_msgs, 0);
    assert!(status.pull_rt >= 0.0 && status.consume_rt >= 0.0);
    assert_eq!(info.properties[prop::CONSUME_TYPE], "CONSUME_POP");
    assert_eq!(info.properties["clientType"], "SIMPLE_CONSUMER");
    assert_eq!(info.properties["protocol"], "grpc");
    assert!(info.properties[prop::CONSUMER_START_TIMESTAMP]
        .parse::<i64>()
        .is_ok_and(|ms| ms > 0));
    assert_eq!(info.subscription_set.len(), 1);
    assert_eq!(info.subscription_set[0].topic, topic);

    // Sent to the dead letters: no longer held, counted as failed.
    let forwarded = client
        .forward_message_to_dead_letter_queue(with_client_id(
            ForwardMessageToDeadLetterQueueRequest {
                group: Some(resource(group)),
                topic: Some(resource(topic)),
                receipt_handle: changed.receipt_handle.clone(),
                message_id: "id".into(),
                delivery_attempt: 1,
                max_delivery_attempts: 1,
                lite_topic: None,
            },
            "consumer-1",
        ))
        .await
        .expect("forward")
        .into_inner();
    assert_eq!(code(&forwarded.status), Code::Ok);
    let info = running_info(&server, group, "consumer-1").await;
    let waiting: i32 = info
        .mq_pop_table
        .values()
        .map(|queue| queue.wait_ack_count)
        .sum();
    assert_eq!(waiting, 1, "{info:?}");
    assert_eq!(info.status_table[topic].consume_failed_msgs, 1);
    assert_eq!(info.status_table[topic].consume_ok_tps, 1.0 / 60.0);

    // A client that is not connected: the broker says so rather than waiting.
    let remoting = RemotingClient::new(Default::default(), None);
    let request = RemotingCommand::request_with_header(
        RequestCode::GetConsumerRunningInfo,
        &GetConsumerRunningInfoRequestHeader {
            consumer_group: group.into(),
            client_id: "nobody".into(),
            jstack_enable: Some(false),
        },
    );
    let answer = remoting
        .invoke(&server.broker, request, Duration::from_secs(5))
        .await
        .expect("answered");
    assert_ne!(answer.response_code(), ResponseCode::Success);
}
