//! Error types of the codec, one per boundary: frames and commands, custom headers, message
//! records and JSON bodies. Every variant carries enough position or name to find the fault.

use thiserror::Error;

/// A frame or a command header could not be decoded (or a command could not be encoded).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The length word announces more bytes than the configured maximum frame size.
    #[error("frame of {length} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge { length: u64, max: usize },
    /// The length word is smaller than the 4-byte serialize-type/header-length word it must cover.
    #[error("frame length {length} is too short to hold the header-length word")]
    FrameTooShort { length: u32 },
    /// The header length in the second word does not fit inside the frame.
    #[error("header length {header_length} does not fit in a frame of {frame_length} bytes")]
    HeaderLengthOutOfRange {
        header_length: usize,
        frame_length: usize,
    },
    /// The high byte of the second word is neither JSON (0) nor ROCKETMQ (1).
    #[error("unknown header serialize type {0}")]
    UnknownSerializeType(u8),
    /// A binary header ended before a field it announced.
    #[error("binary header truncated at offset {offset} reading {field}: need {need} bytes, have {have}")]
    BinaryHeaderTruncated {
        field: &'static str,
        offset: usize,
        need: usize,
        have: usize,
    },
    /// A length inside a binary header is negative.
    #[error("binary header has a negative length {length} for {field} at offset {offset}")]
    NegativeLength {
        field: &'static str,
        offset: usize,
        length: i32,
    },
    /// A string in a header is not UTF-8.
    #[error("header field {field} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    /// The JSON header is not valid JSON or lacks the shape of a remoting command.
    #[error("JSON header: {0}")]
    JsonHeader(#[from] JsonError),
    /// A JSON header field has the wrong type.
    #[error("JSON header field {field}: expected {expected}")]
    JsonHeaderField {
        field: &'static str,
        expected: &'static str,
    },
    /// A string does not fit the 32-bit length a binary header gives it.
    #[error("header field {field} of {length} bytes is too long to encode")]
    FieldTooLong { field: &'static str, length: usize },
    /// The encoded frame would exceed what a 32-bit length word can express.
    #[error("encoded frame of {length} bytes is too large")]
    EncodedFrameTooLarge { length: usize },
}

/// A typed custom header could not be read from a command's ext fields.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// A field the Java header class marks `@CFNotNull` is absent.
    #[error("missing required header field `{field}`")]
    MissingField { field: &'static str },
    /// A field is present but its text is not a value of the expected type.
    #[error("header field `{field}` has value {value:?}, expected {expected}")]
    InvalidField {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
}

/// A stored message record, a batch body or a message id could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The bytes end before the record (or the field) does.
    #[error(
        "message truncated at offset {offset} reading {field}: need {need} bytes, have {have}"
    )]
    Truncated {
        field: &'static str,
        offset: usize,
        need: usize,
        have: usize,
    },
    /// The magic code is not one of the stored-message magics.
    #[error("bad magic code {magic:#010x} at offset {offset}")]
    BadMagic { offset: usize, magic: u32 },
    /// The total size word disagrees with the fields it should cover.
    #[error(
        "record at offset {offset} declares total size {declared} but its fields take {actual}"
    )]
    SizeMismatch {
        offset: usize,
        declared: i64,
        actual: usize,
    },
    /// The body CRC stored in the record does not match the body.
    #[error("body CRC mismatch at offset {offset}: stored {stored:#x}, computed {computed:#x}")]
    BodyCrcMismatch {
        offset: usize,
        stored: u32,
        computed: u32,
    },
    /// A length field is negative or out of range.
    #[error("invalid length {length} for {field} at offset {offset}")]
    InvalidLength {
        field: &'static str,
        offset: usize,
        length: i64,
    },
    /// Topic or properties are not UTF-8.
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    /// A field is too large for the record format (topic > 127/32767 bytes, properties > 32767 bytes).
    #[error("{field} of {length} bytes is too long for the record format (max {max})")]
    FieldTooLong {
        field: &'static str,
        length: usize,
        max: usize,
    },
    /// A message id is not the hex text of a host, a port and an offset.
    #[error("invalid message id {id:?}: {reason}")]
    InvalidMessageId { id: String, reason: &'static str },
    /// A compressed body could not be inflated.
    #[error("compressed body could not be inflated: {reason}")]
    Decompress { reason: String },
}

/// JSON text could not be parsed, or a parsed value does not have the shape a body needs.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum JsonError {
    /// The text is not (lenient, fastjson-flavoured) JSON.
    #[error("invalid JSON at byte {offset}: {reason}")]
    Syntax { offset: usize, reason: &'static str },
    /// Nesting deeper than the parser allows; bounded so hostile input cannot exhaust the stack.
    #[error("JSON nested deeper than {max} levels")]
    TooDeep { max: usize },
    /// A value has the wrong type for the field it fills.
    #[error("JSON field `{path}`: expected {expected}")]
    Type {
        path: String,
        expected: &'static str,
    },
    /// An enum field holds a name or ordinal the protocol does not define.
    #[error("JSON field `{path}`: unknown value {value:?}")]
    UnknownVariant { path: String, value: String },
}
