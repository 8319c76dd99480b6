//! A push consumer that says it leaves (NotifyClientTermination) releases the messages its
//! auto-renewed receives held invisible, so another consumer gets them at once rather than
//! after the invisibility.

use crate::common::*;
use tidemark_grpc::proto::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_consumer_that_leaves_releases_what_it_held() {
    let server = start().await;
    let mut client = client(&server).await;
    let topic = "RenewTopic";
    let sent = client
        .send_message(with_client_id(
            SendMessageRequest {
                messages: vec![message(topic, "id-r", "held", "TagA")],
            },
            "producer-r",
        ))
        .await
        .expect("send")
        .into_inner();
    assert_eq!(code(&sent.status), Code::Ok);
    // A push consumer receives with auto-renew: the message stays invisible while it lives.
    let request = ReceiveMessageRequest {
        group: Some(resource("renew_group")),
        message_queue: Some(MessageQueue {
            topic: Some(resource(topic)),
            id: -1,
            ..MessageQueue::default()
        }),
        filter_expression: None,
        batch_size: 32,
        invisible_duration: None,
        auto_renew: true,
        long_polling_timeout: Some(prost_types::Duration {
            seconds: 2,
            nanos: 0,
        }),
        attempt_id: Some("a-1".into()),
    };
    let mut stream = client
        .receive_message(with_client_id(request, "pusher"))
        .await
        .expect("receive")
        .into_inner();
    let mut got = 0;
    while let Some(frame) = stream.message().await.expect("frame") {
        if let Some(receive_message_response::Content::Message(m)) = frame.content {
            assert_eq!(
                m.system_properties
                    .as_ref()
                    .and_then(|s| s.invisible_duration),
                Some(prost_types::Duration {
                    seconds: 60,
                    nanos: 0
                })
            );
            got += 1;
        }
    }
    assert_eq!(got, 1);
    let (status, none) = receive(&mut client, "renew_group", topic, 2_000).await;
    assert_eq!(
        (status, none.len()),
        (Code::MessageNotFound, 0),
        "held by the push consumer"
    );
    // It leaves: the message is released at once, not after its 60 s.
    let bye = client
        .notify_client_termination(with_client_id(
            NotifyClientTerminationRequest {
                group: Some(resource("renew_group")),
            },
            "pusher",
        ))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(code(&bye.status), Code::Ok);
    let (status, back) = receive(&mut client, "renew_group", topic, 2_000).await;
    assert_eq!(status, Code::Ok);
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].body, b"held");
}
