//! The entity task: owns a [`QueueState`], drains its mailbox in batches, performs the core's
//! effects and sleeps until the core's next deadline (design.md D2, D5).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::QueueConfig;
use crate::entity::handle::{Command, ConsumerId, EntityEvent, EntityHandle, EventSink};
use crate::entity::state::QueueState;

/// Mailbox capacity: senders wait (backpressure) when this many commands are queued.
const MAILBOX: usize = 4096;
/// Commands taken per wake-up, so deadlines and shutdown are never starved.
const BATCH: usize = 512;

/// Starts the actor of one queue and returns its handle.
pub fn spawn(
    config: &QueueConfig,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> EntityHandle {
    let (tx, rx) = mpsc::channel(MAILBOX);
    let lock_ms = i64::try_from(config.lock_duration.as_millis()).unwrap_or(i64::MAX);
    let actor = Actor {
        state: QueueState::new(lock_ms),
        consumers: HashMap::new(),
    };
    let span = tracing::info_span!("entity", name = %config.name);
    tracker.spawn(actor.run(rx, shutdown).instrument(span));
    EntityHandle::new(config.name.clone(), tx)
}

/// Wall-clock milliseconds since the Unix epoch (Service Bus times are UTC).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

struct Actor {
    state: QueueState,
    /// Where each consumer's deliveries go.
    consumers: HashMap<ConsumerId, EventSink>,
}

impl Actor {
    async fn run(mut self, mut mailbox: mpsc::Receiver<Command>, shutdown: CancellationToken) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let deadline = self.state.next_deadline_ms().map(|at| {
                let wait = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
                Instant::now() + Duration::from_millis(wait)
            });
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                received = mailbox.recv_many(&mut batch, BATCH) => {
                    if received == 0 {
                        break;
                    }
                    let now = now_ms();
                    for command in batch.drain(..) {
                        self.apply(command, now);
                    }
                }
                _ = sleep_until_deadline(deadline) => {
                    self.state.expire_locks(now_ms());
                }
            }
            let deliveries = self.state.dispatch(now_ms());
            self.hand_out(deliveries);
        }
        tracing::debug!(messages = self.state.len(), "entity stopped");
    }

    fn apply(&mut self, command: Command, now: i64) {
        match command {
            Command::Send { messages, reply } => {
                self.state.enqueue(now, messages);
                if let Some((ticket, events)) = reply {
                    let _ = events.send(EntityEvent::Sent {
                        ticket,
                        result: Ok(()),
                    });
                }
            }
            Command::Subscribe {
                consumer,
                mode,
                events,
            } => {
                self.state.subscribe(consumer, mode);
                self.consumers.insert(consumer, events);
            }
            Command::Credit { consumer, delta } => self.state.add_credit(consumer, delta),
            Command::Drain { consumer } => {
                let deliveries = self.state.drain(consumer, now);
                self.hand_out(deliveries);
                if let Some(events) = self.consumers.get(&consumer) {
                    let _ = events.send(EntityEvent::Drained { consumer });
                }
            }
            Command::Settle {
                consumer,
                items,
                reply,
            } => {
                let results = items
                    .iter()
                    .map(|(lock, settlement)| self.state.settle(consumer, *lock, settlement))
                    .collect();
                if let Some((ticket, events)) = reply {
                    let _ = events.send(EntityEvent::Settled { ticket, results });
                }
            }
            Command::GiveBack { delivery } => self.state.give_back(delivery),
            Command::Unsubscribe { consumer } => {
                self.state.unsubscribe(consumer);
                self.consumers.remove(&consumer);
            }
        }
    }

    /// Sends deliveries to their consumers. A consumer whose connection is gone gets its
    /// locks released at once instead of waiting for the unsubscribe.
    fn hand_out(&mut self, deliveries: Vec<crate::entity::handle::Delivery>) {
        for delivery in deliveries {
            let consumer = delivery.consumer;
            let gone = match self.consumers.get(&consumer) {
                Some(events) => events.send(EntityEvent::Delivered(delivery)).is_err(),
                None => true,
            };
            if gone {
                self.state.unsubscribe(consumer);
                self.consumers.remove(&consumer);
            }
        }
    }
}

async fn sleep_until_deadline(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
