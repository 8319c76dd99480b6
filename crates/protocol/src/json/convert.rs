//! Typed conversion: Rust values to and from the JSON Java peers write and read.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::JsonError;

use super::{parse, write, Object, Value, WriteOptions};

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

/// A Java `Set` is written as an array; a repeated element read back counts once.
impl<T: ToJson> ToJson for BTreeSet<T> {
    fn to_json(&self) -> Value {
        Value::Array(self.iter().map(ToJson::to_json).collect())
    }
}

impl<T: FromJson + Ord> FromJson for BTreeSet<T> {
    fn from_json(value: &Value) -> Result<Self, JsonError> {
        Ok(Vec::<T>::from_json(value)?.into_iter().collect())
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
