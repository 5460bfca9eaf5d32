//! From the file as written to [`Config`]: defaults, bounds, names and keys not supported yet,
//! each refusal naming the key and its position.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;

use toml::Spanned;

use super::key_path::key_path_at;
use super::limits::*;
use super::raw::{RawBroker, RawConfig, RawQueue};
use super::{BrokerConfig, Config, ConfigError, Durability, Location, QueueConfig};

/// Queue keys of the design's contract that the broker does not implement yet. They are parsed
/// and type-checked, and a config that sets one is rejected. Remove a key from this list when
/// the feature lands (and carry its value into [`QueueConfig`]).
pub(super) const UNSUPPORTED_QUEUE_KEYS: &[&str] = &["requires_session"];

/// The text being parsed and its name, to turn byte spans into [`Location`]s.
pub(super) struct Source<'a> {
    pub(super) text: &'a str,
    pub(super) origin: &'a str,
}

impl Source<'_> {
    /// Validates every section; the first problem found is returned.
    pub(super) fn validate(&self, raw: RawConfig) -> Result<Config, ConfigError> {
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
    pub(super) fn deserialize_error(&self, error: &toml::de::Error) -> ConfigError {
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
    pub(super) fn location(&self, offset: usize) -> Location {
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
pub(super) fn check_queue_name(name: &str) -> Result<(), String> {
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
