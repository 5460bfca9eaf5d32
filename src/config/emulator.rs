//! Microsoft's Service Bus emulator configuration (`Config.json`, amqp-dialect.md §13.2), read
//! as it is, so a team leaves the emulator by pointing Tidebus at the file it already has.
//!
//! `UserConfig.Namespaces[0]` gives the queues, topics, subscriptions and rules; the broker
//! settings and the shared access policy are the embedded default's (loopback, the emulator's
//! `RootManageSharedAccessKey`), as the emulator's own are fixed. Unknown properties are errors
//! naming them. Properties for what Tidebus does not do (duplicate detection) are accepted at
//! their off value (`false`) and refused otherwise; `ForwardTo` and
//! `ForwardDeadLetteredMessagesTo` map to the forwarding keys (`""`: none). Absent properties take
//! Tidebus's defaults (Service Bus's), not the emulator's (its TTL of 1 h, 3 deliveries).
//!
//! serde_json carries no spans: errors name the JSON path, and [`locate`] finds where its value
//! starts in the text for the line and column.

use crate::config::SERVICE_BUS_PARTITIONS;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::forwarding;
use super::limits::{
    Limits, AT_LEAST_A_SECOND, DUPLICATE_DETECTION_HISTORY_TIME_WINDOW, LOCK_DURATION,
    MAX_DELIVERY_COUNT,
};
use super::names::{NameRules, QUEUE_NAMES, RULE_NAMES, SUBSCRIPTION_NAMES, TOPIC_NAMES};
use super::status::{
    allowed_text, EntityStatus, QUEUE_STATUSES, SUBSCRIPTION_STATUSES, TOPIC_STATUSES,
};
use super::units::parse_duration;
use super::validate::Source;
use super::validate::MAX_SUBSCRIPTIONS_PER_TOPIC;
use super::{
    Config, ConfigError, CorrelationConfig, PropertyValue, QueueConfig, RuleConfig, RuleFilter,
    SubscriptionConfig, TopicConfig,
};
use crate::filter::{SqlAction, SqlError, SqlFilter};

/// Whether `text` is a JSON document (its first non-blank character opens an object; TOML
/// cannot start so).
pub(super) fn is_json(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct File {
    user_config: UserConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct UserConfig {
    namespaces: Vec<Namespace>,
    #[serde(default)]
    logging: Option<Logging>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Logging {
    #[serde(rename = "Type")]
    kind: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Namespace {
    #[allow(dead_code)] // Read so that it is allowed; the emulator insists on "sbemulatorns".
    name: String,
    #[serde(default)]
    queues: Vec<Entity<QueueProperties>>,
    #[serde(default)]
    topics: Vec<Topic>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Entity<P> {
    name: String,
    #[serde(default = "Option::default")]
    properties: Option<P>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct QueueProperties {
    dead_lettering_on_message_expiration: Option<bool>,
    default_message_time_to_live: Option<String>,
    duplicate_detection_history_time_window: Option<String>,
    enable_partitioning: Option<bool>,
    forward_dead_lettered_messages_to: Option<String>,
    forward_to: Option<String>,
    lock_duration: Option<String>,
    max_delivery_count: Option<u64>,
    requires_duplicate_detection: Option<bool>,
    requires_session: Option<bool>,
    status: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct TopicProperties {
    default_message_time_to_live: Option<String>,
    duplicate_detection_history_time_window: Option<String>,
    enable_partitioning: Option<bool>,
    requires_duplicate_detection: Option<bool>,
    status: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Topic {
    name: String,
    #[serde(default)]
    properties: Option<TopicProperties>,
    #[serde(default)]
    subscriptions: Vec<Subscription>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct SubscriptionProperties {
    dead_lettering_on_message_expiration: Option<bool>,
    default_message_time_to_live: Option<String>,
    forward_dead_lettered_messages_to: Option<String>,
    forward_to: Option<String>,
    lock_duration: Option<String>,
    max_delivery_count: Option<u64>,
    requires_session: Option<bool>,
    status: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Subscription {
    name: String,
    #[serde(default)]
    properties: Option<SubscriptionProperties>,
    #[serde(default)]
    rules: Vec<Entity<RuleProperties>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct RuleProperties {
    filter_type: String,
    correlation_filter: Option<Correlation>,
    sql_filter: Option<Expression>,
    action: Option<Expression>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Correlation {
    content_type: Option<String>,
    correlation_id: Option<String>,
    label: Option<String>,
    message_id: Option<String>,
    reply_to: Option<String>,
    reply_to_session_id: Option<String>,
    session_id: Option<String>,
    to: Option<String>,
    #[serde(default)]
    properties: BTreeMap<String, PropertyValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Expression {
    sql_expression: String,
}

/// The settings queues and subscriptions share, as the file writes them.
struct LaneProperties<'a> {
    lock_duration: &'a Option<String>,
    max_delivery_count: Option<u64>,
    default_message_time_to_live: &'a Option<String>,
}

/// Parses a `Config.json` into a [`Config`]: the embedded default's broker settings and
/// policies, with the file's entities.
pub(super) fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let source = Source { text, origin };
    let reader = Reader { source: &source };
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let file: File = serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|error| reader.serde_error(&error))?;
    let user = file.user_config;
    if user.namespaces.len() != 1 {
        return Err(reader.invalid(
            "UserConfig.Namespaces",
            format!(
                "has {} namespaces; the emulator's file has exactly one",
                user.namespaces.len()
            ),
        ));
    }
    if let Some(logging) = &user.logging {
        let kinds = ["File", "Console", "File,Console", "Console,File"];
        if !kinds.contains(&logging.kind.as_str()) {
            return Err(reader.invalid(
                "UserConfig.Logging.Type",
                format!("{:?} is not one of {kinds:?}", logging.kind),
            ));
        }
    }
    let namespace = user.namespaces.into_iter().next().expect("one namespace");
    let at = "UserConfig.Namespaces[0]";
    let mut seen = BTreeMap::new();
    let mut queues = Vec::new();
    for (index, queue) in namespace.queues.iter().enumerate() {
        let path = format!("{at}.Queues[{index}]");
        reader.unique(&mut seen, &path, &queue.name)?;
        queues.push(reader.queue(&path, queue)?);
    }
    let mut topics = Vec::new();
    for (index, topic) in namespace.topics.iter().enumerate() {
        let path = format!("{at}.Topics[{index}]");
        reader.unique(&mut seen, &path, &topic.name)?;
        topics.push(reader.topic(&path, topic)?);
    }
    forwarding::check(&queues, &topics).map_err(|refusal| {
        let table = match refusal.lane {
            forwarding::Lane::Queue(index) => format!("{at}.Queues[{index}]"),
            forwarding::Lane::Subscription(topic, subscription) => {
                format!("{at}.Topics[{topic}].Subscriptions[{subscription}]")
            }
        };
        let key = match refusal.key {
            forwarding::Key::ForwardTo => "ForwardTo",
            forwarding::Key::DeadLetters => "ForwardDeadLetteredMessagesTo",
        };
        reader.invalid(&format!("{table}.Properties.{key}"), refusal.message)
    })?;
    let default = Config::embedded_default();
    Ok(Config {
        broker: default.broker,
        queues,
        topics,
        shared_access_policies: default.shared_access_policies,
        admin: default.admin,
        testing: default.testing,
    })
}

/// The partitions `EnablePartitioning` gives: Service Bus Standard's 16, or none.
fn partitions(enable_partitioning: Option<bool>) -> Option<u16> {
    enable_partitioning
        .unwrap_or(false)
        .then_some(SERVICE_BUS_PARTITIONS)
}

/// The default size of an entity with or without `EnablePartitioning`: each of a partitioned
/// entity's 16 partitions has the default size, as in Service Bus Standard.
fn partitioned_size(enable_partitioning: Option<bool>) -> u64 {
    let size = super::limits::MAX_SIZE_IN_MEGABYTES.default;
    match partitions(enable_partitioning) {
        Some(partitions) => size * u64::from(partitions),
        None => size,
    }
}

/// Validation of the deserialized file, with positions from the text.
struct Reader<'a> {
    source: &'a Source<'a>,
}

impl Reader<'_> {
    fn queue(
        &self,
        path: &str,
        queue: &Entity<QueueProperties>,
    ) -> Result<QueueConfig, ConfigError> {
        self.name(path, &queue.name, &QUEUE_NAMES)?;
        let empty = QueueProperties::default();
        let properties = queue.properties.as_ref().unwrap_or(&empty);
        let at = format!("{path}.Properties");
        let (requires_duplicate_detection, duplicate_detection_history_time_window) = self
            .duplicate_detection(
                &at,
                properties.requires_duplicate_detection,
                &properties.duplicate_detection_history_time_window,
            )?;
        let lane = LaneProperties {
            lock_duration: &properties.lock_duration,
            max_delivery_count: properties.max_delivery_count,
            default_message_time_to_live: &properties.default_message_time_to_live,
        };
        let (lock_duration, max_delivery_count, default_message_time_to_live) =
            self.lane(&at, &lane)?;
        Ok(QueueConfig {
            name: queue.name.clone(),
            lock_duration,
            max_delivery_count,
            max_size_in_megabytes: partitioned_size(properties.enable_partitioning),
            partitions: partitions(properties.enable_partitioning),
            default_message_time_to_live,
            dead_lettering_on_message_expiration: properties
                .dead_lettering_on_message_expiration
                .unwrap_or(false),
            requires_session: properties.requires_session.unwrap_or(false),
            auto_delete_on_idle: None,
            enable_batched_operations: true,
            enable_express: false,
            requires_duplicate_detection,
            duplicate_detection_history_time_window,
            forward_to: forwarding::target(properties.forward_to.clone()),
            forward_dead_lettered_messages_to: forwarding::target(
                properties.forward_dead_lettered_messages_to.clone(),
            ),
            shared_access_policies: Vec::new(),
            status: self.status(&at, &properties.status, QUEUE_STATUSES)?,
            user_metadata: None,
        })
    }

    /// `Status` of the entity whose properties are at `at`, one of `allowed`; absent: active.
    fn status(
        &self,
        at: &str,
        status: &Option<String>,
        allowed: &[EntityStatus],
    ) -> Result<EntityStatus, ConfigError> {
        let Some(name) = status else {
            return Ok(EntityStatus::Active);
        };
        match EntityStatus::from_service_bus_name(name) {
            Some(status) if allowed.contains(&status) => Ok(status),
            _ => Err(self.invalid(
                &format!("{at}.Status"),
                format!(
                    "{name:?} is not a status this entity can have; allowed: {}",
                    allowed_text(allowed, EntityStatus::service_bus_name)
                ),
            )),
        }
    }

    fn topic(&self, path: &str, topic: &Topic) -> Result<TopicConfig, ConfigError> {
        self.name(path, &topic.name, &TOPIC_NAMES)?;
        let empty = TopicProperties::default();
        let properties = topic.properties.as_ref().unwrap_or(&empty);
        let at = format!("{path}.Properties");
        let (requires_duplicate_detection, duplicate_detection_history_time_window) = self
            .duplicate_detection(
                &at,
                properties.requires_duplicate_detection,
                &properties.duplicate_detection_history_time_window,
            )?;
        if topic.subscriptions.len() > MAX_SUBSCRIPTIONS_PER_TOPIC {
            return Err(self.invalid(
                &format!("{path}.Subscriptions[{MAX_SUBSCRIPTIONS_PER_TOPIC}]"),
                format!(
                    "a topic has at most {MAX_SUBSCRIPTIONS_PER_TOPIC} subscriptions, as in \
                     Service Bus"
                ),
            ));
        }
        let mut seen = BTreeMap::new();
        let mut subscriptions = Vec::new();
        for (index, subscription) in topic.subscriptions.iter().enumerate() {
            let path = format!("{path}.Subscriptions[{index}]");
            self.unique(&mut seen, &path, &subscription.name)?;
            subscriptions.push(self.subscription(&path, subscription)?);
        }
        Ok(TopicConfig {
            name: topic.name.clone(),
            default_message_time_to_live: self.duration(
                &format!("{at}.DefaultMessageTimeToLive"),
                &properties.default_message_time_to_live,
                &AT_LEAST_A_SECOND,
            )?,
            max_size_in_megabytes: partitioned_size(properties.enable_partitioning),
            partitions: partitions(properties.enable_partitioning),
            auto_delete_on_idle: None,
            enable_batched_operations: true,
            enable_express: false,
            support_ordering: true,
            requires_duplicate_detection,
            duplicate_detection_history_time_window,
            shared_access_policies: Vec::new(),
            subscriptions,
            status: self.status(&at, &properties.status, TOPIC_STATUSES)?,
            user_metadata: None,
        })
    }

    fn subscription(
        &self,
        path: &str,
        subscription: &Subscription,
    ) -> Result<SubscriptionConfig, ConfigError> {
        self.name(path, &subscription.name, &SUBSCRIPTION_NAMES)?;
        let empty = SubscriptionProperties::default();
        let properties = subscription.properties.as_ref().unwrap_or(&empty);
        let lane = LaneProperties {
            lock_duration: &properties.lock_duration,
            max_delivery_count: properties.max_delivery_count,
            default_message_time_to_live: &properties.default_message_time_to_live,
        };
        let at = format!("{path}.Properties");
        let (lock_duration, max_delivery_count, default_message_time_to_live) =
            self.lane(&at, &lane)?;
        let status = self.status(&at, &properties.status, SUBSCRIPTION_STATUSES)?;
        let mut seen = BTreeMap::new();
        let mut rules = Vec::new();
        for (index, rule) in subscription.rules.iter().enumerate() {
            let path = format!("{path}.Rules[{index}]");
            self.unique(&mut seen, &path, &rule.name)?;
            rules.push(self.rule(&path, rule)?);
        }
        if rules.is_empty() {
            rules.push(RuleConfig {
                name: "$Default".to_owned(),
                filter: RuleFilter::True,
                action: None,
                parameters: Vec::new(),
                action_parameters: Vec::new(),
            });
        }
        Ok(SubscriptionConfig {
            name: subscription.name.clone(),
            lock_duration,
            max_delivery_count,
            default_message_time_to_live,
            dead_lettering_on_message_expiration: properties
                .dead_lettering_on_message_expiration
                .unwrap_or(false),
            requires_session: properties.requires_session.unwrap_or(false),
            dead_lettering_on_filter_evaluation_exceptions:
                super::limits::DEAD_LETTERING_ON_FILTER_EVALUATION_EXCEPTIONS,
            auto_delete_on_idle: None,
            enable_batched_operations: true,
            forward_to: forwarding::target(properties.forward_to.clone()),
            forward_dead_lettered_messages_to: forwarding::target(
                properties.forward_dead_lettered_messages_to.clone(),
            ),
            rules,
            status,
            user_metadata: None,
        })
    }

    fn rule(&self, path: &str, rule: &Entity<RuleProperties>) -> Result<RuleConfig, ConfigError> {
        self.name(path, &rule.name, &RULE_NAMES)?;
        let at = format!("{path}.Properties");
        let Some(properties) = &rule.properties else {
            return Err(self.invalid(path, "has no Properties; a rule needs a FilterType".into()));
        };
        let filter = match properties.filter_type.as_str() {
            "Sql" => {
                let Some(sql) = &properties.sql_filter else {
                    return Err(
                        self.invalid(&at, "FilterType is Sql but there is no SqlFilter".into())
                    );
                };
                let key = format!("{at}.SqlFilter.SqlExpression");
                self.expression(&key, &sql.sql_expression, SqlFilter::parse)?;
                RuleFilter::Sql(sql.sql_expression.clone())
            }
            "Correlation" => {
                let Some(correlation) = &properties.correlation_filter else {
                    return Err(self.invalid(
                        &at,
                        "FilterType is Correlation but there is no CorrelationFilter".into(),
                    ));
                };
                let filter = correlation_config(correlation);
                if filter.names_nothing() {
                    return Err(self.invalid(
                        &format!("{at}.CorrelationFilter"),
                        "names nothing: every field is empty".into(),
                    ));
                }
                RuleFilter::Correlation(filter)
            }
            other => {
                return Err(self.invalid(
                    &format!("{at}.FilterType"),
                    format!("{other:?} is not a filter type; use \"Sql\" or \"Correlation\""),
                ))
            }
        };
        let action = properties
            .action
            .as_ref()
            .map(|action| action.sql_expression.clone())
            .filter(|expression| !expression.is_empty());
        if let Some(expression) = &action {
            self.expression(
                &format!("{at}.Action.SqlExpression"),
                expression,
                SqlAction::parse,
            )?;
        }
        Ok(RuleConfig {
            name: rule.name.clone(),
            filter,
            action,
            parameters: Vec::new(),
            action_parameters: Vec::new(),
        })
    }

    /// Lock duration, max delivery count and time to live of a queue or subscription whose
    /// `Properties` are at `at`; forwarding only at its off value.
    fn lane(
        &self,
        at: &str,
        lane: &LaneProperties<'_>,
    ) -> Result<(Duration, u32, Option<Duration>), ConfigError> {
        let lock_duration = self
            .duration(
                &format!("{at}.LockDuration"),
                lane.lock_duration,
                &LOCK_DURATION,
            )?
            .unwrap_or(LOCK_DURATION.default);
        let count_key = format!("{at}.MaxDeliveryCount");
        let max_delivery_count = match lane.max_delivery_count {
            None => MAX_DELIVERY_COUNT.default,
            Some(count) => u32::try_from(count)
                .ok()
                .filter(|count| *count >= MAX_DELIVERY_COUNT.min)
                .ok_or_else(|| {
                    self.invalid(
                        &count_key,
                        format!(
                            "{count} is out of range; allowed: {}",
                            MAX_DELIVERY_COUNT.allowed
                        ),
                    )
                })?,
        };
        let default_message_time_to_live = self.duration(
            &format!("{at}.DefaultMessageTimeToLive"),
            lane.default_message_time_to_live,
            &AT_LEAST_A_SECOND,
        )?;
        Ok((
            lock_duration,
            max_delivery_count,
            default_message_time_to_live,
        ))
    }

    /// Refuses duplicate detection switched on; its window is read (and must be a duration)
    /// but means nothing while detection is off.
    /// `RequiresDuplicateDetection` and `DuplicateDetectionHistoryTimeWindow` of a queue's or
    /// topic's properties at `at`.
    fn duplicate_detection(
        &self,
        at: &str,
        requires: Option<bool>,
        window: &Option<String>,
    ) -> Result<(bool, Duration), ConfigError> {
        let key = format!("{at}.DuplicateDetectionHistoryTimeWindow");
        let limits = &DUPLICATE_DETECTION_HISTORY_TIME_WINDOW;
        let window = self.duration(&key, window, limits)?;
        Ok((requires.unwrap_or(false), window.unwrap_or(limits.default)))
    }

    /// An ISO 8601 (or humantime) duration within `limits`, if present.
    fn duration(
        &self,
        key: &str,
        value: &Option<String>,
        limits: &Limits<Duration>,
    ) -> Result<Option<Duration>, ConfigError> {
        let Some(text) = value else {
            return Ok(None);
        };
        let duration = parse_duration(text).map_err(|reason| self.invalid(key, reason))?;
        if !(limits.min..=limits.max).contains(&duration) {
            return Err(self.invalid(
                key,
                format!("{text:?} is out of range; allowed: {}", limits.allowed),
            ));
        }
        Ok(Some(duration))
    }

    fn name(&self, path: &str, name: &str, rules: &NameRules) -> Result<(), ConfigError> {
        rules.check(name).map_err(|reason| {
            let message = format!("{name:?} is not a valid {} name: {reason}", rules.kind);
            self.invalid(&format!("{path}.Name"), message)
        })
    }

    /// Refuses a name used before in the same scope, ignoring case.
    fn unique(
        &self,
        seen: &mut BTreeMap<String, String>,
        path: &str,
        name: &str,
    ) -> Result<(), ConfigError> {
        match seen.insert(name.to_lowercase(), path.to_owned()) {
            None => Ok(()),
            Some(first) => Err(self.invalid(
                &format!("{path}.Name"),
                format!(
                    "{name:?} is already used by {first}.Name (names are compared ignoring case)"
                ),
            )),
        }
    }

    /// Parses a SQL filter or action as the broker will, naming where in it a mistake is.
    fn expression<T>(
        &self,
        key: &str,
        expression: &str,
        parse: fn(&str) -> Result<T, SqlError>,
    ) -> Result<(), ConfigError> {
        parse(expression).map(|_| ()).map_err(|error| {
            let message = format!(
                "{} (at character {} of the expression)",
                error.message,
                error.offset + 1
            );
            self.invalid(key, message)
        })
    }

    /// An error at the JSON path `key`, located in the text.
    fn invalid(&self, key: &str, message: String) -> ConfigError {
        ConfigError::Invalid {
            key: key.to_owned(),
            at: self
                .source
                .location(locate(self.source.text, key).unwrap_or(0)),
            message,
        }
    }

    /// A serde_json error: a syntax error, or a wrong or unknown property, at its line and
    /// column.
    fn serde_error(&self, error: &serde_path_to_error::Error<serde_json::Error>) -> ConfigError {
        let inner = error.inner();
        let at = super::Location {
            origin: self.source.origin.to_owned(),
            line: inner.line(),
            column: inner.column(),
        };
        let message = inner.to_string();
        let message = message
            .split(" at line ")
            .next()
            .unwrap_or(&message)
            .to_owned();
        if inner.is_syntax() || inner.is_eof() {
            return ConfigError::Syntax {
                at,
                format: "JSON",
                message,
            };
        }
        let key = error.path().to_string();
        let key = if key == "." {
            "<document>".to_owned()
        } else {
            key
        };
        ConfigError::Invalid { key, at, message }
    }
}

fn correlation_config(correlation: &Correlation) -> CorrelationConfig {
    // The emulator's files write every field, empty when unused.
    let set = |value: &Option<String>| value.clone().filter(|value| !value.is_empty());
    CorrelationConfig {
        correlation_id: set(&correlation.correlation_id),
        message_id: set(&correlation.message_id),
        to: set(&correlation.to),
        reply_to: set(&correlation.reply_to),
        subject: set(&correlation.label),
        session_id: set(&correlation.session_id),
        reply_to_session_id: set(&correlation.reply_to_session_id),
        content_type: set(&correlation.content_type),
        properties: correlation
            .properties
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
    }
}

/// Where the value at the JSON path `key` (`A.B[2].C`) starts in `text`, if the text has it.
/// The text is known to be valid JSON (serde_json read it), so the scan can be simple.
fn locate(text: &str, key: &str) -> Option<usize> {
    let mut steps = Vec::new();
    for part in key.split('.') {
        let (name, indices) = part.split_once('[').unwrap_or((part, ""));
        steps.push(Step::Key(name));
        for index in indices.split('[') {
            if let Ok(index) = index.trim_end_matches(']').parse() {
                steps.push(Step::Index(index));
            }
        }
    }
    let mut scanner = Scanner {
        text: text.as_bytes(),
        at: 0,
    };
    scanner.find(&steps)
}

enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

struct Scanner<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    /// The offset of the value at `steps` below the value at the cursor.
    fn find(&mut self, steps: &[Step<'_>]) -> Option<usize> {
        self.blank();
        let Some((step, rest)) = steps.split_first() else {
            return Some(self.at);
        };
        match (self.text.get(self.at)?, step) {
            (b'{', Step::Key(wanted)) => {
                self.at += 1;
                loop {
                    self.blank();
                    if self.text.get(self.at)? == &b'}' {
                        return None;
                    }
                    let key = self.string()?;
                    self.blank();
                    self.at += 1; // ':'
                    if key == wanted.as_bytes() {
                        return self.find(rest);
                    }
                    self.skip()?;
                    self.blank();
                    if self.text.get(self.at)? == &b',' {
                        self.at += 1;
                    }
                }
            }
            (b'[', Step::Index(wanted)) => {
                self.at += 1;
                for _ in 0..*wanted {
                    self.skip()?;
                    self.blank();
                    if self.text.get(self.at)? != &b',' {
                        return None;
                    }
                    self.at += 1;
                }
                self.find(rest)
            }
            _ => None,
        }
    }

    fn blank(&mut self) {
        while self.text.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    /// The raw bytes of the string at the cursor, which moves past it.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.at + 1;
        self.at = start;
        loop {
            match self.text.get(self.at)? {
                b'\\' => self.at += 2,
                b'"' => break,
                _ => self.at += 1,
            }
        }
        self.at += 1;
        let text: &'a [u8] = self.text;
        text.get(start..self.at - 1)
    }

    /// Moves the cursor past the value at it.
    fn skip(&mut self) -> Option<()> {
        self.blank();
        match self.text.get(self.at)? {
            b'"' => {
                self.string()?;
            }
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.text.get(self.at)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                while !matches!(self.text.get(self.at)?, b',' | b'}' | b']')
                    && !self.text[self.at].is_ascii_whitespace()
                {
                    self.at += 1;
                }
            }
        }
        Some(())
    }
}
