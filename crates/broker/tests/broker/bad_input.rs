//! Bad input from the network — malformed frames, headers and bodies — closes or refuses only
//! the offending request or connection, while a producer and a consumer beside it keep working.

use crate::common::*;

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
