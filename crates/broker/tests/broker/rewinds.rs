//! Who may move a group's committed offset back. A broker that has just started or just become
//! master has no heartbeat yet from the group's consumers, so membership alone cannot tell a
//! consumer's stale commit from an operator's rewind: consumers commit oneway (Java, Go, C++) or
//! say so (Tidemark's client); an admin tool's commit is synchronous.
//!
//! Request → response only: these run on the socket-free harness (`common::HandlerHarness`),
//! each connection an in-process channel. Over a socket a request on one connection is served in
//! arrival order as far as the offset table goes (a commit is applied before the connection's
//! next frame is read); here each call completes before the next starts.

use tidemark_protocol::acked::FROM_CONSUMER_FIELD;

use crate::common::*;

async fn send_messages(connection: &Connection, count: usize) {
    for index in 0..count {
        connection
            .succeeds(send_request(&format!("m{index}"), "TagA", 0))
            .await;
    }
}

#[tokio::test]
async fn only_an_admin_tools_commit_rewinds_for_a_group_without_heartbeats() {
    let broker = HandlerHarness::open(|_| {}).await;
    // Never heartbeats: to the broker it is no member of the group, as a consumer is right
    // after a failover and as an admin tool always is.
    let client = broker.connect();
    send_messages(&client, 10).await;
    client.succeeds(commit_request(10)).await;
    assert_eq!(client.stored().await, 10);

    // A Java, Go or C++ consumer's periodic persist (oneway) of where it was on the old master.
    client.send_oneway(commit_request(4)).await;
    assert_eq!(
        client.stored().await,
        10,
        "a oneway commit from a consumer without a heartbeat here rewound the group"
    );

    // Tidemark's consumer waits for its commits, and says they are a consumer's.
    let mut marked = commit_request(5);
    marked.ext_fields.insert(FROM_CONSUMER_FIELD, "1");
    client.succeeds(marked).await;
    assert_eq!(client.stored().await, 10);

    // mqadmin's updateConsumeOffset (and the old reset by time): synchronous, unmarked.
    client.succeeds(commit_request(3)).await;
    assert_eq!(client.stored().await, 3, "the admin tool's rewind");

    // Forward commits of either kind still move it on.
    client.send_oneway(commit_request(8)).await;
    assert_eq!(client.stored().await, 8);
}

/// An operator's reset moves a group back, tells its clients, and a commit sent before the
/// client heard of it cannot undo it; the client's confirmation lifts the fence.
#[tokio::test]
async fn operator_resets_hold_against_stale_commits() {
    let broker = HandlerHarness::open(|_| {}).await;
    let mut consumer = broker.connect();
    send_messages(&consumer, 5).await;
    consumer.succeeds(heartbeat()).await;
    consumer.succeeds(commit_request(5)).await;

    let operator = broker.connect();
    let reset = RemotingCommand::request_with_header(
        RequestCode::InvokeBrokerToResetOffset,
        &tidemark_protocol::headers::ResetOffsetRequestHeader {
            topic: TOPIC.into(),
            group: GROUP.into(),
            timestamp: 0,
            is_force: true,
            queue_id: None,
            offset: None,
        },
    );
    let response = operator.succeeds(reset).await;
    let body = tidemark_protocol::body::MessageQueueOffsets::from_json_bytes(&response.body)
        .expect("ResetOffsetBody");
    assert_eq!(
        body.offset_table
            .get(&tidemark_protocol::body::MessageQueue::new(
                TOPIC, "broker-a", 0
            )),
        Some(&0)
    );
    // The heartbeat's membership notice may come first.
    loop {
        let notice = tokio::time::timeout(WAIT, consumer.from_broker.recv())
            .await
            .expect("clients are told")
            .expect("notice");
        if notice.request_code() == RequestCode::ResetConsumerClientOffset {
            assert_eq!(notice.ext_fields.get("group"), Some(GROUP));
            break;
        }
    }
    assert_eq!(consumer.stored().await, 0);
    consumer.succeeds(commit_request(5)).await;
    assert_eq!(
        consumer.stored().await,
        0,
        "a stale commit does not undo the reset"
    );
    consumer.succeeds(commit_request(0)).await;
    consumer.succeeds(commit_request(3)).await;
    assert_eq!(
        consumer.stored().await,
        3,
        "after the client confirmed the reset, progress moves on"
    );
}

/// A client that ignores RESET_CONSUMER_CLIENT_OFFSET (a lite pull consumer) still follows a
/// reset: its next pull of the queue from another offset is answered PULL_OFFSET_MOVED to the
/// reset offset — once; the pull after it is served from where it asks. A pull that already asks
/// for the reset offset is served as it is.
#[tokio::test]
async fn the_next_pull_after_a_reset_is_sent_to_the_reset_offset_once() {
    let broker = HandlerHarness::open(|_| {}).await;
    let consumer = broker.connect();
    send_messages(&consumer, 10).await;
    consumer.succeeds(heartbeat()).await;
    consumer.succeeds(commit_request(10)).await;
    let reset = |offset: i64| {
        RemotingCommand::request_with_header(
            RequestCode::InvokeBrokerToResetOffset,
            &tidemark_protocol::headers::ResetOffsetRequestHeader {
                topic: TOPIC.into(),
                group: GROUP.into(),
                timestamp: 0,
                is_force: true,
                queue_id: Some(0),
                offset: Some(offset),
            },
        )
    };
    let operator = broker.connect();
    operator.succeeds(reset(2)).await;

    let moved = consumer.call(pull_request(10, None, 0)).await;
    assert_eq!(moved.response_code(), ResponseCode::PullOffsetMoved);
    let header: PullMessageResponseHeader = moved.decode_header().expect("pull header");
    assert_eq!(header.next_begin_offset, 2);
    let again = consumer.call(pull_request(10, None, 0)).await;
    assert_ne!(
        again.response_code(),
        ResponseCode::PullOffsetMoved,
        "only the first pull after the reset is moved"
    );

    operator.succeeds(reset(4)).await;
    let served = consumer.call(pull_request(4, None, 0)).await;
    assert_eq!(served.response_code(), ResponseCode::Success);
    let header: PullMessageResponseHeader = served.decode_header().expect("pull header");
    assert_eq!(header.next_begin_offset, 10, "offsets 4..9 served");
    let later = consumer.call(pull_request(10, None, 0)).await;
    assert_ne!(later.response_code(), ResponseCode::PullOffsetMoved);
}

/// A pull held (long polling) when the reset comes is the one sent to the reset offset.
#[tokio::test]
async fn a_pull_held_across_a_reset_is_sent_to_the_reset_offset() {
    let broker = HandlerHarness::open(|_| {}).await;
    let consumer = Arc::new(broker.connect());
    send_messages(&consumer, 10).await;
    consumer.succeeds(heartbeat()).await;
    consumer.succeeds(commit_request(10)).await;
    let holding = consumer.clone();
    let held = tokio::spawn(async move { holding.call(pull_request(10, None, 1_000)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let operator = broker.connect();
    operator
        .succeeds(RemotingCommand::request_with_header(
            RequestCode::InvokeBrokerToResetOffset,
            &tidemark_protocol::headers::ResetOffsetRequestHeader {
                topic: TOPIC.into(),
                group: GROUP.into(),
                timestamp: 0,
                is_force: true,
                queue_id: None,
                offset: None,
            },
        ))
        .await;
    let answer = held.await.expect("pull task");
    assert_eq!(answer.response_code(), ResponseCode::PullOffsetMoved);
    let header: PullMessageResponseHeader = answer.decode_header().expect("pull header");
    assert_eq!(header.next_begin_offset, 0);
}

/// Found by the fault harness (`tidemark-chaos`): a master isolated from everyone was deposed;
/// back as a slave it still got the orderly consumer's commit of where the new master had
/// restarted it (lower than what the isolated master held). Taken as the current consumer's
/// deliberate rewind, it raised the queue's reset epoch on the slave, so every newer offset
/// the master streamed lost to it, and the slave answered the old offset once elected. On a
/// slave a client's commit only ever moves forward.
#[tokio::test]
async fn a_slave_takes_no_clients_commit_as_a_rewind() {
    use tidemark_broker::role::RoleNow;
    use tidemark_broker::BrokerRole;

    let broker = HandlerHarness::open(|_| {}).await;
    let consumer = broker.connect();
    send_messages(&consumer, 10).await;
    consumer.succeeds(heartbeat()).await;
    consumer.succeeds(commit_request(8)).await;
    assert_eq!(consumer.stored().await, 8);
    // Pulling the queue makes this connection its current consumer.
    consumer.call(pull_request(8, None, 0)).await;
    // On the master its lower commit is a deliberate rewind (a lite pull consumer's seek).
    consumer.succeeds(commit_request(6)).await;
    assert_eq!(consumer.stored().await, 6);
    consumer.succeeds(commit_request(8)).await;

    broker.state.role.set(RoleNow {
        role: BrokerRole::Slave,
        broker_id: 1,
    });
    consumer.succeeds(commit_request(3)).await;
    assert_eq!(
        consumer.stored().await,
        8,
        "a slave took the consumer's lower commit as a rewind"
    );
    consumer.succeeds(commit_request(9)).await;
    assert_eq!(consumer.stored().await, 9, "forward progress is kept");
}
