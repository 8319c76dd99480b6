//! The store settings an operator may change while the store runs (RocketMQ's
//! `updateBrokerConfig` during an incident: keep less, delete sooner): retention and how often
//! the flush thread syncs. The store asks its [`TuningSource`] for them at each use — every
//! retention pass, every flush round, every refused append — so a new value applies at the
//! next one. The values [`StoreConfig`](crate::StoreConfig) opens the store with are a fixed
//! source of their own.

/// The store's settings that may change while it runs; what a [`TuningSource`] returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreTuning {
    /// `fileReservedTime`: segments closed longer ago than this have expired, hours.
    pub file_reserved_hours: u64,
    /// `deleteWhen`: the UTC hour of day when expired segments are deleted.
    pub delete_when_hour: u32,
    /// `diskMaxUsedSpaceRatio`: above this disk usage expired segments go at any hour.
    pub disk_usage_ratio_max: f64,
    /// `diskSpaceCleanForciblyRatio`: above this, segments go before they expire (with
    /// `clean_file_forcibly`); at or below it a write refusal ends.
    pub disk_usage_ratio_clean_forcibly: f64,
    /// `diskSpaceWarningLevelRatio`: above this appends are refused.
    pub disk_usage_ratio_warning: f64,
    /// `cleanFileForciblyEnable`.
    pub clean_file_forcibly: bool,
    /// `cleanResourceInterval`: how often a retention pass runs, ms.
    pub retention_check_interval_ms: u64,
    /// `flushIntervalCommitLog`: how often the flush thread syncs under
    /// [`FlushPolicy::Async`](crate::FlushPolicy::Async), ms.
    pub flush_interval_ms: u64,
}

/// Where the store reads its [`StoreTuning`]: the broker's live configuration, or a fixed
/// value. Called off the append path (an append asks only when it is refused), so an
/// implementation may take a lock.
pub trait TuningSource: Send + Sync + std::fmt::Debug {
    fn store_tuning(&self) -> StoreTuning;
}

impl TuningSource for StoreTuning {
    fn store_tuning(&self) -> StoreTuning {
        *self
    }
}
