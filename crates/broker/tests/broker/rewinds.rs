//! Who may move a group's committed offset back. A broker that has just started or just become
//! master has no heartbeat yet from the group's consumers, so membership alone cannot tell a
//! consumer's stale commit from an operator's rewind: consumers commit oneway (Java, Go, C++) or
//! say so (Tidemark's client); an admin tool's commit is synchronous.
//!
//! A request on one connection is served in arrival order as far as the offset table goes: a
//! commit is applied before the connection's next frame is read, so a query sent after it sees it.

use tidemark_protocol::acked::FROM_CONSUMER_FIELD;

use crate::common::*;

fn commit(offset: i64) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::UpdateConsumerOffset,
        &UpdateConsumerOffsetRequestHeader {
            consumer_group: GROUP.into(),
            topic: TOPIC.into(),
            queue_id: 0,
            commit_offset: offset,
            broker_name: None,
        },
    )
}

async fn stored(client: &RemotingClient, broker: &str) -> i64 {
    let answer: OffsetResponseHeader = query_offset(client, broker)
        .await
        .decode_header()
        .expect("an offset is stored");
    answer.offset
}

async fn commit_sync(client: &RemotingClient, broker: &str, request: RemotingCommand) {
    let answer = client
        .invoke(broker, request, WAIT)
        .await
        .expect("answered");
    assert_eq!(answer.response_code(), ResponseCode::Success, "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_tools_commit_rewinds_for_a_group_without_heartbeats() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = Cluster::start(dir.path()).await;
    let broker = cluster.broker.clone();
    // Never heartbeats: to the broker it is no member of the group, as a consumer is right
    // after a failover and as an admin tool always is.
    let client = RemotingClient::new(ClientConfig::default(), None);
    for index in 0..10 {
        send_ok(
            &client,
            &broker,
            send_request(&format!("m{index}"), "TagA", 0),
        )
        .await;
    }
    commit_sync(&client, &broker, commit(10)).await;
    assert_eq!(stored(&client, &broker).await, 10);

    // A Java, Go or C++ consumer's periodic persist (oneway) of where it was on the old master.
    let mut stale = commit(4);
    stale.mark_oneway();
    client.invoke_oneway(&broker, stale).await.expect("sent");
    assert_eq!(
        stored(&client, &broker).await,
        10,
        "a oneway commit from a consumer without a heartbeat here rewound the group"
    );

    // Tidemark's consumer waits for its commits, and says they are a consumer's.
    let mut marked = commit(5);
    marked.ext_fields.insert(FROM_CONSUMER_FIELD, "1");
    commit_sync(&client, &broker, marked).await;
    assert_eq!(stored(&client, &broker).await, 10);

    // mqadmin's updateConsumeOffset (and the old reset by time): synchronous, unmarked.
    commit_sync(&client, &broker, commit(3)).await;
    assert_eq!(stored(&client, &broker).await, 3, "the admin tool's rewind");

    // Forward commits of either kind still move it on.
    let mut forward = commit(8);
    forward.mark_oneway();
    client.invoke_oneway(&broker, forward).await.expect("sent");
    assert_eq!(stored(&client, &broker).await, 8);
    client.shutdown();
}
