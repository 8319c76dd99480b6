//! JSON as RocketMQ's fastjson writes and reads it.
//!
//! Java peers serialise bodies with fastjson 1.x, which is not standard JSON: a map whose keys
//! are not strings is written with *raw* keys (`{0:"10.0.0.1:10911"}`, and for
//! `Map<MessageQueue, _>` even an object as key: `{{"brokerName":"b","queueId":0,"topic":"t"}:42}`).
//! serde_json cannot represent that, so this module has its own small value tree whose object
//! keys are values, a lenient parser (quoted, unquoted and object keys, single quotes, trailing
//! commas) and a writer with two key styles. All of RocketMQ's JSON quirks live here.

mod convert;
mod macros;
mod parse;
mod write;

pub use convert::{FromJson, JsonBody, JsonKey, ToJson};
pub use parse::{parse, NESTING_DEPTH_MAX};
pub(crate) use parse::{Parser, Scalar};
pub(crate) use write::write_string;
pub use write::{write, KeyStyle, WriteOptions};

/// A JSON value whose object keys may themselves be values (fastjson's non-string keys).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
    Array(Vec<Value>),
    Object(Object),
}

/// Object entries in document order. Keys are usually strings, but fastjson writes integers
/// and objects as keys too.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Object {
    entries: Vec<(Value, Value)>,
}

impl Object {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, key: Value, value: Value) {
        self.entries.push((key, value));
    }

    /// The value of the first entry whose key is the string (or the unquoted word) `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries
            .iter()
            .find(|(name, _)| matches!(name, Value::String(text) if text == key))
            .map(|(_, value)| value)
    }

    pub fn entries(&self) -> &[(Value, Value)] {
        &self.entries
    }

    /// The entries, by value (no copies when the tree is consumed).
    pub fn into_entries(self) -> Vec<(Value, Value)> {
        self.entries
    }

    /// Removes and returns the value of the first entry keyed `key`.
    pub fn take(&mut self, key: &str) -> Option<Value> {
        let index = self
            .entries
            .iter()
            .position(|(name, _)| matches!(name, Value::String(text) if text == key))?;
        Some(self.entries.swap_remove(index).1)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(object) => Some(object),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(text) => Some(text),
            _ => None,
        }
    }

    /// Object member lookup; `None` for non-objects.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_object().and_then(|object| object.get(key))
    }
}

impl From<&str> for Value {
    fn from(text: &str) -> Self {
        Value::String(text.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::JsonError;

    #[test]
    fn parses_fastjson_raw_keys() {
        let value =
            parse(br#"{"brokerAddrs":{0:"a:1",1:"b:2"},{"queueId":0,"topic":"t"}:5, name : 'x',}"#)
                .expect("fastjson text parses");
        let object = value.as_object().expect("object");
        let addrs = object
            .get("brokerAddrs")
            .and_then(Value::as_object)
            .expect("nested");
        assert_eq!(addrs.entries()[0], (Value::Int(0), Value::from("a:1")));
        assert!(matches!(object.entries()[1].0, Value::Object(_)));
        assert_eq!(object.get("name"), Some(&Value::from("x")));
    }

    #[test]
    fn writes_both_key_styles() {
        let mut inner = Object::new();
        inner.push(Value::Int(0), Value::from("a"));
        let mut outer = Object::new();
        outer.push(Value::from("k"), Value::Object(inner));
        let value = Value::Object(outer);
        assert_eq!(write(&value, WriteOptions::FASTJSON), r#"{"k":{0:"a"}}"#);
        assert_eq!(write(&value, WriteOptions::STANDARD), r#"{"k":{"0":"a"}}"#);
        assert_eq!(
            write(&value, WriteOptions::PRETTY),
            "{\n\t\"k\":{0:\"a\"\n\t}\n}"
        );
    }

    #[test]
    fn strings_escape_and_unescape() {
        let text = "quote\" back\\ nl\n tab\t ctl\u{1} é 😀";
        let written = write(&Value::from(text), WriteOptions::FASTJSON);
        assert_eq!(
            parse(written.as_bytes()).expect("round trip"),
            Value::from(text)
        );
        assert_eq!(
            parse(br#""\ud83d\ude00""#).expect("surrogates"),
            Value::from("😀")
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let text = "[".repeat(100_000);
        assert_eq!(
            parse(text.as_bytes()),
            Err(JsonError::TooDeep {
                max: NESTING_DEPTH_MAX
            })
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(parse(b"-12").expect("int"), Value::Int(-12));
        assert_eq!(parse(b"1.5").expect("float"), Value::Float(1.5));
        assert_eq!(
            parse(b"99999999999999999999").expect("big"),
            Value::Float(1e20)
        );
        assert!(parse(b"-").is_err());
        assert!(parse(b"1 2").is_err());
    }
}
