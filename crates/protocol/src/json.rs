//! JSON as RocketMQ's fastjson writes and reads it.
//!
//! Java peers serialise bodies with fastjson 1.x, which is not standard JSON: a map whose keys
//! are not strings is written with *raw* keys (`{0:"10.0.0.1:10911"}`, and for
//! `Map<MessageQueue, _>` even an object as key: `{{"brokerName":"b","queueId":0,"topic":"t"}:42}`).
//! serde_json cannot represent that, so this module has its own small value tree whose object
//! keys are values, a lenient parser (quoted, unquoted and object keys, single quotes, trailing
//! commas) and a writer with two key styles. All of RocketMQ's JSON quirks live here.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::error::JsonError;

/// Deepest nesting the parser accepts; RocketMQ bodies nest fewer than ten levels.
pub const NESTING_DEPTH_MAX: usize = 128;

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

// ---------------------------------------------------------------------------------------------
// Parsing

/// Parses fastjson-flavoured JSON text. Never panics; hostile input gives a `JsonError`.
pub fn parse(text: &[u8]) -> Result<Value, JsonError> {
    let mut parser = Parser { text, position: 0 };
    let value = parser.value(0)?;
    parser.skip_whitespace();
    if parser.position != text.len() {
        return Err(parser.error("trailing characters after the value"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a [u8],
    position: usize,
}

impl Parser<'_> {
    fn error(&self, reason: &'static str) -> JsonError {
        JsonError::Syntax {
            offset: self.position,
            reason,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.position).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(byte) = self.peek() {
            if byte.is_ascii_whitespace() {
                self.position += 1;
            } else {
                break;
            }
        }
    }

    fn expect_word(&mut self, word: &'static [u8], value: Value) -> Result<Value, JsonError> {
        if self.text[self.position..].starts_with(word) {
            self.position += word.len();
            Ok(value)
        } else {
            Err(self.error("unknown literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth > NESTING_DEPTH_MAX {
            return Err(JsonError::TooDeep {
                max: NESTING_DEPTH_MAX,
            });
        }
        self.skip_whitespace();
        match self.peek() {
            None => Err(self.error("unexpected end of input")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(quote @ (b'"' | b'\'')) => self.string(quote).map(Value::String),
            Some(b't') => self.expect_word(b"true", Value::Bool(true)),
            Some(b'f') => self.expect_word(b"false", Value::Bool(false)),
            Some(b'n') => self.expect_word(b"null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("unexpected character")),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.position += 1; // '['
        let mut items = Vec::new();
        loop {
            self.skip_whitespace();
            match self.peek() {
                Some(b']') => {
                    self.position += 1;
                    return Ok(Value::Array(items));
                }
                None => return Err(self.error("unterminated array")),
                _ => {}
            }
            items.push(self.value(depth + 1)?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.position += 1,
                Some(b']') => {}
                _ => return Err(self.error("expected ',' or ']' in array")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.position += 1; // '{'
        let mut object = Object::new();
        loop {
            self.skip_whitespace();
            let key = match self.peek() {
                Some(b'}') => {
                    self.position += 1;
                    return Ok(Value::Object(object));
                }
                None => return Err(self.error("unterminated object")),
                Some(byte) if byte.is_ascii_alphabetic() || byte == b'_' || byte == b'$' => {
                    self.bare_word()
                }
                Some(_) => self.value(depth + 1)?,
            };
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.error("expected ':' after object key"));
            }
            self.position += 1;
            let value = self.value(depth + 1)?;
            object.push(key, value);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.position += 1,
                Some(b'}') => {}
                _ => return Err(self.error("expected ',' or '}' in object")),
            }
        }
    }

    /// An unquoted identifier key (fastjson's AllowUnQuotedFieldNames); `true`, `false` and
    /// `null` stay literals when they are keys, as they would in value position.
    fn bare_word(&mut self) -> Value {
        let start = self.position;
        while let Some(byte) = self.peek() {
            if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'$' {
                self.position += 1;
            } else {
                break;
            }
        }
        // The scanned bytes are ASCII, so this conversion cannot fail.
        let word = String::from_utf8_lossy(&self.text[start..self.position]).into_owned();
        Value::String(word)
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.position;
        let mut is_float = false;
        if self.peek() == Some(b'-') {
            self.position += 1;
        }
        let digits_start = self.position;
        while let Some(byte) = self.peek() {
            match byte {
                b'0'..=b'9' => {}
                b'.' | b'e' | b'E' | b'+' | b'-' => is_float = true,
                _ => break,
            }
            self.position += 1;
        }
        if self.position == digits_start {
            return Err(self.error("a number needs digits"));
        }
        let text = std::str::from_utf8(&self.text[start..self.position])
            .map_err(|_| self.error("invalid number"))?;
        if !is_float {
            if let Ok(integer) = text.parse::<i64>() {
                return Ok(Value::Int(integer));
            }
        }
        text.parse::<f64>()
            .map(Value::Float)
            .map_err(|_| JsonError::Syntax {
                offset: start,
                reason: "invalid number",
            })
    }

    fn string(&mut self, quote: u8) -> Result<String, JsonError> {
        self.position += 1; // opening quote
        let mut bytes = Vec::new();
        loop {
            // Copy the run up to the next quote or escape at once (headers are mostly runs).
            let rest = self.text.get(self.position..).unwrap_or_default();
            let run = rest
                .iter()
                .position(|&byte| byte == quote || byte == b'\\')
                .unwrap_or(rest.len());
            bytes.extend_from_slice(&rest[..run]);
            self.position += run;
            let Some(byte) = self.peek() else {
                return Err(self.error("unterminated string"));
            };
            self.position += 1;
            match byte {
                _ if byte == quote => break,
                b'\\' => {
                    let Some(escape) = self.peek() else {
                        return Err(self.error("unterminated escape"));
                    };
                    self.position += 1;
                    match escape {
                        b'"' | b'\\' | b'/' | b'\'' => bytes.push(escape),
                        b'b' => bytes.push(0x08),
                        b'f' => bytes.push(0x0c),
                        b'n' => bytes.push(b'\n'),
                        b'r' => bytes.push(b'\r'),
                        b't' => bytes.push(b'\t'),
                        b'u' => {
                            let character = self.unicode_escape()?;
                            let mut buffer = [0u8; 4];
                            bytes.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
                        }
                        _ => return Err(self.error("unknown escape")),
                    }
                }
                _ => bytes.push(byte),
            }
        }
        String::from_utf8(bytes).map_err(|_| self.error("string is not valid UTF-8"))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .text
            .get(self.position..self.position + 4)
            .ok_or_else(|| self.error("truncated \\u escape"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.error("bad \\u escape"))?;
        let value = u32::from_str_radix(text, 16).map_err(|_| self.error("bad \\u escape"))?;
        self.position += 4;
        Ok(value)
    }

    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) && self.text[self.position..].starts_with(b"\\u") {
            let saved = self.position;
            self.position += 2;
            let second = self.hex4()?;
            if (0xDC00..0xE000).contains(&second) {
                let combined = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                return Ok(char::from_u32(combined).unwrap_or('\u{FFFD}'));
            }
            self.position = saved;
        }
        // A lone surrogate is not a char; Java would keep it, we substitute.
        Ok(char::from_u32(first).unwrap_or('\u{FFFD}'))
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// How map keys that are not strings are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyStyle {
    /// As fastjson does by default: integer keys unquoted, object keys as raw objects. What
    /// old Java, Go and C++ peers expect for route data, and the only form Java reads back
    /// for `Map<MessageQueue, _>`.
    #[default]
    Fastjson,
    /// Standard JSON: every key quoted (an object key becomes the string of its compact JSON).
    /// What the 4.9.4+ name server sends to callers of version ≥ 401.
    Standard,
}

/// Output options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteOptions {
    pub key_style: KeyStyle,
    /// Tab-indented, like fastjson's `PrettyFormat` used for the broker's config files.
    pub pretty: bool,
}

impl WriteOptions {
    pub const FASTJSON: WriteOptions = WriteOptions {
        key_style: KeyStyle::Fastjson,
        pretty: false,
    };
    pub const STANDARD: WriteOptions = WriteOptions {
        key_style: KeyStyle::Standard,
        pretty: false,
    };
    pub const PRETTY: WriteOptions = WriteOptions {
        key_style: KeyStyle::Fastjson,
        pretty: true,
    };
}

/// Writes `value` as text.
pub fn write(value: &Value, options: WriteOptions) -> String {
    let mut out = String::new();
    write_value(&mut out, value, options, 0);
    out
}

fn write_value(out: &mut String, value: &Value, options: WriteOptions, indent: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
        Value::Int(integer) => {
            let _ = write!(out, "{integer}");
        }
        Value::Float(float) if float.is_finite() => {
            let _ = write!(out, "{float:?}");
        }
        Value::Float(_) => out.push_str("null"),
        Value::String(text) => write_string(out, text),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(out, item, options, indent + 1);
            }
            out.push(']');
        }
        Value::Object(object) => write_object(out, object, options, indent),
    }
}

fn write_object(out: &mut String, object: &Object, options: WriteOptions, indent: usize) {
    out.push('{');
    for (index, (key, value)) in object.entries().iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        // fastjson's pretty writer breaks lines before string keys only, and always before
        // the closing brace of a non-empty object.
        if options.pretty && matches!(key, Value::String(_)) {
            out.push('\n');
            push_tabs(out, indent + 1);
        }
        write_key(out, key, options, indent + 1);
        out.push(':');
        write_value(out, value, options, indent + 1);
    }
    if options.pretty && !object.is_empty() {
        out.push('\n');
        push_tabs(out, indent);
    }
    out.push('}');
}

fn push_tabs(out: &mut String, count: usize) {
    for _ in 0..count {
        out.push('\t');
    }
}

fn write_key(out: &mut String, key: &Value, options: WriteOptions, indent: usize) {
    match (key, options.key_style) {
        (Value::String(text), _) => write_string(out, text),
        (_, KeyStyle::Fastjson) => write_value(out, key, options, indent),
        (_, KeyStyle::Standard) => {
            let text = write(
                key,
                WriteOptions {
                    pretty: false,
                    ..options
                },
            );
            write_string(out, &text);
        }
    }
}

fn write_string(out: &mut String, text: &str) {
    out.push('"');
    for character in text.chars() {
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            control if (control as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", control as u32);
            }
            other => out.push(other),
        }
    }
    out.push('"');
}

// ---------------------------------------------------------------------------------------------
// Typed conversion

/// Converts a Rust value into the JSON Java would produce for the matching Java type.
pub trait ToJson {
    fn to_json(&self) -> Value;
    /// Whether the field is null and therefore omitted (fastjson skips null properties).
    fn is_absent(&self) -> bool {
        false
    }
}

/// Reads a Rust value from JSON, as leniently as fastjson reads the matching Java type.
pub trait FromJson: Sized {
    fn from_json(value: &Value) -> Result<Self, JsonError>;
}

/// A map key: written raw (integers, objects) or as a string, read from either form.
pub trait JsonKey: Sized + Ord {
    fn to_key(&self) -> Value;
    fn from_key(key: &Value) -> Result<Self, JsonError>;
}

/// A whole body: bytes in, bytes out.
pub trait JsonBody: ToJson + FromJson {
    /// fastjson's compact form with raw non-string keys: what Java peers send and accept.
    fn to_json_bytes(&self) -> Vec<u8> {
        self.to_json_bytes_with(WriteOptions::FASTJSON)
    }

    fn to_json_bytes_with(&self, options: WriteOptions) -> Vec<u8> {
        write(&self.to_json(), options).into_bytes()
    }

    fn from_json_bytes(bytes: &[u8]) -> Result<Self, JsonError> {
        Self::from_json(&parse(bytes)?)
    }
}

impl<T: ToJson + FromJson> JsonBody for T {}

fn type_error(expected: &'static str) -> JsonError {
    JsonError::Type {
        path: String::new(),
        expected,
    }
}

impl JsonError {
    /// Prefixes the path of a type error with the field or index it was found under.
    pub fn within(self, segment: &str) -> JsonError {
        let join = |path: String| {
            if path.is_empty() {
                segment.to_owned()
            } else {
                format!("{segment}.{path}")
            }
        };
        match self {
            JsonError::Type { path, expected } => JsonError::Type {
                path: join(path),
                expected,
            },
            JsonError::UnknownVariant { path, value } => JsonError::UnknownVariant {
                path: join(path),
                value,
            },
            other => other,
        }
    }
}

impl ToJson for bool {
    fn to_json(&self) -> Value {
        Value::Bool(*self)
    }
}

impl FromJson for bool {
    fn from_json(value: &Value) -> Result<Self, JsonError> {
        match value {
            Value::Bool(flag) => Ok(*flag),
            Value::Int(integer) => Ok(*integer != 0),
            Value::String(text) => Ok(text.eq_ignore_ascii_case("true") || text == "1"),
            Value::Null => Ok(false),
            _ => Err(type_error("a boolean")),
        }
    }
}

macro_rules! json_integer {
    ($($ty:ty),*) => {$(
        impl ToJson for $ty {
            fn to_json(&self) -> Value {
                Value::Int(i64::from(*self))
            }
        }

        impl FromJson for $ty {
            /// Accepts numbers and numeric strings (C++ clients send `"subVersion":"123"`).
            fn from_json(value: &Value) -> Result<Self, JsonError> {
                let wide: i64 = match value {
                    Value::Int(integer) => *integer,
                    Value::String(text) => text.trim().parse().map_err(|_| type_error("an integer"))?,
                    Value::Float(float) if float.fract() == 0.0 && float.abs() < 9.0e15 => *float as i64,
                    _ => return Err(type_error("an integer")),
                };
                <$ty>::try_from(wide).map_err(|_| type_error(concat!("an integer that fits ", stringify!($ty))))
            }
        }

        impl JsonKey for $ty {
            fn to_key(&self) -> Value {
                Value::Int(i64::from(*self))
            }
            fn from_key(key: &Value) -> Result<Self, JsonError> {
                <$ty as FromJson>::from_json(key)
            }
        }
    )*};
}

json_integer!(i32, i64, u8, u16, u32);

impl ToJson for f64 {
    fn to_json(&self) -> Value {
        Value::Float(*self)
    }
}

impl FromJson for f64 {
    fn from_json(value: &Value) -> Result<Self, JsonError> {
        match value {
            Value::Float(float) => Ok(*float),
            Value::Int(integer) => Ok(*integer as f64),
            Value::String(text) => text.trim().parse().map_err(|_| type_error("a number")),
            _ => Err(type_error("a number")),
        }
    }
}

impl ToJson for String {
    fn to_json(&self) -> Value {
        Value::String(self.clone())
    }
}

impl FromJson for String {
    fn from_json(value: &Value) -> Result<Self, JsonError> {
        match value {
            Value::String(text) => Ok(text.clone()),
            Value::Int(integer) => Ok(integer.to_string()),
            Value::Bool(flag) => Ok(flag.to_string()),
            _ => Err(type_error("a string")),
        }
    }
}

impl JsonKey for String {
    fn to_key(&self) -> Value {
        Value::String(self.clone())
    }
    fn from_key(key: &Value) -> Result<Self, JsonError> {
        String::from_json(key)
    }
}

impl<T: ToJson> ToJson for Option<T> {
    fn to_json(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToJson::to_json)
    }
    fn is_absent(&self) -> bool {
        self.is_none()
    }
}

impl<T: FromJson> FromJson for Option<T> {
    fn from_json(value: &Value) -> Result<Self, JsonError> {
        if value.is_null() {
            Ok(None)
        } else {
            T::from_json(value).map(Some)
        }
    }
}

impl<T: ToJson> ToJson for Vec<T> {
    fn to_json(&self) -> Value {
        Value::Array(self.iter().map(ToJson::to_json).collect())
    }
}

impl<T: FromJson> FromJson for Vec<T> {
    fn from_json(value: &Value) -> Result<Self, JsonError> {
        match value {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    T::from_json(item).map_err(|error| error.within(&index.to_string()))
                })
                .collect(),
            Value::Null => Ok(Vec::new()),
            _ => Err(type_error("an array")),
        }
    }
}

impl<K: JsonKey, V: ToJson> ToJson for BTreeMap<K, V> {
    fn to_json(&self) -> Value {
        let mut object = Object::new();
        for (key, value) in self {
            object.push(key.to_key(), value.to_json());
        }
        Value::Object(object)
    }
}

impl<K: JsonKey, V: FromJson> FromJson for BTreeMap<K, V> {
    fn from_json(value: &Value) -> Result<Self, JsonError> {
        match value {
            Value::Object(object) => {
                let mut map = BTreeMap::new();
                for (key, item) in object.entries() {
                    let key = K::from_key(key).map_err(|error| error.within("<key>"))?;
                    map.insert(key, V::from_json(item)?);
                }
                Ok(map)
            }
            Value::Null => Ok(BTreeMap::new()),
            _ => Err(type_error("an object")),
        }
    }
}

impl ToJson for Value {
    fn to_json(&self) -> Value {
        self.clone()
    }
}

impl FromJson for Value {
    fn from_json(value: &Value) -> Result<Self, JsonError> {
        Ok(value.clone())
    }
}

/// Declares a JSON body type: fields listed in fastjson's (alphabetical) order, each with its
/// Java property name and, where Java's default is not Rust's, a default. Absent or null
/// properties read as the default; unknown properties are ignored; `Option` fields that are
/// `None` are omitted, as fastjson omits nulls.
#[macro_export]
macro_rules! json_object {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $key:literal => $field:ident : $ty:ty $(= $default:expr)?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl ::std::default::Default for $name {
            fn default() -> Self {
                Self { $( $field: $crate::json_object!(@default $($default)?), )* }
            }
        }

        impl $crate::json::ToJson for $name {
            fn to_json(&self) -> $crate::json::Value {
                let mut object = $crate::json::Object::new();
                $(
                    if !$crate::json::ToJson::is_absent(&self.$field) {
                        object.push($crate::json::Value::from($key), $crate::json::ToJson::to_json(&self.$field));
                    }
                )*
                $crate::json::Value::Object(object)
            }
        }

        impl $crate::json::FromJson for $name {
            fn from_json(value: &$crate::json::Value) -> ::std::result::Result<Self, $crate::error::JsonError> {
                let Some(object) = value.as_object() else {
                    return Err($crate::error::JsonError::Type {
                        path: String::new(),
                        expected: concat!("an object (", stringify!($name), ")"),
                    });
                };
                #[allow(unused_mut)]
                let mut out = Self::default();
                $(
                    if let Some(item) = object.get($key) {
                        if !item.is_null() {
                            out.$field = $crate::json::FromJson::from_json(item).map_err(|error| error.within($key))?;
                        }
                    }
                )*
                Ok(out)
            }
        }
    };
    (@default) => { ::std::default::Default::default() };
    (@default $default:expr) => { $default };
}

/// Declares an enum that Java writes by name; reading also accepts the ordinal (C++ clients
/// send `"consumeType":1`).
#[macro_export]
macro_rules! json_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $java:literal, )* }
        default $default:ident
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $( $(#[$vmeta])* #[doc = concat!("`", $java, "`")] $variant, )* }

        impl $name {
            const VARIANTS: &'static [($name, &'static str)] = &[$( ($name::$variant, $java), )*];

            /// The Java enum constant's name.
            pub fn java_name(self) -> &'static str {
                Self::VARIANTS.iter().find(|(variant, _)| *variant == self).map(|(_, name)| *name).unwrap_or("")
            }

            /// Parses a Java enum constant's name.
            pub fn from_java_name(name: &str) -> Option<Self> {
                Self::VARIANTS.iter().find(|(_, known)| *known == name).map(|(variant, _)| *variant)
            }

            /// The Java ordinal.
            pub fn ordinal(self) -> usize {
                Self::VARIANTS.iter().position(|(variant, _)| *variant == self).unwrap_or(0)
            }
        }

        impl ::std::default::Default for $name {
            fn default() -> Self {
                $name::$default
            }
        }

        impl $crate::json::ToJson for $name {
            fn to_json(&self) -> $crate::json::Value {
                $crate::json::Value::from(self.java_name())
            }
        }

        impl $crate::json::FromJson for $name {
            fn from_json(value: &$crate::json::Value) -> ::std::result::Result<Self, $crate::error::JsonError> {
                let found = match value {
                    $crate::json::Value::String(name) => Self::from_java_name(name),
                    $crate::json::Value::Int(ordinal) => usize::try_from(*ordinal)
                        .ok()
                        .and_then(|index| Self::VARIANTS.get(index))
                        .map(|(variant, _)| *variant),
                    _ => None,
                };
                found.ok_or_else(|| $crate::error::JsonError::UnknownVariant {
                    path: String::new(),
                    value: $crate::json::write(value, $crate::json::WriteOptions::FASTJSON),
                })
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

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
