//! The one mechanism that moves typed custom headers in and out of a command's `extFields`.
//!
//! RocketMQ carries every request/response "custom header" as a string→string map. A typed
//! header is declared once with [`command_header!`](crate::command_header); the macro writes
//! both directions, so the key names, the required/optional rules and the value syntax cannot
//! drift apart between encoder and decoder.

use crate::error::HeaderError;

/// A command's `extFields`: string keys to string values, in insertion order.
///
/// Java keeps a `HashMap`, so peers never rely on order; keeping insertion order makes our
/// own output deterministic. Lookups are linear: headers have a few dozen keys at most.
///
/// Every key and value lives in one string, so decoding a header costs two allocations rather
/// than two per field (a pull request has a dozen fields, and every request has a header). A
/// replaced or removed value leaves its old bytes behind until the fields are dropped.
#[derive(Clone, Default)]
pub struct ExtFields {
    /// Boxed so a command stays small (results carry commands as errors), and absent until the
    /// first field so a command without fields allocates nothing.
    inner: Option<Box<Inner>>,
}

#[derive(Clone, Default)]
struct Inner {
    text: String,
    entries: Vec<Entry>,
}

/// Where one field's key and value lie in [`ExtFields::text`].
#[derive(Clone, Copy)]
struct Entry {
    key_start: usize,
    key_end: usize,
    value_start: usize,
    value_end: usize,
}

/// Fields whose values never reach a log: an ACL account's secret (the ACL admin requests carry
/// it), a session token, a signature.
const SECRET_FIELDS: [&str; 3] = ["secretKey", "SecurityToken", "Signature"];

impl std::fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(key, value)| {
                let shown = if SECRET_FIELDS.contains(&key) {
                    "<redacted>"
                } else {
                    value
                };
                (key, shown)
            }))
            .finish()
    }
}

/// Equal when they hold the same fields in the same order, whatever bytes replaced values left.
impl PartialEq for ExtFields {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for ExtFields {}

impl Inner {
    fn key(&self, entry: &Entry) -> &str {
        &self.text[entry.key_start..entry.key_end]
    }

    fn value(&self, entry: &Entry) -> &str {
        &self.text[entry.value_start..entry.value_end]
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.entries.iter().position(|entry| self.key(entry) == key)
    }

    /// Appends `text` to the shared string; where it lies.
    fn push_text(&mut self, text: &str) -> (usize, usize) {
        let start = self.text.len();
        self.text.push_str(text);
        (start, self.text.len())
    }
}

impl ExtFields {
    pub fn new() -> Self {
        Self::default()
    }

    /// Room for `fields` entries without growing.
    pub fn with_capacity(fields: usize) -> Self {
        Self {
            inner: Some(Box::new(Inner {
                text: String::with_capacity(fields * 24),
                entries: Vec::with_capacity(fields),
            })),
        }
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        let inner = self.inner.as_deref()?;
        inner
            .position(key)
            .map(|index| inner.value(&inner.entries[index]))
    }

    /// Sets `key`, replacing an earlier value (Java's map semantics: the last write wins).
    pub fn insert(&mut self, key: impl AsRef<str>, value: impl AsRef<str>) {
        let value = value.as_ref();
        self.insert_with(key.as_ref(), |text| text.push_str(value));
    }

    /// [`ExtFields::insert`] with the value written by `write` straight into the fields' text,
    /// so a typed header's numbers need no string of their own on the way in.
    pub fn insert_with(&mut self, key: &str, write: impl FnOnce(&mut String)) {
        let inner = self.inner.get_or_insert_with(Box::default);
        let existing = inner.position(key);
        let (key_start, key_end) = match existing {
            Some(_) => (0, 0),
            None => inner.push_text(key),
        };
        let value_start = inner.text.len();
        write(&mut inner.text);
        let value_end = inner.text.len();
        match existing {
            Some(index) => {
                let entry = &mut inner.entries[index];
                entry.value_start = value_start;
                entry.value_end = value_end;
            }
            None => inner.entries.push(Entry {
                key_start,
                key_end,
                value_start,
                value_end,
            }),
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        let inner = self.inner.as_deref_mut()?;
        let index = inner.position(key)?;
        let entry = inner.entries.remove(index);
        Some(inner.value(&entry).to_owned())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.inner.as_deref().into_iter().flat_map(|inner| {
            inner
                .entries
                .iter()
                .map(|entry| (inner.key(entry), inner.value(entry)))
        })
    }

    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |inner| inner.entries.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies every field of `other` into `self` (later values win).
    pub fn extend_from(&mut self, other: &ExtFields) {
        for (key, value) in other.iter() {
            self.insert(key, value);
        }
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut fields = ExtFields::new();
        for (key, value) in iter {
            fields.insert(key, value);
        }
        fields
    }
}

/// A value type that can live in `extFields`, written the way Java's `String.valueOf` writes it
/// and read the way `RemotingCommand.decodeCommandCustomHeader` reads it.
pub trait ExtValue: Sized {
    /// What the value should look like, for error messages.
    const EXPECTED: &'static str;
    /// Whether the empty string is a real value (true only for strings). For other types an
    /// empty value reads as absent, as Java's binary header decoder turns it into null.
    const EMPTY_IS_VALUE: bool = false;
    /// Appends the value's text to `out`.
    fn write_ext(&self, out: &mut String);
    fn from_ext(text: &str) -> Option<Self>;

    /// The value's text on its own.
    fn to_ext(&self) -> String {
        let mut out = String::new();
        self.write_ext(&mut out);
        out
    }
}

impl ExtValue for String {
    const EXPECTED: &'static str = "a string";
    const EMPTY_IS_VALUE: bool = true;
    fn write_ext(&self, out: &mut String) {
        out.push_str(self);
    }
    fn from_ext(text: &str) -> Option<Self> {
        Some(text.to_owned())
    }
}

impl ExtValue for i32 {
    const EXPECTED: &'static str = "a 32-bit integer";
    fn write_ext(&self, out: &mut String) {
        out.push_str(itoa::Buffer::new().format(*self));
    }
    fn from_ext(text: &str) -> Option<Self> {
        text.parse().ok()
    }
}

impl ExtValue for i64 {
    const EXPECTED: &'static str = "a 64-bit integer";
    fn write_ext(&self, out: &mut String) {
        out.push_str(itoa::Buffer::new().format(*self));
    }
    fn from_ext(text: &str) -> Option<Self> {
        text.parse().ok()
    }
}

impl ExtValue for bool {
    const EXPECTED: &'static str = "a boolean";
    fn write_ext(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
    /// `Boolean.parseBoolean`: only "true" in any case is true; everything else is false
    /// (C++ 2.1 clients send "0"/"1", which Java also reads as false).
    fn from_ext(text: &str) -> Option<Self> {
        Some(text.eq_ignore_ascii_case("true"))
    }
}

/// Reads a field that must be present.
pub fn read_required<T: ExtValue>(fields: &ExtFields, key: &'static str) -> Result<T, HeaderError> {
    match read_optional(fields, key)? {
        Some(value) => Ok(value),
        None => Err(HeaderError::MissingField { field: key }),
    }
}

/// Reads a field that may be absent; present but unparsable is an error naming the field.
pub fn read_optional<T: ExtValue>(
    fields: &ExtFields,
    key: &'static str,
) -> Result<Option<T>, HeaderError> {
    let Some(text) = fields.get(key) else {
        return Ok(None);
    };
    if text.is_empty() && !T::EMPTY_IS_VALUE {
        return Ok(None);
    }
    T::from_ext(text)
        .map(Some)
        .ok_or_else(|| HeaderError::InvalidField {
            field: key,
            value: text.to_owned(),
            expected: T::EXPECTED,
        })
}

/// A typed custom header: converts to and from a command's ext fields.
pub trait CommandHeader: Sized {
    /// Writes every field that has a value.
    fn write_to(&self, fields: &mut ExtFields);
    /// Reads the header; a missing required field or an unparsable value is an error.
    fn read_from(fields: &ExtFields) -> Result<Self, HeaderError>;

    /// How many fields the header has at most (room reserved for them up front).
    const FIELDS: usize = 0;

    /// The header as a fresh ext-field map.
    fn to_ext_fields(&self) -> ExtFields {
        let mut fields = if Self::FIELDS == 0 {
            ExtFields::new()
        } else {
            ExtFields::with_capacity(Self::FIELDS)
        };
        self.write_to(&mut fields);
        fields
    }
}

/// Declares a typed custom header. Each field is one of
/// - `required name: T = "key"` — must be present (Java `@CFNotNull`),
/// - `optional name: T = "key"` — `Option<T>`, written only when `Some`,
/// - `defaulted name: T = "key" (expr)` — always written, `expr` when absent on read.
#[macro_export]
macro_rules! command_header {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $kind:ident $field:ident : $ty:ty = $key:literal $(($default:expr))?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $crate::command_header!(@type $kind $ty), )*
        }

        impl $crate::ext_fields::CommandHeader for $name {
            const FIELDS: usize = <[&str]>::len(&[$($key),*]);

            fn write_to(&self, fields: &mut $crate::ext_fields::ExtFields) {
                $( $crate::command_header!(@write $kind fields, $key, &self.$field); )*
            }

            fn read_from(
                fields: &$crate::ext_fields::ExtFields,
            ) -> ::std::result::Result<Self, $crate::error::HeaderError> {
                Ok(Self {
                    $( $field: $crate::command_header!(@read $kind fields, $key, $ty $(, $default)?), )*
                })
            }
        }
    };

    (@type required $ty:ty) => { $ty };
    (@type optional $ty:ty) => { ::std::option::Option<$ty> };
    (@type defaulted $ty:ty) => { $ty };

    (@write required $fields:ident, $key:literal, $value:expr) => {
        $fields.insert_with($key, |out| $crate::ext_fields::ExtValue::write_ext($value, out))
    };
    (@write defaulted $fields:ident, $key:literal, $value:expr) => {
        $fields.insert_with($key, |out| $crate::ext_fields::ExtValue::write_ext($value, out))
    };
    (@write optional $fields:ident, $key:literal, $value:expr) => {
        if let Some(value) = $value {
            $fields.insert_with($key, |out| $crate::ext_fields::ExtValue::write_ext(value, out));
        }
    };

    (@read required $fields:ident, $key:literal, $ty:ty) => {
        $crate::ext_fields::read_required::<$ty>($fields, $key)?
    };
    (@read optional $fields:ident, $key:literal, $ty:ty) => {
        $crate::ext_fields::read_optional::<$ty>($fields, $key)?
    };
    (@read defaulted $fields:ident, $key:literal, $ty:ty, $default:expr) => {
        $crate::ext_fields::read_optional::<$ty>($fields, $key)?.unwrap_or($default)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::command_header! {
        /// A header exercising every field kind.
        pub struct Sample {
            required topic: String = "topic",
            required queue_id: i32 = "queueId",
            optional offset: i64 = "offset",
            defaulted unit_mode: bool = "unitMode" (false),
        }
    }

    #[test]
    fn round_trips_and_names_missing_fields() {
        let header = Sample {
            topic: "T".into(),
            queue_id: 3,
            offset: None,
            unit_mode: true,
        };
        let fields = header.to_ext_fields();
        assert_eq!(fields.get("queueId"), Some("3"));
        assert_eq!(fields.get("offset"), None);
        assert_eq!(Sample::read_from(&fields), Ok(header));

        let mut missing = fields.clone();
        missing.remove("queueId");
        assert_eq!(
            Sample::read_from(&missing),
            Err(HeaderError::MissingField { field: "queueId" })
        );

        let mut bad = fields;
        bad.insert("offset", "twelve");
        assert_eq!(
            Sample::read_from(&bad),
            Err(HeaderError::InvalidField {
                field: "offset",
                value: "twelve".into(),
                expected: "a 64-bit integer"
            })
        );
    }

    #[test]
    fn a_header_written_over_fields_replaces_their_values_in_place() {
        assert_eq!(Sample::FIELDS, 4);
        let mut fields: ExtFields = [("queueId", "9"), ("extra", "kept")].into_iter().collect();
        let header = Sample {
            topic: "T".into(),
            queue_id: -12,
            offset: Some(i64::MIN),
            unit_mode: false,
        };
        header.write_to(&mut fields);
        let written: Vec<(&str, &str)> = fields.iter().collect();
        assert_eq!(
            written,
            [
                ("queueId", "-12"),
                ("extra", "kept"),
                ("topic", "T"),
                ("offset", "-9223372036854775808"),
                ("unitMode", "false"),
            ]
        );
        assert_eq!(Sample::read_from(&fields), Ok(header));
    }

    #[test]
    fn booleans_parse_like_java_and_empty_numbers_are_absent() {
        let fields: ExtFields = [
            ("topic", ""),
            ("queueId", "1"),
            ("offset", ""),
            ("unitMode", "TRUE"),
        ]
        .into_iter()
        .collect();
        let header = Sample::read_from(&fields).expect("valid");
        assert_eq!(header.topic, "");
        assert_eq!(header.offset, None);
        assert!(header.unit_mode);
        let fields: ExtFields = [("topic", "t"), ("queueId", "1"), ("unitMode", "1")]
            .into_iter()
            .collect();
        assert!(!Sample::read_from(&fields).expect("valid").unit_mode);
    }

    #[test]
    fn a_replaced_value_keeps_its_place_and_equality_ignores_the_old_bytes() {
        let mut fields = ExtFields::new();
        assert!(fields.is_empty());
        fields.insert("a", "1");
        fields.insert("b", "2");
        fields.insert("a", "longer one");
        assert_eq!(fields.len(), 2);
        assert_eq!(
            fields.iter().collect::<Vec<_>>(),
            vec![("a", "longer one"), ("b", "2")]
        );
        let fresh: ExtFields = [("a", "longer one"), ("b", "2")].into_iter().collect();
        assert_eq!(fields, fresh);
        assert_eq!(fields.remove("a"), Some("longer one".to_owned()));
        assert_eq!(fields.remove("a"), None);
        assert_eq!(fields.get("b"), Some("2"));
        assert_ne!(fields, fresh);
        let reordered: ExtFields = [("b", "2"), ("a", "longer one")].into_iter().collect();
        assert_ne!(fresh, reordered, "order is part of the value");
    }

    #[test]
    fn secrets_are_redacted_in_debug_output() {
        let fields: ExtFields = [("topic", "t"), ("secretKey", "hush")]
            .into_iter()
            .collect();
        let shown = format!("{fields:?}");
        assert!(shown.contains("\"topic\": \"t\""), "{shown}");
        assert!(!shown.contains("hush"), "{shown}");
    }
}
