//! One lane (design.md D5, D7 and §4): a queue, a subscription, or the dead-letter queue of
//! either. Its records, the ready index, consumers' demand, locks and settlement, deferral,
//! time to live, and the hand-off of dead-lettered messages. Time comes in as `now_ms`;
//! nothing here awaits or sleeps. Numbering and scheduling belong to the entity's
//! [`Intake`](crate::entity::intake::Intake) and [`Schedule`](crate::entity::schedule::Schedule).
//!
//! The lane holds per-message records only; message bytes live in the entity's log. Every
//! change that must be stored is appended to a journal the actor writes after each batch.

use foldhash::{HashMap, HashMapExt};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use fe2o3_amqp::types::primitives::{SimpleValue, Timestamp, Value};
use uuid::Uuid;

use crate::entity::sessions::Sessions;
use crate::entity::terms::{
    ConsumerId, Delivery, EntityError, LockRef, Properties, ReceiveMode, SessionId, Settlement,
};
use crate::message::DeliveryStamp;
use crate::store::record::{MessageState, Record, NEVER};
use crate::store::{Change, Recovered};
use crate::wire;

mod browse;
mod select;
pub mod session_lane;

pub use select::Reader;
use select::Selection;
#[cfg(test)]
pub use select::Unread;

/// One stored message: its broker record and, while delivered, its lock.
#[derive(Debug)]
struct Entry {
    /// `delivery_count` is the deliveries counted so far, written zero-based into
    /// `header.delivery-count`.
    record: Record,
    lock: Option<Lock>,
    /// Its session, in a lane that requires sessions.
    session: Option<SessionId>,
}

#[derive(Debug, Clone, Copy)]
struct Lock {
    token: Uuid,
    consumer: ConsumerId,
    until_ms: i64,
}

#[derive(Debug)]
struct Consumer {
    mode: ReceiveMode,
    /// Messages it may have been handed in all (its link's count; see
    /// [`QueueCore::set_limit`]).
    limit: u64,
    /// Messages it has been handed in all.
    delivered: u64,
    /// Whether the consumer sits in the round-robin queue.
    ready: bool,
    /// Message bytes handed out that its connection has not yet reported forwarded to the
    /// socket. No message goes to the consumer while this is at `window` or above, so a
    /// client that does not read holds at most a window of bodies in memory and leaves the
    /// rest of the queue to other consumers.
    in_flight: u64,
    /// The most bytes in flight (one message always fits).
    window: u64,
    /// A drain stopped by the window: it goes on as bytes are forwarded.
    draining: bool,
    /// A browser's place: the sequence number it is shown from.
    shown_from: i64,
    /// Its JMS message selector and what it judged, when it has one.
    selection: Option<Box<Selection>>,
}

impl Consumer {
    /// Messages it may still be handed.
    fn demand(&self) -> u64 {
        self.limit.saturating_sub(self.delivered)
    }

    /// Asks for nothing more until its link asks again.
    fn stop(&mut self) {
        self.limit = self.delivered;
    }

    fn can_take(&self) -> bool {
        self.demand() > 0 && self.in_flight < self.window
    }
}

/// The entity settings the rules apply.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// How long a peek-lock delivery holds its message.
    pub lock_duration_ms: i64,
    /// A message counted this many deliveries is dead-lettered instead of delivered again.
    pub max_delivery_count: u32,
    /// Whether messages may be dead-lettered (not from a dead-letter queue).
    pub dead_letter_allowed: bool,
    /// Time to live of a message that sets none, and the most one may set, in ms; [`NEVER`]:
    /// unlimited.
    pub default_ttl_ms: i64,
    /// Whether messages expire here (dead-letter queues observe no time to live).
    pub expires: bool,
    /// Whether an expired message is dead-lettered (else deleted).
    pub dead_letter_on_expiry: bool,
    /// Whether messages are received through sessions (design.md D8).
    pub requires_session: bool,
    /// Whether an abandon, a deferral or a lapsed lock counts a delivery. Not in a dead-letter
    /// queue: there a message keeps the count it was dead-lettered with, as on Service Bus
    /// (the Go SDK's suite abandons a dead-lettered message and reads the same count back).
    pub counts_deliveries: bool,
}

impl Rules {
    /// The rules of a dead-letter queue: no delivery limit, no dead-lettering, no expiry.
    pub fn dead_letter_queue(lock_duration_ms: i64) -> Rules {
        Rules {
            lock_duration_ms,
            max_delivery_count: u32::MAX,
            dead_letter_allowed: false,
            default_ttl_ms: NEVER,
            expires: false,
            dead_letter_on_expiry: false,
            requires_session: false,
            counts_deliveries: false,
        }
    }
}

impl Rules {
    /// The rules of a transfer lane: no delivery limit, no expiry (a transfer waits for its
    /// destination), but dead-lettering, to its transfer dead-letter queue.
    pub fn transfer_queue(lock_duration_ms: i64) -> Rules {
        Rules {
            dead_letter_allowed: true,
            ..Rules::dead_letter_queue(lock_duration_ms)
        }
    }
}

/// A message leaving the queue for its dead-letter queue.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// Its sequence number (kept in the dead-letter queue).
    pub seq: i64,
    /// Its record.
    pub record: Record,
    /// Application properties to set: `DeadLetterReason`, `DeadLetterErrorDescription` and
    /// any properties to modify.
    pub properties: Properties,
}

/// How many messages a lane holds in each state, and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneCounts {
    /// Receivable messages, locked ones included.
    pub active: u64,
    /// Deferred messages.
    pub deferred: u64,
    /// Scheduled messages not yet due.
    pub scheduled: u64,
    /// Bytes of all its messages.
    pub bytes: u64,
}

/// Most distinct dead-letter reasons a lane counts apart; later ones count as
/// [`OTHER_REASONS`] (reasons are client text: the metrics' label values stay bounded).
pub const MAX_REASONS: usize = 32;
/// The reason counted for dead-letterings past [`MAX_REASONS`] distinct ones.
pub const OTHER_REASONS: &str = "(other)";
/// The reason counted for a dead-lettering that gave none.
pub const NO_REASON: &str = "(none)";

/// What happened in a lane since the broker started, for the metrics: plain counters the
/// actor bumps as it works, so counting costs the hot path no lock and no allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaneActivity {
    /// Messages that entered the lane (sent, copied from a topic, dead-lettered into it,
    /// or given back by a connection that could not deliver them).
    pub received: u64,
    /// Messages that left it settled: completed, or received in receive-and-delete mode.
    pub consumed: u64,
    /// Messages that left it for its forwarding target, which stored them.
    pub forwarded: u64,
    /// Locks that ran out before their message was settled.
    pub lock_expirations: u64,
    /// Messages whose time to live ran out (deleted or dead-lettered).
    pub expired: u64,
    /// Messages moved to the dead-letter queue, by reason, at most [`MAX_REASONS`] + 1.
    pub dead_lettered: Vec<(String, u64)>,
}

impl LaneActivity {
    /// Counts a dead-lettering for `reason`.
    fn dead_lettered(&mut self, reason: Option<&str>) {
        let reason = reason.unwrap_or(NO_REASON);
        if let Some((_, count)) = self.dead_lettered.iter_mut().find(|(r, _)| r == reason) {
            *count += 1;
            return;
        }
        let reason = match self.dead_lettered.len() < MAX_REASONS {
            true => reason,
            false => OTHER_REASONS,
        };
        match self.dead_lettered.iter_mut().find(|(r, _)| r == reason) {
            Some((_, count)) => *count += 1,
            None => self.dead_lettered.push((reason.to_owned(), 1)),
        }
    }
}

/// One lane's state: everything the actor owns for it, minus the I/O.
#[derive(Debug)]
pub struct QueueCore {
    rules: Rules,
    activity: LaneActivity,
    size_bytes: u64,
    /// Messages numbered from here on are not durable yet and must not be delivered: the
    /// entity reveals them (`reveal_up_to`) once their write is durable.
    visible_below: i64,
    /// Every message of the lane, scheduled ones included (a queue's lane stores them so
    /// that peek shows them; the entity's schedule says when they are due).
    messages: BTreeMap<i64, Entry>,
    /// Sequence numbers of unlocked active messages, in delivery order.
    available: BTreeSet<i64>,
    /// (expiry, sequence number) of every unlocked, unscheduled message that expires.
    expiry: BTreeSet<(i64, i64)>,
    /// (lock expiry, sequence number) of every locked message.
    lock_expiry: BTreeSet<(i64, i64)>,
    /// Sequence number of each live lock token (for renew-lock and update-disposition).
    tokens: HashMap<Uuid, i64>,
    consumers: HashMap<ConsumerId, Consumer>,
    /// Consumers with demand, in round-robin order.
    ready: VecDeque<ConsumerId>,
    /// Consumers (and browsers) with a selector: told of messages made available, gone, or
    /// changed. Empty in a lane without one, which then pays nothing for them.
    selecting: Vec<ConsumerId>,
    /// Changes not yet written to the log.
    journal: Vec<Change>,
    /// Messages removed for dead-lettering, not yet handed to the dead-letter queue.
    dead_letters: Vec<DeadLetter>,
    /// The lane's sessions, when it requires them.
    sessions: Option<Sessions>,
    /// Session receivers waiting for the next available session, with when they give up.
    waiting: VecDeque<(ConsumerId, i64)>,
    /// Session receivers whose session lock lapsed, not yet told.
    lapsed: Vec<(ConsumerId, SessionId)>,
}

impl QueueCore {
    /// A lane holding what recovery found in its log, nothing deliverable until
    /// [`QueueCore::reveal_up_to`]. Locks are volatile: every message is available again
    /// (deferred ones stay deferred, scheduled ones scheduled), every session unlocked.
    pub fn new(rules: Rules, recovered: Recovered) -> Self {
        let Recovered {
            records,
            mut sessions,
            session_states,
            ..
        } = recovered;
        let mut lane = Self {
            rules,
            activity: LaneActivity::default(),
            size_bytes: 0,
            visible_below: 0,
            messages: BTreeMap::new(),
            available: BTreeSet::new(),
            expiry: BTreeSet::new(),
            lock_expiry: BTreeSet::new(),
            tokens: HashMap::new(),
            consumers: HashMap::new(),
            ready: VecDeque::new(),
            selecting: Vec::new(),
            journal: Vec::new(),
            dead_letters: Vec::new(),
            sessions: rules.requires_session.then(Sessions::default),
            waiting: VecDeque::new(),
            lapsed: Vec::new(),
        };
        for (seq, record) in records {
            let session = sessions.remove(&seq);
            lane.file(seq, record, session.as_deref());
        }
        if let Some(table) = &mut lane.sessions {
            for (id, stored) in session_states {
                let id = table.intern(&id);
                table.set_state(&id, Some(stored));
            }
        }
        lane
    }

    /// Adds a message to the lane's records (and its session's) and indexes it.
    fn file(&mut self, seq: i64, record: Record, session: Option<&str>) {
        let session = match (&mut self.sessions, session) {
            (Some(table), Some(id)) => {
                let id = table.intern(id);
                table.add_message(&id, seq);
                Some(id)
            }
            _ => None,
        };
        self.size_bytes += u64::from(record.size);
        self.messages.insert(
            seq,
            Entry {
                record,
                lock: None,
                session,
            },
        );
        self.index(seq, &record);
    }

    /// The lane's rules.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Applies changed rules (an entity updated at run time): new locks last the new lock
    /// duration, new deliveries count against the new limit, new messages get the new time to
    /// live. Whether the lane requires sessions does not change.
    pub fn set_rules(&mut self, rules: Rules) {
        self.rules = Rules {
            requires_session: self.rules.requires_session,
            ..rules
        };
    }

    /// Makes messages numbered below `next_seq` deliverable: their writes are durable.
    pub fn reveal_up_to(&mut self, next_seq: i64) {
        if next_seq > self.visible_below {
            self.visible_below = next_seq;
            self.wake_session_receivers();
            self.wake_selecting();
        }
    }

    /// Bytes of the messages the lane holds.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// A message's record.
    pub fn record(&self, seq: i64) -> Option<&Record> {
        self.messages.get(&seq).map(|entry| &entry.record)
    }

    /// (due time, sequence number) of each scheduled message the lane stores.
    pub fn scheduled(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.messages
            .iter()
            .filter(|(_, entry)| entry.record.state == MessageState::Scheduled)
            .map(|(seq, entry)| (entry.record.scheduled_ms, *seq))
    }

    /// The changes made since the last call, to be written to the log.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.journal)
    }

    /// Messages removed for dead-lettering since the last call.
    pub fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        std::mem::take(&mut self.dead_letters)
    }

    /// Stores a message dead-lettered by the parent lane under its own sequence number,
    /// receivable once that number is durable (a copy dead-lettered as it was sent waits for
    /// its send's flush, as the send's other copies do).
    pub fn accept_dead_letter(&mut self, seq: i64, record: Record, body: Bytes) {
        let record = Record {
            state: MessageState::Active,
            size: u32::try_from(body.len()).unwrap_or(u32::MAX),
            ..record
        };
        self.insert(seq, record, body, None);
    }

    /// Replaces a message's bytes (its application properties changed); its record stays.
    pub fn replace_body(&mut self, seq: i64, body: Bytes) {
        if let Some(entry) = self.messages.get_mut(&seq) {
            let size = u32::try_from(body.len()).unwrap_or(u32::MAX);
            self.size_bytes = self.size_bytes - u64::from(entry.record.size) + u64::from(size);
            entry.record.size = size;
            self.journal.push(Change::Put {
                seq,
                record: entry.record,
                body,
            });
            self.forget(seq);
        }
    }

    /// What happened in the lane since the broker started.
    pub fn activity(&self) -> &LaneActivity {
        &self.activity
    }

    /// Counts a message dead-lettered on its way in (a topic rule's filter failed on it).
    pub fn note_dead_lettered(&mut self, reason: &str) {
        self.activity.dead_lettered(Some(reason));
    }

    /// What the lane holds, by state, and its bytes (an administration client's counts).
    pub fn counts(&self) -> LaneCounts {
        let mut counts = LaneCounts {
            bytes: self.size_bytes,
            ..LaneCounts::default()
        };
        for entry in self.messages.values() {
            match entry.record.state {
                MessageState::Active => counts.active += 1,
                MessageState::Deferred => counts.deferred += 1,
                MessageState::Scheduled => counts.scheduled += 1,
            }
        }
        counts
    }

    /// Whether the lane holds message `seq`, not locked.
    pub fn is_unlocked(&self, seq: i64) -> bool {
        self.messages
            .get(&seq)
            .is_some_and(|entry| entry.lock.is_none())
    }

    /// The sequence number of the oldest stored message, if any.
    pub fn oldest(&self) -> Option<i64> {
        self.messages.keys().next().copied()
    }

    /// Number of stored messages (locked or not).
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the queue holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Whether a consumer waits for messages (holds credit): auto-delete counts it as activity.
    pub fn has_waiting_consumer(&self) -> bool {
        self.consumers
            .values()
            .any(|consumer| consumer.demand() > 0)
    }

    /// Removes (or dead-letters) every unlocked message whose time to live ran out by
    /// `now_ms`. Returns how many expired.
    pub fn expire_due(&mut self, now_ms: i64) -> usize {
        let mut expired = 0;
        while self.expiry.first().is_some_and(|(at, _)| *at <= now_ms) {
            if let Some((_, seq)) = self.expiry.pop_first() {
                self.expire(seq);
                expired += 1;
            }
        }
        expired
    }

    /// Stores a message under `seq` (its number from the intake, or its own when given back),
    /// in `session` when the lane requires sessions.
    pub fn insert(&mut self, seq: i64, record: Record, body: Bytes, session: Option<&str>) {
        self.activity.received += 1;
        self.file(seq, record, session);
        self.journal.push(Change::Put { seq, record, body });
    }

    /// Files an unlocked message in the indexes its state calls for.
    fn index(&mut self, seq: i64, record: &Record) {
        match record.state {
            MessageState::Active => match self.session_of(seq) {
                Some(id) => self.make_session_message_available(&id, seq),
                None => {
                    self.available.insert(seq);
                    self.offer(seq);
                }
            },
            MessageState::Deferred => {}
            MessageState::Scheduled => return,
        }
        if self.rules.expires && record.expires_ms != NEVER {
            self.expiry.insert((record.expires_ms, seq));
        }
    }

    /// The session of a message, in a lane that requires sessions.
    fn session_of(&self, seq: i64) -> Option<SessionId> {
        self.sessions.as_ref()?;
        self.messages.get(&seq)?.session.clone()
    }

    /// Deletes every message (the lane's subscription is deleted).
    pub fn clear(&mut self) {
        let seqs: Vec<i64> = self.messages.keys().copied().collect();
        for seq in seqs {
            self.remove(seq);
        }
    }

    /// Deletes up to `count` messages enqueued before `before_ms`, lowest sequence numbers
    /// first (`batch-delete-messages`): available and deferred ones, never one a receiver
    /// holds locked or one still scheduled; of `session` only, when one is given. Returns how
    /// many it deleted.
    pub fn delete_enqueued_before(
        &mut self,
        count: usize,
        before_ms: i64,
        session: Option<&str>,
    ) -> usize {
        // Enqueued times never go backwards along sequence numbers: the scan stops at the first
        // message enqueued at `before_ms` or later.
        let doomed: Vec<i64> = (self.messages.iter())
            .take_while(|(_, entry)| entry.record.enqueued_ms < before_ms)
            .filter(|(_, entry)| {
                entry.lock.is_none()
                    && entry.record.state != MessageState::Scheduled
                    && session.is_none_or(|id| entry.session.as_deref() == Some(id))
            })
            .map(|(seq, _)| *seq)
            .take(count)
            .collect();
        for &seq in &doomed {
            self.remove(seq);
        }
        doomed.len()
    }

    /// Deletes a message (a scheduled one cancelled or activated, through the entity).
    pub fn remove(&mut self, seq: i64) {
        let Some(entry) = self.messages.remove(&seq) else {
            return;
        };
        if let Some(lock) = entry.lock {
            self.tokens.remove(&lock.token);
            self.lock_expiry.remove(&(lock.until_ms, seq));
        }
        // Out of every index: its session's (which holds its availability there) or the lane's.
        match (&mut self.sessions, &entry.session) {
            (Some(table), Some(id)) => table.remove_message(id, seq),
            _ => {
                self.available.remove(&seq);
            }
        }
        self.expiry.remove(&(entry.record.expires_ms, seq));
        self.size_bytes -= u64::from(entry.record.size);
        self.journal.push(Change::Delete { seq });
        self.forget(seq);
    }

    /// An expired message leaves: to the dead-letter queue with reason `TTLExpiredException`
    /// when the entity says so, else deleted.
    fn expire(&mut self, seq: i64) {
        self.activity.expired += 1;
        if self.rules.dead_letter_on_expiry && self.rules.dead_letter_allowed {
            let properties = dead_letter_properties(
                Some(wire::dead_letter::TTL_EXPIRED.to_string()),
                Some(wire::dead_letter::TTL_EXPIRED_DESCRIPTION.to_string()),
            );
            self.dead_letter(seq, properties);
        } else {
            self.remove(seq);
        }
    }

    /// Gives back the memory the queue's indexes kept from a larger backlog.
    pub fn release_spare_capacity(&mut self) {
        crate::trimmer::shrink_if_sparse(&mut self.tokens);
    }

    /// Registers a consumer with no demand that may have `window` message bytes in flight.
    pub fn subscribe(&mut self, consumer: ConsumerId, mode: ReceiveMode, window: u64) {
        self.consumers.insert(
            consumer,
            Consumer {
                mode,
                limit: 0,
                delivered: 0,
                ready: false,
                in_flight: 0,
                window,
                draining: false,
                shown_from: 0,
                selection: None,
            },
        );
    }

    /// Removes a consumer. Its locks stay, as in Service Bus: nobody else receives those
    /// messages until the locks expire (then they come back with a counted delivery), and
    /// until then they can still be settled by lock token (`update-disposition`). A session
    /// receiver's session is free again at once, and its messages' locks go with it.
    pub fn unsubscribe(&mut self, consumer: ConsumerId) {
        if let Some(Consumer {
            selection: Some(_), ..
        }) = self.consumers.remove(&consumer)
        {
            self.selecting.retain(|selecting| *selecting != consumer);
        }
        if self.sessions.is_some() {
            self.waiting.retain(|(waiting, _)| *waiting != consumer);
            self.end_session(consumer);
        }
    }

    /// Lets a consumer be handed messages until it has been handed `limit` in all. Its link
    /// counts what it took the same way, so what it asks for is exact whatever deliveries
    /// are on their way (a demand it raised or lowered by a difference would miss them).
    pub fn set_limit(&mut self, consumer: ConsumerId, limit: u64) {
        let Some(state) = self.consumers.get_mut(&consumer) else {
            return;
        };
        state.limit = limit;
        self.make_ready(consumer);
    }

    /// Adds (or with a negative delta takes back) demand of a consumer, as a link raising or
    /// lowering its credit asks.
    #[cfg(test)]
    pub fn add_credit(&mut self, consumer: ConsumerId, delta: i64) {
        let Some(state) = self.consumers.get(&consumer) else {
            return;
        };
        let demand = i64::try_from(state.demand()).unwrap_or(i64::MAX);
        let limit = state.delivered + u64::try_from((demand + delta).max(0)).unwrap_or(0);
        self.set_limit(consumer, limit);
    }

    /// The consumer's connection forwarded `bytes` of its deliveries to the socket: its
    /// window has room again. Returns whether a drain waits to go on.
    pub fn forwarded(&mut self, consumer: ConsumerId, bytes: u64) -> bool {
        let Some(state) = self.consumers.get_mut(&consumer) else {
            return false;
        };
        state.in_flight = state.in_flight.saturating_sub(bytes);
        let draining = state.draining;
        if !draining {
            self.make_ready(consumer);
        }
        draining
    }

    /// Puts a consumer that can take a message into the round-robin queue; one with a
    /// selector only while it has a candidate (see the `select` module).
    /// A browser never joins it: each dispatch shows it what it has not seen.
    pub(super) fn make_ready(&mut self, consumer: ConsumerId) {
        let visible_below = self.visible_below;
        if let Some(state) = self.consumers.get_mut(&consumer) {
            let takes = state.mode != ReceiveMode::Browse
                && (state.selection.as_ref())
                    .is_none_or(|selection| selection.has_candidate(visible_below));
            if takes && state.can_take() && !state.ready && !state.draining {
                state.ready = true;
                self.ready.push_back(consumer);
            }
        }
    }

    /// Hands available messages to consumers with demand, one each in turn, after showing
    /// browsers what they have not seen. Selectors read messages through `reader`.
    pub fn dispatch(&mut self, now_ms: i64, reader: &mut Reader) -> Vec<Delivery> {
        let mut out = self.show_to_browsers(reader);
        if self.sessions.is_some() {
            out.extend(self.dispatch_sessions(now_ms));
            return out;
        }
        while self.has_deliverable() {
            let Some(consumer) = self.ready.pop_front() else {
                break;
            };
            let Some(state) = self.consumers.get_mut(&consumer) else {
                continue;
            };
            if !state.can_take() || state.draining {
                state.ready = false;
                continue;
            }
            let (mode, selects) = (state.mode, state.selection.is_some());
            let delivery =
                self.deliver_next(consumer, mode, now_ms, selects.then_some(&mut *reader));
            let delivered = delivery.is_some();
            if let Some(delivery) = delivery {
                if let Some(state) = self.consumers.get_mut(&consumer) {
                    state.delivered += 1;
                }
                out.push(delivery);
            }
            let Some(state) = self.consumers.get_mut(&consumer) else {
                continue;
            };
            // A selector consumer that found nothing waits for a message made available.
            if state.can_take() && (delivered || !selects) {
                self.ready.push_back(consumer);
            } else {
                state.ready = false;
            }
        }
        out
    }

    /// Delivers what is available to one consumer up to its demand, then zeroes the demand.
    /// Returns the deliveries and whether the drain is finished; one stopped by the
    /// consumer's window goes on when [`QueueCore::forwarded`] says so. A selector consumer's
    /// drain ends when no available message matches.
    pub fn drain(
        &mut self,
        consumer: ConsumerId,
        now_ms: i64,
        reader: &mut Reader,
    ) -> (Vec<Delivery>, bool) {
        let mut out = Vec::new();
        let Some(taker) =
            (self.consumers.get(&consumer)).map(|state| (state.mode, state.selection.is_some()))
        else {
            return (out, true);
        };
        if taker.0 == ReceiveMode::Browse {
            return self.drain_browser(consumer, reader);
        }
        loop {
            let deliverable = self.has_deliverable_for(consumer);
            let Some(state) = self.consumers.get_mut(&consumer) else {
                return (out, true);
            };
            if state.demand() == 0 || !deliverable {
                state.stop();
                state.draining = false;
                return (out, true);
            }
            if !state.can_take() {
                state.draining = true;
                return (out, false);
            }
            let (mode, selects) = taker;
            let delivered =
                self.deliver_next(consumer, mode, now_ms, selects.then_some(&mut *reader));
            let Some(state) = self.consumers.get_mut(&consumer) else {
                return (out, true);
            };
            match delivered {
                Some(delivery) => {
                    state.delivered += 1;
                    out.push(delivery);
                }
                None => {
                    state.stop();
                    state.draining = false;
                    return (out, true);
                }
            }
        }
    }

    /// Applies one settlement from the consumer that holds the lock.
    ///
    /// # Errors
    /// [`EntityError::LockLost`] when the message is gone, not locked, or locked under
    /// another token (its lock expired and it was delivered again).
    pub fn settle(
        &mut self,
        consumer: ConsumerId,
        lock: LockRef,
        settlement: &Settlement,
    ) -> Result<(), EntityError> {
        let held = self
            .messages
            .get(&lock.seq)
            .and_then(|entry| entry.lock)
            .filter(|held| held.token == lock.token && held.consumer == consumer)
            .ok_or_else(|| self.lock_lost(consumer))?;
        if let Settlement::DeadLetter { .. } = settlement {
            if !self.rules.dead_letter_allowed {
                return Err(EntityError::NotAllowed(
                    "a message in a dead-letter queue cannot be dead-lettered again",
                ));
            }
        }
        self.lock_expiry.remove(&(held.until_ms, lock.seq));
        match settlement {
            Settlement::Complete if consumer == FORWARDER => {
                self.activity.forwarded += 1;
                self.remove(lock.seq);
            }
            Settlement::Complete => {
                self.activity.consumed += 1;
                self.remove(lock.seq);
            }
            Settlement::Release => self.unlock(lock.seq, false),
            Settlement::Abandon(_) => self.unlock(lock.seq, true),
            Settlement::Defer(_) => self.defer(lock.seq),
            Settlement::DeadLetter {
                reason,
                description,
                properties,
            } => {
                let mut all = dead_letter_properties(reason.clone(), description.clone());
                all.extend(properties.iter().cloned());
                // A settlement, not a failed delivery: the message keeps its count, as in
                // Service Bus (only an abandon, a deferral or a lapsed lock counts one).
                self.dead_letter(lock.seq, all);
            }
        }
        Ok(())
    }

    /// Sets a locked message aside: unlocked, out of the ready index, counted as delivered.
    fn defer(&mut self, seq: i64) {
        if let Some(entry) = self.messages.get_mut(&seq) {
            if let Some(lock) = entry.lock.take() {
                self.tokens.remove(&lock.token);
            }
            entry.record.state = MessageState::Deferred;
            if self.rules.counts_deliveries {
                entry.record.delivery_count = entry.record.delivery_count.saturating_add(1);
            }
            let record = entry.record;
            self.journal.push(Change::Update { seq, record });
            self.forget(seq);
            self.index(seq, &record);
        }
    }

    /// Removes a message for the dead-letter queue.
    fn dead_letter(&mut self, seq: i64, properties: Properties) {
        if let Some(entry) = self.messages.get(&seq) {
            let record = entry.record;
            let reason = properties.iter().find_map(|(key, value)| match value {
                SimpleValue::String(reason) if key == wire::dead_letter::REASON => {
                    Some(reason.as_str())
                }
                _ => None,
            });
            self.activity.dead_lettered(reason);
            self.remove(seq);
            self.dead_letters.push(DeadLetter {
                seq,
                record,
                properties,
            });
        }
    }

    /// Takes back a delivery that never reached the client (its link had no credit left):
    /// unlocked without counting, or (receive-and-delete) stored again under its own sequence
    /// number, or (a browser's copy) shown again; the consumer's demand is zero until its link
    /// asks again.
    /// Returns whether a drain of the consumer waits to go on.
    pub fn give_back(&mut self, delivery: Delivery) -> bool {
        let draining = self.forwarded(delivery.consumer, u64::from(delivery.record.size));
        // Its link had no credit left: nothing more until the link asks again (its
        // connection counts the consumer as owing nothing).
        if let Some(state) = self.consumers.get_mut(&delivery.consumer) {
            state.stop();
            if state.mode == ReceiveMode::Browse {
                state.shown_from = state.shown_from.min(delivery.seq);
            }
        }
        match delivery.lock_token {
            Some(token) => {
                let held = self
                    .messages
                    .get(&delivery.seq)
                    .and_then(|entry| entry.lock);
                if let Some(lock) = held.filter(|lock| lock.token == token) {
                    self.lock_expiry.remove(&(lock.until_ms, delivery.seq));
                    self.unlock(delivery.seq, false);
                }
            }
            // A browser's copy: the message never left.
            None if self.messages.contains_key(&delivery.seq) => {}
            None => {
                let record = Record {
                    size: u32::try_from(delivery.bytes.len()).unwrap_or(u32::MAX),
                    ..delivery.record
                };
                let session = delivery.session.as_deref();
                self.insert(delivery.seq, record, delivery.bytes, session);
            }
        }
        draining
    }

    /// Unlocks every message whose lock ran out by `now_ms`; each counts a delivery. Ends
    /// the session locks that ran out too (see [`QueueCore::take_lapsed`]). Returns how many
    /// message locks expired.
    pub fn expire_locks(&mut self, now_ms: i64) -> usize {
        self.end_lapsed_sessions(now_ms);
        let mut expired = 0;
        while let Some(&(until, seq)) = self.lock_expiry.first() {
            if until > now_ms {
                break;
            }
            self.lock_expiry.remove(&(until, seq));
            self.unlock(seq, true);
            expired += 1;
            self.activity.lock_expirations += 1;
        }
        expired
    }

    /// When the next lock ends, or a session receiver stops waiting. (Expiry needs no
    /// deadline: the sweeper asks for it.)
    pub fn next_lock_expiry_ms(&self) -> Option<i64> {
        let sessions = self.sessions.as_ref().and_then(Sessions::next_lock_end_ms);
        let waiting = self.waiting.iter().map(|(_, until)| *until).min();
        [
            self.lock_expiry.first().map(|(until, _)| *until),
            sessions,
            waiting,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether a message can be delivered now. `available` is ordered: if its first message
    /// is not durable yet, none is.
    fn has_deliverable(&self) -> bool {
        self.available
            .first()
            .is_some_and(|seq| *seq < self.visible_below)
    }

    fn lock_holder(&self, seq: i64) -> Option<ConsumerId> {
        self.messages
            .get(&seq)
            .and_then(|entry| entry.lock)
            .map(|lock| lock.consumer)
    }

    /// Makes a message available again; a counted delivery that reaches the entity's
    /// `max_delivery_count` dead-letters it instead.
    fn unlock(&mut self, seq: i64, count_delivery: bool) {
        let Some(entry) = self.messages.get_mut(&seq) else {
            return;
        };
        if let Some(lock) = entry.lock.take() {
            self.tokens.remove(&lock.token);
        }
        // A deferred message stays deferred whatever happens to its lock.
        if !count_delivery || !self.rules.counts_deliveries {
            let record = entry.record;
            self.index(seq, &record);
            return;
        }
        entry.record.delivery_count = entry.record.delivery_count.saturating_add(1);
        let count = entry.record.delivery_count;
        if count >= self.rules.max_delivery_count && self.rules.dead_letter_allowed {
            let properties = dead_letter_properties(
                Some(wire::dead_letter::MAX_DELIVERY_COUNT_EXCEEDED.to_string()),
                Some(format!(
                    "Message could not be consumed after {count} delivery attempts."
                )),
            );
            self.dead_letter(seq, properties);
            return;
        }
        let record = entry.record;
        self.journal.push(Change::Update { seq, record });
        // Its delivery count (`JMSXDeliveryCount`) changed: selectors judge it again.
        self.forget(seq);
        self.index(seq, &record);
    }

    /// Takes the first available message for `consumer` (with `selecting`, the first its
    /// selector selects): locked in peek-lock, removed in receive-and-delete. The delivery's
    /// bytes are left empty for the actor to read from the log.
    fn deliver_next(
        &mut self,
        consumer: ConsumerId,
        mode: ReceiveMode,
        now_ms: i64,
        mut selecting: Option<&mut Reader>,
    ) -> Option<Delivery> {
        loop {
            let seq = match (&mut selecting, self.sessions.is_some()) {
                (Some(reader), _) => self.next_selected(consumer, reader)?,
                (None, true) => self.next_session_message(consumer)?,
                (None, false) if self.has_deliverable() => self.available.pop_first()?,
                (None, false) => return None,
            };
            if self.has_expired(seq, now_ms) {
                self.expire(seq);
                continue;
            }
            return self.take(seq, consumer, mode, now_ms);
        }
    }

    /// Whether a message's time to live ran out (never in a queue where nothing expires).
    fn has_expired(&self, seq: i64, now_ms: i64) -> bool {
        self.rules.expires
            && self
                .messages
                .get(&seq)
                .is_some_and(|entry| entry.record.expires_ms <= now_ms)
    }

    /// Hands out one unlocked message: locked under a new token in peek-lock, removed in
    /// receive-and-delete.
    fn take(
        &mut self,
        seq: i64,
        consumer: ConsumerId,
        mode: ReceiveMode,
        now_ms: i64,
    ) -> Option<Delivery> {
        let session = self.session_of(seq);
        let (record, lock) = match mode {
            ReceiveMode::ReceiveAndDelete => {
                let record = self.messages.get(&seq)?.record;
                self.activity.consumed += 1;
                self.remove(seq);
                (record, None)
            }
            ReceiveMode::PeekLock => {
                // A session's messages are locked as long as the session is.
                let session_lock = self.session_lock_of(seq);
                let lock = Lock {
                    token: lock_token(),
                    consumer,
                    until_ms: session_lock.map_or_else(
                        || now_ms.saturating_add(self.rules.lock_duration_ms),
                        |lock| lock.until_ms,
                    ),
                };
                let entry = self.messages.get_mut(&seq)?;
                entry.lock = Some(lock);
                self.expiry.remove(&(entry.record.expires_ms, seq));
                // The forwarder's locks last until its target answers (or the broker stops).
                if session_lock.is_none() && consumer != FORWARDER {
                    self.lock_expiry.insert((lock.until_ms, seq));
                }
                self.tokens.insert(lock.token, seq);
                (entry.record, Some(lock))
            }
            // A browser is shown copies ([`QueueCore::show_next`]), never handed a message.
            ReceiveMode::Browse => return None,
        };
        if let Some(state) = self.consumers.get_mut(&consumer) {
            state.in_flight += u64::from(record.size);
        }
        Some(Delivery {
            consumer,
            seq,
            lock_token: lock.map(|lock| lock.token),
            record,
            session,
            bytes: Bytes::new(),
            stamp: stamp(seq, &record, lock, false),
        })
    }

    /// Locks available messages for the entity's forwarding under [`FORWARDER`], up to
    /// `count` messages or, past the first, `bytes` of them: their locks never expire, and
    /// the forwarder settles each (complete once its target stored it, release otherwise).
    /// The deliveries' bytes are left empty for the actor to read from the log.
    pub fn take_for_forwarding(&mut self, count: usize, bytes: u64, now_ms: i64) -> Vec<Delivery> {
        let mut taken: Vec<Delivery> = Vec::new();
        let mut size = 0;
        while taken.len() < count && (taken.is_empty() || size < bytes) {
            let Some(delivery) = self.deliver_next(FORWARDER, ReceiveMode::PeekLock, now_ms, None)
            else {
                break;
            };
            size += u64::from(delivery.record.size);
            taken.push(delivery);
        }
        taken
    }

    /// Up to `count` messages (of `session` only, when given) from sequence number `from`
    /// on, in any state, locked or not, with the stamp a delivery would carry; nothing
    /// changes.
    pub fn peek(
        &self,
        from: i64,
        count: usize,
        session: Option<&str>,
    ) -> Vec<(i64, DeliveryStamp)> {
        let stamped = |seq: i64| {
            let entry = self.messages.get(&seq)?;
            Some((seq, stamp(seq, &entry.record, entry.lock, true)))
        };
        match (session, &self.sessions) {
            (Some(id), Some(table)) => table
                .messages(id)
                .filter(|seq| *seq >= from)
                .take(count)
                .filter_map(stamped)
                .collect(),
            (Some(_), None) => Vec::new(),
            (None, _) => self
                .messages
                .range(from..)
                .take(count)
                .filter_map(|(seq, _)| stamped(*seq))
                .collect(),
        }
    }

    /// Extends the lock of a message by the entity's lock duration; returns the new expiry.
    ///
    /// # Errors
    /// [`EntityError::LockLost`] when the token holds no lock.
    pub fn renew_lock(&mut self, token: Uuid, now_ms: i64) -> Result<i64, EntityError> {
        let seq = *self
            .tokens
            .get(&token)
            .ok_or_else(|| self.lock_lost(MANAGEMENT))?;
        // A session's messages are locked as long as the session: renew-session-lock.
        if let Some(lock) = self.session_lock_of(seq) {
            return Ok(lock.until_ms);
        }
        let entry = self.messages.get_mut(&seq).ok_or(EntityError::LockLost)?;
        let lock = entry
            .lock
            .as_mut()
            .filter(|lock| lock.token == token)
            .ok_or(EntityError::LockLost)?;
        self.lock_expiry.remove(&(lock.until_ms, seq));
        lock.until_ms = now_ms.saturating_add(self.rules.lock_duration_ms);
        self.lock_expiry.insert((lock.until_ms, seq));
        Ok(lock.until_ms)
    }

    /// Takes a deferred message by sequence number (`receive-by-sequence-number`): locked
    /// under a management lock, or removed in receive-and-delete. It stays deferred. In a
    /// lane with sessions the message must be of `session`, whose lock then covers it.
    ///
    /// # Errors
    /// As [`QueueCore::check_deferred`]; an expired message leaves the queue then.
    pub fn receive_deferred(
        &mut self,
        seq: i64,
        mode: ReceiveMode,
        now_ms: i64,
        session: Option<&str>,
    ) -> Result<Delivery, EntityError> {
        if let Err(error) = self.check_deferred(seq, now_ms, session) {
            if self.has_expired(seq, now_ms) && self.is_deferred_unlocked(seq, session) {
                self.expire(seq);
            }
            return Err(error);
        }
        self.take(seq, MANAGEMENT, mode, now_ms)
            .ok_or(EntityError::MessageNotFound(seq, "deferred"))
    }

    /// Whether [`QueueCore::receive_deferred`] would take `seq` now; changes nothing, so that a
    /// request for several messages takes all of them or none.
    ///
    /// # Errors
    /// [`EntityError::MessageNotFound`] when no unlocked, unexpired deferred message (of
    /// `session`) has that number, and [`EntityError::SessionLockLost`] when nobody holds its
    /// session.
    pub fn check_deferred(
        &self,
        seq: i64,
        now_ms: i64,
        session: Option<&str>,
    ) -> Result<(), EntityError> {
        let not_found = EntityError::MessageNotFound(seq, "deferred");
        if !self.is_deferred_unlocked(seq, session) {
            return Err(not_found);
        }
        if let Some(id) = session.filter(|_| self.sessions.is_some()) {
            if self.session_lock_of(seq).is_none() {
                return Err(EntityError::SessionLockLost(id.into()));
            }
        }
        if self.has_expired(seq, now_ms) {
            return Err(not_found);
        }
        Ok(())
    }

    /// Whether `seq` is an unlocked deferred message (of `session`, in a lane with sessions).
    fn is_deferred_unlocked(&self, seq: i64, session: Option<&str>) -> bool {
        self.messages.get(&seq).is_some_and(|entry| {
            entry.record.state == MessageState::Deferred
                && entry.lock.is_none()
                && entry.session.as_deref() == session.filter(|_| self.sessions.is_some())
        })
    }

    /// The holder and the message of a lock token, while the lock lasts.
    pub fn lock_of(&self, token: Uuid) -> Option<(ConsumerId, LockRef)> {
        let seq = *self.tokens.get(&token)?;
        let holder = self.lock_holder(seq)?;
        Some((holder, LockRef { seq, token }))
    }

    /// Whether `consumer` holds the lock `lock` names (a transaction settles it later).
    pub fn holds(&self, consumer: ConsumerId, lock: LockRef) -> bool {
        self.messages
            .get(&lock.seq)
            .and_then(|entry| entry.lock)
            .is_some_and(|held| held.token == lock.token && held.consumer == consumer)
    }

    /// Settles a locked message by its token, whoever holds the lock (`update-disposition`).
    ///
    /// # Errors
    /// As [`QueueCore::settle`].
    pub fn settle_by_token(
        &mut self,
        token: Uuid,
        settlement: &Settlement,
    ) -> Result<i64, EntityError> {
        let lost = || self.lock_lost(MANAGEMENT);
        let seq = *self.tokens.get(&token).ok_or_else(lost)?;
        let holder = self.lock_holder(seq).ok_or_else(lost)?;
        self.settle(holder, LockRef { seq, token }, settlement)?;
        Ok(seq)
    }
}

/// A fresh lock token: random, but for its last two bytes, left zero for the entity's
/// actor to write its partition into (see [`crate::entity::partition::Partition::mark`]).
fn lock_token() -> Uuid {
    let mut bytes = *Uuid::new_v4().as_bytes();
    bytes[14..].fill(0);
    Uuid::from_bytes(bytes)
}

/// The consumer id of locks taken through the management node (no link holds them).
pub const MANAGEMENT: ConsumerId = ConsumerId(0);
/// The consumer id of locks the entity's forwarding holds (links are numbered from 1 up).
pub const FORWARDER: ConsumerId = ConsumerId(u64::MAX);

/// What a delivery of `record` says about it: zero-based delivery count, sequence number,
/// enqueued time, state, the lock when there is one (a peek shows until when, never the
/// token), and the effective time to live with the expiry it gives.
fn stamp(seq: i64, record: &Record, lock: Option<Lock>, peek: bool) -> DeliveryStamp {
    let state = i32::from(record.shown_state().code());
    let expires_ms = (record.expires_ms != NEVER).then_some(record.expires_ms);
    let mut annotations = Vec::with_capacity(4);
    annotations.extend([
        (wire::annotation::SEQUENCE_NUMBER, Value::Long(seq)),
        (
            wire::annotation::ENQUEUED_TIME,
            Value::Timestamp(Timestamp::from_milliseconds(record.enqueued_ms)),
        ),
    ]);
    // Service Bus states a message's state on peek, and on delivery only when it is not
    // active (a deferred message received by sequence number).
    if peek || state != 0 {
        annotations.push((wire::annotation::MESSAGE_STATE, Value::Int(state)));
    }
    if let Some(lock) = lock {
        annotations.push((
            wire::annotation::LOCKED_UNTIL,
            Value::Timestamp(Timestamp::from_milliseconds(lock.until_ms)),
        ));
    }
    DeliveryStamp {
        delivery_count: record.delivery_count,
        annotations,
        lock_token: lock.filter(|_| !peek).map(|lock| lock.token),
        presettled: !peek && lock.is_none(),
        ttl_ms: expires_ms.and_then(|at| u32::try_from(at - record.enqueued_ms).ok()),
        expires_ms,
    }
}

/// The dead-letter application properties (strings, as Service Bus writes them).
pub fn dead_letter_properties(reason: Option<String>, description: Option<String>) -> Properties {
    [
        (wire::dead_letter::REASON, reason),
        (wire::dead_letter::DESCRIPTION, description),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.map(|v| (key.to_string(), SimpleValue::String(v))))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reasons are client text: the counts by reason stay bounded whatever clients send.
    #[test]
    fn dead_letter_reasons_are_counted_apart_up_to_a_bound() {
        let mut activity = LaneActivity::default();
        activity.dead_lettered(Some("BadInput"));
        activity.dead_lettered(Some("BadInput"));
        activity.dead_lettered(None);
        assert_eq!(
            activity.dead_lettered,
            vec![("BadInput".to_owned(), 2), (NO_REASON.to_owned(), 1)]
        );
        for n in 0..100 {
            activity.dead_lettered(Some(&format!("reason {n}")));
        }
        activity.dead_lettered(Some("BadInput"));
        assert_eq!(activity.dead_lettered.len(), MAX_REASONS + 1);
        let count = |reason: &str| {
            activity
                .dead_lettered
                .iter()
                .find(|(r, _)| r == reason)
                .map(|(_, count)| *count)
        };
        assert_eq!(count("BadInput"), Some(3), "a known reason keeps counting");
        assert_eq!(count(OTHER_REASONS), Some(100 - (MAX_REASONS as u64 - 2)));
        let total: u64 = activity.dead_lettered.iter().map(|(_, count)| count).sum();
        assert_eq!(total, 104, "every dead-lettering is counted once");
    }
}
