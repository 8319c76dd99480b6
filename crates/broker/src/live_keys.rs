//! Which broker config keys UPDATE_BROKER_CONFIG may change, and why the others may not.
//!
//! A key is live when every place that uses it reads the current value through
//! [`LiveConfig`](crate::live_config::LiveConfig) at each use (the store through
//! [`TuningSource`](tidemark_store::TuningSource)). A key is start-only when what it shapes is
//! built once: a bound port, files laid out on disk, who the broker is to others, a topic
//! created at start. [`START_ONLY`] says why for each, and the refusal quotes it.

use tidemark_store::StoreTuning;

use crate::config::{first_hour, BrokerConfig};

/// A live key: the name GET_BROKER_CONFIG shows it under, the config field (also its TOML
/// spelling), other names RocketMQ knows it by, and whether its value is text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveKey {
    pub name: &'static str,
    pub field: &'static str,
    pub aliases: &'static [&'static str],
    pub text: bool,
}

/// What a live value is, for writing it back: text is quoted in a TOML file.
trait LiveValue: std::fmt::Display {
    const TEXT: bool = false;
}
impl LiveValue for bool {}
impl LiveValue for i32 {}
impl LiveValue for u32 {}
impl LiveValue for u64 {}
impl LiveValue for usize {}
impl LiveValue for String {
    const TEXT: bool = true;
}

/// Declares the live keys once: the settings struct, the key table, copying from a
/// [`BrokerConfig`] (same field names), setting one key from text, and listing them.
macro_rules! live_settings {
    ($( $name:literal $(| $alias:literal)* => $field:ident: $ty:ty = $parse:expr, )+) => {
        /// The current values of the live keys, as [`BrokerConfig`]'s fields of the same name.
        #[derive(Debug, Clone, PartialEq)]
        pub struct LiveSettings {
            $( pub $field: $ty, )+
        }

        /// Every live key.
        pub const LIVE: &[LiveKey] = &[$(
            LiveKey {
                name: $name,
                field: stringify!($field),
                aliases: &[$($alias),*],
                text: <$ty as LiveValue>::TEXT,
            },
        )+];

        impl LiveSettings {
            pub(crate) fn of(config: &BrokerConfig) -> Self {
                Self { $( $field: config.$field.clone(), )+ }
            }

            /// Sets `key` from its text, checked as the config file's value would be.
            pub(crate) fn set(&mut self, key: &LiveKey, value: &str) -> Result<(), String> {
                match key.field {
                    $( stringify!($field) => self.$field = ($parse)(value)?, )+
                    _ => return Err("not a live key".to_owned()),
                }
                Ok(())
            }

            /// Each live key with its current value as text.
            pub(crate) fn entries(&self) -> Vec<(LiveKey, String)> {
                LIVE.iter()
                    .copied()
                    .zip([$( self.$field.to_string(), )+])
                    .collect()
            }
        }
    };
}

live_settings! {
    // Access and routing.
    "brokerPermission" => broker_permission: i32 = permission,
    "autoCreateSubscriptionGroup" => auto_create_subscription_group: bool = boolean,
    "enablePropertyFilter" => enable_property_filter: bool = boolean,
    "slaveReadEnable" => slave_read_enable: bool = boolean,
    "accessMessageInMemoryMaxRatio" => access_message_in_memory_max_ratio: u64 = percent_u64,
    // Long polling and flow control.
    "longPollingEnable" => long_polling_enable: bool = boolean,
    "shortPollingTimeMills" => short_polling_time_mills: u64 = positive,
    "popInflightMessageThreshold" => pop_in_flight_max_per_queue: usize = positive_usize,
    "popPollingSize" => pop_polling_size: usize = positive_usize,
    "maxPopPollingSize" => max_pop_polling_size: usize = positive_usize,
    // Retention and flushing: the store reads these through `TuningSource`.
    "fileReservedTime" => file_reserved_time: u64 = number,
    "deleteWhen" => delete_when: String = hours,
    "diskMaxUsedSpaceRatio" => disk_max_used_space_ratio: u32 = percent,
    "diskSpaceCleanForciblyRatio" => disk_space_clean_forcibly_ratio: u32 = percent,
    "diskSpaceWarningLevelRatio" => disk_space_warning_level_ratio: u32 = percent,
    "cleanFileForciblyEnable" => clean_file_forcibly_enable: bool = boolean,
    "cleanResourceInterval" => clean_resource_interval: u64 = positive,
    "flushIntervalCommitLog" => flush_interval_commit_log: u64 = positive,
    // Periodic work: each loop reads its period for the next round.
    "flushConsumerOffsetInterval" => flush_consumer_offset_interval: u64 = positive,
    "flushDelayOffsetInterval" => flush_delay_offset_interval: u64 = positive,
    "registerNameServerPeriod" => register_name_server_period: u64 = positive,
    "slaveSyncIntervalMs" => slave_sync_interval_ms: u64 = positive,
    "consumerStuckThresholdMs" => consumer_stuck_threshold_ms: u64 = positive,
    // Sends, timers and transactions.
    "traceOn" => trace_on: bool = boolean,
    "regionId" => region_id: String = text,
    "timerWheelEnable" => timer_wheel_enable: bool = boolean,
    "timerMaxDelaySec" => timer_max_delay_sec: u64 = positive,
    "recallMessageEnable" => recall_message_enable: bool = boolean,
    "allowRecallWhenBrokerNotWriteable" => allow_recall_when_broker_not_writeable: bool = boolean,
    "rejectTransactionMessage" => reject_transaction_message: bool = boolean,
    "transactionTimeOut" => transaction_timeout: u64 = positive,
    "transactionCheckMax" => transaction_check_max: u32 = positive_u32,
    "transactionCheckInterval" => transaction_check_interval: u64 = positive,
    "transactionDiscardTopic" => transaction_discard_topic: String = text,
    // Replication and controller mode: read at each wait, frame and beat.
    "slaveTimeout" => slave_timeout: u64 = positive,
    "haSlaveFallbehindMax" => ha_slave_fallbehind_max: u64 = number,
    "haSendHeartbeatInterval" => ha_send_heartbeat_interval: u64 = positive,
    "haHousekeepingInterval" => ha_housekeeping_interval: u64 = positive,
    "haTransferBatchSize" => ha_transfer_batch_size: usize = positive_usize,
    "controllerHeartbeatTimeoutMs" | "controllerHeartBeatTimeoutMills"
        => controller_heartbeat_timeout_ms: u64 = positive,
    "brokerElectionPriority" => broker_election_priority: i32 = parse,
}

/// Keys read once at start, under every name they are known by, with why they cannot change
/// while the broker runs. Every key of [`BrokerConfig`] is here or in [`LIVE`] (a test checks).
pub const START_ONLY: &[(&[&str], &str)] = &[
    (
        &["brokerName", "brokerClusterName", "brokerId", "brokerIP1"],
        "it is who the broker is to the name servers, clients and replicas (routes, message \
         ids, the store host on every record)",
    ),
    (
        &[
            "brokerRole",
            "enableControllerMode",
            "controllerAddr",
            "haMasterAddress",
        ],
        "the role decides which services run and whom the broker copies from; it changes by \
         a restart, or through the controllers in controller mode",
    ),
    (
        &[
            "listenIp",
            "listenPort",
            "grpcServerPort",
            "grpc_listen_port",
            "grpcServerThreads",
            "httpListenPort",
            "maxConnections",
            "consoleReadOnly",
        ],
        "the servers bind their ports and are built when the broker starts",
    ),
    (
        &["namesrvAddr"],
        "the gRPC gateway and the web console take the name-server list when they start",
    ),
    (
        &[
            "storePathRootDir",
            "flushDiskType",
            "mappedFileSizeCommitLog",
            "mappedFileSizeConsumeQueue",
            "messageIndexEnable",
            "maxHashSlotNum",
            "maxIndexNum",
        ],
        "the store is opened with it: its files and threads are laid out by it",
    ),
    (
        &["maxMessageSize"],
        "the store checks it against mappedFileSizeCommitLog when it opens, and the gRPC \
         server's message limit is set from it",
    ),
    (
        &["messageDelayLevel"],
        "the schedule topic is created at start with one queue per level, and stored delayed \
         messages are queued by level",
    ),
    (
        &["offsetJournalGroupCommitMs", "offsetJournalCompactBytes"],
        "the offset journal takes it when it opens",
    ),
    (
        &[
            "progressHistoryMaxBytes",
            "progressHistoryRetentionHours",
            "progressCheckpointIntervalMs",
        ],
        "the progress history takes it when it opens",
    ),
    (
        &["autoCreateTopicEnable", "defaultTopicQueueNums"],
        "it decides whether, and with how many queues, the default topic TBW102 is created at \
         start; change TBW102 itself with updateTopic or deleteTopic",
    ),
    (
        &["traceTopicEnable", "msgTraceTopicName"],
        "the trace topic is created at start",
    ),
    (
        &[
            "tlsMode",
            "tlsServerMode",
            "tlsCertificate",
            "tlsServerCertPath",
            "tlsPrivateKey",
            "tlsServerKeyPath",
            "tlsClientCa",
            "tlsServerTrustCertPath",
            "tlsHandshakeTimeoutMs",
            "tlsEnable",
            "tlsClientTrust",
            "tlsClientTrustCertPath",
            "tlsClientCertificate",
            "tlsClientCertPath",
            "tlsClientPrivateKey",
            "tlsClientKeyPath",
            "grpcTlsCertificate",
            "grpcTlsPrivateKey",
        ],
        "TLS is set up when the ports open and the broker's own client is built (certificate \
         files are read again when they change)",
    ),
    (
        &["aclEnable", "aclFile", "aclAccessKey", "aclSecretKey"],
        "the ACL check and the broker's own signing account are set up at start (the ACL \
         file is read again when it changes)",
    ),
    (
        &["preOnlineTimeoutMs"],
        "it is used once, before the broker first serves",
    ),
    (
        &["ignoreCorruptConfig"],
        "it is used once, while the config files are loaded at start",
    ),
];

/// A key as compared: lower case without underscores, so `listen_port`, `listenPort` and
/// `brokerIP1`/`broker_ip1` are one key.
fn folded(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The live key `key` names, in any spelling the configuration accepts.
pub fn live_key(key: &str) -> Option<&'static LiveKey> {
    let wanted = folded(key);
    LIVE.iter().find(|live| {
        folded(live.name) == wanted
            || folded(live.field) == wanted
            || live.aliases.iter().any(|alias| folded(alias) == wanted)
    })
}

/// Why `key` is read only at start, when it is one of [`START_ONLY`].
pub fn start_only_reason(key: &str) -> Option<&'static str> {
    let wanted = folded(key);
    START_ONLY
        .iter()
        .find(|(names, _)| names.iter().any(|name| folded(name) == wanted))
        .map(|(_, reason)| *reason)
}

impl LiveSettings {
    /// The store's share of the live settings, in the store's units.
    pub fn store_tuning(&self) -> StoreTuning {
        let ratio = |percent: u32| f64::from(percent.min(100)) / 100.0;
        StoreTuning {
            file_reserved_hours: self.file_reserved_time,
            delete_when_hour: first_hour(&self.delete_when).unwrap_or(4),
            disk_usage_ratio_max: ratio(self.disk_max_used_space_ratio),
            disk_usage_ratio_clean_forcibly: ratio(self.disk_space_clean_forcibly_ratio),
            disk_usage_ratio_warning: ratio(self.disk_space_warning_level_ratio),
            clean_file_forcibly: self.clean_file_forcibly_enable,
            // A pass every flush round at most; below 100 ms it would only burn CPU.
            retention_check_interval_ms: self.clean_resource_interval.max(100),
            flush_interval_ms: self.flush_interval_commit_log,
        }
    }
}

fn parse<T: std::str::FromStr>(value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a number"))
}

fn number(value: &str) -> Result<u64, String> {
    parse(value)
}

fn positive(value: &str) -> Result<u64, String> {
    match parse::<u64>(value)? {
        0 => Err("must be above 0".to_owned()),
        number => Ok(number),
    }
}

fn positive_u32(value: &str) -> Result<u32, String> {
    u32::try_from(positive(value)?).map_err(|_| "too large".to_owned())
}

fn positive_usize(value: &str) -> Result<usize, String> {
    usize::try_from(positive(value)?).map_err(|_| "too large".to_owned())
}

fn percent(value: &str) -> Result<u32, String> {
    match parse::<u32>(value)? {
        percent @ 0..=100 => Ok(percent),
        _ => Err("a percentage is 0-100".to_owned()),
    }
}

fn percent_u64(value: &str) -> Result<u64, String> {
    percent(value).map(u64::from)
}

fn permission(value: &str) -> Result<i32, String> {
    match parse::<i32>(value)? {
        permission @ 0..=7 => Ok(permission),
        _ => Err("a permission is 0..7 (2 write, 4 read, 6 both)".to_owned()),
    }
}

fn boolean(value: &str) -> Result<bool, String> {
    match value.trim() {
        text if text.eq_ignore_ascii_case("true") => Ok(true),
        text if text.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(format!("{value:?} is not true or false")),
    }
}

fn text(value: &str) -> Result<String, String> {
    Ok(value.trim().to_owned())
}

/// `deleteWhen`: hours of the day separated by `;`, kept as RocketMQ writes them (`"04"`), so
/// a properties file reads the value back as text.
fn hours(value: &str) -> Result<String, String> {
    let hours: Option<Vec<String>> = value
        .split(';')
        .map(|hour| first_hour(hour).map(|hour| format!("{hour:02}")))
        .collect();
    hours.map(|hours| hours.join(";")).ok_or_else(|| {
        format!("{value:?} is not an hour of the day (00-23; \"04;05\" uses the first)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key GET_BROKER_CONFIG shows is live or start-only with a reason; no key is both.
    #[test]
    fn every_key_is_live_or_refused_with_a_reason() {
        let some = Some(std::path::PathBuf::from("x"));
        let config = BrokerConfig {
            grpc_tls_certificate: some.clone(),
            grpc_tls_private_key: some.clone(),
            tls_certificate: some.clone(),
            tls_private_key: some.clone(),
            tls_client_ca: some.clone(),
            tls_client_trust: some.clone(),
            tls_client_certificate: some.clone(),
            tls_client_private_key: some.clone(),
            acl_file: some,
            acl_access_key: Some("k".into()),
            ha_master_address: Some("h:1".into()),
            ..BrokerConfig::default()
        };
        let toml::Value::Table(shown) = toml::Value::try_from(&config).expect("serialises") else {
            panic!("a table");
        };
        for key in shown.keys().map(String::as_str).chain(["aclSecretKey"]) {
            let live = live_key(key).is_some();
            let start_only = start_only_reason(key).is_some();
            assert!(
                live != start_only,
                "{key}: live {live}, start-only {start_only}"
            );
        }
        for live in LIVE {
            assert!(shown.contains_key(live.name), "{} is shown", live.name);
        }
    }

    #[test]
    fn keys_are_found_in_every_spelling() {
        assert_eq!(
            live_key("brokerPermission").map(|k| k.name),
            Some("brokerPermission")
        );
        assert_eq!(
            live_key("broker_permission").map(|k| k.name),
            Some("brokerPermission")
        );
        assert_eq!(
            live_key("transaction_timeout").map(|k| k.name),
            Some("transactionTimeOut")
        );
        assert_eq!(
            live_key("pop_in_flight_max_per_queue").map(|k| k.name),
            Some("popInflightMessageThreshold")
        );
        assert_eq!(
            live_key("controllerHeartBeatTimeoutMills").map(|k| k.field),
            Some("controller_heartbeat_timeout_ms")
        );
        assert_eq!(live_key("listenPort"), None);
        for key in [
            "listen_port",
            "grpc_listen_port",
            "tlsServerMode",
            "broker_ip1",
        ] {
            assert!(start_only_reason(key).is_some(), "{key}");
        }
    }

    #[test]
    fn values_are_checked_as_the_file_would_be() {
        let mut settings = LiveSettings::of(&BrokerConfig::default());
        let key = |name| live_key(name).expect("live");
        assert!(settings.set(key("brokerPermission"), "9").is_err());
        assert!(settings.set(key("diskMaxUsedSpaceRatio"), "101").is_err());
        assert!(settings.set(key("deleteWhen"), "24").is_err());
        settings.set(key("deleteWhen"), "3;5").expect("hours");
        assert_eq!(settings.delete_when, "03;05");
        settings
            .set(key("fileReservedTime"), "0")
            .expect("0 h: expire once closed");
        let tuning = settings.store_tuning();
        assert_eq!(
            (tuning.file_reserved_hours, tuning.delete_when_hour),
            (0, 3)
        );
    }
}
