//! Addresses to nodes: strips the forms clients use (`amqps://host/queue`, `/queue`) down to
//! the entity path and finds the entity (amqp-dialect.md §3).

use crate::entity::handle::{EntityHandle, SubQueue};
use crate::entity::registry::Registry;

/// The entity path of an address: without `scheme://authority` and leading slashes.
pub fn entity_path(address: &str) -> &str {
    let path = match address.find("://") {
        Some(scheme_end) => {
            let rest = &address[scheme_end + 3..];
            rest.find('/').map_or("", |slash| &rest[slash..])
        }
        None => address,
    };
    path.trim_start_matches('/')
}

/// Suffix of a dead-letter queue's path, compared case-insensitively.
const DEAD_LETTER_SUFFIX: &str = "/$deadletterqueue";

/// The entity an address names, and which of its queues, if any.
pub fn route(registry: &Registry, address: &str) -> Option<(EntityHandle, SubQueue)> {
    let path = entity_path(address);
    let split = path.len().saturating_sub(DEAD_LETTER_SUFFIX.len());
    let (name, sub) = match path.get(split..) {
        Some(tail) if tail.eq_ignore_ascii_case(DEAD_LETTER_SUFFIX) => {
            (&path[..split], SubQueue::DeadLetter)
        }
        _ => (path, SubQueue::Main),
    };
    registry.lookup(name).cloned().map(|entity| (entity, sub))
}

#[cfg(test)]
mod tests {
    use super::entity_path;

    #[test]
    fn strips_scheme_host_and_leading_slash() {
        assert_eq!(entity_path("amqps://ns.example:5671/queue.1"), "queue.1");
        assert_eq!(entity_path("amqp://localhost/q"), "q");
        assert_eq!(entity_path("/queue.1"), "queue.1");
        assert_eq!(entity_path("queue.1"), "queue.1");
        assert_eq!(entity_path("amqp://localhost"), "");
    }
}
