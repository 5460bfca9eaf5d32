//! The text of `GET /metrics`: the per-entity figures each actor reports at scrape time
//! (`LaneCounts`, `LaneActivity`, read through `Command::Describe`: the scrape pays for them,
//! not the messages), the broker-wide metrics of [`crate::metrics`] and the store's size.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::entity::handle::{EntityStats, LaneId};
use crate::metrics;

/// The content type of [`exposition`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the scrape reports of one queue, topic or subscription.
#[derive(Debug)]
pub struct Described<'a> {
    /// `queue`, `topic` or `subscription`.
    pub kind: &'static str,
    /// Its path: a queue's or topic's name, or `topic/Subscriptions/name`.
    pub path: String,
    /// What its actor reported.
    pub stats: &'a EntityStats,
    /// Its lanes in `stats` (none for a topic: its messages live in its subscriptions).
    pub lane: Option<LaneId>,
    /// What each partition reported, for a partitioned entity's (none otherwise).
    pub partitions: &'a [EntityStats],
}

type Labels = Vec<(&'static str, String)>;

/// Per-entity metric families of one scrape.
#[derive(Default)]
struct EntityFamilies {
    messages: Family<Labels, Gauge>,
    bytes: Family<Labels, Gauge>,
    received: Family<Labels, Counter>,
    consumed: Family<Labels, Counter>,
    forwarded: Family<Labels, Counter>,
    lock_expirations: Family<Labels, Counter>,
    expired: Family<Labels, Counter>,
    dead_lettered: Family<Labels, Counter>,
    duplicates_dropped: Family<Labels, Counter>,
    duplicate_ids: Family<Labels, Gauge>,
    partition_messages: Family<Labels, Gauge>,
}

impl EntityFamilies {
    fn add(&self, entity: &Described) {
        let base = || -> Labels {
            vec![
                ("entity", entity.path.clone()),
                ("kind", entity.kind.into()),
            ]
        };
        let with = |key: &'static str, value: &str| {
            let mut labels = base();
            labels.push((key, value.to_owned()));
            labels
        };
        let stats = entity.stats;
        if entity.kind != "subscription" {
            self.duplicates_dropped
                .get_or_create(&base())
                .inc_by(stats.duplicates_dropped);
            self.duplicate_ids
                .get_or_create(&base())
                .set(gauge(stats.duplicate_ids as u64));
        }
        let Some(main) = entity.lane else {
            // A topic: what was sent to it, and the bytes its subscriptions hold.
            let bytes: u64 = stats.lanes.iter().map(|(_, counts)| counts.bytes).sum();
            self.bytes.get_or_create(&base()).set(gauge(bytes));
            self.received.get_or_create(&base()).inc_by(stats.sent);
            let scheduled = stats.lane(LaneId::MAIN).scheduled;
            self.messages
                .get_or_create(&with("state", "scheduled"))
                .set(gauge(scheduled));
            return;
        };
        for (partition, stats) in entity.partitions.iter().enumerate() {
            let counts = stats.lane(main);
            self.partition_messages
                .get_or_create(&with("partition", &partition.to_string()))
                .set(gauge(counts.active + counts.scheduled + counts.deferred));
        }
        let dead = main.dead_letter_lane();
        let (counts, dead_counts) = (stats.lane(main), stats.lane(dead));
        for (state, value) in [
            ("active", counts.active),
            ("scheduled", counts.scheduled),
            ("deferred", counts.deferred),
            ("dead_letter", dead_counts.active + dead_counts.deferred),
        ] {
            self.messages
                .get_or_create(&with("state", state))
                .set(gauge(value));
        }
        self.bytes
            .get_or_create(&base())
            .set(gauge(counts.bytes + dead_counts.bytes));
        let Some(activity) = stats
            .activity
            .iter()
            .find(|(id, _)| *id == main)
            .map(|(_, activity)| activity)
        else {
            return;
        };
        self.received
            .get_or_create(&base())
            .inc_by(activity.received);
        self.consumed
            .get_or_create(&base())
            .inc_by(activity.consumed);
        let forwarded = [main, dead].into_iter().filter_map(|lane| {
            let (_, activity) = stats.activity.iter().find(|(id, _)| *id == lane)?;
            Some((lane.dead_letter, activity.forwarded))
        });
        for (dead_letter, count) in forwarded {
            let lane = if dead_letter { "dead_letter" } else { "main" };
            self.forwarded
                .get_or_create(&with("lane", lane))
                .inc_by(count);
        }
        self.lock_expirations
            .get_or_create(&base())
            .inc_by(activity.lock_expirations);
        self.expired.get_or_create(&base()).inc_by(activity.expired);
        for (reason, count) in &activity.dead_lettered {
            self.dead_lettered
                .get_or_create(&with("reason", reason))
                .inc_by(*count);
        }
    }

    fn register(self, registry: &mut Registry) {
        registry.register(
            "tidebus_messages",
            "Messages an entity holds, by state (dead_letter: in its dead-letter queue)",
            self.messages,
        );
        registry.register(
            "tidebus_entity_bytes",
            "Bytes of the messages an entity holds, its dead-letter queue included",
            self.bytes,
        );
        registry.register(
            "tidebus_messages_in",
            "Messages that entered an entity since start (sent to a queue or topic, copied \
             into a subscription)",
            self.received,
        );
        registry.register(
            "tidebus_messages_out",
            "Messages that left an entity settled since start (completed, or received and \
             deleted)",
            self.consumed,
        );
        registry.register(
            "tidebus_messages_forwarded",
            "Messages moved to the entity's forwarding target since start, from its main lane \
             or its dead-letter queue (lane)",
            self.forwarded,
        );
        registry.register(
            "tidebus_lock_expirations",
            "Message locks that ran out before settlement, since start",
            self.lock_expirations,
        );
        registry.register(
            "tidebus_messages_expired",
            "Messages whose time to live ran out, since start",
            self.expired,
        );
        registry.register(
            "tidebus_dead_lettered",
            "Messages moved to the dead-letter queue since start, by reason (at most 32 \
             reasons per entity, then '(other)')",
            self.dead_lettered,
        );
        registry.register(
            "tidebus_duplicates_dropped",
            "Sends a queue or topic acknowledged and dropped as duplicates since start",
            self.duplicates_dropped,
        );
        registry.register(
            "tidebus_duplicate_ids",
            "Message ids in a queue's or topic's duplicate-detection window",
            self.duplicate_ids,
        );
        registry.register(
            "tidebus_partition_messages",
            "Messages one partition of a partitioned queue or subscription holds (active, \
             scheduled and deferred; the entity's totals are in tidebus_messages)",
            self.partition_messages,
        );
    }
}

fn gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The metrics text for `entities`, the broker-wide metrics and the store's size on disk.
pub fn exposition(entities: &[Described], store_bytes: u64) -> String {
    let mut registry = Registry::default();
    let families = EntityFamilies::default();
    for entity in entities {
        families.add(entity);
    }
    families.register(&mut registry);
    metrics::register(&mut registry);
    let store = Gauge::<i64>::default();
    store.set(gauge(store_bytes));
    registry.register(
        "tidebus_store_bytes",
        "Size of the message store on disk",
        store,
    );
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}
