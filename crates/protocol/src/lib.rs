//! `tidemark-protocol` owns Apache RocketMQ's 4.x remoting protocol as pure data: frames, the
//! `RemotingCommand` with its JSON and binary headers, request/response codes, typed custom
//! headers, the stored message record, and the fastjson-flavoured JSON bodies.
//!
//! It does no I/O and knows no clock or runtime: bytes in, values out (the rule that keeps it
//! testable byte for byte and usable from the broker, the name server and the client alike).
//! Every decoder returns `Ok` or a typed error for any input; none panics.

pub mod acked;
pub mod body;
pub mod code;
pub mod command;
pub mod error;
pub mod ext_fields;
pub mod frame;
pub mod headers;
pub mod hex;
pub mod json;
pub mod message;
pub mod trace;

pub use code::{LanguageCode, RequestCode, ResponseCode, SerializeType};
pub use command::RemotingCommand;
pub use error::{HeaderError, JsonError, MessageError, ProtocolError};
pub use ext_fields::{CommandHeader, ExtFields};
pub use frame::FRAME_SIZE_MAX_BYTES_DEFAULT;
