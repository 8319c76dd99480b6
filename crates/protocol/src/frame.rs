//! Frames: how a [`RemotingCommand`] is laid on a byte stream.
//!
//! ```text
//! offset 0  length:u32      bytes after this word = 4 + header_len + body_len
//! offset 4  type:u8 | header_len:u24
//! offset 8  header          JSON text or ROCKETMQ binary, header_len bytes
//!           body            the rest
//! ```
//!
//! The decoder consumes nothing until a whole frame is buffered, so a caller can feed it any
//! split of the stream; every byte sequence yields a command, "incomplete", or a typed error.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::code::SerializeType;
use crate::command::RemotingCommand;
use crate::error::ProtocolError;

/// Java's default `com.rocketmq.remoting.frameMaxLength`: the largest `length` word accepted.
pub const FRAME_SIZE_MAX_BYTES_DEFAULT: usize = 16 * 1024 * 1024;

/// Bytes of the length word that prefixes every frame.
pub const LENGTH_WORD_BYTES: usize = 4;

/// Largest header length the 24-bit field can express.
pub const HEADER_LENGTH_MAX_BYTES: usize = 0x00FF_FFFF;

/// Size of the frame at the start of `buffer`, including its length word, once it is known to
/// be acceptable; `Ok(None)` while fewer than four bytes are buffered.
pub fn frame_length(
    buffer: &[u8],
    frame_size_max_bytes: usize,
) -> Result<Option<usize>, ProtocolError> {
    let Some(word) = buffer.get(..LENGTH_WORD_BYTES) else {
        return Ok(None);
    };
    let length = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
    if length as u64 > frame_size_max_bytes as u64 {
        return Err(ProtocolError::FrameTooLarge {
            length: u64::from(length),
            max: frame_size_max_bytes,
        });
    }
    if (length as usize) < 4 {
        return Err(ProtocolError::FrameTooShort { length });
    }
    Ok(Some(LENGTH_WORD_BYTES + length as usize))
}

/// Decodes one frame from the front of `buffer` and removes it; leaves `buffer` untouched and
/// returns `Ok(None)` when the frame is not complete yet. After an error the stream is out of
/// step and the connection should be closed.
pub fn decode(
    buffer: &mut BytesMut,
    frame_size_max_bytes: usize,
) -> Result<Option<RemotingCommand>, ProtocolError> {
    let Some(total) = frame_length(buffer, frame_size_max_bytes)? else {
        return Ok(None);
    };
    if buffer.len() < total {
        buffer.reserve(total - buffer.len());
        return Ok(None);
    }
    let mut frame = buffer.split_to(total).freeze();
    frame.advance(LENGTH_WORD_BYTES);
    decode_frame_payload(frame).map(Some)
}

/// Decodes one frame from the front of a slice without consuming it: the command and the
/// number of bytes it took, or `Ok(None)` when the slice holds only part of a frame.
pub fn decode_slice(
    buffer: &[u8],
    frame_size_max_bytes: usize,
) -> Result<Option<(RemotingCommand, usize)>, ProtocolError> {
    let Some(total) = frame_length(buffer, frame_size_max_bytes)? else {
        return Ok(None);
    };
    let Some(frame) = buffer.get(LENGTH_WORD_BYTES..total) else {
        return Ok(None);
    };
    let command = decode_frame_payload(Bytes::copy_from_slice(frame))?;
    Ok(Some((command, total)))
}

/// Decodes what follows the length word: the type/header-length word, header, body.
fn decode_frame_payload(mut frame: Bytes) -> Result<RemotingCommand, ProtocolError> {
    let frame_length = frame.len();
    if frame_length < 4 {
        return Err(ProtocolError::FrameTooShort {
            length: frame_length as u32,
        });
    }
    let word = frame.get_u32();
    let type_byte = (word >> 24) as u8;
    let header_length = (word & 0x00FF_FFFF) as usize;
    let serialize_type = SerializeType::from_byte(type_byte)
        .ok_or(ProtocolError::UnknownSerializeType(type_byte))?;
    if header_length > frame.len() {
        return Err(ProtocolError::HeaderLengthOutOfRange {
            header_length,
            frame_length,
        });
    }
    let header = frame.split_to(header_length);
    let mut command = RemotingCommand::decode_header_bytes(serialize_type, &header)?;
    command.body = frame;
    Ok(command)
}

/// Appends the frame of `command` to `out`.
pub fn encode(command: &RemotingCommand, out: &mut BytesMut) -> Result<(), ProtocolError> {
    let (serialize_type, header) = command.encode_header()?;
    if header.len() > HEADER_LENGTH_MAX_BYTES {
        return Err(ProtocolError::FieldTooLong {
            field: "header",
            length: header.len(),
        });
    }
    let length = 4 + header.len() + command.body.len();
    let length_word =
        u32::try_from(length).map_err(|_| ProtocolError::EncodedFrameTooLarge { length })?;
    out.reserve(LENGTH_WORD_BYTES + length);
    out.put_u32(length_word);
    out.put_u32(u32::from(serialize_type.to_byte()) << 24 | header.len() as u32);
    out.put_slice(&header);
    out.put_slice(&command.body);
    Ok(())
}

/// The frame of `command` as a fresh buffer.
pub fn encode_to_bytes(command: &RemotingCommand) -> Result<Bytes, ProtocolError> {
    let mut out = BytesMut::new();
    encode(command, &mut out)?;
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::RequestCode;

    #[test]
    fn incomplete_input_is_left_untouched() {
        let frame = encode_to_bytes(
            &RemotingCommand::request(RequestCode::HeartBeat).with_body(&b"xy"[..]),
        )
        .expect("encodes");
        for cut in 0..frame.len() {
            let mut buffer = BytesMut::from(&frame[..cut]);
            assert_eq!(
                decode(&mut buffer, FRAME_SIZE_MAX_BYTES_DEFAULT),
                Ok(None),
                "prefix {cut}"
            );
            assert_eq!(&buffer[..], &frame[..cut]);
        }
        let mut buffer = BytesMut::from(&frame[..]);
        assert!(decode(&mut buffer, FRAME_SIZE_MAX_BYTES_DEFAULT)
            .expect("whole")
            .is_some());
        assert!(buffer.is_empty());
    }

    #[test]
    fn oversized_and_undersized_length_words_are_errors() {
        let mut buffer = BytesMut::from(&[0x01, 0x00, 0x00, 0x01][..]);
        assert_eq!(
            decode(&mut buffer, FRAME_SIZE_MAX_BYTES_DEFAULT),
            Err(ProtocolError::FrameTooLarge {
                length: 0x0100_0001,
                max: FRAME_SIZE_MAX_BYTES_DEFAULT
            })
        );
        let mut buffer = BytesMut::from(&[0, 0, 0, 3, 0, 0, 0][..]);
        assert_eq!(
            decode(&mut buffer, FRAME_SIZE_MAX_BYTES_DEFAULT),
            Err(ProtocolError::FrameTooShort { length: 3 })
        );
    }

    #[test]
    fn header_length_beyond_frame_is_an_error() {
        let bytes = [0, 0, 0, 6, 0, 0, 0, 9, b'{', b'}'];
        assert!(matches!(
            decode_slice(&bytes, FRAME_SIZE_MAX_BYTES_DEFAULT),
            Err(ProtocolError::HeaderLengthOutOfRange {
                header_length: 9,
                ..
            })
        ));
        let bytes = [0, 0, 0, 6, 7, 0, 0, 2, b'{', b'}'];
        assert_eq!(
            decode_slice(&bytes, FRAME_SIZE_MAX_BYTES_DEFAULT),
            Err(ProtocolError::UnknownSerializeType(7))
        );
    }
}
