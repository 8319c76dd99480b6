//! The broker over loopback with an in-process name server, driven by raw remoting requests:
//! send, heartbeat, pull (long polling included), commits by request and by pull, persistence
//! across a restart, corrupt config files, and bad input while a producer and a consumer keep
//! working. (Compatibility with the real Java client is proven by compat/java's suite.)

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
            &client,
            &cluster.broker,
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
        let response = send_ok(&client, &broker, send_request(&format!("m{index}"), tag, 0)).await;
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
        let mut update = RemotingCommand::request_with_header(
            RequestCode::UpdateConsumerOffset,
            &UpdateConsumerOffsetRequestHeader {
                consumer_group: GROUP.into(),
                topic: TOPIC.into(),
                queue_id: 0,
                commit_offset: offset,
                broker_name: None,
            },
        );
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

/// Importing `consumerOffset.json` (no offset journal yet): a corrupt file falls back to its
/// backup; both corrupt refuses to start unless told. Once the journal exists it is the source
/// of truth and the JSON file is only an export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_offset_files_fall_back_or_refuse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config_dir = dir.path().join("config");
    std::fs::create_dir_all(&config_dir).expect("mkdir");
    let file = config_dir.join("consumerOffset.json");
    std::fs::write(&file, b"{\"offsetTable\":{\"T@g\":{0:").expect("torn file");
    std::fs::write(
        config_dir.join("consumerOffset.json.bak"),
        b"{\"offsetTable\":{\"T@g\":{0:42}}}",
    )
    .expect("backup");
    let broker = tokio::task::spawn_blocking({
        let config = config(dir.path(), "127.0.0.1:1");
        move || Broker::open(config)
    })
    .await
    .expect("task")
    .expect("starts from the backup");
    assert_eq!(broker.state().offsets.query("T", "g", 0), Some(42));
    drop(broker);
    std::fs::write(&file, b"garbage").expect("corrupt file");
    std::fs::write(config_dir.join("consumerOffset.json.bak"), b"garbage").expect("corrupt backup");
    let journaled = tokio::task::spawn_blocking({
        let config = config(dir.path(), "127.0.0.1:1");
        move || Broker::open(config)
    })
    .await
    .expect("task")
    .expect("the journal is the truth, not the export");
    assert_eq!(journaled.state().offsets.query("T", "g", 0), Some(42));
    drop(journaled);
    std::fs::remove_dir_all(config_dir.join("offsetJournal")).expect("no journal");
    let refused = tokio::task::spawn_blocking({
        let config = config(dir.path(), "127.0.0.1:1");
        move || Broker::open(config)
    })
    .await
    .expect("task");
    let message = refused.expect_err("refuses").to_string();
    assert!(
        message.contains("consumerOffset.json") && message.contains("consumerOffset.json.bak"),
        "{message}"
    );
    let forced = tokio::task::spawn_blocking({
        let config = BrokerConfig {
            ignore_corrupt_config: true,
            ..config(dir.path(), "127.0.0.1:1")
        };
        move || Broker::open(config)
    })
    .await
    .expect("task")
    .expect("the explicit flag overrides");
    assert!(forced.state().offsets.is_empty());
}

/// A journal damaged in the middle (a disk fault): the broker still starts, keeps every commit
/// before the damage and none after, and later commits survive the next restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_offset_journal_keeps_what_precedes_the_damage() {
    use tidemark_broker::offsets::Committer;
    let dir = tempfile::tempdir().expect("tempdir");
    let open = || {
        let config = config(dir.path(), "127.0.0.1:1");
        tokio::task::spawn_blocking(move || Broker::open(config))
    };
    let broker = open().await.expect("task").expect("opens");
    for queue_id in 0..3 {
        let (_, journaled) = broker.state().offsets.commit(
            "T",
            "g",
            queue_id,
            10 + i64::from(queue_id),
            100,
            0,
            Committer::Progress,
            None,
        );
        broker
            .state()
            .offsets
            .durable(journaled)
            .await
            .expect("durable");
    }
    drop(broker);
    let journal_dir = dir.path().join("config").join("offsetJournal");
    let mut segments: Vec<std::path::PathBuf> = std::fs::read_dir(&journal_dir)
        .expect("journal dir")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "journal"))
        .collect();
    segments.sort();
    let segment = segments.pop().expect("a segment");
    let mut bytes = std::fs::read(&segment).expect("read");
    // Header (16) + one record (8 + 29 bytes for "T"/"g"), then a byte inside the second.
    let second_record = 16 + 37;
    assert!(
        bytes.len() >= second_record + 37 * 2,
        "{} bytes",
        bytes.len()
    );
    bytes[second_record + 12] ^= 0x40;
    std::fs::write(&segment, &bytes).expect("write");

    let broker = open()
        .await
        .expect("task")
        .expect("starts despite the damage");
    let offsets = &broker.state().offsets;
    assert_eq!(offsets.query("T", "g", 0), Some(10), "before the damage");
    assert_eq!(offsets.query("T", "g", 1), None, "the damaged record");
    assert_eq!(offsets.query("T", "g", 2), None, "after the damage");
    let (_, journaled) = offsets.commit("T", "g", 2, 50, 100, 1, Committer::Progress, None);
    offsets.durable(journaled).await.expect("durable");
    drop(broker);
    let broker = open().await.expect("task").expect("opens");
    assert_eq!(broker.state().offsets.query("T", "g", 0), Some(10));
    assert_eq!(broker.state().offsets.query("T", "g", 2), Some(50));
}

async fn expect_closed(mut stream: TcpStream) {
    let mut buffer = [0u8; 256];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buffer))
            .await
            .expect("closed in time")
        {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}

/// Garbage, oversized frames, unknown codes and malformed headers and bodies get an error or a
/// closed connection, while a producer and a consumer keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_never_stops_the_broker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let broker = cluster.broker.clone();
    let sent = Arc::new(AtomicU64::new(0));
    let pulled = Arc::new(AtomicU64::new(0));
    let (stop, stopping) = watch::channel(false);
    let producer = {
        let (broker, sent, stopping) = (broker.clone(), sent.clone(), stopping.clone());
        tokio::spawn(async move {
            let client = RemotingClient::new(ClientConfig::default(), None);
            let mut index = 0;
            while !*stopping.borrow() {
                let response = client
                    .invoke(&broker, send_request(&format!("p{index}"), "TagA", 0), WAIT)
                    .await
                    .expect("producer keeps working");
                assert_eq!(response.response_code(), ResponseCode::Success);
                sent.fetch_add(1, Ordering::Relaxed);
                index += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let consumer = {
        let (broker, pulled, stopping) = (broker.clone(), pulled.clone(), stopping.clone());
        tokio::spawn(async move {
            let client = RemotingClient::new(ClientConfig::default(), None);
            client
                .invoke(&broker, heartbeat(), WAIT)
                .await
                .expect("heartbeat");
            let mut offset = 0;
            while !*stopping.borrow() {
                let response = client
                    .invoke(&broker, pull_request(offset, None, 200), WAIT)
                    .await
                    .expect("consumer keeps working");
                if response.response_code() == ResponseCode::Success {
                    let header: PullMessageResponseHeader =
                        response.decode_header().expect("header");
                    pulled.fetch_add(
                        decode_records(&response.body, DecodeOptions::default())
                            .expect("records")
                            .len() as u64,
                        Ordering::Relaxed,
                    );
                    offset = header.next_begin_offset;
                }
            }
        })
    };
    // Both are at work before the bad input starts.
    let working = eventually(WAIT, || {
        sent.load(Ordering::Relaxed) > 0 && pulled.load(Ordering::Relaxed) > 0
    })
    .await;
    assert!(working, "the producer and the consumer never got going");
    let before = (sent.load(Ordering::Relaxed), pulled.load(Ordering::Relaxed));

    // Garbage bytes and an oversized length word: the connection is closed.
    for bytes in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &[0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0][..],
        &[0, 0, 0, 9, 0, 0, 0, 5, b'{', b'x', b'y', b'z', b'}'][..],
    ] {
        let mut stream = TcpStream::connect(&broker).await.expect("connect");
        stream.write_all(bytes).await.expect("write");
        expect_closed(stream).await;
    }
    // Well-framed but wrong: an error response each, the connection stays usable.
    let client = RemotingClient::new(ClientConfig::default(), None);
    let unknown = client
        .invoke(
            &broker,
            RemotingCommand {
                code: 31_337,
                ..RemotingCommand::default()
            },
            WAIT,
        )
        .await
        .expect("answered");
    assert_eq!(
        unknown.response_code(),
        ResponseCode::RequestCodeNotSupported
    );
    let mut missing = send_request("x", "TagA", 0);
    missing.ext_fields.remove("b");
    let response = client
        .invoke(&broker, missing, WAIT)
        .await
        .expect("answered");
    assert_eq!(response.response_code(), ResponseCode::SystemError);
    assert!(
        response.remark.unwrap_or_default().contains("`b`"),
        "names the missing field"
    );
    let mut malformed = pull_request(0, None, 0);
    malformed.ext_fields.insert("queueOffset", "not-a-number");
    let response = client
        .invoke(&broker, malformed, WAIT)
        .await
        .expect("answered");
    assert!(response.remark.unwrap_or_default().contains("queueOffset"));
    let bad_heartbeat = RemotingCommand::request(RequestCode::HeartBeat)
        .with_body(&b"{\"consumerDataSet\": [{\"groupName\": 7, "[..]);
    assert_eq!(
        client
            .invoke(&broker, bad_heartbeat, WAIT)
            .await
            .expect("answered")
            .response_code(),
        ResponseCode::SystemError
    );
    let mut bad_batch = send_request("x", "TagA", 0);
    bad_batch.code = RequestCode::SendBatchMessage.to_i32();
    bad_batch.body = Bytes::from_static(&[0, 0, 0, 99, 1, 2]);
    assert_eq!(
        client
            .invoke(&broker, bad_batch, WAIT)
            .await
            .expect("answered")
            .response_code(),
        ResponseCode::MessageIllegal
    );
    let mut raw = TcpStream::connect(&broker).await.expect("connect");
    raw.write_all(
        &frame::encode_to_bytes(&RemotingCommand {
            code: 31_337,
            opaque: 9,
            ..RemotingCommand::default()
        })
        .expect("encodes"),
    )
    .await
    .expect("write");
    let mut reply = bytes::BytesMut::new();
    while frame::decode(&mut reply, 1 << 20).expect("valid").is_none() {
        assert!(
            tokio::time::timeout(WAIT, raw.read_buf(&mut reply))
                .await
                .expect("answered")
                .expect("read")
                > 0
        );
    }

    let kept_working = eventually(WAIT, || {
        sent.load(Ordering::Relaxed) > before.0 && pulled.load(Ordering::Relaxed) > before.1
    })
    .await;
    let after = (sent.load(Ordering::Relaxed), pulled.load(Ordering::Relaxed));
    assert!(
        kept_working,
        "producer and consumer kept working: {before:?} -> {after:?}"
    );
    let _ = stop.send(true);
    producer.await.expect("producer task");
    consumer.await.expect("consumer task");
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}

/// GET_BROKER_RUNTIME_INFO carries the keys the Java admin reads, with measured values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_info_reports_measured_figures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    for index in 0..3 {
        client
            .invoke(
                &cluster.broker,
                send_request(&format!("r{index}"), "TagA", 0),
                WAIT,
            )
            .await
            .expect("answered");
    }
    // The figures are sampled periodically: asked until the three puts show (bounded).
    let deadline = tokio::time::Instant::now() + WAIT;
    let table = loop {
        let table = runtime_info(&client, &cluster.broker).await;
        let puts = table
            .get("msgPutTotalTodayNow")
            .cloned()
            .unwrap_or_default();
        if puts == "3" || tokio::time::Instant::now() > deadline {
            break table;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(table["msgPutTotalTodayNow"], "3");
    assert_eq!(
        table["putTps"].split(' ').count(),
        3,
        "tps over 10, 60 and 600 s"
    );
    assert!(
        table["commitLogDirCapacity"].starts_with("Total : "),
        "{}",
        table["commitLogDirCapacity"]
    );
    assert!(
        table["earliestMessageTimeStamp"]
            .parse::<i64>()
            .expect("a timestamp")
            > 1_600_000_000_000
    );
    assert_eq!(table["brokerRole"], "ASYNC_MASTER");
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}

/// An operator's reset moves a group back, tells its clients, and a commit sent before the
/// client heard of it cannot undo it; the client's confirmation lifts the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_resets_hold_against_stale_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::start(dir.path()).await;
    let (seen, mut notices) = tokio::sync::mpsc::channel(4);
    let handler = tidemark_remoting::handler_fn(move |_channel, request: RemotingCommand| {
        let seen = seen.clone();
        async move {
            let _ = seen.send(request).await;
            tidemark_remoting::Reply::NoResponse
        }
    });
    let client = RemotingClient::new(ClientConfig::default(), Some(Arc::new(handler)));
    for index in 0..5 {
        client
            .invoke(
                &cluster.broker,
                send_request(&format!("m{index}"), "TagA", 0),
                WAIT,
            )
            .await
            .expect("answered");
    }
    client
        .invoke(&cluster.broker, heartbeat(), WAIT)
        .await
        .expect("answered");
    let commit = |offset: i64| {
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
    };
    client
        .invoke(&cluster.broker, commit(5), WAIT)
        .await
        .expect("answered");
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
    let response = client
        .invoke(&cluster.broker, reset, WAIT)
        .await
        .expect("answered");
    assert_eq!(
        response.response_code(),
        ResponseCode::Success,
        "{:?}",
        response.remark
    );
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
        let notice = tokio::time::timeout(WAIT, notices.recv())
            .await
            .expect("clients are told")
            .expect("notice");
        if notice.request_code() == RequestCode::ResetConsumerClientOffset {
            assert_eq!(notice.ext_fields.get("group"), Some(GROUP));
            break;
        }
    }
    async fn offset(client: &RemotingClient, broker: &str) -> i64 {
        query_offset(client, broker)
            .await
            .decode_header::<OffsetResponseHeader>()
            .expect("offset")
            .offset
    }
    assert_eq!(offset(&client, &cluster.broker).await, 0);
    client
        .invoke(&cluster.broker, commit(5), WAIT)
        .await
        .expect("answered");
    assert_eq!(
        offset(&client, &cluster.broker).await,
        0,
        "a stale commit does not undo the reset"
    );
    client
        .invoke(&cluster.broker, commit(0), WAIT)
        .await
        .expect("answered");
    client
        .invoke(&cluster.broker, commit(3), WAIT)
        .await
        .expect("answered");
    assert_eq!(
        offset(&client, &cluster.broker).await,
        3,
        "after the client confirmed the reset, progress moves on"
    );
    client.shutdown();
    let (_, stop_namesrv) = cluster.stop_broker().await;
    let _ = stop_namesrv.send(true);
}

/// Polls `done` every 20 ms until it holds or `timeout` passes; whether it held.
async fn eventually(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done() {
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}
