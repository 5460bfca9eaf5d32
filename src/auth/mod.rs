//! Who may do what: the shared access policies of the config, the credentials that name one
//! (a CBS token, a SASL PLAIN user and password), and each connection's [`access::Access`].
//!
//! Paths are entity paths without the host, compared ignoring ASCII case
//! ([`resource_path`]): Service Bus signs `sb://<host>/<path>`, and clients sign the host
//! they dialled, so only the path can be compared.

pub mod access;
pub mod sas;

use std::sync::Arc;

use crate::config::{Config, PolicyConfig, Rights};
use crate::wire;

/// The entity-level policies as they are now, each with its entity's lower-cased path.
pub type EntityPolicies = Arc<dyn Fn() -> Vec<(String, PolicyConfig)> + Send + Sync>;

/// The policies of a config, and whether anonymous clients are let in.
pub struct Policies {
    allow_anonymous: bool,
    /// Namespace-level policies.
    namespace: Vec<PolicyConfig>,
    /// Entity-level policies, asked for at each verification (entities and their policies
    /// come and go at run time).
    entities: EntityPolicies,
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies")
            .field("allow_anonymous", &self.allow_anonymous)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// What a verified credential grants: its policy's rights, on the whole namespace or on one
/// entity and its sub-queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The policy's name (safe to log).
    pub policy: String,
    /// Its rights.
    pub rights: Rights,
    /// The path of the entity an entity-level policy belongs to; `None` for the namespace.
    pub entity: Option<String>,
}

impl Principal {
    /// Whether the policy reaches `path`.
    pub fn reaches(&self, path: &str) -> bool {
        self.entity
            .as_deref()
            .is_none_or(|entity| path_covers(entity, path))
    }
}

impl Policies {
    /// The policies `config` declares, its entities' as declared there.
    pub fn from_config(config: &Config) -> Policies {
        let queues = config
            .queues
            .iter()
            .map(|queue| (&queue.name, &queue.shared_access_policies));
        let topics = config
            .topics
            .iter()
            .map(|topic| (&topic.name, &topic.shared_access_policies));
        let entities: Vec<(String, PolicyConfig)> = queues
            .chain(topics)
            .flat_map(|(name, policies)| {
                policies
                    .iter()
                    .map(move |policy| (name.to_ascii_lowercase(), policy.clone()))
            })
            .collect();
        Policies::live(config, Arc::new(move || entities.clone()))
    }

    /// The namespace policies `config` declares, and the entities' as `entities` finds
    /// them at each verification.
    pub fn live(config: &Config, entities: EntityPolicies) -> Policies {
        Policies {
            allow_anonymous: config.broker.allow_anonymous,
            namespace: config.shared_access_policies.clone(),
            entities,
        }
    }

    /// Whether a client without a credential may use entities.
    pub fn allow_anonymous(&self) -> bool {
        self.allow_anonymous
    }

    /// The principal of a SASL PLAIN user name and password: a policy with that name and
    /// either of its keys, namespace-level first.
    pub fn authenticate(&self, user: &str, password: &[u8]) -> Option<Principal> {
        self.candidates(user)
            .into_iter()
            .find(|(_, policy)| keys(policy).any(|key| constant_time_eq(key, password)))
            .map(|(entity, policy)| principal(entity.as_deref(), &policy))
    }

    /// The principal of a token: the policy it names, one of whose keys verifies its
    /// signature, among those that reach its resource.
    pub fn verify(&self, token: &sas::Token) -> Option<Principal> {
        let resource = token.resource_path();
        self.candidates(&token.key_name)
            .into_iter()
            .filter(|(entity, _)| {
                (entity.as_deref()).is_none_or(|entity| path_covers(entity, &resource))
            })
            .find(|(_, policy)| keys(policy).any(|key| token.is_signed_with(key)))
            .map(|(entity, policy)| principal(entity.as_deref(), &policy))
    }

    /// The policies called `name` (ignoring case), namespace-level first, with their
    /// entity's path.
    fn candidates(&self, name: &str) -> Vec<(Option<String>, PolicyConfig)> {
        let namespace = (self.namespace.iter()).map(|policy| (None, policy.clone()));
        let entities = (self.entities)()
            .into_iter()
            .map(|(entity, policy)| (Some(entity), policy));
        namespace
            .chain(entities)
            .filter(|(_, policy)| policy.name.eq_ignore_ascii_case(name))
            .collect()
    }
}

/// A policy's keys: its primary key, then its secondary key if it has one.
fn keys(policy: &PolicyConfig) -> impl Iterator<Item = &[u8]> {
    std::iter::once(policy.key.bytes()).chain(policy.secondary_key.as_ref().map(|key| key.bytes()))
}

fn principal(entity: Option<&str>, policy: &PolicyConfig) -> Principal {
    Principal {
        policy: policy.name.clone(),
        rights: policy.rights,
        entity: entity.map(str::to_owned),
    }
}

/// The path of an address or token resource, lower-cased, without scheme, host, leading and
/// trailing slashes: `sb://Host:5671/Queue.1/` is `queue.1`; the namespace is `""`.
pub fn resource_path(address: &str) -> String {
    wire::entity_path(address)
        .trim_end_matches('/')
        .to_ascii_lowercase()
}

/// Whether `prefix` covers `path` by whole segments (both from [`resource_path`]): the
/// namespace covers everything, `queue` covers `queue/$deadletterqueue` but not `queue2`.
pub fn path_covers(prefix: &str, path: &str) -> bool {
    prefix.is_empty()
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Byte equality whose time depends on the lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_cover_by_whole_segments_ignoring_host_and_case() {
        assert_eq!(resource_path("sb://Host:5671/Queue.1/"), "queue.1");
        assert_eq!(resource_path("sb://host/"), "");
        assert_eq!(resource_path("amqps://host"), "");
        assert!(path_covers("", "queue.1"));
        assert!(path_covers("queue.1", "queue.1"));
        assert!(path_covers("queue.1", "queue.1/$deadletterqueue"));
        assert!(path_covers("topic", "topic/subscriptions/s1"));
        assert!(!path_covers("queue.1", "queue.10"));
        assert!(!path_covers("queue.1/$deadletterqueue", "queue.1"));
    }

    #[test]
    fn keys_compare_whole() {
        assert!(constant_time_eq(b"key", b"key"));
        assert!(!constant_time_eq(b"key", b"kez"));
        assert!(!constant_time_eq(b"key", b"ke"));
        assert!(!constant_time_eq(b"", b"k"));
    }
}
