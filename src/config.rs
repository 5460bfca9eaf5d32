//! Broker configuration: the TOML schema, the embedded default and validation.
//!
//! PLACEHOLDER: the loader, validation and error positions are being written; the types below
//! are the contract the rest of the broker builds on.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The embedded default configuration (`config/default.toml`).
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../config/default.toml");

/// The whole broker configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Broker-wide settings (`[broker]`).
    pub broker: BrokerConfig,
    /// Declared queues (`[[queues]]`).
    pub queues: Vec<QueueConfig>,
}

/// How much of an acknowledged change survives a crash (`[broker] durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledge after fsync.
    Sync,
    /// Acknowledge after the write; fsync every `flush_interval`.
    Interval,
    /// Keep nothing on disk.
    Memory,
}

/// Settings of `[broker]`.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Address the AMQP listener binds.
    pub listen: SocketAddr,
    /// Directory of the message store.
    pub data_dir: PathBuf,
    /// Durability mode.
    pub durability: Durability,
    /// Flush period in `interval` mode.
    pub flush_interval: Duration,
    /// Largest accepted message, in bytes.
    pub max_message_size: u64,
    /// Most concurrent client connections.
    pub max_connections: usize,
    /// Idle timeout the broker advertises in its `open`.
    pub idle_timeout: Duration,
    /// Largest frame the broker accepts.
    pub max_frame_size: u32,
    /// How long a graceful shutdown waits for connections and entities.
    pub shutdown_timeout: Duration,
}

/// One `[[queues]]` entry.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// Entity name, compared case-insensitively.
    pub name: String,
    /// How long a peek-lock delivery stays locked.
    pub lock_duration: Duration,
    /// Deliveries after which a message is dead-lettered.
    pub max_delivery_count: u32,
}

impl Config {
    /// The embedded default configuration.
    pub fn embedded_default() -> Config {
        Config {
            broker: BrokerConfig {
                listen: SocketAddr::from(([127, 0, 0, 1], 5672)),
                data_dir: PathBuf::from("tidebus-data"),
                durability: Durability::Sync,
                flush_interval: Duration::from_millis(100),
                max_message_size: 1024 * 1024,
                max_connections: 1024,
                idle_timeout: Duration::from_secs(60),
                max_frame_size: 65536,
                shutdown_timeout: Duration::from_secs(10),
            },
            queues: ["queue.1", "queue.2", "queue.3"]
                .iter()
                .map(|n| QueueConfig {
                    name: n.to_string(),
                    lock_duration: Duration::from_secs(60),
                    max_delivery_count: 10,
                })
                .collect(),
        }
    }
}
