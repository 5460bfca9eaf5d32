//! Send-via (amqp-dialect.md §10, design.md D10): which entity a sender's transactional
//! work goes through when its messages are for another queue or topic. Two wire shapes:
//!
//! - a sender attached to the via entity whose link property
//!   `com.microsoft:transfer-destination-address` names the destination (Java's
//!   `enableCrossEntityTransactions`, the older .NET SDK);
//! - a session whose coordinator attached before any entity link (.NET's
//!   `EnableCrossEntityTransactions`): its first entity link names the via entity; later
//!   senders to other queues and topics go through it, and any other link to another entity is
//!   refused, as Service Bus refuses it.
//!
//! A send on such a link outside a transaction goes straight to its destination.

use fe2o3_amqp::types::definitions::{self, AmqpError, Role};
use fe2o3_amqp::types::performatives::Attach;
use fe2o3_amqp::types::primitives::{Symbol, Value};

use crate::amqp::link;
use crate::amqp::transactions::CROSS_ENTITY;
use crate::entity::handle::{EntityHandle, LaneId};
use crate::node::Node;
use crate::wire::via::TRANSFER_DESTINATION_ADDRESS;

/// A session's cross-entity mode, decided by what attaches first.
#[derive(Debug, Default)]
pub enum CrossEntity {
    /// Neither a coordinator nor an entity link has attached yet.
    #[default]
    Fresh,
    /// An entity link came first: the session's links are independent.
    Off,
    /// A coordinator came first: the next entity link names the via entity.
    Awaiting,
    /// The via entity of the session's links.
    Via(EntityHandle),
}

impl CrossEntity {
    /// Where a link of `role` to `node` sends its transactional work: `None` for its own
    /// entity, else the session's via entity.
    ///
    /// # Errors
    /// The cross-entity refusal (`amqp:not-allowed`, Service Bus's wording) for a receiver or
    /// management link to another entity than the via entity.
    pub fn via_for(
        &self,
        role: &Role,
        node: &Node,
    ) -> Result<Option<EntityHandle>, definitions::Error> {
        let (CrossEntity::Via(via), Some(entity)) = (self, entity_of(node)) else {
            return Ok(None);
        };
        if entity.name().eq_ignore_ascii_case(via.name()) {
            return Ok(None);
        }
        match (role, node) {
            (Role::Sender, Node::Entity(..)) => Ok(Some(via.clone())),
            _ => Err(link::amqp_error(AmqpError::NotAllowed, CROSS_ENTITY)),
        }
    }

    /// Notes a link the session accepted to `node`.
    pub fn attached(&mut self, node: &Node) {
        match (&*self, node) {
            (CrossEntity::Fresh, Node::Coordinator) => *self = CrossEntity::Awaiting,
            (CrossEntity::Fresh, node) if entity_of(node).is_some() => *self = CrossEntity::Off,
            (CrossEntity::Awaiting, node) => {
                if let Some(entity) = entity_of(node) {
                    *self = CrossEntity::Via(entity.clone());
                }
            }
            _ => {}
        }
    }
}

/// The queue or topic a node belongs to, if it is one's (a subscription is its topic's).
fn entity_of(node: &Node) -> Option<&EntityHandle> {
    match node {
        Node::Entity(entity, _) | Node::Management(entity, _) => Some(entity),
        Node::Cbs | Node::Coordinator => None,
    }
}

/// The destination a sender's attach names in `com.microsoft:transfer-destination-address`.
pub fn destination_address(attach: &Attach) -> Option<String> {
    let properties = attach.properties.as_ref()?;
    match properties.get(&Symbol::from(TRANSFER_DESTINATION_ADDRESS))? {
        Value::String(address) => Some(address.clone()),
        Value::Symbol(address) => Some(address.0.clone()),
        _ => None,
    }
}

/// A sender's destination node when it names one other than the entity it attached to
/// (`target`): the destination's node, and `target`'s entity as the via entity.
///
/// # Errors
/// `amqp:not-allowed` when `target` is not a queue or topic itself.
pub fn redirect(
    target: Node,
    destination: Node,
) -> Result<(Node, Option<EntityHandle>), definitions::Error> {
    let (Node::Entity(via, LaneId::MAIN), Node::Entity(to, lane)) = (&target, &destination) else {
        return Err(link::amqp_error(
            AmqpError::NotAllowed,
            "a transfer destination is named on a sender to a queue or topic",
        ));
    };
    if to.name().eq_ignore_ascii_case(via.name()) {
        return Ok((target, None));
    }
    Ok((Node::Entity(to.clone(), *lane), Some(via.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::definitions::Fields;

    use crate::amqp::fixtures::entity;

    fn queue(name: &str) -> Node {
        Node::Entity(crate::amqp::fixtures::named(name, false), LaneId::MAIN)
    }

    #[test]
    fn a_coordinator_first_makes_the_first_entity_the_via_of_later_senders() {
        let mut cross = CrossEntity::default();
        cross.attached(&Node::Cbs);
        cross.attached(&Node::Coordinator);
        cross.attached(&queue("a"));
        assert!(matches!(&cross, CrossEntity::Via(via) if via.name() == "a"));
        let via = cross.via_for(&Role::Sender, &queue("b")).expect("sender");
        assert_eq!(via.map(|via| via.name().to_owned()).as_deref(), Some("a"));
        assert!(cross.via_for(&Role::Sender, &queue("A")).unwrap().is_none());
        assert!(cross
            .via_for(&Role::Receiver, &queue("a"))
            .unwrap()
            .is_none());
        let refused = cross.via_for(&Role::Receiver, &queue("b")).unwrap_err();
        assert_eq!(refused.description.as_deref(), Some(CROSS_ENTITY));
        cross.attached(&queue("b"));
        assert!(matches!(&cross, CrossEntity::Via(via) if via.name() == "a"));
    }

    #[test]
    fn an_entity_link_first_leaves_the_session_without_a_via_entity() {
        let mut cross = CrossEntity::default();
        cross.attached(&queue("a"));
        cross.attached(&Node::Coordinator);
        cross.attached(&queue("b"));
        assert!(matches!(cross, CrossEntity::Off));
        assert!(cross
            .via_for(&Role::Receiver, &queue("c"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_destination_property_redirects_a_sender_through_its_target() {
        let mut attach = crate::amqp::fixtures::attach(Role::Sender, "a");
        assert_eq!(destination_address(&attach), None);
        let mut properties = Fields::default();
        properties.insert(
            Symbol::from(TRANSFER_DESTINATION_ADDRESS),
            Value::String("b".into()),
        );
        attach.properties = Some(properties);
        assert_eq!(destination_address(&attach).as_deref(), Some("b"));
        let (node, via) = redirect(queue("a"), queue("b")).expect("redirected");
        assert!(matches!(node, Node::Entity(to, _) if to.name() == "b"));
        assert_eq!(via.map(|via| via.name().to_owned()).as_deref(), Some("a"));
        let (_, same) = redirect(queue("a"), queue("A")).expect("itself");
        assert!(same.is_none());
        let dead_letter = Node::Entity(entity(false), LaneId::DEAD_LETTER);
        assert!(redirect(dead_letter, queue("b")).is_err());
    }
}
