//! The entity task: owns a [`QueueState`] and its log, drains its mailbox in batches, writes
//! each batch's changes at once, and answers senders only after the durability point
//! (design.md D2, D4, D5).
//!
//! Group commit in `sync` mode: answers wait in `unflushed` until a flush is requested, then
//! in `flushing` until that flush completes; meanwhile the next batches are applied and
//! written, so one fsync covers everything that arrived while the previous one ran.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::QueueConfig;
use crate::entity::handle::{
    Command, ConsumerId, Delivery, EntityError, EntityEvent, EntityHandle, EventSink,
};
use crate::entity::state::QueueState;
use crate::store::{EntityLog, Flusher, StoreError};

/// Mailbox capacity: senders wait (backpressure) when this many commands are queued.
const MAILBOX: usize = 4096;
/// Commands taken per wake-up, so deadlines and shutdown are never starved.
const BATCH: usize = 512;

/// When an entity's answers may leave.
#[derive(Debug, Clone)]
pub enum Commit {
    /// Right after the write (`memory` mode, and `interval` mode with its periodic flusher,
    /// whose failure poisons the entity too).
    AfterWrite(Option<Flusher>),
    /// After a flush covered the write (`sync` mode).
    AfterFlush(Flusher),
}

/// Recovers a queue from its log and starts its actor.
///
/// # Errors
/// A [`StoreError`] when the log cannot be read back.
pub fn spawn(
    config: &QueueConfig,
    log: EntityLog,
    commit: Commit,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> Result<EntityHandle, StoreError> {
    let (tx, rx) = mpsc::channel(MAILBOX);
    let lock_ms = i64::try_from(config.lock_duration.as_millis()).unwrap_or(i64::MAX);
    let max_bytes = config.max_size_in_megabytes.saturating_mul(1024 * 1024);
    let state = QueueState::recover(lock_ms, max_bytes, log.recover()?);
    let actor = Actor {
        state,
        log,
        commit,
        consumers: HashMap::new(),
        poisoned: None,
        answers: Vec::new(),
        unflushed: Vec::new(),
    };
    let span = tracing::info_span!("entity", name = %config.name);
    tracker.spawn(actor.run(rx, shutdown).instrument(span));
    Ok(EntityHandle::new(config.name.clone(), tx))
}

/// Wall-clock milliseconds since the Unix epoch (Service Bus times are UTC).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// An answer held back until its changes are durable.
type Answer = (EventSink, EntityEvent);

/// A flush in flight and what waits for it.
struct Flushing {
    done: oneshot::Receiver<FlushResult>,
    /// Answers to send once it completes.
    answers: Vec<Answer>,
    /// Messages numbered below this become deliverable once it completes.
    covers_next_seq: i64,
}

type FlushResult = Result<(), StoreError>;

struct Actor {
    state: QueueState,
    log: EntityLog,
    commit: Commit,
    /// Where each consumer's deliveries go.
    consumers: HashMap<ConsumerId, EventSink>,
    /// Set by the first storage failure; from then on nothing is acknowledged.
    poisoned: Option<String>,
    /// Answers of the batch being applied.
    answers: Vec<Answer>,
    /// Answers whose changes are written but not yet covered by a requested flush.
    unflushed: Vec<Answer>,
}

impl Actor {
    async fn run(mut self, mut mailbox: mpsc::Receiver<Command>, shutdown: CancellationToken) {
        let mut batch = Vec::with_capacity(BATCH);
        let mut flushing: Option<Flushing> = None;
        loop {
            let deadline = self.state.next_deadline_ms().map(|at| {
                let wait = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
                Instant::now() + Duration::from_millis(wait)
            });
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                result = wait_flush(&mut flushing), if flushing.is_some() => {
                    if let Some(done) = flushing.take() {
                        self.on_flushed(result, done);
                    }
                }
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
            // Write before dispatching, so the bytes of messages just sent can be read back.
            self.persist_and_publish();
            if self.poisoned.is_none() {
                let deliveries = self.state.dispatch(now_ms());
                self.hand_out(deliveries);
                self.persist();
            }
            self.release_answers();
            let waiting = !self.unflushed.is_empty() || self.state.has_unpublished();
            if let (None, true, Commit::AfterFlush(flusher)) = (&flushing, waiting, &self.commit) {
                flushing = Some(Flushing {
                    done: flusher.request(),
                    answers: std::mem::take(&mut self.unflushed),
                    covers_next_seq: self.state.next_seq(),
                });
            }
        }
        self.persist();
        if let Some(mut pending) = flushing {
            let result = (&mut pending.done)
                .await
                .unwrap_or_else(|_| Err(flusher_gone()));
            self.on_flushed(result, pending);
        }
        tracing::debug!(messages = self.state.len(), "entity stopped");
    }

    fn apply(&mut self, command: Command, now: i64) {
        match command {
            Command::Send { messages, reply } => {
                let result = match &self.poisoned {
                    Some(error) => Err(EntityError::Storage(error.clone())),
                    None => self.state.enqueue(now, messages).map(|_| ()),
                };
                if let Some((ticket, events)) = reply {
                    self.answers
                        .push((events, EntityEvent::Sent { ticket, result }));
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
                // Messages sent earlier in this batch count as there.
                self.persist_and_publish();
                let deliveries = match self.poisoned {
                    None => self.state.drain(consumer, now),
                    Some(_) => Vec::new(),
                };
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
                    .map(|(lock, settlement)| match &self.poisoned {
                        Some(error) => Err(EntityError::Storage(error.clone())),
                        None => self.state.settle(consumer, *lock, settlement),
                    })
                    .inspect(|result| {
                        if let Err(error) = result {
                            tracing::debug!(consumer = consumer.0, %error, "settlement refused");
                        }
                    })
                    .collect();
                if let Some((ticket, events)) = reply {
                    self.answers
                        .push((events, EntityEvent::Settled { ticket, results }));
                }
            }
            Command::GiveBack { delivery } => {
                tracing::debug!(
                    seq = delivery.seq,
                    consumer = delivery.consumer.0,
                    "delivery given back"
                );
                self.state.give_back(delivery);
            }
            Command::Unsubscribe { consumer } => {
                self.state.unsubscribe(consumer);
                self.consumers.remove(&consumer);
            }
        }
    }

    /// Reads each delivery's bytes from the log and sends it to its consumer. A consumer whose
    /// connection is gone is unsubscribed at once (its locks are released).
    fn hand_out(&mut self, deliveries: Vec<Delivery>) {
        for mut delivery in deliveries {
            match self.log.body(delivery.seq) {
                Ok(bytes) => delivery.bytes = bytes,
                Err(error) => {
                    self.poison(&error);
                    return;
                }
            }
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

    /// Writes the journal in one batch. A failure poisons the entity.
    fn persist(&mut self) {
        let changes = self.state.take_changes();
        if changes.is_empty() || self.poisoned.is_some() {
            return;
        }
        if let Err(error) = self.log.write(changes) {
            self.poison(&error);
        }
    }

    /// Writes the journal; without a flush to wait for, what is written may be delivered.
    fn persist_and_publish(&mut self) {
        self.persist();
        if let (Commit::AfterWrite(_), None) = (&self.commit, &self.poisoned) {
            self.state.publish_up_to(self.state.next_seq());
        }
    }

    /// Sends the batch's answers now, or parks them for the next flush.
    fn release_answers(&mut self) {
        if let Commit::AfterWrite(Some(flusher)) = &self.commit {
            if let Some(error) = flusher.poisoned().cloned() {
                self.poison(&error);
            }
        }
        let answers = std::mem::take(&mut self.answers);
        match (&self.commit, &self.poisoned) {
            (Commit::AfterFlush(_), None) => self.unflushed.extend(answers),
            _ => {
                let unflushed = std::mem::take(&mut self.unflushed);
                for (sink, event) in unflushed.into_iter().chain(answers) {
                    self.send_answer(sink, event);
                }
            }
        }
    }

    fn on_flushed(&mut self, result: FlushResult, flushed: Flushing) {
        match result {
            Ok(()) => self.state.publish_up_to(flushed.covers_next_seq),
            Err(error) => self.poison(&error),
        }
        for (sink, event) in flushed.answers {
            self.send_answer(sink, event);
        }
    }

    /// Sends one answer; once poisoned, successes become storage errors (their durability
    /// is unknown).
    fn send_answer(&self, sink: EventSink, event: EntityEvent) {
        let event = match (&self.poisoned, event) {
            (Some(error), EntityEvent::Sent { ticket, .. }) => EntityEvent::Sent {
                ticket,
                result: Err(EntityError::Storage(error.clone())),
            },
            (Some(error), EntityEvent::Settled { ticket, results }) => EntityEvent::Settled {
                ticket,
                results: results
                    .into_iter()
                    .map(|_| Err(EntityError::Storage(error.clone())))
                    .collect(),
            },
            (_, event) => event,
        };
        let _ = sink.send(event);
    }

    fn poison(&mut self, error: &StoreError) {
        if self.poisoned.is_none() {
            tracing::error!(%error, "storage failed: the entity stops acknowledging");
            self.poisoned = Some(error.to_string());
        }
    }
}

fn flusher_gone() -> StoreError {
    StoreError::Sled("the flusher has stopped".into())
}

/// The result of the flush in flight.
///
/// # Cancel safety
/// Cancel safe: the receiver stays in place until it yields.
async fn wait_flush(flushing: &mut Option<Flushing>) -> FlushResult {
    match flushing {
        Some(pending) => (&mut pending.done)
            .await
            .unwrap_or_else(|_| Err(flusher_gone())),
        None => std::future::pending().await,
    }
}

async fn sleep_until_deadline(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
