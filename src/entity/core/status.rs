//! What the entity takes now, and how its refusals name it: Service Bus's entity status of
//! the queue, topic or each subscription (sends, receives), the session ids an entity that
//! requires sessions insists on, and the paths and rule owners its refusals quote.

use crate::config::EntityStatus;
use crate::entity::core::EntityCore;
use crate::entity::sessions::MAX_SESSION_ID_CHARS;
use crate::entity::terms::{ConsumerId, EntityError, LaneId};
use crate::message::Arrival;
use crate::wire;

impl EntityCore {
    /// Refuses what the status of `lane`'s queue, topic or subscription does not allow
    /// (`allows`: sends or receives, named `kind`), as Service Bus words it. A dead-letter
    /// queue hands out its messages whatever the status.
    pub fn check_status(
        &self,
        lane: LaneId,
        allows: fn(EntityStatus) -> bool,
        kind: &'static str,
    ) -> Result<(), EntityError> {
        let status = (self.statuses.get(&lane.subscription).copied()).unwrap_or_default();
        if allows(status) || lane.dead_letter {
            return Ok(());
        }
        Err(EntityError::Disabled {
            entity: self.lane_path(lane),
            operation: (status != EntityStatus::Disabled).then_some(kind),
        })
    }

    /// Refuses a receiver of `lane` unless its status lets it receive.
    pub fn check_receivable(&self, lane: LaneId) -> Result<(), EntityError> {
        self.check_status(lane, EntityStatus::can_receive, "Receive")
    }

    /// Whether the entity takes these messages now: its status lets it receive sends, and
    /// in an entity that requires sessions each names a session of a valid length. A topic
    /// takes a message without one, as Service Bus does: each subscription that requires
    /// sessions dead-letters its copy (`Session id is null.`), the others deliver theirs.
    pub fn check_sendable(&self, messages: &[Arrival]) -> Result<(), EntityError> {
        self.check_status(LaneId::MAIN, EntityStatus::can_send, "Send")?;
        if self.requires_session_id() {
            for message in messages {
                match &message.session_id {
                    None if self.routes.is_some() => {}
                    None => return Err(EntityError::SessionIdMissing(self.identity.name.clone())),
                    Some(id) if id.chars().count() > MAX_SESSION_ID_CHARS => {
                        return Err(EntityError::SessionIdTooLong(id.clone()));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// Stores sent or scheduled messages the entity takes now ([`EntityCore::check_sendable`];
    /// a batch is all or nothing); their sequence numbers.
    pub fn send(&mut self, now_ms: i64, messages: Vec<Arrival>) -> Result<Vec<i64>, EntityError> {
        self.check_sendable(&messages)?;
        self.enqueue(now_ms, messages)
    }

    /// The receivers whose lane's status no longer lets them receive, each with its refusal
    /// (their links must go).
    pub fn refused_receivers(&self) -> Vec<(ConsumerId, EntityError)> {
        self.consumers
            .iter()
            .filter_map(|(consumer, lane)| {
                let refused = self.check_receivable(*lane).err()?;
                Some((*consumer, refused))
            })
            .collect()
    }

    /// The entity path of a lane: the queue's or topic's name, or a subscription's
    /// `<topic>/subscriptions/<name>`.
    pub fn lane_path(&self, lane: LaneId) -> String {
        match self.subscription_name(lane) {
            Some(name) => format!("{}/subscriptions/{name}", self.identity.name),
            None => self.identity.name.clone(),
        }
    }

    /// The name of a lane's subscription (none for a queue's or a topic's own lane).
    fn subscription_name(&self, lane: LaneId) -> Option<String> {
        (self.identity.topic.as_ref())
            .filter(|_| lane.subscription != 0)
            .and_then(|topic| {
                let names = topic.names();
                let (name, _) = names.iter().find(|(_, id)| **id == lane.subscription)?;
                Some(name.clone())
            })
    }

    /// A lane's subscription as Service Bus names it where it names a rule of it,
    /// `<namespace>:Topic:<topic>|<subscription>`: lowercase but for the rule's name, as in
    /// "The messaging entity 'sb-adp-westeurope-prod:Topic:sbt-adp-adapter-incoming|
    /// nsb-sub-avonovaadapter|Adp.Common.Messages.Mds.ReceiveMessageMdsCompany' already
    /// exists." (Particular/NServiceBus.AzureFunctions.InProcess.ServiceBus#748, the .NET
    /// SDK's rule manager against Service Bus).
    pub(super) fn rule_owner(&self, lane: LaneId) -> String {
        let subscription = self.subscription_name(lane).unwrap_or_default();
        let topic = self.identity.name.to_lowercase();
        let subscription = subscription.to_lowercase();
        format!("{}:Topic:{topic}|{subscription}", wire::NAMESPACE)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::entity::core::tests::RULES;
    use crate::entity::core::Identity;
    use crate::entity::queue::Rules;
    use crate::entity::terms::{ReceiveMode, TopicState};
    use crate::store::Recovered;

    fn queue(requires_session: bool) -> EntityCore {
        let rules = Rules {
            requires_session,
            ..RULES
        };
        let mut core =
            EntityCore::queue(rules, u64::MAX, Recovered::default(), Recovered::default());
        core.set_identity(Identity {
            name: "Orders".into(),
            ..Identity::default()
        });
        core
    }

    fn arrival(session: Option<&str>) -> Arrival {
        Arrival {
            bytes: bytes::Bytes::from_static(b"m"),
            ttl_ms: None,
            scheduled_ms: None,
            view: None,
            session_id: session.map(Into::into),
            message_id: None,
            partition_key: None,
        }
    }

    #[test]
    fn a_status_refuses_as_service_bus_words_it_and_a_dead_letter_queue_still_hands_out() {
        let mut core = queue(false);
        assert!(core.check_sendable(&[arrival(None)]).is_ok());
        core.set_status(0, EntityStatus::ReceiveDisabled);
        assert!(
            core.check_sendable(&[arrival(None)]).is_ok(),
            "sends still taken"
        );
        let refused = core.check_receivable(LaneId::MAIN).unwrap_err();
        assert!(
            matches!(&refused, EntityError::Disabled { entity, operation: Some("Receive") } if entity == "Orders"),
            "{refused:?}"
        );
        assert!(core.check_receivable(LaneId::DEAD_LETTER).is_ok());
        core.set_status(0, EntityStatus::Disabled);
        let refused = core.check_sendable(&[arrival(None)]).unwrap_err();
        assert!(
            matches!(
                refused,
                EntityError::Disabled {
                    operation: None,
                    ..
                }
            ),
            "a disabled entity names no operation: {refused:?}"
        );
    }

    #[test]
    fn an_entity_that_requires_sessions_takes_only_messages_with_a_valid_session_id() {
        let mut core = queue(true);
        assert!(matches!(
            core.send(0, vec![arrival(Some("a")), arrival(None)]),
            Err(EntityError::SessionIdMissing(name)) if name == "Orders"
        ));
        let long = "x".repeat(MAX_SESSION_ID_CHARS + 1);
        assert!(matches!(
            core.check_sendable(&[arrival(Some(&long))]),
            Err(EntityError::SessionIdTooLong(_))
        ));
        assert_eq!(core.len(), 0, "a batch is all or nothing");
        assert!(core.send(0, vec![arrival(Some("a"))]).is_ok());
    }

    #[test]
    fn receivers_of_a_lane_that_stops_receiving_are_refused() {
        let mut core = queue(false);
        core.add_consumer(ConsumerId(1), LaneId::MAIN, ReceiveMode::PeekLock, 10)
            .expect("added");
        core.add_consumer(
            ConsumerId(2),
            LaneId::DEAD_LETTER,
            ReceiveMode::PeekLock,
            10,
        )
        .expect("added");
        assert!(core.refused_receivers().is_empty());
        core.set_status(0, EntityStatus::ReceiveDisabled);
        let refused: Vec<ConsumerId> = core
            .refused_receivers()
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(refused, vec![ConsumerId(1)]);
    }

    #[test]
    fn a_subscription_is_named_by_its_topic_path_and_as_a_rule_owner() {
        let topic = Arc::new(TopicState::new(
            [("Audit".to_owned(), 3)].into_iter().collect(),
        ));
        let mut core = queue(false);
        core.set_identity(Identity {
            name: "Sales".into(),
            topic: Some(topic),
            ..Identity::default()
        });
        let lane = LaneId {
            subscription: 3,
            dead_letter: false,
        };
        assert_eq!(core.lane_path(lane), "Sales/subscriptions/Audit");
        assert_eq!(core.lane_path(LaneId::MAIN), "Sales");
        assert_eq!(
            core.rule_owner(lane),
            format!("{}:Topic:sales|audit", wire::NAMESPACE)
        );
    }
}
