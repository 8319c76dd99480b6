//! Admin queries mqadmin sends: GET_PRODUCER_CONNECTION_LIST (`producerConnection`) and
//! GET_BROKER_CONSUME_STATS (`brokerConsumeStats`), on the socket-free handler harness.

use crate::common::*;
use tidemark_protocol::body::{
    ConsumeStatsList, ProducerConnection, ProducerTableInfo, QueryConsumeQueueResponseBody,
};
use tidemark_protocol::headers::{
    GetConsumeStatsInBrokerHeader, GetProducerConnectionListRequestHeader,
    QueryConsumeQueueRequestHeader,
};

#[tokio::test]
async fn producer_connections_and_broker_consume_stats() {
    let broker = HandlerHarness::open(|_| {}).await;
    let client = broker.connect();
    let answered = client.call(heartbeat()).await;
    assert_eq!(answered.response_code(), ResponseCode::Success);

    let ask = |group: &str| {
        RemotingCommand::request_with_header(
            RequestCode::GetProducerConnectionList,
            &GetProducerConnectionListRequestHeader {
                producer_group: group.into(),
            },
        )
    };
    let producers = client.call(ask("loopback_producer")).await;
    assert_eq!(producers.response_code(), ResponseCode::Success);
    let connection = ProducerConnection::from_json_bytes(&producers.body).expect("body");
    assert_eq!(connection.connection_set.len(), 1);
    assert_eq!(connection.connection_set[0].client_id, "127.0.0.1@loopback");
    let none = client.call(ask("nobody")).await;
    assert_eq!(none.response_code(), ResponseCode::SystemError);
    assert_eq!(none.remark.as_deref(), Some("the producer group not exist"));
    let all = client
        .call(RemotingCommand::request(RequestCode::GetAllProducerInfo))
        .await;
    let table = ProducerTableInfo::from_json_bytes(&all.body).expect("body");
    let producers = &table.data["loopback_producer"];
    assert_eq!(producers.len(), 1);
    assert_eq!(producers[0].client_id, "127.0.0.1@loopback");
    assert!(producers[0].last_update_timestamp > 0);

    // Three messages, one consumed: the group's lag is 2.
    for i in 0..3 {
        let sent = client
            .call(send_request(&format!("m-{i}"), "TagA", 0))
            .await;
        assert_eq!(sent.response_code(), ResponseCode::Success);
    }
    let commit = commit_request(1);
    let committed = client.call(commit).await;
    assert_eq!(committed.response_code(), ResponseCode::Success);
    let stats_request = |is_order| {
        RemotingCommand::request_with_header(
            RequestCode::GetBrokerConsumeStats,
            &GetConsumeStatsInBrokerHeader { is_order },
        )
    };
    let stats = client.call(stats_request(false)).await;
    assert_eq!(stats.response_code(), ResponseCode::Success);
    let list = ConsumeStatsList::from_json_bytes(&stats.body).expect("body");
    assert_eq!(list.broker_addr, broker.state.config.broker_addr());
    assert_eq!(list.total_diff, 2);
    let group = list
        .consume_stats_list
        .iter()
        .find_map(|entry| entry.get(GROUP))
        .expect("the group is listed");
    let queue = group
        .iter()
        .flat_map(|stats| stats.offset_table.iter())
        .find(|(queue, _)| queue.topic == TOPIC && queue.queue_id == 0)
        .map(|(_, offsets)| offsets.clone())
        .expect("queue 0");
    assert_eq!((queue.broker_offset, queue.consumer_offset), (3, 1));
    assert!(
        queue.last_timestamp > 0,
        "store time of the last consumed message"
    );
    let ordered = client.call(stats_request(true)).await;
    let list = ConsumeStatsList::from_json_bytes(&ordered.body).expect("body");
    assert_eq!(list.total_diff, 0, "no orderly topic");

    // queryCq: the raw entries from an index on, and whether the group's TagA subscription
    // takes them (all were sent with TagA).
    let ask = |index, count| {
        RemotingCommand::request_with_header(
            RequestCode::QueryConsumeQueue,
            &QueryConsumeQueueRequestHeader {
                topic: TOPIC.into(),
                queue_id: 0,
                index,
                count,
                consumer_group: Some(GROUP.into()),
            },
        )
    };
    let queue = client.call(ask(1, 5)).await;
    assert_eq!(queue.response_code(), ResponseCode::Success);
    let body = QueryConsumeQueueResponseBody::from_json_bytes(&queue.body).expect("body");
    assert_eq!((body.min_queue_index, body.max_queue_index), (0, 3));
    assert_eq!(body.queue_data.len(), 2, "offsets 1 and 2");
    assert!(body
        .queue_data
        .iter()
        .all(|entry| entry.eval && entry.physic_size > 0));
    assert!(body.queue_data[0].physic_offset < body.queue_data[1].physic_offset);
    assert_eq!(
        body.subscription_data
            .map(|subscription| subscription.sub_string),
        Some("TagA".to_owned())
    );
    let missing = client
        .call(RemotingCommand::request_with_header(
            RequestCode::QueryConsumeQueue,
            &QueryConsumeQueueRequestHeader {
                topic: "NoSuchTopic".into(),
                queue_id: 0,
                index: 0,
                count: 1,
                consumer_group: None,
            },
        ))
        .await;
    assert_eq!(missing.response_code(), ResponseCode::SystemError);
}

/// GET_BROKER_EPOCH_CACHE (mqadmin 5.x `getBrokerEpoch`): the store's epoch file with each
/// epoch's end, the last ending at the log's end.
#[tokio::test]
async fn the_epoch_cache_lists_the_epochs_of_the_log() {
    use tidemark_protocol::body::{EpochEntry, EpochEntryCache};
    let dir = tempfile::tempdir().expect("tempdir");
    // As a broker that was master in epochs 1 and 3 would have left it.
    std::fs::write(dir.path().join("epochs"), "1 0\n3 0\n").expect("epoch file");
    let broker = HandlerHarness::open_in(dir, |_| {}).await;
    let answered = broker
        .connect()
        .call(RemotingCommand::request(RequestCode::GetBrokerEpochCache))
        .await;
    assert_eq!(
        answered.response_code(),
        ResponseCode::Success,
        "{answered:?}"
    );
    let cache = EpochEntryCache::from_json_bytes(&answered.body).expect("body");
    assert_eq!(cache.cluster_name, "DefaultCluster");
    assert_eq!(
        cache.epoch_list,
        vec![
            EpochEntry {
                end_offset: 0,
                epoch: 1,
                start_offset: 0
            },
            EpochEntry {
                end_offset: cache.max_offset,
                epoch: 3,
                start_offset: 0
            },
        ]
    );
}
