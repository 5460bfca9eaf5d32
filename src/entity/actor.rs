//! The entity task: owns an [`EntityCore`] and its log, drains its mailbox in batches, writes
//! each batch's changes at once, and answers senders only after the durability point
//! (design.md D2, D4, D5). Its clock work (lock expiry, scheduled activation, expiry) runs on
//! every turn; the sweeper's and the reaper's ticks only wake it. When its answers may leave is
//! the [group commit](crate::entity::commit)'s.

use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::clock::{millis, now_ms};
use crate::entity::actor::lifecycle::Removal;
use crate::entity::commit::{wait_flush, Flushing, GroupCommit};
use crate::entity::core::{EntityCore, Identity};
use crate::entity::forward::{Forwarder, Resolver};
use crate::entity::handle::{
    Command, ConsumerId, Delivery, EntityError, EntityEvent, EntityHandle, EntityStats, EventSink,
    LaneId, LockRef, Sending, Settlement, TopicState,
};
use crate::entity::partition::Partition;
use crate::entity::queue::session_lane::Binding;
use crate::entity::queue::Reader;
use crate::entity::settings::Forward;
use crate::entity::setup::Parts;
use crate::store::{Bodies, EntityLog, Log, StoreError};

/// Mailbox capacity: senders wait (backpressure) when this many commands are queued.
const MAILBOX: usize = 4096;
/// Commands taken per wake-up, so deadlines and shutdown are never starved.
const BATCH: usize = 512;
/// Why a receiver of a lane that forwards is refused (Service Bus's words).
const FORWARDING_RECEIVER: &str =
    "Cannot create a message receiver on an entity with auto-forwarding enabled.";
pub use crate::entity::commit::Commit;

/// Starts an entity's actor; `resolve` finds the targets its lanes forward to.
pub fn spawn(
    parts: Parts,
    commit: Commit,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
    resolve: Resolver,
) -> EntityHandle {
    let name = parts.name.clone();
    let deleted = Arc::new(AtomicBool::new(false));
    let (mailbox, topic) = start(parts, commit, shutdown, tracker, resolve, deleted.clone());
    EntityHandle::new(name, mailbox, deleted, topic)
}

/// Starts the actor of an entity or of one partition of it; returns its mailbox and, for a
/// topic, the state it shares with its handles (its subscriptions by name, whether its rules
/// read messages). The actor sets `deleted` once the entity is deleted.
pub fn start(
    parts: Parts,
    commit: Commit,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
    resolve: Resolver,
    deleted: Arc<AtomicBool>,
) -> (mpsc::Sender<Command>, Option<Arc<TopicState>>) {
    let (tx, rx) = mpsc::channel(MAILBOX);
    // Targets' answers to forwarded batches: one per batch, and a lane has at most
    // `forward::IN_FLIGHT` messages in flight, so this channel holds that many at most.
    let (answers, forward_answers) = mpsc::unbounded_channel();
    let topic = parts.subscriptions.map(|s| Arc::new(TopicState::new(s)));
    let mut core = parts.core;
    core.set_identity(Identity {
        name: parts.name.clone(),
        topic: topic.clone(),
        partition: parts.partition,
    });
    for (number, status) in parts.statuses {
        core.set_status(number, status);
    }
    let mut actor = Actor {
        forwarder: Forwarder::new(resolve, answers),
        commit: GroupCommit::new(commit, parts.express, core.next_seq()),
        core,
        log: parts.log,
        consumers: HashMap::new(),
        auto_delete_ms: parts.auto_delete_on_idle.map(millis),
        deleted: deleted.clone(),
        last_active_ms: now_ms(),
        accessed_ms: None,
        reap: None,
        ticked: Vec::new(),
    };
    for (lane, forward) in &parts.forwards {
        actor.set_forward(*lane, forward);
    }
    actor.publish_rules_read();
    if actor.core.next_transfer() > 0 {
        actor.forwarder.set_per_message(LaneId::TRANSFER);
    }
    let span = match parts.partition {
        Partition::ALONE => tracing::info_span!("entity", name = %parts.name),
        partition => tracing::info_span!("entity", name = %parts.name, partition = partition.id()),
    };
    tracker.spawn(actor.run(rx, forward_answers, shutdown).instrument(span));
    (tx, topic)
}

/// One entity: all its lanes owned together, so that dead-lettering a message (delete here,
/// store there) is one atomic write of one tree.
struct Actor {
    core: EntityCore,
    log: EntityLog,
    /// When its answers may leave, and whether storage failed.
    commit: GroupCommit,
    /// Where each consumer's deliveries go (the core knows its lane).
    consumers: HashMap<ConsumerId, EventSink>,
    /// `auto_delete_on_idle` in ms, if the entity has it.
    auto_delete_ms: Option<i64>,
    /// Shared with every handle: set once the entity is deleted, so that commands it can no
    /// longer take are refused with `amqp:not-found` rather than as a stopping broker's.
    deleted: Arc<AtomicBool>,
    /// When the entity was last active, for auto-delete on idle: its start, a client's use,
    /// or a batch it forwarded.
    last_active_ms: i64,
    /// When a client last used the entity (Service Bus's `AccessedAt`): `None` until one
    /// does in this process.
    accessed_ms: Option<i64>,
    /// A request to delete the entity after this turn: the reaper's, which found it idle (it
    /// is deleted unless the turn used it), or the administration API's (`forced`).
    reap: Option<(oneshot::Sender<bool>, Removal)>,
    /// Who waits for this turn to have done what the clock's move made due
    /// ([`Command::Tick`]).
    ticked: Vec<oneshot::Sender<bool>>,
    /// The lanes that forward, and their batches on the way to their targets.
    forwarder: Forwarder,
}

impl Actor {
    async fn run(
        mut self,
        mut mailbox: mpsc::Receiver<Command>,
        mut forward_answers: mpsc::UnboundedReceiver<EntityEvent>,
        shutdown: CancellationToken,
    ) {
        let mut batch = Vec::with_capacity(BATCH);
        let mut flushing: Option<Flushing> = None;
        loop {
            let deadline = [
                self.core.next_deadline_ms(),
                self.forwarder.next_retry_ms(),
                self.commit.quiet_flush_at(),
            ];
            let deadline = deadline.into_iter().flatten().min().map(|at| {
                let wait = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
                Instant::now() + Duration::from_millis(wait)
            });
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                result = wait_flush(&mut flushing), if flushing.is_some() => {
                    if let Some(done) = flushing.take() {
                        self.commit.on_flushed(result, done, &mut self.core);
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
                Some(answer) = forward_answers.recv() => {
                    self.on_forwarded(answer, now_ms());
                    while let Ok(answer) = forward_answers.try_recv() {
                        self.on_forwarded(answer, now_ms());
                    }
                }
                _ = sleep_until_deadline(deadline) => {}
            }
            self.on_time(now_ms());
            if let Some((reply, removal)) = self.reap.take() {
                if removal == Removal::Asked || self.is_idle(now_ms()) {
                    self.delete(&mut mailbox, flushing.take(), reply, removal)
                        .await;
                    return;
                }
                let _ = reply.send(false);
            }
            // Write before dispatching, so the bytes of messages just sent can be read back.
            self.persist_and_reveal();
            if !self.commit.is_poisoned() {
                let now = now_ms();
                for (consumer, binding) in self.core.bind_waiting(now) {
                    self.tell_bound(consumer, binding);
                }
                self.dispatch(now);
                if self.forward(now) {
                    // Messages over the hop limit went to the transfer dead-letter queue.
                    self.persist_and_reveal();
                    self.dispatch(now);
                }
                self.persist();
            }
            self.commit.release_answers();
            for reply in self.ticked.drain(..) {
                let _ = reply.send(true);
            }
            if flushing.is_none() && self.commit.flush_due(now_ms(), &self.log, &self.core) {
                self.commit.commit_log(&mut self.log);
                flushing = self.commit.request_flush(&self.core);
            }
        }
        self.persist();
        self.commit.commit_log(&mut self.log);
        self.commit.complete_flush(flushing, &mut self.core).await;
        tracing::debug!(messages = self.core.len(), "entity stopped");
    }

    fn apply(&mut self, mut command: Command, now: i64) {
        command.unmark_tokens(self.core.partition());
        let rules_may_change = matches!(
            command,
            Command::Manage { .. }
                | Command::AddSubscription { .. }
                | Command::RemoveSubscription { .. }
                | Command::Reconfigure { .. }
        );
        if command.is_activity() {
            self.used(now);
            let lane = match &command {
                Command::Manage { lane, .. } => Some(*lane),
                Command::Credit { consumer, .. }
                | Command::Drain { consumer }
                | Command::Settle { consumer, .. } => self.core.lane_id_of(*consumer),
                _ => None,
            };
            if let Some(lane) = lane {
                self.core.touch(lane, now);
            }
        }
        match command {
            Command::Send { transfers, events } => {
                let mut results = Vec::new();
                for Sending { messages, ticket } in transfers {
                    let result = (self.commit.check_healthy())
                        .and_then(|()| self.core.send(now, messages).map(|_| ()));
                    if let Some(ticket) = ticket {
                        results.push((ticket, result));
                    }
                }
                if !results.is_empty() {
                    self.commit.answer(events, EntityEvent::Sent { results });
                }
            }
            Command::AddConsumer {
                consumer,
                lane,
                events,
                ..
            } if self.forwarder.forwards(lane) => {
                let error = EntityError::NotAllowed(FORWARDING_RECEIVER);
                let _ = events.send(EntityEvent::Gone { consumer, error });
            }
            Command::AddConsumer {
                consumer,
                lane,
                mode,
                window,
                events,
                session,
                selector,
            } => {
                let status = self.core.check_receivable(lane);
                let added = status.and_then(|()| match &session {
                    None => {
                        (self.core).add_consumer(consumer, lane, mode, window)?;
                        if let (Some(selector), Some(queue)) =
                            (selector, self.core.lane_of(consumer))
                        {
                            queue.select(consumer, selector);
                        }
                        Ok(None)
                    }
                    Some(request) => self
                        .core
                        .accept_session(consumer, lane, mode, window, request, now),
                });
                match added {
                    Ok(bound) => {
                        if session.is_none() {
                            let _ = events.send(EntityEvent::ConsumerAdded { consumer });
                        }
                        self.consumers.insert(consumer, events);
                        if let Some(bound) = bound {
                            self.tell_bound(consumer, Ok(bound));
                        }
                    }
                    Err(error) => {
                        let _ = events.send(EntityEvent::Gone { consumer, error });
                    }
                }
            }
            Command::Credit { consumer, limit } => {
                if let Some(queue) = self.core.lane_of(consumer) {
                    queue.set_limit(consumer, limit);
                }
            }
            Command::Drain { consumer } => self.drain(consumer, now),
            Command::Forwarded { consumer, bytes } => {
                let draining = self
                    .core
                    .lane_of(consumer)
                    .is_some_and(|queue| queue.forwarded(consumer, bytes));
                if draining {
                    self.drain(consumer, now);
                }
            }
            Command::Settle {
                consumer,
                items,
                reply,
                awaited,
            } => {
                let results = items
                    .iter()
                    .map(|(lock, settlement)| self.settle(consumer, *lock, settlement))
                    .collect();
                self.move_dead_letters();
                if let Some((ticket, events)) = reply {
                    let answer = EntityEvent::Settled { ticket, results };
                    match awaited {
                        true => self.commit.answer(events, answer),
                        false => self.commit.answer_quietly(events, answer),
                    }
                }
            }
            Command::Stage { txn, work, reply } => {
                let answer = match self.commit.check_healthy() {
                    Ok(()) => Ok(self.core.stage(txn, work)),
                    Err(error) => Err((work, error)),
                };
                if let Some((ticket, events)) = reply {
                    let event = match answer {
                        Ok(answer) => answer.into_event(ticket),
                        Err((work, error)) => work.refused(ticket, &error),
                    };
                    self.commit.answer(events, event);
                }
            }
            Command::Discharge { txn, commit, reply } => {
                // A transaction an entity that stopped acknowledging cannot store rolls back.
                let healthy = match commit {
                    true => self.commit.check_healthy(),
                    false => Ok(()),
                };
                let commit = commit && healthy.is_ok();
                let result = (self.core)
                    .discharge(now, txn, commit, &mut self.log)
                    .and(healthy);
                self.poison_on_storage(&result);
                match &result {
                    Ok(()) if commit => self.commit.persist(&mut self.log, &mut self.core, true),
                    Ok(()) => {}
                    Err(error) => {
                        tracing::debug!(txn, %error, "transaction rolled back at its commit")
                    }
                }
                if let Some((ticket, events)) = reply {
                    self.commit
                        .answer(events, EntityEvent::Discharged { ticket, result });
                }
            }
            Command::GiveBack { delivery } => {
                tracing::debug!(
                    seq = delivery.seq,
                    consumer = delivery.consumer.0,
                    "delivery given back"
                );
                let consumer = delivery.consumer;
                let draining = self
                    .core
                    .lane_of(consumer)
                    .is_some_and(|queue| queue.give_back(*delivery));
                if draining {
                    self.drain(consumer, now);
                }
            }
            Command::Manage {
                lane,
                operation,
                reply: (ticket, events),
            } => {
                let callers = |consumer| {
                    (self.consumers.get(&consumer)).is_some_and(|sink| sink.same_channel(&events))
                };
                let result = self.commit.check_healthy().and_then(|()| {
                    (self.core).manage(now, lane, *operation, &callers, &mut self.log)
                });
                self.poison_on_storage(&result);
                self.commit
                    .answer(events, EntityEvent::Managed { ticket, result });
            }
            Command::RemoveConsumer { consumer } => self.unsubscribe(consumer),
            Command::ExpireDue { .. } if self.commit.is_poisoned() => {}
            Command::ExpireDue { now_ms } => {
                self.core.expire_due(now_ms);
                self.move_dead_letters();
                self.core.release_spare_capacity();
                // The sweeper's tick is also the log's housekeeping turn.
                if let Err(error) = self.log.compact() {
                    self.commit.poison(&error);
                }
            }
            // The turn's clock work follows every batch; the answer waits for its dispatch.
            Command::Tick { reply } => self.ticked.push(reply),
            Command::ReapIfIdle { reply } => match self.reap_subscriptions(now).is_idle(now) {
                true => self.reap = Some((reply, Removal::Idle)),
                false => {
                    let _ = reply.send(false);
                }
            },
            Command::IsIdle { reply } => {
                let _ = reply.send(self.reap_subscriptions(now).is_idle(now));
            }
            Command::Delete { reply } => self.reap = Some((reply, Removal::Asked)),
            Command::AddSubscription {
                config,
                number,
                reply,
            } => {
                let _ = reply.send(self.add_subscription(&config, number));
            }
            Command::RemoveSubscription { name, reply } => {
                let removed = match self.core.subscription_lane(&name) {
                    Some(lane) => {
                        self.drop_subscription(lane, "as asked");
                        Ok(())
                    }
                    None => Err(format!("the subscription '{name}' could not be found")),
                };
                let _ = reply.send(removed);
            }
            Command::Reconfigure { settings, reply } => {
                self.auto_delete_ms = settings.auto_delete_on_idle.map(millis);
                self.commit.set_express(settings.express);
                for (lane, forward) in self.core.apply_settings(&settings, now) {
                    self.set_forward(lane, forward);
                }
                self.detach_disabled_receivers();
                let _ = reply.send(());
            }
            Command::Describe { reply } => {
                let _ = reply.send(EntityStats {
                    lanes: self.core.counts(),
                    activity: self.core.activity(),
                    sent: self.core.sent(),
                    duplicates_dropped: self.core.duplicates_dropped(),
                    duplicate_ids: self.core.duplicate_ids(),
                    filters: self.core.filter_counts(),
                    accessed_ms: self.accessed_ms,
                });
            }
        }
        if rules_may_change {
            self.publish_rules_read();
        }
    }

    /// A client used the entity at `now`: it is active, and accessed.
    fn used(&mut self, now: i64) {
        self.last_active_ms = now;
        self.accessed_ms = Some(now);
    }

    /// Tells the topic's handles whether its rules read the messages sent to it, so that its
    /// connections decode what they read only then (rules that read none need no view).
    fn publish_rules_read(&self) {
        if let Some(topic) = self.core.topic_state() {
            topic.set_rules_read(self.core.rules_read_messages());
        }
    }

    /// Sets where the lanes of the queue or subscription whose main lane is `main` forward to.
    fn set_forward(&mut self, main: LaneId, forward: &Forward) {
        for (lane, target) in forward.lanes(main) {
            self.forwarder.set(lane, target);
        }
    }

    /// Sends what each forwarding lane may send now to its target, one batch per lane (per
    /// destination, for the transfer lane); whether any message went to the transfer
    /// dead-letter queue instead (over the hop limit).
    fn forward(&mut self, now: i64) -> bool {
        let mut over_hops = false;
        for (lane, room) in self.forwarder.room(now) {
            let (batches, over) =
                match (self.core).take_for_forwarding(now, lane, room, &mut self.log) {
                    Ok(taken) => taken,
                    Err(error) => {
                        self.commit.poison(&error);
                        return over_hops;
                    }
                };
            over_hops |= over;
            for batch in batches {
                // A transfer that names no destination cannot be found: it is dead-lettered.
                let to = batch.to.unwrap_or_default();
                self.forwarder
                    .send(lane, Some(&to), batch.bodies, batch.locks);
            }
        }
        over_hops
    }

    /// A target answered a forwarded batch (see [`EntityCore::forward_answered`]).
    fn on_forwarded(&mut self, answer: EntityEvent, now: i64) {
        let Some(answered) = self.forwarder.answered(answer, now) else {
            return;
        };
        let lane = answered.lane;
        (self.core).forward_answered(
            now,
            lane,
            &answered.target,
            answered.locks,
            &answered.result,
        );
        if answered.result.is_ok() {
            self.last_active_ms = now;
        }
    }

    /// Tells a session receiver the session it holds now, or that it holds none (its
    /// session lock lapsed, or none became available in time): then its link goes, and the
    /// core has unregistered it already.
    fn tell_bound(&mut self, consumer: ConsumerId, binding: Binding) {
        match binding {
            Ok((session, locked_until_ms)) => {
                if let Some(events) = self.consumers.get(&consumer) {
                    let session = session.to_string();
                    let accepted = EntityEvent::SessionAccepted {
                        consumer,
                        session,
                        locked_until_ms,
                    };
                    if events.send(accepted).is_err() {
                        self.unsubscribe(consumer);
                    }
                }
            }
            Err(error) => {
                if let Some(events) = self.consumers.remove(&consumer) {
                    let _ = events.send(EntityEvent::Gone { consumer, error });
                }
            }
        }
    }

    /// The clock's work, run every turn (cheap when nothing is due): locks that ran out,
    /// scheduled messages that are due, messages whose time to live ran out.
    fn on_time(&mut self, now: i64) {
        if self.commit.is_poisoned() {
            return;
        }
        self.core.expire_locks(now);
        for (consumer, session) in self.core.take_lapsed() {
            tracing::debug!(consumer = consumer.0, %session, "session lock lapsed");
            self.tell_bound(
                consumer,
                Err(EntityError::SessionLockLost(session.to_string())),
            );
        }
        if let Err(error) = self.core.activate_due(now, &mut self.log) {
            return self.commit.poison(&error);
        }
        self.core.expire_due(now);
        self.move_dead_letters();
    }

    /// Delivers what the consumer's drain may take now; answers [`EntityEvent::Drained`]
    /// once the drain is finished (a drain stopped by the consumer's window goes on as its
    /// connection forwards bytes).
    fn drain(&mut self, consumer: ConsumerId, now: i64) {
        // Messages sent earlier in this batch count as there.
        self.persist_and_reveal();
        let (deliveries, finished) = match self.commit.is_poisoned() {
            false => {
                let mut reader = Reader::new(&mut self.log);
                let drained = self.core.drain(consumer, now, &mut reader);
                let failure = reader.failure();
                self.poison_on_failed_read(failure);
                drained
            }
            true => (Vec::new(), true),
        };
        self.hand_out(deliveries);
        if finished {
            if let Some(events) = self.consumers.get(&consumer) {
                let _ = events.send(EntityEvent::Drained { consumer });
            }
        }
    }

    /// Hands available messages to consumers with demand.
    fn dispatch(&mut self, now: i64) {
        let mut reader = Reader::new(&mut self.log);
        let deliveries = self.core.dispatch(now, &mut reader);
        let failure = reader.failure();
        self.poison_on_failed_read(failure);
        self.hand_out(deliveries);
    }

    /// Notes a message a selector could not read: the entity stops acknowledging.
    fn poison_on_failed_read(&mut self, failure: Option<StoreError>) {
        if let Some(error) = failure {
            self.commit.poison(&error);
        }
    }

    /// Removes a consumer; its locks stay until they expire.
    fn unsubscribe(&mut self, consumer: ConsumerId) {
        self.consumers.remove(&consumer);
        self.core.remove_consumer(consumer);
    }

    /// Applies one settlement; properties to modify rewrite the message's bytes.
    fn settle(
        &mut self,
        consumer: ConsumerId,
        lock: LockRef,
        settlement: &Settlement,
    ) -> Result<(), EntityError> {
        let result = self
            .commit
            .check_healthy()
            .and_then(|()| (self.core).settle_locked(consumer, lock, settlement, &mut self.log));
        self.poison_on_storage(&result);
        if let Err(error) = &result {
            tracing::debug!(consumer = consumer.0, seq = lock.seq, %error, "settlement refused");
        }
        result.map(|_| ())
    }

    /// Moves the messages the lanes dead-lettered into their dead-letter lanes.
    fn move_dead_letters(&mut self) {
        if let Err(error) = self.core.move_dead_letters(&mut self.log) {
            self.commit.poison(&error);
        }
    }

    /// Notes a refusal the core met reading the log: the entity stops acknowledging.
    fn poison_on_storage<T>(&mut self, result: &Result<T, EntityError>) {
        if let Err(EntityError::Storage(error)) = result {
            self.commit.poison(error);
        }
    }

    /// Reads each delivery's bytes from the log and sends it to its consumer, each run of
    /// deliveries to one consumer as one event. A consumer whose connection is gone is
    /// unsubscribed at once (its locks are released).
    fn hand_out(&mut self, mut deliveries: Vec<Delivery>) {
        if !deliveries.is_empty() {
            self.used(now_ms());
        }
        for delivery in &deliveries {
            if let Some(lane) = self.core.lane_id_of(delivery.consumer) {
                self.core.touch(lane, self.last_active_ms);
            }
        }
        let mut failure = None;
        deliveries.retain_mut(|delivery| {
            let consumer = delivery.consumer;
            let lane = (self.core.lane_id_of(consumer))
                .filter(|_| failure.is_none() && self.consumers.contains_key(&consumer));
            let Some(lane) = lane else {
                return false;
            };
            match self.log.body(lane, delivery.seq) {
                Ok(bytes) => delivery.bytes = bytes,
                Err(error) => {
                    failure = Some(error);
                    return false;
                }
            }
            self.core
                .partition()
                .restamp(&mut delivery.stamp, delivery.seq);
            delivery.lock_token = delivery.stamp.lock_token;
            true
        });
        // Each run of one consumer's deliveries in a vector of its exact size; a lone run
        // keeps the vector it came in.
        let mut rest = deliveries.into_iter();
        while let Some(consumer) = rest.as_slice().first().map(|first| first.consumer) {
            let run = (rest.as_slice().iter())
                .take_while(|delivery| delivery.consumer == consumer)
                .count();
            let run: Vec<Delivery> = match run == rest.len() {
                true => std::mem::take(&mut rest).collect(),
                false => rest.by_ref().take(run).collect(),
            };
            self.send_run(run);
        }
        if let Some(error) = failure {
            self.commit.poison(&error);
        }
    }

    /// Sends one consumer a run of its deliveries; unsubscribes it if its connection is gone.
    fn send_run(&mut self, run: Vec<Delivery>) {
        let Some(consumer) = run.first().map(|delivery| delivery.consumer) else {
            return;
        };
        let Some(events) = self.consumers.get(&consumer) else {
            return;
        };
        if events.send(EntityEvent::Delivered(run)).is_err() {
            self.unsubscribe(consumer);
        }
    }

    /// Stages the turn's changes in the log (see [`GroupCommit::persist`]).
    fn persist(&mut self) {
        self.commit.persist(&mut self.log, &mut self.core, false);
    }

    /// Writes the turn's changes; without a flush to wait for, what is written may be
    /// delivered.
    fn persist_and_reveal(&mut self) {
        self.commit
            .persist_and_reveal(&mut self.log, &mut self.core);
    }
}

async fn sleep_until_deadline(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

mod lifecycle;

#[cfg(test)]
mod tests;
