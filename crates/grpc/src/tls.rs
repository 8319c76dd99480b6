//! The gRPC port's connections: TLS, plaintext or both on one port, in the broker's TLS mode
//! (`tidemark_remoting::tls`), with ALPN `h2`. The 5.x Java and Go clients dial TLS by default
//! and trust any certificate; others dial plaintext.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tidemark_remoting::tls::{ServerTls, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::debug;

/// One accepted connection, plaintext or TLS, as tonic takes it.
#[derive(Debug)]
pub struct Connection(Stream);

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: self.0.local_addr().ok(),
            remote_addr: self.0.peer_addr().ok(),
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// A connection accepted but not yet checked for TLS, on its way to the runtime that serves it.
pub type Accepted = (std::net::TcpStream, SocketAddr);

/// Accepts connections and hands them round-robin to `servers`, each the queue of one serving
/// runtime. A connection leaves this runtime's reactor before it goes, so its readiness is
/// reported on the thread that serves it. Stops when every queue is closed.
pub async fn accept(listener: TcpListener, servers: Vec<mpsc::Sender<Accepted>>) {
    let mut next = 0usize;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(failure) => {
                debug!(%failure, "gRPC accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if servers.iter().all(mpsc::Sender::is_closed) {
            return;
        }
        let _ = stream.set_nodelay(true);
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(failure) => {
                debug!(%failure, %peer, "gRPC connection dropped before serving");
                continue;
            }
        };
        // A closed queue (its runtime stopped) passes the connection on to the next one.
        let mut accepted = (stream, peer);
        for _ in 0..servers.len() {
            let server = &servers[next % servers.len()];
            next = next.wrapping_add(1);
            match server.send(accepted).await {
                Ok(()) => break,
                Err(mpsc::error::SendError(back)) => accepted = back,
            }
        }
    }
}

/// The connections `accepted` brings to this runtime, checked for TLS (and handshaken) off the
/// serving loop, ready for tonic.
pub fn handshakes(
    mut accepted: mpsc::Receiver<Accepted>,
    tls: Arc<ServerTls>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Connection>> {
    let (sender, receiver) = mpsc::channel(128);
    tokio::spawn(async move {
        while let Some((stream, peer)) = accepted.recv().await {
            let stream = match TcpStream::from_std(stream) {
                Ok(stream) => stream,
                Err(failure) => {
                    debug!(%failure, %peer, "gRPC connection not taken by its runtime");
                    continue;
                }
            };
            let (sender, tls) = (sender.clone(), tls.clone());
            tokio::spawn(async move {
                if let Some(stream) = tls.accept(stream, peer).await {
                    let _ = sender.send(Ok(Connection(stream))).await;
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}
