//! Each setting's default and bounds.

use std::net::SocketAddr;
use std::time::Duration;

/// A setting's default and inclusive bounds, with the wording errors use for the bounds.
pub(super) struct Limits<T> {
    pub(super) default: T,
    pub(super) min: T,
    pub(super) max: T,
    pub(super) allowed: &'static str,
}

pub(super) const FLUSH_INTERVAL: Limits<Duration> = Limits {
    default: Duration::from_millis(100),
    min: Duration::from_millis(1),
    max: Duration::MAX,
    allowed: "at least 1ms",
};
pub(super) const MAX_MESSAGE_SIZE: Limits<u64> = Limits {
    default: 1024 * 1024,
    min: 1,
    max: u64::MAX,
    allowed: "at least 1 byte",
};
pub(super) const CACHE_CAPACITY: Limits<u64> = Limits {
    default: 64 * 1024 * 1024,
    min: 1024 * 1024,
    max: u64::MAX,
    allowed: "at least 1MiB",
};
pub(super) const MAX_SIZE_IN_MEGABYTES: Limits<u64> = Limits {
    default: 1024,
    min: 1,
    max: u64::MAX / (1024 * 1024),
    allowed: "at least 1",
};
/// The most partitions an entity may have (a partition's id fits the bits above a partitioned
/// sequence number's 48).
pub const MAX_PARTITIONS: u16 = 16;
/// The partitions Service Bus Standard gives an entity with `EnablePartitioning`.
pub const SERVICE_BUS_PARTITIONS: u16 = 16;

/// `partitions` of a queue or topic (no default: absent, the entity is not partitioned).
pub(super) const PARTITIONS: Limits<u16> = Limits {
    default: 1,
    min: 1,
    max: MAX_PARTITIONS,
    allowed: "1 to 16",
};
/// `[admin] max_connections`: separate from the AMQP listeners', so that slow HTTP clients
/// cannot lock AMQP clients out.
pub(super) const ADMIN_CONNECTIONS: Limits<usize> = Limits {
    default: 64,
    min: 1,
    max: usize::MAX,
    allowed: "at least 1",
};
/// `[admin] request_timeout`: head and body of one request.
pub(super) const REQUEST_TIMEOUT: Limits<Duration> = Limits {
    default: Duration::from_secs(30),
    min: Duration::from_millis(100),
    max: Duration::from_secs(300),
    allowed: "100ms to 5m",
};
pub(super) const MAX_CONNECTIONS: Limits<usize> = Limits {
    default: 1024,
    min: 1,
    max: usize::MAX,
    allowed: "at least 1",
};
/// The upper bound is what AMQP's `idle-time-out` (milliseconds in a `uint`) can carry.
pub(super) const IDLE_TIMEOUT: Limits<Duration> = Limits {
    default: Duration::from_secs(60),
    min: Duration::from_secs(1),
    max: Duration::from_millis(u32::MAX as u64),
    allowed: "1s to 4294967295ms (about 49 days; AMQP sends it as u32 milliseconds)",
};
/// 512 is AMQP's minimum max-frame-size.
pub(super) const MAX_FRAME_SIZE: Limits<u32> = Limits {
    default: 65536,
    min: 512,
    max: 4 * 1024 * 1024,
    allowed: "512 bytes to 4MiB",
};
pub(super) const SHUTDOWN_TIMEOUT: Limits<Duration> = Limits {
    default: Duration::from_secs(10),
    min: Duration::ZERO,
    max: Duration::MAX,
    allowed: "any duration",
};
pub(super) const HANDSHAKE_TIMEOUT: Limits<Duration> = Limits {
    default: Duration::from_secs(10),
    min: Duration::from_millis(100),
    max: Duration::from_secs(300),
    allowed: "100ms to 5m",
};
pub(super) const CONNECTION_BUFFER: Limits<u64> = Limits {
    default: 4 * 1024 * 1024,
    min: 64 * 1024,
    max: 1024 * 1024 * 1024,
    allowed: "64KiB to 1GiB",
};
pub(super) const WRITE_TIMEOUT: Limits<Duration> = Limits {
    default: Duration::from_secs(30),
    min: Duration::from_millis(100),
    max: Duration::from_secs(3600),
    allowed: "100ms to 1h",
};
pub(super) const TRANSACTION_TIMEOUT: Limits<Duration> = Limits {
    default: Duration::from_secs(120),
    min: Duration::from_millis(100),
    max: Duration::from_secs(3600),
    allowed: "100ms to 1h",
};
pub(super) const CONSUMER_WINDOW: Limits<u64> = Limits {
    default: 1024 * 1024,
    min: 1,
    max: u64::MAX,
    allowed: "at least 1 byte",
};
/// Service Bus allows 1,000 queues and topics per Premium messaging unit (10,000 on Standard,
/// where a partitioned one counts as 1,000 of them); each entity here is an actor and a tree.
pub(super) const MAX_ENTITIES: Limits<usize> = Limits {
    default: 1000,
    min: 1,
    max: 1_000_000,
    allowed: "1 to 1000000",
};
pub(super) const MAX_LINKS_PER_CONNECTION: Limits<usize> = Limits {
    default: 4096,
    min: 1,
    max: usize::MAX,
    allowed: "at least 1",
};
/// Five minutes is Service Bus's maximum lock duration.
pub(super) const LOCK_DURATION: Limits<Duration> = Limits {
    default: Duration::from_secs(60),
    min: Duration::from_secs(1),
    max: Duration::from_secs(5 * 60),
    allowed: "1s to 5m",
};
/// `default_message_time_to_live` and `auto_delete_on_idle`: optional (absent means unlimited
/// or never, so `default` is never used) and at least a second. Service Bus's minimum idle
/// time is 5 minutes; seconds are allowed so that test suites run fast (design.md §5).
pub(super) const AT_LEAST_A_SECOND: Limits<Duration> = Limits {
    default: Duration::MAX,
    min: Duration::from_secs(1),
    max: Duration::MAX,
    allowed: "at least 1s",
};
/// Service Bus allows 20 s to 7 days; seconds are allowed so that test suites run fast.
pub(super) const DUPLICATE_DETECTION_HISTORY_TIME_WINDOW: Limits<Duration> = Limits {
    default: Duration::from_secs(10 * 60),
    min: Duration::from_secs(1),
    max: Duration::from_secs(7 * 24 * 3600),
    allowed: "1s to 7d",
};
/// Service Bus's range: frameworks such as NServiceBus set .NET's `int.MaxValue`.
pub(super) const MAX_DELIVERY_COUNT: Limits<u32> = Limits {
    default: 10,
    min: 1,
    max: i32::MAX as u32,
    allowed: "1 to 2147483647",
};

pub(super) const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5672);
pub(super) const DEFAULT_DATA_DIR: &str = "tidebus-data";
/// The emulator's administration port.
pub(super) const DEFAULT_ADMIN_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5300);
/// Service Bus's default for subscriptions (`CreateSubscriptionOptions`): a message whose rule
/// evaluation fails is dead-lettered rather than lost.
pub(super) const DEAD_LETTERING_ON_FILTER_EVALUATION_EXCEPTIONS: bool = true;
