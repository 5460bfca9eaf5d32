//! Broker configuration: the TOML schema, the embedded default and validation.
//!
//! Parsing happens in two steps. Serde reads the text into private `Raw*` structs that reject
//! unknown keys and wrong types and keep the byte span of every value. [`Config::parse`] then
//! validates those values (ranges, names, keys not supported yet) into the public [`Config`].
//! Every [`ConfigError`] names the key path, the file, the line and the column. A serde error
//! only carries a byte span, so a second, lenient read of the file (`Outline`) maps that span
//! back to the key path.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::num::TryFromIntError;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// The embedded default configuration (`config/default.toml`).
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../config/default.toml");

/// The origin [`Config::embedded_default`] reports in errors.
const EMBEDDED_ORIGIN: &str = "<embedded default>";

/// Queue keys of the design's contract that the broker does not implement yet. They are parsed
/// and type-checked, and a config that sets one is rejected. Remove a key from this list when
/// the feature lands (and carry its value into [`QueueConfig`]).
const UNSUPPORTED_QUEUE_KEYS: &[&str] = &["requires_session"];

/// The whole broker configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Broker-wide settings (`[broker]`).
    pub broker: BrokerConfig,
    /// Declared queues (`[[queues]]`), in file order; names are unique ignoring case.
    pub queues: Vec<QueueConfig>,
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

/// Settings of `[broker]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// Address the AMQP listener binds.
    pub listen: SocketAddr,
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
}

/// One `[[queues]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    /// Entity name, compared case-insensitively.
    pub name: String,
    /// How long a peek-lock delivery stays locked; from 1 s to 5 min.
    pub lock_duration: Duration,
    /// Deliveries after which a message is dead-lettered; at least 1.
    pub max_delivery_count: u32,
    /// Most bytes of messages the queue holds; sends beyond are refused. At least 1.
    pub max_size_in_megabytes: u64,
    /// Time to live of messages that set none, and the cap of those that do; `None`:
    /// unlimited.
    pub default_message_time_to_live: Option<Duration>,
    /// Whether expired messages move to the dead-letter queue (else they are deleted).
    pub dead_lettering_on_message_expiration: bool,
    /// The queue, its messages and its dead-letter queue are deleted after this long without
    /// activity; `None`: never.
    pub auto_delete_on_idle: Option<Duration>,
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
    /// The text is not valid TOML.
    #[error("{at}: invalid TOML: {message}")]
    Syntax {
        /// Where the parser stopped.
        at: Location,
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
    /// A key or table this version parses but does not implement yet.
    #[error("{key} ({at}): not supported yet by this version of Tidebus")]
    Unsupported {
        /// Key path such as `queues[1].requires_session` or `topics`.
        key: String,
        /// Position of its value.
        at: Location,
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
        let source = Source { text, origin };
        let raw: RawConfig = toml::from_str(text).map_err(|e| source.deserialize_error(&e))?;
        source.validate(raw)
    }

    /// Reads and validates the config file at `path`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`] naming the path when the file cannot be read, otherwise as
    /// [`Config::parse`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::parse(&text, &path.display().to_string())
    }
}

/// The file as serde reads it: `[broker]`, `[[queues]]` and, not supported yet, `[[topics]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    broker: RawBroker,
    #[serde(default)]
    queues: Vec<RawQueue>,
    topics: Option<Spanned<toml::Value>>,
}

/// `[broker]` as written; absent keys take their defaults in validation.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBroker {
    listen: Option<Spanned<String>>,
    data_dir: Option<Spanned<PathBuf>>,
    durability: Option<Durability>,
    flush_interval: Option<Spanned<HumanDuration>>,
    max_message_size: Option<Spanned<ByteSize>>,
    cache_capacity: Option<Spanned<ByteSize>>,
    max_connections: Option<Spanned<u64>>,
    idle_timeout: Option<Spanned<HumanDuration>>,
    max_frame_size: Option<Spanned<ByteSize>>,
    shutdown_timeout: Option<Spanned<HumanDuration>>,
    handshake_timeout: Option<Spanned<HumanDuration>>,
    connection_buffer: Option<Spanned<ByteSize>>,
    write_timeout: Option<Spanned<HumanDuration>>,
    consumer_window: Option<Spanned<ByteSize>>,
    max_links_per_connection: Option<Spanned<u64>>,
}

/// One `[[queues]]` entry as written. The planned keys are in [`UNSUPPORTED_QUEUE_KEYS`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueue {
    name: Spanned<String>,
    lock_duration: Option<Spanned<HumanDuration>>,
    max_delivery_count: Option<Spanned<u64>>,
    default_message_time_to_live: Option<Spanned<HumanDuration>>,
    dead_lettering_on_message_expiration: Option<Spanned<bool>>,
    requires_session: Option<Spanned<bool>>,
    auto_delete_on_idle: Option<Spanned<HumanDuration>>,
    max_size_in_megabytes: Option<Spanned<u64>>,
}

impl RawQueue {
    /// The planned keys with the span of their value when set.
    fn planned_keys(&self) -> [(&'static str, Option<Range<usize>>); 1] {
        [("requires_session", span_of(&self.requires_session))]
    }
}

fn span_of<T>(value: &Option<Spanned<T>>) -> Option<Range<usize>> {
    value.as_ref().map(Spanned::span)
}

/// A setting's default and inclusive bounds, with the wording errors use for the bounds.
struct Limits<T> {
    default: T,
    min: T,
    max: T,
    allowed: &'static str,
}

const FLUSH_INTERVAL: Limits<Duration> = Limits {
    default: Duration::from_millis(100),
    min: Duration::from_millis(1),
    max: Duration::MAX,
    allowed: "at least 1ms",
};
const MAX_MESSAGE_SIZE: Limits<u64> = Limits {
    default: 1024 * 1024,
    min: 1,
    max: u64::MAX,
    allowed: "at least 1 byte",
};
const CACHE_CAPACITY: Limits<u64> = Limits {
    default: 64 * 1024 * 1024,
    min: 1024 * 1024,
    max: u64::MAX,
    allowed: "at least 1MiB",
};
const MAX_SIZE_IN_MEGABYTES: Limits<u64> = Limits {
    default: 1024,
    min: 1,
    max: u64::MAX / (1024 * 1024),
    allowed: "at least 1",
};
const MAX_CONNECTIONS: Limits<usize> = Limits {
    default: 1024,
    min: 1,
    max: usize::MAX,
    allowed: "at least 1",
};
/// The upper bound is what AMQP's `idle-time-out` (milliseconds in a `uint`) can carry.
const IDLE_TIMEOUT: Limits<Duration> = Limits {
    default: Duration::from_secs(60),
    min: Duration::from_secs(1),
    max: Duration::from_millis(u32::MAX as u64),
    allowed: "1s to 4294967295ms (about 49 days; AMQP sends it as u32 milliseconds)",
};
/// 512 is AMQP's minimum max-frame-size.
const MAX_FRAME_SIZE: Limits<u32> = Limits {
    default: 65536,
    min: 512,
    max: 4 * 1024 * 1024,
    allowed: "512 bytes to 4MiB",
};
const SHUTDOWN_TIMEOUT: Limits<Duration> = Limits {
    default: Duration::from_secs(10),
    min: Duration::ZERO,
    max: Duration::MAX,
    allowed: "any duration",
};
const HANDSHAKE_TIMEOUT: Limits<Duration> = Limits {
    default: Duration::from_secs(10),
    min: Duration::from_millis(100),
    max: Duration::from_secs(300),
    allowed: "100ms to 5m",
};
const CONNECTION_BUFFER: Limits<u64> = Limits {
    default: 4 * 1024 * 1024,
    min: 64 * 1024,
    max: 1024 * 1024 * 1024,
    allowed: "64KiB to 1GiB",
};
const WRITE_TIMEOUT: Limits<Duration> = Limits {
    default: Duration::from_secs(30),
    min: Duration::from_millis(100),
    max: Duration::from_secs(3600),
    allowed: "100ms to 1h",
};
const CONSUMER_WINDOW: Limits<u64> = Limits {
    default: 1024 * 1024,
    min: 1,
    max: u64::MAX,
    allowed: "at least 1 byte",
};
const MAX_LINKS_PER_CONNECTION: Limits<usize> = Limits {
    default: 4096,
    min: 1,
    max: usize::MAX,
    allowed: "at least 1",
};
/// Five minutes is Service Bus's maximum lock duration.
const LOCK_DURATION: Limits<Duration> = Limits {
    default: Duration::from_secs(60),
    min: Duration::from_secs(1),
    max: Duration::from_secs(5 * 60),
    allowed: "1s to 5m",
};
/// `default_message_time_to_live` and `auto_delete_on_idle`: optional (absent means unlimited
/// or never, so `default` is never used) and at least a second. Service Bus's minimum idle
/// time is 5 minutes; seconds are allowed so that test suites run fast (design.md §5).
const AT_LEAST_A_SECOND: Limits<Duration> = Limits {
    default: Duration::MAX,
    min: Duration::from_secs(1),
    max: Duration::MAX,
    allowed: "at least 1s",
};
const MAX_DELIVERY_COUNT: Limits<u32> = Limits {
    default: 10,
    min: 1,
    max: u32::MAX,
    allowed: "1 to 4294967295",
};

const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5672);
const DEFAULT_DATA_DIR: &str = "tidebus-data";
const MAX_QUEUE_NAME_CHARS: usize = 260;

/// The text being parsed and its name, to turn byte spans into [`Location`]s.
struct Source<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Source<'_> {
    /// Validates every section; the first problem found is returned.
    fn validate(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        if let Some(topics) = raw.topics {
            return Err(self.unsupported("topics".to_owned(), topics.span()));
        }
        let broker = self.broker(raw.broker)?;
        self.check_unique_names(&raw.queues)?;
        let queues = raw
            .queues
            .into_iter()
            .enumerate()
            .map(|(index, queue)| self.queue(index, queue))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Config { broker, queues })
    }

    fn broker(&self, raw: RawBroker) -> Result<BrokerConfig, ConfigError> {
        Ok(BrokerConfig {
            listen: self.listen(raw.listen)?,
            data_dir: self.data_dir(raw.data_dir)?,
            durability: raw.durability.unwrap_or(Durability::Sync),
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
        })
    }

    fn listen(&self, raw: Option<Spanned<String>>) -> Result<SocketAddr, ConfigError> {
        let Some(raw) = raw else {
            return Ok(DEFAULT_LISTEN);
        };
        raw.get_ref().parse().map_err(|_| {
            self.invalid(
                "broker.listen",
                raw.span(),
                format!(
                    "{:?} is not a socket address; expected IP:port such as \"127.0.0.1:5672\" \
                     or \"[::]:5672\" (host names are not resolved)",
                    raw.get_ref()
                ),
            )
        })
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

    fn queue(&self, index: usize, raw: RawQueue) -> Result<QueueConfig, ConfigError> {
        let key = |name: &str| format!("queues[{index}].{name}");
        if let Err(reason) = check_queue_name(raw.name.get_ref()) {
            let message = format!(
                "{:?} is not a valid queue name: {reason}",
                raw.name.get_ref()
            );
            return Err(self.invalid(&key("name"), raw.name.span(), message));
        }
        for (name, span) in raw.planned_keys() {
            match span {
                Some(span) if UNSUPPORTED_QUEUE_KEYS.contains(&name) => {
                    return Err(self.unsupported(key(name), span));
                }
                _ => {}
            }
        }
        Ok(QueueConfig {
            name: raw.name.into_inner(),
            lock_duration: self.bounded(
                &key("lock_duration"),
                raw.lock_duration,
                &LOCK_DURATION,
            )?,
            max_delivery_count: self.bounded(
                &key("max_delivery_count"),
                raw.max_delivery_count,
                &MAX_DELIVERY_COUNT,
            )?,
            max_size_in_megabytes: self.bounded(
                &key("max_size_in_megabytes"),
                raw.max_size_in_megabytes,
                &MAX_SIZE_IN_MEGABYTES,
            )?,
            default_message_time_to_live: self.optional(
                &key("default_message_time_to_live"),
                raw.default_message_time_to_live,
                &AT_LEAST_A_SECOND,
            )?,
            dead_lettering_on_message_expiration: raw
                .dead_lettering_on_message_expiration
                .is_some_and(Spanned::into_inner),
            auto_delete_on_idle: self.optional(
                &key("auto_delete_on_idle"),
                raw.auto_delete_on_idle,
                &AT_LEAST_A_SECOND,
            )?,
        })
    }

    /// Rejects a queue whose name equals an earlier one ignoring case, naming both.
    fn check_unique_names(&self, queues: &[RawQueue]) -> Result<(), ConfigError> {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (index, queue) in queues.iter().enumerate() {
            let Some(&first) = seen.get(&queue.name.get_ref().to_lowercase()) else {
                seen.insert(queue.name.get_ref().to_lowercase(), index);
                continue;
            };
            let first_name = &queues[first].name;
            let message = format!(
                "queue name {:?} is already used by queues[{first}].name = {:?} ({}); queue \
                 names are compared case-insensitively",
                queue.name.get_ref(),
                first_name.get_ref(),
                self.location(first_name.span().start),
            );
            return Err(self.invalid(&format!("queues[{index}].name"), queue.name.span(), message));
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
    fn deserialize_error(&self, error: &toml::de::Error) -> ConfigError {
        let offset = error.span().map_or(0, |span| span.start);
        let at = self.location(offset);
        let message = error.message().trim().replace('\n', "; ");
        if toml::from_str::<toml::Table>(self.text).is_err() {
            return ConfigError::Syntax { at, message };
        }
        let key = key_path_at(self.text, offset).unwrap_or_else(|| "<document>".to_owned());
        ConfigError::Invalid { key, at, message }
    }

    fn invalid(&self, key: &str, span: Range<usize>, message: String) -> ConfigError {
        ConfigError::Invalid {
            key: key.to_owned(),
            at: self.location(span.start),
            message,
        }
    }

    fn unsupported(&self, key: String, span: Range<usize>) -> ConfigError {
        ConfigError::Unsupported {
            key,
            at: self.location(span.start),
        }
    }

    /// The 1-based line and character column of byte `offset`.
    fn location(&self, offset: usize) -> Location {
        let before = self.text.get(..offset).unwrap_or(self.text);
        let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
        Location {
            origin: self.origin.to_owned(),
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

/// Why `name` is not a valid queue name, if it is not.
fn check_queue_name(name: &str) -> Result<(), String> {
    let length = name.chars().count();
    if length == 0 {
        return Err("it is empty".to_owned());
    }
    if length > MAX_QUEUE_NAME_CHARS {
        return Err(format!(
            "it has {length} characters; at most {MAX_QUEUE_NAME_CHARS} are allowed"
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/');
    if let Some(bad) = name.chars().find(|&c| !allowed(c)) {
        return Err(format!(
            "{bad:?} is not allowed; use letters, digits, '.', '_', '-' and '/'"
        ));
    }
    if name.starts_with('/') || name.ends_with('/') {
        return Err("'/' is not allowed first or last".to_owned());
    }
    Ok(())
}

/// Every key of a table with the spans of the key and its value.
type KeySpans = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

/// The sections of the file with their keys' spans; read only to name the key of a serde error.
#[derive(Deserialize)]
struct Outline {
    broker: Option<Spanned<KeySpans>>,
    #[serde(default)]
    queues: Vec<Spanned<KeySpans>>,
}

/// The path of the key whose name or value covers byte `offset`: `broker.listen`,
/// `queues[1].name`, `queues[1]` (the table itself) or a top-level key.
fn key_path_at(text: &str, offset: usize) -> Option<String> {
    if let Ok(outline) = toml::from_str::<Outline>(text) {
        let broker = outline.broker.map(|table| ("broker".to_owned(), table));
        let queues = outline
            .queues
            .into_iter()
            .enumerate()
            .map(|(index, table)| (format!("queues[{index}]"), table));
        for (section, table) in broker.into_iter().chain(queues) {
            if let Some(key) = key_at(table.get_ref(), offset) {
                return Some(format!("{section}.{key}"));
            }
            if table.span().contains(&offset) {
                return Some(section);
            }
        }
    }
    let root: KeySpans = toml::from_str(text).ok()?;
    key_at(&root, offset).map(str::to_owned)
}

fn key_at(table: &KeySpans, offset: usize) -> Option<&str> {
    table
        .iter()
        .find(|(key, value)| key.span().contains(&offset) || value.span().contains(&offset))
        .map(|(key, _)| key.get_ref().as_str())
}

/// A duration written as humantime (`"30s"`, `"1h 30m"`) or ISO 8601 (`"PT30S"`).
struct HumanDuration(Duration);

impl From<HumanDuration> for Duration {
    fn from(value: HumanDuration) -> Duration {
        value.0
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration(&text)
            .map(HumanDuration)
            .map_err(de::Error::custom)
    }
}

/// Parses humantime or, when it starts with `P`, an ISO 8601 duration.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let parsed = match text.strip_prefix('P') {
        Some(body) => parse_iso8601(body),
        None => humantime::parse_duration(text).map_err(|e| e.to_string()),
    };
    parsed.map_err(|reason| {
        format!(
            "invalid duration {text:?} ({reason}); expected humantime such as \"30s\", \"5m\", \
             \"1h 30m\", \"14d\" or ISO 8601 such as \"PT30S\", \"P1DT2H\""
        )
    })
}

/// Parses the part of an ISO 8601 duration after `P`: `[nD][T[nH][nM][nS]]`, any number may have
/// a decimal fraction. Years and months have no fixed length, so they are refused.
fn parse_iso8601(body: &str) -> Result<Duration, String> {
    if body.is_empty() || body.ends_with('T') {
        return Err("expected days, hours, minutes or seconds after P or T".to_owned());
    }
    let (days, time) = body.split_once('T').unwrap_or((body, ""));
    if days.contains(['Y', 'M', 'W']) {
        return Err("years, months and weeks are not supported; use days, e.g. P30D".to_owned());
    }
    let days = sum_components(days, &[('D', 86_400)])?;
    let time = sum_components(time, &[('H', 3_600), ('M', 60), ('S', 1)])?;
    days.checked_add(time).ok_or_else(|| "too long".to_owned())
}

const ISO8601_ORDER: &str = "expected each unit at most once, in the order D, T, H, M, S";

/// Sums components such as `1H30M`; `units` lists the allowed unit letters in their required
/// order with their length in seconds.
fn sum_components(mut part: &str, units: &[(char, u32)]) -> Result<Duration, String> {
    let mut remaining = units;
    let mut total = Duration::ZERO;
    while !part.is_empty() {
        let (end, unit) = part
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("number {part:?} has no unit"))?;
        let number = &part[..end];
        part = &part[end + unit.len_utf8()..];
        let position = remaining
            .iter()
            .position(|&(letter, _)| letter == unit)
            .ok_or_else(|| format!("unexpected {unit:?}; {ISO8601_ORDER}"))?;
        let seconds = remaining[position].1;
        remaining = &remaining[position + 1..];
        let amount = parse_decimal_seconds(number)
            .and_then(|value| value.checked_mul(seconds))
            .ok_or_else(|| format!("{number:?} is not a number of {unit}"))?;
        total = total
            .checked_add(amount)
            .ok_or_else(|| "too long".to_owned())?;
    }
    Ok(total)
}

/// `"12"` or `"0.5"` as that many seconds; at most nanosecond precision.
fn parse_decimal_seconds(number: &str) -> Option<Duration> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos = format!("{fraction:0<9}").parse().ok()?;
    Some(Duration::new(whole.parse().ok()?, nanos))
}

/// A size in bytes: a TOML integer or a string such as `"64KiB"` or `"1MB"`.
struct ByteSize(u64);

impl From<ByteSize> for u64 {
    fn from(value: ByteSize) -> u64 {
        value.0
    }
}

impl TryFrom<ByteSize> for u32 {
    type Error = TryFromIntError;

    fn try_from(value: ByteSize) -> Result<u32, TryFromIntError> {
        u32::try_from(value.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ByteSizeVisitor)
    }
}

struct ByteSizeVisitor;

impl Visitor<'_> for ByteSizeVisitor {
    type Value = ByteSize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SIZE_FORMS)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<ByteSize, E> {
        u64::try_from(value)
            .map(ByteSize)
            .map_err(|_| E::invalid_value(Unexpected::Signed(value), &self))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<ByteSize, E> {
        Ok(ByteSize(value))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<ByteSize, E> {
        parse_size(text)
            .map(ByteSize)
            .ok_or_else(|| E::custom(format!("invalid size {text:?}; expected {SIZE_FORMS}")))
    }
}

const SIZE_FORMS: &str = "a size: integer bytes, or a string with a unit: B, KB, MB, GB \
                          (powers of 1000) or KiB, MiB, GiB (powers of 1024), e.g. \"64KiB\"";

/// Parses `"512"`, `"64KiB"`, `"1 MB"`; units are case-insensitive.
fn parse_size(text: &str) -> Option<u64> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let multiplier: u64 = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    number.parse::<u64>().ok()?.checked_mul(multiplier)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        Config::parse(text, "t.toml").expect("config should be valid")
    }

    fn refuse(text: &str) -> ConfigError {
        Config::parse(text, "t.toml").expect_err("config should be refused")
    }

    fn at(line: usize, column: usize) -> Location {
        Location {
            origin: "t.toml".to_owned(),
            line,
            column,
        }
    }

    fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn embedded_default_parses_with_three_queues() {
        let config = Config::embedded_default();
        let broker = &config.broker;
        assert_eq!(broker.listen, "127.0.0.1:5672".parse().expect("address"));
        assert_eq!(broker.data_dir, PathBuf::from("tidebus-data"));
        assert_eq!(broker.durability, Durability::Sync);
        assert_eq!(broker.flush_interval, Duration::from_millis(100));
        assert_eq!(broker.max_message_size, 1_048_576);
        assert_eq!(broker.max_connections, 1024);
        assert_eq!(broker.idle_timeout, secs(60));
        assert_eq!(broker.max_frame_size, 65536);
        assert_eq!(broker.shutdown_timeout, secs(10));
        let names: Vec<&str> = config.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["queue.1", "queue.2", "queue.3"]);
        for queue in &config.queues {
            assert_eq!(queue.lock_duration, secs(60));
            assert_eq!(queue.max_delivery_count, 10);
        }
    }

    #[test]
    fn absent_keys_take_the_same_defaults_as_the_embedded_file() {
        let config = parse("[[queues]]\nname = \"queue.1\"\n");
        let default = Config::embedded_default();
        assert_eq!(config.broker, default.broker);
        assert_eq!(config.queues[0], default.queues[0]);
        assert!(parse("").queues.is_empty());
    }

    #[test]
    fn every_broker_key_is_read() {
        let config = parse(
            "[broker]\nlisten = \"0.0.0.0:5673\"\ndata_dir = \"/var/lib/tb\"\n\
             durability = \"interval\"\nflush_interval = \"PT0.25S\"\n\
             max_message_size = \"256KB\"\nmax_connections = 7\nidle_timeout = \"2m\"\n\
             max_frame_size = \"4MiB\"\nshutdown_timeout = \"0s\"\n",
        );
        let broker = config.broker;
        assert_eq!(broker.listen, "0.0.0.0:5673".parse().expect("address"));
        assert_eq!(broker.data_dir, PathBuf::from("/var/lib/tb"));
        assert_eq!(broker.durability, Durability::Interval);
        assert_eq!(broker.flush_interval, Duration::from_millis(250));
        assert_eq!(broker.max_message_size, 256_000);
        assert_eq!(broker.max_connections, 7);
        assert_eq!(broker.idle_timeout, secs(120));
        assert_eq!(broker.max_frame_size, 4 * 1024 * 1024);
        assert_eq!(broker.shutdown_timeout, Duration::ZERO);
    }

    #[test]
    fn unknown_broker_key_is_named_with_its_position() {
        let error = refuse("[broker]\nlisten = \"127.0.0.1:5672\"\ncolour = \"red\"\n");
        assert!(
            matches!(&error, ConfigError::Invalid { key, at: position, .. }
                if key == "broker.colour" && *position == at(3, 1)),
            "{error:?}"
        );
        assert!(
            error.to_string().starts_with(
                "broker.colour (t.toml:3:1): unknown field `colour`, expected one of `listen`"
            ),
            "{error}"
        );
    }

    #[test]
    fn unknown_queue_key_is_named_with_its_queue_index_and_position() {
        let error = refuse(
            "[[queues]]\nname = \"a\"\n\n[[queues]]\nname = \"b\"\n  lock_duraton = \"1m\"\n",
        );
        assert!(
            error
                .to_string()
                .starts_with("queues[1].lock_duraton (t.toml:6:3): unknown field `lock_duraton`"),
            "{error}"
        );
    }

    #[test]
    fn unknown_top_level_table_is_named() {
        let error = refuse("[broker]\n[brokr]\nlisten = \"127.0.0.1:1\"\n");
        assert!(
            error
                .to_string()
                .starts_with("brokr (t.toml:2:2): unknown field `brokr`"),
            "{error}"
        );
    }

    #[test]
    fn toml_syntax_error_has_a_position() {
        let error = refuse("[broker]\nlisten = \"127.0.0.1:5672\nmax_connections = 1\n");
        assert!(
            matches!(&error, ConfigError::Syntax { at: position, .. } if position.line == 2),
            "{error:?}"
        );
        assert!(error.to_string().starts_with("t.toml:2:"), "{error}");
        assert!(!error.to_string().contains('\n'), "{error}");
    }

    #[test]
    fn wrong_type_names_the_key_and_the_value_position() {
        let error = refuse("[broker]\nmax_connections = \"many\"\n");
        assert_eq!(
            error.to_string(),
            "broker.max_connections (t.toml:2:19): invalid type: string \"many\", expected u64"
        );
    }

    #[test]
    fn missing_queue_name_names_the_queue() {
        let error = refuse("[[queues]]\nname = \"a\"\n[[queues]]\nlock_duration = \"1m\"\n");
        assert_eq!(
            error.to_string(),
            "queues[1] (t.toml:3:1): missing field `name`"
        );
    }

    #[test]
    fn humantime_durations() {
        assert_eq!(parse_duration("30s"), Ok(secs(30)));
        assert_eq!(parse_duration("5m"), Ok(secs(300)));
        assert_eq!(parse_duration("1h 30m"), Ok(secs(5400)));
        assert_eq!(parse_duration("14d"), Ok(secs(14 * 86_400)));
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
    }

    #[test]
    fn iso8601_durations() {
        assert_eq!(parse_duration("PT30S"), Ok(secs(30)));
        assert_eq!(parse_duration("PT1M"), Ok(secs(60)));
        assert_eq!(parse_duration("P1D"), Ok(secs(86_400)));
        assert_eq!(parse_duration("P1DT1H"), Ok(secs(90_000)));
        assert_eq!(parse_duration("P1DT2H"), Ok(secs(93_600)));
        assert_eq!(parse_duration("PT0.5S"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("PT1H30M5S"), Ok(secs(5405)));
        assert_eq!(parse_duration("P0.5D"), Ok(secs(43_200)));
        assert_eq!(
            parse_duration("PT0.000000001S"),
            Ok(Duration::from_nanos(1))
        );
    }

    #[test]
    fn iso8601_errors_say_why() {
        let reason = |text: &str| parse_duration(text).expect_err("should be refused");
        assert!(reason("P1Y").contains("years, months and weeks are not supported"));
        assert!(reason("P1M").contains("use days, e.g. P30D"));
        assert!(reason("P").contains("after P or T"));
        assert!(reason("P1DT").contains("after P or T"));
        assert!(reason("PT1S1M").contains("unexpected 'M'"));
        assert!(reason("PT1H1H").contains("unexpected 'H'"));
        assert!(reason("PT5").contains("number \"5\" has no unit"));
        assert!(reason("PT1.5.5S").contains("\"1.5.5\" is not a number of S"));
        assert!(reason("PT.5S").contains("\".5\" is not a number of S"));
        assert!(reason("PT-1S").contains("unexpected '-'"));
        assert!(reason("PT0.0000000001S").contains("is not a number of S"));
    }

    #[test]
    fn bad_duration_names_key_value_and_allowed_forms() {
        let error = refuse("[broker]\nidle_timeout = \"5 parsecs\"\n");
        assert_eq!(
            error.to_string(),
            "broker.idle_timeout (t.toml:2:16): invalid duration \"5 parsecs\" (unknown time \
             unit \"parsecs\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, \
             months, years (and few variations)); expected humantime such as \"30s\", \"5m\", \
             \"1h 30m\", \"14d\" or ISO 8601 such as \"PT30S\", \"P1DT2H\""
        );
        let error = refuse("[broker]\nidle_timeout = 60\n");
        assert_eq!(
            error.to_string(),
            "broker.idle_timeout (t.toml:2:16): invalid type: integer `60`, expected a string"
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("64KiB"), Some(65_536));
        assert_eq!(parse_size("1MiB"), Some(1_048_576));
        assert_eq!(parse_size("1MB"), Some(1_000_000));
        assert_eq!(parse_size("256KB"), Some(256_000));
        assert_eq!(parse_size("2 GiB"), Some(2 << 30));
        assert_eq!(parse_size("3b"), Some(3));
        for garbage in [
            "",
            "MiB",
            "1.5MiB",
            "12 bananas",
            "-1",
            "1MiB2",
            "99999999999GB",
        ] {
            assert_eq!(parse_size(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn bad_size_names_key_value_and_allowed_forms() {
        let error = refuse("[broker]\nmax_message_size = \"12 bananas\"\n");
        assert_eq!(
            error.to_string(),
            format!(
                "broker.max_message_size (t.toml:2:20): invalid size \"12 bananas\"; \
                 expected {SIZE_FORMS}"
            )
        );
        let error = refuse("[broker]\nmax_message_size = -1\n");
        assert_eq!(
            error.to_string(),
            format!(
                "broker.max_message_size (t.toml:2:20): invalid value: integer `-1`, \
                 expected {SIZE_FORMS}"
            )
        );
        assert_eq!(
            parse("[broker]\nmax_message_size = 2048\n")
                .broker
                .max_message_size,
            2048
        );
    }

    #[test]
    fn max_frame_size_is_bounded() {
        assert_eq!(
            parse("[broker]\nmax_frame_size = 512\n")
                .broker
                .max_frame_size,
            512
        );
        for (value, column) in [("511", 18), ("\"5MiB\"", 18), ("\"8GiB\"", 18)] {
            let error = refuse(&format!("[broker]\nmax_frame_size = {value}\n"));
            assert_eq!(
                error.to_string(),
                format!(
                    "broker.max_frame_size (t.toml:2:{column}): {value} is out of range; \
                     allowed: 512 bytes to 4MiB"
                )
            );
        }
    }

    #[test]
    fn idle_timeout_below_one_second_is_refused() {
        for value in ["\"0s\"", "\"0\"", "\"PT0.5S\""] {
            let error = refuse(&format!("[broker]\nidle_timeout = {value}\n"));
            assert_eq!(
                error.to_string(),
                format!(
                    "broker.idle_timeout (t.toml:2:16): {value} is out of range; allowed: 1s to \
                     4294967295ms (about 49 days; AMQP sends it as u32 milliseconds)"
                )
            );
        }
        assert_eq!(
            parse("[broker]\nidle_timeout = \"1s\"\n")
                .broker
                .idle_timeout,
            secs(1)
        );
    }

    #[test]
    fn lock_duration_over_five_minutes_is_refused() {
        let error = refuse("[[queues]]\nname = \"q\"\nlock_duration = \"5m 1s\"\n");
        assert_eq!(
            error.to_string(),
            "queues[0].lock_duration (t.toml:3:17): \"5m 1s\" is out of range; allowed: 1s to 5m"
        );
        let config = parse("[[queues]]\nname = \"q\"\nlock_duration = \"PT5M\"\n");
        assert_eq!(config.queues[0].lock_duration, secs(300));
    }

    #[test]
    fn max_delivery_count_zero_is_refused() {
        let error = refuse("[[queues]]\nname = \"q\"\nmax_delivery_count = 0\n");
        assert_eq!(
            error.to_string(),
            "queues[0].max_delivery_count (t.toml:3:22): 0 is out of range; allowed: 1 to \
             4294967295"
        );
    }

    #[test]
    fn durability_names_the_allowed_modes() {
        let error = refuse("[broker]\ndurability = \"fast\"\n");
        assert_eq!(
            error.to_string(),
            "broker.durability (t.toml:2:14): unknown variant `fast`, expected one of `sync`, \
             `interval`, `memory`"
        );
        let memory = parse("[broker]\ndurability = \"memory\"\n");
        assert_eq!(memory.broker.durability, Durability::Memory);
    }

    #[test]
    fn listen_must_be_a_socket_address() {
        let error = refuse("[broker]\nlisten = \"localhost:5672\"\n");
        assert_eq!(
            error.to_string(),
            "broker.listen (t.toml:2:10): \"localhost:5672\" is not a socket address; expected \
             IP:port such as \"127.0.0.1:5672\" or \"[::]:5672\" (host names are not resolved)"
        );
    }

    #[test]
    fn empty_data_dir_is_refused() {
        let error = refuse("[broker]\ndata_dir = \"\"\n");
        assert_eq!(
            error.to_string(),
            "broker.data_dir (t.toml:2:12): must not be empty; expected a directory path"
        );
    }

    #[test]
    fn duplicate_queue_names_ignoring_case_name_both() {
        let error = refuse(
            "[[queues]]\nname = \"queue.1\"\n[[queues]]\nname = \"other\"\n\
             [[queues]]\nname = \"Queue.1\"\n",
        );
        assert_eq!(
            error.to_string(),
            "queues[2].name (t.toml:6:8): queue name \"Queue.1\" is already used by \
             queues[0].name = \"queue.1\" (t.toml:2:8); queue names are compared \
             case-insensitively"
        );
    }

    #[test]
    fn queue_names_follow_the_service_bus_rules() {
        assert_eq!(check_queue_name("orders/eu-west_1.v2"), Ok(()));
        assert_eq!(check_queue_name(&"a".repeat(260)), Ok(()));
        let reason = |name: &str| check_queue_name(name).expect_err("should be refused");
        assert_eq!(reason(""), "it is empty");
        assert_eq!(
            reason(&"a".repeat(261)),
            "it has 261 characters; at most 260 are allowed"
        );
        assert_eq!(
            reason("a b"),
            "' ' is not allowed; use letters, digits, '.', '_', '-' and '/'"
        );
        assert_eq!(reason("/a"), "'/' is not allowed first or last");
        assert_eq!(reason("a/"), "'/' is not allowed first or last");
        let error = refuse("[[queues]]\nname = \"a$b\"\n");
        assert_eq!(
            error.to_string(),
            "queues[0].name (t.toml:2:8): \"a$b\" is not a valid queue name: '$' is not \
             allowed; use letters, digits, '.', '_', '-' and '/'"
        );
    }

    #[test]
    fn unsupported_queue_keys_are_refused_by_name() {
        let samples = [("requires_session", "false")];
        assert_eq!(samples.map(|(key, _)| key), UNSUPPORTED_QUEUE_KEYS);
        for (key, value) in samples {
            let error = refuse(&format!(
                "[[queues]]\nname = \"a\"\n[[queues]]\nname = \"b\"\n{key} = {value}\n"
            ));
            let column = key.len() + 4;
            assert_eq!(
                error.to_string(),
                format!(
                    "queues[1].{key} (t.toml:5:{column}): not supported yet by this version of \
                     Tidebus"
                )
            );
        }
    }

    #[test]
    fn time_keys_are_read_and_bounded() {
        let config = Config::parse(
            "[[queues]]\nname = \"a\"\ndefault_message_time_to_live = \"2s\"\n\
             dead_lettering_on_message_expiration = true\nauto_delete_on_idle = \"PT1H\"\n\
             [[queues]]\nname = \"b\"\n",
            "t.toml",
        )
        .expect("valid");
        let (a, b) = (&config.queues[0], &config.queues[1]);
        assert_eq!(a.default_message_time_to_live, Some(Duration::from_secs(2)));
        assert!(a.dead_lettering_on_message_expiration);
        assert_eq!(a.auto_delete_on_idle, Some(Duration::from_secs(3600)));
        assert_eq!(
            (
                b.default_message_time_to_live,
                b.dead_lettering_on_message_expiration,
                b.auto_delete_on_idle
            ),
            (None, false, None),
            "absent: unlimited, delete expired messages, never auto-delete"
        );
        let error = refuse("[[queues]]\nname = \"a\"\nauto_delete_on_idle = \"500ms\"\n");
        assert_eq!(
            error.to_string(),
            "queues[0].auto_delete_on_idle (t.toml:3:23): \"500ms\" is out of range; allowed: \
             at least 1s"
        );
    }

    #[test]
    fn unsupported_queue_keys_are_still_type_checked() {
        let error = refuse("[[queues]]\nname = \"a\"\nrequires_session = \"yes\"\n");
        assert_eq!(
            error.to_string(),
            "queues[0].requires_session (t.toml:3:20): invalid type: string \"yes\", expected a \
             boolean"
        );
        let error = refuse("[[queues]]\nname = \"a\"\nauto_delete_on_idle = \"soon\"\n");
        assert!(
            error.to_string().starts_with(
                "queues[0].auto_delete_on_idle (t.toml:3:23): invalid duration \"soon\""
            ),
            "{error}"
        );
    }

    #[test]
    fn topics_are_refused() {
        let error = refuse(
            "[[queues]]\nname = \"a\"\n\n[[topics]]\nname = \"topic.1\"\n\
             [[topics.subscriptions]]\nname = \"s\"\n",
        );
        assert_eq!(
            error.to_string(),
            "topics (t.toml:4:1): not supported yet by this version of Tidebus"
        );
    }

    #[test]
    fn location_counts_lines_and_characters_from_one() {
        let source = Source {
            text: "ab\nçd = 1\n",
            origin: "t.toml",
        };
        assert_eq!(source.location(0), at(1, 1));
        assert_eq!(source.location(3), at(2, 1));
        assert_eq!(source.location(5), at(2, 2));
    }

    #[test]
    fn load_names_the_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("tidebus.toml");
        let error = Config::load(&path).expect_err("missing file");
        assert!(matches!(error, ConfigError::Read { .. }), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with(&format!("{}: cannot read config file: ", path.display())),
            "{error}"
        );
        std::fs::write(&path, "[broker]\nmax_connections = 0\n").expect("write");
        let error = Config::load(&path).expect_err("invalid file");
        assert_eq!(
            error.to_string(),
            format!(
                "broker.max_connections ({}:2:19): 0 is out of range; allowed: at least 1",
                path.display()
            )
        );
        std::fs::write(&path, DEFAULT_CONFIG_TOML).expect("write");
        assert_eq!(
            Config::load(&path).expect("valid file"),
            Config::embedded_default()
        );
    }
}
