//! POP consumption over loopback: messages handed out with an invisibility time, acknowledged
//! one by one; what is not acknowledged comes back through the group's POP retry topic with its
//! reconsume count raised (and to the dead-letter topic past the group's maximum); an
//! acknowledged message never comes back, across a restart too; orderly pops hand a queue's
//! messages out one batch at a time.

use crate::common::*;
use tidemark_protocol::body::{
    BatchAck, BatchAckMessageRequestBody, ConsumerProgress, SubscriptionGroupConfig,
};
use tidemark_protocol::headers::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
    GetConsumeStatsRequestHeader, NotificationRequestHeader, NotificationResponseHeader,
    PopMessageRequestHeader, PopMessageResponseHeader, PopReceipt, PopSource,
};
use tidemark_protocol::message::MessageRecord;

const POP_GROUP: &str = "pop_group";

fn now_ms() -> i64 {
    tidemark_remoting::now_ms()
}

fn pop_request(
    queue_id: i32,
    max: i32,
    invisible_ms: i64,
    poll_ms: i64,
    order: bool,
) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::PopMessage,
        &PopMessageRequestHeader {
            consumer_group: POP_GROUP.into(),
            topic: TOPIC.into(),
            queue_id,
            max_msg_nums: max,
            invisible_time: invisible_ms,
            poll_time: poll_ms,
            born_time: now_ms(),
            init_mode: 0,
            exp_type: Some("TAG".into()),
            exp: Some("*".into()),
            order: Some(order),
            attempt_id: None,
            broker_name: Some("broker-a".into()),
        },
    )
}

/// A popped message as a client sees it: the record and the receipt it builds.
struct Popped {
    record: MessageRecord,
    receipt: PopReceipt,
    body: String,
}

/// The client's side of a pop answer (what `MQClientAPIImpl.processPopResponse` does).
fn popped(response: &RemotingCommand) -> Vec<Popped> {
    if response.response_code() != ResponseCode::Success {
        return Vec::new();
    }
    let header = response
        .decode_header::<PopMessageResponseHeader>()
        .expect("pop response header");
    let mut starts = std::collections::HashMap::new();
    for entry in header.start_offset_info.as_deref().unwrap_or("").split(';') {
        let fields: Vec<&str> = entry.split(' ').collect();
        if fields.len() == 3 {
            starts.insert(
                format!("{}@{}", fields[0], fields[1]),
                fields[2].parse::<i64>().expect("start"),
            );
        }
    }
    decode_records(&response.body, DecodeOptions::default())
        .expect("records")
        .into_iter()
        .map(|record| {
            let source = if record.topic.starts_with("%RETRY%") {
                PopSource::RetryV1
            } else {
                PopSource::Topic
            };
            let start = starts[&format!("{}@{}", source.flag(), record.queue_id)];
            let receipt = PopReceipt {
                start_offset: start,
                pop_time: header.pop_time,
                invisible_time: header.invisible_time,
                revive_qid: header.revive_qid,
                source,
                broker_name: "broker-a".into(),
                queue_id: record.queue_id,
                queue_offset: record.queue_offset,
                commit_log_offset: None,
            };
            Popped {
                body: String::from_utf8_lossy(&record.body).into_owned(),
                record,
                receipt,
            }
        })
        .collect()
}

fn ack_request(message: &Popped) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::AckMessage,
        &AckMessageRequestHeader {
            consumer_group: POP_GROUP.into(),
            topic: message.receipt.source.real_topic(POP_GROUP, TOPIC),
            queue_id: message.receipt.queue_id,
            extra_info: message.receipt.encode(),
            offset: message.receipt.queue_offset,
            broker_name: None,
        },
    )
}

/// CHANGE_MESSAGE_INVISIBLETIME of a message popped from the topic itself.
fn change_request(message: &Popped, invisible_time: i64) -> RemotingCommand {
    RemotingCommand::request_with_header(
        RequestCode::ChangeMessageInvisibleTime,
        &ChangeInvisibleTimeRequestHeader {
            consumer_group: POP_GROUP.into(),
            topic: TOPIC.into(),
            queue_id: message.receipt.queue_id,
            extra_info: message.receipt.encode(),
            offset: message.receipt.queue_offset,
            invisible_time,
            broker_name: None,
        },
    )
}

async fn call(client: &RemotingClient, broker: &str, request: RemotingCommand) -> RemotingCommand {
    client
        .invoke(broker, request, WAIT)
        .await
        .expect("answered")
}

/// Pops until `expected` messages came or the wait ran out.
async fn pop_until(
    client: &RemotingClient,
    broker: &str,
    expected: usize,
    invisible_ms: i64,
) -> Vec<Popped> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut out = Vec::new();
    while out.len() < expected && tokio::time::Instant::now() < deadline {
        let response = call(
            client,
            broker,
            pop_request(-1, 32, invisible_ms, 1_000, false),
        )
        .await;
        out.extend(popped(&response));
    }
    out
}

fn bodies(messages: &[Popped]) -> Vec<String> {
    let mut out: Vec<String> = messages
        .iter()
        .map(|message| message.body.clone())
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn popped_messages_are_acknowledged_once_and_the_rest_come_back_as_retries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    for index in 0..10 {
        send_ok(
            (&client, &cluster.broker),
            send_request(&format!("m{index}"), "TagA", index % 4),
        )
        .await;
    }

    // Bad requests get clear answers.
    let mut too_many = pop_request(-1, 33, 5_000, 0, false);
    too_many.ext_fields.insert("maxMsgNums", "33");
    assert_eq!(
        call(&client, &cluster.broker, too_many)
            .await
            .response_code(),
        ResponseCode::InvalidParameter
    );
    let mut no_topic = pop_request(-1, 1, 5_000, 0, false);
    no_topic.ext_fields.insert("topic", "NoSuchTopic");
    assert_eq!(
        call(&client, &cluster.broker, no_topic)
            .await
            .response_code(),
        ResponseCode::TopicNotExist
    );

    let first = pop_until(&client, &cluster.broker, 10, 1_500).await;
    assert_eq!(first.len(), 10, "every message handed out once");
    assert_eq!(bodies(&first).len(), 10);
    // Nothing more while they are invisible.
    let again = call(
        &client,
        &cluster.broker,
        pop_request(-1, 32, 1_500, 0, false),
    )
    .await;
    assert_eq!(again.response_code(), ResponseCode::PollingTimeout);

    // Acknowledge the even ones; push one odd one's invisibility far out.
    let (acked, unacked): (Vec<&Popped>, Vec<&Popped>) = first
        .iter()
        .partition(|message| message.body[1..].parse::<i32>().expect("index") % 2 == 0);
    for message in &acked {
        assert_eq!(
            call(&client, &cluster.broker, ack_request(message))
                .await
                .response_code(),
            ResponseCode::Success
        );
    }
    let held = unacked[0];
    let change = call(&client, &cluster.broker, change_request(held, 60_000)).await;
    assert_eq!(change.response_code(), ResponseCode::Success);
    let changed = change
        .decode_header::<ChangeInvisibleTimeResponseHeader>()
        .expect("header");
    assert_eq!(changed.invisible_time, 60_000);
    // Operators see it: per queue in flight, next visible, acknowledged holes.
    let progress = call(
        &client,
        &cluster.broker,
        RemotingCommand::request_with_header(
            RequestCode::GetConsumerProgress,
            &GetConsumeStatsRequestHeader {
                consumer_group: POP_GROUP.into(),
                topic: Some(TOPIC.into()),
                topic_list: None,
            },
        ),
    )
    .await;
    let progress = ConsumerProgress::from_json_bytes(&progress.body).expect("progress body");
    let in_flight: i64 = progress.queues.iter().filter_map(|q| q.pop_in_flight).sum();
    assert_eq!(in_flight, 5, "the five odd ones");
    let next: i64 = progress
        .queues
        .iter()
        .filter_map(|q| q.pop_next_offset)
        .sum();
    assert_eq!(next, 10, "every message handed out");
    let holes: i64 = progress.queues.iter().map(|q| q.acked_above).sum();
    let floors: i64 = progress.queues.iter().map(|q| q.consumer_offset).sum();
    assert_eq!(
        floors + holes + in_flight,
        10,
        "floor + acknowledged holes + in flight cover the queues"
    );
    let next_visible: Vec<i64> = progress
        .queues
        .iter()
        .filter(|q| q.pop_in_flight.unwrap_or(0) > 0)
        .map(|q| {
            q.pop_visible_again_at_ms
                .expect("in flight: a visibility time")
        })
        .collect();
    assert!(!next_visible.is_empty());
    assert!(
        next_visible
            .iter()
            .min()
            .is_some_and(|at| *at <= now_ms() + 1_500),
        "the earliest ends with the 1.5 s invisibility: {next_visible:?}"
    );
    // An acknowledgement with the old receipt is answered but does nothing.
    assert_eq!(
        call(&client, &cluster.broker, ack_request(held))
            .await
            .response_code(),
        ResponseCode::Success
    );

    // The other four odd ones come back from the retry topic, counted once.
    let retried = pop_until(&client, &cluster.broker, 4, 1_500).await;
    let mut expected: Vec<String> = unacked
        .iter()
        .filter(|message| message.body != held.body)
        .map(|message| message.body.clone())
        .collect();
    expected.sort();
    assert_eq!(bodies(&retried), expected);
    for message in &retried {
        assert_eq!(message.record.topic, format!("%RETRY%{POP_GROUP}_{TOPIC}"));
        assert_eq!(message.record.reconsume_times, 1);
        assert_eq!(message.receipt.source, PopSource::RetryV1);
        assert!(message.record.properties.get("1ST_POP_TIME").is_some());
    }
    // Acknowledge the retries in one batch.
    let mut batch = BatchAck {
        consumer_group: POP_GROUP.into(),
        topic: TOPIC.into(),
        retry: "1".into(),
        start_offset: retried
            .iter()
            .map(|m| m.receipt.queue_offset)
            .min()
            .expect("some"),
        queue_id: 0,
        revive_queue_id: retried[0].receipt.revive_qid,
        pop_time: retried[0].receipt.pop_time,
        invisible_time: 1_500,
        bit_set: String::new(),
    };
    let offsets: Vec<i64> = retried.iter().map(|m| m.receipt.queue_offset).collect();
    batch.set_acked_offsets(&offsets);
    let same_pop = retried.iter().all(|m| m.receipt.pop_time == batch.pop_time);
    if same_pop {
        let body = BatchAckMessageRequestBody {
            acks: vec![batch],
            broker_name: Some("broker-a".into()),
        };
        let response = call(
            &client,
            &cluster.broker,
            RemotingCommand::request(RequestCode::BatchAckMessage).with_body(body.to_json_bytes()),
        )
        .await;
        assert_eq!(response.response_code(), ResponseCode::Success);
    } else {
        for message in &retried {
            call(&client, &cluster.broker, ack_request(message)).await;
        }
    }

    // Across a restart: nothing acknowledged comes back; the held one is still in flight.
    client.shutdown();
    let (namesrv, stop_namesrv) = cluster.stop_broker().await;
    let (broker, stop_broker, task) = start_broker(config(dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let after = call(&client, &broker, pop_request(-1, 32, 1_500, 2_500, false)).await;
    assert_eq!(
        after.response_code(),
        ResponseCode::PollingTimeout,
        "{:?}",
        after.remark
    );

    // Long polling: a pop waiting on the topic is answered when a message arrives.
    let waiting = {
        let client = RemotingClient::new(ClientConfig::default(), None);
        let broker = broker.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let response = client
                .invoke(&broker, pop_request(-1, 32, 5_000, 8_000, false), WAIT)
                .await
                .expect("answered");
            client.shutdown();
            (
                popped(&response)
                    .into_iter()
                    .map(|m| m.body)
                    .collect::<Vec<_>>(),
                started.elapsed(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    call(&client, &broker, send_request("late", "TagA", 1)).await;
    let (late, waited) = waiting.await.expect("pop task");
    assert_eq!(late, vec!["late"]);
    assert!(
        waited < Duration::from_secs(4),
        "woken by the send, not the poll time: {waited:?}"
    );

    // Notification says whether something is poppable without popping it.
    let notify = call(
        &client,
        &broker,
        RemotingCommand::request_with_header(
            RequestCode::Notification,
            &NotificationRequestHeader {
                consumer_group: POP_GROUP.into(),
                topic: TOPIC.into(),
                queue_id: -1,
                poll_time: 0,
                born_time: now_ms(),
                order: None,
                attempt_id: None,
                broker_name: None,
            },
        ),
    )
    .await;
    let has = notify
        .decode_header::<NotificationResponseHeader>()
        .expect("header");
    assert!(!has.has_msg);

    client.shutdown();
    let _ = stop_broker.send(true);
    task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_groups_maximum_a_popped_message_goes_to_the_dead_letter_topic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let group = SubscriptionGroupConfig {
        group_name: POP_GROUP.into(),
        retry_max_times: 1,
        ..SubscriptionGroupConfig::default()
    };
    let response = call(
        &client,
        &cluster.broker,
        RemotingCommand::request(RequestCode::UpdateAndCreateSubscriptionGroup)
            .with_body(group.to_json_bytes()),
    )
    .await;
    assert_eq!(response.response_code(), ResponseCode::Success);
    call(&client, &cluster.broker, send_request("doomed", "TagA", 0)).await;
    let first = pop_until(&client, &cluster.broker, 1, 1_000).await;
    assert_eq!(first.len(), 1);
    let second = pop_until(&client, &cluster.broker, 1, 1_000).await;
    assert_eq!(bodies(&second), vec!["doomed"]);
    assert_eq!(second[0].record.reconsume_times, 1);
    // Not acknowledged again: past the maximum (1) it goes to the dead-letter topic.
    let dead = pull_all(
        (&client, &cluster.broker),
        &format!("%DLQ%{POP_GROUP}"),
        0,
        1,
    )
    .await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reconsume_times, 2);
    assert_eq!(dead[0].properties.get("RETRY_TOPIC"), Some(TOPIC));
    let none = call(
        &client,
        &cluster.broker,
        pop_request(-1, 32, 1_000, 1_500, false),
    )
    .await;
    assert_eq!(none.response_code(), ResponseCode::PollingTimeout);
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orderly_pops_hand_a_queue_out_one_batch_at_a_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    for index in 0..4 {
        call(
            &client,
            &cluster.broker,
            send_request(&format!("o{index}"), "TagA", 1),
        )
        .await;
    }
    let first = popped(&call(&client, &cluster.broker, pop_request(1, 2, 1_000, 0, true)).await);
    assert_eq!(
        first.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
        vec!["o0", "o1"]
    );
    assert!(first.iter().all(|m| m.receipt.is_orderly()));
    // Blocked while the batch is invisible.
    let blocked = call(&client, &cluster.broker, pop_request(1, 2, 1_000, 0, true)).await;
    assert_eq!(blocked.response_code(), ResponseCode::PollingTimeout);
    // o0 acknowledged, o1 not: after the invisibility o1 comes again, counted, before o2.
    call(&client, &cluster.broker, ack_request(&first[0])).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let response = call(&client, &cluster.broker, pop_request(1, 2, 1_000, 0, true)).await;
    let header = response
        .decode_header::<PopMessageResponseHeader>()
        .expect("header");
    let second = popped(&response);
    assert_eq!(
        second.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
        vec!["o1", "o2"]
    );
    let counts = header.order_count_info.expect("order counts");
    assert!(counts.contains("0 qo1%1 1"), "{counts}");
    assert!(counts.contains("0 qo1%2 0"), "{counts}");
    for message in &second {
        call(&client, &cluster.broker, ack_request(message)).await;
    }
    // A retried attempt (its answer was lost) gets the same batch again, not counted again;
    // another attempt is blocked.
    let mut attempt = pop_request(1, 2, 1_000, 0, true);
    attempt.ext_fields.insert("attemptId", "attempt-1");
    let third = popped(&call(&client, &cluster.broker, attempt.clone()).await);
    assert_eq!(
        third.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
        vec!["o3"]
    );
    let mut retried = attempt.clone();
    retried.ext_fields.insert("bornTime", now_ms().to_string());
    let again = call(&client, &cluster.broker, retried).await;
    let again_counts = again
        .decode_header::<PopMessageResponseHeader>()
        .expect("header")
        .order_count_info
        .expect("order counts");
    let again = popped(&again);
    assert_eq!(
        again.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
        vec!["o3"]
    );
    assert!(again_counts.contains("0 qo1%3 0"), "{again_counts}");
    let mut other = attempt.clone();
    other.ext_fields.insert("attemptId", "attempt-2");
    assert_eq!(
        call(&client, &cluster.broker, other).await.response_code(),
        ResponseCode::PollingTimeout
    );
    let third = again;
    // An orderly acknowledgement of an offset never popped is refused.
    assert_eq!(
        call(&client, &cluster.broker, ack_request(&third[0]))
            .await
            .response_code(),
        ResponseCode::Success
    );
    let mut beyond = ack_request(&third[0]);
    beyond.ext_fields.insert("offset", "4");
    assert_eq!(
        call(&client, &cluster.broker, beyond).await.response_code(),
        ResponseCode::MessageIllegal
    );
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}

/// A deleted topic's queues start again at 0 when it is made again: the group's POP cursors
/// go back with them, or they would skip the new messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_and_remade_topic_is_popped_from_its_new_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    for index in 0..3 {
        send_ok(
            (&client, &cluster.broker),
            send_request(&format!("old-{index}"), "TagA", 0),
        )
        .await;
    }
    let old = pop_until(&client, &cluster.broker, 3, 60_000).await;
    assert_eq!(bodies(&old), vec!["old-0", "old-1", "old-2"]);
    let delete = RemotingCommand::request_with_header(
        RequestCode::DeleteTopicInBroker,
        &tidemark_protocol::headers::DeleteTopicRequestHeader {
            topic: TOPIC.into(),
        },
    );
    assert_eq!(
        call(&client, &cluster.broker, delete).await.response_code(),
        ResponseCode::Success
    );
    // Made again by the next send (auto-creation from TBW102).
    let sent = call(&client, &cluster.broker, send_request("new-0", "TagA", 0)).await;
    assert_eq!(
        sent.response_code(),
        ResponseCode::Success,
        "{:?}",
        sent.remark
    );
    let new = pop_until(&client, &cluster.broker, 1, 60_000).await;
    assert_eq!(bodies(&new), vec!["new-0"]);
    assert_eq!(new[0].record.queue_offset, 0);
    let _ = cluster.stop_broker().await;
}

/// Whether `broker` has the tests' topic among its topic configurations.
async fn knows_topic(client: &RemotingClient, broker: &str) -> bool {
    let all = call(
        client,
        broker,
        RemotingCommand::request(RequestCode::GetAllTopicConfig),
    )
    .await;
    all.response_code() == ResponseCode::Success
        && String::from_utf8_lossy(&all.body).contains(&format!("\"{TOPIC}\""))
}

/// The broker's whole POP state as TIDEMARK_GET_ALL_POP_STATE answers it.
async fn pop_state(client: &RemotingClient, broker: &str) -> Vec<u8> {
    let response = call(
        client,
        broker,
        RemotingCommand::request(RequestCode::GetAllPopState),
    )
    .await;
    assert_eq!(response.response_code(), ResponseCode::Success);
    response.body.to_vec()
}

/// A slave copies its master's POP state (cursors, in-flight messages and receipts), keeps it
/// across its own restart, and once its store serves as master (what a controller failover
/// does) it hands out neither an acknowledged message nor one still invisible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slave_copies_the_masters_pop_state_and_goes_on_from_it_as_master() {
    let master_dir = tempfile::tempdir().expect("tempdir");
    let slave_dir = tempfile::tempdir().expect("tempdir");
    let (namesrv, stop_namesrv) = start_namesrv().await;
    let (master, stop_master, master_task) =
        start_broker_with_ha(config(master_dir.path(), &namesrv)).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    for index in 0..30 {
        send_ok(
            (&client, &master),
            send_request(&format!("m{index}"), "TagA", 0),
        )
        .await;
    }
    let handed = pop_until(&client, &master, 30, 120_000).await;
    assert_eq!(handed.len(), 30, "every message handed out once");
    // Every other one acknowledged: the group's floor stays at the first unacknowledged
    // message, with acknowledged ones above it.
    let mut acked = Vec::new();
    for message in handed.iter().filter(|m| m.record.queue_offset % 2 == 1) {
        let response = call(&client, &master, ack_request(message)).await;
        assert_eq!(response.response_code(), ResponseCode::Success);
        acked.push(message.body.clone());
    }
    assert_eq!(acked.len(), 15);
    let master_state = pop_state(&client, &master).await;

    let mut settings = config(slave_dir.path(), &namesrv);
    settings.broker_role = tidemark_broker::BrokerRole::Slave;
    settings.broker_id = 1;
    settings.slave_sync_interval_ms = 200;
    let (slave, stop_slave, slave_task) = start_broker(settings.clone()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::time::Instant::now() < deadline
        && (pop_state(&client, &slave).await != master_state
            || max_offset(&client, &slave).await < 30
            || !knows_topic(&client, &slave).await)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The topic's configuration comes with the slave sync, apart from the log and the POP
    // state: without it the promoted master would refuse the topic's pops and acks.
    assert!(
        knows_topic(&client, &slave).await,
        "the slave never had the topic"
    );
    assert_eq!(
        pop_state(&client, &slave).await,
        master_state,
        "the slave never held the master's POP state"
    );
    assert_eq!(max_offset(&client, &slave).await, 30, "log replicated");
    // The slave takes no acknowledgement and no change of invisibility: its state is its
    // master's, and a client still sending to a master deposed under it must not hear SUCCESS
    // for a change that never reaches the new master.
    let held = handed
        .iter()
        .find(|m| m.record.queue_offset % 2 == 0)
        .expect("an unacknowledged message");
    for request in [ack_request(held), change_request(held, 60_000)] {
        let refused = call(&client, &slave, request).await;
        assert_eq!(refused.response_code(), ResponseCode::SlaveNotAvailable);
    }
    assert_eq!(
        pop_state(&client, &slave).await,
        master_state,
        "the slave's POP state changed"
    );

    // The master is gone; the slave's store comes back as the master.
    let _ = stop_master.send(true);
    master_task.await.expect("task").expect("clean stop");
    let _ = stop_slave.send(true);
    slave_task.await.expect("task").expect("clean stop");
    settings.broker_role = tidemark_broker::BrokerRole::AsyncMaster;
    settings.broker_id = 0;
    settings.namesrv_addr = namesrv.clone();
    let (promoted, stop_promoted, promoted_task) = start_broker(settings).await;
    assert_eq!(
        pop_state(&client, &promoted).await,
        master_state,
        "the copy survived the restart"
    );
    // Half the messages are acknowledged and the rest invisible for two minutes: nothing to
    // hand out. (Without the copy the pop would start again at the group's floor.)
    let response = call(&client, &promoted, pop_request(-1, 32, 120_000, 0, false)).await;
    let again = popped(&response);
    assert!(
        again.is_empty(),
        "handed out again after the failover: {:?}",
        bodies(&again)
    );
    // A receipt from before the failover still acknowledges on the new master.
    let held = handed
        .iter()
        .find(|m| m.record.queue_offset % 2 == 0)
        .expect("an unacknowledged message");
    let response = call(&client, &promoted, ack_request(held)).await;
    assert_eq!(response.response_code(), ResponseCode::Success);
    assert_ne!(pop_state(&client, &promoted).await, master_state);
    let _ = stop_promoted.send(true);
    promoted_task.await.expect("task").expect("clean stop");
    let _ = stop_namesrv.send(true);
    client.shutdown();
}

/// A reset backwards makes messages poppable again that no arrival announces: a POP request
/// held on the topic is answered with them at once, not when its poll time runs out (a gRPC
/// PushConsumer's receive holds 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_wakes_a_pop_held_on_the_topic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    send_ok((&client, &cluster.broker), send_request("once", "TagA", 0)).await;
    let first = pop_until(&client, &cluster.broker, 1, 60_000).await;
    assert_eq!(bodies(&first), vec!["once"]);
    let acked = call(&client, &cluster.broker, ack_request(&first[0])).await;
    assert_eq!(acked.response_code(), ResponseCode::Success);

    let poll_ms = 30_000;
    let held = {
        let broker = cluster.broker.clone();
        tokio::spawn(async move {
            let client = RemotingClient::new(ClientConfig::default(), None);
            let started = tokio::time::Instant::now();
            let response = client
                .invoke(
                    &broker,
                    pop_request(-1, 32, 60_000, poll_ms, false),
                    Duration::from_millis(poll_ms as u64 + 5_000),
                )
                .await
                .expect("answered");
            client.shutdown();
            (popped(&response), started.elapsed())
        })
    };
    // Whether the pop is held yet or comes after the reset, it must get the message again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reset = RemotingCommand::request_with_header(
        RequestCode::InvokeBrokerToResetOffset,
        &tidemark_protocol::headers::ResetOffsetRequestHeader {
            topic: TOPIC.into(),
            group: POP_GROUP.into(),
            timestamp: 0,
            is_force: true,
            queue_id: Some(0),
            offset: Some(0),
        },
    );
    let answer = call(&client, &cluster.broker, reset).await;
    assert_eq!(answer.response_code(), ResponseCode::Success);
    let (again, waited) = held.await.expect("pop task");
    assert_eq!(bodies(&again), vec!["once"]);
    assert!(
        waited < Duration::from_millis(poll_ms as u64 / 2),
        "woken by the reset, not the poll time: {waited:?}"
    );
    client.shutdown();
    let _ = cluster.stop_broker().await;
}
