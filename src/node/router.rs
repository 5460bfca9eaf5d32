//! Addresses to nodes: strips the forms clients use (`amqps://host/queue`, `/queue`) down to
//! the entity path and finds the entity (amqp-dialect.md §3).

use crate::entity::handle::EntityHandle;
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

/// The entity an address names, if any.
pub fn route(registry: &Registry, address: &str) -> Option<EntityHandle> {
    registry.lookup(entity_path(address)).cloned()
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
