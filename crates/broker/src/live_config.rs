//! Broker settings an operator changes while the broker runs (UPDATE_BROKER_CONFIG, mqadmin
//! `updateBrokerConfig`), and the whole configuration as GET_BROKER_CONFIG shows it.
//!
//! The live keys ([`live_keys`], declared in [`crate::live_keys`]) are read where they are used,
//! through [`LiveConfig::get`] (the store through its [`TuningSource`]), so a new value takes
//! effect at the next request, retention pass or round of a periodic task. Every other key
//! shapes something built once at start; an update naming one is refused with RocketMQ's
//! black-list answer and the reason, and an unknown key is refused rather than ignored as
//! RocketMQ ignores it. An update is all or nothing: every key is checked before anything
//! changes, the file is rewritten, then the values apply.
//!
//! Updates are written back to the file the broker was started with (`BrokerConfig::
//! config_file`), editing only the updated keys' lines so comments and layout stay, and only
//! when the file still loads afterwards; a broker configured in code keeps them in
//! `<store root>/config/liveBrokerConfig.properties`, read again at the next start.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tidemark_protocol::body::DataVersion;
use tidemark_protocol::json::JsonBody;
use tidemark_storage::io::Storage;

use tidemark_store::{StoreTuning, TuningSource};

use crate::config::BrokerConfig;
pub use crate::live_keys::LiveSettings;
use crate::live_keys::{live_key, start_only_reason, LiveKey, LIVE};

/// The names of the keys an update may change, as GET_BROKER_CONFIG shows them (snake_case
/// and RocketMQ's other spellings are taken too).
pub fn live_keys() -> impl Iterator<Item = &'static str> {
    LIVE.iter().map(|key| key.name)
}

/// Why an update was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// RocketMQ's answer for a key that may not change (code NO_PERMISSION); RocketMQ's tools
    /// look for the prefix.
    #[error("Can not update config in black list. {key} cannot change while the broker runs: {reason}. Change it in the configuration file and restart.")]
    ReadOnly { key: String, reason: &'static str },
    #[error("unknown broker config key {key:?}")]
    Unknown { key: String },
    #[error("invalid value for {key}: {reason}")]
    Invalid { key: String, reason: String },
    #[error("the update could not be written to {path}: {reason}")]
    Persist { path: PathBuf, reason: String },
}

/// The live settings, their data version and where updates are written. Owns its lock; what it
/// returns is a snapshot that later updates leave alone.
#[derive(Debug)]
pub struct LiveConfig {
    inner: Mutex<Inner>,
    /// Where updates are written, and whether it is a TOML file.
    file: PathBuf,
    toml: bool,
    /// Whether `file` is the broker's configuration file, which must still load after an update.
    checked: bool,
    storage: Arc<dyn Storage>,
    /// Serialises updates (check, write, apply), so two never interleave their file writes.
    updating: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Inner {
    /// Shared with readers: a request takes the snapshot without copying its text values.
    settings: Arc<LiveSettings>,
    version: DataVersion,
}

/// Where a broker configured in code keeps its live updates.
pub fn updates_file(config: &BrokerConfig) -> PathBuf {
    config
        .store_path_root_dir
        .join("config")
        .join("liveBrokerConfig.properties")
}

impl LiveConfig {
    /// The live settings of `config`; a broker configured in code also takes the updates it
    /// kept from an earlier run (unreadable or invalid ones are logged and skipped).
    pub fn new(config: &BrokerConfig, storage: Arc<dyn Storage>, now_ms: i64) -> Self {
        let mut settings = LiveSettings::of(config);
        let (file, toml) = match &config.config_file {
            Some(path) => (
                path.clone(),
                path.extension()
                    .is_some_and(|extension| extension == "toml"),
            ),
            None => {
                let path = updates_file(config);
                if let Ok(Some(bytes)) = read(&*storage, &path) {
                    let text = String::from_utf8_lossy(&bytes);
                    for (key, value) in crate::config::properties_to_table(&text) {
                        let text = value_text(value);
                        let applied = live_key(&key)
                            .ok_or_else(|| "not a live key".to_owned())
                            .and_then(|live| settings.set(live, &text));
                        if let Err(reason) = applied {
                            tracing::warn!(file = %path.display(), %key, %reason, "live config update skipped");
                        }
                    }
                }
                (path, false)
            }
        };
        Self {
            inner: Mutex::new(Inner {
                settings: Arc::new(settings),
                version: DataVersion {
                    counter: 0,
                    timestamp: now_ms,
                    state_version: None,
                },
            }),
            file,
            toml,
            checked: config.config_file.is_some(),
            storage,
            updating: tokio::sync::Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current values.
    pub fn get(&self) -> Arc<LiveSettings> {
        self.lock().settings.clone()
    }

    /// The data version as JSON (GET_BROKER_CONFIG's `version`).
    pub fn version_json(&self) -> String {
        String::from_utf8_lossy(&self.lock().version.to_json_bytes()).into_owned()
    }

    /// The whole configuration as RocketMQ's properties text: every key of `config` under its
    /// RocketMQ name, the live ones with their current values.
    pub fn properties(&self, config: &BrokerConfig) -> String {
        let mut entries: std::collections::BTreeMap<String, String> =
            match toml::Value::try_from(config) {
                Ok(toml::Value::Table(table)) => table
                    .into_iter()
                    .map(|(key, value)| (key, value_text(value)))
                    .collect(),
                _ => Default::default(),
            };
        for (key, value) in self.get().entries() {
            entries.insert(key.name.to_owned(), value);
        }
        // Facts RocketMQ's broker config carries that tools read (mqadmin `exportConfigs` fails
        // without them): Tidemark runs no filter servers, and serves no TLS yet.
        entries.insert("filterServerNums".to_owned(), "0".to_owned());
        entries.insert("useTLS".to_owned(), "false".to_owned());
        let mut text = String::new();
        for (key, value) in entries {
            text.push_str(&key);
            text.push('=');
            text.push_str(&value);
            text.push('\n');
        }
        text
    }

    /// Applies `updates` (key, value as text), all or nothing: checked, written to the file,
    /// then live. Returns the settings before and after.
    pub async fn update(
        &self,
        updates: &[(String, String)],
        now_ms: i64,
    ) -> Result<(Arc<LiveSettings>, Arc<LiveSettings>), UpdateError> {
        let _updating = self.updating.lock().await;
        let before = self.get();
        let mut after = LiveSettings::clone(&before);
        let mut changed: Vec<LiveKey> = Vec::new();
        for (key, value) in updates {
            let Some(live) = live_key(key) else {
                return Err(refusal(key));
            };
            after
                .set(live, value)
                .map_err(|reason| UpdateError::Invalid {
                    key: key.clone(),
                    reason,
                })?;
            changed.push(*live);
        }
        let lines: Vec<(LiveKey, String)> = after
            .entries()
            .into_iter()
            .filter(|(key, _)| changed.contains(key))
            .collect();
        let (file, toml, storage) = (self.file.clone(), self.toml, self.storage.clone());
        let checked = self.checked;
        let written = tokio::task::spawn_blocking(move || {
            rewrite_file(&*storage, &file, toml, checked, &lines)
        })
        .await
        .unwrap_or_else(|failure| Err(Unwritten::Failed(failure.to_string())));
        match written {
            Ok(()) => {}
            Err(Unwritten::WouldNotLoad(reason)) => {
                let keys: Vec<&str> = changed.iter().map(|key| key.name).collect();
                return Err(UpdateError::Invalid {
                    key: keys.join(", "),
                    reason: format!(
                        "{} would not load at the next start with it: {reason}",
                        self.file.display()
                    ),
                });
            }
            Err(Unwritten::Failed(reason)) => {
                return Err(UpdateError::Persist {
                    path: self.file.clone(),
                    reason,
                })
            }
        }
        let after = Arc::new(after);
        let mut inner = self.lock();
        inner.settings = after.clone();
        inner.version = inner.version.next(now_ms);
        Ok((before, after))
    }
}

/// The store reads retention and its flush interval here, at each pass and round.
impl TuningSource for LiveConfig {
    fn store_tuning(&self) -> StoreTuning {
        self.get().store_tuning()
    }
}

/// Why `key`, not a live key, is refused.
fn refusal(key: &str) -> UpdateError {
    match start_only_reason(key) {
        Some(reason) => UpdateError::ReadOnly {
            key: key.to_owned(),
            reason,
        },
        // A key added to the configuration without a word on whether it may change: it is
        // read at start until someone makes it live.
        None if is_config_key(key) => UpdateError::ReadOnly {
            key: key.to_owned(),
            reason: "it is read when the broker starts",
        },
        None => UpdateError::Unknown {
            key: key.to_owned(),
        },
    }
}

/// A value as a properties file writes it.
fn value_text(value: toml::Value) -> String {
    match value {
        toml::Value::String(text) => text,
        toml::Value::Integer(number) => number.to_string(),
        toml::Value::Float(number) => number.to_string(),
        toml::Value::Boolean(flag) => flag.to_string(),
        other => format!("{other:?}"),
    }
}

/// Whether `key` is any key of the broker's configuration (in any spelling it accepts).
fn is_config_key(key: &str) -> bool {
    crate::config::tidemark_keys().contains(key)
}

/// The file's bytes (or its backup's, when a write died half-way); `None` when neither exists.
fn read(storage: &dyn Storage, path: &Path) -> Result<Option<Vec<u8>>, String> {
    tidemark_storage::atomic_file::load(storage, path, |bytes| {
        Ok::<_, std::convert::Infallible>(bytes.to_vec())
    })
    .map_err(|failure| failure.to_string())
}

/// Why an update was not written.
enum Unwritten {
    /// The configuration file would not load with the new lines (a value a properties file
    /// reads back as another type, say); nothing was written.
    WouldNotLoad(String),
    Failed(String),
}

/// Rewrites `path` with `lines`; with `checked` (the broker's own configuration file) only
/// when the result still loads, so an update can never keep the broker from starting again.
fn rewrite_file(
    storage: &dyn Storage,
    path: &Path,
    toml: bool,
    checked: bool,
    lines: &[(LiveKey, String)],
) -> Result<(), Unwritten> {
    let text = match read(storage, path) {
        Ok(Some(bytes)) => {
            String::from_utf8(bytes).map_err(|_| Unwritten::Failed("not UTF-8".to_owned()))?
        }
        Ok(None) => String::new(),
        Err(failure) => return Err(Unwritten::Failed(failure)),
    };
    let rewritten = rewrite(&text, toml, lines);
    if checked {
        loads(&rewritten, toml).map_err(Unwritten::WouldNotLoad)?;
    }
    tidemark_storage::atomic_file::write_atomically(storage, path, rewritten.as_bytes(), true)
        .map_err(|failure| Unwritten::Failed(failure.to_string()))
}

/// Whether `text` reads as a configuration, as `BrokerConfig::load` reads it.
fn loads(text: &str, toml: bool) -> Result<(), String> {
    let mut table = if toml {
        text.parse::<toml::Table>()
            .map_err(|error| error.to_string())?
    } else {
        crate::config::properties_to_table(text)
    };
    crate::config::take_apache_only(&mut table)?;
    toml::Value::Table(table)
        .try_into::<BrokerConfig>()
        .map(|_| ())
        .map_err(|error| error.to_string())
}

/// The name a properties file gives `key` when it adds the line: RocketMQ's, when the
/// configuration reads that spelling, else the field's (Tidemark's own keys).
fn properties_name(key: &LiveKey) -> &'static str {
    std::iter::once(key.name)
        .chain(key.aliases.iter().copied())
        .find(|name| is_config_key(name))
        .unwrap_or(key.field)
}

/// `text` as a TOML basic string: quoted, with `"`, `\\` and control characters escaped.
fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `text` with each key's line given the new value (in the spelling the file uses), or the key
/// added: at the end of a properties file, before the first table of a TOML file. Text values
/// are quoted in TOML.
pub(crate) fn rewrite(text: &str, toml: bool, updates: &[(LiveKey, String)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for (key, value) in updates {
        let value = if toml && key.text {
            toml_string(value)
        } else {
            value.clone()
        };
        let mut found = false;
        for line in lines.iter_mut() {
            let trimmed = line.trim_start();
            if toml && trimmed.starts_with('[') {
                break;
            }
            if trimmed.starts_with('#') || trimmed.starts_with('!') {
                continue;
            }
            let Some((name, _)) =
                trimmed.split_once(if toml { &['='][..] } else { &['=', ':'][..] })
            else {
                continue;
            };
            let name = name.trim();
            if live_key(name) == Some(key) {
                *line = if toml {
                    format!("{name} = {value}")
                } else {
                    format!("{name}={value}")
                };
                found = true;
                break;
            }
        }
        if found {
            continue;
        }
        if toml {
            let first_table = lines
                .iter()
                .position(|line| line.trim_start().starts_with('['))
                .unwrap_or(lines.len());
            lines.insert(first_table, format!("{} = {value}", key.field));
        } else {
            lines.push(format!("{}={value}", properties_name(key)));
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> LiveKey {
        *live_key(name).expect("live")
    }

    #[test]
    fn rewriting_keeps_everything_else() {
        let properties = "# broker\nbrokerName=b\nbrokerPermission = 6\n";
        assert_eq!(
            rewrite(
                properties,
                false,
                &[
                    (key("brokerPermission"), "4".into()),
                    (key("traceOn"), "false".into()),
                    // Tidemark's own key, which the properties file reads in snake_case only.
                    (key("consumerStuckThresholdMs"), "5".into()),
                ]
            ),
            "# broker\nbrokerName=b\nbrokerPermission=4\ntraceOn=false\n\
             consumer_stuck_threshold_ms=5\n"
        );
        let toml = "# broker\nbroker_name = \"b\"\nlong_polling_enable = true\n\n[extra]\nx = 1\n";
        assert_eq!(
            rewrite(
                toml,
                true,
                &[
                    (key("longPollingEnable"), "false".into()),
                    (key("brokerPermission"), "2".into()),
                    (key("deleteWhen"), "05".into()),
                ]
            ),
            "# broker\nbroker_name = \"b\"\nlong_polling_enable = false\n\nbroker_permission = 2\n\
             delete_when = \"05\"\n[extra]\nx = 1\n"
        );
    }

    /// What an update writes, the file reads back: checked before anything is written.
    #[test]
    fn a_line_the_file_would_not_read_back_is_caught() {
        assert!(loads("deleteWhen=05\nfileReservedTime=48\n", false).is_ok());
        // A properties file reads 7 as a number, and regionId is text.
        assert!(loads("regionId=7\n", false).is_err());
    }

    #[test]
    fn the_whole_configuration_is_shown_under_rocketmq_names() {
        let config = BrokerConfig::default();
        let live = LiveConfig::new(
            &config,
            Arc::new(tidemark_storage::sim::SimStorage::new()),
            1,
        );
        let text = live.properties(&config);
        for line in [
            "brokerName=broker-a",
            "brokerIP1=127.0.0.1",
            "brokerRole=ASYNC_MASTER",
            "flushDiskType=ASYNC_FLUSH",
            "storePathRootDir=store",
            "transactionTimeOut=6000",
            "brokerPermission=6",
            "deleteWhen=04",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(
            !text.contains("grpcTlsCertificate"),
            "None values are left out"
        );
    }
}
