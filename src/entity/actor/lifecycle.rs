//! How a topic's subscriptions come and go while its actor runs, and how an entity deletes
//! itself (auto-delete on idle, or asked to): the runtime side, the forwarder, the receivers'
//! links and the log; the core drops the lanes.

use std::sync::atomic::Ordering;

use foldhash::HashMap;
use tokio::sync::{mpsc, oneshot};

use crate::config::SubscriptionConfig;
use crate::entity::actor::Actor;
use crate::entity::commit::Flushing;
use crate::entity::handle::{Command, EntityError, EntityEvent, LaneId};
use crate::entity::setup;
use crate::store::{Log, Recovered};

/// Why an entity deletes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Removal {
    /// Idle for its `auto_delete_on_idle` time (the reaper).
    Idle,
    /// Asked to (the administration API).
    Asked,
}

impl Actor {
    /// Whether the entity may be deleted for idleness: it has `auto_delete_on_idle`, nothing
    /// used it for that long, no receiver waits with credit and no scheduled message is
    /// pending.
    pub(super) fn is_idle(&self, now: i64) -> bool {
        self.auto_delete_ms.is_some_and(|idle| {
            now.saturating_sub(self.last_active_ms) >= idle
                && !self.core.has_scheduled()
                && !self.core.has_waiting_consumer()
                && !self.forwarder.is_busy()
        })
    }

    /// Deletes the subscriptions idle for their `auto_delete_on_idle` time: their messages and
    /// runtime rules go, their links get `amqp:not-found`, their addresses stop resolving.
    pub(super) fn reap_subscriptions(&mut self, now: i64) -> &Self {
        for lane in self.core.idle_subscriptions(now) {
            self.drop_subscription(lane, "after being idle (auto_delete_on_idle)");
        }
        self
    }

    /// Deletes a subscription: its messages and runtime rules go, its links get
    /// `amqp:not-found`, its address stops resolving.
    pub(super) fn drop_subscription(&mut self, lane: LaneId, why: &str) {
        self.forwarder.remove_subscription(lane.subscription);
        for consumer in self.core.delete_subscription(lane, why) {
            if let Some(events) = self.consumers.remove(&consumer) {
                let error = EntityError::Deleted;
                let _ = events.send(EntityEvent::Gone { consumer, error });
            }
        }
    }

    /// Adds a subscription to this topic (the administration API): numbered `number`, or after
    /// every number its log or its lanes use, empty, its declared rules in place.
    pub(super) fn add_subscription(
        &mut self,
        config: &SubscriptionConfig,
        number: Option<u32>,
    ) -> Result<(), String> {
        let Some(topic) = self.core.topic_state().cloned() else {
            return Err(format!(
                "'{}' is a queue: it has no subscriptions",
                self.core.name()
            ));
        };
        let name = config.name.to_lowercase();
        let taken = topic.names().contains_key(&name);
        if taken {
            return Err(format!("the subscription '{}' already exists", config.name));
        }
        let in_use = self.core.highest_subscription();
        let imposed = number.map(|number| HashMap::from_iter([(name.clone(), number)]));
        let numbers = self
            .log
            .subscription_numbers(std::slice::from_ref(&name), in_use, imposed.as_ref())
            .map_err(|e| e.to_string())?;
        let lane = LaneId {
            subscription: numbers[&name],
            dead_letter: false,
        };
        let lanes = setup::subscription_lanes(
            config,
            lane,
            Vec::new(),
            Recovered::default(),
            Recovered::default(),
        );
        self.core.add_subscription(lanes);
        self.set_forward(lane, &setup::subscription_forward(config));
        self.core.set_status(lane.subscription, config.status);
        topic.names_mut().insert(name, lane.subscription);
        tracing::info!(subscription = %config.name, "created");
        Ok(())
    }

    /// Deletes the entity (auto-delete on idle, or asked to): answers what is still owed,
    /// refuses what is queued in the mailbox, tells every consumer its link is gone, and drops
    /// the stored messages of all its queues.
    pub(super) async fn delete(
        mut self,
        mailbox: &mut mpsc::Receiver<Command>,
        flushing: Option<Flushing>,
        reply: oneshot::Sender<bool>,
        removal: Removal,
    ) {
        self.deleted.store(true, Ordering::Release);
        mailbox.close();
        self.commit.complete_flush(flushing, &mut self.core).await;
        self.commit.answer_unflushed();
        while let Ok(command) = mailbox.try_recv() {
            command.refuse(&EntityError::Deleted);
        }
        for (consumer, events) in self.consumers.drain() {
            let _ = events.send(EntityEvent::Gone {
                consumer,
                error: EntityError::Deleted,
            });
        }
        let why = match removal {
            Removal::Idle => "after being idle (auto_delete_on_idle)",
            Removal::Asked => "as asked",
        };
        match self.log.destroy() {
            // At debug: who asked logs it (the administration API, a reset, the reaper).
            Ok(()) => tracing::debug!(messages = self.core.len(), "deleted {why}"),
            Err(error) => tracing::error!(%error, "deleted, but its messages could not be dropped"),
        }
        let _ = reply.send(true);
    }

    /// Tells every receiver of a lane whose status no longer lets it receive that it is
    /// gone: its link is detached with the refusal.
    pub(super) fn detach_disabled_receivers(&mut self) {
        for (consumer, error) in self.core.refused_receivers() {
            if let Some(events) = self.consumers.get(&consumer) {
                let _ = events.send(EntityEvent::Gone { consumer, error });
            }
            self.unsubscribe(consumer);
        }
    }
}
