//! A pull that names a newer subscription version than the broker holds: the broker refuses it
//! (as RocketMQ does) and asks the client for its subscriptions at once, so the retry is served
//! without waiting for the client's next heartbeat (a Java client's can be 30 s away).

use tidemark_protocol::body::ConsumerRunningInfo;
use tidemark_protocol::headers::GetConsumerRunningInfoRequestHeader;

use crate::common::*;

fn pull_with_version(sub_version: i64) -> RemotingCommand {
    let mut request = pull_request(0, None, 0);
    request
        .ext_fields
        .insert("subVersion", sub_version.to_string());
    request
}

#[tokio::test]
async fn a_pull_with_a_newer_subscription_version_gets_the_broker_to_ask_the_client() {
    let broker = HandlerHarness::open(|_| {}).await;
    let mut consumer = broker.connect();
    for index in 0..3 {
        let answer = consumer
            .call(send_request(&format!("m{index}"), "TagA", 0))
            .await;
        assert_eq!(answer.response_code(), ResponseCode::Success, "{answer:?}");
    }
    // The heartbeat says version 1; the rebalance's heartbeat with version 2 never came.
    assert_eq!(
        consumer.call(heartbeat()).await.response_code(),
        ResponseCode::Success
    );
    let refused = consumer.call(pull_with_version(2)).await;
    assert_eq!(refused.response_code(), ResponseCode::SubscriptionNotLatest);

    // The heartbeat's rebalance notice comes first.
    let asked = tokio::time::timeout(WAIT, async {
        loop {
            let sent = consumer.from_broker.recv().await.expect("the broker asks");
            if sent.request_code() == RequestCode::GetConsumerRunningInfo {
                return sent;
            }
        }
    })
    .await
    .expect("the broker asks in time");
    let header: GetConsumerRunningInfoRequestHeader = asked.decode_header().expect("header");
    assert_eq!(header.consumer_group, GROUP);
    assert_eq!(header.client_id, "127.0.0.1@loopback");

    let info = ConsumerRunningInfo {
        subscription_set: vec![SubscriptionData::from_expression(TOPIC, "TagA", 2)],
        ..ConsumerRunningInfo::default()
    };
    let mut reply =
        RemotingCommand::response(ResponseCode::Success, None).with_body(info.to_json_bytes());
    reply.opaque = asked.opaque;
    consumer.answer(reply);

    // The broker takes the answer in the background: the client's retry is served once it has.
    let served = tokio::time::timeout(WAIT, async {
        loop {
            let answer = consumer.call(pull_with_version(2)).await;
            if answer.response_code() != ResponseCode::SubscriptionNotLatest {
                return answer;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the retried pull is served");
    assert_eq!(served.response_code(), ResponseCode::Success, "{served:?}");
    let header: PullMessageResponseHeader = served.decode_header().expect("header");
    assert_eq!(header.next_begin_offset, 3);
}
