//! Applying a changed config file to the running broker (SIGHUP), through the registry's
//! run-time paths: queues and topics the file adds are created; the settings Service Bus lets an
//! update change are applied in place, without losing messages, locks or connections;
//! subscriptions a topic gains are added, and a subscription's changed settings and rules
//! applied; so are an entity's shared access policies. What needs a restart (listeners, the
//! store, limits, namespace policies, `requires_session`) keeps its running value and is
//! reported; entities the file no longer declares are left alone, and said so. The registry then takes the file's declaration of each entity as the
//! file's ([`Registry::declare`]): a subscription created at run time that the file now
//! declares is the file's from then on, no longer stored as created at run time.

use crate::config::{
    BrokerConfig, Config, Declaration, QueueConfig, RuleConfig, SubscriptionConfig, TopicConfig,
};
use crate::entity::operation::Operation;
use crate::entity::registry::Registry;
use crate::entity::setup;
use std::sync::Arc;

/// What a reload did or left, a line each, for the log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Changes applied.
    pub applied: Vec<String>,
    /// Changes that need a restart, and entities left alone.
    pub kept: Vec<String>,
}

/// Applies `new` over `running` and returns what happened, with the config the next reload
/// compares with (the new file, but for the settings that kept their running values).
pub async fn apply(registry: &Arc<Registry>, running: &Config, new: &Config) -> (Report, Config) {
    let mut report = Report::default();
    restart_only(running, new, &mut report);
    let declared = new
        .queues
        .iter()
        .cloned()
        .map(Declaration::Queue)
        .chain(new.topics.iter().cloned().map(Declaration::Topic));
    for declaration in declared {
        entity(registry, &declaration, &mut report).await;
    }
    for name in undeclared(running, new) {
        report.kept.push(format!(
            "'{name}' is no longer in the file: left alone (delete it through the \
             administration API, or it goes at the next start; a topic with subscriptions \
             created at run time comes back with those alone)"
        ));
    }
    (report, baseline(running, new))
}

/// The queues and topics `running` declares that `new` no longer does (under either kind,
/// ignoring case).
fn undeclared<'a>(running: &'a Config, new: &Config) -> Vec<&'a str> {
    let declared = |name: &str| {
        let named = |other: &String| other.eq_ignore_ascii_case(name);
        new.queues.iter().any(|queue| named(&queue.name))
            || new.topics.iter().any(|topic| named(&topic.name))
    };
    running
        .queues
        .iter()
        .map(|queue| queue.name.as_str())
        .chain(running.topics.iter().map(|topic| topic.name.as_str()))
        .filter(|name| !declared(name))
        .collect()
}

/// The config the next reload compares with: `new`, but for the settings only a restart
/// applies, which keep their `running` values (so a later reload reports them again).
fn baseline(running: &Config, new: &Config) -> Config {
    Config {
        broker: running.broker.clone(),
        admin: running.admin.clone(),
        shared_access_policies: running.shared_access_policies.clone(),
        testing: running.testing.clone(),
        ..new.clone()
    }
}

/// Reports the settings that only a restart applies.
fn restart_only(running: &Config, new: &Config, report: &mut Report) {
    let (old, now) = (&running.broker, &new.broker);
    /// `(key, changed)` for each `[broker]` setting, every one named (a new setting does not
    /// compile until it is listed here).
    macro_rules! broker_keys {
        ($($field:ident),* $(,)?) => {{
            let BrokerConfig { $($field: _),* } = old;
            [$((concat!("broker.", stringify!($field)), old.$field != now.$field),)*]
        }};
    }
    let broker = broker_keys!(
        listen,
        tls,
        websocket_listen,
        data_dir,
        durability,
        flush_interval,
        max_message_size,
        cache_capacity,
        max_connections,
        idle_timeout,
        max_frame_size,
        shutdown_timeout,
        handshake_timeout,
        connection_buffer,
        write_timeout,
        consumer_window,
        max_links_per_connection,
        max_entities,
        transaction_timeout,
        allow_anonymous,
        log_format,
    );
    let others = [
        ("admin", running.admin != new.admin),
        (
            "shared_access_policies",
            running.shared_access_policies != new.shared_access_policies,
        ),
        ("testing", running.testing != new.testing),
    ];
    let changed = broker.iter().chain(&others).filter(|(_, changed)| *changed);
    for (key, _) in changed {
        report.kept.push(format!(
            "{key} changed: it needs a restart and keeps its running value"
        ));
    }
}

/// Creates, updates or reports one declared entity.
async fn entity(registry: &Arc<Registry>, declaration: &Declaration, report: &mut Report) {
    let name = declaration.name();
    let Some(entry) = registry.entry(name) else {
        // Creating opens and recovers the entity's log: off the async runtime.
        let (registry, creating) = (registry.clone(), declaration.clone());
        match tokio::task::spawn_blocking(move || registry.create(&creating, true)).await {
            Ok(Ok(_)) => report.applied.push(format!("created '{name}'")),
            Ok(Err(error)) => report.kept.push(format!("'{name}' not created: {error}")),
            Err(error) => report.kept.push(format!("'{name}' not created: {error}")),
        }
        return;
    };
    let updated = match (&entry.declaration, declaration) {
        (Declaration::Queue(before), Declaration::Queue(after)) => queue(before, after, report),
        (Declaration::Topic(before), Declaration::Topic(after)) => {
            topic(registry, before, after, report).await
        }
        _ => {
            report.kept.push(format!(
                "'{name}' changed between queue and topic: it needs deleting first"
            ));
            None
        }
    };
    if let Some(updated) = updated {
        match registry.update(&updated).await {
            Ok(()) => report.applied.push(format!("updated '{name}'")),
            Err(error) => report.kept.push(format!("'{name}' not updated: {error}")),
        }
    }
    if let Err(error) = registry.declare(declaration).await {
        report.kept.push(format!(
            "'{name}': what the file declares of it is still stored as created at run time: \
             {error}"
        ));
    }
}

/// The queue to update to, if an updatable setting changed; a change an update cannot make
/// is reported.
fn queue(before: &QueueConfig, after: &QueueConfig, report: &mut Report) -> Option<Declaration> {
    if before.requires_session != after.requires_session {
        report.kept.push(format!(
            "'{}': requires_session cannot change on a live queue; it keeps {}",
            before.name, before.requires_session
        ));
    }
    if before.partitions != after.partitions {
        report
            .kept
            .push(partitions_kept(&before.name, before.partitions));
    }
    let updated = QueueConfig {
        requires_session: before.requires_session,
        partitions: before.partitions,
        ..after.clone()
    };
    (updated != *before).then_some(Declaration::Queue(updated))
}

/// Why a changed `partitions` is not applied (as Service Bus: "Partitioning cannot be changed").
fn partitions_kept(name: &str, partitions: Option<u16>) -> String {
    let kept = partitions.map_or_else(|| "none".to_owned(), |count| count.to_string());
    format!("'{name}': partitions cannot change on a live entity; it keeps {kept}")
}

/// The topic to update to, if a topic setting changed; subscriptions the file adds are added
/// first, changed ones reported.
async fn topic(
    registry: &Registry,
    before: &TopicConfig,
    after: &TopicConfig,
    report: &mut Report,
) -> Option<Declaration> {
    let mut subscriptions = before.subscriptions.clone();
    let mut subscription_settings_changed = false;
    for subscription in &after.subscriptions {
        let same_name = |s: &&SubscriptionConfig| s.name.eq_ignore_ascii_case(&subscription.name);
        match before.subscriptions.iter().find(same_name) {
            None => {
                let path = format!("'{}/Subscriptions/{}'", after.name, subscription.name);
                match registry
                    .add_subscription(&after.name, subscription.clone())
                    .await
                {
                    Ok(()) => {
                        report.applied.push(format!("created {path}"));
                        subscriptions.push(subscription.clone());
                    }
                    Err(error) => report.kept.push(format!("{path} not created: {error}")),
                }
            }
            Some(running) if running != subscription => {
                let changed =
                    changed_subscription(registry, &after.name, running, subscription, report)
                        .await;
                if let Some(slot) = subscriptions
                    .iter_mut()
                    .find(|s| s.name.eq_ignore_ascii_case(&subscription.name))
                {
                    *slot = changed;
                }
                subscription_settings_changed = true;
            }
            Some(_) => {}
        }
    }
    if before.partitions != after.partitions {
        report
            .kept
            .push(partitions_kept(&before.name, before.partitions));
    }
    let updated = TopicConfig {
        subscriptions,
        partitions: before.partitions,
        ..after.clone()
    };
    let changed = topic_settings_changed(before, &updated) || subscription_settings_changed;
    changed.then_some(Declaration::Topic(updated))
}

/// Whether a topic setting a reload applies differs between `before` and `after` (its
/// subscriptions are compared one by one, elsewhere).
fn topic_settings_changed(before: &TopicConfig, after: &TopicConfig) -> bool {
    let settings = |topic: &TopicConfig| TopicConfig {
        subscriptions: Vec::new(),
        ..topic.clone()
    };
    settings(before) != settings(after)
}

/// A declared subscription whose settings or rules changed: the rules the file removed or
/// changed are removed and its new or changed ones added (through the subscription's own
/// `remove-rule` and `add-rule`; rules added at run time are not touched), and the settings to
/// apply are returned; `requires_session` keeps its running value.
async fn changed_subscription(
    registry: &Registry,
    topic: &str,
    running: &SubscriptionConfig,
    new: &SubscriptionConfig,
    report: &mut Report,
) -> SubscriptionConfig {
    let path = format!("'{topic}/Subscriptions/{}'", new.name);
    if running.requires_session != new.requires_session {
        report.kept.push(format!(
            "{path}: requires_session cannot change on a live subscription; it keeps {}",
            running.requires_session
        ));
    }
    let same = |a: &RuleConfig, b: &RuleConfig| a.name.eq_ignore_ascii_case(&b.name);
    for old in &running.rules {
        if new.rules.iter().any(|rule| rule == old) {
            continue;
        }
        let operation = Operation::RemoveRule {
            name: old.name.clone(),
        };
        match registry.manage(topic, &new.name, operation).await {
            Ok(_) => report
                .applied
                .push(format!("{path}: removed rule '{}'", old.name)),
            Err(error) => report
                .kept
                .push(format!("{path}: rule '{}' not removed: {error}", old.name)),
        }
    }
    let mut rules = running.rules.clone();
    rules.retain(|old| new.rules.contains(old));
    for declared in &new.rules {
        if running.rules.contains(declared) {
            continue;
        }
        let Some(rule) = setup::rule(declared) else {
            report
                .kept
                .push(format!("{path}: rule '{}' does not parse", declared.name));
            continue;
        };
        match registry
            .manage(topic, &new.name, Operation::AddRule { rule })
            .await
        {
            Ok(_) => {
                report
                    .applied
                    .push(format!("{path}: added rule '{}'", declared.name));
                rules.retain(|old| !same(old, declared));
                rules.push(declared.clone());
            }
            Err(error) => report.kept.push(format!(
                "{path}: rule '{}' not added: {error}",
                declared.name
            )),
        }
    }
    report.applied.push(format!("{path}: settings applied"));
    SubscriptionConfig {
        requires_session: running.requires_session,
        rules,
        ..new.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::EntityStatus;

    /// The embedded default: queues `queue.1` to `queue.3` and `topic.1`, and a namespace
    /// policy.
    fn running() -> Config {
        Config::embedded_default()
    }

    /// What a reload keeps back, a line each, when `new` replaces `running`.
    fn restart_only_kept(running: &Config, new: &Config) -> Vec<String> {
        let mut report = Report::default();
        restart_only(running, new, &mut report);
        assert!(report.applied.is_empty(), "{:?}", report.applied);
        report.kept
    }

    #[test]
    fn settings_only_a_restart_applies_are_reported_by_key() {
        let running = running();
        assert!(restart_only_kept(&running, &running.clone()).is_empty());
        let mut new = running.clone();
        new.broker.idle_timeout += Duration::from_secs(1);
        new.broker.max_connections += 1;
        new.broker.websocket_listen = vec!["127.0.0.1:80".parse().expect("address")];
        new.admin.max_connections += 1;
        new.shared_access_policies.clear();
        new.testing.clock = crate::config::TestClock::Controlled;
        // Entities are not restart-only.
        new.queues.clear();
        let keys: Vec<String> = restart_only_kept(&running, &new)
            .iter()
            .map(|line| {
                let (key, why) = line.split_once(' ').expect("a key, then why");
                assert_eq!(
                    why,
                    "changed: it needs a restart and keeps its running value"
                );
                key.to_owned()
            })
            .collect();
        assert_eq!(
            keys,
            [
                "broker.websocket_listen",
                "broker.max_connections",
                "broker.idle_timeout",
                "admin",
                "shared_access_policies",
                "testing"
            ]
        );
    }

    #[test]
    fn a_restart_only_change_is_reported_again_at_the_next_reload() {
        let running = running();
        let mut new = running.clone();
        new.broker.max_frame_size *= 2;
        new.admin.request_timeout += Duration::from_secs(1);
        new.shared_access_policies.clear();
        new.testing.reset = true;
        new.queues.truncate(1);
        let next = baseline(&running, &new);
        assert_eq!(next.broker, running.broker);
        assert_eq!(next.admin, running.admin);
        assert_eq!(next.shared_access_policies, running.shared_access_policies);
        assert_eq!(next.testing, running.testing);
        assert_eq!(next.queues, new.queues, "entities are the file's");
        assert_eq!(next.topics, new.topics);
        assert_eq!(restart_only_kept(&next, &new).len(), 4);
    }

    #[test]
    fn entities_the_file_no_longer_declares_are_named() {
        let running = running();
        assert!(undeclared(&running, &running.clone()).is_empty());
        let mut new = running.clone();
        new.queues.retain(|queue| queue.name != "queue.2");
        // Another case, or the other kind, is still a declaration of the name.
        new.queues[1].name = "QUEUE.3".into();
        let mut topic = new.topics.remove(0);
        topic.name = "queue.1".into();
        new.queues.retain(|queue| queue.name != "queue.1");
        new.topics.push(topic);
        assert_eq!(undeclared(&running, &new), ["queue.2", "topic.1"]);
    }

    #[test]
    fn a_queue_keeps_requires_session_and_partitions_and_takes_the_rest() {
        let before = running().queues.remove(0);
        let fixed = QueueConfig {
            requires_session: !before.requires_session,
            partitions: Some(2),
            ..before.clone()
        };
        let mut report = Report::default();
        assert_eq!(
            queue(&before, &fixed, &mut report),
            None,
            "nothing to update"
        );
        assert_eq!(report.kept.len(), 2, "{:?}", report.kept);
        assert!(report.kept[0].contains("requires_session cannot change"));
        assert!(report.kept[1].contains("partitions cannot change"));

        let changed = QueueConfig {
            max_delivery_count: before.max_delivery_count + 1,
            ..fixed
        };
        let Some(Declaration::Queue(updated)) = queue(&before, &changed, &mut Report::default())
        else {
            panic!("a changed delivery count is an update");
        };
        assert_eq!(updated.max_delivery_count, changed.max_delivery_count);
        assert_eq!(updated.requires_session, before.requires_session);
        assert_eq!(updated.partitions, before.partitions);
    }

    #[test]
    fn the_topic_settings_a_reload_applies_are_the_ones_compared() {
        let before = running().topics.remove(0);
        assert!(!topic_settings_changed(&before, &before.clone()));
        let subscriptions_only = TopicConfig {
            subscriptions: Vec::new(),
            ..before.clone()
        };
        assert!(!topic_settings_changed(&before, &subscriptions_only));
        let changes = [
            TopicConfig {
                default_message_time_to_live: Some(Duration::from_secs(60)),
                ..before.clone()
            },
            TopicConfig {
                shared_access_policies: running().shared_access_policies,
                ..before.clone()
            },
            TopicConfig {
                max_size_in_megabytes: before.max_size_in_megabytes + 1,
                ..before.clone()
            },
            TopicConfig {
                auto_delete_on_idle: Some(Duration::from_secs(600)),
                ..before.clone()
            },
            TopicConfig {
                status: EntityStatus::SendDisabled,
                ..before.clone()
            },
            TopicConfig {
                user_metadata: Some("notes".into()),
                ..before.clone()
            },
            TopicConfig {
                enable_express: !before.enable_express,
                ..before.clone()
            },
            TopicConfig {
                enable_batched_operations: !before.enable_batched_operations,
                ..before.clone()
            },
            TopicConfig {
                support_ordering: !before.support_ordering,
                ..before.clone()
            },
            TopicConfig {
                requires_duplicate_detection: !before.requires_duplicate_detection,
                ..before.clone()
            },
            TopicConfig {
                duplicate_detection_history_time_window: Duration::from_secs(60),
                ..before.clone()
            },
        ];
        for after in &changes {
            assert!(topic_settings_changed(&before, after), "{after:?}");
        }
    }
}
