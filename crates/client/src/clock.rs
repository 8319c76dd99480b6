//! The client's one reading of the wall clock.
//!
//! RocketMQ stamps several things with epoch milliseconds (`UNIQ_KEY`, born timestamps,
//! subscription versions, `CONSUME_START_TIME`); keeping one reader means one answer to a clock
//! set before 1970 (zero, rather than a panic).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Time since the Unix epoch; zero if the system clock is set before it.
pub(crate) fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Milliseconds since the Unix epoch, as Java's `System.currentTimeMillis()`.
pub(crate) fn now_ms() -> i64 {
    i64::try_from(since_epoch().as_millis()).unwrap_or(i64::MAX)
}
