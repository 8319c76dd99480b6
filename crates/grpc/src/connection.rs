//! One client connection's HTTP/2 and every call on it, in one task.
//!
//! hyper's server (and tonic's on top of it) runs each call as a task of its own that talks to
//! the connection's task through shared stream state, and passes each request and answer
//! through tonic's generic body and codec machinery. Without them `bench/grpc-ab.sh` measured
//! 10–11 % less server CPU per sent message (receive+ack unchanged). Here the connection's task
//! accepts streams and polls every call's future itself, and a call reads its request and
//! writes its answer straight on its h2 stream, in gRPC's framing (a flag byte, a big-endian
//! length, the protobuf message).

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::task::AtomicWaker;
use futures_util::FutureExt;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use http::request::Parts;
use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};
use tracing::debug;

use crate::Service;

/// Flow-control windows and limits, as hyper's server set them for tonic: 1 MiB of window per
/// stream and per connection (h2's own default is 64 KiB, which would stall large messages on
/// round trips), at most 16 KiB of request headers, at most 1 MiB buffered per answer.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 1 << 20;
const MAX_HEADER_LIST: u32 = 16 << 10;
const MAX_SEND_BUFFER: usize = 1 << 20;

/// A ping after this long, and the connection is closed when its pong takes longer than
/// [`KEEPALIVE_TIMEOUT`]: a client that vanished without a FIN stops holding its long polls.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// At most this much of a streamed answer's ready messages is joined into one write.
const JOIN_MAX: usize = 64 << 10;

/// gRPC's message prefix: a compression flag and the length.
const PREFIX: usize = 5;

const GRPC_STATUS: http::header::HeaderName = http::header::HeaderName::from_static("grpc-status");

fn grpc() -> HeaderValue {
    HeaderValue::from_static("application/grpc")
}

/// An answer frame larger than this waits for window before it is queued; smaller ones are
/// queued at once (h2 sends them as the window allows), which saves the capacity round on every
/// small unary answer.
const QUEUE_WITHOUT_WINDOW: usize = 16 << 10;

/// Serves HTTP/2 on `io` until the client leaves, the connection fails, or `stop` turns true
/// and the calls running then have finished (new streams are refused with GOAWAY meanwhile).
pub(crate) async fn serve<T>(
    io: T,
    service: Service,
    decode_max: usize,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_send_buffer_size(MAX_SEND_BUFFER);
    let mut connection = match builder.handshake::<_, Bytes>(io).await {
        Ok(connection) => connection,
        Err(failure) => {
            debug!(%failure, %peer, "gRPC connection ended before HTTP/2 began");
            return;
        }
    };
    let mut keepalive = Keepalive {
        ping: connection.ping_pong(),
        pong_due: false,
        timer: Box::pin(tokio::time::sleep(KEEPALIVE_INTERVAL)),
    };
    let service = &service;
    let mut calls: Calls<'_> = FuturesUnordered::new();
    let stopping = async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    tokio::pin!(stopping);
    let mut shutting_down = false;
    // Unconstrained: tokio's per-task budget was sized for one task's work, and here one task
    // runs every call of the connection; out of budget, each resource the calls touch reports
    // Pending and the whole batch takes another round. A poll is one round (below) instead.
    let connection_wake = Arc::new(ConnectionWake::new());
    let connection_waker = Waker::from(Arc::clone(&connection_wake));
    let serving = poll_fn(|cx| {
        let wake = &connection_wake;
        wake.task.register(cx.waker());
        wake.in_poll.store(true, Ordering::SeqCst);
        let mut connection_cx = Context::from_waker(&connection_waker);
        if !shutting_down && stopping.as_mut().poll(cx).is_ready() {
            shutting_down = true;
            connection.graceful_shutdown();
            wake.due.store(true, Ordering::SeqCst);
        }
        if let Err(why) = keepalive.poll(cx) {
            debug!(%peer, why, "gRPC connection closed");
            return Poll::Ready(());
        }
        // One round per poll: take every new stream (when the connection has anything to do)
        // and run every call that can make progress. What the calls queued is written by a
        // second poll of the connection at the end, not by another poll of this task (with
        // one sender, 1.2 polls per sent message instead of 2.2). Streams that second poll
        // accepts run in the next poll, after the runtime has run its other tasks: requests
        // arriving meanwhile join them, and acks reach the journal in larger groups. (Rounds back to back in one poll cost 15 % more
        // CPU per received and acked message in `bench/grpc-ab.sh`, with four times the
        // fdatasyncs.)
        macro_rules! accept {
            () => {
                accept_streams(
                    &mut connection,
                    &mut calls,
                    service,
                    decode_max,
                    peer,
                    &mut connection_cx,
                )
            };
        }
        if wake.due.swap(false, Ordering::SeqCst) && accept!().is_none() {
            return Poll::Ready(());
        }
        while let Poll::Ready(Some(())) = calls.poll_next_unpin(cx) {}
        if wake.due.swap(false, Ordering::SeqCst) {
            match accept!() {
                None => return Poll::Ready(()),
                Some(true) => cx.waker().wake_by_ref(),
                Some(false) => {}
            }
        }
        wake.in_poll.store(false, Ordering::SeqCst);
        // A wake that came while this poll ran (the socket turned readable on another
        // thread, say) was held back: it is this poll's to pass on.
        if wake.due.load(Ordering::SeqCst) {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    });
    tokio::task::unconstrained(serving).await;
}

/// The waker the HTTP/2 connection is polled with. h2 wakes it when the socket has frames to
/// read, when a call queued a frame to write, or a ping is due. While the task's own poll runs
/// that wake is only noted (`due`): the poll writes what its calls queued before it returns,
/// and a wake passed on would only poll it again for nothing. Between polls it wakes the task.
struct ConnectionWake {
    task: AtomicWaker,
    in_poll: AtomicBool,
    /// The connection has something to do; true at first so the first poll reads the preface.
    due: AtomicBool,
}

impl ConnectionWake {
    fn new() -> Self {
        ConnectionWake {
            task: AtomicWaker::new(),
            in_poll: AtomicBool::new(false),
            due: AtomicBool::new(true),
        }
    }
}

impl Wake for ConnectionWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // `due` before `in_poll`, and the poll clears `in_poll` before it reads `due`: a
        // wake racing with the end of a poll is seen by one side or the other.
        self.due.store(true, Ordering::SeqCst);
        if !self.in_poll.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

/// The calls running on one connection.
type Calls<'a> = FuturesUnordered<Pin<Box<dyn Future<Output = ()> + Send + 'a>>>;

/// Polls the connection (which reads frames and writes what is queued) and adds a call for
/// every new stream: `Some(true)` when there were new streams, `None` when the connection is
/// over (the client left, it failed, or a GOAWAY finished its streams).
fn accept_streams<'a, T>(
    connection: &mut h2::server::Connection<T, Bytes>,
    calls: &mut Calls<'a>,
    service: &'a Service,
    decode_max: usize,
    peer: SocketAddr,
    cx: &mut Context<'_>,
) -> Option<bool>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut accepted = false;
    loop {
        match connection.poll_accept(cx) {
            Poll::Ready(Some(Ok((request, respond)))) => {
                calls.push(Box::pin(serve_call(service, request, respond, decode_max)));
                accepted = true;
            }
            Poll::Ready(Some(Err(failure))) => {
                debug!(%failure, %peer, "gRPC connection ended");
                return None;
            }
            Poll::Ready(None) => return None,
            Poll::Pending => return Some(accepted),
        }
    }
}

/// HTTP/2 keep-alive: a ping after [`KEEPALIVE_INTERVAL`], and the connection is given up when
/// its pong has not come [`KEEPALIVE_TIMEOUT`] later.
struct Keepalive {
    ping: Option<h2::PingPong>,
    pong_due: bool,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Keepalive {
    /// Sends pings and takes pongs as they are due; `Err` says why the connection should close.
    fn poll(&mut self, cx: &mut Context<'_>) -> Result<(), &'static str> {
        let Some(ping) = self.ping.as_mut() else {
            return Ok(());
        };
        if self.pong_due {
            match ping.poll_pong(cx) {
                Poll::Ready(Ok(_)) => {
                    self.pong_due = false;
                    self.timer
                        .as_mut()
                        .reset(Instant::now() + KEEPALIVE_INTERVAL);
                }
                Poll::Ready(Err(_)) => return Err("keep-alive ping failed"),
                Poll::Pending => {}
            }
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            if self.pong_due {
                return Err("keep-alive ping unanswered");
            }
            if ping.send_ping(h2::Ping::opaque()).is_ok() {
                self.pong_due = true;
                self.timer
                    .as_mut()
                    .reset(Instant::now() + KEEPALIVE_TIMEOUT);
                // Registers for the pong.
                if let Poll::Ready(Ok(_)) = ping.poll_pong(cx) {
                    self.pong_due = false;
                    self.timer
                        .as_mut()
                        .reset(Instant::now() + KEEPALIVE_INTERVAL);
                }
            } else {
                self.timer
                    .as_mut()
                    .reset(Instant::now() + KEEPALIVE_INTERVAL);
            }
        }
        Ok(())
    }
}

/// What a call answers: its metadata and one message, or a stream of messages, each already
/// framed; a stream ends early with the status it yields.
enum Answer {
    One(MetadataMap, Bytes),
    Many(MetadataMap, FramedStream),
}

type FramedStream = Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send>>;

/// One call: read the request, run the method, write the answer. A client that resets the
/// stream drops the method's future (a long-polling receive ends with it).
async fn serve_call(
    service: &Service,
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    decode_max: usize,
) {
    let (parts, body) = request.into_parts();
    let answered = tokio::select! {
        answered = dispatch(service, parts, body, decode_max) => answered,
        _ = poll_fn(|cx| respond.poll_reset(cx)) => return,
    };
    let (metadata, answer) = match answered {
        Ok(Answer::One(metadata, frame)) => (metadata, Ok(frame)),
        Ok(Answer::Many(metadata, stream)) => (metadata, Err(stream)),
        Err(status) => {
            // Trailers-only: the status in the only HEADERS frame.
            let _ = respond.send_response(status_only(&status), true);
            return;
        }
    };
    let mut head = http::Response::new(());
    *head.headers_mut() = metadata.into_headers();
    head.headers_mut().insert(CONTENT_TYPE, grpc());
    let Ok(mut stream) = respond.send_response(head, false) else {
        return;
    };
    let outcome = match answer {
        Ok(frame) => send_frame(&mut stream, frame).await.map(|()| Ok(())),
        Err(messages) => send_stream(&mut stream, messages).await,
    };
    if let Ok(status) = outcome {
        let mut trailers = HeaderMap::with_capacity(3);
        let written = match status {
            // What tonic writes for OK, without building a status for it on every call.
            Ok(()) => {
                trailers.insert(GRPC_STATUS, HeaderValue::from_static("0"));
                true
            }
            Err(status) => status.add_header(&mut trailers).is_ok(),
        };
        if written {
            let _ = stream.send_trailers(trailers);
        }
    }
}

/// Writes every message of `messages`; the status the stream ended with (`Err` of the outer
/// result when the stream itself broke: reset by the client, connection gone).
async fn send_stream(
    stream: &mut SendStream<Bytes>,
    mut messages: FramedStream,
) -> Result<Result<(), Status>, h2::Error> {
    loop {
        let next = tokio::select! {
            next = messages.next() => next,
            reset = poll_fn(|cx| stream.poll_reset(cx)) => {
                return Err(reset.map_or_else(|failure| failure, h2::Error::from));
            }
        };
        let (frame, ended) = match next {
            Some(Ok(frame)) => join_ready(frame, &mut messages),
            Some(Err(status)) => return Ok(Err(status)),
            None => return Ok(Ok(())),
        };
        send_frame(stream, frame).await?;
        match ended {
            Some(Some(Err(status))) => return Ok(Err(status)),
            Some(None) => return Ok(Ok(())),
            Some(Some(Ok(_))) | None => {}
        }
    }
}

/// `first` and the messages after it that `messages` has ready now, up to [`JOIN_MAX`] bytes,
/// as one piece of the answer's body (gRPC frames each message itself, so several may share a
/// DATA frame). h2 writes every DATA frame of 256 bytes or more with a write of its own: a
/// received batch of 32 messages went out in 32 writes. Also what ended the stream meanwhile
/// (`Some(None)`: its end; `Some(Some(Err))`: a closing status), which must not be polled again.
fn join_ready(
    first: Bytes,
    messages: &mut FramedStream,
) -> (Bytes, Option<Option<Result<Bytes, Status>>>) {
    let mut joined: Option<BytesMut> = None;
    let mut ended = None;
    while joined.as_ref().map_or(first.len(), BytesMut::len) < JOIN_MAX {
        match messages.next().now_or_never() {
            Some(Some(Ok(more))) => joined
                .get_or_insert_with(|| BytesMut::from(&first[..]))
                .extend_from_slice(&more),
            Some(end) => {
                ended = Some(end);
                break;
            }
            None => break,
        }
    }
    (joined.map_or(first, BytesMut::freeze), ended)
}

/// Queues one framed message on the stream, waiting for window first when it is large.
async fn send_frame(stream: &mut SendStream<Bytes>, mut frame: Bytes) -> Result<(), h2::Error> {
    if frame.len() <= QUEUE_WITHOUT_WINDOW {
        return stream.send_data(frame, false);
    }
    while !frame.is_empty() {
        stream.reserve_capacity(frame.len());
        let granted = match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => return Err(h2::Error::from(h2::Reason::CANCEL)),
        };
        if granted == 0 {
            continue;
        }
        let chunk = frame.split_to(granted.min(frame.len()));
        stream.send_data(chunk, false)?;
    }
    Ok(())
}

fn status_only(status: &Status) -> http::Response<()> {
    let mut head = http::Response::new(());
    head.headers_mut().insert(CONTENT_TYPE, grpc());
    // A status whose message cannot be a header value is sent by its code alone.
    if status.add_header(head.headers_mut()).is_err() {
        let _ = Status::new(status.code(), "").add_header(head.headers_mut());
    }
    head
}

/// Runs a unary method: one request message in, one out.
macro_rules! unary {
    ($service:ident . $method:ident, $parts:ident, $body:ident, $max:ident) => {{
        let request = read_request($parts, $body, $max).await?;
        one($service.$method(request).await?)
    }};
}

/// Runs a server-streaming method: one request message in, a stream out.
macro_rules! server_streaming {
    ($service:ident . $method:ident, $parts:ident, $body:ident, $max:ident) => {{
        let request = read_request($parts, $body, $max).await?;
        many($service.$method(request).await?)
    }};
}

/// The method a path names, run. Unknown paths get UNIMPLEMENTED, as gRPC servers answer.
async fn dispatch(
    service: &Service,
    parts: Parts,
    body: RecvStream,
    max: usize,
) -> Result<Answer, Status> {
    let method = parts
        .uri
        .path()
        .strip_prefix("/apache.rocketmq.v2.MessagingService/")
        .unwrap_or_default();
    Ok(match method {
        "SendMessage" => unary!(service.send_message, parts, body, max),
        "AckMessage" => unary!(service.ack_message, parts, body, max),
        "ReceiveMessage" => server_streaming!(service.receive_message, parts, body, max),
        "ChangeInvisibleDuration" => unary!(service.change_invisible_duration, parts, body, max),
        "Heartbeat" => unary!(service.heartbeat, parts, body, max),
        "QueryRoute" => unary!(service.query_route, parts, body, max),
        "QueryAssignment" => unary!(service.query_assignment, parts, body, max),
        "ForwardMessageToDeadLetterQueue" => {
            unary!(
                service.forward_message_to_dead_letter_queue,
                parts,
                body,
                max
            )
        }
        "PullMessage" => server_streaming!(service.pull_message, parts, body, max),
        "UpdateOffset" => unary!(service.update_offset, parts, body, max),
        "GetOffset" => unary!(service.get_offset, parts, body, max),
        "QueryOffset" => unary!(service.query_offset, parts, body, max),
        "EndTransaction" => unary!(service.end_transaction, parts, body, max),
        "NotifyClientTermination" => unary!(service.notify_client_termination, parts, body, max),
        "RecallMessage" => unary!(service.recall_message, parts, body, max),
        "SyncLiteSubscription" => unary!(service.sync_lite_subscription, parts, body, max),
        "Telemetry" => {
            let commands = Streaming::new_request(
                tonic_prost::ProstDecoder::default(),
                RequestBody(body),
                None,
                Some(max),
            );
            let request = Request::from_parts(
                MetadataMap::from_headers(parts.headers),
                parts.extensions,
                commands,
            );
            many(service.telemetry(request).await?)
        }
        _ => {
            return Err(Status::unimplemented(format!(
                "no method {}",
                parts.uri.path()
            )))
        }
    })
}

fn one<M: Message>(response: Response<M>) -> Answer {
    let (metadata, message, _) = response.into_parts();
    Answer::One(metadata, frame(&message))
}

fn many<M, S>(response: Response<S>) -> Answer
where
    M: Message,
    S: Stream<Item = Result<M, Status>> + Send + 'static,
{
    let (metadata, messages, _) = response.into_parts();
    Answer::Many(
        metadata,
        Box::pin(messages.map(|message| message.map(|message| frame(&message)))),
    )
}

/// `message` with gRPC's prefix (uncompressed).
fn frame<M: Message>(message: &M) -> Bytes {
    let length = message.encoded_len();
    let mut frame = BytesMut::with_capacity(PREFIX + length);
    frame.put_u8(0);
    // Answers are bounded well below 4 GiB by the broker's own limits.
    frame.put_u32(u32::try_from(length).unwrap_or(u32::MAX));
    // Cannot fail: the buffer was sized by encoded_len.
    let _ = message.encode(&mut frame);
    frame.freeze()
}

/// The one message a unary or server-streaming call sends, read to the end of its stream.
async fn read_request<M: Message + Default>(
    parts: Parts,
    mut body: RecvStream,
    max: usize,
) -> Result<Request<M>, Status> {
    // Usually the prefix and the message come in one DATA frame: kept as it came, no copy.
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(chunk) = body.data().await {
        let chunk =
            chunk.map_err(|failure| Status::internal(format!("request stream: {failure}")))?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if first.is_empty() && joined.is_none() {
            first = chunk;
        } else {
            joined
                .get_or_insert_with(|| BytesMut::from(&first[..]))
                .extend_from_slice(&chunk);
        }
        let so_far: &[u8] = joined.as_deref().unwrap_or(&first);
        if let Some(length) = declared_length(so_far) {
            check_length(length, max)?;
        }
        if so_far.len() > max.saturating_add(PREFIX) {
            return Err(too_large(so_far.len(), max));
        }
    }
    let bytes = joined.map_or(first, BytesMut::freeze);
    let message = decode_one(&bytes, max)?;
    Ok(Request::from_parts(
        MetadataMap::from_headers(parts.headers),
        parts.extensions,
        message,
    ))
}

fn declared_length(bytes: &[u8]) -> Option<usize> {
    let prefix: [u8; 4] = bytes.get(1..PREFIX)?.try_into().ok()?;
    usize::try_from(u32::from_be_bytes(prefix)).ok()
}

fn check_length(length: usize, max: usize) -> Result<(), Status> {
    if length > max {
        Err(too_large(length, max))
    } else {
        Ok(())
    }
}

fn too_large(length: usize, max: usize) -> Status {
    Status::out_of_range(format!(
        "message of {length} bytes is larger than the {max} bytes accepted"
    ))
}

/// The message in `bytes` (prefix and protobuf). A request with no message, a compressed one
/// (this server announces no compression), a cut-off one or one that is not the protobuf the
/// method takes is refused with a status; bytes after the first message are ignored, as the
/// generated servers do for unary requests.
fn decode_one<M: Message + Default>(bytes: &[u8], max: usize) -> Result<M, Status> {
    let Some(&flag) = bytes.first() else {
        return Err(Status::internal("the request carries no message"));
    };
    let length = declared_length(bytes)
        .ok_or_else(|| Status::internal("the request's message prefix is cut off"))?;
    check_length(length, max)?;
    if flag != 0 {
        return Err(Status::unimplemented(
            "compressed messages are not accepted (no grpc-encoding is announced)",
        ));
    }
    let message = bytes
        .get(PREFIX..PREFIX + length)
        .ok_or_else(|| Status::internal("the request's message is cut off"))?;
    M::decode(message).map_err(|failure| {
        Status::internal(format!("failed to decode Protobuf message: {failure}"))
    })
}

/// A request stream as an `http_body::Body`, for tonic's `Streaming` decoder (Telemetry's
/// client side is a stream of commands). Window is given back as data is taken.
struct RequestBody(RecvStream);

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, h2::Error>>> {
        let body = &mut self.0;
        match body.poll_data(cx) {
            Poll::Ready(Some(Ok(data))) => {
                let _ = body.flow_control().release_capacity(data.len());
                Poll::Ready(Some(Ok(http_body::Frame::data(data))))
            }
            Poll::Ready(Some(Err(failure))) => Poll::Ready(Some(Err(failure))),
            Poll::Ready(None) => match body.poll_trailers(cx) {
                Poll::Ready(Ok(Some(trailers))) => {
                    Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))))
                }
                Poll::Ready(Ok(None)) => Poll::Ready(None),
                Poll::Ready(Err(failure)) => Poll::Ready(Some(Err(failure))),
                Poll::Pending => Poll::Pending,
            },
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Resource, SendMessageRequest};

    fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut bytes = vec![flag];
        bytes.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
        bytes.extend_from_slice(message);
        bytes
    }

    /// Counts the wakes of the task a [`ConnectionWake`] stands for.
    struct CountingWake(std::sync::atomic::AtomicUsize);

    impl Wake for CountingWake {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_connection_wake_during_the_poll_is_held_and_between_polls_wakes_the_task() {
        let task = Arc::new(CountingWake(std::sync::atomic::AtomicUsize::new(0)));
        let task_waker = Waker::from(Arc::clone(&task));
        let wake = Arc::new(ConnectionWake::new());
        let connection_waker = Waker::from(Arc::clone(&wake));
        assert!(
            wake.due.swap(false, Ordering::SeqCst),
            "the first poll reads the preface"
        );

        wake.task.register(&task_waker);
        wake.in_poll.store(true, Ordering::SeqCst);
        connection_waker.wake_by_ref();
        assert_eq!(task.0.load(Ordering::SeqCst), 0, "held while the poll runs");
        assert!(wake.due.swap(false, Ordering::SeqCst), "but noted for it");
        wake.in_poll.store(false, Ordering::SeqCst);

        connection_waker.wake_by_ref();
        assert_eq!(
            task.0.load(Ordering::SeqCst),
            1,
            "between polls the task wakes"
        );
        assert!(wake.due.load(Ordering::SeqCst));
    }

    #[test]
    fn a_framed_message_decodes_back() {
        let request = Resource {
            resource_namespace: "ns".into(),
            name: "topic".into(),
        };
        let bytes = frame(&request);
        assert_eq!(bytes[0], 0);
        assert_eq!(declared_length(&bytes), Some(request.encoded_len()));
        assert_eq!(
            decode_one::<Resource>(&bytes, 1 << 20).expect("decodes"),
            request
        );
    }

    #[test]
    fn bad_requests_are_statuses() {
        let cases: Vec<(Vec<u8>, tonic::Code)> = vec![
            (Vec::new(), tonic::Code::Internal),
            (vec![0, 0, 0], tonic::Code::Internal),
            (framed(1, b"\x0a\x01x"), tonic::Code::Unimplemented),
            (
                framed(0, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
                tonic::Code::Internal,
            ),
            (framed(0, &[0x0a, 0x7f, 0x01]), tonic::Code::Internal),
            (framed(0, &[0; 64]), tonic::Code::OutOfRange),
        ];
        for (bytes, code) in cases {
            let failure = decode_one::<SendMessageRequest>(&bytes, 32).expect_err("refused");
            assert_eq!(failure.code(), code, "{bytes:?}: {failure:?}");
        }
        // A prefix that promises more than arrived.
        let mut cut = framed(0, b"\x0a\x02ab");
        cut.truncate(cut.len() - 1);
        assert_eq!(
            decode_one::<Resource>(&cut, 32)
                .expect_err("cut off")
                .code(),
            tonic::Code::Internal
        );
    }

    #[test]
    fn an_error_status_travels_in_the_only_headers() {
        let head = status_only(&Status::unimplemented("no method /x"));
        assert_eq!(head.headers()[CONTENT_TYPE], grpc());
        assert_eq!(head.headers()["grpc-status"], "12");
        assert!(head.headers().contains_key("grpc-message"));
    }
}
