//! The writer, in fastjson's or standard key style, compact or tab-indented.

use std::fmt::Write as _;

use super::{Object, Value};

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

/// Writes `text` as a JSON string literal.
pub(crate) fn write_string(out: &mut String, text: &str) {
    out.push('"');
    // Most strings need no escape: copy those whole.
    if !text
        .bytes()
        .any(|byte| byte == b'"' || byte == b'\\' || byte < 0x20)
    {
        out.push_str(text);
        out.push('"');
        return;
    }
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
