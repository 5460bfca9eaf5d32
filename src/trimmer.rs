//! Gives freed heap memory back to the operating system.
//!
//! glibc's allocator keeps what the broker frees in its per-thread arenas and returns little
//! of it on its own: after 100,000 × 1 KB messages were queued and consumed, the broker stayed
//! at 111 MB resident where `malloc_trim` brings it to 28 MB. A background ticker trims every
//! [`TRIM_INTERVAL`], on a blocking thread; under load the heap is in use and a trim finds
//! little to return, so the cost is a walk over the arenas. Other allocators and platforms
//! have nothing to call and the ticker does nothing.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// How often freed memory is given back: how long a drained broker may stay large.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(5);

/// Trims the heap every [`TRIM_INTERVAL`] until `shutdown`.
pub async fn run(shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(TRIM_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let started = Instant::now();
        if let Ok(released) = tokio::task::spawn_blocking(trim).await {
            tracing::trace!(released, took = ?started.elapsed(), "heap trimmed");
        }
    }
}

/// Gives back the spare capacity of a map that has shrunk to a quarter of it: a map keeps
/// its largest size otherwise (a drained queue's lock tokens or cached bodies, several MB
/// after 100,000 messages). Rehashing costs O(len), and after it the map is full again, so
/// calling this on every housekeeping tick costs nothing while the map does not shrink.
pub fn shrink_if_sparse<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    if map.capacity() > 64 && map.len() < map.capacity() / 4 {
        map.shrink_to_fit();
    }
}

/// Returns free pages of every arena to the kernel; whether any were.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() -> bool {
    // SAFETY: malloc_trim takes no pointer from us; it walks glibc's own arenas, each under
    // its lock, and is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Nothing to do where the allocator is not glibc's.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_gives_back_its_capacity_once_mostly_empty() {
        let mut map: HashMap<u64, u64> = (0..10_000).map(|k| (k, k)).collect();
        let full = map.capacity();
        shrink_if_sparse(&mut map);
        assert_eq!(map.capacity(), full, "a full map keeps its capacity");
        map.retain(|k, _| *k < 100);
        shrink_if_sparse(&mut map);
        assert!(map.capacity() < full / 10, "{} of {full}", map.capacity());
        assert_eq!(map.len(), 100);
    }
}
