//! The pure rules of one entity (design.md D5, D7): its [`Intake`], its [`Schedule`] and its
//! lanes, composed. A queue is one intake, its own lane and its dead-letter lane. A topic is
//! one intake, a lane holding its scheduled messages, and per subscription a lane and its
//! dead-letter lane, with the [`Route`]s that pick the subscriptions of each message: every
//! copy of a send is staged in the same turn, so they become durable, and visible, together.
//! Everything the actor asks of the entity goes through here; time comes in as `now_ms`.

use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use fe2o3_amqp::types::primitives::SimpleValue;

use crate::config::names::RULE_NAMES;
use crate::config::EntityStatus;
use crate::entity::duplicates::{self, Digest, Duplicates};
use crate::entity::intake::{self, Intake};
use crate::entity::partition::Partition;
use crate::entity::queue::session_lane::Binding;
use crate::entity::queue::{DeadLetter, LaneActivity, LaneCounts, QueueCore, Reader, Rules};
use crate::entity::schedule::Schedule;
use crate::entity::settings::SubscriptionSettings;
use crate::entity::staging::Staging;
use crate::entity::terms::{
    ConsumerId, Delivery, EntityError, LaneId, LockRef, ReceiveMode, SessionId, SessionRequest,
    Settlement, TopicState,
};
use crate::entity::topic::{self, Copy, Route, Rule};
use crate::entity::transfer::{self, Transfers};
use crate::filter::{Filter, MessageView};
use crate::message::{self, Arrival};
use crate::store::record::{MessageState, Record, NEVER};
use crate::store::{Change, Recovered};
use crate::wire;

/// An entity's state: everything its actor owns, minus the I/O.
#[derive(Debug)]
pub struct EntityCore {
    intake: Intake,
    schedule: Schedule,
    lanes: BTreeMap<LaneId, QueueCore>,
    /// The lane each consumer reads.
    consumers: HashMap<ConsumerId, LaneId>,
    /// Changes of the intake itself (its counter), not yet written.
    journal: Vec<(LaneId, Change)>,
    /// See [`EntityCore::take_changes`].
    moves: bool,
    /// A topic's subscriptions (`None`: a queue, whose messages go to its own lane).
    routes: Option<Vec<Route>>,
    /// Messages sent or scheduled since the broker started.
    sent: u64,
    /// The ids accepted within the duplicate-detection window (`None`: no detection).
    duplicates: Option<Duplicates>,
    /// Sends dropped as duplicates since the broker started.
    duplicates_dropped: u64,
    /// The numbering of the transfer lane (send-via), once it has one.
    transfers: Option<Transfers>,
    /// Who the entity is to its clients (its refusals name it so).
    identity: Identity,
    /// Service Bus's entity status of the queue or topic (number 0) and of each subscription,
    /// by number: what it takes and hands out (absent: active).
    statuses: HashMap<u32, EntityStatus>,
    /// The work of the transactions this entity is the via entity of, until their discharge.
    staging: Staging,
}

/// Who an entity is to its clients: its name, a topic's subscriptions by name (shared with
/// its handles), and its place among its entity's partitions (what its positions and lock
/// tokens look like).
#[derive(Debug, Default)]
pub struct Identity {
    /// The entity's name as declared.
    pub name: String,
    /// A topic's subscriptions by name; `None` for a queue.
    pub topic: Option<Arc<TopicState>>,
    /// Its place among its entity's partitions.
    pub partition: Partition,
}

/// What recovery found for one subscription, and its rules.
#[derive(Debug)]
pub struct SubscriptionLanes {
    /// The subscription's route (its lane and rules).
    pub route: Route,
    /// The rules of its lane.
    pub rules: Rules,
    /// Its own messages.
    pub main: Recovered,
    /// Its dead-letter queue.
    pub dead_letter: Recovered,
}

impl EntityCore {
    /// A queue rebuilt from its log: `main` and `dead_letter` are what recovery found for its
    /// two lanes; messages over `max_size_bytes` are refused.
    pub fn queue(
        rules: Rules,
        max_size_bytes: u64,
        main: Recovered,
        dead_letter: Recovered,
    ) -> Self {
        let next_seq = main.next_seq.max(dead_letter.next_seq);
        let records = main.records.iter().chain(&dead_letter.records);
        let highest = records.clone().map(|(seq, _)| *seq + 1).max().unwrap_or(1);
        let last_enqueued = records.map(|(_, r)| r.enqueued_ms).max().unwrap_or(0);
        let lock_duration_ms = rules.lock_duration_ms;
        let mut lanes = BTreeMap::new();
        lanes.insert(LaneId::MAIN, QueueCore::new(rules, main));
        lanes.insert(
            LaneId::DEAD_LETTER,
            QueueCore::new(Rules::dead_letter_queue(lock_duration_ms), dead_letter),
        );
        EntityCore::assemble(
            Intake::new(next_seq.max(highest), last_enqueued, max_size_bytes, NEVER),
            lanes,
            None,
        )
    }

    /// A topic rebuilt from its log: `scheduled` holds its scheduled messages, and each
    /// subscription brings its lanes and rules. Sends over `max_size_bytes` (all copies
    /// counted) are refused; `default_ttl_ms` caps every copy's time to live.
    pub fn topic(
        max_size_bytes: u64,
        default_ttl_ms: i64,
        scheduled: Recovered,
        subscriptions: Vec<SubscriptionLanes>,
    ) -> Self {
        let mut next_seq = scheduled.next_seq;
        let mut highest = 1;
        let mut last_enqueued = 0;
        // Nobody receives from the holder: nothing expires, counts or is dead-lettered there,
        // as in a dead-letter queue.
        let holder_rules = Rules::dead_letter_queue(0);
        let mut lanes = BTreeMap::new();
        let mut routes = Vec::new();
        let mut add = |id: LaneId, rules: Rules, recovered: Recovered| {
            next_seq = next_seq.max(recovered.next_seq);
            for (seq, record) in &recovered.records {
                highest = highest.max(seq + 1);
                last_enqueued = last_enqueued.max(record.enqueued_ms);
            }
            lanes.insert(id, QueueCore::new(rules, recovered));
        };
        add(LaneId::MAIN, holder_rules, scheduled);
        for subscription in subscriptions {
            let lane = subscription.route.lane;
            let dead_rules = Rules::dead_letter_queue(subscription.rules.lock_duration_ms);
            add(lane, subscription.rules, subscription.main);
            add(
                lane.dead_letter_lane(),
                dead_rules,
                subscription.dead_letter,
            );
            routes.push(subscription.route);
        }
        EntityCore::assemble(
            Intake::new(
                next_seq.max(highest),
                last_enqueued,
                max_size_bytes,
                default_ttl_ms,
            ),
            lanes,
            Some(routes),
        )
    }

    /// An entity from its parts, its schedule rebuilt from the lanes, everything recovered
    /// deliverable.
    fn assemble(
        intake: Intake,
        lanes: BTreeMap<LaneId, QueueCore>,
        routes: Option<Vec<Route>>,
    ) -> Self {
        let mut core = EntityCore {
            intake,
            schedule: Schedule::default(),
            lanes,
            consumers: HashMap::new(),
            journal: Vec::new(),
            moves: false,
            routes,
            sent: 0,
            duplicates: None,
            duplicates_dropped: 0,
            transfers: None,
            identity: Identity::default(),
            statuses: HashMap::new(),
            staging: Staging::default(),
        };
        for lane in core.lanes.values() {
            for (due, seq) in lane.scheduled() {
                core.schedule.add(due, seq);
            }
        }
        core.reveal_up_to(core.intake.next_seq());
        core
    }

    /// Names the entity, and places it among its entity's partitions.
    pub fn set_identity(&mut self, identity: Identity) {
        self.identity = identity;
    }

    /// The entity's name as declared.
    pub fn name(&self) -> &str {
        &self.identity.name
    }

    /// Its place among its entity's partitions.
    pub fn partition(&self) -> Partition {
        self.identity.partition
    }

    /// A topic's subscriptions by name, shared with its handles; `None` for a queue.
    pub fn topic_state(&self) -> Option<&Arc<TopicState>> {
        self.identity.topic.as_ref()
    }

    /// Sets the status of the queue or topic (`number` 0) or of a subscription.
    pub fn set_status(&mut self, number: u32, status: EntityStatus) {
        self.statuses.insert(number, status);
    }

    /// Whether a lane of the entity requires sessions: every message a queue takes must then
    /// carry a session id, and a topic dead-letters such a lane's copies of one without.
    pub fn requires_session_id(&self) -> bool {
        self.lanes.values().any(QueueCore::requires_session)
    }

    /// The sequence number the next message gets.
    pub fn next_seq(&self) -> i64 {
        self.intake.next_seq()
    }

    /// Makes messages numbered below `next_seq` deliverable: their writes are durable. The
    /// transfer lanes number their own (see [`EntityCore::reveal_transfers_up_to`]).
    pub fn reveal_up_to(&mut self, next_seq: i64) {
        self.intake.reveal_up_to(next_seq);
        for (_, lane) in self.lanes.iter_mut().filter(|(id, _)| !id.is_transfer()) {
            lane.reveal_up_to(next_seq);
        }
    }

    /// Gives the entity its transfer lanes (send-via, design.md D10), holding what recovery
    /// found in them, all of it durable.
    pub fn add_transfer_lanes(&mut self, lane: Recovered, dead: Recovered) {
        let transfers = Transfers::recovered(&lane, &dead);
        let next = transfers.next();
        let lock_duration_ms = transfer::LOCK_DURATION_MS;
        let rules = Rules::transfer_queue(lock_duration_ms);
        self.lanes
            .insert(LaneId::TRANSFER, QueueCore::new(rules, lane));
        let dead_rules = Rules::dead_letter_queue(lock_duration_ms);
        self.lanes.insert(
            LaneId::TRANSFER_DEAD_LETTER,
            QueueCore::new(dead_rules, dead),
        );
        self.transfers = Some(transfers);
        self.reveal_transfers_up_to(next);
    }

    /// The number the next transfer gets (0 without transfer lanes).
    pub fn next_transfer(&self) -> i64 {
        self.transfers.as_ref().map_or(0, Transfers::next)
    }

    /// Makes transfers numbered below `next` movable: their writes are durable.
    pub fn reveal_transfers_up_to(&mut self, next: i64) {
        for id in [LaneId::TRANSFER, LaneId::TRANSFER_DEAD_LETTER] {
            if let Some(lane) = self.lanes.get_mut(&id) {
                lane.reveal_up_to(next);
            }
        }
    }

    /// Stores messages sent via this entity in its transfer lane, each under the lane's next
    /// number and marked with its destination, to be moved there once durable. The caller
    /// has admitted them (see [`EntityCore::admit`]): they count against this entity's size
    /// limit until moved.
    ///
    /// # Errors
    /// [`EntityError::NotAllowed`] without transfer lanes, or for a message whose
    /// annotations cannot be rewritten. Nothing is stored then.
    pub fn transfer(
        &mut self,
        now_ms: i64,
        transfers: Vec<(String, Vec<Arrival>)>,
    ) -> Result<(), EntityError> {
        let no_lanes = EntityError::NotAllowed("this entity takes no transfers");
        if self.transfers.is_none() {
            return Err(no_lanes);
        }
        let enqueued_ms = self.intake.enqueued_time(now_ms);
        let stored = (transfers.iter())
            .flat_map(|(to, messages)| messages.iter().map(move |arrival| (to, arrival)))
            .map(|(to, arrival)| transfer::stored(to, &arrival.bytes, enqueued_ms))
            .collect::<Result<Vec<_>, _>>()?;
        let (Some(numbers), Some(lane)) =
            (&mut self.transfers, self.lanes.get_mut(&LaneId::TRANSFER))
        else {
            return Err(no_lanes);
        };
        for (record, body) in stored {
            lane.insert(numbers.number(), record, body, None);
        }
        Ok(())
    }

    /// Stores a message its lane cannot forward again (it took
    /// [`MAX_HOPS`](crate::entity::core::MAX_HOPS) moves) in the transfer dead-letter
    /// queue, under the next transfer number, with Service Bus's reason; receivable once
    /// durable. Whether it was stored (every queue and topic has transfer lanes).
    pub fn dead_letter_over_hops(&mut self, now_ms: i64, bytes: &Bytes) -> bool {
        let (record, body) = transfer::over_hops(bytes, self.intake.enqueued_time(now_ms));
        let (Some(numbers), Some(lane)) = (
            &mut self.transfers,
            self.lanes.get_mut(&LaneId::TRANSFER_DEAD_LETTER),
        ) else {
            return false;
        };
        lane.insert(numbers.number(), record, body, None);
        true
    }

    /// Whether stored messages wait for their durability point before they can be delivered.
    pub fn has_unrevealed(&self) -> bool {
        self.intake.has_unrevealed()
    }

    /// A lane, for the operations addressed to it.
    ///
    /// # Errors
    /// [`EntityError::Deleted`] when the entity has no such lane.
    pub fn lane(&mut self, lane: LaneId) -> Result<&mut QueueCore, EntityError> {
        self.lanes.get_mut(&lane).ok_or(EntityError::Deleted)
    }

    /// Every lane, by id (the tests look at them all).
    #[cfg(test)]
    pub fn lanes(&self) -> impl Iterator<Item = (&LaneId, &QueueCore)> {
        self.lanes.iter()
    }

    /// Moves a dead-lettered message (`seq` in the dead-letter lane `dead`, `arrival` its
    /// bytes without the dead-letter reason) back to the lane it was dead-lettered from, as a
    /// new arrival: the next sequence number, enqueued now, delivery count 0, its own time to
    /// live. Returns the new sequence number.
    ///
    /// # Errors
    /// [`EntityError::NotAllowed`] when `dead` is not a dead-letter lane,
    /// [`EntityError::MessageNotFound`] when it holds no such message (or it is locked),
    /// [`EntityError::QuotaExceeded`] when the entity is full.
    pub fn resubmit(
        &mut self,
        now_ms: i64,
        dead: LaneId,
        seq: i64,
        arrival: Arrival,
    ) -> Result<i64, EntityError> {
        if !dead.dead_letter {
            return Err(EntityError::NotAllowed(
                "only a dead-lettered message can be resubmitted",
            ));
        }
        let target = LaneId {
            dead_letter: false,
            ..dead
        };
        if !self.lane(dead)?.is_unlocked(seq) {
            return Err(EntityError::MessageNotFound(seq, "unlocked dead-lettered"));
        }
        self.admit(arrival.bytes.len() as u64, 1)?;
        self.lane(dead)?.remove(seq);
        let moved = self.intake.number();
        let enqueued_ms = self.intake.enqueued_time(now_ms);
        let ttl_ms = self.intake.ttl_ms(arrival.ttl_ms);
        let lane = self.lane(target)?;
        let ttl_ms = ttl_ms.min(lane.rules().default_ttl_ms);
        let record = Record {
            state: MessageState::Active,
            delivery_count: 0,
            enqueued_ms,
            size: u32::try_from(arrival.bytes.len()).unwrap_or(u32::MAX),
            expires_ms: intake::expiry(enqueued_ms, ttl_ms),
            scheduled_ms: 0,
        };
        lane.insert(moved, record, arrival.bytes, arrival.session_id.as_deref());
        self.note_next_seq();
        Ok(moved)
    }

    /// Deletes every message of the dead-letter lane `dead`; returns how many.
    ///
    /// # Errors
    /// [`EntityError::NotAllowed`] when `dead` is not a dead-letter lane.
    pub fn purge(&mut self, dead: LaneId) -> Result<u64, EntityError> {
        if !dead.dead_letter {
            return Err(EntityError::NotAllowed(
                "only a dead-letter queue can be purged",
            ));
        }
        let lane = self.lane(dead)?;
        let count = lane.len() as u64;
        lane.clear();
        Ok(count)
    }

    /// The lane scheduled messages are stored in until they are due.
    fn holder(&mut self) -> &mut QueueCore {
        self.lanes
            .get_mut(&LaneId::MAIN)
            .expect("every entity has its main lane")
    }

    /// Stores messages with consecutive sequence numbers and one enqueued time that never goes
    /// backwards. A message whose scheduled enqueue time is still ahead is stored scheduled.
    /// With duplicate detection, a message whose id the window holds (or an earlier message
    /// of the same call brought) is dropped. Returns each message's sequence number: a dropped
    /// one's is the number of the message that brought its id.
    ///
    /// # Errors
    /// [`EntityError::QuotaExceeded`] when the messages would take the entity past its size
    /// limit; nothing is stored then.
    pub fn enqueue(
        &mut self,
        now_ms: i64,
        messages: Vec<Arrival>,
    ) -> Result<Vec<i64>, EntityError> {
        if let Some(window) = &mut self.duplicates {
            window.forget_before(now_ms);
        }
        let mut numbers = Vec::with_capacity(messages.len());
        let mut taken = Vec::with_capacity(messages.len());
        // The ids this call accepted so far, with their numbers.
        let mut fresh: HashMap<Digest, i64> = HashMap::new();
        let mut next = self.intake.next_seq();
        for arrival in messages {
            let digest = match (&self.duplicates, &arrival.message_id) {
                (Some(_), Some(id)) => Some(duplicates::digest(id)),
                _ => None,
            };
            let seen = digest.and_then(|digest| {
                let window = self.duplicates.as_ref()?;
                window.seen(&digest).or_else(|| fresh.get(&digest).copied())
            });
            if let Some(original) = seen {
                numbers.push(original);
                continue;
            }
            if let Some(digest) = digest {
                fresh.insert(digest, next);
            }
            numbers.push(next);
            next += 1;
            taken.push(arrival);
        }
        self.admit(
            taken.iter().map(|m| m.bytes.len() as u64).sum(),
            taken.len(),
        )?;
        let enqueued_ms = self.intake.enqueued_time(now_ms);
        self.sent += taken.len() as u64;
        self.duplicates_dropped += (numbers.len() - taken.len()) as u64;
        for arrival in taken {
            let placement = match arrival.scheduled_ms.filter(|due| *due > now_ms) {
                Some(due) => Placement::Held(due),
                None => Placement::Active,
            };
            self.append(enqueued_ms, arrival, placement);
        }
        if let Some(window) = &mut self.duplicates {
            for (digest, seq) in fresh {
                window.accept(digest, seq, enqueued_ms);
            }
        }
        self.note_next_seq();
        Ok(numbers)
    }

    /// Checks that `messages` more messages of `bytes` in all fit the entity's size limit
    /// (what its lanes hold, dead-letter queues aside), each message counting
    /// [`INDEX_BYTES_PER_MESSAGE`] besides its bytes.
    ///
    /// # Errors
    /// [`EntityError::QuotaExceeded`] when they do not.
    pub fn admit(&self, bytes: u64, messages: usize) -> Result<(), EntityError> {
        let counted = |bytes: u64, messages: usize| {
            bytes.saturating_add(INDEX_BYTES_PER_MESSAGE.saturating_mul(messages as u64))
        };
        let held = self
            .lanes
            .iter()
            .filter(|(id, _)| !id.dead_letter)
            .map(|(_, lane)| counted(lane.size_bytes(), lane.len()))
            .sum();
        self.intake.admit(held, counted(bytes, messages))
    }

    /// Records the intake's counter in the journal.
    fn note_next_seq(&mut self) {
        let next = self.intake.next_seq();
        self.journal.push((LaneId::MAIN, Change::NextSeq(next)));
    }

    /// Holds a message scheduled under `seq` (its `record` as if active) until `due`.
    fn hold_scheduled(&mut self, seq: i64, record: Record, arrival: Arrival, due: i64) {
        let scheduled = Record {
            state: MessageState::Scheduled,
            scheduled_ms: due,
            ..record
        };
        let session = arrival.session_id.as_deref();
        self.holder().insert(seq, scheduled, arrival.bytes, session);
        self.schedule.add(due, seq);
    }

    /// Takes `count` sequence numbers now for messages a transaction schedules (Service Bus
    /// answers `schedule-message` with them at once). The counter is journaled, so no number
    /// is handed out twice; a rollback leaves its numbers unused.
    pub fn reserve(&mut self, count: usize) -> Vec<i64> {
        let numbers = (0..count).map(|_| self.intake.number()).collect();
        self.note_next_seq();
        numbers
    }

    /// Stores messages scheduled under numbers [`EntityCore::reserve`] took (a committed
    /// transaction's), each held until its scheduled enqueue time (activated at once when that
    /// has passed). The caller has admitted them (see [`EntityCore::admit`]).
    pub fn schedule_reserved(&mut self, now_ms: i64, scheduled: Vec<(i64, Arrival)>) {
        let enqueued_ms = self.intake.enqueued_time(now_ms);
        self.sent += scheduled.len() as u64;
        for (seq, arrival) in scheduled {
            let record = Record {
                state: MessageState::Active,
                delivery_count: 0,
                enqueued_ms,
                size: u32::try_from(arrival.bytes.len()).unwrap_or(u32::MAX),
                expires_ms: NEVER,
                scheduled_ms: 0,
            };
            let due = arrival.scheduled_ms.unwrap_or(now_ms);
            self.hold_scheduled(seq, record, arrival, due);
        }
    }

    /// Stores one message under the next sequence number: held until its due time, or
    /// active in each lane that takes it, its expiry computed from `enqueued_ms`.
    fn append(&mut self, enqueued_ms: i64, arrival: Arrival, placement: Placement) {
        let seq = self.intake.number();
        let size = u32::try_from(arrival.bytes.len()).unwrap_or(u32::MAX);
        let record = Record {
            state: MessageState::Active,
            delivery_count: 0,
            enqueued_ms,
            size,
            expires_ms: NEVER,
            scheduled_ms: 0,
        };
        let record = match placement {
            Placement::Held(due) => return self.hold_scheduled(seq, record, arrival, due),
            Placement::Active => record,
            // Its due time stays on the record: it is delivered as scheduled.
            Placement::Activated(due) => Record {
                scheduled_ms: due,
                ..record
            },
        };
        let ttl_ms = self.intake.ttl_ms(arrival.ttl_ms);
        let Some(routes) = &self.routes else {
            let lane = self.holder();
            let ttl_ms = ttl_ms.min(lane.rules().default_ttl_ms);
            let record = Record {
                expires_ms: intake::expiry(enqueued_ms, ttl_ms),
                ..record
            };
            lane.insert(seq, record, arrival.bytes, arrival.session_id.as_deref());
            return;
        };
        // Sends come with their view when the rules read messages; scheduled messages, read
        // back at activation, without. Rules that read none need none.
        let read;
        let view = match arrival.view.as_deref() {
            Some(view) => view,
            None => {
                read = match self.rules_read_messages() {
                    true => message::view(&arrival.bytes).unwrap_or_default(),
                    false => MessageView::default(),
                };
                &read
            }
        };
        let copies: Vec<(LaneId, Copy)> = routes
            .iter()
            .filter_map(|route| route.pick(view).map(|copy| (route.lane, copy)))
            .collect();
        for (id, copy) in copies {
            let Some(lane) = self.lanes.get_mut(&id) else {
                continue;
            };
            // A copy is dead-lettered with a reason and description, or delivered.
            let (reason, description) = match copy {
                Copy::Deliver(_) if lane.requires_session() && arrival.session_id.is_none() => (
                    topic::SESSION_ID_IS_NULL,
                    topic::SESSION_ID_IS_NULL_DESCRIPTION.to_string(),
                ),
                Copy::Deliver(edits) => {
                    let ttl_ms = ttl_ms.min(lane.rules().default_ttl_ms);
                    let body = edited(&arrival.bytes, &edits);
                    let record = Record {
                        expires_ms: intake::expiry(enqueued_ms, ttl_ms),
                        size: u32::try_from(body.len()).unwrap_or(u32::MAX),
                        ..record
                    };
                    lane.insert(seq, record, body, arrival.session_id.as_deref());
                    continue;
                }
                Copy::DeadLetter(description) => (topic::FILTER_EVALUATION_EXCEPTION, description),
            };
            lane.note_dead_lettered(reason);
            let properties = vec![
                (
                    wire::dead_letter::REASON.to_string(),
                    SimpleValue::String(reason.into()),
                ),
                (
                    wire::dead_letter::DESCRIPTION.to_string(),
                    SimpleValue::String(description),
                ),
            ];
            let body = message::set_application_properties(&arrival.bytes, &properties)
                .unwrap_or_else(|_| arrival.bytes.clone());
            if let Some(dead) = self.lanes.get_mut(&id.dead_letter_lane()) {
                dead.accept_dead_letter(seq, record, body);
            }
        }
    }

    /// Sequence numbers of the scheduled messages due by `now_ms`, earliest first, at most
    /// `limit` of them.
    pub fn due_scheduled(&self, now_ms: i64, limit: usize) -> Vec<i64> {
        self.schedule
            .due(now_ms, limit)
            .into_iter()
            .map(|(_, seq)| seq)
            .collect()
    }

    /// Activates scheduled messages (their bytes given back by the caller): each leaves the
    /// schedule and is enqueued again as if sent now, under a new sequence number and
    /// enqueued time, its time to live counting from now. Numbers no longer scheduled are
    /// skipped.
    pub fn activate(&mut self, now_ms: i64, due: Vec<(i64, Arrival)>) {
        let enqueued_ms = self.intake.enqueued_time(now_ms);
        for (seq, arrival) in due {
            let Some(due_ms) = self.scheduled_due(seq) else {
                continue;
            };
            self.holder().remove(seq);
            self.schedule.remove(due_ms, seq);
            self.append(enqueued_ms, arrival, Placement::Activated(due_ms));
            self.moves = true;
        }
        self.note_next_seq();
    }

    /// When a scheduled message is due, if `seq` is one.
    fn scheduled_due(&mut self, seq: i64) -> Option<i64> {
        self.holder()
            .record(seq)
            .filter(|record| record.state == MessageState::Scheduled)
            .map(|record| record.scheduled_ms)
    }

    /// Deletes scheduled messages (`cancel-scheduled-message`), all or none.
    ///
    /// # Errors
    /// [`EntityError::MessageNotFound`] when a number is not a scheduled message (it may have
    /// been activated already: activation wins over a cancel); nothing is deleted then.
    pub fn cancel_scheduled(&mut self, seqs: &[i64]) -> Result<(), EntityError> {
        if let Some(seq) = seqs.iter().find(|seq| self.scheduled_due(**seq).is_none()) {
            return Err(EntityError::MessageNotFound(*seq, "scheduled"));
        }
        for seq in seqs {
            if let Some(due_ms) = self.scheduled_due(*seq) {
                self.holder().remove(*seq);
                self.schedule.remove(due_ms, *seq);
            }
        }
        Ok(())
    }

    /// Whether scheduled messages wait for their time.
    pub fn has_scheduled(&self) -> bool {
        !self.schedule.is_empty()
    }

    /// Whether a consumer waits for messages (holds credit): auto-delete counts it as activity.
    pub fn has_waiting_consumer(&self) -> bool {
        self.lanes.values().any(QueueCore::has_waiting_consumer)
    }

    /// Registers a consumer of `lane` with no demand that may have `window` message bytes in
    /// flight.
    ///
    /// # Errors
    /// [`EntityError::Deleted`] when the entity has no such lane, and
    /// [`EntityError::SessionMismatch`] when the lane requires sessions.
    pub fn add_consumer(
        &mut self,
        consumer: ConsumerId,
        lane: LaneId,
        mode: ReceiveMode,
        window: u64,
    ) -> Result<(), EntityError> {
        let queue = self.lane(lane)?;
        if queue.requires_session() {
            return Err(EntityError::SessionMismatch(
                "It is not possible for an entity that requires sessions to create a \
                 non-sessionful message receiver."
                    .into(),
            ));
        }
        queue.subscribe(consumer, mode, window);
        self.consumers.insert(consumer, lane);
        Ok(())
    }

    /// Registers a session receiver (no credit) and binds it to the session it asks for;
    /// returns the session and when its lock ends, or `None` while it waits for the next
    /// available one ([`EntityCore::bind_waiting`] answers it then).
    ///
    /// # Errors
    /// [`EntityError::Deleted`] when the entity has no such lane, and the lane's refusals
    /// (see [`QueueCore::accept_session`]); the receiver is not registered then.
    pub fn accept_session(
        &mut self,
        consumer: ConsumerId,
        lane: LaneId,
        mode: ReceiveMode,
        window: u64,
        request: &SessionRequest,
        now_ms: i64,
    ) -> Result<Option<(SessionId, i64)>, EntityError> {
        let queue = self.lane(lane)?;
        let (wanted, timeout_ms) = match request {
            SessionRequest::Named(id) => (Some(id.as_str()), 0),
            SessionRequest::NextAvailable { timeout_ms } => (None, *timeout_ms),
        };
        queue.subscribe(consumer, mode, window);
        match queue.accept_session(consumer, wanted, timeout_ms, now_ms) {
            Ok(bound) => {
                self.consumers.insert(consumer, lane);
                Ok(bound)
            }
            Err(error) => {
                queue.unsubscribe(consumer);
                Err(error)
            }
        }
    }

    /// Binds waiting session receivers to sessions that became available, and gives up on
    /// those whose timeout passed (they are unregistered).
    pub fn bind_waiting(&mut self, now_ms: i64) -> Vec<(ConsumerId, Binding)> {
        let mut out = Vec::new();
        for lane in self
            .lanes
            .values_mut()
            .filter(|lane| lane.requires_session())
        {
            out.extend(lane.bind_waiting(now_ms));
        }
        for (consumer, binding) in &out {
            if binding.is_err() {
                self.remove_consumer(*consumer);
            }
        }
        out
    }

    /// The session receivers whose session lock lapsed since the last call (unregistered
    /// already), with their sessions.
    pub fn take_lapsed(&mut self) -> Vec<(ConsumerId, SessionId)> {
        let mut out = Vec::new();
        for lane in self.lanes.values_mut() {
            out.extend(lane.take_lapsed());
        }
        for (consumer, _) in &out {
            self.consumers.remove(consumer);
        }
        out
    }

    /// Removes a consumer. Its locks stay, as in Service Bus (see [`QueueCore::unsubscribe`]).
    pub fn remove_consumer(&mut self, consumer: ConsumerId) {
        if let Some(lane) = self.consumers.remove(&consumer) {
            if let Some(lane) = self.lanes.get_mut(&lane) {
                lane.unsubscribe(consumer);
            }
        }
    }

    /// The lane of a consumer, if it is registered.
    pub fn lane_of(&mut self, consumer: ConsumerId) -> Option<&mut QueueCore> {
        let lane = self.consumers.get(&consumer)?;
        self.lanes.get_mut(lane)
    }

    /// The id of a consumer's lane, if it is registered.
    pub fn lane_id_of(&self, consumer: ConsumerId) -> Option<LaneId> {
        self.consumers.get(&consumer).copied()
    }

    /// Hands available messages to consumers with demand, lane by lane; selectors read
    /// messages through `reader`.
    pub fn dispatch(&mut self, now_ms: i64, reader: &mut Reader) -> Vec<Delivery> {
        let mut out = Vec::new();
        for (id, lane) in &mut self.lanes {
            out.extend(lane.dispatch(now_ms, reader.at(*id)));
        }
        out
    }

    /// Delivers what a consumer's drain may take now (see [`QueueCore::drain`]); a consumer
    /// not registered has finished.
    pub fn drain(
        &mut self,
        consumer: ConsumerId,
        now_ms: i64,
        reader: &mut Reader,
    ) -> (Vec<Delivery>, bool) {
        let Some(id) = self.lane_id_of(consumer) else {
            return (Vec::new(), true);
        };
        match self.lanes.get_mut(&id) {
            Some(lane) => lane.drain(consumer, now_ms, reader.at(id)),
            None => (Vec::new(), true),
        }
    }

    /// Applies one settlement from the consumer that holds the lock; returns its lane.
    ///
    /// # Errors
    /// [`EntityError::LockLost`] when the consumer is unknown or the lock is gone, and the
    /// lane's own refusals.
    pub fn settle(
        &mut self,
        consumer: ConsumerId,
        lock: LockRef,
        settlement: &Settlement,
    ) -> Result<LaneId, EntityError> {
        let lane = self.lane_id_of(consumer).ok_or(EntityError::LockLost)?;
        self.lane(lane)?.settle(consumer, lock, settlement)?;
        Ok(lane)
    }

    /// Unlocks every message whose lock ran out by `now_ms`, in every lane; returns how many.
    pub fn expire_locks(&mut self, now_ms: i64) -> usize {
        self.lanes
            .values_mut()
            .map(|lane| lane.expire_locks(now_ms))
            .sum()
    }

    /// Removes (or dead-letters) every unlocked message whose time to live ran out by
    /// `now_ms`, in every lane; returns how many.
    pub fn expire_due(&mut self, now_ms: i64) -> usize {
        if let Some(window) = &mut self.duplicates {
            window.forget_before(now_ms);
        }
        self.lanes
            .values_mut()
            .map(|lane| lane.expire_due(now_ms))
            .sum()
    }

    /// Gives back the memory the lanes' indexes kept from a larger backlog.
    pub fn release_spare_capacity(&mut self) {
        for lane in self.lanes.values_mut() {
            lane.release_spare_capacity();
        }
    }

    /// The next instant (ms) at which something happens without a command: a lock ends or a
    /// scheduled message is due.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.lanes
            .values()
            .filter_map(QueueCore::next_lock_expiry_ms)
            .chain(self.schedule.next_due_ms())
            .min()
    }

    /// The changes made since the last call, by lane, to be written to the log, and whether
    /// they delete a message and store it again under a new number (a scheduled message's
    /// activation), which only an atomic write may do.
    pub fn take_changes(&mut self) -> (Vec<(LaneId, Change)>, bool) {
        let mut changes = std::mem::take(&mut self.journal);
        if let Some(window) = &mut self.duplicates {
            changes.extend(window.take_changes().into_iter().map(|c| (LaneId::MAIN, c)));
        }
        for (id, lane) in &mut self.lanes {
            changes.extend(lane.take_changes().into_iter().map(|c| (*id, c)));
        }
        (changes, std::mem::take(&mut self.moves))
    }

    /// Messages the lanes removed for dead-lettering since the last call, each with the lane
    /// it goes to.
    pub fn take_dead_letters(&mut self) -> Vec<(LaneId, DeadLetter)> {
        let mut out = Vec::new();
        for (id, lane) in &mut self.lanes {
            let to = id.dead_letter_lane();
            out.extend(lane.take_dead_letters().into_iter().map(|d| (to, d)));
        }
        out
    }

    /// Stores a dead-lettered message (its bytes with the reason written in) in the
    /// dead-letter lane `lane`, under its own sequence number, receivable at once.
    pub fn accept_dead_letter(&mut self, lane: LaneId, seq: i64, record: Record, body: Bytes) {
        if let Some(lane) = self.lanes.get_mut(&lane) {
            lane.accept_dead_letter(seq, record, body);
        }
    }

    /// The route of a subscription's lane.
    fn route(&mut self, lane: LaneId) -> Result<&mut Route, EntityError> {
        let not_a_subscription = EntityError::NotAllowed("rules belong to a topic's subscriptions");
        self.routes
            .as_mut()
            .filter(|_| !lane.dead_letter)
            .and_then(|routes| routes.iter_mut().find(|route| route.lane == lane))
            .ok_or(not_a_subscription)
    }

    /// How many filters of `kind` the topic's subscriptions hold together (true and false
    /// filters count as SQL filters, as in Service Bus).
    fn filters_of(&self, kind: FilterKind) -> usize {
        (self.routes.iter().flatten())
            .flat_map(|route| &route.rules)
            .filter(|kept| filter_kind(&kept.filter) == kind)
            .count()
    }

    /// Whether a topic's rules read the messages sent to it (false for a queue).
    pub fn rules_read_messages(&self) -> bool {
        (self.routes.iter().flatten()).any(Route::reads_messages)
    }

    /// A topic's SQL and correlation filters, across its subscriptions (0 and 0 for a queue).
    pub fn filter_counts(&self) -> (usize, usize) {
        (
            self.filters_of(FilterKind::Sql),
            self.filters_of(FilterKind::Correlation),
        )
    }

    /// Adds a rule to a subscription (`add-rule`), stored with the entity's durability.
    ///
    /// # Errors
    /// [`EntityError::InvalidRuleName`] for a name the config would refuse;
    /// [`EntityError::FilterQuotaExceeded`] when the topic has as many filters of the rule's
    /// kind as Service Bus allows; [`EntityError::RuleExists`] when the name is taken
    /// (ignoring case); [`EntityError::NotAllowed`] when `lane` is not a subscription.
    pub fn add_rule(&mut self, lane: LaneId, rule: Rule) -> Result<(), EntityError> {
        RULE_NAMES
            .check(&rule.name)
            .map_err(EntityError::InvalidRuleName)?;
        let kind = filter_kind(&rule.filter);
        let held = self.filters_of(kind);
        let max = match kind {
            FilterKind::Correlation => MAX_CORRELATION_FILTERS,
            FilterKind::Sql => MAX_SQL_FILTERS,
        };
        if held >= max {
            let kind = match kind {
                FilterKind::Correlation => "correlation",
                FilterKind::Sql => "SQL",
            };
            return Err(EntityError::FilterQuotaExceeded { kind, max });
        }
        let route = self.route(lane)?;
        if route
            .rules
            .iter()
            .any(|kept| kept.name.eq_ignore_ascii_case(&rule.name))
        {
            return Err(EntityError::RuleExists {
                subscription: String::new(),
                rule: rule.name,
            });
        }
        let change = Change::Rule {
            name: rule.name.clone(),
            stored: Some(rule.stored()),
        };
        route.rules.push(rule);
        self.journal.push((lane, change));
        Ok(())
    }

    /// Replaces a subscription's rule of the same name (ignoring case) in one step, so that no
    /// message is routed between an old rule and its new one: the rule keeps its place, its
    /// stored name and its creation time, and is stored as `add-rule` stores one. Returns the
    /// rule as it now is.
    ///
    /// # Errors
    /// [`EntityError::RuleNotFound`] when it has no rule of that name;
    /// [`EntityError::NotAllowed`] when `lane` is not a subscription.
    pub fn replace_rule(&mut self, lane: LaneId, mut rule: Rule) -> Result<Rule, EntityError> {
        let route = self.route(lane)?;
        let Some(at) = route
            .rules
            .iter()
            .position(|kept| kept.name.eq_ignore_ascii_case(&rule.name))
        else {
            return Err(EntityError::RuleNotFound(rule.name));
        };
        let old = &route.rules[at];
        rule.name.clone_from(&old.name);
        rule.created_ms = old.created_ms;
        let change = Change::Rule {
            name: rule.name.clone(),
            stored: Some(rule.stored()),
        };
        route.rules[at] = rule.clone();
        self.journal.push((lane, change));
        Ok(rule)
    }

    /// Removes a subscription's rule (`remove-rule`).
    ///
    /// # Errors
    /// [`EntityError::RuleNotFound`] when it has no rule of that name;
    /// [`EntityError::NotAllowed`] when `lane` is not a subscription.
    pub fn remove_rule(&mut self, lane: LaneId, name: &str) -> Result<(), EntityError> {
        let route = self.route(lane)?;
        let at = route
            .rules
            .iter()
            .position(|rule| rule.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| EntityError::RuleNotFound(name.to_string()))?;
        let removed = route.rules.remove(at);
        self.journal.push((
            lane,
            Change::Rule {
                name: removed.name,
                stored: None,
            },
        ));
        Ok(())
    }

    /// A page of a subscription's rules: `top` of them after the first `skip`, ordered by
    /// name ignoring case, as Service Bus lists them (`enumerate-rules` and the administration
    /// API's rules feed; the JavaScript SDK's own suite expects `correlationRule` before
    /// `sqlRule` whatever their creation order). Messages still meet the rules in the order
    /// they were created.
    ///
    /// # Errors
    /// [`EntityError::NotAllowed`] when `lane` is not a subscription.
    pub fn rules(
        &mut self,
        lane: LaneId,
        skip: usize,
        top: usize,
    ) -> Result<Vec<Rule>, EntityError> {
        let mut rules: Vec<&Rule> = self.route(lane)?.rules.iter().collect();
        rules.sort_by(|a, b| by_rule_name(&a.name, &b.name));
        Ok(rules.into_iter().skip(skip).take(top).cloned().collect())
    }

    /// Notes a client using `lane` at `now_ms` (auto-delete on idle of its subscription).
    pub fn touch(&mut self, lane: LaneId, now_ms: i64) {
        let subscription = lane.subscription;
        if let Some(route) = self.routes.as_mut().and_then(|routes| {
            routes
                .iter_mut()
                .find(|r| r.lane.subscription == subscription)
        }) {
            route.last_active_ms = now_ms;
        }
    }

    /// The subscriptions idle for their `auto_delete_on_idle` time by `now_ms`: no client used
    /// them, and no receiver waits on them with credit.
    pub fn idle_subscriptions(&self, now_ms: i64) -> Vec<LaneId> {
        let waiting = |id: LaneId| {
            [id, id.dead_letter_lane()]
                .iter()
                .filter_map(|id| self.lanes.get(id))
                .any(QueueCore::has_waiting_consumer)
        };
        self.routes
            .iter()
            .flatten()
            .filter(|route| {
                route.auto_delete_ms.is_some_and(|idle| {
                    now_ms.saturating_sub(route.last_active_ms) >= idle && !waiting(route.lane)
                })
            })
            .map(|route| route.lane)
            .collect()
    }

    /// Deletes a subscription (`why`, for the log) with its messages, its dead-letter queue
    /// and the rules it was given at run time; its name stops resolving. Returns its
    /// consumers (their links must go).
    pub fn delete_subscription(&mut self, lane: LaneId, why: &str) -> Vec<ConsumerId> {
        if let Some(topic) = &self.identity.topic {
            topic.names_mut().retain(|name, number| {
                let gone = *number == lane.subscription;
                if gone {
                    tracing::info!(subscription = %name, "deleted {why}");
                }
                !gone
            });
        }
        let Some(routes) = self.routes.as_mut() else {
            return Vec::new();
        };
        let Some(at) = routes.iter().position(|route| route.lane == lane) else {
            return Vec::new();
        };
        let route = routes.remove(at);
        for rule in route.rules {
            let change = Change::Rule {
                name: rule.name,
                stored: None,
            };
            self.journal.push((lane, change));
        }
        for id in [lane, lane.dead_letter_lane()] {
            if let Some(mut gone) = self.lanes.remove(&id) {
                gone.clear();
                let changes = gone.take_changes().into_iter().map(|change| (id, change));
                self.journal.extend(changes);
            }
        }
        let consumers: Vec<ConsumerId> = self
            .consumers
            .iter()
            .filter(|(_, id)| id.subscription == lane.subscription)
            .map(|(consumer, _)| *consumer)
            .collect();
        for consumer in &consumers {
            self.consumers.remove(consumer);
        }
        consumers
    }

    /// Adds a subscription to a running topic: its two lanes and its route. Nothing happens
    /// for a queue.
    pub fn add_subscription(&mut self, subscription: SubscriptionLanes) {
        let Some(routes) = self.routes.as_mut() else {
            return;
        };
        let lane = subscription.route.lane;
        let dead_rules = Rules::dead_letter_queue(subscription.rules.lock_duration_ms);
        self.lanes
            .insert(lane, QueueCore::new(subscription.rules, subscription.main));
        self.lanes.insert(
            lane.dead_letter_lane(),
            QueueCore::new(dead_rules, subscription.dead_letter),
        );
        routes.push(subscription.route);
    }

    /// Applies a subscription's changed settings: its lane's rules (and its dead-letter lane's
    /// lock duration), dead-lettering on filter errors and auto-delete on idle.
    pub fn reconfigure_subscription(&mut self, lane: LaneId, settings: &SubscriptionSettings) {
        if let Some(core) = self.lanes.get_mut(&lane) {
            core.set_rules(settings.rules);
        }
        if let Some(core) = self.lanes.get_mut(&lane.dead_letter_lane()) {
            core.set_rules(Rules::dead_letter_queue(settings.rules.lock_duration_ms));
        }
        let routes = self.routes.iter_mut().flatten();
        if let Some(route) = routes.into_iter().find(|route| route.lane == lane) {
            route.dead_letter_on_filter_error = settings.dead_letter_on_filter_error;
            route.auto_delete_ms = settings.auto_delete_ms;
        }
    }

    /// The highest lane number a topic's subscriptions use (0 for none, or a queue).
    pub fn highest_subscription(&self) -> u32 {
        self.lanes
            .keys()
            .filter(|lane| !lane.is_transfer())
            .map(|lane| lane.subscription)
            .max()
            .unwrap_or(0)
    }

    /// Applies a queue's or topic's changed settings at run time: the entity's size limit and
    /// default time to live, and for a queue the rules of its own lane (`rules`).
    pub fn reconfigure(&mut self, max_size_bytes: u64, default_ttl_ms: i64, rules: Option<Rules>) {
        self.intake.reconfigure(max_size_bytes, default_ttl_ms);
        if let (Some(rules), Some(lane)) = (rules, self.lanes.get_mut(&LaneId::MAIN)) {
            lane.set_rules(rules);
        }
    }

    /// Each lane's counts, by lane id (main lanes and dead-letter lanes of every
    /// subscription).
    pub fn counts(&self) -> Vec<(LaneId, LaneCounts)> {
        self.lanes
            .iter()
            .map(|(lane, core)| (*lane, core.counts()))
            .collect()
    }

    /// What happened in each lane since the broker started.
    pub fn activity(&self) -> Vec<(LaneId, LaneActivity)> {
        self.lanes
            .iter()
            .map(|(lane, core)| (*lane, core.activity().clone()))
            .collect()
    }

    /// Messages sent (or scheduled) to the entity since the broker started.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Sends dropped as duplicates since the broker started.
    pub fn duplicates_dropped(&self) -> u64 {
        self.duplicates_dropped
    }

    /// Turns duplicate detection on with a window of `window_ms` (keeping the ids it holds
    /// when it was on already) or off (`None`: the stored ids are removed).
    pub fn detect_duplicates(&mut self, window_ms: Option<i64>, now_ms: i64) {
        match (window_ms, &mut self.duplicates) {
            (Some(window_ms), Some(window)) => window.set_window(window_ms, now_ms),
            (Some(window_ms), None) => {
                self.duplicates = Some(Duplicates::new(window_ms, Vec::new(), now_ms));
            }
            (None, Some(window)) => {
                window.forget_before(i64::MAX);
                let forgotten = window.take_changes().into_iter();
                self.journal
                    .extend(forgotten.map(|change| (LaneId::MAIN, change)));
                self.duplicates = None;
            }
            (None, None) => {}
        }
    }

    /// Starts duplicate detection with a window recovered from the log.
    pub fn restore_duplicates(&mut self, window: Duplicates) {
        self.duplicates = Some(window);
    }

    /// How many ids the duplicate-detection window holds (0 without detection).
    pub fn duplicate_ids(&self) -> usize {
        self.duplicates.as_ref().map_or(0, Duplicates::len)
    }

    /// Messages stored, in every lane.
    pub fn len(&self) -> usize {
        self.lanes.values().map(QueueCore::len).sum()
    }

    /// Whether no lane holds a message.
    pub fn is_empty(&self) -> bool {
        self.lanes.values().all(QueueCore::is_empty)
    }
}

/// What the broker keeps in memory for each stored message besides its bytes (its index
/// entry, record and lock slot: about 600 bytes, measured), counted against the entity's
/// size limit with the bytes, so that the limit bounds the memory of many small messages too.
pub const INDEX_BYTES_PER_MESSAGE: u64 = 640;

/// Where [`EntityCore::append`] puts a message.
#[derive(Debug, Clone, Copy)]
enum Placement {
    /// Active at once: sent with no due time, or one already passed.
    Active,
    /// Held until this due time (ms since the Unix epoch).
    Held(i64),
    /// Active at once after being held until this due time.
    Activated(i64),
}

/// SQL filters a topic may hold across its subscriptions (Service Bus's quota).
pub const MAX_SQL_FILTERS: usize = 2_000;
/// Correlation filters a topic may hold across its subscriptions (Service Bus's quota).
pub const MAX_CORRELATION_FILTERS: usize = 100_000;

/// The two kinds of filter Service Bus counts against its quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FilterKind {
    /// SQL filters, the true and false filters among them.
    Sql,
    /// Correlation filters.
    Correlation,
}

/// Which quota a filter counts against (a JMS selector is one of the SQL filters Service Bus
/// shows it as).
fn filter_kind(filter: &Filter) -> FilterKind {
    match filter {
        Filter::Correlation(_) => FilterKind::Correlation,
        Filter::True | Filter::False | Filter::Sql(_) | Filter::Selector(_) => FilterKind::Sql,
    }
}

/// The order Service Bus lists a subscription's rules in: by name, ignoring ASCII case as
/// rule names are compared (two names a subscription can hold never compare equal).
fn by_rule_name(a: &str, b: &str) -> std::cmp::Ordering {
    (a.bytes().map(|byte| byte.to_ascii_lowercase()))
        .cmp(b.bytes().map(|byte| byte.to_ascii_lowercase()))
}

mod forwarding;
mod lifecycle;
mod manage;
mod status;
mod stored;
mod transactions;

pub use forwarding::{ForwardBatch, MAX_HOPS};
pub use transactions::StagedAnswer;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod duplicate_tests;

#[cfg(test)]
mod topic_tests;

#[cfg(test)]
mod selector_tests;

#[cfg(test)]
mod topic_model;

#[cfg(test)]
mod stored_tests;

#[cfg(test)]
mod session_model;

/// A copy's bytes with its rules' edits applied (the message as sent when there are none, or
/// when they cannot be applied, which inspect on arrival rules out).
fn edited(bytes: &Bytes, edits: &[crate::filter::Edit]) -> Bytes {
    if edits.is_empty() {
        return bytes.clone();
    }
    topic::apply_edits(bytes, edits).unwrap_or_else(|error| {
        tracing::warn!(%error, "rule action not applied");
        bytes.clone()
    })
}
