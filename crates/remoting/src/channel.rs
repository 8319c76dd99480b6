//! One framed connection, used the same way by servers and clients: requests in either
//! direction, responses matched by opaque, oneway sends, and an orderly close.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Waker};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use tidemark_protocol::{frame, RemotingCommand, FRAME_SIZE_MAX_BYTES_DEFAULT};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::codec::RemotingCodec;
use crate::error::RemotingError;
use crate::signing::Credentials;
use crate::tls::stream::{ReadHalf, WriteHalf};
use crate::tls::Stream;

/// What a handler answers to a request.
#[derive(Debug)]
pub enum Reply {
    /// Send this response; the channel copies the request's opaque and sets the response flag.
    Response(RemotingCommand),
    /// Nothing to send (the request was oneway, or the handler answered through the channel).
    NoResponse,
    /// This peer does not serve the request's code: answered with REQUEST_CODE_NOT_SUPPORTED.
    Unsupported,
}

/// A boxed reply future, so handlers can be stored as trait objects.
pub type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send + 'static>>;

/// Serves the requests that arrive on a channel (from clients on a server, from the broker on
/// a client). A request that has to wait (a held pull) waits beside the connection's reading,
/// not in its way, so it does not stall the requests behind it; replies to oneway requests are
/// never sent.
pub trait RequestHandler: Send + Sync + 'static {
    fn handle(&self, channel: Channel, request: RemotingCommand) -> ReplyFuture;

    /// Called once when a channel closes, whatever the reason.
    fn on_close(&self, _channel: &Channel) {}
}

/// Request ids are unique per process, as Java's are, so logs can be correlated.
static NEXT_OPAQUE: AtomicI32 = AtomicI32::new(1);
static NEXT_CHANNEL_ID: AtomicU64 = AtomicU64::new(1);

/// Frames queued for writing on one connection; past this, senders wait.
const OUTBOUND_QUEUE_MAX: usize = 4096;
/// Exchanges under way beyond the frames at hand for the writer to wait a moment for more:
/// a pause (a scheduler round and a driver poll) pays when a burst can fill the write.
const BURST_FRAMES_MIN: usize = 8;
/// Bytes gathered into one write before it is issued.
const WRITE_BATCH_BYTES_MAX: usize = 256 * 1024;
/// A connection's first read buffer: most requests are well under a kilobyte; a busier
/// connection's buffers grow with what it sends and is sent.
const READ_BUFFER_INITIAL_BYTES: usize = 4 * 1024;
/// Buffers larger than this (grown for a big message, a burst, a large pull answer) are given
/// back once the connection has been quiet for [`BUFFER_RELEASE_AFTER`], so thousands of
/// quiet connections cost little memory while a busy one keeps its buffers.
const BUFFER_KEPT_BYTES_MAX: usize = 16 * 1024;
const BUFFER_RELEASE_AFTER: Duration = Duration::from_secs(1);

/// Limits of one connection.
#[derive(Debug, Clone)]
pub struct ChannelConfig {
    /// Largest frame accepted from the peer (its length word).
    pub frame_size_max_bytes: usize,
    /// Requests from the peer handled at once; past this the connection stops reading.
    pub in_flight_requests_max: usize,
    /// Close the connection when nothing arrives for this long (Java servers: 120 s).
    pub idle_timeout: Option<Duration>,
    /// On close, how long in-flight requests may take to finish and have their responses sent.
    pub drain_timeout: Duration,
    /// Signs every request (not response) sent on the connection: a client of an ACL-enabled
    /// server.
    pub signer: Option<Arc<Credentials>>,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        Self {
            frame_size_max_bytes: FRAME_SIZE_MAX_BYTES_DEFAULT,
            in_flight_requests_max: 1024,
            idle_timeout: None,
            drain_timeout: Duration::from_secs(5),
            signer: None,
        }
    }
}

/// A handle to a live connection; cheap to clone.
#[derive(Clone)]
pub struct Channel {
    inner: Arc<Inner>,
}

struct Inner {
    id: u64,
    peer: SocketAddr,
    local: SocketAddr,
    outbound: mpsc::Sender<RemotingCommand>,
    pending: Mutex<HashMap<i32, oneshot::Sender<RemotingCommand>>>,
    /// Cancelled when the connection is closed for good.
    closed: CancellationToken,
    /// Cancelled to stop reading new requests (graceful shutdown) before closing.
    stop_reading: CancellationToken,
    /// Requests from the peer that had to wait (a sync commit, a sync-flush send, a held pull)
    /// and are not answered yet: their replies come in bursts, one journal sync or one flush
    /// completing many at once.
    waiting: Arc<AtomicUsize>,
    /// Our requests whose responses have not arrived: when many are, responses arrive many to
    /// a read and wake as many callers at once. With `waiting`, what tells the writer a burst
    /// of frames may be about to be queued.
    awaited: Arc<AtomicUsize>,
    signer: Option<Arc<Credentials>>,
    /// No socket behind it: what arrives comes from code in this process (a gateway), never
    /// from the network.
    in_process: bool,
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("id", &self.inner.id)
            .field("peer", &self.inner.peer)
            .finish()
    }
}

impl Channel {
    /// Starts the reader and writer tasks of `stream`. `handler` serves requests from the
    /// peer; without one they are answered REQUEST_CODE_NOT_SUPPORTED. `stop_reading` (a child
    /// of the server's shutdown token, or a fresh token) makes the connection drain and close.
    pub fn start(
        stream: impl Into<Stream>,
        config: ChannelConfig,
        handler: Option<Arc<dyn RequestHandler>>,
        stop_reading: CancellationToken,
    ) -> Result<(Channel, tokio::task::JoinHandle<()>), RemotingError> {
        let stream = stream.into();
        let peer = stream.peer_addr()?;
        let local = stream.local_addr()?;
        // Frames are small and latency matters more than packet count.
        stream.tcp().set_nodelay(true)?;
        let (read_half, write_half) = stream.into_halves();
        let (outbound, outbound_rx) = mpsc::channel(OUTBOUND_QUEUE_MAX);
        let channel = Channel {
            inner: Arc::new(Inner {
                id: NEXT_CHANNEL_ID.fetch_add(1, Ordering::Relaxed),
                peer,
                local,
                outbound,
                pending: Mutex::new(HashMap::new()),
                closed: CancellationToken::new(),
                stop_reading,
                waiting: Arc::default(),
                awaited: Arc::default(),
                signer: config.signer.clone(),
                in_process: false,
            }),
        };
        let writer = tokio::spawn(write_loop(
            write_half,
            outbound_rx,
            channel.inner.closed.clone(),
            channel.inner.waiting.clone(),
            channel.inner.awaited.clone(),
            peer,
        ));
        let frames = FramedRead::with_capacity(
            read_half,
            RemotingCodec::new(config.frame_size_max_bytes),
            READ_BUFFER_INITIAL_BYTES,
        );
        let task = tokio::spawn(run(channel.clone(), frames, config, handler, writer));
        Ok((channel, task))
    }

    /// A connection with no socket behind it, for a gateway that turns another protocol's
    /// calls (gRPC) into requests for a remoting handler in the same process: it has an id and
    /// the caller's addresses, but anything sent over it (a server-to-client request) fails as
    /// if the peer had gone. Close it when the caller leaves.
    pub fn in_process(peer: SocketAddr, local: SocketAddr) -> Channel {
        // The receiver is dropped at once: sends fail, nothing queues up.
        let (outbound, _) = mpsc::channel(1);
        Self::in_process_to(peer, local, outbound)
    }

    /// [`in_process`](Self::in_process), except that what the server sends over it (a
    /// request to the client, such as a transaction check-back) is queued on `outbound` for
    /// the gateway to serve, instead of failing.
    pub fn in_process_to(
        peer: SocketAddr,
        local: SocketAddr,
        outbound: mpsc::Sender<RemotingCommand>,
    ) -> Channel {
        Channel {
            inner: Arc::new(Inner {
                id: NEXT_CHANNEL_ID.fetch_add(1, Ordering::Relaxed),
                peer,
                local,
                outbound,
                pending: Mutex::new(HashMap::new()),
                closed: CancellationToken::new(),
                stop_reading: CancellationToken::new(),
                waiting: Arc::default(),
                awaited: Arc::default(),
                signer: None,
                in_process: true,
            }),
        }
    }

    /// Hands over the answer to a request this end sent on an in-process connection (a
    /// gateway or a test answering where a socket's reader would).
    pub fn answer(&self, response: RemotingCommand) {
        self.complete(response)
    }

    /// Marks an in-process connection closed (its caller left).
    pub fn mark_closed(&self) {
        self.inner.stop_reading.cancel();
        self.inner.closed.cancel();
    }

    /// Process-unique id of this connection.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Whether requests on this connection come from the same process (a gateway) rather than
    /// a socket: only such requests may carry what the gateway already verified.
    pub fn is_in_process(&self) -> bool {
        self.inner.in_process
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.peer
    }

    /// This end's address (a client names itself by the IP it reaches the cluster from).
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    pub fn is_closed(&self) -> bool {
        self.inner.closed.is_cancelled()
    }

    /// Resolves once the connection is closed.
    pub async fn closed(&self) {
        self.inner.closed.cancelled().await
    }

    /// Stops reading, lets in-flight requests finish (bounded by the drain timeout), then closes.
    pub fn close(&self) {
        self.inner.stop_reading.cancel();
    }

    /// Sends a request and waits for its response.
    pub async fn request(
        &self,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        let opaque = NEXT_OPAQUE.fetch_add(1, Ordering::Relaxed);
        request.opaque = opaque;
        if let Some(signer) = &self.inner.signer {
            signer.sign(&mut request);
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        self.pending().insert(opaque, reply_tx);
        self.inner.awaited.fetch_add(1, Ordering::Relaxed);
        // Whatever happens — an answer, a timeout, or the caller dropping this call — the
        // entry and the count must not outlive the call.
        let _awaiting = Awaiting {
            channel: self,
            opaque,
        };
        let exchange = async {
            self.send(request).await?;
            reply_rx.await.map_err(|_| self.closed_error())
        };
        let outcome = tokio::time::timeout(timeout, exchange).await;
        match outcome {
            Ok(result) => result,
            Err(_) => Err(RemotingError::Timeout {
                peer: self.inner.peer.to_string(),
                opaque,
                timeout,
            }),
        }
    }

    /// Sends a request flagged oneway; the peer never answers it.
    pub async fn oneway(&self, mut request: RemotingCommand) -> Result<(), RemotingError> {
        request.opaque = NEXT_OPAQUE.fetch_add(1, Ordering::Relaxed);
        request.mark_oneway();
        if let Some(signer) = &self.inner.signer {
            signer.sign(&mut request);
        }
        self.send(request).await
    }

    /// Queues a command as is (responses built by hand, forwarding).
    pub async fn send(&self, command: RemotingCommand) -> Result<(), RemotingError> {
        if self.is_closed() {
            return Err(self.closed_error());
        }
        self.inner
            .outbound
            .send(command)
            .await
            .map_err(|_| self.closed_error())
    }

    fn closed_error(&self) -> RemotingError {
        RemotingError::ChannelClosed {
            peer: self.inner.peer.to_string(),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<i32, oneshot::Sender<RemotingCommand>>> {
        // The map stays consistent even if a holder panicked: every operation is one call.
        self.inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn complete(&self, response: RemotingCommand) {
        match self.pending().remove(&response.opaque) {
            Some(waiter) => {
                let _ = waiter.send(response);
            }
            None => {
                debug!(peer = %self.inner.peer, opaque = response.opaque, "response for no pending request (timed out?)")
            }
        }
    }
}

/// One call of [`Channel::request`] awaiting its answer: undone when the call ends, however.
struct Awaiting<'a> {
    channel: &'a Channel,
    opaque: i32,
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.channel.pending().remove(&self.opaque);
        self.channel.inner.awaited.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request that could not be answered while it was read (a sync commit waiting for its
/// journal write, a sync-flush send, a held pull).
type ParkedRequest = Pin<Box<dyn Future<Output = ()> + Send>>;

async fn run(
    channel: Channel,
    mut frames: FramedRead<ReadHalf, RemotingCodec>,
    config: ChannelConfig,
    handler: Option<Arc<dyn RequestHandler>>,
    writer: tokio::task::JoinHandle<()>,
) {
    let peer = channel.peer_addr();
    let in_flight_max = config.in_flight_requests_max.max(1);
    // Requests that have to wait stay with this task rather than each getting its own: one
    // journal sync or flush completing hundreds of them wakes this task once, instead of
    // scheduling hundreds of tasks across threads, and no task is spawned per request.
    let mut parked: FuturesUnordered<ParkedRequest> = FuturesUnordered::new();
    loop {
        let reading = parked.len() < in_flight_max;
        let next = async {
            match config.idle_timeout {
                Some(idle) => tokio::time::timeout(idle, next_frame(&mut frames))
                    .await
                    .ok(),
                None => Some(next_frame(&mut frames).await),
            }
        };
        let frame = tokio::select! {
            biased;
            _ = channel.inner.stop_reading.cancelled() => break,
            _ = channel.inner.closed.cancelled() => break,
            Some(()) = parked.next(), if !parked.is_empty() => {
                channel.inner.waiting.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            // Bounded: with too many requests of the peer waiting we stop reading its socket.
            frame = next, if reading => frame,
        };
        let command = match frame {
            None => {
                debug!(%peer, "closing idle connection");
                break;
            }
            Some(None) => break,
            Some(Some(Ok(command))) => command,
            Some(Some(Err(RemotingError::Io(error))))
                if error.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                // A TLS peer that closed without saying so first (Java clients do): a close.
                debug!(%peer, %error, "connection closed by the peer");
                break;
            }
            Some(Some(Err(error))) => {
                warn!(%peer, %error, "closing connection: unreadable input");
                break;
            }
        };
        if command.is_response() {
            channel.complete(command);
            continue;
        }
        let mut request: ParkedRequest =
            Box::pin(serve_request(channel.clone(), handler.clone(), command));
        // Most requests (a send under async flush, an offset commit) complete without waiting:
        // they are answered right here. Anything that has to wait is polled again, with a
        // real waker, among the parked ones.
        let mut probe = Context::from_waker(Waker::noop());
        if request.as_mut().poll(&mut probe).is_pending() {
            channel.inner.waiting.fetch_add(1, Ordering::Relaxed);
            parked.push(request);
        }
    }

    // Let waiting requests finish so their responses (and oneway effects) are not lost.
    let drained = tokio::time::timeout(config.drain_timeout, async {
        while parked.next().await.is_some() {
            channel.inner.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    })
    .await;
    if drained.is_err() {
        warn!(%peer, waiting = parked.len(), "closing connection with requests still in flight after the drain timeout");
        // They still finish (a held pull's effects, a commit's journal write), unanswered.
        tokio::spawn(async move { while parked.next().await.is_some() {} });
    }
    channel.inner.closed.cancel();
    // Waiters see their sender dropped and report the channel closed.
    channel.pending().clear();
    let _ = writer.await;
    if let Some(handler) = &handler {
        handler.on_close(&channel);
    }
    debug!(%peer, "connection closed");
}

/// The next frame; a large read buffer is given back while the peer is quiet.
async fn next_frame(
    frames: &mut FramedRead<ReadHalf, RemotingCodec>,
) -> Option<Result<RemotingCommand, RemotingError>> {
    loop {
        let large = frames.read_buffer().capacity() > BUFFER_KEPT_BYTES_MAX;
        tokio::select! {
            // Cancel-safe: bytes already read stay in the buffer.
            frame = frames.next() => return frame,
            _ = tokio::time::sleep(BUFFER_RELEASE_AFTER), if large => {
                if frames.read_buffer().is_empty() {
                    *frames.read_buffer_mut() = BytesMut::with_capacity(READ_BUFFER_INITIAL_BYTES);
                }
            }
        }
    }
}

async fn serve_request(
    channel: Channel,
    handler: Option<Arc<dyn RequestHandler>>,
    request: RemotingCommand,
) {
    let opaque = request.opaque;
    let oneway = request.is_oneway();
    let code = request.code;
    let reply = match handler {
        Some(handler) => handler.handle(channel.clone(), request).await,
        None => Reply::Unsupported,
    };
    let mut response = match reply {
        Reply::NoResponse => return,
        Reply::Response(response) => response,
        Reply::Unsupported => RemotingCommand::request_code_not_supported(code),
    };
    // The protocol never answers a oneway request, not even with an error.
    if oneway {
        return;
    }
    response.opaque = opaque;
    response.mark_response();
    if let Err(error) = channel.send(response).await {
        debug!(peer = %channel.peer_addr(), %error, "response not sent");
    }
}

async fn write_loop(
    mut socket: WriteHalf,
    mut outbound: mpsc::Receiver<RemotingCommand>,
    closed: CancellationToken,
    waiting: Arc<AtomicUsize>,
    awaited: Arc<AtomicUsize>,
    peer: SocketAddr,
) {
    // Grown by the first answer, not at accept: most connections never send much.
    let mut buffer = BytesMut::new();
    loop {
        let large = buffer.capacity() > BUFFER_KEPT_BYTES_MAX;
        let first = tokio::select! {
            command = outbound.recv() => command,
            _ = tokio::time::sleep(BUFFER_RELEASE_AFTER), if large => {
                buffer = BytesMut::new();
                continue;
            }
            _ = closed.cancelled() => {
                // Flush what was queued before the close, then stop.
                outbound.close();
                outbound.recv().await
            }
        };
        let Some(first) = first else { break };
        encode_into(&first, &mut buffer, peer);
        let frames = 1 + gather(&mut outbound, &mut buffer, peer);
        let under_way = waiting.load(Ordering::Relaxed) + awaited.load(Ordering::Relaxed);
        if buffer.len() < WRITE_BATCH_BYTES_MAX && under_way >= frames + BURST_FRAMES_MIN {
            // Frames come in bursts: replies that waited are woken together (every commit one
            // journal sync made durable), and so are the callers one read of responses
            // completed, each about to send its next request. They are still being built: let
            // the tasks already runnable queue theirs first, so one write carries them all.
            // Replies served at once need no pause (the reader queues a whole read's worth in
            // one go), and with few exchanges under way the pause costs more than it saves.
            tokio::task::yield_now().await;
            gather(&mut outbound, &mut buffer, peer);
        }
        if let Err(error) = socket.write_all(&buffer).await {
            debug!(%peer, %error, "write failed; closing connection");
            closed.cancel();
            break;
        }
        buffer.clear();
    }
    let _ = socket.shutdown().await;
}

/// Adds what is queued to `buffer`, up to the batch size; how many frames it added.
fn gather(
    outbound: &mut mpsc::Receiver<RemotingCommand>,
    buffer: &mut BytesMut,
    peer: SocketAddr,
) -> usize {
    let mut frames = 0;
    while buffer.len() < WRITE_BATCH_BYTES_MAX {
        match outbound.try_recv() {
            Ok(command) => {
                encode_into(&command, buffer, peer);
                frames += 1;
            }
            Err(_) => break,
        }
    }
    frames
}

fn encode_into(command: &RemotingCommand, buffer: &mut BytesMut, peer: SocketAddr) {
    if let Err(error) = frame::encode(command, buffer) {
        warn!(%peer, code = command.code, %error, "dropping a command that cannot be encoded");
    }
}
