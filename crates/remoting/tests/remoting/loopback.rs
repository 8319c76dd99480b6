//! The transport over real loopback sockets: request/response matching, oneway, unknown
//! codes, malformed and oversized input, timeouts, reconnection, graceful shutdown, limits.
//! Every wait is bounded; servers bind 127.0.0.1:0.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tidemark_protocol::{
    frame, RemotingCommand, RequestCode, ResponseCode, FRAME_SIZE_MAX_BYTES_DEFAULT,
};
use tidemark_remoting::{
    handler_fn, serve, Channel, ChannelConfig, ClientConfig, RemotingClient, RemotingError, Reply,
    ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(5);

/// Echo server: HEART_BEAT answers SUCCESS with the request body, after `remark` ms of delay
/// if the request carries a numeric remark; GET_MAX_OFFSET sleeps 10 s; oneway
/// UPDATE_CONSUMER_OFFSET bumps `oneways`; everything else is unsupported. `in_flight` counts
/// the requests its handler is serving.
struct TestServer {
    addr: SocketAddr,
    oneways: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl TestServer {
    async fn start(config: ServerConfig) -> Self {
        Self::start_at("127.0.0.1:0".parse().expect("literal"), config).await
    }

    async fn start_at(addr: SocketAddr, config: ServerConfig) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind loopback");
        let addr = listener.local_addr().expect("bound");
        let oneways = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let counter = oneways.clone();
        let serving = in_flight.clone();
        let handler = handler_fn(move |_channel: Channel, request: RemotingCommand| {
            let counter = counter.clone();
            let serving = InFlight::enter(&serving);
            async move {
                let _serving = serving;
                match request.request_code() {
                    RequestCode::HeartBeat => {
                        if let Some(delay) =
                            request.remark.as_deref().and_then(|text| text.parse().ok())
                        {
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                        }
                        Reply::Response(
                            RemotingCommand::response(ResponseCode::Success, None)
                                .with_body(request.body),
                        )
                    }
                    RequestCode::GetMaxOffset => {
                        tokio::time::sleep(Duration::from_secs(10)).await;
                        Reply::Response(RemotingCommand::response(ResponseCode::Success, None))
                    }
                    RequestCode::UpdateConsumerOffset => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        counter.fetch_add(1, Ordering::SeqCst);
                        Reply::Response(RemotingCommand::response(ResponseCode::Success, None))
                    }
                    _ => Reply::Unsupported,
                }
            }
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, Arc::new(handler), config, async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            oneways,
            in_flight,
            stop: Some(stop),
            task,
        }
    }

    /// Waits (bounded) until the handler is serving at least `count` requests.
    async fn wait_in_flight(&self, count: usize) {
        let waited = tokio::time::timeout(WAIT, async {
            while self.in_flight.load(Ordering::SeqCst) < count {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "{} requests in flight, not {count}",
            self.in_flight.load(Ordering::SeqCst)
        );
    }

    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("server stops")
            .expect("no panic");
    }
}

/// One request in the test server's handler: counted from the call until its future is done
/// (or dropped).
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(count: &Arc<AtomicUsize>) -> InFlight {
        count.fetch_add(1, Ordering::SeqCst);
        InFlight(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn heartbeat(body: &'static [u8]) -> RemotingCommand {
    RemotingCommand::request(RequestCode::HeartBeat).with_body(body)
}

async fn read_frame(stream: &mut TcpStream) -> Option<RemotingCommand> {
    let mut buffer = BytesMut::new();
    loop {
        if let Some(command) = frame::decode(&mut buffer, FRAME_SIZE_MAX_BYTES_DEFAULT)
            .expect("server frames are valid")
        {
            return Some(command);
        }
        let read = tokio::time::timeout(WAIT, stream.read_buf(&mut buffer))
            .await
            .expect("bounded wait")
            .ok()?;
        if read == 0 {
            return None;
        }
    }
}

async fn write_frame(stream: &mut TcpStream, command: &RemotingCommand) {
    stream
        .write_all(&frame::encode_to_bytes(command).expect("encodes"))
        .await
        .expect("write");
}

/// Given many concurrent requests answered out of order, each caller gets its own response.
#[tokio::test]
async fn responses_match_requests_by_opaque() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = Arc::new(RemotingClient::new(ClientConfig::default(), None));
    let addr = server.addr.to_string();
    let mut calls = Vec::new();
    for index in 0..64u64 {
        let client = client.clone();
        let addr = addr.clone();
        calls.push(tokio::spawn(async move {
            let body = index.to_be_bytes().to_vec();
            let request = RemotingCommand::request(RequestCode::HeartBeat)
                .with_body(body.clone())
                .with_remark(((64 - index) % 7 * 5).to_string());
            let response = client.invoke(&addr, request, WAIT).await.expect("answered");
            assert_eq!(response.response_code(), ResponseCode::Success);
            assert!(response.is_response());
            assert_eq!(&response.body[..], &body[..]);
        }));
    }
    for call in calls {
        call.await.expect("no panic");
    }
    server.shutdown().await;
}

/// On one connection, requests that wait (a held pull, a sync commit) do not hold up the ones
/// behind them; and once as many wait as the connection allows, reading stops until one ends.
#[tokio::test]
async fn waiting_requests_do_not_hold_up_a_connection_until_its_limit() {
    let config = ServerConfig {
        channel: ChannelConfig {
            in_flight_requests_max: 2,
            ..ServerConfig::default().channel
        },
        ..ServerConfig::default()
    };
    let server = TestServer::start(config).await;
    let client = Arc::new(RemotingClient::new(ClientConfig::default(), None));
    let addr = server.addr.to_string();
    let call = |remark: &'static str| {
        let client = client.clone();
        let addr = addr.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let request = RemotingCommand::request(RequestCode::HeartBeat).with_remark(remark);
            let response = client.invoke(&addr, request, WAIT).await.expect("answered");
            assert_eq!(response.response_code(), ResponseCode::Success);
            started.elapsed()
        })
    };
    let first_slow = call("600");
    server.wait_in_flight(1).await;
    let quick = call("0").await.expect("no panic");
    assert!(
        quick < Duration::from_millis(300),
        "a quick request waited {quick:?} behind a slow one"
    );
    let second_slow = call("600");
    server.wait_in_flight(2).await;
    // Two wait now, the limit: the connection reads nothing more until the first ends.
    let held = call("0").await.expect("no panic");
    assert!(
        held >= Duration::from_millis(400),
        "read past the in-flight limit: answered in {held:?}"
    );
    for slow in [first_slow, second_slow] {
        let elapsed = slow.await.expect("no panic");
        assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
    }
    server.shutdown().await;
}

/// An unknown code gets REQUEST_CODE_NOT_SUPPORTED with Java's remark, on the same opaque.
#[tokio::test]
async fn unknown_codes_are_answered_not_supported() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    let request = RemotingCommand {
        code: 9999,
        opaque: 77,
        ..RemotingCommand::default()
    };
    write_frame(&mut stream, &request).await;
    let response = read_frame(&mut stream).await.expect("answered");
    assert_eq!(
        response.response_code(),
        ResponseCode::RequestCodeNotSupported
    );
    assert_eq!(response.opaque, 77);
    assert_eq!(
        response.remark.as_deref(),
        Some(" request type 9999 not supported")
    );
    server.shutdown().await;
}

/// A oneway request is applied but never answered, even though the handler returns a response.
#[tokio::test]
async fn oneway_requests_are_never_answered() {
    let server = TestServer::start(ServerConfig::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    let mut oneway = RemotingCommand::request(RequestCode::UpdateConsumerOffset).with_opaque(1);
    oneway.mark_oneway();
    write_frame(&mut stream, &oneway).await;
    let mut unknown_oneway = RemotingCommand {
        code: 9999,
        opaque: 2,
        ..RemotingCommand::default()
    };
    unknown_oneway.mark_oneway();
    write_frame(&mut stream, &unknown_oneway).await;
    write_frame(&mut stream, &heartbeat(b"after").with_opaque(3)).await;
    let first = read_frame(&mut stream).await.expect("answered");
    assert_eq!(
        first.opaque, 3,
        "the first response must be the heartbeat's"
    );
    // The oneway is applied even though the client closes right away.
    drop(stream);
    tokio::time::timeout(WAIT, async {
        while server.oneways.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("oneway applied");
    server.shutdown().await;
}

/// Garbage and oversized frames close that connection (and only that one).
#[tokio::test]
async fn malformed_and_oversized_frames_close_only_their_connection() {
    let config = ServerConfig {
        channel: tidemark_remoting::ChannelConfig {
            frame_size_max_bytes: 1024,
            ..ServerConfig::default().channel
        },
        ..ServerConfig::default()
    };
    let server = TestServer::start(config).await;
    let mut healthy = TcpStream::connect(server.addr).await.expect("connect");
    let inputs: [&[u8]; 4] = [
        // length word larger than the 1 KiB limit
        &[0x00, 0x01, 0x00, 0x00, 0, 0, 0, 0],
        // valid length, JSON type, header that is not JSON
        &[0, 0, 0, 8, 0, 0, 0, 4, b'n', b'o', b'p', b'e'],
        // unknown serialize type
        &[0, 0, 0, 6, 9, 0, 0, 2, b'{', b'}'],
        // length too short to hold the header-length word
        &[0, 0, 0, 1, 0],
    ];
    for input in inputs {
        let mut bad = TcpStream::connect(server.addr).await.expect("connect");
        bad.write_all(input).await.expect("write");
        let mut sink = [0u8; 64];
        let read = tokio::time::timeout(WAIT, bad.read(&mut sink))
            .await
            .expect("closed in time");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "connection must be closed, got {read:?}"
        );
        write_frame(&mut healthy, &heartbeat(b"still").with_opaque(5)).await;
        let response = read_frame(&mut healthy)
            .await
            .expect("other clients keep being served");
        assert_eq!(&response.body[..], b"still");
    }
    server.shutdown().await;
}

/// A call without an answer in time fails with Timeout, and the late answer is dropped.
#[tokio::test]
async fn calls_time_out_and_late_responses_are_ignored() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = RemotingClient::new(ClientConfig::default(), None);
    let addr = server.addr.to_string();
    let error = client
        .invoke(
            &addr,
            RemotingCommand::request(RequestCode::HeartBeat).with_remark("500"),
            Duration::from_millis(100),
        )
        .await
        .expect_err("times out");
    assert!(matches!(error, RemotingError::Timeout { .. }), "{error:?}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let response = client
        .invoke(&addr, heartbeat(b"next"), WAIT)
        .await
        .expect("connection still usable");
    assert_eq!(&response.body[..], b"next");
    server.shutdown().await;
}

/// After the server goes away and comes back on the same address, the client reconnects.
#[tokio::test]
async fn client_reconnects_after_server_restart() {
    let server = TestServer::start(ServerConfig::default()).await;
    let addr = server.addr;
    let client = RemotingClient::new(ClientConfig::default(), None);
    client
        .invoke(&addr.to_string(), heartbeat(b"1"), WAIT)
        .await
        .expect("first call");
    server.shutdown().await;
    let error = client
        .invoke(&addr.to_string(), heartbeat(b"2"), WAIT)
        .await
        .expect_err("server is down");
    assert!(
        matches!(
            error,
            RemotingError::ChannelClosed { .. } | RemotingError::Connect { .. }
        ),
        "{error:?}"
    );
    let server = TestServer::start_at(addr, ServerConfig::default()).await;
    let response = client
        .invoke(&addr.to_string(), heartbeat(b"3"), WAIT)
        .await
        .expect("reconnected");
    assert_eq!(&response.body[..], b"3");
    server.shutdown().await;
}

/// Shutdown stops accepting but lets an in-flight request finish and be answered.
#[tokio::test]
async fn graceful_shutdown_answers_in_flight_requests() {
    let server = TestServer::start(ServerConfig::default()).await;
    let client = Arc::new(RemotingClient::new(ClientConfig::default(), None));
    let addr = server.addr.to_string();
    let slow = {
        let client = client.clone();
        let addr = addr.clone();
        tokio::spawn(async move {
            client
                .invoke(
                    &addr,
                    RemotingCommand::request(RequestCode::HeartBeat).with_remark("300"),
                    WAIT,
                )
                .await
        })
    };
    server.wait_in_flight(1).await;
    server.shutdown().await;
    let response = slow
        .await
        .expect("no panic")
        .expect("answered before close");
    assert_eq!(response.response_code(), ResponseCode::Success);
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "listener is closed"
    );
}

/// With a limit of one connection, a second peer is only served once the first leaves.
#[tokio::test]
async fn connection_limit_holds_extra_peers_back() {
    let config = ServerConfig {
        connections_max: 1,
        ..ServerConfig::default()
    };
    let server = TestServer::start(config).await;
    let mut first = TcpStream::connect(server.addr).await.expect("connect");
    write_frame(&mut first, &heartbeat(b"a").with_opaque(1)).await;
    read_frame(&mut first).await.expect("first served");
    let mut second = TcpStream::connect(server.addr)
        .await
        .expect("kernel accepts into the backlog");
    write_frame(&mut second, &heartbeat(b"b").with_opaque(2)).await;
    let mut buffer = [0u8; 16];
    let early = tokio::time::timeout(Duration::from_millis(300), second.read(&mut buffer)).await;
    assert!(
        early.is_err(),
        "second peer must wait while the first holds the only slot"
    );
    drop(first);
    let response = read_frame(&mut second)
        .await
        .expect("served after the first left");
    assert_eq!(&response.body[..], b"b");
    server.shutdown().await;
}

/// The server can call back into a client on the client's connection (NOTIFY_CONSUMER_IDS_CHANGED).
#[tokio::test]
async fn server_sends_requests_to_clients() {
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::channel(1);
    let server_handler = handler_fn(
        move |channel: Channel, _request: RemotingCommand| async move {
            let notify = RemotingCommand::request(RequestCode::NotifyConsumerIdsChanged);
            channel
                .oneway(notify)
                .await
                .expect("client connection is open");
            Reply::Response(RemotingCommand::response(ResponseCode::Success, None))
        },
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound").to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(
        listener,
        Arc::new(server_handler),
        ServerConfig::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let client_handler = handler_fn(move |_channel: Channel, request: RemotingCommand| {
        let seen = seen_tx.clone();
        async move {
            let _ = seen.send(request.request_code()).await;
            Reply::NoResponse
        }
    });
    let client = RemotingClient::new(ClientConfig::default(), Some(Arc::new(client_handler)));
    client
        .invoke(&addr, heartbeat(b""), WAIT)
        .await
        .expect("answered");
    let code = tokio::time::timeout(WAIT, seen_rx.recv())
        .await
        .expect("bounded")
        .expect("notified");
    assert_eq!(code, RequestCode::NotifyConsumerIdsChanged);
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("stops")
        .expect("no panic");
}

/// A connection gives back buffers grown for a big message once it has been quiet a moment;
/// what comes after — big, small, or a frame whose first half arrived before the pause — is
/// still read and answered whole.
#[tokio::test]
async fn buffers_given_back_while_quiet_lose_nothing() {
    static BIG: [u8; 2 << 20] = [7; 2 << 20];
    let server = TestServer::start(ServerConfig::default()).await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    let quiet = Duration::from_millis(1500);
    for round in 0..2 {
        write_frame(&mut stream, &heartbeat(&BIG)).await;
        let answer = read_frame(&mut stream).await.expect("the big echo");
        assert_eq!(answer.body.len(), BIG.len(), "round {round}");
        tokio::time::sleep(quiet).await;
        write_frame(&mut stream, &heartbeat(b"small")).await;
        let answer = read_frame(&mut stream).await.expect("the small echo");
        assert_eq!(&answer.body[..], b"small", "round {round}");
    }
    // Half a big frame, a pause past the release time, then the rest.
    let bytes = frame::encode_to_bytes(&heartbeat(&BIG)).expect("encodes");
    let (head, tail) = bytes.split_at(bytes.len() / 2);
    stream.write_all(head).await.expect("write");
    tokio::time::sleep(quiet).await;
    stream.write_all(tail).await.expect("write");
    let answer = read_frame(&mut stream).await.expect("the split echo");
    assert_eq!(&answer.body[..], &BIG[..]);
    server.shutdown().await;
}

/// Many calls racing to an address nobody has dialed yet share one connection, and once it is
/// open every further call uses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_calls_share_one_connection() {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound").to_string();
    // Answers each call with the id of the connection it came on.
    let handler = handler_fn(|channel: Channel, _request: RemotingCommand| async move {
        Reply::Response(
            RemotingCommand::response(ResponseCode::Success, None)
                .with_body(channel.id().to_string().into_bytes()),
        )
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        Arc::new(handler),
        ServerConfig::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let client = Arc::new(RemotingClient::new(ClientConfig::default(), None));
    let calls: Vec<_> = (0..64)
        .map(|_| {
            let (client, addr) = (client.clone(), addr.clone());
            tokio::spawn(async move { client.invoke(&addr, heartbeat(b"x"), WAIT).await })
        })
        .collect();
    let mut connections = std::collections::BTreeSet::new();
    for call in calls {
        let response = call.await.expect("call task").expect("answered");
        connections.insert(response.body.to_vec());
    }
    let again = client
        .invoke(&addr, heartbeat(b"x"), WAIT)
        .await
        .expect("answered");
    connections.insert(again.body.to_vec());
    assert_eq!(connections.len(), 1, "connections used: {connections:?}");
    client.shutdown();
    let _ = stop.send(());
    tokio::time::timeout(WAIT, server)
        .await
        .expect("server stops in time")
        .expect("server task");
}
