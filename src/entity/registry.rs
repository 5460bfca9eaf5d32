//! Entity names to handles. Names compare case-insensitively, as in Service Bus.

use std::collections::HashMap;
use std::sync::RwLock;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, Durability};
use crate::entity::actor::{self, Commit};
use crate::entity::handle::EntityHandle;
use crate::entity::setup;
use crate::store::{Flusher, Store, StoreError};

/// Every live entity, by lower-cased name. Built at start; afterwards entities only leave it
/// (auto-delete on idle).
#[derive(Debug, Default)]
pub struct Registry {
    entities: RwLock<HashMap<String, EntityHandle>>,
}

impl Registry {
    /// Recovers and starts an actor for every queue and topic the config declares.
    ///
    /// # Errors
    /// A [`StoreError`] when an entity's log cannot be opened or read back.
    pub fn start(
        config: &Config,
        store: &Store,
        flusher: Option<&Flusher>,
        shutdown: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<Self, StoreError> {
        let commit = match (store.durability(), flusher) {
            (Durability::Sync, Some(flusher)) => Commit::AfterFlush(flusher.clone()),
            (_, flusher) => Commit::AfterWrite(flusher.cloned()),
        };
        let mut entities = HashMap::new();
        let mut parts = Vec::new();
        for queue in &config.queues {
            parts.push(setup::queue(queue, store.log(&queue.name)?)?);
        }
        for topic in &config.topics {
            parts.push(setup::topic(topic, store.log(&topic.name)?)?);
        }
        for entity in parts {
            let name = entity.name.to_lowercase();
            let handle = actor::spawn(entity, commit.clone(), shutdown.child_token(), tracker);
            entities.insert(name, handle);
        }
        Ok(Self {
            entities: RwLock::new(entities),
        })
    }

    /// The entity with this name, compared case-insensitively.
    pub fn lookup(&self, name: &str) -> Option<EntityHandle> {
        self.read().get(&name.to_lowercase()).cloned()
    }

    /// Every live entity, for the background ticks.
    pub fn handles(&self) -> Vec<EntityHandle> {
        self.read().values().cloned().collect()
    }

    /// Forgets a deleted entity: its address answers `amqp:not-found` from now on.
    pub fn remove(&self, name: &str) {
        self.entities
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&name.to_lowercase());
    }

    /// How many entities exist.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no entity exists.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, EntityHandle>> {
        // The map is never left half-changed, so a panic elsewhere cannot poison its meaning.
        self.entities
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
