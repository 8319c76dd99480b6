//! Broker settings: TOML with snake_case keys, or RocketMQ's `broker.conf` property names
//! (camelCase, in TOML or in a Java properties file). Defaults are RocketMQ's.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tidemark_store::{FlushPolicy, StoreConfig};

mod check;
mod file;
mod keys;
mod tls;

pub(crate) use file::properties_to_table;
use file::spelled_as_written;
pub(crate) use keys::{take_apache_only, tidemark_keys};

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid configuration in {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// A value out of range or inconsistent with another; the text names the keys as the user
    /// wrote them and the values involved.
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("invalid configuration in {path}: {message}")]
    InvalidIn { path: PathBuf, message: String },
}

/// A secret from the configuration. Its `Debug` shows nothing (the effective configuration is
/// logged at start) and it is never serialised back.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretText(String);

impl SecretText {
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `flushDiskType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FlushDiskType {
    #[default]
    AsyncFlush,
    SyncFlush,
}

/// `brokerRole`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BrokerRole {
    #[default]
    AsyncMaster,
    SyncMaster,
    Slave,
}

/// Everything a broker is configured with. Serialized (GET_BROKER_CONFIG) under RocketMQ's
/// property names.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all(serialize = "camelCase"))]
pub struct BrokerConfig {
    /// The file the configuration was read from, where live updates are written back; `None`
    /// for a broker configured in code (`tidemark dev`): see [`crate::live_config`].
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
    /// The broker set this broker belongs to: a master and its slaves share it.
    #[serde(alias = "brokerName")]
    pub broker_name: String,
    /// The cluster the broker registers in; clients and admin tools list brokers by it.
    #[serde(alias = "brokerClusterName")]
    pub broker_cluster_name: String,
    /// 0 for a master, 1 and up for its slaves (ignored in controller mode).
    #[serde(alias = "brokerId")]
    pub broker_id: i64,
    /// The broker's role: masters take sends, slaves copy a master's log (ignored in controller
    /// mode).
    #[serde(alias = "brokerRole")]
    pub broker_role: BrokerRole,
    /// The address the broker advertises and stamps as the store host.
    #[serde(alias = "brokerIP1", rename(serialize = "brokerIP1"))]
    pub broker_ip1: String,
    /// Address the servers bind to (RocketMQ 5's `bindAddress`).
    #[serde(alias = "listenIp", alias = "bindAddress")]
    pub listen_ip: String,
    /// The port clients and name servers reach the broker on; the VIP channel is `listen_port - 2`
    /// and the HA port `listen_port + 1`.
    #[serde(alias = "listenPort")]
    pub listen_port: u16,
    /// Name servers, `host:port` separated by `;`.
    #[serde(alias = "namesrvAddr")]
    pub namesrv_addr: String,
    /// Where the store lives: `commitlog/`, `consumequeue/`, `index/` and `config/` (topics,
    /// groups, offsets, journals).
    #[serde(alias = "storePathRootDir")]
    pub store_path_root_dir: PathBuf,
    /// `ASYNC_FLUSH` acknowledges a send once it is written and flushes every
    /// `flush_interval_commit_log`; `SYNC_FLUSH` once it is on disk (group commit).
    #[serde(alias = "flushDiskType")]
    pub flush_disk_type: FlushDiskType,
    /// `ASYNC_FLUSH`: how often the commit log is flushed, ms.
    #[serde(alias = "flushIntervalCommitLog")]
    pub flush_interval_commit_log: u64,
    /// Bytes per commit-log file; it must hold the largest message.
    #[serde(alias = "mappedFileSizeCommitLog")]
    pub mapped_file_size_commit_log: u64,
    /// Bytes per consume-queue file, 20 per entry.
    #[serde(alias = "mappedFileSizeConsumeQueue")]
    pub mapped_file_size_consume_queue: u64,
    /// The largest message body accepted, bytes (larger sends get MESSAGE_ILLEGAL).
    #[serde(alias = "maxMessageSize")]
    pub max_message_size: usize,
    /// Hours a commit-log file is kept once full (counted from the first message of the next file)
    /// before retention may delete it.
    #[serde(alias = "fileReservedTime")]
    pub file_reserved_time: u64,
    /// The hour of the day (UTC, `"00"`-`"23"`) expired files are deleted. Of a list such as
    /// `"04;05"` only the first hour is used (RocketMQ uses each).
    #[serde(alias = "deleteWhen")]
    pub delete_when: String,
    /// Percent: above it, expired files are deleted at any hour.
    #[serde(alias = "diskMaxUsedSpaceRatio")]
    pub disk_max_used_space_ratio: u32,
    /// Percent: above it, files are deleted even before they expire (with
    /// `clean_file_forcibly_enable`), each deletion logged at WARN.
    #[serde(alias = "diskSpaceCleanForciblyRatio")]
    pub disk_space_clean_forcibly_ratio: u32,
    /// Percent: above it the broker refuses writes until usage is back at the forced level.
    #[serde(alias = "diskSpaceWarningLevelRatio")]
    pub disk_space_warning_level_ratio: u32,
    /// Whether files may be deleted before they expire when the disk is above
    /// `disk_space_clean_forcibly_ratio`; off, only expired files are ever deleted.
    #[serde(alias = "cleanFileForciblyEnable")]
    pub clean_file_forcibly_enable: bool,
    /// How often retention runs, ms.
    #[serde(alias = "cleanResourceInterval")]
    pub clean_resource_interval: u64,
    /// A send to a topic the broker does not know creates it (with `default_topic_queue_nums`
    /// queues), as RocketMQ does through `TBW102`.
    #[serde(alias = "autoCreateTopicEnable")]
    pub auto_create_topic_enable: bool,
    /// A consumer group the broker does not know is created at its first request.
    #[serde(alias = "autoCreateSubscriptionGroup")]
    pub auto_create_subscription_group: bool,
    /// Serve SQL92 subscriptions (RocketMQ's `enablePropertyFilter`; on by default here, off in
    /// RocketMQ).
    #[serde(alias = "enablePropertyFilter")]
    pub enable_property_filter: bool,
    /// Queues of a topic created on first use.
    #[serde(alias = "defaultTopicQueueNums")]
    pub default_topic_queue_nums: i32,
    /// How often `consumerOffset.json` (the RocketMQ-format export of consumer progress) is
    /// rewritten, ms. Progress itself is durable through the offset journal, not this file.
    #[serde(alias = "flushConsumerOffsetInterval")]
    pub flush_consumer_offset_interval: u64,
    /// Extra wait before each offset-journal sync to gather more changes into it, ms. 0: sync as
    /// soon as the previous sync ended (changes arriving meanwhile share the next one).
    pub offset_journal_group_commit_ms: u64,
    /// Connections the broker serves at once on each of its ports; further peers wait in the
    /// listen backlog until one closes (RocketMQ has no such bound).
    pub max_connections: usize,
    /// The offset journal is compacted into a snapshot once this many bytes were appended since
    /// the last snapshot (and at least twice the snapshot's size).
    pub offset_journal_compact_bytes: u64,
    /// How many bytes of progress history (operators' changes of consumer progress, and
    /// checkpoints of routine progress) the broker keeps; the oldest entries go first.
    pub progress_history_max_bytes: u64,
    /// How long progress history is kept, hours (entries older go at the next compaction).
    pub progress_history_retention_hours: u64,
    /// How often routine consumer progress is checkpointed into the progress history (only
    /// queues that moved), ms: where a group stood at a past time is known to within this.
    pub progress_checkpoint_interval_ms: u64,
    /// A queue whose offset has not moved for this long while later messages are done
    /// (acknowledged ranges above it) counts as stuck: shown by `consumer-progress` and logged
    /// once per episode, ms.
    pub consumer_stuck_threshold_ms: u64,
    /// Master: how long it may spend, before serving, taking its slaves' consumer progress
    /// (found through the name servers), ms; 0 skips the step.
    pub pre_online_timeout_ms: u64,
    /// Serve timer messages (`TIMER_DELIVER_MS` / `TIMER_DELAY_SEC` / `TIMER_DELAY_MS`); off,
    /// they are refused (RocketMQ 5's `timerWheelEnable`).
    #[serde(alias = "timerWheelEnable")]
    pub timer_wheel_enable: bool,
    /// The furthest a timer message may be scheduled ahead, s (RocketMQ 5's
    /// `timerMaxDelaySec`, 3 days).
    #[serde(alias = "timerMaxDelaySec")]
    pub timer_max_delay_sec: u64,
    /// Take RECALL_MESSAGE: a producer cancels a timer message it sent, before it is due, with
    /// the handle its send was answered with. Off, recalls are refused with NO_PERMISSION
    /// (RocketMQ 5.3.2+'s `recallMessageEnable`, off by default there too); handles are given
    /// either way.
    #[serde(alias = "recallMessageEnable")]
    pub recall_message_enable: bool,
    /// Take recalls while the broker's permission forbids writes (RocketMQ's
    /// `allowRecallWhenBrokerNotWriteable`).
    #[serde(alias = "allowRecallWhenBrokerNotWriteable")]
    pub allow_recall_when_broker_not_writeable: bool,
    /// POP: messages one group may have in flight (popped, not yet acknowledged) per queue.
    /// At the bound, pops skip the queue until acknowledgements or revivals bring it under
    /// (RocketMQ 5's `popInflightMessageThreshold`).
    #[serde(
        alias = "popInflightMessageThreshold",
        rename(serialize = "popInflightMessageThreshold")
    )]
    pub pop_in_flight_max_per_queue: usize,
    /// POP: suspended pop requests per queue key at most, and in all; past them a pop that
    /// found nothing is answered POLLING_FULL (RocketMQ 5's `popPollingSize`,
    /// `maxPopPollingSize`).
    #[serde(alias = "popPollingSize")]
    pub pop_polling_size: usize,
    /// See `pop_polling_size`: the bound over all queue keys.
    #[serde(alias = "maxPopPollingSize")]
    pub max_pop_polling_size: usize,
    /// How often the broker registers with the name servers, ms (kept within 10–60 s). Between
    /// registrations it asks each name server every 2 s whether it still has the broker's data
    /// (QUERY_DATA_VERSION) and registers with one that lost it, such as a name server back
    /// from a crash.
    #[serde(alias = "registerNameServerPeriod")]
    pub register_name_server_period: u64,
    /// A pull that finds nothing is held until messages arrive or its suspend time ends; off, it is
    /// held `short_polling_time_mills`.
    #[serde(alias = "longPollingEnable")]
    pub long_polling_enable: bool,
    /// With `long_polling_enable` off: how long a pull that found nothing is held, ms.
    #[serde(alias = "shortPollingTimeMills")]
    pub short_polling_time_mills: u64,
    /// What the broker lets clients do: 4 read, 2 write, 6 both (routes carry it).
    #[serde(alias = "brokerPermission")]
    pub broker_permission: i32,
    /// The region stamped on stored messages (`MSG_REGION`) and sent in send responses.
    #[serde(alias = "regionId")]
    pub region_id: String,
    /// The port RocketMQ 5's gRPC clients connect to (MessagingService, TLS or plaintext on
    /// the same port; RocketMQ serves it from its proxy on 8081). 0: no gRPC.
    #[serde(alias = "grpcServerPort", rename(serialize = "grpcServerPort"))]
    pub grpc_listen_port: u16,
    /// Threads serving the gRPC port, each a single-threaded runtime owning the connections
    /// handed to it (a connection's calls then stay on one thread). 0: one per CPU core, at
    /// most 8.
    pub grpc_server_threads: usize,
    /// The HTTP port of the metrics endpoint (`/metrics`, Prometheus / OpenMetrics text) and
    /// the web console (`/`). 0: none (the default for `tidemark broker`; `tidemark dev`
    /// serves it on 8082).
    pub http_listen_port: u16,
    /// The web console shows but changes nothing (its forms are gone, its actions refused).
    pub console_read_only: bool,
    /// PEM certificate chain and private key for gRPC over TLS, when it should differ from
    /// `tls_certificate`; unset, the gRPC port serves that one.
    pub grpc_tls_certificate: Option<std::path::PathBuf>,
    /// The private key that goes with `grpc_tls_certificate`.
    pub grpc_tls_private_key: Option<std::path::PathBuf>,
    /// How every port (main, VIP, HA, gRPC) treats TLS (RocketMQ's `tls.server.mode`):
    /// `disabled`, `permissive` (TLS and plaintext clients on one port) or `enforcing`.
    #[serde(alias = "tlsServerMode")]
    pub tls_mode: String,
    /// PEM certificate chain and private key the ports serve, re-read when they change;
    /// unset, a self-signed certificate made at start (which RocketMQ clients accept unless
    /// told to check).
    #[serde(alias = "tlsServerCertPath")]
    pub tls_certificate: Option<PathBuf>,
    /// The private key that goes with `tls_certificate`.
    #[serde(alias = "tlsServerKeyPath")]
    pub tls_private_key: Option<PathBuf>,
    /// CA certificates a TLS client's certificate must chain to; set, clients without such a
    /// certificate are refused (RocketMQ's `tls.server.need.client.auth=require`).
    #[serde(alias = "tlsServerTrustCertPath")]
    pub tls_client_ca: Option<PathBuf>,
    /// A connection that has not finished its TLS handshake in this long is closed.
    pub tls_handshake_timeout_ms: u64,
    /// The broker's own connections (registration, slave sync, replication) dial TLS
    /// (RocketMQ's `tls.enable`).
    #[serde(alias = "tlsEnable")]
    pub tls_enable: bool,
    /// With `tls_enable`: CA certificates the servers dialed must chain to; unset, any.
    #[serde(alias = "tlsClientTrustCertPath")]
    pub tls_client_trust: Option<PathBuf>,
    /// With `tls_enable`: the certificate the broker presents to servers that ask for one.
    #[serde(alias = "tlsClientCertPath")]
    pub tls_client_certificate: Option<PathBuf>,
    /// The private key that goes with `tls_client_certificate`.
    #[serde(alias = "tlsClientKeyPath")]
    pub tls_client_private_key: Option<PathBuf>,
    /// Check every request against the ACL file (RocketMQ 4.x's `aclEnable`): see
    /// `tidemark-acl`.
    #[serde(alias = "aclEnable")]
    pub acl_enable: bool,
    /// The ACL file; unset: `plain_acl.yml` beside the config file. Re-read when it changes.
    #[serde(alias = "aclFile")]
    pub acl_file: Option<PathBuf>,
    /// The account this broker signs its own requests with (registration, slave sync, a
    /// returning master's questions to its slaves), for name servers and masters that check
    /// ACL. The secret is never shown (GET_BROKER_CONFIG leaves it out).
    #[serde(alias = "aclAccessKey")]
    pub acl_access_key: Option<String>,
    /// The secret of `acl_access_key`'s account.
    #[serde(alias = "aclSecretKey", skip_serializing)]
    pub acl_secret_key: Option<SecretText>,
    /// Whether send responses carry `TRACE_ON` = true, which lets clients with tracing on trace
    /// through this broker.
    #[serde(alias = "traceOn")]
    pub trace_on: bool,
    /// Delay of each level, 1-based (`messageDelayLevel`): `s`, `m`, `h` or `d` suffixes.
    #[serde(alias = "messageDelayLevel")]
    pub message_delay_level: String,
    /// How often `delayOffset.json` is written (`flushDelayOffsetInterval`).
    #[serde(alias = "flushDelayOffsetInterval")]
    pub flush_delay_offset_interval: u64,
    /// Start even when a config file and its backup are both unreadable (they are then
    /// replaced by empty tables). Off: such a broker refuses to start.
    #[serde(alias = "ignoreCorruptConfig")]
    pub ignore_corrupt_config: bool,
    /// Slave: the master's HA address (`host:port`); when unset it is learned from the name
    /// server at registration. The HA port itself is always `listen_port + 1`, as in RocketMQ.
    #[serde(alias = "haMasterAddress")]
    pub ha_master_address: Option<String>,
    /// Slave: report period, and master: heartbeat period of the HA stream.
    #[serde(alias = "haSendHeartbeatInterval")]
    pub ha_send_heartbeat_interval: u64,
    /// An HA connection silent this long is closed.
    #[serde(alias = "haHousekeepingInterval")]
    pub ha_housekeeping_interval: u64,
    /// Bytes per HA transfer frame at most.
    #[serde(alias = "haTransferBatchSize")]
    pub ha_transfer_batch_size: usize,
    /// SYNC_MASTER: a slave further behind than this counts as not available.
    #[serde(alias = "haSlaveFallbehindMax")]
    pub ha_slave_fallbehind_max: u64,
    /// SYNC_MASTER: how long a send waits for the slave (ms) before FLUSH_SLAVE_TIMEOUT.
    #[serde(alias = "slaveTimeout")]
    pub slave_timeout: u64,
    /// Whether consumers may be steered to a slave when they read cold data.
    #[serde(alias = "slaveReadEnable")]
    pub slave_read_enable: bool,
    /// Percent of RAM: a pull reading further behind the log's end than this is "cold".
    #[serde(alias = "accessMessageInMemoryMaxRatio")]
    pub access_message_in_memory_max_ratio: u64,
    /// RocketMQ 5's controller mode: the controllers decide this broker's id and role
    /// (`broker_id`/`broker_role` are ignored) and elect a new master when one dies.
    #[serde(alias = "enableControllerMode")]
    pub enable_controller_mode: bool,
    /// The controllers, `host:port;host:port`.
    #[serde(alias = "controllerAddr")]
    pub controller_addr: String,
    /// Dead to the controllers after this long without a heartbeat, ms (sent every second).
    #[serde(alias = "controllerHeartBeatTimeoutMills")]
    pub controller_heartbeat_timeout_ms: u64,
    /// Lower wins an election among equally up-to-date replicas.
    #[serde(alias = "brokerElectionPriority")]
    pub broker_election_priority: i32,
    /// Slave: how often topics, offsets, delay offsets and groups are fetched from the master
    /// (RocketMQ 4.9: every 10 s).
    #[serde(alias = "slaveSyncIntervalMs")]
    pub slave_sync_interval_ms: u64,
    /// Refuse transactional (half) messages with NO_PERMISSION (`rejectTransactionMessage`).
    #[serde(alias = "rejectTransactionMessage")]
    pub reject_transaction_message: bool,
    /// A half message is checked back with its producer group once it is this old, ms, unless
    /// the producer set its own time (`CHECK_IMMUNITY_TIME_IN_SECONDS`); RocketMQ's
    /// `transactionTimeOut`.
    #[serde(alias = "transactionTimeOut", rename(serialize = "transactionTimeOut"))]
    pub transaction_timeout: u64,
    /// Check-backs per half message at most; at the next round it is discarded
    /// (`transactionCheckMax`).
    #[serde(alias = "transactionCheckMax")]
    pub transaction_check_max: u32,
    /// How often unresolved half messages are checked back, ms (`transactionCheckInterval`).
    #[serde(alias = "transactionCheckInterval")]
    pub transaction_check_interval: u64,
    /// Where a half message goes once checked back `transaction_check_max` times without an
    /// answer (RocketMQ's `TRANS_CHECK_MAX_TIME_TOPIC`); empty: it is dropped.
    pub transaction_discard_topic: String,
    /// Create the message-trace topic at start (one queue), for clients with tracing on when
    /// topics are not auto-created (`traceTopicEnable`).
    #[serde(alias = "traceTopicEnable")]
    pub trace_topic_enable: bool,
    /// The message-trace topic (`msgTraceTopicName`).
    #[serde(alias = "msgTraceTopicName")]
    pub msg_trace_topic_name: String,
    /// `messageIndexEnable`: index message keys and unique keys for QUERY_MESSAGE (mqadmin
    /// `queryMsgByKey` / `queryMsgByUniqueKey`), in `index/` files of RocketMQ's layout.
    #[serde(alias = "messageIndexEnable")]
    pub message_index_enable: bool,
    /// `maxHashSlotNum` and `maxIndexNum`: hash slots and entries per index file.
    #[serde(alias = "maxHashSlotNum")]
    pub max_hash_slot_num: u32,
    /// Entries per index file (see `max_hash_slot_num`).
    #[serde(alias = "maxIndexNum")]
    pub max_index_num: u32,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            config_file: None,
            broker_name: "broker-a".into(),
            broker_cluster_name: "DefaultCluster".into(),
            broker_id: 0,
            broker_role: BrokerRole::AsyncMaster,
            enable_controller_mode: false,
            controller_addr: String::new(),
            controller_heartbeat_timeout_ms: 3_000,
            broker_election_priority: i32::MAX,
            broker_ip1: "127.0.0.1".into(),
            listen_ip: "0.0.0.0".into(),
            listen_port: 10911,
            namesrv_addr: "127.0.0.1:9876".into(),
            store_path_root_dir: PathBuf::from("store"),
            flush_disk_type: FlushDiskType::AsyncFlush,
            flush_interval_commit_log: 500,
            mapped_file_size_commit_log: 1 << 30,
            mapped_file_size_consume_queue: 300_000 * 20,
            max_message_size: 4 * 1024 * 1024,
            file_reserved_time: 72,
            delete_when: "04".into(),
            disk_max_used_space_ratio: 75,
            disk_space_clean_forcibly_ratio: 85,
            disk_space_warning_level_ratio: 90,
            clean_file_forcibly_enable: true,
            clean_resource_interval: 10_000,
            auto_create_topic_enable: true,
            auto_create_subscription_group: true,
            enable_property_filter: true,
            default_topic_queue_nums: 8,
            flush_consumer_offset_interval: 5000,
            offset_journal_group_commit_ms: 0,
            max_connections: 10_000,
            offset_journal_compact_bytes: 16 << 20,
            progress_history_max_bytes: 64 << 20,
            progress_history_retention_hours: 7 * 24,
            progress_checkpoint_interval_ms: 60_000,
            consumer_stuck_threshold_ms: 30_000,
            pre_online_timeout_ms: 5_000,
            timer_wheel_enable: true,
            timer_max_delay_sec: 259_200,
            recall_message_enable: false,
            allow_recall_when_broker_not_writeable: true,
            pop_in_flight_max_per_queue: 10_000,
            pop_polling_size: 1024,
            max_pop_polling_size: 100_000,
            register_name_server_period: 30_000,
            long_polling_enable: true,
            short_polling_time_mills: 1000,
            broker_permission: 6,
            region_id: "DefaultRegion".into(),
            grpc_listen_port: 8081,
            grpc_server_threads: 0,
            http_listen_port: 0,
            console_read_only: false,
            grpc_tls_certificate: None,
            grpc_tls_private_key: None,
            tls_mode: "permissive".to_owned(),
            tls_certificate: None,
            tls_private_key: None,
            tls_client_ca: None,
            tls_handshake_timeout_ms: 10_000,
            tls_enable: false,
            tls_client_trust: None,
            tls_client_certificate: None,
            tls_client_private_key: None,
            acl_enable: false,
            acl_file: None,
            acl_access_key: None,
            acl_secret_key: None,
            trace_on: true,
            message_delay_level: "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
                .into(),
            flush_delay_offset_interval: 10_000,
            ignore_corrupt_config: false,
            ha_master_address: None,
            ha_send_heartbeat_interval: 5_000,
            ha_housekeeping_interval: 20_000,
            ha_transfer_batch_size: 32 * 1024,
            ha_slave_fallbehind_max: 256 * 1024 * 1024,
            slave_timeout: 3_000,
            slave_read_enable: false,
            access_message_in_memory_max_ratio: 40,
            slave_sync_interval_ms: 10_000,
            reject_transaction_message: false,
            transaction_timeout: 6_000,
            transaction_check_max: 15,
            transaction_check_interval: 60_000,
            transaction_discard_topic: "TRANS_CHECK_MAX_TIME_TOPIC".into(),
            trace_topic_enable: false,
            msg_trace_topic_name: tidemark_protocol::trace::DEFAULT_TRACE_TOPIC.into(),
            message_index_enable: true,
            max_hash_slot_num: 5_000_000,
            max_index_num: 20_000_000,
        }
    }
}

impl BrokerConfig {
    /// Where the timer journal lives: `<store root>/config/timerJournal/`.
    pub fn timer_journal_dir(&self) -> std::path::PathBuf {
        self.store_path_root_dir.join("config").join("timerJournal")
    }

    /// Where progress history is journaled: `<store root>/config/progressHistory/`.
    pub fn progress_history_dir(&self) -> std::path::PathBuf {
        self.store_path_root_dir
            .join("config")
            .join("progressHistory")
    }

    /// [`progress_history_max_bytes`](Self::progress_history_max_bytes) and the retention, as
    /// the history takes them.
    pub fn history_bounds(&self) -> crate::history::HistoryBounds {
        crate::history::HistoryBounds {
            max_bytes: usize::try_from(self.progress_history_max_bytes).unwrap_or(usize::MAX),
            max_age_ms: i64::try_from(self.progress_history_retention_hours)
                .unwrap_or(i64::MAX / 3_600_000)
                .saturating_mul(3_600_000),
        }
    }

    /// Where POP progress is journaled: `<store root>/config/popJournal/`.
    pub fn pop_journal_dir(&self) -> std::path::PathBuf {
        self.store_path_root_dir.join("config").join("popJournal")
    }

    /// Where the offset journal lives: `<store root>/config/offsetJournal/`.
    pub fn offset_journal_dir(&self) -> std::path::PathBuf {
        self.store_path_root_dir
            .join("config")
            .join("offsetJournal")
    }
}

impl BrokerConfig {
    /// Reads a TOML file, or a Java properties file (`.conf` / `.properties`) with RocketMQ's
    /// property names.
    pub fn load(path: &Path) -> Result<BrokerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let is_toml = path
            .extension()
            .is_some_and(|extension| extension == "toml");
        let mut table = if is_toml {
            text.parse::<toml::Table>()
                .map_err(|error| ConfigError::Parse {
                    path: path.to_path_buf(),
                    message: error.to_string(),
                })?
        } else {
            properties_to_table(&text)
        };
        let apache_only = take_apache_only(&mut table).map_err(|message| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        })?;
        let written: Vec<String> = table.keys().cloned().collect();
        let config: BrokerConfig =
            toml::Value::Table(table)
                .try_into()
                .map_err(|error: toml::de::Error| ConfigError::Parse {
                    path: path.to_path_buf(),
                    message: error.to_string(),
                })?;
        let config = BrokerConfig {
            config_file: Some(path.to_path_buf()),
            ..config
        };
        config
            .check(&|key| spelled_as_written(key, &written))
            .map_err(|message| ConfigError::InvalidIn {
                path: path.to_path_buf(),
                message,
            })?;
        if !apache_only.is_empty() {
            tracing::warn!(
                path = %path.display(),
                "{} key(s) of Apache RocketMQ's broker that Tidemark does not use are ignored: {}",
                apache_only.len(),
                apache_only.join(", ")
            );
        }
        Ok(config)
    }

    /// Checks values and their consistency. Errors name keys in snake_case; [`load`] names them
    /// as the file spelled them.
    ///
    /// [`load`]: Self::load
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_naming_keys(&|key| key.to_owned())
    }

    /// [`validate`](Self::validate), with errors naming each key (given in snake_case) as
    /// `key` spells it — a command-line flag, say, when the value came from one.
    pub fn validate_naming_keys(&self, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
        self.check(key).map_err(ConfigError::Invalid)
    }

    fn delete_when_hour(&self) -> Result<u32, ConfigError> {
        first_hour(&self.delete_when).ok_or_else(|| {
            ConfigError::Invalid(format!("delete_when {:?} is not an hour", self.delete_when))
        })
    }

    /// The ACL file checked when `acl_enable` is on.
    pub fn acl_file_path(&self) -> Option<PathBuf> {
        if !self.acl_enable {
            return None;
        }
        self.acl_file.clone().or_else(|| {
            let dir = self.config_file.as_deref()?.parent()?;
            Some(dir.join("plain_acl.yml"))
        })
    }

    /// Settings for the broker's own connections to name servers and other brokers: signed
    /// with its account when it has one.
    pub fn remoting_client_config(&self) -> tidemark_remoting::ClientConfig {
        let mut config = tidemark_remoting::ClientConfig::default();
        if let (Some(access_key), Some(secret_key)) = (&self.acl_access_key, &self.acl_secret_key) {
            config.channel.signer = Some(std::sync::Arc::new(tidemark_remoting::Credentials::new(
                access_key.as_str(),
                secret_key.expose(),
            )));
        }
        config
    }

    /// Whether this broker is configured as a slave for good. Never in controller mode, where
    /// `broker_role` is ignored and the role (`BrokerState::role`) changes at run time.
    pub fn is_slave(&self) -> bool {
        !self.enable_controller_mode && self.broker_role == BrokerRole::Slave
    }

    /// The HA port: always `listen_port + 1`, as RocketMQ forces it.
    pub fn ha_port(&self) -> u16 {
        self.listen_port.saturating_add(1)
    }

    /// The delay of each level in milliseconds (index 0 = level 1).
    pub fn delay_levels_ms(&self) -> Result<Vec<i64>, ConfigError> {
        let levels: Result<Vec<i64>, ConfigError> = self
            .message_delay_level
            .split_whitespace()
            .map(|level| {
                let (number, unit) = level.split_at(level.len().saturating_sub(1));
                let scale = match unit {
                    "s" => 1_000,
                    "m" => 60_000,
                    "h" => 3_600_000,
                    "d" => 86_400_000,
                    _ => {
                        return Err(ConfigError::Invalid(format!(
                            "delay level {level:?} needs a unit (s, m, h, d)"
                        )))
                    }
                };
                number
                    .parse::<i64>()
                    .ok()
                    .filter(|value| *value >= 0)
                    .map(|value| value * scale)
                    .ok_or_else(|| {
                        ConfigError::Invalid(format!("delay level {level:?} is not a number"))
                    })
            })
            .collect();
        let levels = levels?;
        if levels.is_empty() {
            return Err(ConfigError::Invalid(
                "message_delay_level needs at least one level".into(),
            ));
        }
        Ok(levels)
    }

    /// The store's settings derived from the broker's. Retention and the flush interval are
    /// the values it opens with; the broker's store reads them live (`LiveConfig` is its
    /// `TuningSource`), through the same mapping.
    pub fn store_config(&self) -> StoreConfig {
        // The one import back into `live_keys`, on purpose: the live keys are declared as a
        // view of this struct's fields, and reading the opening values through that view
        // keeps start and runtime on one mapping.
        let tuning = crate::live_keys::LiveSettings::of(self).store_tuning();
        StoreConfig {
            commit_log_segment_bytes: self.mapped_file_size_commit_log,
            consume_queue_entries_per_file: (self.mapped_file_size_consume_queue / 20).max(1),
            flush: match self.flush_disk_type {
                FlushDiskType::AsyncFlush => FlushPolicy::Async {
                    interval_ms: tuning.flush_interval_ms,
                },
                FlushDiskType::SyncFlush => FlushPolicy::Sync,
            },
            message_size_max_bytes: self.max_message_size,
            file_reserved_hours: tuning.file_reserved_hours,
            delete_when_hour: tuning.delete_when_hour,
            disk_usage_ratio_max: tuning.disk_usage_ratio_max,
            disk_usage_ratio_clean_forcibly: tuning.disk_usage_ratio_clean_forcibly,
            disk_usage_ratio_warning: tuning.disk_usage_ratio_warning,
            clean_file_forcibly: tuning.clean_file_forcibly,
            retention_check_interval_ms: tuning.retention_check_interval_ms,
            delay_levels_ms: self.delay_levels_ms().unwrap_or_default(),
            index: tidemark_store::index::IndexConfig {
                enabled: self.message_index_enable,
                hash_slots: self.max_hash_slot_num.max(1),
                entries: self.max_index_num.max(2),
            },
            ..StoreConfig::new(&self.store_path_root_dir)
        }
    }

    /// The name servers to register with.
    pub fn name_servers(&self) -> Vec<String> {
        self.namesrv_addr
            .split(';')
            .map(str::trim)
            .filter(|addr| !addr.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// `brokerIP1:listenPort`, what clients and the name server know this broker as.
    pub fn broker_addr(&self) -> String {
        format!("{}:{}", self.broker_ip1, self.listen_port)
    }
}

/// The hour `deleteWhen` names: RocketMQ allows `"04;05"`, and the first is used.
pub(crate) fn first_hour(text: &str) -> Option<u32> {
    let first = text.split(';').next()?.trim();
    first.parse::<u32>().ok().filter(|hour| *hour < 24)
}

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
