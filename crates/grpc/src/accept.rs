//! The gRPC port's accept loop. Each connection is served (TLS, plaintext or both on one port;
//! `server::serve_connection`) by the runtime it is handed to.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::debug;

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
