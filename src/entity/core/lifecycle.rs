//! An entity's settings changing while it runs (the administration API, a reloaded
//! configuration), and a topic's subscriptions found by name.

use crate::entity::core::EntityCore;
use crate::entity::settings::{Forward, Settings};
use crate::entity::terms::LaneId;

impl EntityCore {
    /// Applies changed settings of the entity and of each of its subscriptions named in
    /// them: size, time to live, rules, statuses, duplicate detection. Returns where each
    /// lane's queue or subscription forwards to now (the actor's forwarder carries it).
    pub fn apply_settings<'s>(
        &mut self,
        settings: &'s Settings,
        now_ms: i64,
    ) -> Vec<(LaneId, &'s Forward)> {
        self.reconfigure(
            settings.max_size_bytes,
            settings.default_ttl_ms,
            settings.rules,
        );
        self.set_status(0, settings.status);
        self.detect_duplicates(settings.duplicate_window_ms, now_ms);
        let mut forwards = Vec::new();
        if self.identity.topic.is_none() {
            forwards.push((LaneId::MAIN, &settings.forward));
        }
        for (name, subscription) in &settings.subscriptions {
            if let Some(lane) = self.subscription_lane(name) {
                self.reconfigure_subscription(lane, subscription);
                self.set_status(lane.subscription, subscription.status);
                forwards.push((lane, &subscription.forward));
            }
        }
        forwards
    }

    /// The main lane of a topic's subscription, by name (ignoring case); `None` for a queue
    /// or a name it does not have.
    pub fn subscription_lane(&self, name: &str) -> Option<LaneId> {
        let topic = self.identity.topic.as_ref()?;
        let subscription = *topic.names().get(&name.to_lowercase())?;
        Some(LaneId {
            subscription,
            dead_letter: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::EntityStatus;
    use crate::entity::core::Identity;
    use crate::entity::terms::TopicState;
    use crate::store::Recovered;

    #[test]
    fn a_subscription_is_found_by_name_ignoring_case() {
        let names = [("audit".to_owned(), 2)].into_iter().collect();
        let mut core = EntityCore::topic(u64::MAX, i64::MAX, Recovered::default(), Vec::new());
        assert_eq!(
            core.subscription_lane("audit"),
            None,
            "a topic without names yet"
        );
        core.set_identity(Identity {
            topic: Some(Arc::new(TopicState::new(names))),
            ..Identity::default()
        });
        let lane = core.subscription_lane("Audit").expect("found");
        assert_eq!(lane.subscription, 2);
        assert!(!lane.dead_letter);
        assert_eq!(core.subscription_lane("other"), None);
    }

    #[test]
    fn settings_set_statuses_and_say_where_a_queue_forwards() {
        let mut core = EntityCore::queue(
            crate::entity::core::tests::RULES,
            u64::MAX,
            Recovered::default(),
            Recovered::default(),
        );
        let settings = Settings {
            max_size_bytes: u64::MAX,
            default_ttl_ms: i64::MAX,
            rules: None,
            auto_delete_on_idle: None,
            duplicate_window_ms: None,
            forward: Forward::of(&Some("next".into()), &None),
            subscriptions: Vec::new(),
            status: EntityStatus::SendDisabled,
            express: false,
        };
        let forwards = core.apply_settings(&settings, 0);
        assert_eq!(forwards.len(), 1);
        assert_eq!(forwards[0].0, LaneId::MAIN);
        assert_eq!(forwards[0].1.to.as_deref(), Some("next"));
        assert!(core.check_sendable(&[]).is_err(), "sends now refused");
        assert!(core.check_receivable(LaneId::MAIN).is_ok());
    }
}
