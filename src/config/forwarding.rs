//! Auto-forwarding as declared: which queue or topic each queue, subscription and dead-letter
//! queue forwards to, checked as a whole. A target must be a queue or topic (names compare
//! case-insensitively). Loops and long chains are allowed, as Service Bus allows them: a
//! message is bounded at run time, never forwarded more than
//! [`MAX_HOPS`](crate::entity::core::MAX_HOPS) times.
//!
//! The config file, the emulator's `Config.json`, the administration API and a reload all ask
//! [`check`]; each turns a [`Refusal`] into its own error, naming the key at fault.

use std::collections::HashSet;

use super::{QueueConfig, TopicConfig};

/// Which of a lane's two forwarding keys a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// `forward_to` (`ForwardTo`).
    ForwardTo,
    /// `forward_dead_lettered_messages_to` (`ForwardDeadLetteredMessagesTo`).
    DeadLetters,
}

/// The queue or subscription whose key is at fault, by its place in the slices given to
/// [`check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// `queues[index]`.
    Queue(usize),
    /// `topics[topic].subscriptions[subscription]`.
    Subscription(usize, usize),
}

/// Why a set of entities cannot forward as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The lane whose key is at fault.
    pub lane: Lane,
    /// Which key.
    pub key: Key,
    /// What is wrong, naming the target.
    pub message: String,
}

/// Checks the forwarding of `queues` and `topics` (all the entities there are).
///
/// # Errors
/// The first [`Refusal`]: a target that is not a queue or topic, or forwarding from a lane
/// that requires sessions.
pub fn check(queues: &[QueueConfig], topics: &[TopicConfig]) -> Result<(), Refusal> {
    let entities: HashSet<String> = (queues.iter().map(|queue| &queue.name))
        .chain(topics.iter().map(|topic| &topic.name))
        .map(|name| name.to_lowercase())
        .collect();
    let queue_lanes = queues.iter().enumerate().map(|(index, queue)| {
        let targets = [&queue.forward_to, &queue.forward_dead_lettered_messages_to];
        (Lane::Queue(index), queue.requires_session, targets)
    });
    let subscription_lanes = topics.iter().enumerate().flat_map(|(t, topic)| {
        topic
            .subscriptions
            .iter()
            .enumerate()
            .map(move |(s, subscription)| {
                let targets = [
                    &subscription.forward_to,
                    &subscription.forward_dead_lettered_messages_to,
                ];
                (
                    Lane::Subscription(t, s),
                    subscription.requires_session,
                    targets,
                )
            })
    });
    for (lane, requires_session, [forward_to, dead_letters]) in
        queue_lanes.chain(subscription_lanes)
    {
        if forward_to.is_some() && requires_session {
            return Err(Refusal {
                lane,
                key: Key::ForwardTo,
                message: "is set on a queue or subscription that requires sessions: Tidebus \
                          does not forward from those yet"
                    .to_owned(),
            });
        }
        for (key, target) in [
            (Key::ForwardTo, forward_to),
            (Key::DeadLetters, dead_letters),
        ] {
            match target.as_deref().map(entity) {
                Some(target) if !entities.contains(&target.to_lowercase()) => {
                    let message = missing(target);
                    return Err(Refusal { lane, key, message });
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// A forwarding key's value as read: `None` when absent or empty (the emulator's file writes
/// `""` for none).
pub fn target(written: Option<String>) -> Option<String> {
    written.filter(|name| !name.is_empty())
}

/// The queue or topic a forwarding key's value names: the value itself, or the entity path of
/// the address it holds (`sb://<namespace>/<name>` as the Python and JavaScript clients send
/// it, `https://<namespace>/<name>` as the Go client may; the address is kept as given, and
/// Service Bus writes it back so).
pub fn entity(value: &str) -> &str {
    crate::wire::entity_path(value)
}

/// Service Bus's words for a target that does not exist, naming it.
fn missing(target: &str) -> String {
    let kind = match target.to_lowercase().contains("/subscriptions/") {
        true => " (a subscription cannot be a forwarding target: name a queue or topic)",
        false => "",
    };
    format!("The auto forwarding destination entity '{target}' does not exist{kind}.")
}
