//! Broker configuration: the TOML schema, the embedded default and validation.
//!
//! Parsing happens in two steps. Serde reads the text into the private `Raw*` structs of
//! `raw` that reject unknown keys and wrong types and keep the byte span of every value.
//! [`Config::parse`] then validates those values (`validate`: ranges from `limits`, names by
//! the rules of `names`, keys not supported yet) into the public [`Config`]; the schema of
//! topics, subscriptions and rules is in `topics`. Every [`ConfigError`] names the key path,
//! the file, the line and the column. A serde error only carries a byte span, so `key_path`
//! reads the file a second, lenient time to map that span back to the key path; `toml_string`
//! maps an offset inside a string value (a SQL expression) back to the file. `units` reads
//! durations and sizes.

mod declaration;
mod emulator;
pub mod forwarding;
mod key_path;
mod limits;
pub(crate) mod names;
mod raw;
mod security;
mod status;
#[cfg(test)]
mod tests;
mod toml_string;
mod topics;
mod units;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use self::raw::RawConfig;
use self::validate::Source;

pub use self::declaration::Declaration;
pub use self::limits::SERVICE_BUS_PARTITIONS;
pub use self::security::{PolicyConfig, Rights, SecretKey, TlsConfig};
pub use self::status::EntityStatus;
pub use self::topics::{
    filter_values, CorrelationConfig, PropertyValue, RuleConfig, RuleFilter, SubscriptionConfig,
    TopicConfig,
};
pub use self::units::parse_duration;

/// The embedded default configuration (`config/default.toml`).
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../../config/default.toml");

/// The origin [`Config::embedded_default`] reports in errors.
const EMBEDDED_ORIGIN: &str = "<embedded default>";

/// The whole broker configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Broker-wide settings (`[broker]`).
    pub broker: BrokerConfig,
    /// Declared queues (`[[queues]]`), in file order; names are unique ignoring case, among
    /// queues and topics.
    pub queues: Vec<QueueConfig>,
    /// Declared topics (`[[topics]]`) with their subscriptions and rules, in file order; names
    /// are unique ignoring case, among queues and topics.
    pub topics: Vec<TopicConfig>,
    /// Namespace-level shared access policies (`[[shared_access_policies]]`): a token signed
    /// with one of their keys reaches every entity. Names are unique ignoring case.
    pub shared_access_policies: Vec<PolicyConfig>,
    /// The administration endpoint (`[admin]`).
    pub admin: AdminConfig,
    /// What a test suite may do to the broker (`[testing]`): all off by default.
    pub testing: TestingConfig,
}

/// Settings of `[testing]`: features for a broker that runs under a test suite, each off by
/// default, and refused where the broker looks exposed (TLS, or a listener beyond loopback)
/// unless `allow_exposed` says so.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestingConfig {
    /// `POST /$testing/reset` on the administration endpoint (Manage): the namespace back to
    /// what the config declares, every message and entity created at run time gone.
    pub reset: bool,
    /// The broker's clock: the machine's, or one a test moves forward on the administration
    /// endpoint (`/$testing/clock`).
    pub clock: TestClock,
    /// Testing features on a broker with TLS or a listener beyond loopback.
    pub allow_exposed: bool,
}

/// Whose clock the broker's time rules follow (`[testing] clock`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestClock {
    /// The machine's (the default).
    #[default]
    Real,
    /// The machine's, moved forward by a test (Manage right): schedules, time to live, locks,
    /// idleness and the rest fire without waiting for them.
    Controlled,
}

impl TestingConfig {
    /// The testing features on, by name, for logs and `/health`.
    pub fn features(&self) -> Vec<&'static str> {
        [
            (self.reset, "reset"),
            (self.clock == TestClock::Controlled, "clock"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }

    /// Turns on the features `list` names, comma-separated (`--testing reset,clock,exposed`):
    /// `reset`, `clock` for the controlled clock, and `exposed` for `allow_exposed`.
    ///
    /// # Errors
    /// The name that is not a testing feature.
    pub fn enable(&mut self, list: &str) -> Result<(), String> {
        for name in list
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            match name {
                "reset" => self.reset = true,
                "clock" => self.clock = TestClock::Controlled,
                "exposed" => self.allow_exposed = true,
                other => {
                    return Err(format!(
                        "'{other}' is not a testing feature (reset, clock, exposed)"
                    ))
                }
            }
        }
        Ok(())
    }
}

impl Config {
    /// Refuses testing features on a broker that looks exposed: TLS configured, or an AMQP,
    /// WebSocket or administration listener beyond loopback, unless
    /// `[testing] allow_exposed = true`.
    ///
    /// # Errors
    /// Why, naming the feature and what exposes the broker.
    pub fn check_testing_exposure(&self) -> Result<(), String> {
        let features = self.testing.features();
        if features.is_empty() || self.testing.allow_exposed {
            return Ok(());
        }
        let broker = &self.broker;
        let exposed = broker
            .listen
            .iter()
            .chain(&broker.websocket_listen)
            .chain(&self.admin.listen)
            .find(|address| !address.ip().is_loopback());
        let why = match (&broker.tls, exposed) {
            (Some(_), _) => "[broker.tls] is configured".to_owned(),
            (None, Some(address)) => format!("it listens on {address}, beyond loopback"),
            (None, None) => return Ok(()),
        };
        Err(format!(
            "the testing feature {} is refused: {why}. Testing features are for a broker \
             under a test suite; set [testing] allow_exposed = true (or --testing exposed) to \
             allow them anyway",
            features.join(", ")
        ))
    }
}

/// Settings of `[admin]`: the HTTP(S) administration endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Address the administration endpoint binds (HTTPS when `[broker.tls]` is set); `None`
    /// (written `""`): no endpoint.
    pub listen: Option<SocketAddr>,
    /// Most connections the endpoint serves at once, apart from the AMQP listeners' own
    /// `max_connections`; beyond it, 503.
    pub max_connections: usize,
    /// How long a client may take to send a whole request, head and body.
    pub request_timeout: Duration,
    /// Host names a request may name in `Host` besides loopback names (`localhost`,
    /// `*.localhost`), IP addresses and the machine's own name, lowercase; `*` lets any
    /// through. A request naming another host is refused, so a web page whose name rebinds
    /// to the broker's address cannot reach it.
    pub hosts: Vec<String>,
}

/// How much of an acknowledged change survives a crash (`[broker] durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Acknowledge after fsync: nothing acknowledged is lost.
    Sync,
    /// Acknowledge after the write; fsync every `flush_interval`: a crash loses at most that
    /// window.
    Interval,
    /// Keep nothing on disk: a restart loses every message.
    Memory,
}

impl Durability {
    /// Its name in the config file.
    pub fn name(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Interval => "interval",
            Durability::Memory => "memory",
        }
    }
}

/// How the broker writes its log (`[broker] log_format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event (the default).
    #[default]
    Text,
    /// One JSON object per line, with the span fields (connection, link, entity) as objects:
    /// for log collectors.
    Json,
}

/// Settings of `[broker]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// Address the plain AMQP listener binds; `None` (written `""`): TLS only.
    pub listen: Option<SocketAddr>,
    /// The TLS listener, if any (`[broker.tls]`).
    pub tls: Option<TlsConfig>,
    /// More listeners, for the ports the SDKs dial for AMQP over WebSockets without being
    /// told one (80 and 443); each serves what the plain and TLS listeners serve. Default none.
    pub websocket_listen: Vec<SocketAddr>,
    /// Whether a client that presents no credential (SASL ANONYMOUS, or no SASL) may use
    /// entities without a CBS token. Default `false`; the embedded default sets it.
    pub allow_anonymous: bool,
    /// Directory of the message store.
    pub data_dir: PathBuf,
    /// Durability mode.
    pub durability: Durability,
    /// Flush period in `interval` mode; at least 1 ms.
    pub flush_interval: Duration,
    /// Largest accepted message, in bytes; at least 1.
    pub max_message_size: u64,
    /// Bytes of sled's page cache; at least 1 MiB.
    pub cache_capacity: u64,
    /// Most concurrent client connections; at least 1.
    pub max_connections: usize,
    /// Idle timeout the broker advertises in its `open`; from 1 s to `u32::MAX` milliseconds.
    pub idle_timeout: Duration,
    /// Largest frame the broker accepts; from 512 bytes to 4 MiB.
    pub max_frame_size: u32,
    /// How long a graceful shutdown waits for connections and entities.
    pub shutdown_timeout: Duration,
    /// How long a client may take from TCP connect to its `open`; from 100 ms to 5 min.
    pub handshake_timeout: Duration,
    /// Bytes the broker queues toward one connection before it stops reading that
    /// connection; from 64 KiB to 1 GiB.
    pub connection_buffer: u64,
    /// How long a connection's buffer may stay full before the connection is closed with
    /// `amqp:resource-limit-exceeded`; from 100 ms to 1 h.
    pub write_timeout: Duration,
    /// Message bytes one consumer may have on their way from its entity to its socket; at
    /// least 1 (one message is always allowed).
    pub consumer_window: u64,
    /// Most links one connection may hold at once; at least 1.
    pub max_links_per_connection: usize,
    /// Most queues and topics the namespace holds, a partitioned one counting as its
    /// partitions, beyond which a creation through the administration API is refused (Service
    /// Bus's entity quota); entities the config file declares count but are never refused.
    pub max_entities: usize,
    /// How long a transaction may run from its `declare` to its `discharge` before it is
    /// rolled back; from 100 ms to 1 h (Service Bus: 2 min).
    pub transaction_timeout: Duration,
    /// How the log is written.
    pub log_format: LogFormat,
}

/// One `[[queues]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// Entity name, compared case-insensitively; queues and topics share one namespace.
    pub name: String,
    /// How long a peek-lock delivery stays locked; from 1 s to 5 min.
    pub lock_duration: Duration,
    /// Deliveries after which a message is dead-lettered; at least 1.
    pub max_delivery_count: u32,
    /// Most bytes of messages the queue holds; sends beyond are refused. At least 1. A
    /// partitioned queue's partitions share it equally.
    pub max_size_in_megabytes: u64,
    /// How many partitions the queue has (1 to 16); `None`: it is not partitioned. Fixed for
    /// the queue's life.
    pub partitions: Option<u16>,
    /// Time to live of messages that set none, and the cap of those that do; `None`:
    /// unlimited.
    pub default_message_time_to_live: Option<Duration>,
    /// Whether expired messages move to the dead-letter queue (else they are deleted).
    pub dead_lettering_on_message_expiration: bool,
    /// Whether messages are received through sessions: every message must carry a session
    /// id, and receivers accept a session.
    pub requires_session: bool,
    /// The queue, its messages and its dead-letter queue are deleted after this long without
    /// activity; `None`: never.
    pub auto_delete_on_idle: Option<Duration>,
    /// Whether a send whose `message-id` the entity accepted within the history window is
    /// Service Bus's `EnableBatchedOperations`, kept and read back: the broker batches its
    /// writes either way. Default true.
    pub enable_batched_operations: bool,
    /// Service Bus's `EnableExpress`: in `sync` mode sends are acknowledged without waiting
    /// for their write and flush (a crash may lose what was acknowledged but not yet flushed).
    pub enable_express: bool,
    /// acknowledged and dropped (Service Bus's duplicate detection).
    pub requires_duplicate_detection: bool,
    /// How long accepted message ids are remembered; 1 s to 7 days, default 10 min.
    pub duplicate_detection_history_time_window: Duration,
    /// The queue or topic every message arriving here moves to (`forward_to`): its name, or
    /// its address as given (see [`forwarding::entity`]); `None`: none. Receivers of the
    /// queue itself are then refused.
    pub forward_to: Option<String>,
    /// The queue or topic dead-lettered messages move to instead of staying in the dead-letter
    /// queue (`forward_dead_lettered_messages_to`), named as `forward_to`; `None`: none.
    pub forward_dead_lettered_messages_to: Option<String>,
    /// Entity-level shared access policies: their tokens reach this queue and its
    /// dead-letter queue only.
    pub shared_access_policies: Vec<PolicyConfig>,
    /// Whether it takes sends and hands out messages (its dead-letter queue always does).
    pub status: EntityStatus,
    /// Service Bus's `UserMetadata`: the owner's notes on the entity, kept and read back,
    /// at most [`MAX_USER_METADATA_CHARS`]; `None`: none.
    pub user_metadata: Option<String>,
}

/// Most characters of an entity's `user_metadata`, counted as .NET counts them (UTF-16 code
/// units): Service Bus's bound on `UserMetadata` ("Max length is 1024 chars",
/// `QueueProperties.UserMetadata` of Azure.Messaging.ServiceBus).
pub const MAX_USER_METADATA_CHARS: usize = 1024;

/// An entity's `user_metadata` as given: `None` when empty (Service Bus then reads none back).
///
/// # Errors
/// Its length, when it is longer than [`MAX_USER_METADATA_CHARS`].
pub fn user_metadata(text: String) -> Result<Option<String>, String> {
    let length = text.encode_utf16().count();
    if length > MAX_USER_METADATA_CHARS {
        return Err(format!(
            "is {length} characters long; Service Bus allows at most {MAX_USER_METADATA_CHARS}"
        ));
    }
    Ok((!text.is_empty()).then_some(text))
}

/// A position in a config file, shown as `origin:line:column` (both 1-based; the column counts
/// characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Where the text came from: a file path or `<embedded default>`.
    pub origin: String,
    /// Line number, from 1.
    pub line: usize,
    /// Column number in characters, from 1.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.origin, self.line, self.column)
    }
}

/// Why a configuration was refused. Each message fits on one line and names the key, where it
/// is and what is allowed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("{}: cannot read config file: {source}", path.display())]
    Read {
        /// The file that was asked for.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The text is not valid TOML (or JSON, for an emulator `Config.json`).
    #[error("{at}: invalid {format}: {message}")]
    Syntax {
        /// Where the parser stopped.
        at: Location,
        /// `TOML` or `JSON`.
        format: &'static str,
        /// The parser's description.
        message: String,
    },
    /// A key is unknown, or its value has the wrong type or is not allowed.
    #[error("{key} ({at}): {message}")]
    Invalid {
        /// Key path such as `broker.idle_timeout` or `queues[0].lock_duration`.
        key: String,
        /// Position of the offending key or value.
        at: Location,
        /// The offending value and what is allowed.
        message: String,
    },
}

impl Config {
    /// The embedded default configuration ([`DEFAULT_CONFIG_TOML`]).
    pub fn embedded_default() -> Config {
        Config::parse(DEFAULT_CONFIG_TOML, EMBEDDED_ORIGIN)
            .expect("config/default.toml is valid; the unit tests parse it")
    }

    /// Parses and validates a TOML config. `origin` names the text in errors (a path, or
    /// `<embedded default>`).
    ///
    /// # Errors
    ///
    /// Any [`ConfigError`] but [`ConfigError::Read`].
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        Config::parse_with(text, origin, true)
    }

    /// As [`Config::parse`]; `whole` says whether the text declares every entity there is,
    /// so that forwarding targets must be among them ([`forwarding::check`]). A
    /// [`Declaration`] is one entity alone: its targets are checked against the live ones.
    fn parse_with(text: &str, origin: &str, whole: bool) -> Result<Config, ConfigError> {
        let source = Source { text, origin };
        let raw: RawConfig = toml::from_str(text).map_err(|e| source.deserialize_error(&e))?;
        source.validate(raw, whole)
    }

    /// Reads and validates the config file at `path`: TOML, or Microsoft's emulator
    /// `Config.json` when the file ends in `.json` or its text opens a JSON object (its
    /// entities, with the embedded default's broker settings and policy).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`] naming the path when the file cannot be read, otherwise as
    /// [`Config::parse`], with JSON paths for a `Config.json`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let origin = path.display().to_string();
        let json = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
        if json || emulator::is_json(&text) {
            return emulator::parse(&text, &origin);
        }
        Config::parse(&text, &origin)
    }
}
