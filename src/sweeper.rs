//! The TTL sweeper (design.md §4 Time to live): a background ticker that asks every entity to
//! drop (or dead-letter) its expired messages, so that they leave the store, the counts and
//! peek even when nobody receives. It never touches entity state itself: each entity expires
//! its own messages when it reads the [`Command::ExpireDue`] in its mailbox.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::entity::handle::Command;
use crate::entity::registry::Registry;

/// How often expired messages are swept. Receivers never see an expired message whatever
/// this is (entities check at delivery); it bounds how long one lingers in peek or waits to
/// reach the dead-letter queue.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Posts `ExpireDue` to every entity each [`SWEEP_INTERVAL`] until `shutdown`. An entity whose
/// mailbox is full is busy, and so already expiring on its own turns: it is skipped.
pub async fn run(registry: Arc<Registry>, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let now_ms = now_ms();
        for entity in registry.handles() {
            let _ = entity.try_post(Command::ExpireDue { now_ms });
        }
    }
}
