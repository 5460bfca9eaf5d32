//! From the file as written to [`Config`]: defaults, bounds, names and keys not supported yet,
//! each refusal naming the key and its position.

use std::collections::hash_map::{Entry, HashMap};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;

/// A byte span of the config text.
type Span = Range<usize>;
use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use crate::filter::{JmsSelector, SqlAction, SqlError, SqlFilter};

use super::forwarding;
use super::key_path::key_path_at;
use super::limits::*;
use super::names::{NameRules, QUEUE_NAMES, RULE_NAMES, SUBSCRIPTION_NAMES, TOPIC_NAMES};
use super::raw::{LaneKeys, RawBroker, RawConfig, RawQueue, RawRule, RawSubscription, RawTopic};
use super::status::{
    allowed_text, EntityStatus, QUEUE_STATUSES, SUBSCRIPTION_STATUSES, TOPIC_STATUSES,
};
use super::toml_string::offset_in_token;
use super::topics::filter_values;
use super::units::HumanDuration;
use super::{
    AdminConfig, BrokerConfig, Config, ConfigError, Durability, Location, PropertyValue,
    QueueConfig, RuleConfig, RuleFilter, SubscriptionConfig, TestingConfig, TopicConfig,
};

/// The rule a subscription declared without rules gets, as in Service Bus.
pub(super) const DEFAULT_RULE_NAME: &str = "$Default";

/// The text being parsed and its name, to turn byte spans into [`Location`]s.
pub(super) struct Source<'a> {
    pub(super) text: &'a str,
    pub(super) origin: &'a str,
}

/// Subscriptions one topic may have (Service Bus's quota).
pub const MAX_SUBSCRIPTIONS_PER_TOPIC: usize = 2_000;

/// The settings queues and subscriptions share, validated once for both.
struct Lane {
    name: String,
    lock_duration: Duration,
    max_delivery_count: u32,
    default_message_time_to_live: Option<Duration>,
    dead_lettering_on_message_expiration: bool,
    requires_session: bool,
    auto_delete_on_idle: Option<Duration>,
    forward_to: Option<String>,
    forward_dead_lettered_messages_to: Option<String>,
    enable_batched_operations: bool,
    user_metadata: Option<String>,
}

impl Source<'_> {
    /// Validates every section, and the forwarding graph when the text declares every entity
    /// (`whole`); the first problem found is returned.
    pub(super) fn validate(&self, raw: RawConfig, whole: bool) -> Result<Config, ConfigError> {
        let anonymous = raw.broker.allow_anonymous.as_ref().map(Spanned::span);
        let broker = self.broker(raw.broker)?;
        let queue_names = entry_names("queues", "queue", raw.queues.iter().map(|q| &q.name));
        let topic_names = entry_names("topics", "topic", raw.topics.iter().map(|t| &t.name));
        self.check_unique_names(
            queue_names.chain(topic_names),
            "queue and topic names share one namespace and are compared case-insensitively",
        )?;
        let forward_spans = forward_spans(&raw.queues, &raw.topics);
        let queues = each("queues", raw.queues, |path, queue| self.queue(path, queue))?;
        let topics = each("topics", raw.topics, |path, topic| self.topic(path, topic))?;
        let graph = match whole {
            true => forwarding::check(&queues, &topics),
            false => Ok(()),
        };
        graph.map_err(|refusal| {
            let key = forward_key_path(refusal.lane, refusal.key);
            let span = forward_spans.get(&key).cloned().unwrap_or(0..0);
            self.invalid(&key, span, refusal.message)
        })?;
        let shared_access_policies =
            self.policies("shared_access_policies", raw.shared_access_policies)?;
        let admin = AdminConfig {
            listen: match &raw.admin.listen {
                None => Some(DEFAULT_ADMIN_LISTEN),
                Some(written) if written.get_ref().is_empty() => None,
                Some(written) => Some(self.socket_address("admin.listen", written, "5300")?),
            },
            max_connections: self.bounded(
                "admin.max_connections",
                raw.admin.max_connections,
                &ADMIN_CONNECTIONS,
            )?,
            request_timeout: self.bounded(
                "admin.request_timeout",
                raw.admin.request_timeout,
                &REQUEST_TIMEOUT,
            )?,
            hosts: self.admin_hosts(raw.admin.hosts.unwrap_or_default())?,
        };
        let config = Config {
            broker,
            queues,
            topics,
            shared_access_policies,
            admin,
            testing: TestingConfig {
                reset: raw.testing.reset.unwrap_or(false),
                clock: raw.testing.clock.unwrap_or_default(),
                allow_exposed: raw.testing.allow_exposed.unwrap_or(false),
            },
        };
        self.check_someone_can_connect(&config, anonymous)?;
        Ok(config)
    }

    /// Refuses a config that no client could use: anonymous clients refused and no policy to
    /// present a credential for.
    fn check_someone_can_connect(
        &self,
        config: &Config,
        anonymous: Option<Span>,
    ) -> Result<(), ConfigError> {
        let policies = config.shared_access_policies.len()
            + config
                .queues
                .iter()
                .map(|queue| queue.shared_access_policies.len())
                .sum::<usize>()
            + config
                .topics
                .iter()
                .map(|topic| topic.shared_access_policies.len())
                .sum::<usize>();
        if config.broker.allow_anonymous || policies > 0 {
            return Ok(());
        }
        let message = "is false (the default when absent) and no shared access policy is \
                       declared, so no client could connect; declare a \
                       [[shared_access_policies]] or set allow_anonymous = true"
            .to_owned();
        Err(self.invalid("broker.allow_anonymous", anonymous.unwrap_or(0..0), message))
    }

    fn broker(&self, raw: RawBroker) -> Result<BrokerConfig, ConfigError> {
        let listen = self.listen(raw.listen.as_ref())?;
        let tls = self.tls(raw.tls)?;
        if let (None, None, Some(written)) = (listen, &tls, &raw.listen) {
            let message = "is empty and there is no [broker.tls]: the broker would listen \
                           nowhere; give an address or configure TLS"
                .to_owned();
            return Err(self.invalid("broker.listen", written.span(), message));
        }
        let websocket_listen = raw
            .websocket_listen
            .unwrap_or_default()
            .iter()
            .map(|written| self.socket_address("broker.websocket_listen", written, "443"))
            .collect::<Result<_, _>>()?;
        Ok(BrokerConfig {
            listen,
            tls,
            websocket_listen,
            allow_anonymous: raw.allow_anonymous.is_some_and(Spanned::into_inner),
            data_dir: self.data_dir(raw.data_dir)?,
            durability: raw.durability.unwrap_or(Durability::Sync),
            log_format: raw.log_format.unwrap_or_default(),
            flush_interval: self.bounded(
                "broker.flush_interval",
                raw.flush_interval,
                &FLUSH_INTERVAL,
            )?,
            max_message_size: self.bounded(
                "broker.max_message_size",
                raw.max_message_size,
                &MAX_MESSAGE_SIZE,
            )?,
            cache_capacity: self.bounded(
                "broker.cache_capacity",
                raw.cache_capacity,
                &CACHE_CAPACITY,
            )?,
            max_connections: self.bounded(
                "broker.max_connections",
                raw.max_connections,
                &MAX_CONNECTIONS,
            )?,
            idle_timeout: self.bounded("broker.idle_timeout", raw.idle_timeout, &IDLE_TIMEOUT)?,
            max_frame_size: self.bounded(
                "broker.max_frame_size",
                raw.max_frame_size,
                &MAX_FRAME_SIZE,
            )?,
            shutdown_timeout: self.bounded(
                "broker.shutdown_timeout",
                raw.shutdown_timeout,
                &SHUTDOWN_TIMEOUT,
            )?,
            handshake_timeout: self.bounded(
                "broker.handshake_timeout",
                raw.handshake_timeout,
                &HANDSHAKE_TIMEOUT,
            )?,
            connection_buffer: self.bounded(
                "broker.connection_buffer",
                raw.connection_buffer,
                &CONNECTION_BUFFER,
            )?,
            write_timeout: self.bounded(
                "broker.write_timeout",
                raw.write_timeout,
                &WRITE_TIMEOUT,
            )?,
            consumer_window: self.bounded(
                "broker.consumer_window",
                raw.consumer_window,
                &CONSUMER_WINDOW,
            )?,
            max_links_per_connection: self.bounded(
                "broker.max_links_per_connection",
                raw.max_links_per_connection,
                &MAX_LINKS_PER_CONNECTION,
            )?,
            max_entities: self.bounded("broker.max_entities", raw.max_entities, &MAX_ENTITIES)?,
            transaction_timeout: self.bounded(
                "broker.transaction_timeout",
                raw.transaction_timeout,
                &TRANSACTION_TIMEOUT,
            )?,
        })
    }

    /// `broker.listen`: the default when absent, `None` when empty (no plain listener).
    fn listen(&self, raw: Option<&Spanned<String>>) -> Result<Option<SocketAddr>, ConfigError> {
        match raw {
            None => Ok(Some(DEFAULT_LISTEN)),
            Some(raw) if raw.get_ref().is_empty() => Ok(None),
            Some(raw) => self.socket_address("broker.listen", raw, "5672").map(Some),
        }
    }

    /// The socket address at `key`; `port` is the example port errors show.
    /// `[admin] hosts`: host names without a port (letters, digits, `-` and `.`), or `*`.
    fn admin_hosts(&self, written: Vec<Spanned<String>>) -> Result<Vec<String>, ConfigError> {
        written
            .into_iter()
            .map(|host| {
                let span = host.span();
                let name = host.into_inner().to_ascii_lowercase();
                let valid = name == "*"
                    || (!name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
                match valid {
                    true => Ok(name),
                    false => Err(self.invalid(
                        "admin.hosts",
                        span,
                        format!("{name:?} is not a host name (letters, digits, '-' and '.', no port) or \"*\""),
                    )),
                }
            })
            .collect()
    }

    pub(super) fn socket_address(
        &self,
        key: &str,
        raw: &Spanned<String>,
        port: &str,
    ) -> Result<SocketAddr, ConfigError> {
        raw.get_ref().parse().map_err(|_| {
            self.invalid(
                key,
                raw.span(),
                format!(
                    "{:?} is not a socket address; expected IP:port such as \"127.0.0.1:{port}\" \
                     or \"[::]:{port}\" (host names are not resolved)",
                    raw.get_ref()
                ),
            )
        })
    }

    /// The `status` of the entity at `path`, one of `allowed`; absent: active.
    fn status(
        &self,
        path: &str,
        raw: Option<Spanned<String>>,
        allowed: &[EntityStatus],
    ) -> Result<EntityStatus, ConfigError> {
        let Some(raw) = raw else {
            return Ok(EntityStatus::Active);
        };
        match EntityStatus::from_config_name(raw.get_ref()) {
            Some(status) if allowed.contains(&status) => Ok(status),
            _ => {
                let message = format!(
                    "{:?} is not a status this entity can have; allowed: {}",
                    raw.get_ref(),
                    allowed_text(allowed, EntityStatus::config_name)
                );
                Err(self.invalid(&format!("{path}.status"), raw.span(), message))
            }
        }
    }

    fn data_dir(&self, raw: Option<Spanned<PathBuf>>) -> Result<PathBuf, ConfigError> {
        let Some(raw) = raw else {
            return Ok(PathBuf::from(DEFAULT_DATA_DIR));
        };
        if raw.get_ref().as_os_str().is_empty() {
            let message = "must not be empty; expected a directory path".to_owned();
            return Err(self.invalid("broker.data_dir", raw.span(), message));
        }
        Ok(raw.into_inner())
    }

    fn queue(&self, path: &str, mut raw: RawQueue) -> Result<QueueConfig, ConfigError> {
        let keys = raw.take_lane_keys();
        let lane = self.lane(path, raw.name, &QUEUE_NAMES, keys)?;
        Ok(QueueConfig {
            name: lane.name,
            lock_duration: lane.lock_duration,
            max_delivery_count: lane.max_delivery_count,
            max_size_in_megabytes: self.max_size(path, raw.max_size_in_megabytes)?,
            partitions: self.partitions(path, raw.partitions)?,
            default_message_time_to_live: lane.default_message_time_to_live,
            dead_lettering_on_message_expiration: lane.dead_lettering_on_message_expiration,
            requires_session: lane.requires_session,
            auto_delete_on_idle: lane.auto_delete_on_idle,
            enable_batched_operations: lane.enable_batched_operations,
            enable_express: raw.enable_express.is_some_and(Spanned::into_inner),
            requires_duplicate_detection: raw
                .requires_duplicate_detection
                .is_some_and(Spanned::into_inner),
            duplicate_detection_history_time_window: self
                .history_window(path, raw.duplicate_detection_history_time_window)?,
            forward_to: lane.forward_to,
            forward_dead_lettered_messages_to: lane.forward_dead_lettered_messages_to,
            shared_access_policies: self.policies(
                &format!("{path}.shared_access_policies"),
                raw.shared_access_policies,
            )?,
            status: self.status(path, raw.status, QUEUE_STATUSES)?,
            user_metadata: lane.user_metadata,
        })
    }

    fn topic(&self, path: &str, raw: RawTopic) -> Result<TopicConfig, ConfigError> {
        self.check_name(path, &raw.name, &TOPIC_NAMES)?;
        let subscriptions = format!("{path}.subscriptions");
        let names = raw
            .subscriptions
            .iter()
            .map(|subscription| &subscription.name);
        self.check_unique_names(
            entry_names(&subscriptions, "subscription", names),
            "subscription names are compared case-insensitively within their topic",
        )?;
        if let Some(over) = raw.subscriptions.get(MAX_SUBSCRIPTIONS_PER_TOPIC) {
            return Err(self.invalid(
                &format!("{subscriptions}[{MAX_SUBSCRIPTIONS_PER_TOPIC}]"),
                over.name.span(),
                format!(
                    "a topic has at most {MAX_SUBSCRIPTIONS_PER_TOPIC} subscriptions, as in \
                     Service Bus"
                ),
            ));
        }
        Ok(TopicConfig {
            name: raw.name.into_inner(),
            default_message_time_to_live: self.lifetime(
                path,
                "default_message_time_to_live",
                raw.default_message_time_to_live,
            )?,
            max_size_in_megabytes: self.max_size(path, raw.max_size_in_megabytes)?,
            partitions: self.partitions(path, raw.partitions)?,
            auto_delete_on_idle: self.lifetime(
                path,
                "auto_delete_on_idle",
                raw.auto_delete_on_idle,
            )?,
            enable_express: raw.enable_express.is_some_and(Spanned::into_inner),
            support_ordering: raw.support_ordering.is_none_or(Spanned::into_inner),
            enable_batched_operations: raw
                .enable_batched_operations
                .is_none_or(Spanned::into_inner),
            requires_duplicate_detection: raw
                .requires_duplicate_detection
                .is_some_and(Spanned::into_inner),
            duplicate_detection_history_time_window: self
                .history_window(path, raw.duplicate_detection_history_time_window)?,
            shared_access_policies: self.policies(
                &format!("{path}.shared_access_policies"),
                raw.shared_access_policies,
            )?,
            status: self.status(path, raw.status, TOPIC_STATUSES)?,
            user_metadata: self.user_metadata(path, raw.user_metadata)?,
            subscriptions: each(&subscriptions, raw.subscriptions, |path, raw| {
                self.subscription(path, raw)
            })?,
        })
    }

    fn subscription(
        &self,
        path: &str,
        mut raw: RawSubscription,
    ) -> Result<SubscriptionConfig, ConfigError> {
        let keys = raw.take_lane_keys();
        let lane = self.lane(path, raw.name, &SUBSCRIPTION_NAMES, keys)?;
        Ok(SubscriptionConfig {
            name: lane.name,
            lock_duration: lane.lock_duration,
            max_delivery_count: lane.max_delivery_count,
            default_message_time_to_live: lane.default_message_time_to_live,
            dead_lettering_on_message_expiration: lane.dead_lettering_on_message_expiration,
            requires_session: lane.requires_session,
            dead_lettering_on_filter_evaluation_exceptions: raw
                .dead_lettering_on_filter_evaluation_exceptions
                .map_or(
                    DEAD_LETTERING_ON_FILTER_EVALUATION_EXCEPTIONS,
                    Spanned::into_inner,
                ),
            auto_delete_on_idle: lane.auto_delete_on_idle,
            enable_batched_operations: lane.enable_batched_operations,
            forward_to: lane.forward_to,
            forward_dead_lettered_messages_to: lane.forward_dead_lettered_messages_to,
            rules: self.rules(path, raw.rules)?,
            status: self.status(path, raw.status, SUBSCRIPTION_STATUSES)?,
            user_metadata: lane.user_metadata,
        })
    }

    /// The name and the lane keys of the queue or subscription at `path`: the one place their
    /// rules live.
    fn lane(
        &self,
        path: &str,
        name: Spanned<String>,
        name_rules: &NameRules,
        keys: LaneKeys,
    ) -> Result<Lane, ConfigError> {
        self.check_name(path, &name, name_rules)?;
        let key = |key: &str| format!("{path}.{key}");
        Ok(Lane {
            user_metadata: self.user_metadata(path, keys.user_metadata)?,
            forward_to: target(keys.forward_to),
            forward_dead_lettered_messages_to: target(keys.forward_dead_lettered_messages_to),
            name: name.into_inner(),
            lock_duration: self.bounded(
                &key("lock_duration"),
                keys.lock_duration,
                &LOCK_DURATION,
            )?,
            max_delivery_count: self.bounded(
                &key("max_delivery_count"),
                keys.max_delivery_count,
                &MAX_DELIVERY_COUNT,
            )?,
            default_message_time_to_live: self.lifetime(
                path,
                "default_message_time_to_live",
                keys.default_message_time_to_live,
            )?,
            dead_lettering_on_message_expiration: keys
                .dead_lettering_on_message_expiration
                .is_some_and(Spanned::into_inner),
            requires_session: keys.requires_session.is_some_and(Spanned::into_inner),
            enable_batched_operations: keys
                .enable_batched_operations
                .is_none_or(Spanned::into_inner),
            auto_delete_on_idle: self.lifetime(
                path,
                "auto_delete_on_idle",
                keys.auto_delete_on_idle,
            )?,
        })
    }

    /// `default_message_time_to_live` or `auto_delete_on_idle` (`name`) of the queue, topic or
    /// subscription at `path`.
    fn lifetime(
        &self,
        path: &str,
        name: &str,
        raw: Option<Spanned<HumanDuration>>,
    ) -> Result<Option<Duration>, ConfigError> {
        self.optional(&format!("{path}.{name}"), raw, &AT_LEAST_A_SECOND)
    }

    /// `user_metadata` of the queue, topic or subscription at `path` (empty: none).
    fn user_metadata(
        &self,
        path: &str,
        raw: Option<Spanned<String>>,
    ) -> Result<Option<String>, ConfigError> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        let span = raw.span();
        super::user_metadata(raw.into_inner())
            .map_err(|message| self.invalid(&format!("{path}.user_metadata"), span, message))
    }

    /// `duplicate_detection_history_time_window` of the queue or topic at `path`.
    fn history_window(
        &self,
        path: &str,
        raw: Option<Spanned<HumanDuration>>,
    ) -> Result<Duration, ConfigError> {
        let key = format!("{path}.duplicate_detection_history_time_window");
        self.bounded(&key, raw, &DUPLICATE_DETECTION_HISTORY_TIME_WINDOW)
    }

    /// `max_size_in_megabytes` of the queue or topic at `path`.
    fn partitions(
        &self,
        path: &str,
        raw: Option<Spanned<u64>>,
    ) -> Result<Option<u16>, ConfigError> {
        let key = format!("{path}.partitions");
        raw.map(|raw| self.bounded(&key, Some(raw), &PARTITIONS))
            .transpose()
    }

    fn max_size(&self, path: &str, raw: Option<Spanned<u64>>) -> Result<u64, ConfigError> {
        let key = format!("{path}.max_size_in_megabytes");
        self.bounded(&key, raw, &MAX_SIZE_IN_MEGABYTES)
    }

    /// The rules of the subscription at `path`; `$Default`, matching everything, when it
    /// declares none.
    fn rules(
        &self,
        path: &str,
        raw: Vec<Spanned<RawRule>>,
    ) -> Result<Vec<RuleConfig>, ConfigError> {
        if raw.is_empty() {
            return Ok(vec![RuleConfig {
                name: DEFAULT_RULE_NAME.to_owned(),
                filter: RuleFilter::True,
                action: None,
                parameters: Vec::new(),
                action_parameters: Vec::new(),
            }]);
        }
        let rules = format!("{path}.rules");
        self.check_unique_names(
            entry_names(&rules, "rule", raw.iter().map(|rule| &rule.get_ref().name)),
            "rule names are compared case-insensitively within their subscription",
        )?;
        each(&rules, raw, |path, rule| self.rule(path, rule))
    }

    fn rule(&self, path: &str, raw: Spanned<RawRule>) -> Result<RuleConfig, ConfigError> {
        let key = |key: &str| format!("{path}.{key}");
        let span = raw.span();
        let raw = raw.into_inner();
        self.check_name(path, &raw.name, &RULE_NAMES)?;
        let parameters = self.parameters(&key("parameters"), raw.parameters, raw.sql.is_some())?;
        let action_parameters = self.parameters(
            &key("action_parameters"),
            raw.action_parameters,
            raw.action.is_some(),
        )?;
        let filter = match (raw.sql, raw.correlation, raw.selector) {
            (Some(sql), None, None) => {
                let values = filter_values(&parameters);
                self.check_expression(&key("sql"), &sql, |text| {
                    SqlFilter::parse_with(text, values)
                })?;
                RuleFilter::Sql(sql.into_inner())
            }
            (None, Some(correlation), None) if correlation.get_ref().names_nothing() => {
                let message = "names nothing; set at least one of correlation_id, message_id, \
                               to, reply_to, subject, session_id, reply_to_session_id, \
                               content_type and properties";
                return Err(self.invalid(
                    &key("correlation"),
                    correlation.span(),
                    message.to_owned(),
                ));
            }
            (None, Some(correlation), None) => RuleFilter::Correlation(correlation.into_inner()),
            (None, None, Some(selector)) => {
                self.check_expression(&key("selector"), &selector, JmsSelector::parse)?;
                RuleFilter::Selector(selector.into_inner())
            }
            (None, None, None) => {
                let message = "sets no filter; a rule has exactly one of `sql`, `correlation` \
                               and `selector`";
                return Err(self.invalid(path, span, message.to_owned()));
            }
            (sql, correlation, selector) => {
                // Two or more: refused at the second in the file.
                let mut set: Vec<(&str, std::ops::Range<usize>)> = [
                    ("sql", sql.map(|sql| sql.span())),
                    (
                        "correlation",
                        correlation.map(|correlation| correlation.span()),
                    ),
                    ("selector", selector.map(|selector| selector.span())),
                ]
                .into_iter()
                .filter_map(|(key, span)| Some((key, span?)))
                .collect();
                set.sort_by_key(|(_, span)| span.start);
                let message = format!(
                    "sets both `{}` and `{}`; a rule has exactly one filter",
                    set[0].0, set[1].0
                );
                return Err(self.invalid(path, set[1].1.clone(), message));
            }
        };
        if let Some(action) = &raw.action {
            let values = filter_values(&action_parameters);
            self.check_expression(&key("action"), action, |text| {
                SqlAction::parse_with(text, values)
            })?;
        }
        Ok(RuleConfig {
            name: raw.name.into_inner(),
            filter,
            action: raw.action.map(Spanned::into_inner),
            parameters,
            action_parameters,
        })
    }

    /// A rule's `parameters` or `action_parameters` (`key`), sorted by name; refused when the
    /// expression they belong to is not there (`expression`: the rule has it).
    fn parameters(
        &self,
        key: &str,
        raw: Option<Spanned<BTreeMap<String, PropertyValue>>>,
        expression: bool,
    ) -> Result<Vec<(String, PropertyValue)>, ConfigError> {
        let Some(raw) = raw else {
            return Ok(Vec::new());
        };
        if !expression {
            let message = match key.ends_with(".action_parameters") {
                true => "are the values of an action's parameters; the rule has no `action`",
                false => "are the values of a SQL filter's parameters; the rule has no `sql`",
            };
            return Err(self.invalid(key, raw.span(), message.to_owned()));
        }
        Ok(raw.into_inner().into_iter().collect())
    }

    /// Parses a SQL filter or action as the broker will when it creates the rule, so that a
    /// mistake (a syntax error, an expression longer than Service Bus allows) is reported with
    /// its position in the file.
    fn check_expression<T>(
        &self,
        key: &str,
        expression: &Spanned<String>,
        parse: impl FnOnce(&str) -> Result<T, SqlError>,
    ) -> Result<(), ConfigError> {
        parse(expression.get_ref())
            .map(|_| ())
            .map_err(|error| ConfigError::Invalid {
                key: key.to_owned(),
                at: self.expression_location(expression, error.offset),
                message: error.message,
            })
    }

    /// Refuses a name that breaks `rules`; `path` is the table the name belongs to.
    pub(super) fn check_name(
        &self,
        path: &str,
        name: &Spanned<String>,
        rules: &NameRules,
    ) -> Result<(), ConfigError> {
        rules.check(name.get_ref()).map_err(|reason| {
            let message = format!(
                "{:?} is not a valid {} name: {reason}",
                name.get_ref(),
                rules.kind
            );
            self.invalid(&format!("{path}.name"), name.span(), message)
        })
    }

    /// Refuses a name equal to an earlier one ignoring case, naming both. `names` are (path of
    /// the table, kind of name, name) in file order (see [`entry_names`]); `scope` says where
    /// names must differ.
    pub(super) fn check_unique_names<'n>(
        &self,
        names: impl IntoIterator<Item = (String, &'static str, &'n Spanned<String>)>,
        scope: &str,
    ) -> Result<(), ConfigError> {
        let mut seen: HashMap<String, (String, &Spanned<String>)> = HashMap::new();
        for (path, kind, name) in names {
            let (first_path, first) = match seen.entry(name.get_ref().to_lowercase()) {
                Entry::Vacant(vacant) => {
                    vacant.insert((path, name));
                    continue;
                }
                Entry::Occupied(occupied) => occupied.remove(),
            };
            let message = format!(
                "{kind} name {:?} is already used by {first_path}.name = {:?} ({}); {scope}",
                name.get_ref(),
                first.get_ref(),
                self.location(first.span().start),
            );
            return Err(self.invalid(&format!("{path}.name"), name.span(), message));
        }
        Ok(())
    }

    /// The value, converted and within `limits`, or `limits.default` when the key is absent.
    /// A bounded setting without a default: absent stays `None`.
    fn optional<R, T>(
        &self,
        key: &str,
        raw: Option<Spanned<R>>,
        limits: &Limits<T>,
    ) -> Result<Option<T>, ConfigError>
    where
        R: TryInto<T>,
        T: PartialOrd + Copy,
    {
        raw.map(|raw| self.bounded(key, Some(raw), limits))
            .transpose()
    }

    fn bounded<R, T>(
        &self,
        key: &str,
        raw: Option<Spanned<R>>,
        limits: &Limits<T>,
    ) -> Result<T, ConfigError>
    where
        R: TryInto<T>,
        T: PartialOrd + Copy,
    {
        let Some(raw) = raw else {
            return Ok(limits.default);
        };
        let span = raw.span();
        match raw.into_inner().try_into() {
            Ok(value) if (limits.min..=limits.max).contains(&value) => Ok(value),
            _ => {
                let message = format!(
                    "{} is out of range; allowed: {}",
                    self.text.get(span.clone()).unwrap_or_default(),
                    limits.allowed
                );
                Err(self.invalid(key, span, message))
            }
        }
    }

    /// Turns a serde error into a [`ConfigError`], naming the key it points at.
    pub(super) fn deserialize_error(&self, error: &toml::de::Error) -> ConfigError {
        let offset = error.span().map_or(0, |span| span.start);
        let at = self.location(offset);
        let message = error.message().trim().replace('\n', "; ");
        if toml::from_str::<toml::Table>(self.text).is_err() {
            return ConfigError::Syntax {
                at,
                format: "TOML",
                message,
            };
        }
        let key = key_path_at(self.text, offset).unwrap_or_else(|| "<document>".to_owned());
        ConfigError::Invalid { key, at, message }
    }

    pub(super) fn invalid(&self, key: &str, span: Range<usize>, message: String) -> ConfigError {
        ConfigError::Invalid {
            key: key.to_owned(),
            at: self.location(span.start),
            message,
        }
    }

    /// The 1-based line and character column of byte `offset`.
    pub(super) fn location(&self, offset: usize) -> Location {
        let before = self.text.get(..offset).unwrap_or(self.text);
        let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
        Location {
            origin: self.origin.to_owned(),
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }

    /// Where byte `offset` of a string value stands in the file, e.g. where a SQL parser
    /// stopped in a rule's `sql` or `action` (`value` with its span, as the raw rule keeps
    /// it). Exact for every kind of TOML string, escapes and multi-line strings included
    /// (`toml_string`); should re-reading the string not give `value`, the start of the value.
    pub(super) fn expression_location(&self, value: &Spanned<String>, offset: usize) -> Location {
        let span = value.span();
        let token = self.text.get(span.clone()).unwrap_or_default();
        let within = offset_in_token(token, value.get_ref(), offset).unwrap_or(0);
        self.location(span.start + within)
    }
}

/// A forwarding target as written: `None` when absent or empty (as in the emulator's file).
fn target(raw: Option<Spanned<String>>) -> Option<String> {
    forwarding::target(raw.map(Spanned::into_inner))
}

/// The key path of a lane's forwarding key, as [`forward_spans`] names it.
fn forward_key_path(lane: forwarding::Lane, key: forwarding::Key) -> String {
    let table = match lane {
        forwarding::Lane::Queue(index) => format!("queues[{index}]"),
        forwarding::Lane::Subscription(topic, subscription) => {
            format!("topics[{topic}].subscriptions[{subscription}]")
        }
    };
    let key = match key {
        forwarding::Key::ForwardTo => "forward_to",
        forwarding::Key::DeadLetters => "forward_dead_lettered_messages_to",
    };
    format!("{table}.{key}")
}

/// Where each forwarding key is written, by key path, for the errors of [`forwarding::check`]
/// (validation takes the raw values apart before the check runs).
fn forward_spans(queues: &[RawQueue], topics: &[RawTopic]) -> HashMap<String, Span> {
    use forwarding::{Key, Lane};
    let mut spans = HashMap::new();
    let mut add = |lane: Lane, key: Key, value: &Option<Spanned<String>>| {
        if let Some(value) = value {
            spans.insert(forward_key_path(lane, key), value.span());
        }
    };
    for (index, queue) in queues.iter().enumerate() {
        add(Lane::Queue(index), Key::ForwardTo, &queue.forward_to);
        let dead_letters = &queue.forward_dead_lettered_messages_to;
        add(Lane::Queue(index), Key::DeadLetters, dead_letters);
    }
    for (t, topic) in topics.iter().enumerate() {
        for (s, subscription) in topic.subscriptions.iter().enumerate() {
            add(
                Lane::Subscription(t, s),
                Key::ForwardTo,
                &subscription.forward_to,
            );
            let dead_letters = &subscription.forward_dead_lettered_messages_to;
            add(Lane::Subscription(t, s), Key::DeadLetters, dead_letters);
        }
    }
    spans
}

/// The names of the entries of the array `list`, with the path of each entry and the `kind` of
/// name, for [`Source::check_unique_names`].
pub(super) fn entry_names<'a>(
    list: &'a str,
    kind: &'static str,
    names: impl Iterator<Item = &'a Spanned<String>> + 'a,
) -> impl Iterator<Item = (String, &'static str, &'a Spanned<String>)> + 'a {
    names
        .enumerate()
        .map(move |(index, name)| (format!("{list}[{index}]"), kind, name))
}

/// Validates each entry of the array `list` with its key path, `list[index]`.
pub(super) fn each<R, T>(
    list: &str,
    entries: Vec<R>,
    validate: impl Fn(&str, R) -> Result<T, ConfigError>,
) -> Result<Vec<T>, ConfigError> {
    entries
        .into_iter()
        .enumerate()
        .map(|(index, entry)| validate(&format!("{list}[{index}]"), entry))
        .collect()
}
