//! Entity names to handles. Names compare case-insensitively, as in Service Bus.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::entity::actor;
use crate::entity::handle::EntityHandle;

/// Every live entity, by lower-cased name. Built at start and read-only afterwards.
#[derive(Debug, Default)]
pub struct Registry {
    entities: HashMap<String, EntityHandle>,
}

impl Registry {
    /// Starts an actor for every entity the config declares.
    pub fn start(config: &Config, shutdown: &CancellationToken, tracker: &TaskTracker) -> Self {
        let entities = config
            .queues
            .iter()
            .map(|queue| {
                let handle = actor::spawn(queue, shutdown.child_token(), tracker);
                (queue.name.to_lowercase(), handle)
            })
            .collect();
        Self { entities }
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
