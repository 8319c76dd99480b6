//! Where MessagingService runs: on the caller's runtime ([`serve`]), or on threads of its own,
//! each a single-threaded runtime that serves the connections handed to it
//! ([`serve_on_threads`]).
//!
//! A connection's calls run in its own task (connection.rs), and a connection stays on the thread
//! that took it: calls run back to back and their answers are written together. On a shared
//! multi-threaded runtime the hand-offs between tasks keep waking the other workers;
//! `bench/grpc.sh` measured about a quarter less server CPU per sent message on threads of
//! their own (docs/book/src/benchmarks/grpc.md). The broker work a call does (appending,
//! acking) runs on the thread of the call.

use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tidemark_broker::BrokerState;
use tidemark_remoting::tls::ServerTls;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tracing::{debug, info};

use crate::{
    accept, broker_requests, connection, housekeeping::housekeeping, Gateway, GrpcError, Peer,
    Service, SHUTDOWN_GRACE,
};

/// Accepted connections waiting for their runtime, per runtime.
const ACCEPT_QUEUE: usize = 128;

/// Serves MessagingService on `listener` for `state`'s broker, on the current runtime, until
/// `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    state: Arc<BrokerState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), GrpcError> {
    let shared = Shared::new(state, listener.local_addr()?.port())?;
    let _background = shared.start_background();
    let (stopping, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stopping.send(true);
    });
    let (queue, accepted) = mpsc::channel(ACCEPT_QUEUE);
    let mut accepting = JoinSet::new();
    accepting.spawn(accept::accept(listener, vec![queue]));
    shared.serve_connections(accepted, stop).await
}

/// Serves MessagingService on `listener` for `state`'s broker on `threads` threads of its own
/// (each runs `on_park` when it idles), until `stop` turns true. The first thread also accepts
/// connections, handing them round-robin to every thread, and runs the gateway's own tasks.
/// The future returned resolves once every thread has stopped, with the first failure.
pub fn serve_on_threads(
    listener: std::net::TcpListener,
    state: Arc<BrokerState>,
    threads: NonZeroUsize,
    on_park: fn(),
    stop: watch::Receiver<bool>,
) -> Result<impl Future<Output = Result<(), GrpcError>>, GrpcError> {
    // Tokio takes over only a listener that does not block.
    listener.set_nonblocking(true)?;
    let shared = Arc::new(Shared::new(state, listener.local_addr()?.port())?);
    let (queues, receivers): (Vec<_>, Vec<_>) = (0..threads.get())
        .map(|_| mpsc::channel::<accept::Accepted>(ACCEPT_QUEUE))
        .unzip();
    let mut acceptor = Some((listener, queues));
    let mut finished = Vec::with_capacity(threads.get());
    for (index, accepted) in receivers.into_iter().enumerate() {
        let (done, outcome) = oneshot::channel();
        finished.push(outcome);
        let (shared, stop, acceptor) = (shared.clone(), stop.clone(), acceptor.take());
        std::thread::Builder::new()
            .name(format!("tidemark-grpc-{index}"))
            .spawn(move || {
                let served = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .on_thread_park(on_park)
                    .build()
                    .map_err(GrpcError::from)
                    .and_then(|runtime| {
                        runtime.block_on(async move {
                            let _first = match acceptor {
                                Some((listener, queues)) => {
                                    let listener = TcpListener::from_std(listener)?;
                                    let mut first = shared.start_background();
                                    first.tasks.spawn(accept::accept(listener, queues));
                                    Some(first)
                                }
                                None => None,
                            };
                            shared.serve_connections(accepted, stop).await
                        })
                    });
                let _ = done.send(served);
            })?;
    }
    Ok(async move {
        let mut outcome = Ok(());
        for (index, done) in finished.into_iter().enumerate() {
            let served = done.await.unwrap_or(Err(GrpcError::Thread(index)));
            if outcome.is_ok() {
                outcome = served;
            }
        }
        outcome
    })
}

/// What every serving runtime shares.
struct Shared {
    gateway: Arc<Gateway>,
    tls: Arc<ServerTls>,
    /// The largest request accepted: room for the largest body the broker takes plus the
    /// message's envelope, so an oversize message gets the broker's MESSAGE_BODY_TOO_LARGE
    /// rather than a transport error.
    decode_max: usize,
}

impl Shared {
    fn new(state: Arc<BrokerState>, port: u16) -> Result<Self, GrpcError> {
        let settings = state.config.grpc_tls_settings();
        let configured = settings.files.is_some();
        let mode = settings.mode;
        let tls = Arc::new(
            ServerTls::new(settings, vec![b"h2".to_vec()])
                .map_err(|failure| GrpcError::Tls(failure.to_string()))?,
        );
        let decode_max = state
            .config
            .max_message_size
            .saturating_mul(2)
            .saturating_add(1 << 20);
        info!(
            port,
            certificate = if configured { "configured" } else { "self-signed" },
            tls = %mode,
            "gRPC (RocketMQ 5 MessagingService) serving"
        );
        Ok(Self {
            gateway: Arc::new(Gateway::new(state, port)),
            tls,
            decode_max,
        })
    }

    /// The gateway's own tasks (renewals, forgetting silent clients, certificate reloads,
    /// transaction check-backs) on the current runtime, until the answer is dropped.
    fn start_background(&self) -> Background {
        let mut tasks = JoinSet::new();
        tasks.spawn(housekeeping(self.gateway.clone()));
        tasks.spawn(tidemark_remoting::tls::watch_files(
            self.tls.clone(),
            Duration::from_secs(2),
            std::future::pending(),
        ));
        if let Some(queue) = self.gateway.take_broker_requests() {
            let gateway = self.gateway.clone();
            tasks.spawn(broker_requests::serve_broker_requests(gateway, queue));
        }
        Background {
            tasks,
            gateway: self.gateway.clone(),
        }
    }

    /// Serves the connections `accepted` brings until `stop` turns true. Shutdown stops taking
    /// calls and lets running ones finish; clients keep their Telemetry streams open for as
    /// long as they live, so after a grace period the server stops regardless (as RocketMQ's
    /// proxy does).
    async fn serve_connections(
        &self,
        mut accepted: mpsc::Receiver<accept::Accepted>,
        stop: watch::Receiver<bool>,
    ) -> Result<(), GrpcError> {
        let mut connections = JoinSet::new();
        let mut watching = stop.clone();
        // A dropped sender stops the server too.
        let stopping = async move {
            let _ = watching.wait_for(|stopped| *stopped).await;
        };
        tokio::pin!(stopping);
        loop {
            tokio::select! {
                next = accepted.recv() => {
                    let Some((stream, peer)) = next else { break };
                    connections.spawn(serve_connection(
                        stream,
                        peer,
                        self.tls.clone(),
                        self.messaging(),
                        stop.clone(),
                    ));
                }
                // Finished connections leave the set as they go.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                () = &mut stopping => break,
            }
        }
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        Ok(())
    }

    /// MessagingService for one connection, before it knows its ends.
    fn messaging(&self) -> Messaging {
        Messaging {
            gateway: self.gateway.clone(),
            decode_max: self.decode_max,
        }
    }
}

/// What a connection needs to build its service once its ends are known.
struct Messaging {
    gateway: Arc<Gateway>,
    decode_max: usize,
}

/// One connection: TLS or plaintext as its first bytes say, then HTTP/2 (connection.rs) until
/// the client leaves or shutdown has let its calls finish.
async fn serve_connection(
    stream: std::net::TcpStream,
    peer: SocketAddr,
    tls: Arc<ServerTls>,
    messaging: Messaging,
    stop: watch::Receiver<bool>,
) {
    let stream = match TcpStream::from_std(stream) {
        Ok(stream) => stream,
        Err(failure) => {
            debug!(%failure, %peer, "gRPC connection not taken by its runtime");
            return;
        }
    };
    let Some(stream) = tls.accept(stream, peer).await else {
        return;
    };
    let ends = Peer {
        remote: peer,
        local: stream
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))),
    };
    let service = Service::new(messaging.gateway, ends);
    connection::serve(stream, service, messaging.decode_max, peer, stop).await;
}

/// The gateway's own tasks; dropping it stops them (a `JoinSet` aborts what it holds) and the
/// gateway's forwarding.
struct Background {
    tasks: JoinSet<()>,
    gateway: Arc<Gateway>,
}

impl Drop for Background {
    fn drop(&mut self) {
        self.gateway.cluster.shutdown();
    }
}
