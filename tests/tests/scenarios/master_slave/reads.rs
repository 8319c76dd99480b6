//! Reads the slave serves: cold reads steered to it, admin queries while the master is away.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_reads_are_steered_to_the_slave_when_slave_reads_are_enabled() {
    init_logging();
    // Every read counts as cold at a 0 % in-memory ratio.
    let set = BrokerSet::start(
        "ms-steer",
        &["ASYNC_MASTER", "SLAVE"],
        "slave_read_enable = true\naccess_message_in_memory_max_ratio = 0",
    );
    let topic = unique("MSS");
    let producer = producer(&set).await;
    for i in 0..8 {
        producer
            .send(Message::new(&topic, format!("c{i}")))
            .await
            .expect("send");
    }
    let client = raw();
    let mut suggested = Vec::new();
    for queue_id in 0..QUEUES {
        if max_offset(&client, &set.broker_addr(0), &topic, queue_id)
            .await
            .unwrap_or(0)
            == 0
        {
            continue;
        }
        let header = PullMessageRequestHeader {
            consumer_group: "ms_steer".into(),
            topic: topic.clone(),
            queue_id,
            queue_offset: 0,
            max_msg_nums: 1,
            sys_flag: pull_sys_flag::SUBSCRIPTION,
            commit_offset: 0,
            suspend_timeout_millis: 0,
            subscription: Some("*".into()),
            sub_version: 0,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            broker_name: None,
        };
        let response = client
            .invoke(
                &set.broker_addr(0),
                RemotingCommand::request_with_header(RequestCode::PullMessage, &header),
                CALL,
            )
            .await
            .expect("pull");
        assert_eq!(response.response_code(), ResponseCode::Success);
        let header: PullMessageResponseHeader = response.decode_header().expect("header");
        suggested.push(header.suggest_which_broker_id);
    }
    assert!(!suggested.is_empty());
    assert!(
        suggested.iter().all(|id| *id == 1),
        "the group's whichBrokerWhenConsumeSlowly (1) is suggested for cold reads: {suggested:?}"
    );
    producer.shutdown().await;
}
