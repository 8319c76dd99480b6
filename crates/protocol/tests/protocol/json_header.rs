//! The JSON header decoder reads members in place instead of building a JSON tree. This checks
//! it against the plain reading — parse the whole text, then take each field from the tree —
//! on headers written the many ways peers write them: keys in any order, given twice, unknown,
//! bare or single-quoted; values of the wrong type; numbers and booleans in `extFields`.

use bytes::Bytes;
use proptest::prelude::*;
use tidemark_protocol::json::{self, Value, WriteOptions};
use tidemark_protocol::{frame, ExtFields, LanguageCode, RemotingCommand, SerializeType};

/// What the header means, read from the parsed tree (first occurrence of a key wins).
fn read_from_tree(text: &[u8]) -> Option<RemotingCommand> {
    let Ok(Value::Object(object)) = json::parse(text) else {
        return None;
    };
    let int = |name: &str| -> Option<Option<i32>> {
        match object.get(name) {
            None | Some(Value::Null) => Some(None),
            Some(Value::Int(value)) => i32::try_from(*value).ok().map(Some),
            Some(Value::String(text)) => text.parse().ok().map(Some),
            Some(_) => None,
        }
    };
    let code = int("code")??;
    let language = match object.get("language") {
        None | Some(Value::Null) => LanguageCode::Java,
        Some(Value::String(name)) => LanguageCode::from_name(name).unwrap_or(LanguageCode::Other),
        Some(Value::Int(ordinal)) => u8::try_from(*ordinal)
            .map(LanguageCode::from_byte)
            .unwrap_or(LanguageCode::Other),
        Some(_) => return None,
    };
    let remark = match object.get("remark") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(_) => return None,
    };
    let mut ext_fields = ExtFields::new();
    match object.get("extFields") {
        None | Some(Value::Null) => {}
        Some(Value::Object(fields)) => {
            for (key, value) in fields.entries() {
                let key = match key {
                    Value::String(text) => text.clone(),
                    Value::Int(number) => number.to_string(),
                    _ => return None,
                };
                let value = match value {
                    Value::Null => continue,
                    Value::String(text) => text.clone(),
                    Value::Int(number) => number.to_string(),
                    Value::Bool(flag) => flag.to_string(),
                    Value::Float(number) => number.to_string(),
                    _ => return None,
                };
                ext_fields.insert(key, value);
            }
        }
        Some(_) => return None,
    }
    Some(RemotingCommand {
        code,
        language,
        version: int("version")?.unwrap_or(0),
        opaque: int("opaque")?.unwrap_or(0),
        flag: int("flag")?.unwrap_or(0),
        remark,
        ext_fields,
        body: Bytes::new(),
        serialize_type: SerializeType::Json,
    })
}

fn decode(text: &[u8]) -> Option<RemotingCommand> {
    let mut bytes = Vec::with_capacity(8 + text.len());
    bytes.extend_from_slice(&(4 + text.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&(text.len() as u32).to_be_bytes());
    bytes.extend_from_slice(text);
    frame::decode_slice(&bytes, 1 << 20)
        .ok()
        .flatten()
        .map(|(command, _)| command)
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        (-1000i64..100_000).prop_map(Value::Int),
        (-1e6f64..1e6).prop_map(Value::Float),
        "[ -~]{0,10}".prop_map(Value::String),
        "-?[0-9]{1,6}".prop_map(Value::String),
        "JAVA|CPP|GO|RUST|PYTHON|OTHER".prop_map(Value::String),
        any::<String>().prop_map(Value::String),
    ]
}

fn member_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => scalar(),
        2 => ext_object(),
        1 => proptest::collection::vec(scalar(), 0..3).prop_map(Value::Array),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "code|version|opaque|flag|language|remark|extFields|serializeTypeCurrentRPC"
            .prop_map(String::from),
        "[a-zA-Z]{1,8}",
    ]
}

fn ext_object() -> impl Strategy<Value = Value> {
    proptest::collection::vec(("[a-zA-Z]{1,6}|[0-9]{1,3}", scalar()), 0..6).prop_map(|entries| {
        let mut object = json::Object::new();
        for (key, value) in entries {
            let key = match key.parse::<i64>() {
                Ok(number) => Value::Int(number),
                Err(_) => Value::String(key),
            };
            object.push(key, value);
        }
        Value::Object(object)
    })
}

/// A header's text with its keys quoted, single-quoted or bare, and spaces between tokens;
/// usually with a code and an `extFields` object first, as real headers have.
fn header_text() -> impl Strategy<Value = String> {
    (
        proptest::option::weighted(0.8, any::<i32>()),
        proptest::option::weighted(0.7, ext_object()),
        proptest::collection::vec((key(), member_value(), 0u8..3, any::<bool>()), 0..8),
    )
        .prop_map(|(code, ext, members)| {
            let mut parts = Vec::new();
            if let Some(code) = code {
                parts.push(format!("\"code\":{code}"));
            }
            if let Some(ext) = ext {
                parts.push(format!(
                    "\"extFields\":{}",
                    json::write(&ext, WriteOptions::FASTJSON)
                ));
            }
            for (key, value, quoting, spaced) in members {
                let written_key = match quoting {
                    0 => format!("\"{key}\""),
                    1 => format!("'{key}'"),
                    _ => key,
                };
                let value = json::write(&value, WriteOptions::FASTJSON);
                parts.push(if spaced {
                    format!(" {written_key} : {value} ")
                } else {
                    format!("{written_key}:{value}")
                });
            }
            format!("{{{}}}", parts.join(","))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn reading_in_place_means_what_the_tree_means(text in header_text()) {
        prop_assert_eq!(decode(text.as_bytes()), read_from_tree(text.as_bytes()), "header {}", text);
    }

    #[test]
    fn arbitrary_text_is_read_the_same_way(text in "[{}\\[\\]:,\"' a-z0-9nulltrue-]{0,40}") {
        prop_assert_eq!(decode(text.as_bytes()), read_from_tree(text.as_bytes()), "header {}", text);
    }
}

#[test]
fn a_header_that_is_not_an_object_is_refused() {
    for text in ["[1]", "7", "\"code\"", "null"] {
        assert_eq!(decode(text.as_bytes()), None, "{text}");
    }
}
