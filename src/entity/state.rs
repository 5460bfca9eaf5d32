//! The pure rules of a queue (design.md D5 and §4): sequence numbers, the ready index,
//! consumers' demand, locks and settlement, scheduled messages and time to live. Time comes in
//! as `now_ms`; nothing here awaits or sleeps.
//!
//! The state holds per-message records only; message bytes live in the entity's log. Every
//! change that must be stored is appended to a journal the actor writes after each batch.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use bytes::Bytes;
use fe2o3_amqp::types::primitives::{SimpleValue, Timestamp, Value};
use uuid::Uuid;

use crate::entity::handle::{
    ConsumerId, Delivery, EntityError, LockRef, Properties, ReceiveMode, Settlement,
};
use crate::message::{Arrival, DeliveryStamp};
use crate::node::wire;
use crate::store::record::{MessageState, Record, NEVER};
use crate::store::{Change, Recovered};

/// One stored message: its broker record and, while delivered, its lock.
#[derive(Debug)]
struct Entry {
    /// `delivery_count` is the deliveries counted so far, written zero-based into
    /// `header.delivery-count`.
    record: Record,
    lock: Option<Lock>,
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
    demand: u32,
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
}

impl Consumer {
    fn can_take(&self) -> bool {
        self.demand > 0 && self.in_flight < self.window
    }
}

/// The entity settings the rules apply.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// How long a peek-lock delivery holds its message.
    pub lock_duration_ms: i64,
    /// Sends beyond this many stored bytes are refused.
    pub max_size_bytes: u64,
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
}

impl Rules {
    /// The rules of a dead-letter queue: no delivery limit, no dead-lettering, no size limit
    /// of its own (its messages were admitted by the queue).
    pub fn dead_letter_queue(lock_duration_ms: i64) -> Rules {
        Rules {
            lock_duration_ms,
            max_size_bytes: u64::MAX,
            max_delivery_count: u32::MAX,
            dead_letter_allowed: false,
            default_ttl_ms: NEVER,
            expires: false,
            dead_letter_on_expiry: false,
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

/// A queue's state: everything the actor owns, minus the I/O.
#[derive(Debug)]
pub struct QueueState {
    rules: Rules,
    size_bytes: u64,
    next_seq: i64,
    /// Messages numbered from here on are not durable yet and must not be delivered: a
    /// receiver that saw a sequence number a crash then lost would see it reused.
    visible_below: i64,
    last_enqueued_ms: i64,
    messages: BTreeMap<i64, Entry>,
    /// Sequence numbers of unlocked active messages, in delivery order.
    available: BTreeSet<i64>,
    /// (due time, sequence number) of every scheduled message: the timer wheel.
    scheduled: BTreeSet<(i64, i64)>,
    /// (expiry, sequence number) of every unlocked, unscheduled message that expires.
    expiry: BTreeSet<(i64, i64)>,
    /// (lock expiry, sequence number) of every locked message.
    lock_expiry: BTreeSet<(i64, i64)>,
    /// Sequence number of each live lock token (for renew-lock and update-disposition).
    tokens: HashMap<Uuid, i64>,
    consumers: HashMap<ConsumerId, Consumer>,
    /// Consumers with demand, in round-robin order.
    ready: VecDeque<ConsumerId>,
    /// Changes not yet written to the log.
    journal: Vec<Change>,
    /// See [`QueueState::journal_moves`].
    journal_moves: bool,
    /// Messages removed for dead-lettering, not yet handed to the dead-letter queue.
    dead_letters: Vec<DeadLetter>,
}

impl QueueState {
    /// An empty queue whose next message gets sequence number 1.
    pub fn new(rules: Rules) -> Self {
        Self::recover(rules, Recovered::default())
    }

    /// A queue rebuilt from its log. Locks are volatile: every message is available again
    /// (deferred ones stay deferred, scheduled ones scheduled).
    pub fn recover(rules: Rules, recovered: Recovered) -> Self {
        let mut state = Self {
            rules,
            size_bytes: 0,
            next_seq: recovered.next_seq.max(1),
            visible_below: 0,
            last_enqueued_ms: 0,
            messages: BTreeMap::new(),
            available: BTreeSet::new(),
            scheduled: BTreeSet::new(),
            expiry: BTreeSet::new(),
            lock_expiry: BTreeSet::new(),
            tokens: HashMap::new(),
            consumers: HashMap::new(),
            ready: VecDeque::new(),
            journal: Vec::new(),
            journal_moves: false,
            dead_letters: Vec::new(),
        };
        for (seq, record) in recovered.records {
            state.size_bytes += u64::from(record.size);
            state.last_enqueued_ms = state.last_enqueued_ms.max(record.enqueued_ms);
            state.next_seq = state.next_seq.max(seq + 1);
            state.messages.insert(seq, Entry { record, lock: None });
            state.index(seq, &record);
        }
        state.visible_below = state.next_seq;
        state
    }

    /// The sequence number the next message gets.
    pub fn next_seq(&self) -> i64 {
        self.next_seq
    }

    /// Makes messages numbered below `next_seq` deliverable: their writes are durable.
    pub fn publish_up_to(&mut self, next_seq: i64) {
        self.visible_below = self.visible_below.max(next_seq);
    }

    /// Whether stored messages wait for their durability point before they can be delivered.
    pub fn has_unpublished(&self) -> bool {
        self.visible_below < self.next_seq
    }

    /// The changes made since the last call, to be written to the log.
    pub fn take_changes(&mut self) -> Vec<Change> {
        self.journal_moves = false;
        std::mem::take(&mut self.journal)
    }

    /// Whether the journal deletes a message and stores it again under a new number (a
    /// scheduled message's activation): such changes must be written atomically.
    pub fn journal_moves(&self) -> bool {
        self.journal_moves
    }

    /// Messages removed for dead-lettering since the last call.
    pub fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        std::mem::take(&mut self.dead_letters)
    }

    /// Stores a message dead-lettered by the parent queue under its own sequence number,
    /// receivable at once.
    pub fn accept_dead_letter(&mut self, seq: i64, record: Record, body: Bytes) {
        let record = Record {
            state: MessageState::Active,
            size: u32::try_from(body.len()).unwrap_or(u32::MAX),
            ..record
        };
        self.next_seq = self.next_seq.max(seq + 1);
        self.visible_below = self.visible_below.max(seq + 1);
        self.insert(seq, record, body);
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
        }
    }

    /// Number of stored messages (locked or not).
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the queue holds no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Stores messages with consecutive sequence numbers and one enqueued time that never goes
    /// backwards. A message whose scheduled enqueue time is still ahead is stored scheduled.
    /// Returns the first sequence number.
    ///
    /// # Errors
    /// [`EntityError::QuotaExceeded`] when the messages would take the queue past its size
    /// limit; nothing is stored then.
    pub fn enqueue(&mut self, now_ms: i64, messages: Vec<Arrival>) -> Result<i64, EntityError> {
        let adding: u64 = messages.iter().map(|m| m.bytes.len() as u64).sum();
        if self.size_bytes + adding > self.rules.max_size_bytes {
            return Err(EntityError::QuotaExceeded {
                size: self.size_bytes,
                max: self.rules.max_size_bytes,
            });
        }
        let first = self.next_seq;
        let enqueued_ms = self.enqueued_time(now_ms);
        for arrival in messages {
            let due = arrival.scheduled_ms.filter(|due| *due > now_ms);
            self.append(enqueued_ms, arrival, due);
        }
        self.journal.push(Change::NextSeq(self.next_seq));
        Ok(first)
    }

    /// Sequence numbers of the scheduled messages due by `now_ms`, earliest first, at most
    /// `limit` of them.
    pub fn due_scheduled(&self, now_ms: i64, limit: usize) -> Vec<i64> {
        self.scheduled
            .iter()
            .take_while(|(due, _)| *due <= now_ms)
            .take(limit)
            .map(|(_, seq)| *seq)
            .collect()
    }

    /// Activates scheduled messages (their bytes given back by the caller): each leaves the
    /// queue and is enqueued again as if sent now, under a new sequence number and enqueued
    /// time, its time to live counting from now. Numbers no longer scheduled are skipped.
    pub fn activate(&mut self, now_ms: i64, due: Vec<(i64, Arrival)>) {
        let enqueued_ms = self.enqueued_time(now_ms);
        for (seq, arrival) in due {
            let scheduled = self
                .messages
                .get(&seq)
                .is_some_and(|entry| entry.record.state == MessageState::Scheduled);
            if scheduled {
                self.remove(seq);
                self.append(enqueued_ms, arrival, None);
                self.journal_moves = true;
            }
        }
        self.journal.push(Change::NextSeq(self.next_seq));
    }

    /// Deletes scheduled messages (`cancel-scheduled-message`), all or none.
    ///
    /// # Errors
    /// [`EntityError::MessageNotFound`] when a number is not a scheduled message (it may have
    /// been activated already: activation wins over a cancel); nothing is deleted then.
    pub fn cancel_scheduled(&mut self, seqs: &[i64]) -> Result<(), EntityError> {
        let missing = seqs.iter().find(|seq| {
            self.messages
                .get(seq)
                .is_none_or(|entry| entry.record.state != MessageState::Scheduled)
        });
        if let Some(seq) = missing {
            return Err(EntityError::MessageNotFound(*seq, "scheduled"));
        }
        for seq in seqs {
            self.remove(*seq);
        }
        Ok(())
    }

    /// Whether a consumer waits for messages (holds credit): auto-delete counts it as activity.
    pub fn has_waiting_consumer(&self) -> bool {
        self.consumers.values().any(|consumer| consumer.demand > 0)
    }

    /// Whether scheduled messages wait for their time.
    pub fn has_scheduled(&self) -> bool {
        !self.scheduled.is_empty()
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

    /// The enqueued time of messages accepted at `now_ms`: never earlier than the last one.
    fn enqueued_time(&mut self, now_ms: i64) -> i64 {
        self.last_enqueued_ms = now_ms.max(self.last_enqueued_ms);
        self.last_enqueued_ms
    }

    /// Stores one message under the next sequence number: scheduled when `due` is set, else
    /// active with its expiry computed from `enqueued_ms`.
    fn append(&mut self, enqueued_ms: i64, arrival: Arrival, due: Option<i64>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let (state, expires_ms, scheduled_ms) = match due {
            Some(due) => (MessageState::Scheduled, NEVER, due),
            None => (
                MessageState::Active,
                self.expiry_of(enqueued_ms, arrival.ttl_ms),
                0,
            ),
        };
        let record = Record {
            state,
            delivery_count: 0,
            enqueued_ms,
            size: u32::try_from(arrival.bytes.len()).unwrap_or(u32::MAX),
            expires_ms,
            scheduled_ms,
        };
        self.insert(seq, record, arrival.bytes);
    }

    /// `enqueued + min(message ttl, entity default)`; [`NEVER`] when both are unlimited.
    fn expiry_of(&self, enqueued_ms: i64, ttl_ms: Option<u32>) -> i64 {
        let ttl = ttl_ms.map_or(self.rules.default_ttl_ms, |ttl| {
            i64::from(ttl).min(self.rules.default_ttl_ms)
        });
        if ttl == NEVER {
            NEVER
        } else {
            enqueued_ms.saturating_add(ttl)
        }
    }

    fn insert(&mut self, seq: i64, record: Record, body: Bytes) {
        self.size_bytes += u64::from(record.size);
        self.messages.insert(seq, Entry { record, lock: None });
        self.index(seq, &record);
        self.journal.push(Change::Put { seq, record, body });
    }

    /// Files an unlocked message in the indexes its state calls for.
    fn index(&mut self, seq: i64, record: &Record) {
        match record.state {
            MessageState::Active => {
                self.available.insert(seq);
            }
            MessageState::Deferred => {}
            MessageState::Scheduled => {
                self.scheduled.insert((record.scheduled_ms, seq));
                return;
            }
        }
        if self.rules.expires && record.expires_ms != NEVER {
            self.expiry.insert((record.expires_ms, seq));
        }
    }

    /// Takes a message out of every index.
    fn unindex(&mut self, seq: i64, record: &Record) {
        self.available.remove(&seq);
        self.scheduled.remove(&(record.scheduled_ms, seq));
        self.expiry.remove(&(record.expires_ms, seq));
    }

    fn remove(&mut self, seq: i64) {
        if let Some(entry) = self.messages.remove(&seq) {
            if let Some(lock) = entry.lock {
                self.tokens.remove(&lock.token);
                self.lock_expiry.remove(&(lock.until_ms, seq));
            }
            self.unindex(seq, &entry.record);
            self.size_bytes -= u64::from(entry.record.size);
            self.journal.push(Change::Delete { seq });
        }
    }

    /// An expired message leaves: to the dead-letter queue with reason `TTLExpiredException`
    /// when the entity says so, else deleted.
    fn expire(&mut self, seq: i64) {
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
                demand: 0,
                ready: false,
                in_flight: 0,
                window,
                draining: false,
            },
        );
    }

    /// Removes a consumer. Its locks stay, as in Service Bus: nobody else receives those
    /// messages until the locks expire (then they come back with a counted delivery), and
    /// until then they can still be settled by lock token (`update-disposition`).
    pub fn unsubscribe(&mut self, consumer: ConsumerId) {
        self.consumers.remove(&consumer);
    }

    /// Adds (or with a negative delta takes back) demand of a consumer.
    pub fn add_credit(&mut self, consumer: ConsumerId, delta: i64) {
        let Some(state) = self.consumers.get_mut(&consumer) else {
            return;
        };
        let demand = (i64::from(state.demand) + delta).clamp(0, i64::from(u32::MAX));
        state.demand = u32::try_from(demand).unwrap_or(u32::MAX);
        self.make_ready(consumer);
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

    /// Puts a consumer that can take a message into the round-robin queue.
    fn make_ready(&mut self, consumer: ConsumerId) {
        if let Some(state) = self.consumers.get_mut(&consumer) {
            if state.can_take() && !state.ready && !state.draining {
                state.ready = true;
                self.ready.push_back(consumer);
            }
        }
    }

    /// Hands available messages to consumers with demand, one each in turn.
    pub fn dispatch(&mut self, now_ms: i64) -> Vec<Delivery> {
        let mut out = Vec::new();
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
            state.demand -= 1;
            let mode = state.mode;
            if let Some(delivery) = self.deliver_next(consumer, mode, now_ms) {
                out.push(delivery);
            }
            let Some(state) = self.consumers.get_mut(&consumer) else {
                continue;
            };
            if state.can_take() {
                self.ready.push_back(consumer);
            } else {
                state.ready = false;
            }
        }
        out
    }

    /// Delivers what is available to one consumer up to its demand, then zeroes the demand.
    /// Returns the deliveries and whether the drain is finished; one stopped by the
    /// consumer's window goes on when [`QueueState::forwarded`] says so.
    pub fn drain(&mut self, consumer: ConsumerId, now_ms: i64) -> (Vec<Delivery>, bool) {
        let mut out = Vec::new();
        let Some(mode) = self.consumers.get(&consumer).map(|state| state.mode) else {
            return (out, true);
        };
        loop {
            let deliverable = self.has_deliverable();
            let Some(state) = self.consumers.get_mut(&consumer) else {
                return (out, true);
            };
            if state.demand == 0 || !deliverable {
                state.demand = 0;
                state.draining = false;
                return (out, true);
            }
            if !state.can_take() {
                state.draining = true;
                return (out, false);
            }
            state.demand -= 1;
            match self.deliver_next(consumer, mode, now_ms) {
                Some(delivery) => out.push(delivery),
                None => {
                    if let Some(state) = self.consumers.get_mut(&consumer) {
                        state.demand = 0;
                        state.draining = false;
                    }
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
            .ok_or(EntityError::LockLost)?;
        if let Settlement::DeadLetter { .. } = settlement {
            if !self.rules.dead_letter_allowed {
                return Err(EntityError::NotAllowed(
                    "a message in a dead-letter queue cannot be dead-lettered again",
                ));
            }
        }
        self.lock_expiry.remove(&(held.until_ms, lock.seq));
        match settlement {
            Settlement::Complete => self.remove(lock.seq),
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
            entry.record.delivery_count = entry.record.delivery_count.saturating_add(1);
            let record = entry.record;
            self.journal.push(Change::Update { seq, record });
            self.index(seq, &record);
        }
    }

    /// Removes a message for the dead-letter queue.
    fn dead_letter(&mut self, seq: i64, properties: Properties) {
        if let Some(entry) = self.messages.get(&seq) {
            let record = entry.record;
            self.remove(seq);
            self.dead_letters.push(DeadLetter {
                seq,
                record,
                properties,
            });
        }
    }

    /// Takes back a delivery that never reached the client: unlocked without counting, or
    /// (receive-and-delete) stored again under its own sequence number.
    /// Returns whether a drain of the consumer waits to go on.
    pub fn give_back(&mut self, delivery: Delivery) -> bool {
        let draining = self.forwarded(delivery.consumer, u64::from(delivery.record.size));
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
            None => {
                let record = Record {
                    size: u32::try_from(delivery.bytes.len()).unwrap_or(u32::MAX),
                    ..delivery.record
                };
                self.insert(delivery.seq, record, delivery.bytes);
            }
        }
        draining
    }

    /// Unlocks every message whose lock ran out by `now_ms`; each counts a delivery.
    /// Returns how many expired.
    pub fn expire_locks(&mut self, now_ms: i64) -> usize {
        let mut expired = 0;
        while let Some(&(until, seq)) = self.lock_expiry.first() {
            if until > now_ms {
                break;
            }
            self.lock_expiry.remove(&(until, seq));
            self.unlock(seq, true);
            expired += 1;
        }
        expired
    }

    /// The next instant (ms) at which something happens without a command: a lock ends or a
    /// scheduled message is due. (Expiry needs no deadline: the sweeper asks for it.)
    pub fn next_deadline_ms(&self) -> Option<i64> {
        let lock = self.lock_expiry.first().map(|(until, _)| *until);
        let due = self.scheduled.first().map(|(due, _)| *due);
        lock.into_iter().chain(due).min()
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
        if !count_delivery {
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
        self.index(seq, &record);
    }

    /// Takes the first available message for `consumer`: locked in peek-lock, removed in
    /// receive-and-delete. The delivery's bytes are left empty for the actor to read from the
    /// log.
    fn deliver_next(
        &mut self,
        consumer: ConsumerId,
        mode: ReceiveMode,
        now_ms: i64,
    ) -> Option<Delivery> {
        while self.has_deliverable() {
            let seq = self.available.pop_first()?;
            if self.has_expired(seq, now_ms) {
                self.expire(seq);
                continue;
            }
            return self.take(seq, consumer, mode, now_ms);
        }
        None
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
        let (record, lock) = match mode {
            ReceiveMode::ReceiveAndDelete => {
                let record = self.messages.get(&seq)?.record;
                self.remove(seq);
                (record, None)
            }
            ReceiveMode::PeekLock => {
                let lock = Lock {
                    token: Uuid::new_v4(),
                    consumer,
                    until_ms: now_ms.saturating_add(self.rules.lock_duration_ms),
                };
                let entry = self.messages.get_mut(&seq)?;
                entry.lock = Some(lock);
                self.expiry.remove(&(entry.record.expires_ms, seq));
                self.lock_expiry.insert((lock.until_ms, seq));
                self.tokens.insert(lock.token, seq);
                (entry.record, Some(lock))
            }
        };
        if let Some(state) = self.consumers.get_mut(&consumer) {
            state.in_flight += u64::from(record.size);
        }
        Some(Delivery {
            consumer,
            seq,
            lock_token: lock.map(|lock| lock.token),
            record,
            bytes: Bytes::new(),
            stamp: stamp(seq, &record, lock, false),
        })
    }

    /// Up to `count` messages from sequence number `from` on, in any state, locked or not,
    /// with the stamp a delivery would carry; nothing changes.
    pub fn peek(&self, from: i64, count: usize) -> Vec<(i64, DeliveryStamp)> {
        self.messages
            .range(from..)
            .take(count)
            .map(|(seq, entry)| (*seq, stamp(*seq, &entry.record, None, true)))
            .collect()
    }

    /// Extends the lock of a message by the entity's lock duration; returns the new expiry.
    ///
    /// # Errors
    /// [`EntityError::LockLost`] when the token holds no lock.
    pub fn renew_lock(&mut self, token: Uuid, now_ms: i64) -> Result<i64, EntityError> {
        let seq = *self.tokens.get(&token).ok_or(EntityError::LockLost)?;
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
    /// under a management lock, or removed in receive-and-delete. It stays deferred.
    ///
    /// # Errors
    /// [`EntityError::MessageNotFound`] when no unlocked deferred message has that number
    /// (an expired one leaves the queue then).
    pub fn receive_deferred(
        &mut self,
        seq: i64,
        mode: ReceiveMode,
        now_ms: i64,
    ) -> Result<Delivery, EntityError> {
        let not_found = EntityError::MessageNotFound(seq, "deferred");
        let deferred = self.messages.get(&seq).is_some_and(|entry| {
            entry.record.state == MessageState::Deferred && entry.lock.is_none()
        });
        if !deferred {
            return Err(not_found);
        }
        if self.has_expired(seq, now_ms) {
            self.expire(seq);
            return Err(not_found);
        }
        self.take(seq, MANAGEMENT, mode, now_ms).ok_or(not_found)
    }

    /// Settles a locked message by its token, whoever holds the lock (`update-disposition`).
    ///
    /// # Errors
    /// As [`QueueState::settle`].
    pub fn settle_by_token(
        &mut self,
        token: Uuid,
        settlement: &Settlement,
    ) -> Result<i64, EntityError> {
        let seq = *self.tokens.get(&token).ok_or(EntityError::LockLost)?;
        let holder = self.lock_holder(seq).ok_or(EntityError::LockLost)?;
        self.settle(holder, LockRef { seq, token }, settlement)?;
        Ok(seq)
    }
}

/// The consumer id of locks taken through the management node (no link holds them).
pub const MANAGEMENT: ConsumerId = ConsumerId(0);

/// What a delivery of `record` says about it: zero-based delivery count, sequence number,
/// enqueued time, state, the lock when there is one, and the effective time to live with the
/// expiry it gives.
fn stamp(seq: i64, record: &Record, lock: Option<Lock>, peek: bool) -> DeliveryStamp {
    let state = i32::from(record.state.code());
    let expires_ms = (record.expires_ms != NEVER).then_some(record.expires_ms);
    let mut annotations = vec![
        (wire::annotation::SEQUENCE_NUMBER, Value::Long(seq)),
        (
            wire::annotation::ENQUEUED_TIME,
            Value::Timestamp(Timestamp::from_milliseconds(record.enqueued_ms)),
        ),
    ];
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
        lock_token: lock.map(|lock| lock.token),
        presettled: !peek && lock.is_none(),
        ttl_ms: expires_ms.and_then(|at| u32::try_from(at - record.enqueued_ms).ok()),
        expires_ms,
    }
}

/// The dead-letter application properties (strings, as Service Bus writes them).
fn dead_letter_properties(reason: Option<String>, description: Option<String>) -> Properties {
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

    const RULES: Rules = Rules {
        lock_duration_ms: 1_000,
        max_size_bytes: u64::MAX,
        max_delivery_count: 10,
        dead_letter_allowed: true,
        default_ttl_ms: NEVER,
        expires: true,
        dead_letter_on_expiry: false,
    };
    const A: ConsumerId = ConsumerId(1);
    const B: ConsumerId = ConsumerId(2);

    /// A message as it arrives, without time to live or schedule.
    fn plain(bytes: Bytes) -> Arrival {
        Arrival {
            bytes,
            ttl_ms: None,
            scheduled_ms: None,
        }
    }

    /// `n` empty messages.
    fn empties(n: usize) -> Vec<Arrival> {
        vec![plain(Bytes::new()); n]
    }

    fn queue_with(n: usize) -> QueueState {
        let mut q = QueueState::new(RULES);
        for i in 0..n {
            q.enqueue(10, vec![plain(Bytes::from(vec![i as u8]))])
                .expect("room");
        }
        q.publish_up_to(q.next_seq());
        q
    }

    fn lock_of(d: &Delivery) -> LockRef {
        LockRef {
            seq: d.seq,
            token: d.lock_token.expect("peek-lock delivery has a token"),
        }
    }

    #[test]
    fn sequence_numbers_are_gap_free_and_time_never_goes_back() {
        let mut q = QueueState::new(RULES);
        assert_eq!(q.enqueue(100, empties(2)), Ok(1));
        assert_eq!(q.enqueue(50, empties(1)), Ok(3));
        q.publish_up_to(q.next_seq());
        q.subscribe(A, ReceiveMode::ReceiveAndDelete, u64::MAX);
        q.add_credit(A, 10);
        let got = q.dispatch(0);
        assert_eq!(got.iter().map(|d| d.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
        let third = &got[2].stamp.annotations;
        assert!(third.contains(&(
            wire::annotation::ENQUEUED_TIME,
            Value::Timestamp(Timestamp::from_milliseconds(100))
        )));
        assert!(q.is_empty(), "receive-and-delete removes on send");
    }

    #[test]
    fn dispatch_respects_demand_and_alternates_consumers() {
        let mut q = queue_with(5);
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.subscribe(B, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 2);
        q.add_credit(B, 2);
        let got: Vec<(ConsumerId, i64)> =
            q.dispatch(0).iter().map(|d| (d.consumer, d.seq)).collect();
        assert_eq!(got, vec![(A, 1), (B, 2), (A, 3), (B, 4)]);
        assert!(q.dispatch(0).is_empty(), "no demand left");
        assert_eq!(q.len(), 5, "peek-lock keeps messages until settled");
    }

    #[test]
    fn settlements_complete_release_and_abandon() {
        let mut q = queue_with(3);
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 3);
        let got = q.dispatch(0);
        assert_eq!(q.settle(A, lock_of(&got[0]), &Settlement::Complete), Ok(()));
        assert_eq!(q.settle(A, lock_of(&got[1]), &Settlement::Release), Ok(()));
        assert_eq!(
            q.settle(A, lock_of(&got[2]), &Settlement::Abandon(Vec::new())),
            Ok(())
        );
        assert_eq!(
            q.settle(A, lock_of(&got[0]), &Settlement::Complete),
            Err(EntityError::LockLost)
        );
        q.add_credit(A, 5);
        let again = q.dispatch(0);
        let counts: Vec<(i64, u32)> = again
            .iter()
            .map(|d| (d.seq, d.stamp.delivery_count))
            .collect();
        assert_eq!(counts, vec![(2, 0), (3, 1)]);
    }

    #[test]
    fn locks_outlive_their_consumer_and_return_the_message_counted_when_they_expire() {
        let mut q = queue_with(2);
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 1);
        let first = q.dispatch(0).remove(0);
        q.unsubscribe(A);
        q.subscribe(B, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(B, 2);
        let others: Vec<i64> = q.dispatch(0).iter().map(|d| d.seq).collect();
        assert_eq!(
            others,
            vec![2],
            "the locked message stays locked after its consumer left"
        );
        assert_eq!(q.next_deadline_ms(), Some(1_000));
        assert_eq!(q.expire_locks(999), 0);
        assert_eq!(q.expire_locks(1_000), 2, "both locks ran out");
        q.add_credit(B, 1);
        let again = q.dispatch(1_000);
        let first_again = again.iter().find(|d| d.seq == first.seq).expect("back");
        assert_eq!(
            first_again.stamp.delivery_count, 1,
            "the expiry counts a delivery"
        );
        assert_eq!(
            q.settle(A, lock_of(&first), &Settlement::Complete),
            Err(EntityError::LockLost),
            "settling after the lock expired fails"
        );
    }

    #[test]
    fn the_message_state_is_stated_on_peek_and_for_messages_that_are_not_active() {
        let state_of = |stamp: &DeliveryStamp| {
            stamp
                .annotations
                .iter()
                .find(|(key, _)| *key == wire::annotation::MESSAGE_STATE)
                .map(|(_, value)| value.clone())
        };
        let mut q = queue_with(1);
        assert_eq!(state_of(&q.peek(0, 1)[0].1), Some(Value::Int(0)), "peek");
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 1);
        let delivered = q.dispatch(0).remove(0);
        assert_eq!(
            state_of(&delivered.stamp),
            None,
            "an active message's delivery"
        );
        assert!(!delivered.stamp.presettled);
    }

    #[test]
    fn a_lock_whose_consumer_left_can_still_be_settled_by_token() {
        let mut q = queue_with(1);
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 1);
        let delivered = q.dispatch(0).remove(0);
        q.unsubscribe(A);
        let token = delivered.lock_token.expect("peek-lock");
        assert_eq!(q.settle_by_token(token, &Settlement::Complete), Ok(1));
        assert!(q.is_empty());
    }

    #[test]
    fn a_given_back_delivery_is_available_again_uncounted() {
        let mut q = queue_with(1);
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.subscribe(B, ReceiveMode::ReceiveAndDelete, u64::MAX);
        q.add_credit(A, 1);
        let locked = q.dispatch(0).remove(0);
        q.give_back(locked);
        q.add_credit(B, 1);
        let taken = q.dispatch(0).remove(0);
        assert_eq!(
            (taken.consumer, taken.seq, taken.stamp.delivery_count),
            (B, 1, 0)
        );
        assert!(q.is_empty());
        q.give_back(taken);
        assert_eq!(
            q.len(),
            1,
            "a receive-and-delete delivery given back is stored again"
        );
    }

    #[test]
    fn messages_are_not_delivered_before_they_are_published() {
        let mut q = QueueState::new(RULES);
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 5);
        q.enqueue(0, empties(2)).expect("room");
        assert!(q.has_unpublished());
        assert!(q.dispatch(0).is_empty(), "not durable yet");
        q.publish_up_to(2);
        assert_eq!(
            q.dispatch(0).iter().map(|d| d.seq).collect::<Vec<_>>(),
            vec![1]
        );
        q.publish_up_to(q.next_seq());
        assert!(!q.has_unpublished());
        assert_eq!(
            q.dispatch(0).iter().map(|d| d.seq).collect::<Vec<_>>(),
            vec![2]
        );
    }

    #[test]
    fn the_delivery_limit_dead_letters_with_the_service_bus_reason() {
        let mut q = QueueState::new(Rules {
            max_delivery_count: 3,
            ..RULES
        });
        q.enqueue(0, vec![plain(Bytes::from_static(b"m"))])
            .expect("room");
        q.publish_up_to(q.next_seq());
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        for count in 0..3 {
            q.add_credit(A, 1);
            let d = q.dispatch(0).remove(0);
            assert_eq!(d.stamp.delivery_count, count);
            q.settle(A, lock_of(&d), &Settlement::Abandon(Vec::new()))
                .expect("abandon");
        }
        assert!(q.is_empty(), "the third abandon dead-letters");
        let dead = q.take_dead_letters();
        assert_eq!(dead.len(), 1);
        assert_eq!(
            dead[0].properties,
            vec![
                (
                    "DeadLetterReason".to_string(),
                    SimpleValue::String("MaxDeliveryCountExceeded".into())
                ),
                (
                    "DeadLetterErrorDescription".to_string(),
                    SimpleValue::String(
                        "Message could not be consumed after 3 delivery attempts.".into()
                    )
                ),
            ]
        );
        let mut dlq = QueueState::new(Rules::dead_letter_queue(1_000));
        dlq.accept_dead_letter(dead[0].seq, dead[0].record, Bytes::from_static(b"m"));
        dlq.subscribe(B, ReceiveMode::PeekLock, u64::MAX);
        dlq.add_credit(B, 1);
        let again = dlq.dispatch(0).remove(0);
        assert_eq!(
            again.seq, 1,
            "the dead-letter queue keeps the sequence number"
        );
        let refused = dlq.settle(
            B,
            lock_of(&again),
            &Settlement::DeadLetter {
                reason: None,
                description: None,
                properties: Vec::new(),
            },
        );
        assert!(matches!(refused, Err(EntityError::NotAllowed(_))));
    }

    #[test]
    fn deferred_messages_are_not_delivered_and_stay_deferred_after_recovery() {
        let mut q = queue_with(2);
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 1);
        let first = q.dispatch(0).remove(0);
        q.settle(A, lock_of(&first), &Settlement::Defer(Vec::new()))
            .expect("defer");
        q.add_credit(A, 5);
        let rest: Vec<i64> = q.dispatch(0).iter().map(|d| d.seq).collect();
        assert_eq!(rest, vec![2], "the deferred message is not delivered");
        let mut records = Vec::new();
        for change in q.take_changes() {
            match change {
                Change::Put { seq, record, .. } | Change::Update { seq, record } => {
                    records.retain(|(s, _)| *s != seq);
                    records.push((seq, record));
                }
                _ => {}
            }
        }
        let mut back = QueueState::recover(
            RULES,
            Recovered {
                next_seq: 3,
                records,
            },
        );
        back.subscribe(B, ReceiveMode::PeekLock, u64::MAX);
        back.add_credit(B, 5);
        let seqs: Vec<i64> = back.dispatch(0).iter().map(|d| d.seq).collect();
        assert_eq!(seqs, vec![2], "still deferred after a restart");
    }

    /// Random sends, receives, settlements and restarts against a plain model: the state and
    /// the records it journals must agree with the model at every step.
    #[test]
    fn random_operations_match_a_simple_model() {
        use std::collections::BTreeMap;
        for run in 0..20u64 {
            let mut rng = run
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let mut next = move |bound: u64| {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (rng >> 33) % bound
            };
            let mut q = QueueState::new(RULES);
            q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
            // The "disk": records as the journal leaves them.
            let mut stored: BTreeMap<i64, Record> = BTreeMap::new();
            let mut next_seq_on_disk = 1;
            // The model: delivery count and whether locked, by sequence number.
            let mut model: BTreeMap<i64, (u32, bool)> = BTreeMap::new();
            let mut held: Vec<Delivery> = Vec::new();
            let mut issued = 0i64;
            for _ in 0..300 {
                match next(6) {
                    0 => {
                        let n = next(3) as usize + 1;
                        let first = q.enqueue(0, empties(n)).expect("room");
                        assert_eq!(first, issued + 1, "gap-free, never reused");
                        issued += n as i64;
                        q.publish_up_to(q.next_seq());
                        for seq in first..first + n as i64 {
                            model.insert(seq, (0, false));
                        }
                    }
                    1 | 2 => {
                        q.add_credit(A, next(4) as i64 + 1);
                        for d in q.dispatch(0) {
                            let lowest = model
                                .iter()
                                .find(|(_, (_, locked))| !locked)
                                .map(|(seq, _)| *seq);
                            assert_eq!(Some(d.seq), lowest, "lowest available first");
                            let entry = model.get_mut(&d.seq).expect("known");
                            assert_eq!(d.stamp.delivery_count, entry.0);
                            entry.1 = true;
                            held.push(d);
                        }
                        q.add_credit(A, -1_000);
                    }
                    3 | 4 if !held.is_empty() => {
                        let d = held.swap_remove(next(held.len() as u64) as usize);
                        let settlement = match next(3) {
                            0 => Settlement::Complete,
                            1 => Settlement::Release,
                            _ => Settlement::Abandon(Vec::new()),
                        };
                        q.settle(A, lock_of(&d), &settlement).expect("held lock");
                        match settlement {
                            Settlement::Complete => {
                                model.remove(&d.seq);
                            }
                            Settlement::Release => {
                                model.insert(d.seq, (d.stamp.delivery_count, false));
                            }
                            _ => {
                                model.insert(d.seq, (d.stamp.delivery_count + 1, false));
                            }
                        }
                    }
                    _ => {
                        // Restart: rebuild from the stored records; locks are gone.
                        for change in q.take_changes() {
                            match change {
                                Change::Put { seq, record, .. }
                                | Change::Update { seq, record } => {
                                    stored.insert(seq, record);
                                }
                                Change::Delete { seq } => {
                                    stored.remove(&seq);
                                }
                                Change::NextSeq(n) => next_seq_on_disk = n,
                            }
                        }
                        q = QueueState::recover(
                            RULES,
                            Recovered {
                                next_seq: next_seq_on_disk,
                                records: stored.iter().map(|(s, r)| (*s, *r)).collect(),
                            },
                        );
                        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
                        held.clear();
                        for entry in model.values_mut() {
                            entry.1 = false;
                        }
                    }
                }
                assert_eq!(q.len(), model.len(), "run {run}: message count");
            }
        }
    }

    fn timed(ttl_ms: Option<u32>, scheduled_ms: Option<i64>) -> Arrival {
        Arrival {
            bytes: Bytes::from_static(b"t"),
            ttl_ms,
            scheduled_ms,
        }
    }

    fn state_of(stamp: &DeliveryStamp) -> Option<&Value> {
        stamp
            .annotations
            .iter()
            .find(|(key, _)| *key == wire::annotation::MESSAGE_STATE)
            .map(|(_, value)| value)
    }

    #[test]
    fn a_scheduled_message_activates_under_a_new_number_and_counts_its_ttl_from_then() {
        let mut q = QueueState::new(RULES);
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 5);
        let scheduled = q.enqueue(100, vec![timed(Some(1_000), Some(5_000))]);
        assert_eq!(scheduled, Ok(1));
        q.publish_up_to(q.next_seq());
        assert!(q.dispatch(200).is_empty(), "invisible to receivers");
        let peeked = q.peek(1, 10);
        assert_eq!(
            state_of(&peeked[0].1),
            Some(&Value::Int(2)),
            "peek: scheduled"
        );
        assert_eq!(q.next_deadline_ms(), Some(5_000));
        assert!(q.due_scheduled(4_999, 10).is_empty());
        let due = q.due_scheduled(5_000, 10);
        assert_eq!(due, vec![1]);
        q.take_changes();
        assert!(!q.journal_moves());
        q.activate(5_010, vec![(1, timed(Some(1_000), None))]);
        assert!(
            q.journal_moves(),
            "an activation must be written atomically"
        );
        q.take_changes();
        assert!(!q.journal_moves());
        assert!(!q.has_scheduled());
        q.publish_up_to(q.next_seq());
        let got = q.dispatch(5_020).remove(0);
        assert_eq!(got.seq, 2, "a new sequence number");
        assert_eq!(got.record.enqueued_ms, 5_010, "enqueued when activated");
        assert_eq!(
            got.stamp.expires_ms,
            Some(6_010),
            "ttl counts from activation"
        );
        assert_eq!(got.stamp.ttl_ms, Some(1_000));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn cancelling_is_all_or_nothing_and_loses_to_activation() {
        let mut q = QueueState::new(RULES);
        q.enqueue(0, vec![timed(None, Some(50)), timed(None, Some(60))])
            .expect("room");
        q.enqueue(0, empties(1)).expect("room");
        assert_eq!(
            q.cancel_scheduled(&[1, 3]),
            Err(EntityError::MessageNotFound(3, "scheduled")),
            "an active message cannot be cancelled"
        );
        assert_eq!(q.len(), 3, "nothing was cancelled");
        q.activate(70, vec![(2, timed(None, None))]);
        assert_eq!(
            q.cancel_scheduled(&[2]),
            Err(EntityError::MessageNotFound(2, "scheduled")),
            "the activation won"
        );
        assert_eq!(q.cancel_scheduled(&[1]), Ok(()));
        assert!(!q.has_scheduled());
        assert_eq!(q.len(), 2, "the active one and the activated one");
    }

    #[test]
    fn the_entity_default_caps_the_ttl_and_expired_messages_are_never_delivered() {
        let mut q = QueueState::new(Rules {
            default_ttl_ms: 2_000,
            ..RULES
        });
        q.enqueue(1_000, vec![timed(Some(3_600_000), None), timed(None, None)])
            .expect("room");
        q.enqueue(1_500, vec![timed(Some(60_000), None)])
            .expect("room");
        q.publish_up_to(q.next_seq());
        let peeked = q.peek(1, 10);
        assert_eq!(
            peeked[0].1.ttl_ms,
            Some(2_000),
            "capped by the entity default"
        );
        assert_eq!(peeked[1].1.expires_ms, Some(3_000), "the default applies");
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 5);
        let got: Vec<i64> = q.dispatch(3_000).iter().map(|d| d.seq).collect();
        assert_eq!(
            got,
            vec![3],
            "the two expired at 3000 are dropped at dispatch"
        );
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_locked_message_does_not_expire_until_its_lock_ends() {
        let mut q = QueueState::new(Rules {
            dead_letter_on_expiry: true,
            ..RULES
        });
        q.enqueue(0, vec![timed(Some(100), None), timed(Some(100), None)])
            .expect("room");
        q.publish_up_to(q.next_seq());
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 2);
        let got = q.dispatch(10);
        assert_eq!(q.expire_due(500), 0, "both are locked");
        assert_eq!(
            q.settle(A, lock_of(&got[0]), &Settlement::Complete),
            Ok(()),
            "a message locked past its expiry can still be completed"
        );
        q.settle(A, lock_of(&got[1]), &Settlement::Abandon(Vec::new()))
            .expect("abandon");
        assert_eq!(q.expire_due(500), 1, "expiry applies once the lock ends");
        assert!(q.is_empty());
        let dead = q.take_dead_letters();
        assert_eq!(dead.len(), 1);
        assert_eq!(
            dead[0].properties[0],
            (
                "DeadLetterReason".to_string(),
                SimpleValue::String("TTLExpiredException".into())
            )
        );
        let mut dlq = QueueState::new(Rules::dead_letter_queue(1_000));
        dlq.accept_dead_letter(dead[0].seq, dead[0].record, Bytes::from_static(b"t"));
        dlq.subscribe(B, ReceiveMode::ReceiveAndDelete, u64::MAX);
        dlq.add_credit(B, 1);
        assert_eq!(
            dlq.expire_due(i64::MAX - 1),
            0,
            "dead-letter queues observe no TTL"
        );
        assert_eq!(dlq.dispatch(10_000).len(), 1);
    }

    #[test]
    fn scheduled_and_expiring_messages_keep_their_state_across_recovery() {
        let mut q = QueueState::new(RULES);
        q.enqueue(0, vec![timed(None, Some(9_000)), timed(Some(100), None)])
            .expect("room");
        let records: Vec<(i64, Record)> = q
            .take_changes()
            .into_iter()
            .filter_map(|change| match change {
                Change::Put { seq, record, .. } => Some((seq, record)),
                _ => None,
            })
            .collect();
        let mut back = QueueState::recover(
            RULES,
            Recovered {
                next_seq: 3,
                records,
            },
        );
        assert!(back.has_scheduled());
        assert_eq!(back.next_deadline_ms(), Some(9_000));
        assert_eq!(back.expire_due(100), 1, "the expiry index is rebuilt");
        assert_eq!(back.len(), 1);
    }

    /// One message as the time model sees it.
    #[derive(Debug, Clone, Copy)]
    struct Timed {
        ttl: Option<u32>,
        expires: i64,
        due: Option<i64>,
        locked: bool,
    }

    /// Drops from `model` what the queue no longer holds; only expired, unlocked, active
    /// messages may have gone.
    fn reconcile(q: &QueueState, model: &mut BTreeMap<i64, Timed>, now: i64) {
        let present: BTreeSet<i64> = q.peek(0, usize::MAX).iter().map(|(s, _)| *s).collect();
        assert!(
            present.iter().all(|seq| model.contains_key(seq)),
            "no message appears"
        );
        model.retain(|seq, m| {
            if present.contains(seq) {
                return true;
            }
            assert!(
                !m.locked && m.due.is_none() && m.expires <= now,
                "message {seq} left before its time: {m:?} at {now}"
            );
            false
        });
    }

    /// Random sends (with and without time to live, scheduled or not), clock steps,
    /// activations, deliveries, settlements, sweeps and restarts: no receiver ever gets an
    /// expired or scheduled message, only expired ones leave on their own, a sweep leaves no
    /// expired unlocked message behind, and activation renumbers in due order.
    #[test]
    fn random_time_operations_keep_the_time_rules() {
        use std::collections::BTreeMap;
        for run in 0..20u64 {
            let mut rng = run.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = move |bound: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % bound
            };
            let rules = Rules {
                dead_letter_on_expiry: run % 2 == 0,
                default_ttl_ms: if run % 3 == 0 { 300 } else { NEVER },
                ..RULES
            };
            let mut q = QueueState::new(rules);
            q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
            let mut now = 1_000i64;
            let mut model: BTreeMap<i64, Timed> = BTreeMap::new();
            let mut held: Vec<Delivery> = Vec::new();
            let mut stored: Vec<(i64, Record)> = Vec::new();
            let expiry = |ttl: Option<u32>, at: i64| {
                let ttl = ttl.map_or(rules.default_ttl_ms, |t| {
                    i64::from(t).min(rules.default_ttl_ms)
                });
                if ttl == NEVER {
                    NEVER
                } else {
                    at + ttl
                }
            };
            for _ in 0..400 {
                match next(7) {
                    0 => {
                        let first = q.next_seq();
                        let arrivals: Vec<Arrival> = (0..next(3) + 1)
                            .map(|_| {
                                let ttl = (next(2) == 0).then(|| 50 + next(400) as u32);
                                let due = (next(3) == 0).then(|| now + 10 + next(300) as i64);
                                timed(ttl, due)
                            })
                            .collect();
                        for (i, a) in arrivals.iter().enumerate() {
                            let m = Timed {
                                ttl: a.ttl_ms,
                                expires: if a.scheduled_ms.is_some() {
                                    NEVER
                                } else {
                                    expiry(a.ttl_ms, now)
                                },
                                due: a.scheduled_ms,
                                locked: false,
                            };
                            model.insert(first + i as i64, m);
                        }
                        q.enqueue(now, arrivals).expect("room");
                        q.publish_up_to(q.next_seq());
                    }
                    1 => now += next(200) as i64,
                    2 => {
                        let due = q.due_scheduled(now, usize::MAX);
                        let mut want: Vec<(i64, i64)> = model
                            .iter()
                            .filter_map(|(s, m)| m.due.filter(|d| *d <= now).map(|d| (d, *s)))
                            .collect();
                        want.sort_unstable();
                        assert_eq!(due, want.iter().map(|(_, s)| *s).collect::<Vec<_>>());
                        let mut renumbered = q.next_seq();
                        let activated = due
                            .iter()
                            .map(|seq| {
                                let old = model.remove(seq).expect("scheduled");
                                let m = Timed {
                                    expires: expiry(old.ttl, now),
                                    due: None,
                                    ..old
                                };
                                model.insert(renumbered, m);
                                renumbered += 1;
                                (*seq, timed(old.ttl, None))
                            })
                            .collect();
                        q.activate(now, activated);
                        assert_eq!(q.next_seq(), renumbered, "one new number each");
                        q.publish_up_to(q.next_seq());
                    }
                    3 => {
                        q.add_credit(A, next(4) as i64 + 1);
                        for d in q.dispatch(now) {
                            let m = model.get_mut(&d.seq).expect("known");
                            assert!(m.due.is_none() && !m.locked, "{m:?}");
                            assert!(
                                m.expires > now,
                                "an expired message was delivered: {m:?} at {now}"
                            );
                            m.locked = true;
                            held.push(d);
                        }
                        q.add_credit(A, -1_000);
                        reconcile(&q, &mut model, now);
                    }
                    4 if !held.is_empty() => {
                        let d = held.swap_remove(next(held.len() as u64) as usize);
                        if next(2) == 0 {
                            q.settle(A, lock_of(&d), &Settlement::Complete)
                                .expect("held");
                            model.remove(&d.seq);
                        } else {
                            q.settle(A, lock_of(&d), &Settlement::Abandon(Vec::new()))
                                .expect("held");
                            if let Some(m) = model.get_mut(&d.seq) {
                                m.locked = false;
                            }
                            reconcile(&q, &mut model, now);
                        }
                    }
                    5 => {
                        q.expire_due(now);
                        reconcile(&q, &mut model, now);
                        let left = model.values().filter(|m| !m.locked && m.due.is_none());
                        assert!(left.clone().all(|m| m.expires > now), "the sweep left one");
                    }
                    _ => {
                        for change in q.take_changes() {
                            match change {
                                Change::Put { seq, record, .. }
                                | Change::Update { seq, record } => {
                                    stored.retain(|(s, _)| *s != seq);
                                    stored.push((seq, record));
                                }
                                Change::Delete { seq } => stored.retain(|(s, _)| *s != seq),
                                Change::NextSeq(_) => {}
                            }
                        }
                        let next_seq = q.next_seq();
                        q = QueueState::recover(
                            rules,
                            Recovered {
                                next_seq,
                                records: stored.clone(),
                            },
                        );
                        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
                        held.clear();
                        model.values_mut().for_each(|m| m.locked = false);
                    }
                }
                let dead = q.take_dead_letters();
                assert!(
                    rules.dead_letter_on_expiry || dead.is_empty(),
                    "deleted, not dead-lettered"
                );
                assert_eq!(q.len(), model.len(), "run {run}: message count");
            }
        }
    }

    #[test]
    fn drain_delivers_what_is_there_and_zeroes_demand() {
        let mut q = queue_with(3);
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        q.add_credit(A, 10);
        assert_eq!(q.drain(A, 0).0.len(), 3);
        q.enqueue(0, empties(1)).expect("room");
        q.publish_up_to(q.next_seq());
        assert!(q.dispatch(0).is_empty(), "drain consumed the demand");
    }
}
