//! `RemotingCommand`: the one message shape of the protocol, and its two header encodings.
//!
//! ```text
//! JSON header (fastjson bean, properties in alphabetical order, nulls omitted):
//!   {"code":11,"extFields":{..},"flag":0,"language":"JAVA","opaque":7,"remark":"..",
//!    "serializeTypeCurrentRPC":"JSON","version":409}
//!
//! ROCKETMQ binary header:
//!   code:i16 | language:u8 | version:i16 | opaque:i32 | flag:i32
//!   | remark_len:i32 | remark | ext_len:i32 | { key_len:i16 key value_len:i32 value }*
//! ```

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};

use crate::code::{version, LanguageCode, RequestCode, ResponseCode, SerializeType};
use crate::error::{HeaderError, ProtocolError};
use crate::ext_fields::{CommandHeader, ExtFields};
use crate::json::{self, Scalar, Value};

/// Bit 0 of `flag`: the command is a response.
pub const FLAG_RESPONSE: i32 = 0x1;
/// Bit 1 of `flag`: the request expects no response.
pub const FLAG_ONEWAY: i32 = 0x2;

/// A request or response of RocketMQ's remoting protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct RemotingCommand {
    /// A [`RequestCode`] in requests, a [`ResponseCode`] in responses.
    pub code: i32,
    pub language: LanguageCode,
    /// The sender's `MQVersion` ordinal ([`version`]).
    pub version: i32,
    /// Request id; a response carries its request's opaque.
    pub opaque: i32,
    /// [`FLAG_RESPONSE`] and [`FLAG_ONEWAY`] bits.
    pub flag: i32,
    pub remark: Option<String>,
    /// The custom header (see [`CommandHeader`]).
    pub ext_fields: ExtFields,
    pub body: Bytes,
    /// How the header is (to be) serialised.
    pub serialize_type: SerializeType,
}

impl Default for RemotingCommand {
    fn default() -> Self {
        Self {
            code: 0,
            // Old Java peers do not know the name "RUST" (added in 4.9.4), so we introduce
            // ourselves as Java, the behaviour we follow.
            language: LanguageCode::Java,
            version: version::CURRENT,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields: ExtFields::new(),
            body: Bytes::new(),
            serialize_type: SerializeType::Json,
        }
    }
}

impl RemotingCommand {
    /// A request with no header or body; the transport assigns the opaque.
    pub fn request(code: RequestCode) -> Self {
        Self {
            code: code.to_i32(),
            ..Self::default()
        }
    }

    /// A request carrying a typed custom header.
    pub fn request_with_header(code: RequestCode, header: &impl CommandHeader) -> Self {
        Self {
            code: code.to_i32(),
            ext_fields: header.to_ext_fields(),
            ..Self::default()
        }
    }

    /// A response; the transport copies the request's opaque into it.
    pub fn response(code: ResponseCode, remark: impl Into<Option<String>>) -> Self {
        Self {
            code: code.to_i32(),
            flag: FLAG_RESPONSE,
            remark: remark.into(),
            ..Self::default()
        }
    }

    /// The answer to a request whose code this peer does not serve, worded as Java words it.
    pub fn request_code_not_supported(request_code: i32) -> Self {
        Self::response(
            ResponseCode::RequestCodeNotSupported,
            format!(" request type {request_code} not supported"),
        )
    }

    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    pub fn with_remark(mut self, remark: impl Into<String>) -> Self {
        self.remark = Some(remark.into());
        self
    }

    /// Writes a typed header's fields into the ext fields (existing keys are replaced).
    pub fn with_header(mut self, header: &impl CommandHeader) -> Self {
        header.write_to(&mut self.ext_fields);
        self
    }

    pub fn with_opaque(mut self, opaque: i32) -> Self {
        self.opaque = opaque;
        self
    }

    pub fn with_serialize_type(mut self, serialize_type: SerializeType) -> Self {
        self.serialize_type = serialize_type;
        self
    }

    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    pub fn mark_response(&mut self) {
        self.flag |= FLAG_RESPONSE;
    }

    pub fn mark_oneway(&mut self) {
        self.flag |= FLAG_ONEWAY;
    }

    pub fn request_code(&self) -> RequestCode {
        RequestCode::from_i32(self.code)
    }

    pub fn response_code(&self) -> ResponseCode {
        ResponseCode::from_i32(self.code)
    }

    /// Reads the typed custom header from the ext fields.
    pub fn decode_header<H: CommandHeader>(&self) -> Result<H, HeaderError> {
        H::read_from(&self.ext_fields)
    }

    /// Encodes the header in this command's serialize type. A code that does not fit the
    /// binary header's int16 (5.x POP codes) is written as JSON instead, as only JSON can carry it.
    pub fn encode_header(&self) -> Result<(SerializeType, Vec<u8>), ProtocolError> {
        let fits_binary = i16::try_from(self.code).is_ok() && i16::try_from(self.version).is_ok();
        match self.serialize_type {
            SerializeType::RocketMq if fits_binary => {
                Ok((SerializeType::RocketMq, self.encode_binary_header()?))
            }
            _ => Ok((SerializeType::Json, self.encode_json_header().into_bytes())),
        }
    }

    /// The JSON header exactly as fastjson lays out the Java bean.
    pub fn encode_json_header(&self) -> String {
        use std::fmt::Write as _;
        let ext_length: usize = self
            .ext_fields
            .iter()
            .map(|(key, value)| key.len() + value.len() + 6)
            .sum();
        let remark_length = self.remark.as_ref().map_or(0, |remark| remark.len() + 12);
        let mut out = String::with_capacity(128 + ext_length + remark_length);
        // Writing to a String cannot fail.
        let _ = write!(out, "{{\"code\":{}", self.code);
        if !self.ext_fields.is_empty() {
            out.push_str(",\"extFields\":{");
            for (index, (key, value)) in self.ext_fields.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                json::write_string(&mut out, key);
                out.push(':');
                json::write_string(&mut out, value);
            }
            out.push('}');
        }
        let _ = write!(
            out,
            ",\"flag\":{},\"language\":\"{}\",\"opaque\":{}",
            self.flag,
            self.language.name(),
            self.opaque
        );
        if let Some(remark) = &self.remark {
            out.push_str(",\"remark\":");
            json::write_string(&mut out, remark);
        }
        let _ = write!(
            out,
            ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":{}}}",
            self.version
        );
        out
    }

    fn encode_binary_header(&self) -> Result<Vec<u8>, ProtocolError> {
        let mut out = BytesMut::with_capacity(64 + self.ext_fields.len() * 32);
        // Callers checked that code and version fit int16.
        out.put_i16(self.code as i16);
        out.put_u8(self.language.to_byte());
        out.put_i16(self.version as i16);
        out.put_i32(self.opaque);
        out.put_i32(self.flag);
        let remark = self.remark.as_deref().unwrap_or("");
        out.put_i32(length_i32("remark", remark.len())?);
        out.put_slice(remark.as_bytes());

        let ext_length: usize = self
            .ext_fields
            .iter()
            .map(|(key, value)| 2 + key.len() + 4 + value.len())
            .sum();
        out.put_i32(length_i32("extFields", ext_length)?);
        for (key, value) in self.ext_fields.iter() {
            let key_length = i16::try_from(key.len()).map_err(|_| ProtocolError::FieldTooLong {
                field: "extFields key",
                length: key.len(),
            })?;
            out.put_i16(key_length);
            out.put_slice(key.as_bytes());
            out.put_i32(length_i32("extFields value", value.len())?);
            out.put_slice(value.as_bytes());
        }
        Ok(out.to_vec())
    }

    /// Decodes a header of the given type; the body is attached by the frame decoder.
    pub fn decode_header_bytes(
        serialize_type: SerializeType,
        header: &[u8],
    ) -> Result<Self, ProtocolError> {
        match serialize_type {
            SerializeType::Json => decode_json_header(header),
            SerializeType::RocketMq => decode_binary_header(header),
        }
    }
}

fn length_i32(field: &'static str, length: usize) -> Result<i32, ProtocolError> {
    i32::try_from(length).map_err(|_| ProtocolError::FieldTooLong { field, length })
}

fn json_int(value: Scalar<'_>, field: &'static str) -> Result<Option<i32>, ProtocolError> {
    let invalid = ProtocolError::JsonHeaderField {
        field,
        expected: "a 32-bit integer",
    };
    match value {
        Scalar::Other(Value::Null) => Ok(None),
        Scalar::Other(Value::Int(value)) => i32::try_from(value).map(Some).map_err(|_| invalid),
        Scalar::Text(text) => text.parse().map(Some).map_err(|_| invalid),
        Scalar::Other(_) => Err(invalid),
    }
}

fn json_language(value: Scalar<'_>) -> Result<Option<LanguageCode>, ProtocolError> {
    match value {
        Scalar::Other(Value::Null) => Ok(None),
        // A name this build does not know (a newer release's) is not worth dropping the frame.
        Scalar::Text(name) => Ok(Some(
            LanguageCode::from_name(&name).unwrap_or(LanguageCode::Other),
        )),
        Scalar::Other(Value::Int(ordinal)) => Ok(Some(
            u8::try_from(ordinal)
                .map(LanguageCode::from_byte)
                .unwrap_or(LanguageCode::Other),
        )),
        Scalar::Other(_) => Err(ProtocolError::JsonHeaderField {
            field: "language",
            expected: "a language name",
        }),
    }
}

fn json_remark(value: Scalar<'_>) -> Result<Option<String>, ProtocolError> {
    match value {
        Scalar::Other(Value::Null) => Ok(None),
        Scalar::Text(text) => Ok(Some(text.into_owned())),
        Scalar::Other(_) => Err(ProtocolError::JsonHeaderField {
            field: "remark",
            expected: "a string",
        }),
    }
}

/// An `extFields` value as the string Java would hold; `None` for a null (left out).
fn json_ext_value(value: Scalar<'_>) -> Result<Option<Cow<'_, str>>, ProtocolError> {
    // Writers must send strings, but C++ clients send numbers and booleans.
    match value {
        Scalar::Text(text) => Ok(Some(text)),
        Scalar::Other(Value::Null) => Ok(None),
        Scalar::Other(Value::Int(number)) => Ok(Some(Cow::Owned(number.to_string()))),
        Scalar::Other(Value::Bool(flag)) => Ok(Some(Cow::Owned(flag.to_string()))),
        Scalar::Other(Value::Float(number)) => Ok(Some(Cow::Owned(number.to_string()))),
        Scalar::Other(_) => Err(ProtocolError::JsonHeaderField {
            field: "extFields",
            expected: "scalar values",
        }),
    }
}

/// Keeps the first of a header's member errors.
fn keep(failure: &mut Option<ProtocolError>, outcome: Result<(), ProtocolError>) {
    if let Err(error) = outcome {
        failure.get_or_insert(error);
    }
}

/// Reads the header's members as they come, without building a JSON tree: a header is
/// decoded once per frame, so its keys are matched where they lie in the text and only the
/// strings the command keeps are allocated. For a key given twice the first value counts.
fn decode_json_header(header: &[u8]) -> Result<RemotingCommand, ProtocolError> {
    let mut parser = json::Parser::new(header);
    if !parser.at_object() {
        // Report bad JSON as such; well-formed JSON that is not an object is a bad header.
        parser.value(0)?;
        parser.finish()?;
        return Err(ProtocolError::JsonHeaderField {
            field: "<header>",
            expected: "an object",
        });
    }
    let mut code: Option<Option<i32>> = None;
    let mut version: Option<Option<i32>> = None;
    let mut opaque: Option<Option<i32>> = None;
    let mut flag: Option<Option<i32>> = None;
    let mut language: Option<Option<LanguageCode>> = None;
    let mut remark: Option<Option<String>> = None;
    let mut ext_fields: Option<ExtFields> = None;
    // A member that is valid JSON but not what RocketMQ writes: reported once the whole
    // header has parsed, so a syntax error further on still wins, as it always did.
    let mut failure: Option<ProtocolError> = None;
    parser.object_members(0, |parser, key| {
        let int_slot = match &*key {
            "code" => Some((&mut code, "code")),
            "version" => Some((&mut version, "version")),
            "opaque" => Some((&mut opaque, "opaque")),
            "flag" => Some((&mut flag, "flag")),
            _ => None,
        };
        if let Some((slot, field)) = int_slot {
            let value = parser.scalar(1)?;
            if slot.is_none() {
                keep(
                    &mut failure,
                    json_int(value, field).map(|v| *slot = Some(v)),
                );
            }
            return Ok(());
        }
        match &*key {
            "language" if language.is_none() => {
                let value = parser.scalar(1)?;
                keep(
                    &mut failure,
                    json_language(value).map(|v| language = Some(v)),
                );
            }
            "remark" if remark.is_none() => {
                let value = parser.scalar(1)?;
                keep(&mut failure, json_remark(value).map(|v| remark = Some(v)));
            }
            "extFields" if ext_fields.is_none() && parser.at_object() => {
                let mut fields = ExtFields::with_capacity(8);
                parser.object_members(1, |parser, name| {
                    let value = parser.scalar(2)?;
                    match json_ext_value(value) {
                        Ok(Some(value)) => fields.insert(name, value),
                        Ok(None) => {}
                        Err(error) => keep(&mut failure, Err(error)),
                    }
                    Ok(())
                })?;
                ext_fields = Some(fields);
            }
            "extFields" if ext_fields.is_none() => {
                let value = parser.value(1)?;
                if value == Value::Null {
                    ext_fields = Some(ExtFields::new());
                } else {
                    keep(
                        &mut failure,
                        Err(ProtocolError::JsonHeaderField {
                            field: "extFields",
                            expected: "an object",
                        }),
                    );
                }
            }
            _ => parser.skip_value(1)?,
        }
        Ok(())
    })?;
    parser.finish()?;
    if let Some(failure) = failure {
        return Err(failure);
    }
    let code = code.flatten().ok_or(ProtocolError::JsonHeaderField {
        field: "code",
        expected: "an integer",
    })?;
    Ok(RemotingCommand {
        code,
        language: language.flatten().unwrap_or(LanguageCode::Java),
        version: version.flatten().unwrap_or(0),
        opaque: opaque.flatten().unwrap_or(0),
        flag: flag.flatten().unwrap_or(0),
        remark: remark.flatten(),
        ext_fields: ext_fields.unwrap_or_default(),
        body: Bytes::new(),
        serialize_type: SerializeType::Json,
    })
}

/// A bounds-checked reader over a binary header.
struct HeaderReader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> HeaderReader<'a> {
    fn take(&mut self, field: &'static str, count: usize) -> Result<&'a [u8], ProtocolError> {
        let have = self.bytes.len() - self.position;
        if count > have {
            return Err(ProtocolError::BinaryHeaderTruncated {
                field,
                offset: self.position,
                need: count,
                have,
            });
        }
        let slice = &self.bytes[self.position..self.position + count];
        self.position += count;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ProtocolError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(field, N)?);
        Ok(out)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, ProtocolError> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, ProtocolError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    fn length(&mut self, field: &'static str, length: i32) -> Result<usize, ProtocolError> {
        usize::try_from(length).map_err(|_| ProtocolError::NegativeLength {
            field,
            offset: self.position,
            length,
        })
    }

    fn text(&mut self, field: &'static str, length: usize) -> Result<&'a str, ProtocolError> {
        let bytes = self.take(field, length)?;
        std::str::from_utf8(bytes).map_err(|_| ProtocolError::InvalidUtf8 { field })
    }

    fn string(&mut self, field: &'static str, length: usize) -> Result<String, ProtocolError> {
        self.text(field, length).map(str::to_owned)
    }
}

fn decode_binary_header(header: &[u8]) -> Result<RemotingCommand, ProtocolError> {
    let mut reader = HeaderReader {
        bytes: header,
        position: 0,
    };
    let code = i32::from(reader.i16("code")?);
    let language = LanguageCode::from_byte(reader.array::<1>("language")?[0]);
    let version = i32::from(reader.i16("version")?);
    let opaque = reader.i32("opaque")?;
    let flag = reader.i32("flag")?;
    let remark_length = reader.i32("remark length")?;
    let remark_length = reader.length("remark", remark_length)?;
    let remark = if remark_length == 0 {
        None
    } else {
        Some(reader.string("remark", remark_length)?)
    };

    let ext_length = reader.i32("extFields length")?;
    let ext_length = reader.length("extFields", ext_length)?;
    let ext_bytes = reader.take("extFields", ext_length)?;
    let mut ext_reader = HeaderReader {
        bytes: ext_bytes,
        position: 0,
    };
    // A frame without fields (most responses) allocates nothing for them.
    let mut ext_fields = if ext_bytes.is_empty() {
        ExtFields::new()
    } else {
        ExtFields::with_capacity(16)
    };
    while ext_reader.position < ext_bytes.len() {
        let key_length = ext_reader.i16("extFields key length")?;
        let key_length = ext_reader.length("extFields key", i32::from(key_length))?;
        let key = ext_reader.text("extFields key", key_length)?;
        let value_length = ext_reader.i32("extFields value length")?;
        let value_length = ext_reader.length("extFields value", value_length)?;
        let value = ext_reader.text("extFields value", value_length)?;
        // Java decodes a zero-length string as null, so the key reads as absent.
        if !value.is_empty() {
            ext_fields.insert(key, value);
        }
    }
    Ok(RemotingCommand {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext_fields,
        body: Bytes::new(),
        serialize_type: SerializeType::RocketMq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_header_layout_follows_fastjson_property_order() {
        let mut command = RemotingCommand::request(RequestCode::GetMaxOffset).with_opaque(5);
        command.ext_fields.insert("topic", "T");
        assert_eq!(
            command.encode_json_header(),
            r#"{"code":30,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}"#
        );
    }

    #[test]
    fn json_header_accepts_cpp_style_numbers_and_missing_keys() {
        let header = br#"{"code":11,"language":"CPP","version":333,"extFields":{"queueId":3,"unitMode":false,"x":null},"opaque":2}
"#;
        let command =
            RemotingCommand::decode_header_bytes(SerializeType::Json, header).expect("lenient");
        assert_eq!(command.language, LanguageCode::Cpp);
        assert_eq!(command.ext_fields.get("queueId"), Some("3"));
        assert_eq!(command.ext_fields.get("unitMode"), Some("false"));
        assert_eq!(command.ext_fields.get("x"), None);
        assert_eq!(command.flag, 0);
        assert_eq!(command.remark, None);
    }

    #[test]
    fn binary_header_rejects_negative_and_overlong_lengths() {
        let command = RemotingCommand::request(RequestCode::HeartBeat).with_remark("r");
        let mut bytes = command.encode_binary_header().expect("encodes");
        // remark length lives at offset 13; make it negative.
        bytes[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            RemotingCommand::decode_header_bytes(SerializeType::RocketMq, &bytes),
            Err(ProtocolError::NegativeLength {
                field: "remark",
                ..
            })
        ));
        bytes[13..17].copy_from_slice(&1000i32.to_be_bytes());
        assert!(matches!(
            RemotingCommand::decode_header_bytes(SerializeType::RocketMq, &bytes),
            Err(ProtocolError::BinaryHeaderTruncated {
                field: "remark",
                ..
            })
        ));
    }

    #[test]
    fn codes_beyond_int16_fall_back_to_json() {
        let command = RemotingCommand {
            code: 200_050,
            ..RemotingCommand::default()
        }
        .with_serialize_type(SerializeType::RocketMq);
        assert_eq!(
            command.encode_header().expect("encodes").0,
            SerializeType::Json
        );
    }
}
