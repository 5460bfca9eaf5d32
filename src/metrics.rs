//! The broker's metrics in the Prometheus / OpenMetrics text format (`GET /metrics` on the
//! administration listener), written with `prometheus-client`.
//!
//! These are the **broker-wide** counters, gauges and histograms ([`broker`]): atomics bumped
//! per connection, link, authentication failure, storage error and group-commit flush, at no
//! cost of a lock or an allocation per message. The per-entity figures are read from the
//! actors at scrape time by the administration endpoint (`admin/scrape.rs`). A leaf: it
//! imports nothing of the broker.

use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Broker-wide metrics, one set per process (one broker runs per process).
#[derive(Debug)]
pub struct BrokerMetrics {
    /// AMQP connections open now (past the TCP accept, TLS handshake included).
    pub connections: Gauge,
    /// AMQP connections accepted since start.
    pub connections_accepted: Counter,
    /// Links attached now.
    pub links: Gauge,
    /// SASL exchanges refused (a wrong key, an unknown mechanism, a broken exchange).
    pub sasl_failures: Counter,
    /// CBS `put-token` requests refused (a bad or expired token, a wrong key).
    pub cbs_failures: Counter,
    /// Group-commit flushes: how long each took, in seconds.
    pub flush_seconds: Histogram,
    /// Group-commit flushes: how many messages each made durable.
    pub flush_messages: Histogram,
    /// Storage failures (a write or a flush that failed; the entity or store stops
    /// acknowledging).
    pub storage_errors: Counter,
    /// Transactions committed (their work applied and durable).
    pub transactions_committed: Counter,
    /// Transactions rolled back: by their client, by a failed commit, at their timeout, or
    /// with their connection.
    pub transactions_rolled_back: Counter,
}

static BROKER: LazyLock<BrokerMetrics> = LazyLock::new(|| BrokerMetrics {
    connections: Gauge::default(),
    connections_accepted: Counter::default(),
    links: Gauge::default(),
    sasl_failures: Counter::default(),
    cbs_failures: Counter::default(),
    // 50 µs to about 1.6 s.
    flush_seconds: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
    // 1 to 32,768 messages.
    flush_messages: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
    storage_errors: Counter::default(),
    transactions_committed: Counter::default(),
    transactions_rolled_back: Counter::default(),
});

/// The process's broker-wide metrics.
pub fn broker() -> &'static BrokerMetrics {
    &BROKER
}

/// Holds one unit of a gauge (an open connection, an attached link) while it lives.
#[derive(Debug)]
pub struct Held(&'static Gauge);

impl Held {
    /// Adds one to `gauge` until the returned value is dropped.
    pub fn one(gauge: &'static Gauge) -> Held {
        gauge.inc();
        Held(gauge)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Registers the broker-wide metrics in `registry`, for one scrape.
pub fn register(registry: &mut Registry) {
    let metrics = broker();
    registry.register(
        "tidebus_connections",
        "AMQP connections open now",
        metrics.connections.clone(),
    );
    registry.register(
        "tidebus_connections_accepted",
        "AMQP connections accepted since start",
        metrics.connections_accepted.clone(),
    );
    registry.register("tidebus_links", "Links attached now", metrics.links.clone());
    registry.register(
        "tidebus_sasl_failures",
        "SASL exchanges refused since start",
        metrics.sasl_failures.clone(),
    );
    registry.register(
        "tidebus_cbs_failures",
        "CBS put-token requests refused since start",
        metrics.cbs_failures.clone(),
    );
    registry.register(
        "tidebus_flush_duration_seconds",
        "Group-commit flushes by how long they took",
        metrics.flush_seconds.clone(),
    );
    registry.register(
        "tidebus_flush_messages",
        "Group-commit flushes by how many messages they made durable",
        metrics.flush_messages.clone(),
    );
    registry.register(
        "tidebus_storage_errors",
        "Storage failures since start",
        metrics.storage_errors.clone(),
    );
    registry.register(
        "tidebus_transactions_committed",
        "Transactions committed since start",
        metrics.transactions_committed.clone(),
    );
    registry.register(
        "tidebus_transactions_rolled_back",
        "Transactions rolled back since start (by the client, a failed commit, the timeout, or \
         the end of their connection)",
        metrics.transactions_rolled_back.clone(),
    );
}
