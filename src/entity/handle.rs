//! The typed handle to an entity actor, the commands it accepts and the events it emits.
//!
//! Connections talk to an entity only through an [`EntityHandle`]. Hot-path answers (send
//! results, deliveries, settlement results) come back as [`EntityEvent`]s on the connection's
//! own event channel, so a connection waits on one channel whatever the number of its links.
//! It is the entity's face to the rest of the broker: it hands on the shared words of
//! [`crate::entity::terms`], which the parts inside the entity take from there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::config::SubscriptionConfig;
use crate::entity::core::StagedAnswer;
use crate::entity::operation::{Answer, Operation};
use crate::entity::partition::{Partition, Routing};
use crate::entity::queue::{LaneActivity, LaneCounts};
use crate::entity::settings::Settings;
pub use crate::entity::staging::Work;
pub use crate::entity::terms::{
    ConsumerId, Delivery, EntityError, LaneId, LockRef, Properties, ReceiveMode, SessionRequest,
    Settlement, Subscriptions, Ticket, TopicState, TxnId,
};
use crate::filter::JmsSelector;
use crate::message::Arrival;
use uuid::Uuid;

/// Where an entity sends its answers for one connection.
///
/// Unbounded as a channel, because an entity never waits for a client (design.md D2); what
/// it can hold is bounded all the same: deliveries by each consumer's window (the entity
/// stops delivering until the connection reports them [`Command::Forwarded`], which it does
/// only once its own bounded write buffer took them), and answers by the requests the
/// connection posted, which it stops reading while its write buffer is full.
pub type EventSink = mpsc::UnboundedSender<EntityEvent>;

/// Commands an entity actor accepts.
#[derive(Debug)]
pub enum Command {
    /// Store the messages of one or more transfers (a connection's turn gathers its sends to
    /// one entity), each transfer all or nothing; answer those with a ticket in one
    /// [`EntityEvent::Sent`], on `events`.
    Send {
        /// The transfers, in the order they came.
        transfers: Vec<Sending>,
        /// Where the answers go.
        events: EventSink,
    },
    /// Register a consumer with no credit.
    AddConsumer {
        /// The consumer's id.
        consumer: ConsumerId,
        /// The queue itself or its dead-letter queue.
        lane: LaneId,
        /// Peek-lock or receive-and-delete.
        mode: ReceiveMode,
        /// Message bytes the consumer may have in flight: delivered by the entity, not yet
        /// reported [`Command::Forwarded`] by its connection.
        window: u64,
        /// Where deliveries go.
        events: EventSink,
        /// The session a session receiver asks for (answered with
        /// [`EntityEvent::SessionAccepted`], or [`EntityEvent::Gone`]).
        session: Option<SessionRequest>,
        /// The JMS message selector of a receiver that is not a session receiver: it is
        /// handed (a browser shown) only the messages the selector selects.
        selector: Option<Arc<JmsSelector>>,
    },
    /// Let a consumer be handed messages until it has been handed `limit` in all (its link
    /// counts the deliveries it took, so the demand is exact whatever is on its way).
    Credit {
        /// The consumer.
        consumer: ConsumerId,
        /// Messages it may have been handed in all.
        limit: u64,
    },
    /// Deliver what is available up to the consumer's demand, then zero it and answer with
    /// [`EntityEvent::Drained`].
    Drain {
        /// The consumer.
        consumer: ConsumerId,
    },
    /// The consumer's connection handed `bytes` of its deliveries (their stored sizes) to
    /// the socket's buffer: that much of its window is free again.
    Forwarded {
        /// The consumer.
        consumer: ConsumerId,
        /// Stored bytes of the deliveries forwarded.
        bytes: u64,
    },
    /// Settle locked messages.
    Settle {
        /// The consumer that holds the locks.
        consumer: ConsumerId,
        /// The messages and what to do with each.
        items: Vec<(LockRef, Settlement)>,
        /// Where to answer, if an answer is wanted.
        reply: Option<(Ticket, EventSink)>,
        /// Whether the client waits for the answer (it left the deliveries unsettled). An
        /// answer no client waits for only tells a later detach that the settlement is
        /// applied: it waits for the next flush another change asks for, or a short while.
        awaited: bool,
    },
    /// Stage work in a transaction whose via entity this is: checked now, applied at its
    /// commit, dropped at its rollback (design.md D10). A staged send is answered `Sent`, a
    /// staged settlement `Settled`, as the plain commands are.
    Stage {
        /// The transaction.
        txn: TxnId,
        /// What it does here.
        work: Work,
        /// Where to answer, if an answer is wanted (a pre-settled send needs none).
        reply: Option<(Ticket, EventSink)>,
    },
    /// End a transaction: apply its staged work in one batch of the log, durable before the
    /// answer (`commit`), or drop it. Answered `Discharged`.
    Discharge {
        /// The transaction.
        txn: TxnId,
        /// Commit (else roll back).
        commit: bool,
        /// Where to answer, if an answer is wanted (a rollback of a connection that closed
        /// needs none).
        reply: Option<(Ticket, EventSink)>,
    },
    /// Take back a delivery the consumer could not send (its credit was withdrawn meanwhile):
    /// the message is available again as if never delivered.
    GiveBack {
        /// The delivery, untouched.
        delivery: Box<Delivery>,
    },
    /// Perform a management operation on the queue or its dead-letter queue; answer with
    /// [`EntityEvent::Managed`].
    Manage {
        /// Which queue.
        lane: LaneId,
        /// The operation.
        operation: Box<Operation>,
        /// Where to answer.
        reply: (Ticket, EventSink),
    },
    /// Remove a consumer. Its locks stay until they expire, as in Service Bus: the messages
    /// come back (with a counted delivery) only then, and can be settled by lock token until
    /// then.
    RemoveConsumer {
        /// The consumer.
        consumer: ConsumerId,
    },
    /// Remove (or dead-letter) the messages whose time to live ran out by `now_ms` (the TTL
    /// sweeper's tick).
    ExpireDue {
        /// The sweeper's clock, in ms since the Unix epoch.
        now_ms: i64,
    },
    /// The broker's clock moved forward (a controlled test clock): do now what is due at the
    /// new time, dispatch what that made available, then answer `true`.
    Tick {
        /// Where the answer goes, once the turn that took the command has dispatched.
        reply: oneshot::Sender<bool>,
    },
    /// Delete the entity if it has been idle for its `auto_delete_on_idle` time (the reaper's
    /// tick); answers whether it did.
    ReapIfIdle {
        /// Where the answer goes.
        reply: oneshot::Sender<bool>,
    },
    /// Tell whether the entity has been idle for its `auto_delete_on_idle` time, after
    /// deleting its subscriptions idle for theirs (how a partitioned entity's router asks
    /// each partition before it deletes them all).
    IsIdle {
        /// Where the answer goes.
        reply: oneshot::Sender<bool>,
    },
    /// Delete the entity now, with its messages, its dead-letter queues and its links (which
    /// get `amqp:not-found`); answers `true` once done.
    Delete {
        /// Where the answer goes.
        reply: oneshot::Sender<bool>,
    },
    /// Add a subscription to this topic (the administration API); answers why not, if not.
    AddSubscription {
        /// Its declaration.
        config: Box<SubscriptionConfig>,
        /// The lane number it gets; `None`: the next free one (a partitioned topic's router
        /// gives the other partitions the number the first one chose).
        number: Option<u32>,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// Delete a subscription of this topic with its messages; answers why not, if not.
    RemoveSubscription {
        /// Its name.
        name: String,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// Apply changed settings (an entity updated at run time); answers once applied.
    Reconfigure {
        /// The new settings.
        settings: Box<Settings>,
        /// Where the answer goes.
        reply: oneshot::Sender<()>,
    },
    /// Tell what the entity holds (the administration API's runtime properties).
    Describe {
        /// Where the answer goes.
        reply: oneshot::Sender<EntityStats>,
    },
}

/// What an entity holds, lane by lane, and when a client last used it.
#[derive(Debug, Clone, Default)]
pub struct EntityStats {
    /// Each lane's counts.
    pub lanes: Vec<(LaneId, LaneCounts)>,
    /// What happened in each lane since the broker started.
    pub activity: Vec<(LaneId, LaneActivity)>,
    /// Messages sent or scheduled to the entity since the broker started.
    pub sent: u64,
    /// Sends dropped as duplicates since the broker started (duplicate detection).
    pub duplicates_dropped: u64,
    /// Message ids in the duplicate-detection window.
    pub duplicate_ids: usize,
    /// A topic's SQL and correlation filters, across its subscriptions.
    pub filters: (usize, usize),
    /// When a client last used the entity (a send, receive, settlement or management
    /// operation), in ms since the Unix epoch; `None` until one does.
    pub accessed_ms: Option<i64>,
}

impl EntityStats {
    /// One lane's counts (zero for a lane it does not have).
    pub fn lane(&self, id: LaneId) -> LaneCounts {
        self.lanes
            .iter()
            .find(|(lane, _)| *lane == id)
            .map(|(_, counts)| *counts)
            .unwrap_or_default()
    }
}

#[cfg(test)]
impl Command {
    /// Adds a peek-lock consumer of the main lane with no limit on its window (for tests).
    pub fn peek_lock_consumer(consumer: ConsumerId, events: EventSink) -> Command {
        Command::AddConsumer {
            consumer,
            lane: LaneId::MAIN,
            mode: ReceiveMode::PeekLock,
            window: u64::MAX,
            events,
            session: None,
            selector: None,
        }
    }
}

impl Command {
    /// Reads the lock tokens of a client's command as the lanes of `partition` made them (a
    /// partition's carry its id: see [`Partition::mark`]).
    pub fn unmark_tokens(&mut self, partition: Partition) {
        if partition == Partition::ALONE {
            return;
        }
        let unmark_locks = |items: &mut Vec<(LockRef, Settlement)>| {
            for (lock, _) in items {
                lock.token = partition.unmark(lock.token);
            }
        };
        let unmark_all = |tokens: &mut Vec<Uuid>| {
            for token in tokens {
                *token = partition.unmark(*token);
            }
        };
        match self {
            Command::Settle { items, .. }
            | Command::Stage {
                work: Work::Settle { items, .. },
                ..
            } => unmark_locks(items),
            Command::Stage {
                work: Work::SettleByToken { tokens, .. },
                ..
            } => unmark_all(tokens),
            Command::GiveBack { delivery } => {
                delivery.lock_token = delivery.lock_token.map(|token| partition.unmark(token));
            }
            Command::Manage { operation, .. } => match &mut **operation {
                Operation::RenewLock { tokens } | Operation::UpdateDisposition { tokens, .. } => {
                    unmark_all(tokens);
                }
                _ => {}
            },
            _ => {}
        }
    }

    /// A send of one transfer, answered on `events` when it has a ticket.
    pub fn send(messages: Vec<Arrival>, ticket: Option<Ticket>, events: EventSink) -> Command {
        Command::Send {
            transfers: vec![Sending { messages, ticket }],
            events,
        }
    }

    /// Whether the command is a client using the entity, for auto-delete on idle: a send, a
    /// receive (credit, drain), a settlement or a management operation. Attaching and
    /// detaching links and the broker's own ticks are not.
    pub fn is_activity(&self) -> bool {
        match self {
            Command::Send { .. }
            | Command::Drain { .. }
            | Command::Settle { .. }
            | Command::Stage { .. }
            | Command::Discharge { .. }
            | Command::Credit { .. }
            | Command::Manage { .. } => true,
            Command::AddConsumer { .. }
            | Command::Forwarded { .. }
            | Command::GiveBack { .. }
            | Command::RemoveConsumer { .. }
            | Command::ExpireDue { .. }
            | Command::Tick { .. }
            | Command::ReapIfIdle { .. }
            | Command::IsIdle { .. }
            | Command::Delete { .. }
            | Command::AddSubscription { .. }
            | Command::RemoveSubscription { .. }
            | Command::Reconfigure { .. }
            | Command::Describe { .. } => false,
        }
    }

    /// Answers a command the entity will never perform (it was deleted, or the broker is
    /// stopping): sends, settlements and management requests fail with `error`, and a
    /// subscription ends at once (its link is detached, so credit and drains need no answer).
    pub fn refuse(self, error: &EntityError) {
        match self {
            Command::Send { transfers, events } => {
                let results = Sending::refused(transfers, error);
                if !results.is_empty() {
                    let _ = events.send(EntityEvent::Sent { results });
                }
            }
            Command::Settle {
                items,
                reply: Some((ticket, events)),
                ..
            } => {
                let results = items.iter().map(|_| Err(error.clone())).collect();
                let _ = events.send(EntityEvent::Settled { ticket, results });
            }
            Command::Manage {
                reply: (ticket, events),
                ..
            } => {
                let result = Err(error.clone());
                let _ = events.send(EntityEvent::Managed { ticket, result });
            }
            Command::Stage {
                work,
                reply: Some((ticket, events)),
                ..
            } => {
                let _ = events.send(work.refused(ticket, error));
            }
            Command::Discharge {
                reply: Some((ticket, events)),
                ..
            } => {
                let result = Err(error.clone());
                let _ = events.send(EntityEvent::Discharged { ticket, result });
            }
            Command::AddConsumer {
                consumer, events, ..
            } => {
                let _ = events.send(EntityEvent::Gone {
                    consumer,
                    error: error.clone(),
                });
            }
            Command::Drain { .. }
            | Command::Settle { reply: None, .. }
            | Command::Discharge { reply: None, .. }
            | Command::Stage { reply: None, .. }
            | Command::Credit { .. }
            | Command::Forwarded { .. }
            | Command::GiveBack { .. }
            | Command::RemoveConsumer { .. }
            | Command::ExpireDue { .. }
            | Command::Reconfigure { .. }
            | Command::Describe { .. } => {}
            Command::AddSubscription { reply, .. } | Command::RemoveSubscription { reply, .. } => {
                let _ = reply.send(Err(error.to_string()));
            }
            Command::ReapIfIdle { reply }
            | Command::Tick { reply }
            | Command::IsIdle { reply }
            | Command::Delete { reply } => {
                let _ = reply.send(false);
            }
        }
    }
}

/// One transfer's messages (a batch message's sections are one transfer): stored all or none.
#[derive(Debug)]
pub struct Sending {
    /// The messages, as the client sent them.
    pub messages: Vec<Arrival>,
    /// The transfer's ticket, when its sender waits for an answer.
    pub ticket: Option<Ticket>,
}

impl Sending {
    /// The answers to transfers refused with `error`: one for each that has a ticket.
    pub fn refused(
        transfers: Vec<Sending>,
        error: &EntityError,
    ) -> Vec<(Ticket, Result<(), EntityError>)> {
        transfers
            .into_iter()
            .filter_map(|sending| sending.ticket)
            .map(|ticket| (ticket, Err(error.clone())))
            .collect()
    }
}

/// Answers and deliveries from an entity to a connection.
#[derive(Debug)]
pub enum EntityEvent {
    /// Sends were stored (or refused): each transfer's result, with its ticket.
    Sent {
        /// The results, in the order the transfers came.
        results: Vec<(Ticket, Result<(), EntityError>)>,
    },
    /// Messages for one consumer, in the order they are to go out (one run of a turn).
    Delivered(Vec<Delivery>),
    /// A drain finished: every delivery sent before this event was all there was.
    Drained {
        /// The consumer.
        consumer: ConsumerId,
    },
    /// The entity will not serve the consumer any more: its link must go.
    Gone {
        /// The consumer.
        consumer: ConsumerId,
        /// Why ([`EntityError::Deleted`]: `amqp:not-found`).
        error: EntityError,
    },
    /// A receiver that asked for no session is registered: its attach may be answered.
    ConsumerAdded {
        /// The consumer.
        consumer: ConsumerId,
    },
    /// A session receiver holds a session now.
    SessionAccepted {
        /// The consumer.
        consumer: ConsumerId,
        /// The session's id.
        session: String,
        /// When its lock ends unless renewed, in ms since the Unix epoch.
        locked_until_ms: i64,
    },
    /// A management operation's answer.
    Managed {
        /// The ticket of the request.
        ticket: Ticket,
        /// What the entity answers, or why it refused.
        result: Result<Answer, EntityError>,
    },
    /// A settlement was applied: one result per item, in order.
    Settled {
        /// The ticket of the settlement.
        ticket: Ticket,
        /// Results per item.
        results: Vec<Result<(), EntityError>>,
    },
    /// A transaction was committed (its work durable) or rolled back.
    Discharged {
        /// The ticket of the discharge.
        ticket: Ticket,
        /// Why a commit failed (the transaction was rolled back instead).
        result: Result<(), EntityError>,
    },
}

impl EntityEvent {
    /// The answer to one transfer.
    pub fn sent(ticket: Ticket, result: Result<(), EntityError>) -> EntityEvent {
        EntityEvent::Sent {
            results: vec![(ticket, result)],
        }
    }

    /// The answer to a send of one transfer ([`Command::send`]), if this is one.
    pub fn into_sent(self) -> Option<(Ticket, Result<(), EntityError>)> {
        match self {
            EntityEvent::Sent { results } => results.into_iter().next(),
            _ => None,
        }
    }
}

impl StagedAnswer {
    /// The answer to staged work as the event its plain command answers with.
    pub fn into_event(self, ticket: Ticket) -> EntityEvent {
        match self {
            StagedAnswer::Sent(result) => EntityEvent::sent(ticket, result),
            StagedAnswer::Managed(result) => EntityEvent::Managed { ticket, result },
            StagedAnswer::Settled(results) => EntityEvent::Settled { ticket, results },
        }
    }
}

impl Work {
    /// The answer to this work when it is refused with `error`, as its plain command's.
    pub fn refused(&self, ticket: Ticket, error: &EntityError) -> EntityEvent {
        match self {
            Work::Send(_) | Work::Transfer { .. } => EntityEvent::sent(ticket, Err(error.clone())),
            Work::Settle { items, .. } => EntityEvent::Settled {
                ticket,
                results: items.iter().map(|_| Err(error.clone())).collect(),
            },
            Work::Schedule { .. } | Work::SettleByToken { .. } => EntityEvent::Managed {
                ticket,
                result: Err(error.clone()),
            },
        }
    }
}

/// A management command on `lane` answered on a channel of its own, and that channel (see
/// [`managed`]).
pub fn management(
    lane: LaneId,
    operation: Operation,
) -> (Command, mpsc::UnboundedReceiver<EntityEvent>) {
    let (sink, events) = mpsc::unbounded_channel();
    let ticket = Ticket {
        link: 0,
        request: 0,
    };
    let command = Command::Manage {
        lane,
        operation: Box::new(operation),
        reply: (ticket, sink),
    };
    (command, events)
}

/// The answer the channel of a posted [`management`] command brings.
///
/// # Errors
/// `Err(())` when none comes: the entity stopped.
pub async fn managed(
    mut events: mpsc::UnboundedReceiver<EntityEvent>,
) -> Result<Result<Answer, EntityError>, ()> {
    match events.recv().await {
        Some(EntityEvent::Managed { result, .. }) => Ok(result),
        _ => Err(()),
    }
}

/// A cloneable handle to an entity: its actor, or a partitioned entity's actors.
#[derive(Debug, Clone)]
pub struct EntityHandle {
    /// Shared: a handle is cloned for every message posted through it.
    name: Arc<str>,
    /// Each partition's actor's mailbox (one for an unpartitioned entity).
    mailboxes: Arc<[mpsc::Sender<Command>]>,
    deleted: Arc<AtomicBool>,
    /// A topic's subscriptions and rules (its first partition's); `None` for a queue.
    topic: Option<Arc<TopicState>>,
    /// How a partitioned entity's commands find their partitions; `None` when it has one.
    routing: Option<Arc<Routing>>,
}

impl EntityHandle {
    /// Wraps an actor's mailbox; the actor sets `deleted` before it closes the mailbox for
    /// good. `topic` is set for a topic, shared with its actor.
    pub fn new(
        name: String,
        mailbox: mpsc::Sender<Command>,
        deleted: Arc<AtomicBool>,
        topic: Option<Arc<TopicState>>,
    ) -> Self {
        Self {
            name: name.into(),
            mailboxes: Arc::new([mailbox]),
            deleted,
            topic,
            routing: None,
        }
    }

    /// Wraps the mailboxes of a partitioned entity's actors, in partition order (design.md
    /// D9); `topic` is the first partition's (every partition numbers its subscriptions and
    /// holds its rules alike).
    pub fn partitioned(
        name: String,
        mailboxes: Vec<mpsc::Sender<Command>>,
        deleted: Arc<AtomicBool>,
        topic: Option<Arc<TopicState>>,
        routing: Routing,
    ) -> Self {
        Self {
            name: name.into(),
            mailboxes: mailboxes.into(),
            deleted,
            topic,
            routing: Some(Arc::new(routing)),
        }
    }

    /// How many partitions the entity has (1 when it is not partitioned).
    pub fn partitions(&self) -> usize {
        self.mailboxes.len()
    }

    /// Whether the entity is partitioned.
    pub fn is_partitioned(&self) -> bool {
        self.routing.is_some()
    }

    /// The partition a batch of messages goes to (see [`Routing::partition_of`]).
    ///
    /// # Errors
    /// Why the batch cannot go to one partition.
    pub fn routing_partition_of(&self, messages: &[Arrival]) -> Result<usize, EntityError> {
        match &self.routing {
            None => Ok(0),
            Some(routing) => routing.partition_of(messages, self.partitions()),
        }
    }

    /// Gives the router an updated entity's settings.
    pub fn routing_set(&self, settings: &Settings) {
        if let Some(routing) = &self.routing {
            let auto_delete_ms = settings.auto_delete_on_idle.map(crate::clock::millis);
            routing.set(settings.duplicate_window_ms.is_some(), auto_delete_ms);
        }
    }

    /// What each partition of a partitioned entity holds, in partition order (none for an
    /// unpartitioned entity; a partition that stopped reports nothing).
    pub async fn partition_stats(&self) -> Vec<EntityStats> {
        if self.routing.is_none() {
            return Vec::new();
        }
        let mut all = Vec::with_capacity(self.partitions());
        for partition in 0..self.partitions() {
            let (reply, answer) = oneshot::channel();
            if self
                .post_to(partition, Command::Describe { reply })
                .await
                .is_ok()
            {
                all.push(answer.await.unwrap_or_default());
            }
        }
        all
    }

    /// The entity's `auto_delete_on_idle` as its router knows it (a partitioned entity's).
    pub fn routing_auto_delete_ms(&self) -> Option<i64> {
        self.routing
            .as_ref()
            .and_then(|routing| routing.auto_delete_ms())
    }

    /// Whether the entity is a topic (sent to; received from through its subscriptions).
    pub fn is_topic(&self) -> bool {
        self.topic.is_some()
    }

    /// Whether the entity is a topic whose rules read the messages sent to it.
    pub fn rules_read_messages(&self) -> bool {
        self.topic.as_ref().is_some_and(|topic| topic.rules_read())
    }

    /// The lane number of a topic's subscription, by name compared case-insensitively.
    pub fn subscription(&self, name: &str) -> Option<u32> {
        let topic = self.topic.as_ref()?;
        let number = topic.names().get(&name.to_lowercase()).copied();
        number
    }

    /// Whether the entity was deleted (its actor takes no more commands).
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Why a command the actor can no longer take is refused: the entity was deleted, or the
    /// broker is stopping.
    pub fn refusal(&self) -> EntityError {
        if self.is_deleted() {
            EntityError::Deleted
        } else {
            EntityError::Unavailable
        }
    }

    /// The entity's name as declared.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Posts a command to one partition's actor if its mailbox has room.
    ///
    /// # Errors
    /// The command back when the mailbox is full, the actor has stopped or the entity has no
    /// such partition.
    pub fn try_post_to(&self, partition: usize, command: Command) -> Result<(), Box<Command>> {
        let Some(mailbox) = self.mailboxes.get(partition) else {
            return Err(Box::new(command));
        };
        mailbox.try_send(command).map_err(|error| match error {
            mpsc::error::TrySendError::Full(command)
            | mpsc::error::TrySendError::Closed(command) => Box::new(command),
        })
    }

    /// Posts a command to one partition's actor, waiting for mailbox room.
    ///
    /// # Errors
    /// The command back when that actor has stopped, or the entity has no such partition.
    pub async fn post_to(&self, partition: usize, command: Command) -> Result<(), Box<Command>> {
        let Some(mailbox) = self.mailboxes.get(partition) else {
            return Err(Box::new(command));
        };
        mailbox
            .send(command)
            .await
            .map_err(|error| Box::new(error.0))
    }
}
