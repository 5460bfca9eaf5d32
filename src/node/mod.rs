//! What links attach to: the address router, the request/response nodes (`$cbs`,
//! `<entity>/$management`).

pub mod management;
pub mod response;
pub mod router;

use crate::entity::handle::{EntityHandle, LaneId};

/// What an address names.
#[derive(Debug, Clone)]
pub enum Node {
    /// A queue or its dead-letter queue: messages flow.
    Entity(EntityHandle, LaneId),
    /// `$cbs`: token requests.
    Cbs,
    /// `<entity>/$management`: management requests for that queue (or dead-letter queue).
    Management(EntityHandle, LaneId),
    /// A transaction coordinator (a sender's target `coordinator`): `declare` and `discharge`.
    Coordinator,
}
