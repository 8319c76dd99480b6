//! The wall clock, read in one place: RocketMQ stamps born and store times, `UNIQ_KEY`s,
//! subscription versions and consume-start times with epoch milliseconds. A clock set before
//! 1970 reads as zero rather than failing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Time since the Unix epoch; zero if the system clock is set before it.
pub fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Milliseconds since the Unix epoch, as Java's `System.currentTimeMillis()`.
pub fn now_ms() -> i64 {
    i64::try_from(since_epoch().as_millis()).unwrap_or(i64::MAX)
}
