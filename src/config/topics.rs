//! The schema of `[[topics]]`: topics, their subscriptions and the subscriptions' rules
//! (design.md D7: a topic is an intake, each subscription a lane, the rules pick the lanes).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::de::{self, Deserializer, Unexpected};
use serde::Deserialize;

use crate::filter::Filter;

/// One `[[topics]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    /// Entity name, compared case-insensitively; queues and topics share one namespace.
    pub name: String,
    /// Time to live of messages that set none, and the cap of those that do, in every
    /// subscription: a subscription's own default applies only when it is shorter. `None`:
    /// unlimited.
    pub default_message_time_to_live: Option<Duration>,
    /// Most megabytes of messages the topic and its subscriptions hold; sends beyond are
    /// refused. At least 1. A partitioned topic's partitions share it equally.
    pub max_size_in_megabytes: u64,
    /// How many partitions the topic has (1 to 16), each with every subscription; `None`: it
    /// is not partitioned. Fixed for the topic's life.
    pub partitions: Option<u16>,
    /// The topic, its subscriptions and their messages are deleted after this long without
    /// activity; `None`: never.
    pub auto_delete_on_idle: Option<Duration>,
    /// Service Bus's `EnableExpress`, as a queue's
    /// ([`QueueConfig::enable_express`](super::QueueConfig::enable_express)).
    pub enable_express: bool,
    /// Service Bus's `EnableBatchedOperations`, kept and read back, as a queue's.
    pub enable_batched_operations: bool,
    /// Service Bus's `SupportOrdering`, kept and read back: each subscription keeps the
    /// order of the topic's messages either way. Default true.
    pub support_ordering: bool,
    /// Whether a send whose `message-id` the entity accepted within the history window is
    /// acknowledged and dropped (Service Bus's duplicate detection).
    pub requires_duplicate_detection: bool,
    /// How long accepted message ids are remembered; 1 s to 7 days, default 10 min.
    pub duplicate_detection_history_time_window: Duration,
    /// Entity-level shared access policies: their tokens reach this topic, its
    /// subscriptions and their dead-letter queues only.
    pub shared_access_policies: Vec<super::PolicyConfig>,
    /// `[[topics.subscriptions]]`, in file order; names are unique within the topic ignoring
    /// case. Empty is allowed: the topic accepts messages and keeps none.
    pub subscriptions: Vec<SubscriptionConfig>,
    /// Whether it takes sends: active, disabled or send-disabled (its subscriptions hand out
    /// their messages whatever the topic's status).
    pub status: super::EntityStatus,
    /// Service Bus's `UserMetadata`, as a queue's
    /// ([`QueueConfig::user_metadata`](super::QueueConfig::user_metadata)).
    pub user_metadata: Option<String>,
}

/// One `[[topics.subscriptions]]` entry: a queue fed by its topic. Its queue settings have the
/// names, defaults and bounds of [`QueueConfig`](super::QueueConfig)'s. It has no size of its
/// own: the topic's `max_size_in_megabytes` bounds all its subscriptions, as in Service Bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionConfig {
    /// Name, 1 to 50 characters, compared case-insensitively within the topic.
    pub name: String,
    /// How long a peek-lock delivery stays locked; from 1 s to 5 min.
    pub lock_duration: Duration,
    /// Deliveries after which a message is dead-lettered; at least 1.
    pub max_delivery_count: u32,
    /// Time to live of messages that set none, and the cap of those that do (the topic's
    /// wins when shorter); `None`: unlimited.
    pub default_message_time_to_live: Option<Duration>,
    /// Whether expired messages move to the dead-letter queue (else they are deleted).
    pub dead_lettering_on_message_expiration: bool,
    /// Whether messages are received through sessions: every message the topic takes must
    /// carry a session id, and receivers accept a session.
    pub requires_session: bool,
    /// Whether a message whose rule evaluation fails moves to this subscription's dead-letter
    /// queue (else this subscription does not get it). Default `true`, as in Service Bus.
    pub dead_lettering_on_filter_evaluation_exceptions: bool,
    /// The subscription, its messages and its dead-letter queue are deleted after this long
    /// without a receive, a settlement, a rule change or a management operation on it;
    /// `None`: never.
    pub auto_delete_on_idle: Option<Duration>,
    /// Service Bus's `EnableBatchedOperations`, kept and read back, as a queue's.
    pub enable_batched_operations: bool,
    /// The queue or topic every message the subscription gets moves to, named as a queue's
    /// [`forward_to`](super::QueueConfig::forward_to); `None`: none. Receivers of the
    /// subscription itself are then refused.
    pub forward_to: Option<String>,
    /// The queue or topic the subscription's dead-lettered messages move to, named so;
    /// `None`: none.
    pub forward_dead_lettered_messages_to: Option<String>,
    /// The rules, in file order, never empty: a subscription declared without rules has one,
    /// `$Default` with [`RuleFilter::True`]. A message is copied to the subscription once when
    /// any rule matches.
    pub rules: Vec<RuleConfig>,
    /// Whether it hands out messages: active, disabled or receive-disabled (the topic's copies
    /// still arrive; its dead-letter queue always hands out).
    pub status: super::EntityStatus,
    /// Service Bus's `UserMetadata`, as a queue's
    /// ([`QueueConfig::user_metadata`](super::QueueConfig::user_metadata)).
    pub user_metadata: Option<String>,
}

/// One `[[topics.subscriptions.rules]]` entry: a filter and an optional action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleConfig {
    /// Name, 1 to 50 characters, compared case-insensitively within the subscription.
    pub name: String,
    /// Which messages the rule matches.
    pub filter: RuleFilter,
    /// A Service Bus SQL rule action (`SET ...; REMOVE ...`) applied to the subscription's copy
    /// of a matching message, as written (at most 1024 characters; not parsed here).
    pub action: Option<String>,
    /// The values of the SQL filter's `@name` parameters (`parameters = { "@p" = 1 }`,
    /// Service Bus's `SqlFilter.Parameters`), sorted by name; empty for none.
    pub parameters: Vec<(String, PropertyValue)>,
    /// The values of the action's `@name` parameters (`action_parameters`, Service Bus's
    /// `SqlRuleAction.Parameters`), sorted by name; empty for none.
    pub action_parameters: Vec<(String, PropertyValue)>,
}

/// The filter of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleFilter {
    /// Matches every message: the filter of the `$Default` rule a subscription without rules
    /// gets (Service Bus's TrueFilter, `1=1` on the wire). Never written in the file; `sql =
    /// "1=1"` is an [`RuleFilter::Sql`].
    True,
    /// A Service Bus SQL filter expression (`sql = "..."`), as written (at most 1024
    /// characters; not parsed here).
    Sql(String),
    /// A correlation filter (`correlation = { ... }`).
    Correlation(CorrelationConfig),
    /// A JMS 2.0 message selector (`selector = "..."`), as written (at most 1024 characters):
    /// the rule of a subscription made for a JMS consumer, which Service Bus clients see as a
    /// SQL filter of its text.
    Selector(String),
}

impl RuleFilter {
    /// The rule filter a JMS consumer's message selector (the value of its link's
    /// `apache.org:selector-filter:string` source filter) gives the subscription made for it.
    ///
    /// `Ok(None)` for an empty or blank selector, which JMS reads as no selector: the
    /// subscription keeps its `$Default` rule with [`RuleFilter::True`]. Otherwise
    /// `Ok(Some(RuleFilter::Selector(..)))` with the selector as sent, once it parses.
    ///
    /// # Errors
    /// Why the selector is not valid, with its position (`{reason} at position {n}`, `n` the
    /// 1-based byte position), to refuse the link with.
    pub fn jms_selector(selector: &str) -> Result<Option<RuleFilter>, String> {
        match Filter::selector(selector).map_err(|error| error.to_string())? {
            Filter::Selector(_) => Ok(Some(RuleFilter::Selector(selector.to_owned()))),
            // No selector: the filter of every message.
            _ => Ok(None),
        }
    }
}

/// A correlation filter: a message matches when every field that is set equals the message's
/// value. At least one field is set.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorrelationConfig {
    /// The message's `correlation-id`.
    pub correlation_id: Option<String>,
    /// The message's `message-id`.
    pub message_id: Option<String>,
    /// The message's `to`.
    pub to: Option<String>,
    /// The message's `reply-to`.
    pub reply_to: Option<String>,
    /// The message's `subject` (Service Bus's Label).
    pub subject: Option<String>,
    /// The message's `group-id` (Service Bus's SessionId).
    pub session_id: Option<String>,
    /// The message's `reply-to-group-id` (Service Bus's ReplyToSessionId).
    pub reply_to_session_id: Option<String>,
    /// The message's `content-type`.
    pub content_type: Option<String>,
    /// Application properties the message must carry with these values (of the same type),
    /// sorted by name.
    #[serde(default, deserialize_with = "sorted_properties")]
    pub properties: Vec<(String, PropertyValue)>,
}

impl SubscriptionConfig {
    /// A subscription named `name` with every setting at its default and the `$Default` rule,
    /// as the config file would declare it.
    ///
    /// # Errors
    /// Why `name` is not a valid subscription name.
    pub fn named(name: &str) -> Result<SubscriptionConfig, String> {
        let declared = format!(
            "[[topics]]\nname = \"t\"\n[[topics.subscriptions]]\nname = {}\n",
            toml::Value::String(name.to_owned())
        );
        match super::Declaration::parse(&declared, "the request") {
            Ok(super::Declaration::Topic(mut topic)) => Ok(topic.subscriptions.remove(0)),
            Ok(_) => Err("a subscription belongs to a topic".to_owned()),
            Err(error) => Err(error.to_string()),
        }
    }
}

impl CorrelationConfig {
    /// Whether no field is set: such a filter is refused.
    pub(super) fn names_nothing(&self) -> bool {
        let system = [
            &self.correlation_id,
            &self.message_id,
            &self.to,
            &self.reply_to,
            &self.subject,
            &self.session_id,
            &self.reply_to_session_id,
            &self.content_type,
        ];
        system.iter().all(|value| value.is_none()) && self.properties.is_empty()
    }
}

fn sorted_properties<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<(String, PropertyValue)>, D::Error> {
    let table = BTreeMap::<String, PropertyValue>::deserialize(deserializer)?;
    Ok(table.into_iter().collect())
}

/// The value of a correlation filter's application property.
///
/// Floats compare by their bits, so that configs stay [`Eq`]; the config refuses NaN and the
/// infinities, which no message property would equal.
#[derive(Debug, Clone)]
pub enum PropertyValue {
    /// A string (AMQP `string`).
    String(String),
    /// A TOML integer (AMQP `long`).
    Int(i64),
    /// A finite TOML float (AMQP `double`).
    Float(f64),
    /// A boolean.
    Bool(bool),
}

impl PartialEq for PropertyValue {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::String(a), Self::String(b)) => a == b,
            (Self::Int(a), Self::Int(b)) => a == b,
            (Self::Float(a), Self::Float(b)) => a.to_bits() == b.to_bits(),
            (Self::Bool(a), Self::Bool(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for PropertyValue {}

/// Declared values (correlation properties, SQL parameters) as rules compare them.
pub fn filter_values(values: &[(String, PropertyValue)]) -> Vec<(String, crate::filter::Value)> {
    (values.iter())
        .map(|(name, value)| (name.clone(), value.filter_value()))
        .collect()
}

impl PropertyValue {
    /// The value as rules compare it (an integer is a long, a float a double).
    pub fn filter_value(&self) -> crate::filter::Value {
        use crate::filter::Value;
        match self {
            PropertyValue::String(text) => Value::String(text.clone()),
            PropertyValue::Int(number) => Value::Int(*number),
            PropertyValue::Float(number) => Value::Float(*number),
            PropertyValue::Bool(flag) => Value::Bool(*flag),
        }
    }
}

impl<'de> Deserialize<'de> for PropertyValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let expected = &"a string, an integer, a finite float or a boolean";
        match toml::Value::deserialize(deserializer)? {
            toml::Value::String(value) => Ok(PropertyValue::String(value)),
            toml::Value::Integer(value) => Ok(PropertyValue::Int(value)),
            toml::Value::Float(value) if value.is_finite() => Ok(PropertyValue::Float(value)),
            toml::Value::Float(value) => {
                Err(de::Error::invalid_value(Unexpected::Float(value), expected))
            }
            toml::Value::Boolean(value) => Ok(PropertyValue::Bool(value)),
            toml::Value::Datetime(_) => Err(de::Error::invalid_type(
                Unexpected::Other("datetime"),
                expected,
            )),
            toml::Value::Array(_) => Err(de::Error::invalid_type(Unexpected::Seq, expected)),
            toml::Value::Table(_) => Err(de::Error::invalid_type(Unexpected::Map, expected)),
        }
    }
}
