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

mod accept;
mod ack;
mod auth;
mod broker_requests;
mod client_status;
mod cluster;
mod connection;
mod convert;
mod gateway;
mod housekeeping;
mod offsets;
mod recall;
mod receive;
mod renewals;
mod route;
mod send;
mod server;
mod service;
mod sessions;
mod status;
mod telemetry;
mod transaction;

use std::time::Duration;

use thiserror::Error;

pub use gateway::{Gateway, Peer, CLIENT_ID_HEADER};
pub use route::MESSAGE_TYPE_ATTRIBUTE;
pub use server::{serve, serve_on_threads};
pub use service::Service;
/// The gRPC and protobuf crates the generated client is written in (for callers of it).
pub use {prost_types, tonic};

/// How long running calls (and open Telemetry streams) get to finish once shutdown starts.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, Error)]
pub enum GrpcError {
    #[error("gRPC listener: {0}")]
    Io(#[from] std::io::Error),
    #[error("gRPC TLS: {0}")]
    Tls(String),
    #[error("gRPC thread {0} stopped without an answer")]
    Thread(usize),
}
