//! The file as written: what serde reads before validation. Every value keeps its byte span so
//! that validation errors can name its position.

use std::ops::Range;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::units::{ByteSize, HumanDuration};
use super::Durability;

/// The file as serde reads it: `[broker]`, `[[queues]]` and, not supported yet, `[[topics]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) broker: RawBroker,
    #[serde(default)]
    pub(super) queues: Vec<RawQueue>,
    pub(super) topics: Option<Spanned<toml::Value>>,
}

/// `[broker]` as written; absent keys take their defaults in validation.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBroker {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) data_dir: Option<Spanned<PathBuf>>,
    pub(super) durability: Option<Durability>,
    pub(super) flush_interval: Option<Spanned<HumanDuration>>,
    pub(super) max_message_size: Option<Spanned<ByteSize>>,
    pub(super) cache_capacity: Option<Spanned<ByteSize>>,
    pub(super) max_connections: Option<Spanned<u64>>,
    pub(super) idle_timeout: Option<Spanned<HumanDuration>>,
    pub(super) max_frame_size: Option<Spanned<ByteSize>>,
    pub(super) shutdown_timeout: Option<Spanned<HumanDuration>>,
    pub(super) handshake_timeout: Option<Spanned<HumanDuration>>,
    pub(super) connection_buffer: Option<Spanned<ByteSize>>,
    pub(super) write_timeout: Option<Spanned<HumanDuration>>,
    pub(super) consumer_window: Option<Spanned<ByteSize>>,
    pub(super) max_links_per_connection: Option<Spanned<u64>>,
}

/// One `[[queues]]` entry as written. The planned keys are in `validate::UNSUPPORTED_QUEUE_KEYS`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQueue {
    pub(super) name: Spanned<String>,
    pub(super) lock_duration: Option<Spanned<HumanDuration>>,
    pub(super) max_delivery_count: Option<Spanned<u64>>,
    pub(super) default_message_time_to_live: Option<Spanned<HumanDuration>>,
    pub(super) dead_lettering_on_message_expiration: Option<Spanned<bool>>,
    pub(super) requires_session: Option<Spanned<bool>>,
    pub(super) auto_delete_on_idle: Option<Spanned<HumanDuration>>,
    pub(super) max_size_in_megabytes: Option<Spanned<u64>>,
}

impl RawQueue {
    /// The planned keys with the span of their value when set.
    pub(super) fn planned_keys(&self) -> [(&'static str, Option<Range<usize>>); 1] {
        [("requires_session", span_of(&self.requires_session))]
    }
}

fn span_of<T>(value: &Option<Spanned<T>>) -> Option<Range<usize>> {
    value.as_ref().map(Spanned::span)
}
