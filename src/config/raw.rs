//! The file as written: what serde reads before validation. Every value keeps its byte span so
//! that validation errors can name its position.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::units::{ByteSize, HumanDuration};
use super::{CorrelationConfig, Durability, LogFormat, PropertyValue, TestClock};

/// The file as serde reads it: `[broker]`, `[[queues]]` and `[[topics]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) broker: RawBroker,
    #[serde(default)]
    pub(super) admin: RawAdmin,
    #[serde(default)]
    pub(super) testing: RawTesting,
    #[serde(default)]
    pub(super) queues: Vec<RawQueue>,
    #[serde(default)]
    pub(super) topics: Vec<RawTopic>,
    #[serde(default)]
    pub(super) shared_access_policies: Vec<RawPolicy>,
}

/// `[broker]` as written; absent keys take their defaults in validation.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBroker {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) websocket_listen: Option<Vec<Spanned<String>>>,
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
    pub(super) max_entities: Option<Spanned<u64>>,
    pub(super) transaction_timeout: Option<Spanned<HumanDuration>>,
    pub(super) allow_anonymous: Option<Spanned<bool>>,
    pub(super) log_format: Option<LogFormat>,
    pub(super) tls: Option<RawTls>,
}

/// `[admin]` as written.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    pub(super) listen: Option<Spanned<String>>,
    pub(super) max_connections: Option<Spanned<u64>>,
    pub(super) request_timeout: Option<Spanned<HumanDuration>>,
    pub(super) hosts: Option<Vec<Spanned<String>>>,
}

/// `[testing]` as written.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTesting {
    pub(super) reset: Option<bool>,
    pub(super) clock: Option<TestClock>,
    pub(super) allow_exposed: Option<bool>,
}

/// `[broker.tls]` as written: every key is required.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) listen: Spanned<String>,
    pub(super) cert: Spanned<PathBuf>,
    pub(super) key: Spanned<PathBuf>,
}

/// One shared access policy as written; validation checks that exactly one of `key` and
/// `key_env` is set.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    pub(super) name: Spanned<String>,
    pub(super) key: Option<Spanned<String>>,
    pub(super) key_env: Option<Spanned<String>>,
    pub(super) secondary_key: Option<Spanned<String>>,
    pub(super) rights: Spanned<Vec<Spanned<String>>>,
}

/// Declares `LaneKeys`, the keys queues and subscriptions share (the settings of a lane,
/// design.md D7), written once, and the tables that have them: each takes `name`, the lane
/// keys, then its own keys, and gives the lane keys to validation with `take_lane_keys`.
///
/// A macro because serde's `flatten`, the usual way to share fields, loses
/// `deny_unknown_fields` and the spans (style.md, pitfall 14).
macro_rules! lane_tables {
    (
        lane keys { $($key:ident: $type:ty,)* }
        $($tables:tt)*
    ) => {
        /// The keys queues and subscriptions share, as written. Validation reads them in one
        /// place (`Source::lane`), so both follow the same rules.
        pub(super) struct LaneKeys {
            $(pub(super) $key: Option<Spanned<$type>>,)*
        }

        lane_tables!(@tables { $($key: $type,)* } $($tables)*);
    };
    (@tables $lane_keys:tt) => {};
    (
        @tables { $($key:ident: $type:ty,)* }
        $(#[$doc:meta])*
        struct $table:ident { $($(#[$own_attr:meta])* $own:ident: $own_type:ty,)* }
        $($rest:tt)*
    ) => {
        $(#[$doc])*
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct $table {
            pub(super) name: Spanned<String>,
            $(pub(super) $key: Option<Spanned<$type>>,)*
            $($(#[$own_attr])* pub(super) $own: $own_type,)*
        }

        impl $table {
            /// Takes the lane keys out, for validation.
            pub(super) fn take_lane_keys(&mut self) -> LaneKeys {
                LaneKeys { $($key: self.$key.take(),)* }
            }
        }

        lane_tables!(@tables { $($key: $type,)* } $($rest)*);
    };
}

lane_tables! {
    lane keys {
        lock_duration: HumanDuration,
        max_delivery_count: u64,
        default_message_time_to_live: HumanDuration,
        dead_lettering_on_message_expiration: bool,
        requires_session: bool,
        auto_delete_on_idle: HumanDuration,
        forward_to: String,
        forward_dead_lettered_messages_to: String,
        enable_batched_operations: bool,
        user_metadata: String,
    }

    /// One `[[queues]]` entry as written.
    struct RawQueue {
        status: Option<Spanned<String>>,
        max_size_in_megabytes: Option<Spanned<u64>>,
        partitions: Option<Spanned<u64>>,
        enable_express: Option<Spanned<bool>>,
        requires_duplicate_detection: Option<Spanned<bool>>,
        duplicate_detection_history_time_window: Option<Spanned<HumanDuration>>,
        #[serde(default)]
        shared_access_policies: Vec<RawPolicy>,
    }

    /// One `[[topics.subscriptions]]` entry as written. `max_size_in_megabytes` is a topic key:
    /// a subscription has no size of its own.
    struct RawSubscription {
        status: Option<Spanned<String>>,
        dead_lettering_on_filter_evaluation_exceptions: Option<Spanned<bool>>,
        #[serde(default)]
        rules: Vec<Spanned<RawRule>>,
    }
}

/// One `[[topics]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTopic {
    pub(super) name: Spanned<String>,
    pub(super) default_message_time_to_live: Option<Spanned<HumanDuration>>,
    pub(super) max_size_in_megabytes: Option<Spanned<u64>>,
    pub(super) partitions: Option<Spanned<u64>>,
    pub(super) auto_delete_on_idle: Option<Spanned<HumanDuration>>,
    pub(super) enable_express: Option<Spanned<bool>>,
    pub(super) support_ordering: Option<Spanned<bool>>,
    pub(super) enable_batched_operations: Option<Spanned<bool>>,
    pub(super) requires_duplicate_detection: Option<Spanned<bool>>,
    pub(super) duplicate_detection_history_time_window: Option<Spanned<HumanDuration>>,
    pub(super) status: Option<Spanned<String>>,
    pub(super) user_metadata: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) shared_access_policies: Vec<RawPolicy>,
    #[serde(default)]
    pub(super) subscriptions: Vec<RawSubscription>,
}

/// One `[[topics.subscriptions.rules]]` entry as written; validation checks that exactly one
/// filter is set. The spans of `sql`, `selector` and `action` locate errors inside the
/// expressions (`Source::expression_location`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub(super) name: Spanned<String>,
    pub(super) sql: Option<Spanned<String>>,
    pub(super) correlation: Option<Spanned<CorrelationConfig>>,
    /// A JMS message selector.
    pub(super) selector: Option<Spanned<String>>,
    pub(super) action: Option<Spanned<String>>,
    pub(super) parameters: Option<Spanned<BTreeMap<String, PropertyValue>>>,
    pub(super) action_parameters: Option<Spanned<BTreeMap<String, PropertyValue>>>,
}
