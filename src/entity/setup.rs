//! Entities from their declarations (design.md D6, D7): the rules of each lane, a topic's
//! subscriptions with their stable lane numbers and their rules, recovered from the log.

use std::time::Duration;

use crate::clock::millis;
use crate::config::{
    filter_values, CorrelationConfig, Declaration, EntityStatus, QueueConfig, RuleConfig,
    RuleFilter, SubscriptionConfig, TopicConfig,
};
use crate::entity::core::{EntityCore, SubscriptionLanes};
use crate::entity::duplicates::Duplicates;
use crate::entity::handle::Subscriptions;
use crate::entity::partition::Partition;
use crate::entity::queue::Rules;
use crate::entity::settings::{Forward, Settings, SubscriptionSettings};
use crate::entity::terms::LaneId;
use crate::entity::topic::{LocalTimes, Route, Rule};
use crate::filter::{CorrelationFilter, Filter, SqlAction};
use crate::message;
use crate::store::record::NEVER;
use crate::store::{EntityLog, Log, Recovered, StoreError};

/// The rules of a queue's or subscription's own lane.
fn lane_rules(
    lock_duration: Duration,
    max_delivery_count: u32,
    default_ttl: Option<Duration>,
    dead_letter_on_expiry: bool,
    requires_session: bool,
) -> Rules {
    Rules {
        lock_duration_ms: millis(lock_duration),
        max_delivery_count,
        dead_letter_allowed: true,
        default_ttl_ms: default_ttl.map_or(NEVER, millis),
        expires: true,
        dead_letter_on_expiry,
        requires_session,
        counts_deliveries: true,
    }
}

/// The updatable settings a declaration gives.
pub fn settings(declaration: &Declaration) -> Settings {
    match declaration {
        Declaration::Queue(queue) => Settings {
            max_size_bytes: partition_size(queue.max_size_in_megabytes, queue.partitions),
            default_ttl_ms: NEVER,
            rules: Some(lane_rules(
                queue.lock_duration,
                queue.max_delivery_count,
                queue.default_message_time_to_live,
                queue.dead_lettering_on_message_expiration,
                queue.requires_session,
            )),
            auto_delete_on_idle: queue.auto_delete_on_idle,
            duplicate_window_ms: duplicate_window_ms(
                queue.requires_duplicate_detection,
                queue.duplicate_detection_history_time_window,
            ),
            forward: Forward::of(&queue.forward_to, &queue.forward_dead_lettered_messages_to),
            subscriptions: Vec::new(),
            status: queue.status,
            express: queue.enable_express,
        },
        Declaration::Topic(topic) => Settings {
            max_size_bytes: partition_size(topic.max_size_in_megabytes, topic.partitions),
            default_ttl_ms: topic.default_message_time_to_live.map_or(NEVER, millis),
            rules: None,
            auto_delete_on_idle: topic.auto_delete_on_idle,
            duplicate_window_ms: duplicate_window_ms(
                topic.requires_duplicate_detection,
                topic.duplicate_detection_history_time_window,
            ),
            forward: Forward::default(),
            subscriptions: topic
                .subscriptions
                .iter()
                .map(|subscription| {
                    let settings = SubscriptionSettings {
                        rules: lane_rules(
                            subscription.lock_duration,
                            subscription.max_delivery_count,
                            subscription.default_message_time_to_live,
                            subscription.dead_lettering_on_message_expiration,
                            subscription.requires_session,
                        ),
                        dead_letter_on_filter_error: subscription
                            .dead_lettering_on_filter_evaluation_exceptions,
                        auto_delete_ms: subscription.auto_delete_on_idle.map(millis),
                        forward: subscription_forward(subscription),
                        status: subscription.status,
                    };
                    (subscription.name.to_lowercase(), settings)
                })
                .collect(),
            status: topic.status,
            express: topic.enable_express,
        },
    }
}

/// The bytes each actor of an entity of `megabytes` may hold: all of them, or a partitioned
/// entity's share (Service Bus applies a partitioned entity's size per partition).
fn partition_size(megabytes: u64, partitions: Option<u16>) -> u64 {
    let bytes = megabytes.saturating_mul(1024 * 1024);
    bytes / u64::from(partitions.unwrap_or(1).max(1))
}

/// The duplicate-detection window in ms, when the entity requires duplicate detection.
fn duplicate_window_ms(required: bool, window: Duration) -> Option<i64> {
    required.then(|| millis(window))
}

/// Restores the entity's duplicate-detection window (`window_ms`; `None`: no detection) with
/// the ids its log holds; ids stored while it did detect them, and no longer does, are removed
/// at its first write.
fn restore_duplicates(
    core: &mut EntityCore,
    log: &impl Log,
    window_ms: Option<i64>,
) -> Result<(), StoreError> {
    let ids = log.accepted_ids()?;
    if window_ms.is_none() && ids.is_empty() {
        return Ok(());
    }
    let now_ms = crate::clock::now_ms();
    core.restore_duplicates(Duplicates::new(window_ms.unwrap_or(0), ids, now_ms));
    core.detect_duplicates(window_ms, now_ms);
    Ok(())
}

/// What recovery found for a lane; for one that requires sessions, with each message's
/// session id, read from its bytes.
fn recover(
    log: &mut impl Log,
    lane: LaneId,
    requires_session: bool,
) -> Result<Recovered, StoreError> {
    let mut recovered = log.recover(lane)?;
    if requires_session {
        for (seq, _) in &recovered.records {
            if let Some(id) = message::session_id(&log.body(lane, *seq)?) {
                recovered.sessions.insert(*seq, id);
            }
        }
    }
    Ok(recovered)
}

/// Gives `core` its transfer lanes (send-via), with what recovery finds in them.
fn recover_transfers(core: &mut EntityCore, log: &mut impl Log) -> Result<(), StoreError> {
    let lane = log.recover(LaneId::TRANSFER)?;
    let dead = log.recover(LaneId::TRANSFER_DEAD_LETTER)?;
    core.add_transfer_lanes(lane, dead);
    Ok(())
}

/// A queue's parts, recovered from its log.
///
/// # Errors
/// A [`StoreError`] when the log cannot be read back.
pub fn queue(config: &QueueConfig, mut log: EntityLog) -> Result<Parts, StoreError> {
    let rules = lane_rules(
        config.lock_duration,
        config.max_delivery_count,
        config.default_message_time_to_live,
        config.dead_lettering_on_message_expiration,
        config.requires_session,
    );
    let mut core = EntityCore::queue(
        rules,
        partition_size(config.max_size_in_megabytes, config.partitions),
        recover(&mut log, LaneId::MAIN, config.requires_session)?,
        log.recover(LaneId::DEAD_LETTER)?,
    );
    recover_transfers(&mut core, &mut log)?;
    let window_ms = duplicate_window_ms(
        config.requires_duplicate_detection,
        config.duplicate_detection_history_time_window,
    );
    restore_duplicates(&mut core, &log, window_ms)?;
    Ok(Parts {
        name: config.name.clone(),
        core,
        log,
        auto_delete_on_idle: config.auto_delete_on_idle,
        subscriptions: None,
        express: config.enable_express,
        forwards: vec![(
            LaneId::MAIN,
            Forward::of(
                &config.forward_to,
                &config.forward_dead_lettered_messages_to,
            ),
        )],
        statuses: vec![(0, config.status)],
        partition: Partition::ALONE,
    })
}

/// A topic's parts, recovered from its log; each subscription keeps the lane number it was
/// first given, or takes the one in `imposed` (a partitioned topic's first partition's).
///
/// # Errors
/// A [`StoreError`] when the log cannot be read back or the numbers cannot be stored.
pub fn topic(
    config: &TopicConfig,
    mut log: EntityLog,
    imposed: Option<&Subscriptions>,
) -> Result<Parts, StoreError> {
    let names: Vec<String> = config
        .subscriptions
        .iter()
        .map(|subscription| subscription.name.to_lowercase())
        .collect();
    let numbers = log.subscription_numbers(&names, 0, imposed)?;
    let mut subscriptions = Vec::with_capacity(config.subscriptions.len());
    let mut forwards = Vec::new();
    for (subscription, name) in config.subscriptions.iter().zip(&names) {
        let lane = LaneId {
            subscription: numbers[name],
            dead_letter: false,
        };
        forwards.push((lane, subscription_forward(subscription)));
        let added = added_rules(&log, lane)?;
        let main = recover(&mut log, lane, subscription.requires_session)?;
        let dead_letter = log.recover(lane.dead_letter_lane())?;
        subscriptions.push(subscription_lanes(
            subscription,
            lane,
            added,
            main,
            dead_letter,
        ));
    }
    let mut core = EntityCore::topic(
        partition_size(config.max_size_in_megabytes, config.partitions),
        config.default_message_time_to_live.map_or(NEVER, millis),
        log.recover(LaneId::MAIN)?,
        subscriptions,
    );
    recover_transfers(&mut core, &mut log)?;
    let window_ms = duplicate_window_ms(
        config.requires_duplicate_detection,
        config.duplicate_detection_history_time_window,
    );
    restore_duplicates(&mut core, &log, window_ms)?;
    log.end_recovery();
    Ok(Parts {
        name: config.name.clone(),
        core,
        log,
        auto_delete_on_idle: config.auto_delete_on_idle,
        statuses: std::iter::once((0, config.status))
            .chain(
                config
                    .subscriptions
                    .iter()
                    .zip(&names)
                    .map(|(subscription, name)| (numbers[name], subscription.status)),
            )
            .collect(),
        subscriptions: Some(numbers),
        express: config.enable_express,
        forwards,
        partition: Partition::ALONE,
    })
}

/// Where a subscription's lanes forward to.
pub fn subscription_forward(config: &SubscriptionConfig) -> Forward {
    Forward::of(
        &config.forward_to,
        &config.forward_dead_lettered_messages_to,
    )
}

/// A subscription's lanes from its declaration: its route (its declared rules, with the ones
/// `added` at run time), its lane rules, and what recovery found in its two lanes (nothing,
/// for one created at run time).
pub fn subscription_lanes(
    config: &SubscriptionConfig,
    lane: LaneId,
    added: Vec<Rule>,
    main: Recovered,
    dead_letter: Recovered,
) -> SubscriptionLanes {
    SubscriptionLanes {
        route: route(lane, config, added),
        rules: lane_rules(
            config.lock_duration,
            config.max_delivery_count,
            config.default_message_time_to_live,
            config.dead_lettering_on_message_expiration,
            config.requires_session,
        ),
        main,
        dead_letter,
    }
}

/// The rules a subscription was given at run time, read back; one that does not read is
/// left out, loudly.
fn added_rules(log: &impl Log, lane: LaneId) -> Result<Vec<Rule>, StoreError> {
    let mut rules = Vec::new();
    for stored in log.rules(lane)? {
        match Rule::restore(&stored) {
            Ok(rule) => rules.push(rule),
            Err(error) => tracing::error!(?lane, %error, "a stored rule does not read: left out"),
        }
    }
    Ok(rules)
}

/// A subscription's route: its lane and its rules. The rules it was given at run time stay;
/// a declared rule they lack (never added, or removed at run time) is created again, as a
/// declared entity is (design.md D6).
fn route(lane: LaneId, config: &SubscriptionConfig, mut added: Vec<Rule>) -> Route {
    let mut rules = Vec::with_capacity(config.rules.len() + added.len());
    for declared in &config.rules {
        match added
            .iter()
            .position(|rule| rule.name.eq_ignore_ascii_case(&declared.name))
        {
            Some(at) => rules.push(added.remove(at)),
            None => rules.extend(rule(declared)),
        }
    }
    rules.extend(added);
    Route {
        lane,
        rules,
        dead_letter_on_filter_error: config.dead_lettering_on_filter_evaluation_exceptions,
        auto_delete_ms: config.auto_delete_on_idle.map(millis),
        last_active_ms: crate::clock::now_ms(),
    }
}

/// A rule from its declaration. Validation parsed every expression already; one that fails
/// here all the same is left out, loudly.
pub fn rule(config: &RuleConfig) -> Option<Rule> {
    let parsed = parse_rule(config);
    if let Err(error) = &parsed {
        tracing::error!(rule = %config.name, %error, "rule left out");
    }
    parsed.ok()
}

fn parse_rule(config: &RuleConfig) -> Result<Rule, crate::filter::SqlError> {
    let filter = match &config.filter {
        RuleFilter::True => Filter::True,
        RuleFilter::Sql(expression) => Filter::sql(expression, filter_values(&config.parameters))?,
        RuleFilter::Correlation(correlation) => {
            Filter::Correlation(correlation_filter(correlation))
        }
        RuleFilter::Selector(selector) => Filter::selector(selector)?,
    };
    let action = (config.action.as_deref())
        .map(|action| SqlAction::parse_with(action, filter_values(&config.action_parameters)))
        .transpose()?;
    Ok(Rule {
        name: config.name.clone(),
        filter,
        action,
        created_ms: crate::clock::now_ms(),
        // The file declares no times.
        local_times: LocalTimes::default(),
    })
}

fn correlation_filter(config: &CorrelationConfig) -> CorrelationFilter {
    CorrelationFilter {
        correlation_id: config.correlation_id.clone(),
        message_id: config.message_id.clone(),
        to: config.to.clone(),
        reply_to: config.reply_to.clone(),
        subject: config.subject.clone(),
        session_id: config.session_id.clone(),
        reply_to_session_id: config.reply_to_session_id.clone(),
        content_type: config.content_type.clone(),
        properties: filter_values(&config.properties),
    }
}

/// What an entity is made of when its actor starts: its name, its recovered core and log,
/// its idle time, and (a topic) its subscriptions' names and lanes.
pub struct Parts {
    /// The entity's name as declared.
    pub name: String,
    /// Its rules, recovered.
    pub core: EntityCore,
    /// Its log.
    pub log: EntityLog,
    /// `auto_delete_on_idle`, if set.
    pub auto_delete_on_idle: Option<Duration>,
    /// A topic's subscriptions; `None` for a queue.
    pub subscriptions: Option<Subscriptions>,
    /// Where each queue's or subscription's lanes forward to, by its main lane.
    pub forwards: Vec<(LaneId, Forward)>,
    /// The status of the queue or topic (number 0) and of each subscription, by number.
    pub statuses: Vec<(u32, EntityStatus)>,
    /// Whether it acknowledges sends without waiting for the flush (`EnableExpress`).
    pub express: bool,
    /// Its place among its entity's partitions (set by whoever launches a partition).
    pub partition: Partition,
}

/// The embedded default's first queue, as `adjust` changes it, in a `sync` store of its own
/// in a temporary directory (which must outlive the parts): what unit tests run an entity on.
#[cfg(test)]
pub fn sync_queue(
    adjust: impl FnOnce(&mut crate::config::QueueConfig),
) -> (Parts, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = crate::config::Config::embedded_default();
    config.broker.data_dir = dir.path().to_path_buf();
    config.broker.durability = crate::config::Durability::Sync;
    let mut queue = config.queues[0].clone();
    adjust(&mut queue);
    let store = crate::store::Store::open(&config.broker).expect("store");
    let parts = self::queue(&queue, store.log(&queue.name).expect("log")).expect("parts");
    (parts, dir)
}
