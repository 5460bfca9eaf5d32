//! A randomized model of a queue that requires sessions, driven as its actor drives it:
//! sends across sessions, session receivers accepting a named or the next available session
//! (or waiting for one), credit and dispatch, completing and abandoning, receivers leaving,
//! session locks renewed and lapsing, session state, dead-lettering at the delivery limit,
//! and restarts from what was written. After every step:
//! - no two receivers hold one session, and a receiver gets only its session's messages;
//! - each delivery is the oldest message of its session that is neither settled nor locked
//!   (per-session order, an abandoned or unlocked message coming back ahead of later ones);
//! - the next available session is the unheld one with the oldest message.
//!
//! At the end everything left is received: every message sent is completed or dead-lettered
//! exactly once.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use uuid::Uuid;

use super::topic_model::Rng;
use crate::entity::core::EntityCore;
use crate::entity::handle::{
    ConsumerId, EntityError, LaneId, LockRef, ReceiveMode, SessionRequest, Settlement,
};
use crate::entity::queue::{Reader, Rules, Unread};
use crate::message::Arrival;
use crate::store::record::{Record, NEVER};
use crate::store::{Change, Recovered, StoredState};

const SESSIONS: [&str; 5] = ["a", "b", "c", "d", "e"];
const LOCK_MS: i64 = 500;
const MAX_DELIVERIES: u32 = 4;

fn rules() -> Rules {
    Rules {
        lock_duration_ms: LOCK_MS,
        max_delivery_count: MAX_DELIVERIES,
        dead_letter_allowed: true,
        default_ttl_ms: NEVER,
        expires: true,
        dead_letter_on_expiry: false,
        requires_session: true,
        counts_deliveries: true,
    }
}

/// A session receiver as the model sees it.
#[derive(Debug, Default)]
struct Holder {
    /// The session it holds (`None` while it waits for one).
    session: Option<String>,
    /// When its session lock ends.
    until_ms: i64,
    /// Deliveries it has not settled: sequence number and lock token.
    locked: Vec<(i64, Uuid)>,
}

struct World {
    rng: Rng,
    core: EntityCore,
    now: i64,
    next_consumer: u64,
    holders: BTreeMap<ConsumerId, Holder>,
    /// The session of every message sent.
    session_of: HashMap<i64, String>,
    /// Per session, its messages neither completed nor dead-lettered.
    outstanding: BTreeMap<String, BTreeSet<i64>>,
    /// Deliveries counted per message.
    counted: HashMap<i64, u32>,
    completed: BTreeSet<i64>,
    dead: BTreeSet<i64>,
    /// What the journal wrote: the lane's records, and session states.
    disk: BTreeMap<i64, Record>,
    disk_states: BTreeMap<String, Bytes>,
    disk_next_seq: i64,
    /// The states the model expects.
    states: BTreeMap<String, Bytes>,
}

impl World {
    fn new(seed: u64) -> World {
        World {
            rng: Rng::new(seed),
            core: EntityCore::queue(
                rules(),
                u64::MAX,
                Recovered::default(),
                Recovered::default(),
            ),
            now: 1_000,
            next_consumer: 1,
            holders: BTreeMap::new(),
            session_of: HashMap::new(),
            outstanding: BTreeMap::new(),
            counted: HashMap::new(),
            completed: BTreeSet::new(),
            dead: BTreeSet::new(),
            disk: BTreeMap::new(),
            disk_states: BTreeMap::new(),
            disk_next_seq: 1,
            states: BTreeMap::new(),
        }
    }

    fn held(&self, session: &str) -> Option<ConsumerId> {
        self.holders
            .iter()
            .find(|(_, holder)| holder.session.as_deref() == Some(session))
            .map(|(consumer, _)| *consumer)
    }

    fn locked_seqs(&self) -> BTreeSet<i64> {
        self.holders
            .values()
            .flat_map(|holder| holder.locked.iter().map(|(seq, _)| *seq))
            .collect()
    }

    /// The session the next-available rule picks: unheld, with the oldest message.
    fn expected_next(&self) -> Option<String> {
        self.outstanding
            .iter()
            .filter(|(session, seqs)| !seqs.is_empty() && self.held(session).is_none())
            .min_by_key(|(_, seqs)| seqs.first().copied())
            .map(|(session, _)| session.clone())
    }

    fn send(&mut self) {
        let count = self.rng.range(1, 4);
        let mut arrivals = Vec::new();
        let first = self.core.next_seq();
        for n in 0..count {
            let session = SESSIONS[self.rng.index(SESSIONS.len())].to_string();
            let seq = first + n;
            self.session_of.insert(seq, session.clone());
            self.outstanding
                .entry(session.clone())
                .or_default()
                .insert(seq);
            arrivals.push(Arrival {
                bytes: Bytes::from(format!("{session}:{seq}")),
                ttl_ms: None,
                scheduled_ms: None,
                view: None,
                session_id: Some(session),
                message_id: None,
                partition_key: None,
            });
        }
        let numbers = self.core.enqueue(self.now, arrivals).expect("no quota");
        assert_eq!(numbers, (first..first + count).collect::<Vec<_>>());
        self.core.reveal_up_to(self.core.next_seq());
    }

    fn attach(&mut self) {
        let consumer = ConsumerId(self.next_consumer);
        self.next_consumer += 1;
        let named = self.rng.one_in(2);
        let (request, expected) = if named {
            let session = SESSIONS[self.rng.index(SESSIONS.len())].to_string();
            (SessionRequest::Named(session.clone()), Some(session))
        } else {
            let timeout_ms = self.rng.range(0, 2 * LOCK_MS);
            (
                SessionRequest::NextAvailable { timeout_ms },
                self.expected_next(),
            )
        };
        let result = self.core.accept_session(
            consumer,
            LaneId::MAIN,
            ReceiveMode::PeekLock,
            u64::MAX,
            &request,
            self.now,
        );
        match (result, expected) {
            (Err(EntityError::SessionCannotBeLocked(id)), Some(session)) if named => {
                assert_eq!(id, session);
                assert!(self.held(&session).is_some(), "{session} is free");
            }
            (Ok(Some((id, until))), Some(session)) => {
                assert_eq!(&*id, session.as_str(), "the session picked");
                assert!(self.held(&session).is_none(), "{session} held twice");
                self.holders.insert(
                    consumer,
                    Holder {
                        session: Some(session),
                        until_ms: until,
                        locked: Vec::new(),
                    },
                );
            }
            (Ok(None), None) if !named => {
                self.holders.insert(consumer, Holder::default());
            }
            (result, expected) => panic!("accept {request:?}: {result:?}, expected {expected:?}"),
        }
    }

    /// Binds waiting receivers as the core does after each turn; they take sessions in the
    /// order they came.
    fn bind_waiting(&mut self) {
        for (consumer, binding) in self.core.bind_waiting(self.now) {
            match binding {
                Ok((id, until)) => {
                    let expected = self.expected_next();
                    assert_eq!(Some(id.to_string()), expected, "the session bound");
                    let holder = self.holders.get_mut(&consumer).expect("waiting");
                    assert!(holder.session.is_none());
                    holder.session = Some(id.to_string());
                    holder.until_ms = until;
                }
                Err(error) => {
                    assert_eq!(error, EntityError::NoSessionAvailable);
                    let holder = self.holders.remove(&consumer).expect("waiting");
                    assert!(holder.session.is_none());
                }
            }
        }
    }

    fn credit(&mut self) {
        let consumers: Vec<ConsumerId> = self.holders.keys().copied().collect();
        if consumers.is_empty() {
            return;
        }
        let consumer = consumers[self.rng.index(consumers.len())];
        let credit = self.rng.range(1, 4);
        if let Some(lane) = self.core.lane_of(consumer) {
            lane.add_credit(consumer, credit);
        }
    }

    fn dispatch(&mut self) {
        for delivery in (self.core).dispatch(self.now, &mut Reader::new(&mut Unread)) {
            let locked = self.locked_seqs();
            let holder = self.holders.get(&delivery.consumer).expect("a holder");
            let session = holder.session.clone().expect("holds a session");
            assert_eq!(self.session_of[&delivery.seq], session, "its own session");
            let next = self.outstanding[&session]
                .iter()
                .find(|seq| !locked.contains(seq))
                .copied();
            assert_eq!(
                Some(delivery.seq),
                next,
                "{session}: the oldest message neither settled nor locked"
            );
            let token = delivery.lock_token.expect("peek-lock");
            if let Some(holder) = self.holders.get_mut(&delivery.consumer) {
                holder.locked.push((delivery.seq, token));
            }
        }
    }

    fn settle(&mut self) {
        let with_locks: Vec<ConsumerId> = self
            .holders
            .iter()
            .filter(|(_, holder)| !holder.locked.is_empty())
            .map(|(consumer, _)| *consumer)
            .collect();
        if with_locks.is_empty() {
            return;
        }
        let consumer = with_locks[self.rng.index(with_locks.len())];
        let holder = self.holders.get_mut(&consumer).expect("holder");
        let (seq, token) = holder.locked.remove(self.rng.index(holder.locked.len()));
        let complete = self.rng.one_in(2);
        let settlement = match complete {
            true => Settlement::Complete,
            false => Settlement::Abandon(Vec::new()),
        };
        let result = self
            .core
            .settle(consumer, LockRef { seq, token }, &settlement);
        assert_eq!(result, Ok(LaneId::MAIN), "settle {seq}");
        if complete {
            self.finish(seq, false);
        } else {
            self.count(seq);
        }
        self.move_dead_letters();
    }

    /// Counts a delivery of an unlocked message; at the limit it is dead-lettered.
    fn count(&mut self, seq: i64) {
        let count = self.counted.entry(seq).or_default();
        *count += 1;
        if *count >= MAX_DELIVERIES {
            self.finish(seq, true);
        }
    }

    fn finish(&mut self, seq: i64, dead: bool) {
        let session = &self.session_of[&seq];
        if let Some(seqs) = self.outstanding.get_mut(session) {
            seqs.remove(&seq);
        }
        let fresh = match dead {
            true => self.dead.insert(seq),
            false => self.completed.insert(seq),
        };
        assert!(fresh, "{seq} finished twice");
        assert!(!(self.dead.contains(&seq) && self.completed.contains(&seq)));
    }

    fn move_dead_letters(&mut self) {
        for (to, dead) in self.core.take_dead_letters() {
            assert!(
                self.dead.contains(&dead.seq),
                "{} dead-lettered early",
                dead.seq
            );
            self.core
                .accept_dead_letter(to, dead.seq, dead.record, Bytes::new());
        }
    }

    /// A receiver goes: its session is free, its locked messages come back, counted.
    fn leave(&mut self) {
        let consumers: Vec<ConsumerId> = self.holders.keys().copied().collect();
        if consumers.is_empty() {
            return;
        }
        let consumer = consumers[self.rng.index(consumers.len())];
        self.core.remove_consumer(consumer);
        let holder = self.holders.remove(&consumer).expect("holder");
        for (seq, _) in holder.locked {
            self.count(seq);
        }
        self.move_dead_letters();
    }

    fn renew(&mut self) {
        let held: Vec<(ConsumerId, String)> = self
            .holders
            .iter()
            .filter_map(|(consumer, holder)| Some((*consumer, holder.session.clone()?)))
            .collect();
        if held.is_empty() {
            return;
        }
        let (consumer, session) = held[self.rng.index(held.len())].clone();
        let lane = self.core.lane(LaneId::MAIN).expect("lane");
        let until = lane.renew_session_lock(&session, self.now).expect("held");
        assert_eq!(until, self.now + LOCK_MS);
        if let Some(holder) = self.holders.get_mut(&consumer) {
            holder.until_ms = until;
        }
    }

    fn set_state(&mut self) {
        let held: Vec<String> = self
            .holders
            .values()
            .filter_map(|holder| holder.session.clone())
            .collect();
        let lane = self.core.lane(LaneId::MAIN).expect("lane");
        let Some(session) = held.first().cloned() else {
            let free = SESSIONS[0];
            let refused = lane.set_session_state(free, Some(Bytes::from_static(b"x")), self.now);
            assert!(
                matches!(refused, Err(EntityError::SessionLockLost(_))),
                "{refused:?}"
            );
            return;
        };
        let state = match self.rng.one_in(3) {
            true => None,
            false => Some(Bytes::from(format!("state at {}", self.now))),
        };
        lane.set_session_state(&session, state.clone(), self.now)
            .expect("held");
        assert_eq!(lane.session_state(&session), Ok(state.clone()));
        match state {
            Some(state) => self.states.insert(session, state),
            None => self.states.remove(&session),
        };
    }

    /// Time passes; the session locks that run out end, their messages come back counted.
    fn advance(&mut self) {
        self.now += self.rng.range(1, LOCK_MS);
        self.core.expire_locks(self.now);
        let lapsed: BTreeSet<ConsumerId> = self
            .core
            .take_lapsed()
            .into_iter()
            .map(|(consumer, _)| consumer)
            .collect();
        let expected: BTreeSet<ConsumerId> = self
            .holders
            .iter()
            .filter(|(_, holder)| holder.session.is_some() && holder.until_ms <= self.now)
            .map(|(consumer, _)| *consumer)
            .collect();
        assert_eq!(
            lapsed, expected,
            "the session locks that ran out at {}",
            self.now
        );
        for consumer in lapsed {
            let holder = self.holders.remove(&consumer).expect("holder");
            for (seq, _) in holder.locked {
                self.count(seq);
            }
        }
        self.move_dead_letters();
    }

    /// Writes the journal to the model's disk.
    fn persist(&mut self) {
        let (changes, _) = self.core.take_changes();
        for (lane, change) in changes {
            if lane != LaneId::MAIN {
                continue;
            }
            match change {
                Change::Put { seq, record, .. } | Change::Update { seq, record } => {
                    self.disk.insert(seq, record);
                }
                Change::Delete { seq } => {
                    self.disk.remove(&seq);
                }
                Change::NextSeq(next) => self.disk_next_seq = next,
                Change::SessionState {
                    session,
                    state: Some(stored),
                } => {
                    self.disk_states.insert(session, stored.state);
                }
                Change::SessionState {
                    session,
                    state: None,
                } => {
                    self.disk_states.remove(&session);
                }
                Change::Rule { .. } => panic!("a queue has no rules"),
                Change::Accepted { .. } | Change::Forgotten(_) => {
                    panic!("the queue does not detect duplicates")
                }
            }
        }
    }

    /// Restarts from the model's disk: every receiver is gone, every lock with it (volatile:
    /// not counted), the states kept.
    fn restart(&mut self) {
        self.persist();
        assert_eq!(self.disk_states, self.states, "the states written");
        let recovered = Recovered {
            next_seq: self.disk_next_seq,
            records: self
                .disk
                .iter()
                .map(|(seq, record)| (*seq, *record))
                .collect(),
            sessions: self
                .disk
                .keys()
                .map(|seq| (*seq, self.session_of[seq].clone()))
                .collect(),
            session_states: self
                .disk_states
                .iter()
                .map(|(id, state)| {
                    let stored = StoredState {
                        state: state.clone(),
                        updated_ms: 0,
                    };
                    (id.clone(), stored)
                })
                .collect(),
        };
        self.core = EntityCore::queue(rules(), u64::MAX, recovered, Recovered::default());
        self.holders.clear();
        for (seq, record) in &self.disk {
            assert_eq!(
                record.delivery_count,
                self.counted.get(seq).copied().unwrap_or(0),
                "deliveries of {seq} written"
            );
        }
        let stored: BTreeSet<i64> = self.disk.keys().copied().collect();
        let outstanding: BTreeSet<i64> = self.outstanding.values().flatten().copied().collect();
        assert_eq!(stored, outstanding, "what the disk holds");
    }

    /// Receives everything left: each session in turn, completing what arrives.
    fn drain(&mut self) {
        let consumers: Vec<ConsumerId> = self.holders.keys().copied().collect();
        for consumer in consumers {
            self.core.remove_consumer(consumer);
            for (seq, _) in self.holders.remove(&consumer).expect("holder").locked {
                self.count(seq);
            }
        }
        self.move_dead_letters();
        while let Some(session) = self.expected_next() {
            let consumer = ConsumerId(self.next_consumer);
            self.next_consumer += 1;
            let bound = self.core.accept_session(
                consumer,
                LaneId::MAIN,
                ReceiveMode::PeekLock,
                u64::MAX,
                &SessionRequest::NextAvailable { timeout_ms: 0 },
                self.now,
            );
            let (id, until) = bound.expect("accepted").expect("a session is available");
            assert_eq!(&*id, session.as_str());
            self.holders.insert(
                consumer,
                Holder {
                    session: Some(session.clone()),
                    until_ms: until,
                    locked: Vec::new(),
                },
            );
            if let Some(lane) = self.core.lane_of(consumer) {
                lane.add_credit(consumer, 1_000);
            }
            self.dispatch();
            let locked = std::mem::take(&mut self.holders.get_mut(&consumer).expect("h").locked);
            assert_eq!(
                locked.len(),
                self.outstanding[&session].len(),
                "{session} delivered whole"
            );
            for (seq, token) in locked {
                let result =
                    self.core
                        .settle(consumer, LockRef { seq, token }, &Settlement::Complete);
                assert_eq!(result, Ok(LaneId::MAIN));
                self.finish(seq, false);
            }
            self.core.remove_consumer(consumer);
            self.holders.remove(&consumer);
        }
        let sent: BTreeSet<i64> = self.session_of.keys().copied().collect();
        let finished: BTreeSet<i64> = self.completed.union(&self.dead).copied().collect();
        assert_eq!(
            finished, sent,
            "every message completed or dead-lettered once"
        );
    }
}

#[test]
fn sessions_keep_order_and_exclusivity_and_lose_nothing() {
    for seed in 0..40 {
        let mut world = World::new(seed);
        for _ in 0..400 {
            match world.rng.below(20) {
                0..=3 => world.send(),
                4..=6 => world.attach(),
                7..=9 => world.credit(),
                10..=12 => world.settle(),
                13 => world.leave(),
                14 => world.renew(),
                15 => world.set_state(),
                16 | 17 => world.advance(),
                18 => world.restart(),
                _ => {}
            }
            world.bind_waiting();
            world.dispatch();
            world.persist();
        }
        world.drain();
    }
}
