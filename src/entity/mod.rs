//! Entities (queues) as actors: the typed handle, the pure core (intake, schedule, lanes), the
//! task and the registry.

pub mod actor;
pub mod commit;
pub mod core;
pub mod duplicates;
pub mod forward;
pub mod handle;
pub mod intake;
pub mod operation;
pub mod partition;
pub mod queue;
pub mod registry;
pub mod router;
pub mod schedule;
pub mod sessions;
pub mod settings;
pub mod setup;
pub mod staging;
pub mod terms;
pub mod topic;
pub mod transfer;
