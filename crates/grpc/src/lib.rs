//! `tidemark-grpc` serves RocketMQ 5's gRPC protocol (`apache.rocketmq.v2.MessagingService`,
//! what every 5.x client of apache/rocketmq-clients speaks) on top of Tidemark's broker, with no
//! separate proxy process.
//!
//! Every RPC becomes the remoting request the broker already serves — a send, a POP, an ack, a
//! consumer offset — handed to the broker's own handler over an in-process connection per
//! client ([`sessions`]), or forwarded to the broker of the cluster that holds the queue
//! ([`cluster`]). So gRPC and remoting clients share topics, messages and progress, and
//! the broker crate knows nothing of gRPC. Where RocketMQ's proxy and Tidemark differ is said in
//! each module.

pub mod proto {
    //! The apache.rocketmq.v2 messages and service, generated from `proto/` at build time.
    #![allow(missing_debug_implementations, clippy::all, clippy::pedantic)]
    tonic::include_proto!("apache.rocketmq.v2");
}

mod ack;
mod auth;
mod cluster;
mod convert;
mod gateway;
mod offsets;
mod receive;
mod route;
mod send;
mod service;
mod sessions;
mod status;
mod telemetry;
pub mod tls;
mod transaction;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tidemark_broker::BrokerState;
use tokio::net::TcpListener;
use tracing::info;

pub use gateway::{Gateway, CLIENT_ID_HEADER};
pub use route::MESSAGE_TYPE_ATTRIBUTE;
pub use service::Service;
/// The gRPC and protobuf crates the generated client is written in (for callers of it).
pub use {prost_types, tonic};

/// How long running calls (and open Telemetry streams) get to finish once shutdown starts.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// A client not heard from for this long (no heartbeat, no call) is forgotten.
const CLIENT_IDLE_MS: i64 = 120_000;

#[derive(Debug, Error)]
pub enum GrpcError {
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("gRPC listener: {0}")]
    Io(#[from] std::io::Error),
    #[error("gRPC TLS: {0}")]
    Tls(String),
}

/// Serves MessagingService on `listener` for `state`'s broker until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    state: Arc<BrokerState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), GrpcError> {
    let port = listener.local_addr()?.port();
    let settings = state.config.grpc_tls_settings();
    let configured = settings.files.is_some();
    let mode = settings.mode;
    let tls = Arc::new(
        tidemark_remoting::tls::ServerTls::new(settings, vec![b"h2".to_vec()])
            .map_err(|failure| GrpcError::Tls(failure.to_string()))?,
    );
    let tls_watch = tokio::spawn(tidemark_remoting::tls::watch_files(
        tls.clone(),
        Duration::from_secs(2),
        std::future::pending(),
    ));
    // Room for the largest body the broker takes plus the message's envelope, so an oversize
    // message gets the broker's MESSAGE_BODY_TOO_LARGE rather than a transport error.
    let decode_max = state
        .config
        .max_message_size
        .saturating_mul(2)
        .saturating_add(1 << 20);
    let gateway = Arc::new(Gateway::new(state, port));
    let housekeeping = tokio::spawn(housekeeping(gateway.clone()));
    let check_backs = gateway
        .take_broker_requests()
        .map(|queue| tokio::spawn(transaction::serve_broker_requests(gateway.clone(), queue)));
    let forwarding = gateway.clone();
    info!(
        port,
        certificate = if configured { "configured" } else { "self-signed" },
        tls = %mode,
        "gRPC (RocketMQ 5 MessagingService) serving"
    );
    let incoming = tls::incoming(listener, tls);
    // Shutdown asks the server to stop taking calls and let running ones finish; clients keep
    // their Telemetry streams open for as long as they live, so after a grace period the
    // server stops regardless (as RocketMQ's proxy does).
    let (stopping, mut stop_seen) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stopping.send(true);
    });
    let mut graceful = stop_seen.clone();
    let server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(60)))
        .add_service(
            proto::messaging_service_server::MessagingServiceServer::new(Service::new(gateway))
                .max_decoding_message_size(decode_max),
        )
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = graceful.wait_for(|stopped| *stopped).await;
        });
    let served = tokio::select! {
        served = server => served.map_err(GrpcError::from),
        _ = async {
            let _ = stop_seen.wait_for(|stopped| *stopped).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => Ok(()),
    };
    housekeeping.abort();
    tls_watch.abort();
    if let Some(check_backs) = check_backs {
        check_backs.abort();
    }
    forwarding.cluster.shutdown();
    served
}

/// Renews auto-renewed messages and forgets silent clients.
async fn housekeeping(gateway: Arc<Gateway>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut seconds = 0u64;
    loop {
        tick.tick().await;
        gateway.renew_due().await;
        seconds += 1;
        if seconds.is_multiple_of(20) {
            gateway.register_producers_elsewhere().await;
        }
        if seconds.is_multiple_of(10) {
            let before = tidemark_remoting::now_ms() - CLIENT_IDLE_MS;
            for session in gateway.sessions.expire(before) {
                gateway.forget(session).await;
            }
        }
    }
}
