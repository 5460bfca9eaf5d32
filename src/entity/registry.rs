//! Entity names to handles. Names compare case-insensitively, as in Service Bus.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, Durability};
use crate::entity::actor::{self, Commit};
use crate::entity::handle::EntityHandle;
use crate::store::{Flusher, Store, StoreError};

/// Every live entity, by lower-cased name. Built at start and read-only afterwards.
#[derive(Debug, Default)]
pub struct Registry {
    entities: HashMap<String, EntityHandle>,
}

impl Registry {
    /// Recovers and starts an actor for every entity the config declares.
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
        for queue in &config.queues {
            let log = store.log(&queue.name)?;
            let handle = actor::spawn(queue, log, commit.clone(), shutdown.child_token(), tracker)?;
            entities.insert(queue.name.to_lowercase(), handle);
        }
        Ok(Self { entities })
    }

    /// The entity with this name, compared case-insensitively.
    pub fn lookup(&self, name: &str) -> Option<&EntityHandle> {
        self.entities.get(&name.to_lowercase())
    }

    /// How many entities exist.
    pub fn len(&self) -> usize {
        self.entities.len()
    }

    /// Whether no entity exists.
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }
}
