//! `tidemark-remoting` is the tokio edge of the remoting protocol: a framed connection
//! ([`Channel`]) that matches responses to requests by opaque and hands requests to a
//! [`RequestHandler`], a server accept loop with a connection limit and graceful shutdown, and a
//! client that keeps one connection per address, reconnects, and enforces per-call timeouts.
//!
//! All parsing is delegated to `tidemark-protocol`; this crate only moves frames.

mod channel;
mod client;
mod clock;
mod codec;
mod error;
mod handler;
mod server;
pub mod signing;
pub mod tls;

pub use channel::{Channel, ChannelConfig, Reply, ReplyFuture, RequestHandler};
pub use client::{ClientConfig, RemotingClient};
pub use clock::{now_ms, since_epoch};
pub use codec::RemotingCodec;
pub use error::RemotingError;
pub use handler::handler_fn;
pub use server::{serve, ServerConfig};
pub use signing::Credentials;
