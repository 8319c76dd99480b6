//! The bench's gRPC calls on one HTTP/2 connection, sent as the 5.x Java client sends them.
//!
//! grpc-java does not flush a unary call's HEADERS on their own: they leave in one write with
//! the request's DATA frame, which carries END_STREAM. tonic's client (through hyper) writes the
//! HEADERS first and the body after, so the server saw two segments per call and woke twice
//! (server-side epoll waits per sent message 1.9 against remoting's 1.0), a cost no real client
//! puts on it. Here a call queues its HEADERS and its one DATA frame before the connection's task
//! runs again, so they are written together. Every call also carries the metadata the Java
//! client adds to each call (a fresh request id, the date and time), which the server decodes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use http::{HeaderValue, Method, Request};
use prost::Message;
use tidemark_protocol::message::civil_from_days;

/// Flow-control windows the connection offers the server (hyper's client, under tonic, offered
/// 2 MiB per stream; 1 MiB holds any batch the bench receives).
const WINDOW: u32 = 1 << 20;

/// A bench client's HTTP/2 connection; clones share it.
#[derive(Clone, Debug)]
pub struct WireClient {
    sender: SendRequest<Bytes>,
    authority: String,
    client_id: HeaderValue,
    calls: std::sync::Arc<AtomicU64>,
}

impl WireClient {
    /// Connects to `endpoint` (`host:port`, or an `http://` URL) as `client_id`.
    pub async fn connect(endpoint: &str, client_id: &str) -> anyhow::Result<Self> {
        let authority = endpoint
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let tcp = tokio::net::TcpStream::connect(&authority)
            .await
            .with_context(|| format!("cannot reach gRPC endpoint {authority}"))?;
        tcp.set_nodelay(true)?;
        let (sender, connection) = h2::client::Builder::new()
            .initial_window_size(WINDOW)
            .initial_connection_window_size(WINDOW)
            .handshake::<_, Bytes>(tcp)
            .await
            .context("HTTP/2 handshake")?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(WireClient {
            sender,
            authority,
            client_id: HeaderValue::from_str(client_id).context("client id")?,
            calls: Default::default(),
        })
    }

    /// One call of `MessagingService/{method}`: every message of the answer, in order.
    pub async fn call<Req: Message, Resp: Message + Default>(
        &self,
        method: &str,
        message: &Req,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Resp>> {
        let mut sender = self.sender.clone().ready().await?;
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!(
                "http://{}/apache.rocketmq.v2.MessagingService/{method}",
                self.authority
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("grpc-timeout", format!("{}m", timeout.as_millis()))
            .header("x-mq-client-id", self.client_id.clone())
            .header("x-mq-language", "RUST")
            .header("x-mq-protocol", "v2")
            .header("x-mq-client-version", env!("CARGO_PKG_VERSION"))
            .header("x-mq-date-time", date_time())
            .header(
                "x-mq-request-id",
                format!("{:08x}-bench-{call:016x}", std::process::id()),
            )
            .body(())
            .context("request")?;
        let mut frame = BytesMut::with_capacity(5 + message.encoded_len());
        frame.put_u8(0);
        frame.put_u32(u32::try_from(message.encoded_len()).context("request too large")?);
        message.encode(&mut frame)?;
        // No await between the two: both are queued before the connection's task writes.
        let (answer, mut body) = sender.send_request(request, false)?;
        body.send_data(frame.freeze(), true)?;
        let answer = tokio::time::timeout(timeout, read_answer(answer))
            .await
            .with_context(|| format!("{method}: no answer within {timeout:?}"))??;
        Ok(answer)
    }
}

async fn read_answer<Resp: Message + Default>(
    answer: h2::client::ResponseFuture,
) -> anyhow::Result<Vec<Resp>> {
    let (head, mut body) = answer.await?.into_parts();
    anyhow::ensure!(head.status == 200, "HTTP status {}", head.status);
    // A failure may come as headers alone ("trailers-only").
    if let Some(status) = head.headers.get("grpc-status") {
        anyhow::ensure!(status == "0", "gRPC status {status:?}");
    }
    let mut bytes = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    if let Some(trailers) = body.trailers().await? {
        let status = trailers.get("grpc-status");
        anyhow::ensure!(
            status.is_none_or(|status| status == "0"),
            "gRPC status {status:?}: {:?}",
            trailers.get("grpc-message")
        );
    }
    let mut messages = Vec::new();
    while bytes.len() >= 5 {
        anyhow::ensure!(bytes[0] == 0, "compressed answers are not expected");
        let length = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        anyhow::ensure!(bytes.len() >= 5 + length, "answer cut short");
        bytes.advance(5);
        messages.push(Resp::decode(bytes.split_to(length))?);
    }
    anyhow::ensure!(bytes.is_empty(), "answer cut short");
    Ok(messages)
}

/// `yyyyMMddTHHmmssZ`, as the Java client writes `x-mq-date-time`.
fn date_time() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64);
    let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        of_day / 3_600,
        of_day / 60 % 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn date_time_has_the_java_clients_shape() {
        let text = super::date_time();
        assert_eq!(text.len(), 16, "{text}");
        assert_eq!(&text[8..9], "T");
        assert!(text.ends_with('Z'));
        assert!(text[..8].chars().all(|c| c.is_ascii_digit()));
        assert!(text.as_str() > "20260101T000000Z", "{text}");
    }
}
