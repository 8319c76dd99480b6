//! Values during evaluation and how two of them compare, with Java's conversions as RocketMQ's
//! evaluator applies them: a property (always a string) meets a number by being parsed as that
//! number's type (`Integer.valueOf`, `Long.valueOf`, `Double.valueOf`), a boolean by
//! `Boolean.valueOf`; a failed parse is an evaluation error, which means "no match".

use std::borrow::Cow;
use std::cmp::Ordering;

use crate::EvalError;

#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    /// An integer literal that fits Java's `int` (RocketMQ narrows literals to it).
    Int(i32),
    Long(i64),
    Double(f64),
    Text(Cow<'a, str>),
}

impl Value<'_> {
    /// The same value, borrowing any text (no copy per evaluation).
    pub fn borrowed(&self) -> Value<'_> {
        match self {
            Value::Null => Value::Null,
            Value::Bool(value) => Value::Bool(*value),
            Value::Int(value) => Value::Int(*value),
            Value::Long(value) => Value::Long(*value),
            Value::Double(value) => Value::Double(*value),
            Value::Text(text) => Value::Text(Cow::Borrowed(text.as_ref())),
        }
    }

    /// Java's `equals`: same type and value (an `Integer` never equals a `Long`).
    pub fn same(&self, other: &Value<'_>) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Long(a), Value::Long(b)) => a == b,
            (Value::Double(a), Value::Double(b)) => a.to_bits() == b.to_bits(),
            (Value::Text(a), Value::Text(b)) => a == b,
            _ => false,
        }
    }
}

/// `Double.valueOf`: surrounding control characters and spaces ignored, an optional sign, a
/// decimal number (`5`, `5.`, `.5`, `5e3`) with an optional `f`/`d` suffix, or `NaN` /
/// `Infinity`. (Java's hexadecimal form is not read: such a property does not match.)
pub fn java_double(text: &str) -> Result<f64, EvalError> {
    let trimmed = text.trim_matches(|c: char| c <= ' ');
    let fail = || EvalError::NotANumber(text.to_owned());
    let (sign, rest) = match trimmed.as_bytes().first() {
        Some(b'-') => (-1.0, &trimmed[1..]),
        Some(b'+') => (1.0, &trimmed[1..]),
        _ => (1.0, trimmed),
    };
    match rest {
        "NaN" => return Ok(f64::NAN),
        "Infinity" => return Ok(sign * f64::INFINITY),
        _ => {}
    }
    let number = rest.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(rest);
    let plain = !number.is_empty()
        && number.bytes().any(|c| c.is_ascii_digit())
        && number
            .bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !plain || number.starts_with(['+', '-']) {
        return Err(fail());
    }
    number
        .parse::<f64>()
        .map(|value| sign * value)
        .map_err(|_| fail())
}

/// `Integer.valueOf` / `Long.valueOf`: an optional sign and ASCII digits, in range.
fn java_integer<T: std::str::FromStr>(text: &str) -> Result<T, EvalError> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(EvalError::NotANumber(text.to_owned()));
    }
    text.parse::<T>()
        .map_err(|_| EvalError::NotANumber(text.to_owned()))
}

/// `Boolean.valueOf`: `true` in any case, anything else false.
fn java_bool(text: &str) -> bool {
    text.eq_ignore_ascii_case("true")
}

/// Java's `Double.compareTo`: NaN above everything, -0.0 below 0.0.
fn double_order(a: f64, b: f64) -> Ordering {
    a.total_cmp(&b)
}

/// RocketMQ's comparison of two non-null values (its `__compare` with string conversion on).
/// Mismatched types it cannot bring together compare as "less".
pub fn compare(left: &Value<'_>, right: &Value<'_>) -> Result<Ordering, EvalError> {
    use Value::*;
    Ok(match (left, right) {
        (Bool(a), Bool(b)) => a.cmp(b),
        (Int(a), Int(b)) => a.cmp(b),
        (Long(a), Long(b)) => a.cmp(b),
        (Double(a), Double(b)) => double_order(*a, *b),
        (Text(a), Text(b)) => a.encode_utf16().cmp(b.encode_utf16()),
        // A boolean meeting a string is a cast error in RocketMQ's evaluator.
        (Bool(_), Text(_)) => return Err(EvalError::Incomparable),
        (Int(a), Long(b)) => i64::from(*a).cmp(b),
        (Int(a), Double(b)) => double_order(f64::from(*a), *b),
        (Int(a), Text(b)) => a.cmp(&java_integer::<i32>(b)?),
        (Long(a), Int(b)) => a.cmp(&i64::from(*b)),
        (Long(a), Double(b)) => double_order(*a as f64, *b),
        (Long(a), Text(b)) => a.cmp(&java_integer::<i64>(b)?),
        (Double(a), Int(b)) => double_order(*a, f64::from(*b)),
        (Double(a), Long(b)) => double_order(*a, *b as f64),
        (Double(a), Text(b)) => double_order(*a, java_double(b)?),
        (Text(a), Bool(b)) => java_bool(a).cmp(b),
        (Text(a), Int(b)) => java_integer::<i32>(a)?.cmp(b),
        (Text(a), Long(b)) => java_integer::<i64>(a)?.cmp(b),
        (Text(a), Double(b)) => double_order(java_double(a)?, *b),
        _ => Ordering::Less,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_parse_as_java_would() {
        assert_eq!(java_double(" 5 ").ok(), Some(5.0));
        assert_eq!(java_double("-1.5e2d").ok(), Some(-150.0));
        assert_eq!(java_double(".5").ok(), Some(0.5));
        assert!(java_double("Infinity").is_ok_and(f64::is_infinite));
        for bad in ["", "abc", "inf", "nan", "1e", "--1", "5 5", "0x10"] {
            assert!(java_double(bad).is_err(), "{bad}");
        }
        assert_eq!(java_integer::<i32>("+7").ok(), Some(7));
        assert!(java_integer::<i32>("3000000000").is_err());
        assert!(java_integer::<i32>(" 7").is_err());
        assert!(java_integer::<i64>("7.0").is_err());
    }

    #[test]
    fn mixed_types_convert_the_string_side() {
        let text = |s: &'static str| Value::Text(Cow::Borrowed(s));
        assert_eq!(
            compare(&text("10"), &Value::Int(9)).ok(),
            Some(Ordering::Greater)
        );
        assert_eq!(
            compare(&Value::Long(1 << 40), &text("5")).ok(),
            Some(Ordering::Greater)
        );
        assert!(compare(&text("ten"), &Value::Int(9)).is_err());
        assert!(compare(&text("3000000000"), &Value::Int(9)).is_err());
        assert_eq!(
            compare(&text("TRUE"), &Value::Bool(true)).ok(),
            Some(Ordering::Equal)
        );
        assert!(compare(&Value::Bool(true), &text("true")).is_err());
        assert_eq!(
            compare(&Value::Bool(true), &Value::Int(1)).ok(),
            Some(Ordering::Less)
        );
    }
}
