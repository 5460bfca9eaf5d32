//! Addresses to nodes: strips the forms clients use (`amqps://host/queue`, `/queue`) down to
//! the entity path and finds the entity (amqp-dialect.md §3).

use crate::entity::handle::{EntityHandle, LaneId};
use crate::entity::registry::Registry;
use crate::node::Node;
use crate::wire::entity_path;
use crate::wire::via::TRANSFER_DEAD_LETTER_SUFFIX;

/// What separates a topic's name from a subscription's, compared case-insensitively (the
/// SDKs write `Subscriptions`, the docs `subscriptions`).
const SUBSCRIPTIONS_INFIX: &str = "/subscriptions/";
/// Suffix of a dead-letter queue's path, compared case-insensitively.
const DEAD_LETTER_SUFFIX: &str = "/$deadletterqueue";
/// Suffix of a management node's path.
const MANAGEMENT_SUFFIX: &str = "/$management";
/// The claims-based-security node.
const CBS: &str = "$cbs";

/// What an address names, if anything.
pub fn route(registry: &Registry, address: &str) -> Option<Node> {
    let path = entity_path(address);
    if path.eq_ignore_ascii_case(CBS) {
        return Some(Node::Cbs);
    }
    match strip_suffix(path, MANAGEMENT_SUFFIX) {
        Some(entity) => {
            let (handle, lane) = entity_of(registry, entity)?;
            Some(Node::Management(handle, lane))
        }
        None => {
            let (handle, lane) = entity_of(registry, path)?;
            Some(Node::Entity(handle, lane))
        }
    }
}

/// A queue, a topic, a subscription, the dead-letter queue of a queue or subscription, or the
/// transfer dead-letter queue of a queue or topic, by path.
fn entity_of(registry: &Registry, path: &str) -> Option<(EntityHandle, LaneId)> {
    if let Some(name) = strip_suffix(path, TRANSFER_DEAD_LETTER_SUFFIX) {
        return Some((registry.lookup(name)?, LaneId::TRANSFER_DEAD_LETTER));
    }
    let (path, dead_letter) = match strip_suffix(path, DEAD_LETTER_SUFFIX) {
        Some(path) => (path, true),
        None => (path, false),
    };
    let (name, subscription) = match find_ignoring_case(path, SUBSCRIPTIONS_INFIX) {
        Some(at) => (&path[..at], Some(&path[at + SUBSCRIPTIONS_INFIX.len()..])),
        None => (path, None),
    };
    let entity = registry.lookup(name)?;
    let subscription = match (entity.is_topic(), subscription) {
        (false, None) => 0,
        (true, Some(subscription)) => entity.subscription(subscription)?,
        // A topic has no dead-letter queue of its own; a queue has no subscriptions.
        (true, None) if dead_letter => return None,
        (true, None) => 0,
        (false, Some(_)) => return None,
    };
    let lane = LaneId {
        subscription,
        dead_letter,
    };
    Some((entity, lane))
}

/// Where `needle` first occurs in `haystack`, ignoring ASCII case.
fn find_ignoring_case(haystack: &str, needle: &str) -> Option<usize> {
    haystack
        .as_bytes()
        .windows(needle.len())
        .position(|window| window.eq_ignore_ascii_case(needle.as_bytes()))
}

/// `path` without `suffix`, compared ignoring ASCII case.
fn strip_suffix<'a>(path: &'a str, suffix: &str) -> Option<&'a str> {
    let split = path.len().checked_sub(suffix.len())?;
    path.get(split..)
        .filter(|tail| tail.eq_ignore_ascii_case(suffix))
        .map(|_| &path[..split])
}
