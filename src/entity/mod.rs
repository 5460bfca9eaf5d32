//! Entities (queues) as actors: the typed handle, the pure rules, the task and the registry.

pub mod actor;
pub mod handle;
pub mod operation;
pub mod registry;
pub mod state;
