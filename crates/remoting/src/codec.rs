//! The tokio-util codec: a thin adapter over `tidemark_protocol::frame`.

use bytes::BytesMut;
use tidemark_protocol::{frame, RemotingCommand, FRAME_SIZE_MAX_BYTES_DEFAULT};
use tokio_util::codec::{Decoder, Encoder};

use crate::error::RemotingError;

/// Frames [`RemotingCommand`]s on a byte stream; the protocol crate does all the work.
#[derive(Debug, Clone, Copy)]
pub struct RemotingCodec {
    frame_size_max_bytes: usize,
}

impl RemotingCodec {
    pub fn new(frame_size_max_bytes: usize) -> Self {
        Self {
            frame_size_max_bytes,
        }
    }
}

impl Default for RemotingCodec {
    fn default() -> Self {
        Self::new(FRAME_SIZE_MAX_BYTES_DEFAULT)
    }
}

impl Decoder for RemotingCodec {
    type Item = RemotingCommand;
    type Error = RemotingError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<RemotingCommand>, RemotingError> {
        Ok(frame::decode(src, self.frame_size_max_bytes)?)
    }
}

impl Encoder<RemotingCommand> for RemotingCodec {
    type Error = RemotingError;

    fn encode(&mut self, item: RemotingCommand, dst: &mut BytesMut) -> Result<(), RemotingError> {
        Ok(frame::encode(&item, dst)?)
    }
}
