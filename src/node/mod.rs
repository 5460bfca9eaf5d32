//! What links attach to: the address router, the request/response nodes (`$cbs`,
//! `<entity>/$management`).

pub mod management;
pub mod response;
pub mod router;

use crate::entity::handle::{EntityHandle, LaneId};
use crate::entity::registry::Registry;

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

impl Node {
    /// The node `address` names now, when this one's entity was deleted and an entity of
    /// that name lives again (created again, e.g. by a reset between tests): a sender's or
    /// management link keeps working on the new entity, as a client that attached again would.
    /// `None` while this node's entity lives, or when nothing of the same kind lives there.
    pub fn rebound(&self, address: &str, registry: &Registry) -> Option<Node> {
        let (Node::Entity(entity, _) | Node::Management(entity, _)) = self else {
            return None;
        };
        if !entity.is_deleted() {
            return None;
        }
        match (self, router::route(registry, address)?) {
            (Node::Entity(..), now @ Node::Entity(..))
            | (Node::Management(..), now @ Node::Management(..)) => Some(now),
            _ => None,
        }
    }
}
