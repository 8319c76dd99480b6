//! `json_object!` and `json_enum!`: body types declared once, in fastjson's property order.

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
