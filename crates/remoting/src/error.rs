use std::io;
use std::time::Duration;

use thiserror::Error;
use tidemark_protocol::ProtocolError;

/// What can go wrong moving commands over a connection.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RemotingError {
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The peer sent bytes that are not a valid frame; the connection is closed.
    #[error("malformed frame: {0}")]
    Protocol(#[from] ProtocolError),
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("connecting to {addr} timed out after {timeout:?}")]
    ConnectTimeout { addr: String, timeout: Duration },
    /// No response within the call's timeout; a late response is discarded.
    #[error("request {opaque} to {peer} timed out after {timeout:?}")]
    Timeout {
        peer: String,
        opaque: i32,
        timeout: Duration,
    },
    /// The connection closed before the call completed.
    #[error("connection to {peer} is closed")]
    ChannelClosed { peer: String },
}
