//! A broker without sockets: its request handler called directly, each connection an
//! in-process channel. For tests that need only request → response — no port to race for, no
//! name server, no background service (registration, the persister's task, replication,
//! expiry); a test that needs one of those starts a broker on loopback instead.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use tidemark_broker::{Broker, BrokerConfig, BrokerHandler, BrokerState};
use tidemark_protocol::{RemotingCommand, ResponseCode};
use tidemark_remoting::{Channel, Reply, RequestHandler};
use tokio::sync::mpsc;

pub struct HandlerHarness {
    pub state: Arc<BrokerState>,
    handler: BrokerHandler,
    _dir: tempfile::TempDir,
}

/// One client connection: what the broker answers on it, and what it sends to the client.
pub struct Connection {
    channel: Channel,
    handler: BrokerHandler,
    /// Requests the broker sent this client (a reset notice, a check-back, …).
    pub from_broker: mpsc::Receiver<RemotingCommand>,
}

impl HandlerHarness {
    /// Opens a broker over a fresh directory, `configure` applied to the tests' settings (no
    /// name server: nothing registers).
    pub async fn open(configure: impl FnOnce(&mut BrokerConfig)) -> HandlerHarness {
        Self::open_in(tempfile::tempdir().expect("temp dir"), configure).await
    }

    /// [`HandlerHarness::open`] over `dir`, prepared by the test (files a broker left there).
    pub async fn open_in(
        dir: tempfile::TempDir,
        configure: impl FnOnce(&mut BrokerConfig),
    ) -> HandlerHarness {
        let mut settings = super::config(dir.path(), "127.0.0.1:1");
        configure(&mut settings);
        let broker = tokio::task::spawn_blocking(move || Broker::open(settings))
            .await
            .expect("open task")
            .expect("broker opens");
        let state = broker.state().clone();
        HandlerHarness {
            handler: BrokerHandler::new(state.clone()),
            state,
            _dir: dir,
        }
    }

    /// Shuts the broker down cleanly and opens it again over the same directory, with the same
    /// settings changes; the test drops its connections first (they hold the broker).
    pub async fn restart(self, configure: impl FnOnce(&mut BrokerConfig)) -> HandlerHarness {
        let HandlerHarness {
            state,
            handler,
            _dir: dir,
        } = self;
        drop(handler);
        tokio::task::spawn_blocking(move || state.close())
            .await
            .expect("close task")
            .expect("clean close");
        Self::open_in(dir, configure).await
    }

    /// A new connection, with its own id and peer address, as a client opening a socket has.
    pub fn connect(&self) -> Connection {
        static NEXT_PORT: AtomicU16 = AtomicU16::new(20_000);
        let port = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
        let peer = SocketAddr::from(([127, 0, 0, 1], port));
        let local = SocketAddr::from(([127, 0, 0, 1], 10_911));
        let (outbound, from_broker) = mpsc::channel(64);
        Connection {
            channel: Channel::in_process_to(peer, local, outbound),
            handler: self.handler.clone(),
            from_broker,
        }
    }
}

impl Connection {
    /// The broker's answer to `request`, which must be success.
    pub async fn succeeds(&self, request: RemotingCommand) -> RemotingCommand {
        let answer = self.call(request).await;
        assert_eq!(answer.response_code(), ResponseCode::Success, "{answer:?}");
        answer
    }

    /// The tests' group's offset stored for queue 0 of the tests' topic.
    pub async fn stored(&self) -> i64 {
        let answer: tidemark_protocol::headers::OffsetResponseHeader = self
            .call(super::query_offset_request())
            .await
            .decode_header()
            .expect("an offset is stored");
        answer.offset
    }

    /// The broker's answer to `request`.
    pub async fn call(&self, request: RemotingCommand) -> RemotingCommand {
        match self.handler.handle(self.channel.clone(), request).await {
            Reply::Response(response) => response,
            Reply::NoResponse => {
                panic!("the broker gave no answer to a request that waits for one")
            }
            Reply::Unsupported => RemotingCommand::response(
                ResponseCode::RequestCodeNotSupported,
                "not served".to_owned(),
            ),
        }
    }

    /// The client's answer to a request the broker sent it (taken from `from_broker`).
    pub fn answer(&self, response: RemotingCommand) {
        self.channel.answer(response)
    }

    /// `request` sent oneway: served in full, the answer (if any) dropped, as a socket would.
    pub async fn send_oneway(&self, mut request: RemotingCommand) {
        request.mark_oneway();
        let _ = self.handler.handle(self.channel.clone(), request).await;
    }
}
