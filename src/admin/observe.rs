//! `GET /health` and `GET /metrics` on the administration listener: the emulator's health
//! answer for probes and test fixtures, and the Prometheus text of [`super::scrape`]. Neither
//! needs authorization (probes and scrapers carry no Service Bus token); they show entity
//! names and counts, never a message.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};

use super::scrape::{self, Described};
use super::{api, atom, respond, Admin};
use crate::clock::{now_ms, real_ms};
use crate::config::{Declaration, TestClock};
use crate::entity::handle::{EntityStats, LaneId};
use crate::metrics;

/// 200 `{"status":"healthy", ...}` as the emulator answers, or 503 with the reason: the
/// broker is stopping, or storage failed (an entity or the store stopped acknowledging).
pub fn health(admin: &Admin) -> Response<Full<Bytes>> {
    let storage_errors = metrics::broker().storage_errors.get();
    let problem = if admin.shutdown.is_cancelled() {
        Some("the broker is shutting down".to_owned())
    } else if storage_errors > 0 {
        Some(format!(
            "storage failed {storage_errors} time(s): the affected entities stop acknowledging \
             until a restart"
        ))
    } else {
        None
    };
    let (status, body) = match problem {
        None => (StatusCode::OK, healthy(admin)),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({ "status": "unhealthy", "reason": reason }),
        ),
    };
    respond(status, "application/json", body.to_string())
}

/// What `/health` says of a healthy broker; the testing features on are announced, as the
/// start's log does (this broker is for a test suite), with the broker's time when a test
/// controls its clock.
fn healthy(admin: &Admin) -> serde_json::Value {
    let mut body = serde_json::json!({
        "status": "healthy",
        "entities": admin.registry.len(),
        "connections": metrics::broker().connections.get(),
        "uptimeSeconds": (real_ms() - admin.started_ms) / 1000,
        "testing": admin.testing.features(),
    });
    if admin.testing.clock == TestClock::Controlled {
        body["clock"] = serde_json::json!({
            "now": atom::time(now_ms()),
            "aheadMs": crate::clock::ahead_ms(),
        });
    }
    body
}

/// One entity's report at a scrape.
struct Gathered {
    name: String,
    /// A topic's subscriptions with their lane numbers; `None` for a queue.
    subscriptions: Option<Vec<(String, u32)>>,
    stats: EntityStats,
    /// Each partition's, for a partitioned entity.
    partitions: Vec<EntityStats>,
}

impl Gathered {
    /// What the metrics show of it: a queue, or a topic and each of its subscriptions.
    fn described(&self) -> Vec<Described<'_>> {
        let Some(subscriptions) = &self.subscriptions else {
            return vec![Described {
                kind: "queue",
                path: self.name.clone(),
                stats: &self.stats,
                lane: Some(LaneId::MAIN),
                partitions: &self.partitions,
            }];
        };
        let topic = Described {
            kind: "topic",
            path: self.name.clone(),
            stats: &self.stats,
            lane: None,
            partitions: &self.partitions,
        };
        let each = subscriptions
            .iter()
            .map(|(subscription, number)| Described {
                kind: "subscription",
                path: format!("{}/Subscriptions/{subscription}", self.name),
                stats: &self.stats,
                lane: Some(LaneId {
                    subscription: *number,
                    dead_letter: false,
                }),
                partitions: &self.partitions,
            });
        std::iter::once(topic).chain(each).collect()
    }
}

/// The metrics of every entity and of the broker, read now.
pub async fn metrics(admin: &Admin) -> Response<Full<Bytes>> {
    let mut gathered = Vec::new();
    for entry in admin.registry.entries() {
        let stats = api::stats(&entry).await;
        let subscriptions = match &entry.declaration {
            Declaration::Queue(_) => None,
            Declaration::Topic(topic) => Some(
                topic
                    .subscriptions
                    .iter()
                    .filter_map(|s| Some((s.name.clone(), entry.handle.subscription(&s.name)?)))
                    .collect(),
            ),
        };
        let name = entry.declaration.name().to_owned();
        let partitions = entry.handle.partition_stats().await;
        gathered.push(Gathered {
            name,
            subscriptions,
            stats,
            partitions,
        });
    }
    let described: Vec<Described> = gathered.iter().flat_map(Gathered::described).collect();
    // sled reads the sizes of its files: off the async runtime.
    let registry = admin.registry.clone();
    let store_bytes = tokio::task::spawn_blocking(move || registry.store_bytes())
        .await
        .unwrap_or(0);
    let text = scrape::exposition(&described, store_bytes);
    respond(StatusCode::OK, scrape::CONTENT_TYPE, text)
}
