//! The auto-delete-on-idle reaper (design.md §4 and D6): a background ticker that asks every
//! entity whether it has been idle for its `auto_delete_on_idle` time. An entity that was
//! deletes itself (messages, dead-letter queue and all) and the reaper then removes it from
//! the registry, so its address answers `amqp:not-found`. A queue declared in the config comes
//! back, empty, at the next start; one created at run time does not. On the same tick a topic deletes those of its subscriptions
//! that were idle for theirs.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::entity::handle::Command;
use crate::entity::registry::Registry;

/// How often idleness is checked: an idle entity goes at most this long after its time.
pub const REAP_INTERVAL: Duration = Duration::from_secs(1);

/// Asks every entity each [`REAP_INTERVAL`] until `shutdown`; removes those that deleted
/// themselves.
pub async fn run(registry: Arc<Registry>, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(REAP_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        // Not raced with `shutdown`: a stopping actor drops its answer, so this ends anyway,
        // and never halfway through forgetting an entity.
        reap_once(&registry).await;
    }
}

/// Asks every entity once whether it has been idle for its time; removes those that deleted
/// themselves. An entity whose mailbox is full is busy, not idle: it is skipped.
pub async fn reap_once(registry: &Registry) {
    for entity in registry.handles() {
        let (reply, deleted) = oneshot::channel();
        if entity.try_post(Command::ReapIfIdle { reply }).is_err() {
            continue;
        }
        if deleted.await.unwrap_or(false) {
            tracing::info!(entity = entity.name(), "auto-deleted after being idle");
            if let Err(error) = registry.forget(entity.name()).await {
                tracing::error!(entity = entity.name(), %error, "its declaration stays stored");
            }
        }
    }
}
