//! The lenient parser: quoted, unquoted and object keys, single quotes, trailing commas.

use crate::error::JsonError;

use super::{Object, Value};

/// Deepest nesting the parser accepts; RocketMQ bodies nest fewer than ten levels.
pub const NESTING_DEPTH_MAX: usize = 128;

/// Parses fastjson-flavoured JSON text. Never panics; hostile input gives a `JsonError`.
pub fn parse(text: &[u8]) -> Result<Value, JsonError> {
    let mut parser = Parser::new(text);
    let value = parser.value(0)?;
    parser.finish()?;
    Ok(value)
}

/// A value as [`Parser::scalar`] reads it: strings are not copied until the caller keeps them.
#[derive(Debug)]
pub(crate) enum Scalar<'a> {
    Text(std::borrow::Cow<'a, str>),
    Other(Value),
}

pub(crate) struct Parser<'a> {
    text: &'a [u8],
    position: usize,
}

impl<'a> Parser<'a> {
    pub(crate) fn new(text: &'a [u8]) -> Self {
        Parser { text, position: 0 }
    }

    /// After the last value: only whitespace may follow.
    pub(crate) fn finish(&mut self) -> Result<(), JsonError> {
        self.skip_whitespace();
        if self.position != self.text.len() {
            return Err(self.error("trailing characters after the value"));
        }
        Ok(())
    }

    /// Whether the next value is an object.
    pub(crate) fn at_object(&mut self) -> bool {
        self.skip_whitespace();
        self.peek() == Some(b'{')
    }

    /// Reads an object member by member without building it: `member` is called with each key
    /// (borrowed from the text when it has no escapes) and must read exactly one value, with
    /// [`value`](Self::value) or another call of this. A key that is not a string or a bare
    /// word (fastjson allows numbers and objects) is passed in its JSON text form.
    pub(crate) fn object_members(
        &mut self,
        depth: usize,
        mut member: impl FnMut(&mut Self, std::borrow::Cow<'a, str>) -> Result<(), JsonError>,
    ) -> Result<(), JsonError> {
        if depth > NESTING_DEPTH_MAX {
            return Err(JsonError::TooDeep {
                max: NESTING_DEPTH_MAX,
            });
        }
        self.skip_whitespace();
        if self.peek() != Some(b'{') {
            return Err(self.error("expected an object"));
        }
        self.position += 1;
        loop {
            self.skip_whitespace();
            let key = match self.peek() {
                Some(b'}') => {
                    self.position += 1;
                    return Ok(());
                }
                None => return Err(self.error("unterminated object")),
                Some(byte) if byte.is_ascii_alphabetic() || byte == b'_' || byte == b'$' => {
                    std::borrow::Cow::Borrowed(self.bare_word_text())
                }
                Some(quote @ (b'"' | b'\'')) => self.string_text(quote)?,
                Some(_) => {
                    let start = self.position;
                    self.value(depth + 1)?;
                    String::from_utf8_lossy(&self.text[start..self.position])
                }
            };
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.error("expected ':' after object key"));
            }
            self.position += 1;
            member(self, key)?;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.position += 1,
                Some(b'}') => {}
                _ => return Err(self.error("expected ',' or '}' in object")),
            }
        }
    }

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

    /// The next value, a string borrowed from the text where it can be (see [`Scalar`]).
    pub(crate) fn scalar(&mut self, depth: usize) -> Result<Scalar<'a>, JsonError> {
        self.skip_whitespace();
        match self.peek() {
            Some(quote @ (b'"' | b'\'')) => self.string_text(quote).map(Scalar::Text),
            _ => self.value(depth).map(Scalar::Other),
        }
    }

    /// Reads past the next value, keeping nothing of it.
    pub(crate) fn skip_value(&mut self, depth: usize) -> Result<(), JsonError> {
        self.skip_whitespace();
        match self.peek() {
            Some(quote @ (b'"' | b'\'')) => self.string_text(quote).map(drop),
            Some(b'{') => self.object_members(depth, |parser, _| parser.skip_value(depth + 1)),
            _ => self.value(depth).map(drop),
        }
    }

    pub(crate) fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
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
        Value::String(self.bare_word_text().to_owned())
    }

    fn bare_word_text(&mut self) -> &'a str {
        let start = self.position;
        while let Some(byte) = self.peek() {
            if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'$' {
                self.position += 1;
            } else {
                break;
            }
        }
        // The scanned bytes are ASCII, so this cannot fail.
        std::str::from_utf8(&self.text[start..self.position]).unwrap_or_default()
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
        self.string_text(quote).map(std::borrow::Cow::into_owned)
    }

    /// A string's text: borrowed when it has no escapes (almost every header string), so the
    /// caller allocates only what it keeps, once, at its exact size.
    fn string_text(&mut self, quote: u8) -> Result<std::borrow::Cow<'a, str>, JsonError> {
        self.position += 1; // opening quote
        let text: &'a [u8] = self.text;
        let rest = text.get(self.position..).unwrap_or_default();
        let run = memchr::memchr2(quote, b'\\', rest).unwrap_or(rest.len());
        if rest.get(run) == Some(&quote) {
            let plain = std::str::from_utf8(&rest[..run])
                .map_err(|_| self.error("string is not valid UTF-8"))?;
            self.position += run + 1;
            return Ok(std::borrow::Cow::Borrowed(plain));
        }
        let mut bytes = Vec::with_capacity(run + 16);
        loop {
            // Copy the run up to the next quote or escape at once (headers are mostly runs).
            let rest = self.text.get(self.position..).unwrap_or_default();
            let run = memchr::memchr2(quote, b'\\', rest).unwrap_or(rest.len());
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
        String::from_utf8(bytes)
            .map(std::borrow::Cow::Owned)
            .map_err(|_| self.error("string is not valid UTF-8"))
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
