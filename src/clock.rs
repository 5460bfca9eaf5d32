//! Time as the broker sees it: UTC milliseconds since the Unix epoch (Service Bus times are
//! UTC). The pure entity core takes `now_ms` as a parameter (design.md D5); only the tasks that
//! drive it read the clock.
//!
//! The broker's clock is the machine's, plus an offset that only a controlled test clock
//! (`[testing] clock = "controlled"`) ever moves, and only forward: [`now_ms`] is what every
//! time rule of the broker follows (enqueue times, schedules, time to live, locks, idleness,
//! duplicate detection, transactions). Credentials are judged by the machine's clock,
//! [`real_ms`]: their expiry is the clients' real time. Connection timers (idle timeout,
//! heartbeats, handshakes) run on tokio's monotonic clock and never see the offset.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// How far the broker's clock is ahead of the machine's, in ms (0 unless a test moved it).
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Announces every move of [`OFFSET_MS`] to the tasks whose timers were armed before it.
static MOVES: LazyLock<watch::Sender<i64>> = LazyLock::new(|| watch::Sender::new(0));

/// The broker's clock: milliseconds since the Unix epoch, the machine's time moved forward by
/// what a controlled test clock was advanced.
pub fn now_ms() -> i64 {
    real_ms().saturating_add(ahead_ms())
}

/// The machine's clock: milliseconds since the Unix epoch. For what clients judge by their
/// own clocks (the expiry of their tokens).
pub fn real_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// How far the broker's clock is ahead of the machine's, in ms: 0 unless a test moved it.
pub fn ahead_ms() -> i64 {
    OFFSET_MS.load(Ordering::Acquire)
}

/// Moves the broker's clock forward to `to_ms` (where a restart finds it); a time the clock
/// has already passed leaves it where it is (it never goes back).
pub fn move_to(to_ms: i64) {
    let wanted = to_ms.saturating_sub(real_ms());
    let before = OFFSET_MS.fetch_max(wanted, Ordering::AcqRel);
    if wanted > before {
        MOVES.send_replace(wanted);
    }
}

/// Moves the broker's clock forward by `by_ms` (none when not positive); answers the broker's
/// time after the move.
pub fn advance(by_ms: i64) -> i64 {
    if by_ms > 0 {
        let before = OFFSET_MS.fetch_add(by_ms, Ordering::AcqRel);
        MOVES.send_replace(before.saturating_add(by_ms));
    }
    now_ms()
}

/// Every move of the broker's clock from now on: a timer armed on [`now_ms`] re-arms when
/// this changes.
pub fn moves() -> watch::Receiver<i64> {
    MOVES.subscribe()
}

/// A duration in whole milliseconds, saturating.
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
