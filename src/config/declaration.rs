//! One entity's declaration on its own: a queue or a topic (with its subscriptions and rules),
//! written back as the TOML a config file would hold and read again with the same validation.
//! Entities created at run time are stored in this form, so they come back at the next start
//! checked by the rules that admitted them.

use std::time::Duration;

use super::validate::DEFAULT_RULE_NAME;
use super::{
    Config, ConfigError, CorrelationConfig, PolicyConfig, PropertyValue, QueueConfig, RuleConfig,
    RuleFilter, SubscriptionConfig, TopicConfig,
};

/// A queue or a topic, as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Declaration {
    /// A `[[queues]]` entry.
    Queue(QueueConfig),
    /// A `[[topics]]` entry with its subscriptions and rules.
    Topic(TopicConfig),
}

impl Declaration {
    /// The entity's name.
    pub fn name(&self) -> &str {
        match self {
            Declaration::Queue(queue) => &queue.name,
            Declaration::Topic(topic) => &topic.name,
        }
    }

    /// How many partitions the entity has; `None`: it is not partitioned.
    pub fn partitions(&self) -> Option<u16> {
        match self {
            Declaration::Queue(queue) => queue.partitions,
            Declaration::Topic(topic) => topic.partitions,
        }
    }

    /// The declaration as config-file TOML: `[[queues]]` or `[[topics]]` with every key, its
    /// shared access policies with their keys (an entity created at run time keeps them in
    /// the store; the registry leaves the config file's out).
    pub fn to_toml(&self) -> String {
        let mut out = Toml::default();
        match self {
            Declaration::Queue(queue) => {
                out.table("[[queues]]");
                out.string("name", &queue.name);
                out.duration("lock_duration", Some(queue.lock_duration));
                out.raw("max_delivery_count", queue.max_delivery_count);
                out.raw("max_size_in_megabytes", queue.max_size_in_megabytes);
                if let Some(partitions) = queue.partitions {
                    out.raw("partitions", partitions);
                }
                out.duration(
                    "default_message_time_to_live",
                    queue.default_message_time_to_live,
                );
                out.raw(
                    "dead_lettering_on_message_expiration",
                    queue.dead_lettering_on_message_expiration,
                );
                out.raw("requires_session", queue.requires_session);
                out.duration("auto_delete_on_idle", queue.auto_delete_on_idle);
                out.raw("enable_express", queue.enable_express);
                out.raw("enable_batched_operations", queue.enable_batched_operations);
                out.duplicate_detection(
                    queue.requires_duplicate_detection,
                    queue.duplicate_detection_history_time_window,
                );
                out.forwarding(&queue.forward_to, &queue.forward_dead_lettered_messages_to);
                out.string("status", queue.status.config_name());
                out.user_metadata(&queue.user_metadata);
                out.policies(
                    "[[queues.shared_access_policies]]",
                    &queue.shared_access_policies,
                );
            }
            Declaration::Topic(topic) => {
                out.table("[[topics]]");
                out.string("name", &topic.name);
                out.duration(
                    "default_message_time_to_live",
                    topic.default_message_time_to_live,
                );
                out.raw("max_size_in_megabytes", topic.max_size_in_megabytes);
                if let Some(partitions) = topic.partitions {
                    out.raw("partitions", partitions);
                }
                out.duration("auto_delete_on_idle", topic.auto_delete_on_idle);
                out.raw("enable_express", topic.enable_express);
                out.raw("support_ordering", topic.support_ordering);
                out.raw("enable_batched_operations", topic.enable_batched_operations);
                out.duplicate_detection(
                    topic.requires_duplicate_detection,
                    topic.duplicate_detection_history_time_window,
                );
                out.string("status", topic.status.config_name());
                out.user_metadata(&topic.user_metadata);
                out.policies(
                    "[[topics.shared_access_policies]]",
                    &topic.shared_access_policies,
                );
                for subscription in &topic.subscriptions {
                    out.subscription(subscription);
                }
            }
        }
        out.0
    }

    /// Reads back what [`Declaration::to_toml`] wrote, validated as a config file's entity.
    ///
    /// # Errors
    /// A [`ConfigError`] when the text is not exactly one valid queue or topic.
    pub fn parse(text: &str, origin: &str) -> Result<Declaration, ConfigError> {
        // The broker keys are not the declaration's: anonymous clients are allowed only so
        // that the whole-config check has nothing to say.
        let text = format!("[broker]\nallow_anonymous = true\n{text}");
        let config = Config::parse_with(&text, origin, false)?;
        let mut entities = config
            .queues
            .into_iter()
            .map(Declaration::Queue)
            .chain(config.topics.into_iter().map(Declaration::Topic));
        match (entities.next(), entities.next()) {
            (Some(declaration), None) => Ok(declaration),
            _ => Err(ConfigError::Invalid {
                key: "<declaration>".to_owned(),
                at: super::Location {
                    origin: origin.to_owned(),
                    line: 1,
                    column: 1,
                },
                message: "a declaration holds exactly one queue or topic".to_owned(),
            }),
        }
    }
}

/// TOML text being written, a line per key.
#[derive(Default)]
struct Toml(String);

impl Toml {
    fn table(&mut self, header: &str) {
        self.0.push_str(header);
        self.0.push('\n');
    }

    fn raw(&mut self, key: &str, value: impl std::fmt::Display) {
        self.0.push_str(&format!("{key} = {value}\n"));
    }

    fn string(&mut self, key: &str, value: &str) {
        self.raw(key, toml::Value::String(value.to_owned()));
    }

    /// A duration in milliseconds (`"1500ms"`), which reads back exactly; absent when `None`.
    fn duration(&mut self, key: &str, value: Option<Duration>) {
        if let Some(duration) = value {
            self.string(key, &format!("{}ms", duration.as_millis()));
        }
    }

    /// A queue's or topic's duplicate-detection keys.
    fn duplicate_detection(&mut self, required: bool, window: Duration) {
        self.raw("requires_duplicate_detection", required);
        self.duration("duplicate_detection_history_time_window", Some(window));
    }

    /// The forwarding keys of a queue or subscription, when set.
    fn forwarding(&mut self, forward_to: &Option<String>, dead_letters: &Option<String>) {
        if let Some(target) = forward_to {
            self.string("forward_to", target);
        }
        if let Some(target) = dead_letters {
            self.string("forward_dead_lettered_messages_to", target);
        }
    }

    /// An entity's shared access policies, each a `header` table.
    fn policies(&mut self, header: &str, policies: &[PolicyConfig]) {
        for policy in policies {
            self.table(header);
            self.string("name", &policy.name);
            self.string("key", policy.key.text());
            if let Some(secondary) = &policy.secondary_key {
                self.string("secondary_key", secondary.text());
            }
            let rights: Vec<toml::Value> = (policy.rights.access_rights())
                .map(|name| toml::Value::String(name.to_owned()))
                .collect();
            self.raw("rights", toml::Value::Array(rights));
        }
    }

    fn subscription(&mut self, subscription: &SubscriptionConfig) {
        self.table("[[topics.subscriptions]]");
        self.string("name", &subscription.name);
        self.duration("lock_duration", Some(subscription.lock_duration));
        self.raw("max_delivery_count", subscription.max_delivery_count);
        self.duration(
            "default_message_time_to_live",
            subscription.default_message_time_to_live,
        );
        self.raw(
            "dead_lettering_on_message_expiration",
            subscription.dead_lettering_on_message_expiration,
        );
        self.raw("requires_session", subscription.requires_session);
        self.raw(
            "dead_lettering_on_filter_evaluation_exceptions",
            subscription.dead_lettering_on_filter_evaluation_exceptions,
        );
        self.duration("auto_delete_on_idle", subscription.auto_delete_on_idle);
        self.raw(
            "enable_batched_operations",
            subscription.enable_batched_operations,
        );
        self.forwarding(
            &subscription.forward_to,
            &subscription.forward_dead_lettered_messages_to,
        );
        self.string("status", subscription.status.config_name());
        self.user_metadata(&subscription.user_metadata);
        // A subscription declared without rules has `$Default` only, and reads back so.
        let only_default = matches!(
            subscription.rules.as_slice(),
            [RuleConfig { filter: RuleFilter::True, action: None, name, .. }] if name == DEFAULT_RULE_NAME
        );
        if !only_default {
            for rule in &subscription.rules {
                self.rule(rule);
            }
        }
    }

    fn rule(&mut self, rule: &RuleConfig) {
        self.table("[[topics.subscriptions.rules]]");
        self.string("name", &rule.name);
        match &rule.filter {
            // The file has no key for the true filter; SQL's `1=1` is the same filter.
            RuleFilter::True => self.string("sql", "1=1"),
            RuleFilter::Sql(sql) => self.string("sql", sql),
            RuleFilter::Correlation(correlation) => {
                self.raw("correlation", correlation_table(correlation))
            }
            RuleFilter::Selector(selector) => self.string("selector", selector),
        }
        if !rule.parameters.is_empty() {
            self.raw("parameters", values_table(&rule.parameters));
        }
        if let Some(action) = &rule.action {
            self.string("action", action);
        }
        if !rule.action_parameters.is_empty() {
            self.raw("action_parameters", values_table(&rule.action_parameters));
        }
    }

    /// An entity's `user_metadata`, when it has some.
    fn user_metadata(&mut self, user_metadata: &Option<String>) {
        if let Some(text) = user_metadata {
            self.string("user_metadata", text);
        }
    }
}

/// A correlation filter as an inline TOML table.
fn correlation_table(correlation: &CorrelationConfig) -> toml::Value {
    let mut table = toml::map::Map::new();
    let fields = [
        ("correlation_id", &correlation.correlation_id),
        ("message_id", &correlation.message_id),
        ("to", &correlation.to),
        ("reply_to", &correlation.reply_to),
        ("subject", &correlation.subject),
        ("session_id", &correlation.session_id),
        ("reply_to_session_id", &correlation.reply_to_session_id),
        ("content_type", &correlation.content_type),
    ];
    for (key, value) in fields {
        if let Some(value) = value {
            table.insert(key.to_owned(), toml::Value::String(value.clone()));
        }
    }
    if !correlation.properties.is_empty() {
        table.insert(
            "properties".to_owned(),
            values_table(&correlation.properties),
        );
    }
    toml::Value::Table(table)
}

/// Named values (correlation properties, SQL parameters) as an inline TOML table.
fn values_table(values: &[(String, PropertyValue)]) -> toml::Value {
    let table = (values.iter())
        .map(|(name, value)| {
            let value = match value {
                PropertyValue::String(text) => toml::Value::String(text.clone()),
                PropertyValue::Int(number) => toml::Value::Integer(*number),
                PropertyValue::Float(number) => toml::Value::Float(*number),
                PropertyValue::Bool(flag) => toml::Value::Boolean(*flag),
            };
            (name.clone(), value)
        })
        .collect();
    toml::Value::Table(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_declaration_of_the_default_and_emulator_configs_reads_back_the_same() {
        let config = Config::embedded_default();
        let mut declarations: Vec<Declaration> = config
            .queues
            .into_iter()
            .map(Declaration::Queue)
            .chain(config.topics.into_iter().map(Declaration::Topic))
            .collect();
        let text = "[broker]\nallow_anonymous = true\n\n[[queues]]\nname = \"q\"\n\
                    lock_duration = \"1.5s\"\ndefault_message_time_to_live = \"2h\"\n\
                    auto_delete_on_idle = \"5m\"\nrequires_session = true\n\
                    dead_lettering_on_message_expiration = true\nmax_size_in_megabytes = 7\n\
                    requires_duplicate_detection = true\n\
                    duplicate_detection_history_time_window = \"90s\"\n\
                    status = \"receive_disabled\"\nuser_metadata = \"notes \\\"quoted\\\"\"\n\n\
                    [[topics]]\nname = \"t\"\ndefault_message_time_to_live = \"1h\"\n\
                    requires_duplicate_detection = true\nstatus = \"send_disabled\"\n\
                    user_metadata = \"topic notes\"\n\
                    [[topics.subscriptions]]\nname = \"s\"\n\
                    dead_lettering_on_filter_evaluation_exceptions = false\n\
                    status = \"disabled\"\nuser_metadata = \"subscription notes\"\n\
                    [[topics.subscriptions.rules]]\nname = \"r\"\n\
                    correlation = { subject = \"a\\\"b\", properties = { n = 3, f = 1.5, \
                    b = true, s = \"x\" } }\naction = \"SET x = 'y'\"\n\
                    [[topics.subscriptions.rules]]\nname = \"p\"\n\
                    sql = \"s = @s AND n > @n\"\nparameters = { \"@s\" = \"b\", \"@n\" = 1 }\n\
                    action = \"SET x = @x\"\naction_parameters = { \"@x\" = 2.5 }\n\
                    [[topics.subscriptions.rules]]\nname = \"j\"\n\
                    selector = \"JMSType = 'it''s \\\"hi\\\"' AND x IS NULL\"\n";
        let extra = Config::parse(text, "t.toml").expect("valid");
        declarations.extend(extra.queues.into_iter().map(Declaration::Queue));
        declarations.extend(extra.topics.into_iter().map(Declaration::Topic));
        for declaration in declarations {
            let text = declaration.to_toml();
            let back =
                Declaration::parse(&text, "stored").unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(back, declaration, "{text}");
        }
    }

    #[test]
    fn a_declaration_is_exactly_one_entity() {
        let two = "[[queues]]\nname = \"a\"\n[[queues]]\nname = \"b\"\n";
        assert!(Declaration::parse(two, "stored").is_err());
        assert!(Declaration::parse("", "stored").is_err());
        let bad = "[[queues]]\nname = \"a b\"\n";
        assert!(Declaration::parse(bad, "stored").is_err());
    }
}
