//! Which keys a configuration file may hold: Tidemark's own (snake_case fields and their
//! RocketMQ aliases), the rest of Apache RocketMQ's `broker.conf` names (read past with one
//! warning, so an Apache broker's file starts Tidemark as it is), and anything else (an error
//! suggesting the nearest key Tidemark reads).

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde::de::{self, Deserialize, Visitor};

use super::BrokerConfig;

/// Every name `BrokerConfig` deserializes: each field's own and its aliases.
pub(crate) fn tidemark_keys() -> &'static BTreeSet<&'static str> {
    static KEYS: OnceLock<BTreeSet<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut recorder = FieldNames(None);
        // The recorder ends every deserialization with an error once it has the names.
        let _ = BrokerConfig::deserialize(&mut recorder);
        recorder.0.unwrap_or_default().iter().copied().collect()
    })
}

/// Apache RocketMQ's `broker.conf` property names (see the file's header).
fn apache_keys() -> &'static BTreeSet<&'static str> {
    static KEYS: OnceLock<BTreeSet<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| {
        include_str!("apache_keys.txt")
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .collect()
    })
}

/// Takes the keys only Apache's broker reads out of `table` and returns them, sorted. A key
/// neither reads is an error naming it, with the nearest key Tidemark reads when one is close.
pub(crate) fn take_apache_only(table: &mut toml::Table) -> Result<Vec<String>, String> {
    let ours = tidemark_keys();
    let mut apache_only = Vec::new();
    let mut unknown = Vec::new();
    for key in table.keys() {
        if ours.contains(key.as_str()) {
            continue;
        }
        if apache_keys().contains(key.as_str()) {
            apache_only.push(key.clone());
        } else {
            unknown.push(key.clone());
        }
    }
    if !unknown.is_empty() {
        let named: Vec<String> = unknown
            .iter()
            .map(|key| match nearest_key(key) {
                Some(nearest) => format!("`{key}` (did you mean `{nearest}`?)"),
                None => format!("`{key}`"),
            })
            .collect();
        let noun = if unknown.len() == 1 { "key" } else { "keys" };
        return Err(format!(
            "unknown {noun} {}: not a key of Tidemark's or of Apache RocketMQ's broker (Tidemark's \
             keys are listed in docs/book/src/reference/broker-config.md)",
            named.join(", ")
        ));
    }
    for key in &apache_only {
        table.remove(key);
    }
    apache_only.sort();
    Ok(apache_only)
}

/// The key Tidemark reads that `key` most likely meant: spelled in the same style (camelCase
/// or snake_case) where one is close enough to be a slip of the keyboard.
fn nearest_key(key: &str) -> Option<&'static str> {
    let folded = fold(key);
    tidemark_keys()
        .iter()
        .map(|candidate| (strsim::levenshtein(&folded, &fold(candidate)), *candidate))
        .filter(|(distance, _)| *distance <= (folded.len() / 4).max(2))
        .min_by_key(|(distance, candidate)| {
            (*distance, key.contains('_') != candidate.contains('_'))
        })
        .map(|(_, candidate)| candidate)
}

/// `listenPort` and `listen_port` alike: lower case without underscores.
fn fold(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// A deserializer that serves no data: it only keeps the field names a struct asks for.
struct FieldNames(Option<&'static [&'static str]>);

#[derive(Debug)]
struct NamesTaken;

impl std::fmt::Display for NamesTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names recorded")
    }
}

impl std::error::Error for NamesTaken {}

impl de::Error for NamesTaken {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        NamesTaken
    }
}

impl<'de> de::Deserializer<'de> for &mut FieldNames {
    type Error = NamesTaken;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, NamesTaken> {
        Err(NamesTaken)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, NamesTaken> {
        self.0 = Some(fields);
        Err(NamesTaken)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_are_the_fields_and_their_aliases() {
        let keys = tidemark_keys();
        for name in [
            "broker_name",
            "brokerName",
            "grpc_listen_port",
            "grpcServerPort",
        ] {
            assert!(keys.contains(name), "{name} missing from {keys:?}");
        }
        assert!(
            !keys.contains("config_file"),
            "a skipped field is not a key"
        );
    }

    #[test]
    fn apache_keys_tidemark_ignores_are_taken_out_and_the_rest_stay() {
        let mut table: toml::Table =
            "brokerName = \"b\"\nauthenticationEnabled = true\nenableDLegerCommitLog = false\n"
                .parse()
                .expect("toml");
        let taken = take_apache_only(&mut table).expect("all known");
        assert_eq!(taken, ["authenticationEnabled", "enableDLegerCommitLog"]);
        assert_eq!(table.keys().collect::<Vec<_>>(), ["brokerName"]);
    }

    #[test]
    fn an_unknown_key_names_the_nearest_in_its_own_style() {
        let mut table: toml::Table = "brokre_name = 1\nlistenPrt = 2\n".parse().expect("toml");
        let message = take_apache_only(&mut table).expect_err("unknown");
        assert!(
            message.contains("`brokre_name` (did you mean `broker_name`?)")
                && message.contains("`listenPrt` (did you mean `listenPort`?)"),
            "{message}"
        );
        assert_eq!(nearest_key("listenPrt"), Some("listenPort"));
        assert_eq!(nearest_key("completely_different_thing"), None);
        assert_eq!(
            table.len(),
            2,
            "nothing is taken from a file that is refused"
        );
    }
}
