//! The entity task: owns an [`EntityCore`] and its log, drains its mailbox in batches, writes
//! each batch's changes at once, and answers senders only after the durability point
//! (design.md D2, D4, D5). Its clock work (lock expiry, scheduled activation, expiry) runs on
//! every turn; the sweeper's and the reaper's ticks only wake it. When its answers may leave is
//! the [group commit](crate::entity::commit)'s.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use uuid::Uuid;

use crate::clock::{millis, now_ms};
use crate::config::{EntityStatus, SubscriptionConfig};
use crate::entity::commit::{wait_flush, Flushing, GroupCommit};
use crate::entity::core::EntityCore;
use crate::entity::forward::{self, Forwarder, Resolver};
use crate::entity::handle::{
    Command, ConsumerId, Delivery, EntityError, EntityEvent, EntityHandle, EntityStats, EventSink,
    LaneId, LockRef, Properties, Sending, Settlement, Ticket, TopicState, TxnId, Work,
};
use crate::entity::operation::{Answer, Operation, MAX_PEEK_BYTES};
use crate::entity::partition::Partition;
use crate::entity::queue::session_lane::Binding;
use crate::entity::queue::FORWARDER;
use crate::entity::sessions::MAX_SESSION_ID_CHARS;
use crate::entity::settings::Forward;
use crate::entity::setup::{self, Parts};
use crate::entity::staging::{Staged, StagedSettlement, Staging};
use crate::entity::transfer;
use crate::message;
use crate::message::{Arrival, DeliveryStamp};
use crate::store::{EntityLog, Recovered};
use crate::wire::{self, annotation};

/// Mailbox capacity: senders wait (backpressure) when this many commands are queued.
const MAILBOX: usize = 4096;
/// Commands taken per wake-up, so deadlines and shutdown are never starved.
const BATCH: usize = 512;
/// Why a receiver of a lane that forwards is refused (Service Bus's words).
const FORWARDING_RECEIVER: &str =
    "Cannot create a message receiver on an entity with auto-forwarding enabled.";
/// Scheduled messages activated per turn, so a burst of due messages does not stall the
/// mailbox; the rest follow on the next turns.
const ACTIVATIONS_PER_TURN: usize = 1024;
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
    let mut actor = Actor {
        forwarder: Forwarder::new(resolve, answers),
        commit: GroupCommit::new(commit, parts.express, parts.core.next_seq()),
        name: parts.name.clone(),
        topic: topic.clone(),
        core: parts.core,
        log: parts.log,
        consumers: HashMap::new(),
        auto_delete_ms: parts.auto_delete_on_idle.map(millis),
        deleted: deleted.clone(),
        last_active_ms: now_ms(),
        reap: None,
        statuses: parts.statuses.into_iter().collect(),
        staging: Staging::default(),
        partition: parts.partition,
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

/// Why an entity deletes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Removal {
    /// Idle for its `auto_delete_on_idle` time (the reaper).
    Idle,
    /// Asked to (the administration API).
    Asked,
}

/// One entity: all its lanes owned together, so that dead-lettering a message (delete here,
/// store there) is one atomic write of one tree.
struct Actor {
    /// The entity's name as declared.
    name: String,
    core: EntityCore,
    log: EntityLog,
    /// When its answers may leave, and whether storage failed.
    commit: GroupCommit,
    /// Where each consumer's deliveries go (the core knows its lane).
    consumers: HashMap<ConsumerId, EventSink>,
    /// A topic's subscriptions by name and whether its rules read messages, shared with its
    /// handles (the router and the connections read them).
    topic: Option<Arc<TopicState>>,
    /// `auto_delete_on_idle` in ms, if the entity has it.
    auto_delete_ms: Option<i64>,
    /// Shared with every handle: set once the entity is deleted, so that commands it can no
    /// longer take are refused with `amqp:not-found` rather than as a stopping broker's.
    deleted: Arc<AtomicBool>,
    /// When a client last used the entity (auto-delete on idle).
    last_active_ms: i64,
    /// Service Bus's entity status of the queue or topic (number 0) and of each subscription,
    /// by number: what it takes and hands out (absent: active).
    statuses: HashMap<u32, EntityStatus>,
    /// A request to delete the entity after this turn: the reaper's, which found it idle (it
    /// is deleted unless the turn used it), or the administration API's (`forced`).
    reap: Option<(oneshot::Sender<bool>, Removal)>,
    /// The lanes that forward, and their batches on the way to their targets.
    forwarder: Forwarder,
    /// The work of the transactions this entity is the via entity of, until their discharge.
    staging: Staging,
    /// Its place among its entity's partitions: what its positions and lock tokens look like
    /// to clients.
    partition: Partition,
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
                let deliveries = self.core.dispatch(now);
                self.hand_out(deliveries);
                if self.forward(now) {
                    // Messages over the hop limit went to the transfer dead-letter queue.
                    self.persist_and_reveal();
                    let deliveries = self.core.dispatch(now);
                    self.hand_out(deliveries);
                }
                self.persist();
            }
            self.commit.release_answers();
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
        command.unmark_tokens(self.partition);
        let rules_may_change = matches!(
            command,
            Command::Manage { .. }
                | Command::AddSubscription { .. }
                | Command::RemoveSubscription { .. }
                | Command::Reconfigure { .. }
        );
        if command.is_activity() {
            self.last_active_ms = now;
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
                    let result = self.enqueue(now, messages).map(|_| ());
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
            } => {
                let status = self.check_status(lane, EntityStatus::can_receive, "Receive");
                let added = status.and_then(|()| match &session {
                    None => self
                        .core
                        .add_consumer(consumer, lane, mode, window)
                        .map(|()| None),
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
            Command::Stage { txn, work, reply } => self.stage(txn, work, reply),
            Command::Discharge { txn, commit, reply } => {
                let staged = self.staging.take(txn);
                let result = match commit {
                    true => self.commit_staged(staged, now),
                    false => Ok(()),
                };
                if let Err(error) = &result {
                    tracing::debug!(txn, %error, "transaction rolled back at its commit");
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
                let result = self
                    .commit
                    .check_healthy()
                    .and_then(|()| self.manage(lane, *operation, now, &events));
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
                let number = (self.topic.as_ref())
                    .and_then(|topic| topic.names().get(&name.to_lowercase()).copied());
                let removed = match number {
                    Some(subscription) => {
                        let lane = LaneId {
                            subscription,
                            dead_letter: false,
                        };
                        self.drop_subscription(lane, "as asked");
                        Ok(())
                    }
                    None => Err(format!("the subscription '{name}' could not be found")),
                };
                let _ = reply.send(removed);
            }
            Command::Reconfigure { settings, reply } => {
                self.core.reconfigure(
                    settings.max_size_bytes,
                    settings.default_ttl_ms,
                    settings.rules,
                );
                self.auto_delete_ms = settings.auto_delete_on_idle.map(millis);
                self.statuses.insert(0, settings.status);
                self.commit.set_express(settings.express);
                self.core
                    .detect_duplicates(settings.duplicate_window_ms, now);
                if self.topic.is_none() {
                    self.set_forward(LaneId::MAIN, &settings.forward);
                }
                for (name, subscription) in &settings.subscriptions {
                    let number =
                        (self.topic.as_ref()).and_then(|topic| topic.names().get(name).copied());
                    if let Some(number) = number {
                        let lane = LaneId {
                            subscription: number,
                            dead_letter: false,
                        };
                        self.core.reconfigure_subscription(lane, subscription);
                        self.set_forward(lane, &subscription.forward);
                        self.statuses.insert(number, subscription.status);
                    }
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
                    accessed_ms: self.last_active_ms,
                });
            }
        }
        if rules_may_change {
            self.publish_rules_read();
        }
    }

    /// Tells the topic's handles whether its rules read the messages sent to it, so that its
    /// connections decode what they read only then (rules that read none need no view).
    fn publish_rules_read(&self) {
        if let Some(topic) = &self.topic {
            topic.set_rules_read(self.core.rules_read_messages());
        }
    }

    /// Stores sent or scheduled messages; an entity with a lane that requires sessions takes
    /// only messages with a session id (a batch is all or nothing).
    fn enqueue(&mut self, now: i64, messages: Vec<Arrival>) -> Result<Vec<i64>, EntityError> {
        self.check_sendable(&messages)?;
        self.core.enqueue(now, messages)
    }

    /// Whether the entity takes these messages now: its status lets it receive sends, and
    /// in an entity that requires sessions each names a session of a valid length.
    fn check_sendable(&self, messages: &[Arrival]) -> Result<(), EntityError> {
        self.commit.check_healthy()?;
        self.check_status(LaneId::MAIN, EntityStatus::can_send, "Send")?;
        if self.core.requires_session_id() {
            for message in messages {
                match &message.session_id {
                    None => return Err(EntityError::SessionIdMissing(self.name.clone())),
                    Some(id) if id.chars().count() > MAX_SESSION_ID_CHARS => {
                        return Err(EntityError::SessionIdTooLong(id.clone()));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }

    /// Stages work in a transaction (checked now, applied at its commit) and answers it, if
    /// asked: a staged send as `Sent`, a staged settlement as `Settled`, item by item.
    fn stage(&mut self, txn: TxnId, work: Work, reply: Option<(Ticket, EventSink)>) {
        let answer = match work {
            Work::Send(messages) => {
                let result = self.check_sendable(&messages);
                if result.is_ok() {
                    self.staging.send(txn, messages);
                }
                reply.map(|(ticket, events)| (events, EntityEvent::sent(ticket, result)))
            }
            Work::Transfer {
                destination,
                messages,
            } => {
                // The destination's own rules are met when the transfer reaches it.
                self.staging.transfer(txn, destination, messages);
                reply.map(|(ticket, events)| (events, EntityEvent::sent(ticket, Ok(()))))
            }
            Work::Schedule { lane, messages } => {
                let result = self.stage_schedule(txn, lane, messages);
                reply.map(|(ticket, events)| (events, EntityEvent::Managed { ticket, result }))
            }
            Work::Settle { consumer, items } => {
                let results = items
                    .into_iter()
                    .map(|(lock, settlement)| {
                        let lane = self.locked_by(consumer, lock)?;
                        let staged = StagedSettlement {
                            lane,
                            consumer,
                            lock,
                            settlement,
                        };
                        self.staging.settle(txn, staged);
                        Ok(())
                    })
                    .collect();
                reply.map(|(ticket, events)| (events, EntityEvent::Settled { ticket, results }))
            }
            Work::SettleByToken {
                lane,
                tokens,
                settlement,
            } => {
                let result = self.stage_by_token(txn, lane, tokens, &settlement);
                reply.map(|(ticket, events)| (events, EntityEvent::Managed { ticket, result }))
            }
        };
        if let Some((sink, event)) = answer {
            self.commit.answer(sink, event);
        }
    }

    /// Stages `schedule-message` in a transaction: the messages must be sendable now, and get
    /// their numbers now (the answer), to be stored scheduled at the commit.
    fn stage_schedule(
        &mut self,
        txn: TxnId,
        lane: LaneId,
        messages: Vec<Arrival>,
    ) -> Result<Answer, EntityError> {
        if lane != LaneId::MAIN {
            return Err(not_schedulable());
        }
        self.check_sendable(&messages)?;
        let numbers = self.core.reserve(messages.len());
        self.staging
            .schedule(txn, numbers.iter().copied().zip(messages));
        let visible = numbers.iter().map(|n| self.partition.visible(*n));
        Ok(Answer::Scheduled(visible.collect()))
    }

    /// Stages `update-disposition` in a transaction: every token must name a lock that lasts,
    /// else nothing is staged.
    fn stage_by_token(
        &mut self,
        txn: TxnId,
        lane: LaneId,
        tokens: Vec<Uuid>,
        settlement: &Settlement,
    ) -> Result<Answer, EntityError> {
        let queue = self.core.lane(lane)?;
        let locks = tokens
            .into_iter()
            .map(|token| queue.lock_of(token).ok_or(EntityError::LockLost))
            .collect::<Result<Vec<_>, _>>()?;
        for (consumer, lock) in locks {
            let settlement = settlement.clone();
            let staged = StagedSettlement {
                lane,
                consumer,
                lock,
                settlement,
            };
            self.staging.settle(txn, staged);
        }
        Ok(Answer::Done)
    }

    /// The lane of a message `consumer` holds locked under `lock`.
    ///
    /// # Errors
    /// [`EntityError::LockLost`] when it does not hold it (any more).
    fn locked_by(&mut self, consumer: ConsumerId, lock: LockRef) -> Result<LaneId, EntityError> {
        let lane = self
            .core
            .lane_id_of(consumer)
            .ok_or(EntityError::LockLost)?;
        match self.core.lane(lane)?.holds(consumer, lock) {
            true => Ok(lane),
            false => Err(EntityError::LockLost),
        }
    }

    /// Applies a committed transaction's work in this turn, so that it goes into one batch of
    /// the log: every lock it settles is checked first, then its sends get their sequence
    /// numbers (all or none, as a batch send), then its settlements apply.
    ///
    /// # Errors
    /// Why nothing was applied: a lock was lost, or the sends do not fit or are refused now.
    fn commit_staged(&mut self, staged: Staged, now: i64) -> Result<(), EntityError> {
        for settle in &staged.settles {
            if !self
                .core
                .lane(settle.lane)?
                .holds(settle.consumer, settle.lock)
            {
                return Err(EntityError::LockLost);
            }
        }
        if !staged.sends.is_empty() {
            self.check_sendable(&staged.sends)?;
        }
        // Checked together: past this point every message is stored.
        let transfers = staged.transfers.iter().flat_map(|(_, messages)| messages);
        let scheduled = staged.scheduled.iter().map(|(_, message)| message);
        let all = staged.sends.iter().chain(transfers).chain(scheduled);
        let bytes = all.clone().map(|m| m.bytes.len() as u64).sum();
        self.core.admit(bytes, all.count())?;
        if !staged.transfers.is_empty() {
            self.core.transfer(now, staged.transfers)?;
        }
        self.core.schedule_reserved(now, staged.scheduled);
        if !staged.sends.is_empty() {
            self.core.enqueue(now, staged.sends)?;
        }
        for settle in staged.settles {
            let settled = self
                .core
                .lane(settle.lane)
                .and_then(|queue| queue.settle(settle.consumer, settle.lock, &settle.settlement));
            match (settled, &settle.settlement) {
                (Ok(()), Settlement::Abandon(properties) | Settlement::Defer(properties)) => {
                    self.set_properties(settle.lane, settle.lock.seq, properties);
                }
                (Ok(()), _) => {}
                (Err(error), _) => {
                    tracing::error!(seq = settle.lock.seq, %error, "checked lock lost at commit")
                }
            }
        }
        self.move_dead_letters();
        self.commit.persist(&mut self.log, &mut self.core, true);
        Ok(())
    }

    /// Sets where the lanes of the queue or subscription whose main lane is `main` forward to.
    fn set_forward(&mut self, main: LaneId, forward: &Forward) {
        for (lane, target) in forward.lanes(main) {
            self.forwarder.set(lane, target);
        }
    }

    /// The entity path of a lane: the queue's or topic's name, or a subscription's
    /// `<topic>/subscriptions/<name>`.
    fn lane_path(&self, lane: LaneId) -> String {
        match self.subscription_name(lane) {
            Some(name) => format!("{}/subscriptions/{name}", self.name),
            None => self.name.clone(),
        }
    }

    /// The name of a lane's subscription (none for a queue's or a topic's own lane).
    fn subscription_name(&self, lane: LaneId) -> Option<String> {
        (self.topic.as_ref())
            .filter(|_| lane.subscription != 0)
            .and_then(|topic| {
                let names = topic.names();
                let (name, _) = names.iter().find(|(_, id)| **id == lane.subscription)?;
                Some(name.clone())
            })
    }

    /// A lane's subscription as Service Bus names it where it names a rule of it,
    /// `<namespace>:Topic:<topic>|<subscription>`: lowercase but for the rule's name, as in
    /// "The messaging entity 'sb-adp-westeurope-prod:Topic:sbt-adp-adapter-incoming|
    /// nsb-sub-avonovaadapter|Adp.Common.Messages.Mds.ReceiveMessageMdsCompany' already
    /// exists." (Particular/NServiceBus.AzureFunctions.InProcess.ServiceBus#748, the .NET
    /// SDK's rule manager against Service Bus).
    fn rule_owner(&self, lane: LaneId) -> String {
        let subscription = self.subscription_name(lane).unwrap_or_default();
        let topic = self.name.to_lowercase();
        let subscription = subscription.to_lowercase();
        format!("{}:Topic:{topic}|{subscription}", wire::NAMESPACE)
    }

    /// Sends what each forwarding lane may send now to its target, one batch per lane (per
    /// destination, for the transfer lane). A message that took [`forward::MAX_HOPS`]
    /// forwarding moves goes to the transfer dead-letter queue instead; whether any did.
    fn forward(&mut self, now: i64) -> bool {
        let mut over_hops = false;
        for (lane, room) in self.forwarder.room(now) {
            let Ok(queue) = self.core.lane(lane) else {
                continue;
            };
            let taken = queue.take_for_forwarding(room, forward::BATCH_BYTES, now);
            if taken.is_empty() {
                continue;
            }
            let source = lane.dead_letter.then(|| self.lane_path(lane));
            // (destination named by the messages, bodies, locks), in the lane's order.
            let mut batches: Vec<(Option<String>, Vec<Bytes>, Vec<LockRef>)> = Vec::new();
            for delivery in taken {
                let bytes = match self.log.body(lane, delivery.seq) {
                    Ok(bytes) => bytes,
                    Err(error) => {
                        self.commit.poison(&error);
                        return over_hops;
                    }
                };
                let lock = LockRef {
                    seq: delivery.seq,
                    token: delivery.lock_token.unwrap_or_default(),
                };
                let hops = message::annotation_number(&bytes, annotation::TRANSFER_HOP_COUNT);
                let hops = hops.unwrap_or(0);
                if lane != LaneId::TRANSFER && hops >= forward::MAX_HOPS {
                    // Left where it is, held by the forwarder, if it cannot be stored there.
                    if self.core.dead_letter_over_hops(now, &bytes) {
                        if let Ok(queue) = self.core.lane(lane) {
                            let _ = queue.settle(FORWARDER, lock, &Settlement::Complete);
                        }
                        over_hops = true;
                    } else {
                        tracing::error!(
                            ?lane,
                            seq = lock.seq,
                            "over the hop limit, and no transfer dead-letter queue: kept"
                        );
                    }
                    continue;
                }
                let (to, body) = match lane == LaneId::TRANSFER {
                    true => (transfer::destination(&bytes), transfer::delivered(bytes)),
                    false => (
                        None,
                        forwarded(
                            bytes,
                            self.partition.visible(delivery.seq),
                            hops,
                            source.as_deref(),
                        ),
                    ),
                };
                match batches.last_mut() {
                    Some((last, bodies, locks)) if *last == to => {
                        bodies.push(body);
                        locks.push(lock);
                    }
                    _ => batches.push((to, vec![body], vec![lock])),
                }
            }
            for (to, bodies, locks) in batches {
                // A transfer that names no destination cannot be found: it is dead-lettered.
                let to = to.unwrap_or_default();
                self.forwarder.send(lane, Some(&to), bodies, locks);
            }
        }
        over_hops
    }

    /// A target answered a batch: its messages leave (it stored them; the deletes are
    /// journaled as any completion), or stay, available again without a counted delivery. A
    /// transfer its destination refused for good goes to the transfer dead-letter queue.
    fn on_forwarded(&mut self, answer: EntityEvent, now: i64) {
        let Some(answered) = self.forwarder.answered(answer, now) else {
            return;
        };
        let lane = answered.lane;
        let settlement = match &answered.result {
            Ok(()) => Settlement::Complete,
            Err(error) if lane == LaneId::TRANSFER => {
                transfer::after_refusal(&answered.target, error)
            }
            Err(_) => Settlement::Release,
        };
        let Ok(queue) = self.core.lane(lane) else {
            return;
        };
        for lock in answered.locks {
            let _ = queue.settle(FORWARDER, lock, &settlement);
        }
        if answered.result.is_ok() {
            self.last_active_ms = now;
            self.core.touch(lane, now);
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
        self.activate_due(now);
        self.core.expire_due(now);
        self.move_dead_letters();
    }

    /// Activates the scheduled messages that are due, a bounded number per turn; each keeps
    /// its bytes and its own time to live, counted from now.
    fn activate_due(&mut self, now: i64) {
        let due = self.core.due_scheduled(now, ACTIVATIONS_PER_TURN);
        if due.is_empty() {
            return;
        }
        let mut activated = Vec::with_capacity(due.len());
        for seq in due {
            let bytes = match self.log.body(LaneId::MAIN, seq) {
                Ok(bytes) => bytes,
                Err(error) => return self.commit.poison(&error),
            };
            activated.push((seq, message::stored_arrival(bytes)));
        }
        tracing::debug!(count = activated.len(), "scheduled messages activated");
        self.core.activate(now, activated);
    }

    /// Whether the entity may be deleted for idleness: it has `auto_delete_on_idle`, nothing
    /// used it for that long, no receiver waits with credit and no scheduled message is
    /// pending.
    fn is_idle(&self, now: i64) -> bool {
        self.auto_delete_ms.is_some_and(|idle| {
            now.saturating_sub(self.last_active_ms) >= idle
                && !self.core.has_scheduled()
                && !self.core.has_waiting_consumer()
                && !self.forwarder.is_busy()
        })
    }

    /// Deletes the subscriptions idle for their `auto_delete_on_idle` time: their messages and
    /// runtime rules go, their links get `amqp:not-found`, their addresses stop resolving.
    fn reap_subscriptions(&mut self, now: i64) -> &Self {
        for lane in self.core.idle_subscriptions(now) {
            self.drop_subscription(lane, "after being idle (auto_delete_on_idle)");
        }
        self
    }

    /// Deletes a subscription: its messages and runtime rules go, its links get
    /// `amqp:not-found`, its address stops resolving.
    fn drop_subscription(&mut self, lane: LaneId, why: &str) {
        self.forwarder.remove_subscription(lane.subscription);
        for consumer in self.core.delete_subscription(lane) {
            if let Some(events) = self.consumers.remove(&consumer) {
                let error = EntityError::Deleted;
                let _ = events.send(EntityEvent::Gone { consumer, error });
            }
        }
        if let Some(topic) = &self.topic {
            topic.names_mut().retain(|name, number| {
                let gone = *number == lane.subscription;
                if gone {
                    tracing::info!(subscription = %name, "deleted {why}");
                }
                !gone
            });
        }
    }

    /// Adds a subscription to this topic (the administration API): numbered `number`, or after
    /// every number its log or its lanes use, empty, its declared rules in place.
    fn add_subscription(
        &mut self,
        config: &SubscriptionConfig,
        number: Option<u32>,
    ) -> Result<(), String> {
        let Some(topic) = self.topic.clone() else {
            return Err(format!(
                "'{}' is a queue: it has no subscriptions",
                self.name
            ));
        };
        let name = config.name.to_lowercase();
        let taken = topic.names().contains_key(&name);
        if taken {
            return Err(format!("the subscription '{}' already exists", config.name));
        }
        let in_use = self.core.highest_subscription();
        let imposed = number.map(|number| HashMap::from_iter([(name.clone(), number)]));
        let numbers = self
            .log
            .subscription_numbers(std::slice::from_ref(&name), in_use, imposed.as_ref())
            .map_err(|e| e.to_string())?;
        let lane = LaneId {
            subscription: numbers[&name],
            dead_letter: false,
        };
        let lanes = setup::subscription_lanes(
            config,
            lane,
            Vec::new(),
            Recovered::default(),
            Recovered::default(),
        );
        self.core.add_subscription(lanes);
        self.set_forward(lane, &setup::subscription_forward(config));
        self.statuses.insert(lane.subscription, config.status);
        topic.names_mut().insert(name, lane.subscription);
        tracing::info!(subscription = %config.name, "created");
        Ok(())
    }

    /// Deletes the entity (auto-delete on idle, or asked to): answers what is still owed,
    /// refuses what is queued in the mailbox, tells every consumer its link is gone, and drops
    /// the stored messages of all its queues.
    async fn delete(
        mut self,
        mailbox: &mut mpsc::Receiver<Command>,
        flushing: Option<Flushing>,
        reply: oneshot::Sender<bool>,
        removal: Removal,
    ) {
        self.deleted.store(true, Ordering::Release);
        mailbox.close();
        self.commit.complete_flush(flushing, &mut self.core).await;
        self.commit.answer_unflushed();
        while let Ok(command) = mailbox.try_recv() {
            command.refuse(&EntityError::Deleted);
        }
        for (consumer, events) in self.consumers.drain() {
            let _ = events.send(EntityEvent::Gone {
                consumer,
                error: EntityError::Deleted,
            });
        }
        let why = match removal {
            Removal::Idle => "after being idle (auto_delete_on_idle)",
            Removal::Asked => "as asked",
        };
        match self.log.destroy() {
            Ok(()) => tracing::info!(messages = self.core.len(), "deleted {why}"),
            Err(error) => tracing::error!(%error, "deleted, but its messages could not be dropped"),
        }
        let _ = reply.send(true);
    }

    /// Refuses what the status of `lane`'s queue, topic or subscription does not allow
    /// (`allows`: sends or receives, named `kind`), as Service Bus words it. A dead-letter
    /// queue hands out its messages whatever the status.
    fn check_status(
        &self,
        lane: LaneId,
        allows: fn(EntityStatus) -> bool,
        kind: &'static str,
    ) -> Result<(), EntityError> {
        let status = (self.statuses.get(&lane.subscription).copied()).unwrap_or_default();
        if allows(status) || lane.dead_letter {
            return Ok(());
        }
        Err(EntityError::Disabled {
            entity: self.lane_path(lane),
            operation: (status != EntityStatus::Disabled).then_some(kind),
        })
    }

    /// Tells every receiver of a lane whose status no longer lets it receive that it is
    /// gone: its link is detached with the refusal.
    fn detach_disabled_receivers(&mut self) {
        let refused: Vec<(ConsumerId, EntityError)> = (self.consumers.keys())
            .filter_map(|consumer| {
                let lane = self.core.lane_id_of(*consumer)?;
                let error = self.check_status(lane, EntityStatus::can_receive, "Receive");
                error.err().map(|error| (*consumer, error))
            })
            .collect();
        for (consumer, error) in refused {
            if let Some(events) = self.consumers.get(&consumer) {
                let _ = events.send(EntityEvent::Gone { consumer, error });
            }
            self.unsubscribe(consumer);
        }
    }

    /// Refuses an operation on a session unless a receiver of the caller's connection holds
    /// it: another client cannot read or set its state, renew its lock or take its deferred
    /// messages.
    fn check_session_holder(
        &mut self,
        lane: LaneId,
        session: &str,
        caller: &EventSink,
    ) -> Result<(), EntityError> {
        let queue = self.core.lane(lane)?;
        if !queue.requires_session() {
            return Ok(());
        }
        let holder = queue.session_holder(session);
        match holder.and_then(|holder| self.consumers.get(&holder)) {
            Some(events) if events.same_channel(caller) => Ok(()),
            _ => Err(EntityError::SessionLockLost(session.into())),
        }
    }

    /// [`Actor::manage_positions`], with the numbers and tokens of the request and the
    /// answer as clients see them.
    fn manage(
        &mut self,
        lane: LaneId,
        operation: Operation,
        now: i64,
        caller: &EventSink,
    ) -> Result<Answer, EntityError> {
        let next = match lane.is_transfer() {
            true => self.core.next_transfer(),
            false => self.core.next_seq(),
        };
        let oldest = match (self.partition, &operation) {
            (Partition::ALONE, _) => 0,
            (_, Operation::Peek { .. }) => self.core.lane(lane)?.oldest().unwrap_or(i64::MAX),
            _ => 0,
        };
        let Some(operation) = self.partition.to_positions(operation, next, oldest)? else {
            return Ok(Answer::Peeked(Vec::new()));
        };
        let result = self.manage_positions(lane, operation, now, caller);
        self.partition.to_visible(result)
    }

    /// Performs a management operation (amqp-dialect.md §7.3) for the connection whose
    /// events go to `caller`, with sequence numbers and lock tokens as the lanes know them.
    fn manage_positions(
        &mut self,
        lane: LaneId,
        operation: Operation,
        now: i64,
        caller: &EventSink,
    ) -> Result<Answer, EntityError> {
        if let Some(session) = operation.session() {
            self.check_session_holder(lane, session, caller)?;
        }
        // (A schedule is refused as a send is, in `enqueue`.)
        if let Operation::ReceiveBySequence { .. } = &operation {
            self.check_status(lane, EntityStatus::can_receive, "Receive")?;
        }
        match operation {
            Operation::Peek {
                from,
                count,
                session,
            } => {
                let peeked = self.core.lane(lane)?.peek(from, count, session.as_deref());
                let (mut messages, mut bytes) = (Vec::with_capacity(peeked.len()), 0);
                for (seq, stamp) in peeked {
                    if bytes >= MAX_PEEK_BYTES {
                        break;
                    }
                    let encoded = self.encoded(lane, seq, &stamp)?;
                    bytes += encoded.len();
                    messages.push(encoded);
                }
                Ok(Answer::Peeked(messages))
            }
            Operation::RenewLock { tokens } => {
                let queue = self.core.lane(lane)?;
                let expirations = tokens
                    .into_iter()
                    .map(|token| queue.renew_lock(token, now))
                    .collect::<Result<_, _>>()?;
                Ok(Answer::Renewed(expirations))
            }
            Operation::ReceiveBySequence {
                seqs,
                mode,
                session,
            } => {
                // All or nothing: a number asked for twice is taken once, and none is taken
                // unless every one can be.
                let mut seqs = seqs;
                let mut seen = HashSet::with_capacity(seqs.len());
                seqs.retain(|seq| seen.insert(*seq));
                let queue = self.core.lane(lane)?;
                for &seq in &seqs {
                    queue.check_deferred(seq, now, session.as_deref())?;
                }
                let mut messages = Vec::with_capacity(seqs.len());
                for seq in seqs {
                    let queue = self.core.lane(lane)?;
                    let delivery = queue.receive_deferred(seq, mode, now, session.as_deref())?;
                    let bytes = self.encoded(lane, seq, &delivery.stamp)?;
                    messages.push((delivery.lock_token.unwrap_or_default(), bytes));
                }
                Ok(Answer::Received(messages))
            }
            Operation::Schedule { .. } | Operation::CancelScheduled { .. }
                if lane != LaneId::MAIN =>
            {
                Err(not_schedulable())
            }
            Operation::Schedule { messages } => Ok(Answer::Scheduled(self.enqueue(now, messages)?)),
            Operation::CancelScheduled { seqs } => {
                self.core.cancel_scheduled(&seqs)?;
                Ok(Answer::Done)
            }
            Operation::AddRule { rule } => {
                self.core
                    .add_rule(lane, rule)
                    .map_err(|error| match error {
                        EntityError::RuleExists { rule, .. } => EntityError::RuleExists {
                            subscription: self.rule_owner(lane),
                            rule,
                        },
                        other => other,
                    })?;
                Ok(Answer::Done)
            }
            Operation::ReplaceRule { rule } => {
                let replaced = self.core.replace_rule(lane, rule)?;
                Ok(Answer::Rules(vec![replaced]))
            }
            Operation::Resubmit { seq } => {
                if !self.core.lane(lane)?.is_unlocked(seq) {
                    return Err(EntityError::MessageNotFound(seq, "unlocked dead-lettered"));
                }
                let body = match self.log.body(lane, seq) {
                    Ok(body) => body,
                    Err(error) => {
                        self.commit.poison(&error);
                        return Err(EntityError::Storage(error.to_string()));
                    }
                };
                let reasons = [
                    crate::wire::dead_letter::REASON.to_owned(),
                    crate::wire::dead_letter::DESCRIPTION.to_owned(),
                ];
                let body =
                    message::edit_application_properties(&body, &[], &reasons).unwrap_or(body);
                let arrival = message::inspect(body)
                    .map_err(|_| EntityError::MessageNotFound(seq, "readable dead-lettered"))?;
                let moved = self.core.resubmit(now, lane, seq, arrival)?;
                Ok(Answer::Moved(moved))
            }
            Operation::Purge => Ok(Answer::Purged(self.core.purge(lane)?)),
            Operation::BatchDelete {
                count,
                before_ms,
                session,
            } => Ok(Answer::Deleted(
                self.core
                    .lane(lane)?
                    .delete_enqueued_before(count, before_ms, session.as_deref()),
            )),
            Operation::RemoveRule { name } => {
                self.core.remove_rule(lane, &name)?;
                Ok(Answer::Done)
            }
            Operation::EnumerateRules { skip, top } => {
                Ok(Answer::Rules(self.core.rules(lane, skip, top)?))
            }
            Operation::UpdateDisposition { tokens, settlement } => {
                for token in tokens {
                    let seq = self.core.lane(lane)?.settle_by_token(token, &settlement)?;
                    if let Settlement::Abandon(properties) | Settlement::Defer(properties) =
                        &settlement
                    {
                        self.set_properties(lane, seq, properties);
                    }
                }
                self.move_dead_letters();
                Ok(Answer::Done)
            }
            Operation::RenewSessionLock { session } => {
                let until = self.core.lane(lane)?.renew_session_lock(&session, now)?;
                Ok(Answer::SessionLockedUntil(until))
            }
            Operation::GetSessionState { session } => {
                let state = self.core.lane(lane)?.session_state(&session)?;
                Ok(Answer::SessionState(state))
            }
            Operation::SetSessionState { session, state } => {
                self.core
                    .lane(lane)?
                    .set_session_state(&session, state, now)?;
                Ok(Answer::Done)
            }
            Operation::GetMessageSessions {
                skip,
                top,
                updated_after,
            } => {
                let ids = self.core.lane(lane)?.session_ids(skip, top, updated_after);
                Ok(Answer::Sessions { skip, ids })
            }
        }
    }

    /// A stored message as the SDKs expect it in management responses: the whole encoded
    /// message, with the broker's header and annotations.
    fn encoded(
        &mut self,
        lane: LaneId,
        seq: i64,
        stamp: &DeliveryStamp,
    ) -> Result<Bytes, EntityError> {
        let body = self
            .log
            .body(lane, seq)
            .map_err(|e| EntityError::Storage(e.to_string()))?;
        let restamped;
        let stamp = match self.partition {
            Partition::ALONE => stamp,
            partition => {
                let mut stamp = stamp.clone();
                partition.restamp(&mut stamp, seq);
                restamped = stamp;
                &restamped
            }
        };
        message::splice(&body, stamp, &mut Vec::new())
            .map_err(|e| EntityError::Storage(e.to_string()))
    }

    /// Delivers what the consumer's drain may take now; answers [`EntityEvent::Drained`]
    /// once the drain is finished (a drain stopped by the consumer's window goes on as its
    /// connection forwards bytes).
    fn drain(&mut self, consumer: ConsumerId, now: i64) {
        // Messages sent earlier in this batch count as there.
        self.persist_and_reveal();
        let poisoned = self.commit.is_poisoned();
        let (deliveries, finished) = match (poisoned, self.core.lane_of(consumer)) {
            (false, Some(queue)) => queue.drain(consumer, now),
            _ => (Vec::new(), true),
        };
        self.hand_out(deliveries);
        if finished {
            if let Some(events) = self.consumers.get(&consumer) {
                let _ = events.send(EntityEvent::Drained { consumer });
            }
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
        self.commit.check_healthy()?;
        let result = self.core.settle(consumer, lock, settlement);
        match (&result, settlement) {
            (Ok(lane), Settlement::Abandon(properties) | Settlement::Defer(properties)) => {
                self.set_properties(*lane, lock.seq, properties);
            }
            (Err(error), _) => {
                tracing::debug!(consumer = consumer.0, seq = lock.seq, %error, "settlement refused");
            }
            _ => {}
        }
        result.map(|_| ())
    }

    /// Rewrites a stored message with new application properties.
    fn set_properties(&mut self, lane: LaneId, seq: i64, properties: &Properties) {
        if properties.is_empty() {
            return;
        }
        let body = match self.log.body(lane, seq) {
            Ok(body) => body,
            Err(error) => return self.commit.poison(&error),
        };
        match message::set_application_properties(&body, properties) {
            Ok(changed) => {
                if let Ok(lane) = self.core.lane(lane) {
                    lane.replace_body(seq, changed);
                }
            }
            Err(error) => tracing::warn!(seq, %error, "properties to modify not applied"),
        }
    }

    /// Moves the messages the lanes dead-lettered into their dead-letter lanes, stamped with
    /// their reason; written in the same batch as their removal.
    fn move_dead_letters(&mut self) {
        for (to, dead) in self.core.take_dead_letters() {
            let from = LaneId {
                dead_letter: false,
                ..to
            };
            let body = match self.log.body(from, dead.seq) {
                Ok(body) => body,
                Err(error) => return self.commit.poison(&error),
            };
            let body = message::set_application_properties(&body, &dead.properties).unwrap_or_else(
                |error| {
                    tracing::warn!(seq = dead.seq, %error, "dead-letter reason not written");
                    body
                },
            );
            tracing::debug!(seq = dead.seq, "dead-lettered");
            self.core
                .accept_dead_letter(to, dead.seq, dead.record, body);
        }
    }

    /// Reads each delivery's bytes from the log and sends it to its consumer, each run of
    /// deliveries to one consumer as one event. A consumer whose connection is gone is
    /// unsubscribed at once (its locks are released).
    fn hand_out(&mut self, mut deliveries: Vec<Delivery>) {
        if !deliveries.is_empty() {
            self.last_active_ms = now_ms();
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
            self.partition.restamp(&mut delivery.stamp, delivery.seq);
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

/// The refusal of scheduling (or cancelling) on a lane other than a queue's or topic's own.
fn not_schedulable() -> EntityError {
    EntityError::NotAllowed(
        "messages are scheduled and cancelled on a queue or topic, not on a dead-letter queue \
         or subscription",
    )
}

/// A message as it leaves for its forwarding target, marked as Service Bus marks it: with
/// the sequence number it was first given (kept from an earlier hop), the forwarding moves
/// it has taken (`hops` before this one) and, leaving a dead-letter queue, the entity it was
/// dead-lettered in.
fn forwarded(bytes: Bytes, seq: i64, hops: i64, dead_letter_source: Option<&str>) -> Bytes {
    use fe2o3_amqp::types::primitives::Value;
    let first_seq = [(annotation::ENQUEUE_SEQUENCE_NUMBER, Value::Long(seq))];
    let hops = i32::try_from(hops + 1).unwrap_or(i32::MAX);
    let hop_count = (annotation::TRANSFER_HOP_COUNT, Value::Int(hops));
    let source = dead_letter_source
        .map(|source| (annotation::DEAD_LETTER_SOURCE, Value::String(source.into())));
    let set: Vec<_> = [hop_count].into_iter().chain(source).collect();
    message::annotate(&bytes, &set, &first_seq).unwrap_or(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Durability};
    use crate::entity::commit::QUIET_FLUSH_MS;
    use crate::message::Arrival;
    use crate::store::Flusher;
    use crate::store::Store;

    /// A `sync`-mode queue (express or not) whose flushes `commit` performs; its handle, the
    /// shutdown that stops it and its data directory.
    fn sync_queue(
        express: bool,
        commit: Commit,
    ) -> (EntityHandle, CancellationToken, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::embedded_default();
        config.broker.data_dir = dir.path().to_path_buf();
        config.broker.durability = Durability::Sync;
        let mut queue = config.queues[0].clone();
        queue.enable_express = express;
        let store = Store::open(&config.broker).expect("store");
        let parts = setup::queue(&queue, store.log(&queue.name).expect("log")).expect("parts");
        let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
        let resolve: Resolver = Arc::new(|_| None);
        let handle = spawn(parts, commit, shutdown.clone(), &tracker, resolve);
        (handle, shutdown, dir)
    }

    /// A one-byte message, as a client sends it.
    fn arrival() -> Arrival {
        Arrival::bare(Bytes::from_static(&[0x00, 0x53, 0x75, 0xa0, 0x01, b'x']))
    }

    /// Returns once every turn that began before the call has ended: two markers through the
    /// mailbox, the second posted once the first is answered, so in a later turn.
    async fn turns_ended(handle: &EntityHandle) {
        for _ in 0..2 {
            let (reply, described) = oneshot::channel();
            handle
                .post(Command::Describe { reply })
                .await
                .expect("posted");
            described.await.expect("described");
        }
    }

    /// Sends one message to a `sync`-mode queue whose flushes never complete; whether its
    /// answer came (it is never refused).
    async fn answered_before_the_flush(express: bool) -> bool {
        let (handle, shutdown, _dir) = sync_queue(express, Commit::AfterFlush(Flusher::stalled()));
        let (events, mut answers) = mpsc::unbounded_channel();
        let ticket = Ticket {
            link: 1,
            request: 1,
        };
        let send = Command::send(vec![arrival()], Some(ticket), events);
        handle.post(send).await.expect("posted");
        turns_ended(&handle).await;
        let answered = matches!(
            answers.try_recv(),
            Ok(EntityEvent::Sent { results }) if results == [(ticket, Ok(()))]
        );
        shutdown.cancel();
        answered
    }

    #[tokio::test]
    async fn an_express_queue_answers_before_the_flush_and_another_waits_for_it() {
        assert!(answered_before_the_flush(true).await, "express: answered");
        assert!(
            !answered_before_the_flush(false).await,
            "not express: waits for the flush"
        );
    }

    /// A settlement the client settled itself asks for no flush of its own: it goes with the
    /// next one another change asks for, or after [`QUIET_FLUSH_MS`]; one the client waits
    /// for asks at once. Either is answered only once its flush completed.
    #[tokio::test]
    async fn only_a_settlement_a_client_waits_for_asks_for_a_flush_at_once() {
        let (flusher, mut requests) = Flusher::answered_by_test();
        let (handle, shutdown, _dir) = sync_queue(false, Commit::AfterFlush(flusher));
        for _ in 0..2 {
            let unanswered = mpsc::unbounded_channel().0;
            let send = Command::send(vec![arrival()], None, unanswered);
            handle.post(send).await.expect("posted");
        }
        let (done, _) = requests
            .recv()
            .await
            .expect("a new message asks for a flush");
        done.send(Ok(())).expect("the queue waits");
        let (events, mut received) = mpsc::unbounded_channel();
        let consumer = ConsumerId::at(7, 0);
        let add = Command::peek_lock_consumer(consumer, events);
        handle.post(add).await.expect("added");
        let credit = Command::Credit { consumer, limit: 2 };
        handle.post(credit).await.expect("credit");
        let mut locks = Vec::new();
        while locks.len() < 2 {
            if let Some(EntityEvent::Delivered(run)) = received.recv().await {
                for delivery in run {
                    let token = delivery.lock_token.expect("locked");
                    locks.push(LockRef {
                        seq: delivery.seq,
                        token,
                    });
                }
            }
        }
        for (request, (lock, awaited)) in locks.into_iter().zip([false, true]).enumerate() {
            let ticket = Ticket {
                link: 7,
                request: request as u64,
            };
            let (events, mut answers) = mpsc::unbounded_channel();
            let settle = Command::Settle {
                consumer,
                items: vec![(lock, Settlement::Complete)],
                reply: Some((ticket, events)),
                awaited,
            };
            let posted = Instant::now();
            handle.post(settle).await.expect("posted");
            let (done, _) = if awaited {
                turns_ended(&handle).await;
                requests
                    .try_recv()
                    .expect("asked within the settlement's turn")
            } else {
                let asked = tokio::time::timeout(Duration::from_secs(10), requests.recv())
                    .await
                    .expect("asked after a short while")
                    .expect("the queue runs");
                // A lower bound only, so a slow machine cannot fail it (the clock counts whole
                // milliseconds, hence one less).
                let quiet = Duration::from_millis(QUIET_FLUSH_MS.unsigned_abs() - 1);
                assert!(posted.elapsed() >= quiet, "asked only after the quiet wait");
                asked
            };
            assert!(answers.try_recv().is_err(), "answered only after its flush");
            done.send(Ok(())).expect("the queue waits");
            let answer = answers.recv().await.expect("answered");
            assert!(
                matches!(answer, EntityEvent::Settled { ref results, .. } if results == &[Ok(())]),
                "{answer:?}"
            );
        }
        shutdown.cancel();
    }
}
