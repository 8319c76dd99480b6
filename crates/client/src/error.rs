use std::io;
use std::path::PathBuf;

use thiserror::Error;
use tidemark_protocol::{HeaderError, JsonError, MessageError, ProtocolError, ResponseCode};
use tidemark_remoting::RemotingError;

/// What a client call can fail with.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The connection failed, timed out or closed.
    #[error(transparent)]
    Remoting(#[from] RemotingError),
    /// The peer answered with an error code.
    #[error("{peer} answered {code:?}: {remark}")]
    Broker {
        peer: String,
        code: ResponseCode,
        remark: String,
    },
    /// A response whose header or body could not be read.
    #[error("bad response from {peer}: {detail}")]
    BadResponse { peer: String, detail: String },
    /// No name server knows the topic, and it cannot be auto-created.
    #[error("no route for topic {topic}: {reason}")]
    NoRoute { topic: String, reason: String },
    /// The broker a queue lives on is not known (not in any route fetched so far).
    #[error("broker {broker_name} not found in any route")]
    BrokerNotFound { broker_name: String },
    /// The routes named another master for the broker name while a request waited on `from`;
    /// the wait was given up.
    #[error("the master of {broker_name} moved away from {from} while a request waited on it")]
    MasterMoved { broker_name: String, from: String },
    /// Every attempt of a send failed; the last error is kept.
    #[error("send to {topic} failed after {attempts} attempt(s): {last}")]
    SendFailed {
        topic: String,
        attempts: u32,
        last: Box<ClientError>,
    },
    /// The caller passed something RocketMQ would refuse (topic name, empty body, size, …).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The client (or consumer/producer) is not started or already shut down.
    #[error("{0}")]
    State(String),
    /// The local offset file (broadcasting) could not be read or written.
    #[error("offset file {path}: {detail}")]
    OffsetFile { path: PathBuf, detail: String },
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Message(#[from] MessageError),
}

impl From<HeaderError> for ClientError {
    fn from(error: HeaderError) -> Self {
        ClientError::BadResponse {
            peer: String::from("peer"),
            detail: error.to_string(),
        }
    }
}

impl From<JsonError> for ClientError {
    fn from(error: JsonError) -> Self {
        ClientError::BadResponse {
            peer: String::from("peer"),
            detail: error.to_string(),
        }
    }
}

impl From<ProtocolError> for ClientError {
    fn from(error: ProtocolError) -> Self {
        ClientError::BadResponse {
            peer: String::from("peer"),
            detail: error.to_string(),
        }
    }
}

impl ClientError {
    /// The broker's response code, when the broker answered with an error.
    pub fn response_code(&self) -> Option<ResponseCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            ClientError::SendFailed { last, .. } => last.response_code(),
            _ => None,
        }
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;
