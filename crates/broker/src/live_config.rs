//! Broker settings an operator changes while the broker runs (UPDATE_BROKER_CONFIG, mqadmin
//! `updateBrokerConfig`), and the whole configuration as GET_BROKER_CONFIG shows it.
//!
//! Only the keys in [`LIVE_KEYS`] change at run time: each is read where it is used, through
//! [`LiveConfig::get`], so a new value takes effect on the next request. Every other key is read
//! once while the broker starts; an update naming one is refused with RocketMQ's black-list
//! answer, and an unknown key is refused rather than ignored as RocketMQ ignores it. An update is
//! all or nothing: every key is checked before anything changes, the file is rewritten, then the
//! values apply.
//!
//! Updates are written back to the file the broker was started with (`BrokerConfig::
//! config_file`), editing only the updated keys' lines so comments and layout stay; a broker
//! configured in code keeps them in `<store root>/config/liveBrokerConfig.properties`, read
//! again at the next start.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tidemark_protocol::body::DataVersion;
use tidemark_protocol::json::JsonBody;
use tidemark_storage::io::Storage;

use crate::config::BrokerConfig;

/// The keys an update may change, by RocketMQ's property name (snake_case spellings are taken
/// too).
pub const LIVE_KEYS: [&str; 11] = [
    "brokerPermission",
    "autoCreateSubscriptionGroup",
    "enablePropertyFilter",
    "longPollingEnable",
    "shortPollingTimeMills",
    "consumerStuckThresholdMs",
    "rejectTransactionMessage",
    "transactionTimeOut",
    "transactionCheckMax",
    "traceOn",
    "slaveReadEnable",
];

/// The current values of the live keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveSettings {
    pub broker_permission: i32,
    pub auto_create_subscription_group: bool,
    pub enable_property_filter: bool,
    pub long_polling_enable: bool,
    pub short_polling_time_mills: u64,
    pub consumer_stuck_threshold_ms: u64,
    pub reject_transaction_message: bool,
    pub transaction_timeout: u64,
    pub transaction_check_max: u32,
    pub trace_on: bool,
    pub slave_read_enable: bool,
}

impl LiveSettings {
    fn of(config: &BrokerConfig) -> Self {
        Self {
            broker_permission: config.broker_permission,
            auto_create_subscription_group: config.auto_create_subscription_group,
            enable_property_filter: config.enable_property_filter,
            long_polling_enable: config.long_polling_enable,
            short_polling_time_mills: config.short_polling_time_mills,
            consumer_stuck_threshold_ms: config.consumer_stuck_threshold_ms,
            reject_transaction_message: config.reject_transaction_message,
            transaction_timeout: config.transaction_timeout,
            transaction_check_max: config.transaction_check_max,
            trace_on: config.trace_on,
            slave_read_enable: config.slave_read_enable,
        }
    }

    /// Sets one live key (RocketMQ's name) from its text.
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "brokerPermission" => {
                let permission = parse::<i32>(value)?;
                if !(0..8).contains(&permission) {
                    return Err("a permission is 0..7 (2 write, 4 read, 6 both)".to_owned());
                }
                self.broker_permission = permission;
            }
            "autoCreateSubscriptionGroup" => self.auto_create_subscription_group = boolean(value)?,
            "enablePropertyFilter" => self.enable_property_filter = boolean(value)?,
            "longPollingEnable" => self.long_polling_enable = boolean(value)?,
            "shortPollingTimeMills" => self.short_polling_time_mills = positive(value)?,
            "consumerStuckThresholdMs" => self.consumer_stuck_threshold_ms = positive(value)?,
            "rejectTransactionMessage" => self.reject_transaction_message = boolean(value)?,
            "transactionTimeOut" => self.transaction_timeout = positive(value)?,
            "transactionCheckMax" => {
                self.transaction_check_max =
                    u32::try_from(positive(value)?).map_err(|_| "too large".to_owned())?
            }
            "traceOn" => self.trace_on = boolean(value)?,
            "slaveReadEnable" => self.slave_read_enable = boolean(value)?,
            _ => return Err("not a live key".to_owned()),
        }
        Ok(())
    }

    /// The live keys as (RocketMQ name, text).
    fn entries(&self) -> [(&'static str, String); 11] {
        [
            ("brokerPermission", self.broker_permission.to_string()),
            (
                "autoCreateSubscriptionGroup",
                self.auto_create_subscription_group.to_string(),
            ),
            (
                "enablePropertyFilter",
                self.enable_property_filter.to_string(),
            ),
            ("longPollingEnable", self.long_polling_enable.to_string()),
            (
                "shortPollingTimeMills",
                self.short_polling_time_mills.to_string(),
            ),
            (
                "consumerStuckThresholdMs",
                self.consumer_stuck_threshold_ms.to_string(),
            ),
            (
                "rejectTransactionMessage",
                self.reject_transaction_message.to_string(),
            ),
            ("transactionTimeOut", self.transaction_timeout.to_string()),
            (
                "transactionCheckMax",
                self.transaction_check_max.to_string(),
            ),
            ("traceOn", self.trace_on.to_string()),
            ("slaveReadEnable", self.slave_read_enable.to_string()),
        ]
    }
}

fn parse<T: std::str::FromStr>(value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a number"))
}

fn positive(value: &str) -> Result<u64, String> {
    match parse::<u64>(value)? {
        0 => Err("must be above 0".to_owned()),
        number => Ok(number),
    }
}

fn boolean(value: &str) -> Result<bool, String> {
    match value.trim() {
        text if text.eq_ignore_ascii_case("true") => Ok(true),
        text if text.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(format!("{value:?} is not true or false")),
    }
}

/// snake_case → camelCase, for keys written the TOML way.
fn camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The live key `key` names (RocketMQ's name, or its snake_case form).
fn live_key(key: &str) -> Option<&'static str> {
    let wanted = if key.contains('_') {
        camel(key)
    } else {
        key.to_owned()
    };
    // transaction_timeout is RocketMQ's transactionTimeOut.
    LIVE_KEYS.into_iter().find(|live| {
        *live == wanted || (live.eq_ignore_ascii_case(&wanted) && *live == "transactionTimeOut")
    })
}

/// Why an update was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// RocketMQ's answer for a key that may not change (code NO_PERMISSION).
    #[error("Can not update config in black list. {key} is read when the broker starts; change it in the configuration file and restart (live keys: {})", LIVE_KEYS.join(", "))]
    ReadOnly { key: String },
    #[error("unknown broker config key {key:?}")]
    Unknown { key: String },
    #[error("invalid value for {key}: {reason}")]
    Invalid { key: String, reason: String },
    #[error("the update could not be written to {path}: {reason}")]
    Persist { path: PathBuf, reason: String },
}

/// The live settings, their data version and where updates are written. Owns its lock; what it
/// returns is a copy.
#[derive(Debug)]
pub struct LiveConfig {
    inner: Mutex<Inner>,
    /// Where updates are written, and whether it is a TOML file.
    file: PathBuf,
    toml: bool,
    storage: Arc<dyn Storage>,
    /// Serialises updates (check, write, apply), so two never interleave their file writes.
    updating: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Inner {
    settings: LiveSettings,
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
                    for (key, value) in crate::config_file::properties_to_table(&text) {
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
                settings,
                version: DataVersion {
                    counter: 0,
                    timestamp: now_ms,
                    state_version: None,
                },
            }),
            file,
            toml,
            storage,
            updating: tokio::sync::Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current values.
    pub fn get(&self) -> LiveSettings {
        self.lock().settings
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
            entries.insert(key.to_owned(), value);
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
    ) -> Result<(LiveSettings, LiveSettings), UpdateError> {
        let _updating = self.updating.lock().await;
        let before = self.get();
        let mut after = before;
        let mut changed = Vec::new();
        for (key, value) in updates {
            let Some(live) = live_key(key) else {
                return Err(if is_config_key(key) {
                    UpdateError::ReadOnly { key: key.clone() }
                } else {
                    UpdateError::Unknown { key: key.clone() }
                });
            };
            after
                .set(live, value)
                .map_err(|reason| UpdateError::Invalid {
                    key: key.clone(),
                    reason,
                })?;
            changed.push(live);
        }
        let lines: Vec<(&'static str, String)> = after
            .entries()
            .into_iter()
            .filter(|(key, _)| changed.contains(key))
            .collect();
        let (file, toml, storage) = (self.file.clone(), self.toml, self.storage.clone());
        let written =
            tokio::task::spawn_blocking(move || rewrite_file(&*storage, &file, toml, &lines))
                .await
                .map_err(|failure| failure.to_string())
                .and_then(|result| result);
        if let Err(reason) = written {
            return Err(UpdateError::Persist {
                path: self.file.clone(),
                reason,
            });
        }
        let mut inner = self.lock();
        inner.settings = after;
        inner.version = inner.version.next(now_ms);
        Ok((before, after))
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

/// Whether `key` is any key of the broker's configuration (in either spelling).
fn is_config_key(key: &str) -> bool {
    let mut table = toml::Table::new();
    // A value of the wrong type still names a known key; only an unknown one fails this way.
    table.insert(key.to_owned(), toml::Value::Boolean(false));
    match toml::Value::Table(table).try_into::<BrokerConfig>() {
        Ok(_) => true,
        Err(error) => !error.to_string().contains("unknown field"),
    }
}

/// The file's bytes (or its backup's, when a write died half-way); `None` when neither exists.
fn read(storage: &dyn Storage, path: &Path) -> Result<Option<Vec<u8>>, String> {
    tidemark_storage::atomic_file::load(storage, path, |bytes| {
        Ok::<_, std::convert::Infallible>(bytes.to_vec())
    })
    .map_err(|failure| failure.to_string())
}

fn rewrite_file(
    storage: &dyn Storage,
    path: &Path,
    toml: bool,
    lines: &[(&'static str, String)],
) -> Result<(), String> {
    let text = match read(storage, path) {
        Ok(Some(bytes)) => String::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?,
        Ok(None) => String::new(),
        Err(failure) => return Err(failure),
    };
    let rewritten = rewrite(&text, toml, lines);
    tidemark_storage::atomic_file::write_atomically(storage, path, rewritten.as_bytes(), true)
        .map_err(|failure| failure.to_string())
}

/// `text` with each key's line given the new value (in the spelling the file uses), or the key
/// added: at the end of a properties file, before the first table of a TOML file.
pub(crate) fn rewrite(text: &str, toml: bool, updates: &[(&'static str, String)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for (key, value) in updates {
        let snake = snake(key);
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
            if live_key(name) == Some(*key) {
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
            lines.insert(first_table, format!("{snake} = {value}"));
        } else {
            lines.push(format!("{key}={value}"));
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// camelCase → snake_case (RocketMQ's transactionTimeOut is transaction_timeout).
fn snake(key: &str) -> String {
    if key == "transactionTimeOut" {
        return "transaction_timeout".to_owned();
    }
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_in_either_spelling() {
        assert_eq!(live_key("brokerPermission"), Some("brokerPermission"));
        assert_eq!(live_key("broker_permission"), Some("brokerPermission"));
        assert_eq!(live_key("transaction_timeout"), Some("transactionTimeOut"));
        assert_eq!(live_key("listenPort"), None);
        assert!(is_config_key("listenPort"));
        assert!(is_config_key("store_path_root_dir"));
        assert!(!is_config_key("noSuchKey"));
        for key in LIVE_KEYS {
            assert_eq!(live_key(&snake(key)), Some(key), "{key}");
        }
    }

    #[test]
    fn rewriting_keeps_everything_else() {
        let properties = "# broker\nbrokerName=b\nbrokerPermission = 6\n";
        assert_eq!(
            rewrite(
                properties,
                false,
                &[
                    ("brokerPermission", "4".into()),
                    ("traceOn", "false".into())
                ]
            ),
            "# broker\nbrokerName=b\nbrokerPermission=4\ntraceOn=false\n"
        );
        let toml = "# broker\nbroker_name = \"b\"\nlong_polling_enable = true\n\n[extra]\nx = 1\n";
        assert_eq!(
            rewrite(
                toml,
                true,
                &[
                    ("longPollingEnable", "false".into()),
                    ("brokerPermission", "2".into())
                ]
            ),
            "# broker\nbroker_name = \"b\"\nlong_polling_enable = false\n\nbroker_permission = 2\n[extra]\nx = 1\n"
        );
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
