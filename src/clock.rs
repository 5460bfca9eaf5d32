//! Wall-clock time as the entities see it: UTC milliseconds since the Unix epoch (Service Bus
//! times are UTC). The pure entity core takes `now_ms` as a parameter (design.md D5); only the
//! tasks that drive it read the clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A duration in whole milliseconds, saturating.
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
