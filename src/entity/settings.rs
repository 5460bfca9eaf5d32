//! The settings of a queue, topic or subscription that can change while it runs, as
//! [`Command::Reconfigure`](crate::entity::handle::Command::Reconfigure) carries them; built
//! from declarations by [`crate::entity::setup`].

use std::time::Duration;

use crate::config::{forwarding, EntityStatus};
use crate::entity::queue::Rules;
use crate::entity::terms::LaneId;

/// The settings of a queue or topic that can change while it runs (Service Bus's updatable
/// properties): what [`Command::Reconfigure`](crate::entity::handle::Command::Reconfigure)
/// applies.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The entity's size limit.
    pub max_size_bytes: u64,
    /// The entity's default time to live in ms (a topic's; [`NEVER`](crate::store::record::NEVER) for a queue).
    pub default_ttl_ms: i64,
    /// A queue's own lane rules; `None` for a topic (its subscriptions keep theirs).
    pub rules: Option<Rules>,
    /// Auto-delete on idle.
    pub auto_delete_on_idle: Option<Duration>,
    /// The duplicate-detection window in ms; `None`: no duplicate detection.
    pub duplicate_window_ms: Option<i64>,
    /// Where a queue's lanes forward to (nowhere for a topic: its subscriptions say).
    pub forward: Forward,
    /// A topic's subscriptions' settings, by name (`None` for a queue).
    pub subscriptions: Vec<(String, SubscriptionSettings)>,
    /// The queue's or topic's status.
    pub status: EntityStatus,
    /// Whether it acknowledges sends without waiting for the flush (`EnableExpress`).
    pub express: bool,
}

/// The settings of a subscription that can change while it runs.
#[derive(Debug, Clone)]
pub struct SubscriptionSettings {
    /// The rules of its lane.
    pub rules: Rules,
    /// Whether a copy whose filter fails to evaluate is dead-lettered.
    pub dead_letter_on_filter_error: bool,
    /// `auto_delete_on_idle`, in ms.
    pub auto_delete_ms: Option<i64>,
    /// Where its lanes forward to.
    pub forward: Forward,
    /// Its status.
    pub status: EntityStatus,
}

/// Where a queue's or subscription's two lanes forward to (`forward_to` and
/// `forward_dead_lettered_messages_to`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forward {
    /// The main lane's target.
    pub to: Option<String>,
    /// The dead-letter lane's target.
    pub dead_letters: Option<String>,
}

impl Forward {
    /// The targets of a declaration's `forward_to` and `forward_dead_lettered_messages_to`,
    /// by name (a key may hold the target's address: [`forwarding::entity`]).
    pub fn of(to: &Option<String>, dead_letters: &Option<String>) -> Self {
        let name = |key: &Option<String>| key.as_deref().map(|v| forwarding::entity(v).to_owned());
        Self {
            to: name(to),
            dead_letters: name(dead_letters),
        }
    }

    /// Each lane of the queue or subscription whose main lane is `main`, with its target.
    pub fn lanes(&self, main: LaneId) -> [(LaneId, Option<&str>); 2] {
        [
            (main, self.to.as_deref()),
            (main.dead_letter_lane(), self.dead_letters.as_deref()),
        ]
    }
}
