//! The pure core of a queue, driven as its actor drives it: numbering, delivery, locks,
//! settlement, deferral, scheduling, time to live and recovery, without sleeping.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use fe2o3_amqp::types::primitives::{SimpleValue, Timestamp, Value};
use uuid::Uuid;

use crate::entity::core::EntityCore;
use crate::entity::handle::{
    ConsumerId, Delivery, EntityError, LaneId, LockRef, ReceiveMode, Settlement,
};
use crate::entity::queue::{DeadLetter, QueueCore, Reader, Rules, Unread};
use crate::message::{Arrival, DeliveryStamp};
use crate::store::record::{Record, NEVER};
use crate::store::{Change, Recovered};
use crate::wire;

/// A queue's core in the vocabulary of one lane: these tests look at the queue's own lane.
struct Queue {
    core: EntityCore,
    /// Whether the changes taken last moved a message (see [`EntityCore::take_changes`]).
    moved: bool,
}

impl Queue {
    fn new(rules: Rules) -> Queue {
        Queue::recover(rules, Recovered::default())
    }

    fn recover(rules: Rules, main: Recovered) -> Queue {
        Queue {
            core: EntityCore::queue(rules, u64::MAX, main, Recovered::default()),
            moved: false,
        }
    }

    fn main(&mut self) -> &mut QueueCore {
        self.core
            .lane(LaneId::MAIN)
            .expect("a queue has its own lane")
    }

    /// Enqueues messages with distinct ids (or none); returns the first one's number.
    fn enqueue(&mut self, now: i64, messages: Vec<Arrival>) -> Result<i64, EntityError> {
        let numbers = self.core.enqueue(now, messages)?;
        Ok(numbers[0])
    }

    fn next_seq(&self) -> i64 {
        self.core.next_seq()
    }

    fn reveal_up_to(&mut self, next_seq: i64) {
        self.core.reveal_up_to(next_seq);
    }

    fn has_unrevealed(&self) -> bool {
        self.core.has_unrevealed()
    }

    fn subscribe(&mut self, consumer: ConsumerId, mode: ReceiveMode, window: u64) {
        self.core
            .add_consumer(consumer, LaneId::MAIN, mode, window)
            .expect("the lane exists");
    }

    fn unsubscribe(&mut self, consumer: ConsumerId) {
        self.core.remove_consumer(consumer);
    }

    fn add_credit(&mut self, consumer: ConsumerId, delta: i64) {
        self.main().add_credit(consumer, delta);
    }

    fn dispatch(&mut self, now: i64) -> Vec<Delivery> {
        self.core.dispatch(now, &mut Reader::new(&mut Unread))
    }

    fn drain(&mut self, consumer: ConsumerId, now: i64) -> (Vec<Delivery>, bool) {
        (self.main()).drain(consumer, now, &mut Reader::new(&mut Unread))
    }

    fn settle(
        &mut self,
        consumer: ConsumerId,
        lock: LockRef,
        settlement: &Settlement,
    ) -> Result<(), EntityError> {
        self.core.settle(consumer, lock, settlement).map(|_| ())
    }

    fn settle_by_token(
        &mut self,
        token: Uuid,
        settlement: &Settlement,
    ) -> Result<i64, EntityError> {
        self.main().settle_by_token(token, settlement)
    }

    fn give_back(&mut self, delivery: Delivery) -> bool {
        self.main().give_back(delivery)
    }

    fn peek(&self, from: i64, count: usize) -> Vec<(i64, DeliveryStamp)> {
        self.core
            .lanes()
            .find(|(id, _)| **id == LaneId::MAIN)
            .map(|(_, lane)| lane.peek(from, count, None))
            .unwrap_or_default()
    }

    fn len(&self) -> usize {
        self.peek(0, usize::MAX).len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queue lane's changes.
    fn take_changes(&mut self) -> Vec<Change> {
        let (changes, moved) = self.core.take_changes();
        self.moved = moved;
        changes
            .into_iter()
            .filter(|(lane, _)| *lane == LaneId::MAIN)
            .map(|(_, change)| change)
            .collect()
    }

    fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        self.core
            .take_dead_letters()
            .into_iter()
            .map(|(_, dead)| dead)
            .collect()
    }

    fn expire_locks(&mut self, now: i64) -> usize {
        self.core.expire_locks(now)
    }

    fn expire_due(&mut self, now: i64) -> usize {
        self.core.expire_due(now)
    }

    fn next_deadline_ms(&self) -> Option<i64> {
        self.core.next_deadline_ms()
    }

    fn due_scheduled(&self, now: i64, limit: usize) -> Vec<i64> {
        self.core.due_scheduled(now, limit)
    }

    fn activate(&mut self, now: i64, due: Vec<(i64, Arrival)>) {
        self.core.activate(now, due);
    }

    fn cancel_scheduled(&mut self, seqs: &[i64]) -> Result<(), EntityError> {
        self.core.cancel_scheduled(seqs)
    }

    fn has_scheduled(&self) -> bool {
        self.core.has_scheduled()
    }
}

/// The rules of the queue these tests drive (and of the topic tests' subscriptions).
pub(super) const RULES: Rules = Rules {
    lock_duration_ms: 1_000,
    max_delivery_count: 10,
    dead_letter_allowed: true,
    default_ttl_ms: NEVER,
    expires: true,
    dead_letter_on_expiry: false,
    requires_session: false,
    counts_deliveries: true,
};
const A: ConsumerId = ConsumerId(1);
const B: ConsumerId = ConsumerId(2);

/// `n` empty messages.
fn empties(n: usize) -> Vec<Arrival> {
    vec![Arrival::bare(Bytes::new()); n]
}

fn queue_with(n: usize) -> Queue {
    let mut q = Queue::new(RULES);
    for i in 0..n {
        q.enqueue(10, vec![Arrival::bare(Bytes::from(vec![i as u8]))])
            .expect("room");
    }
    q.reveal_up_to(q.next_seq());
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
    let mut q = Queue::new(RULES);
    assert_eq!(q.enqueue(100, empties(2)), Ok(1));
    assert_eq!(q.enqueue(50, empties(1)), Ok(3));
    q.reveal_up_to(q.next_seq());
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
    let got: Vec<(ConsumerId, i64)> = q.dispatch(0).iter().map(|d| (d.consumer, d.seq)).collect();
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
fn a_browser_is_shown_copies_in_order_and_takes_nothing() {
    let mut q = queue_with(3);
    q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
    q.add_credit(A, 1);
    let locked = q.dispatch(0).remove(0);
    q.subscribe(B, ReceiveMode::Browse, u64::MAX);
    q.add_credit(B, 2);
    let shown = q.dispatch(0);
    let seqs: Vec<(i64, bool)> = (shown.iter())
        .map(|copy| (copy.seq, copy.lock_token.is_none() && copy.stamp.presettled))
        .collect();
    assert_eq!(
        seqs,
        [(1, true), (2, true)],
        "locked ones shown too, as a peek shows them"
    );
    assert_eq!(q.len(), 3, "nothing taken");
    q.add_credit(B, 5);
    let (rest, finished) = q.drain(B, 0);
    assert_eq!(rest.iter().map(|copy| copy.seq).collect::<Vec<_>>(), [3]);
    assert!(finished, "a drain ends where the messages do");
    // The peek-lock consumer still holds its lock and takes the others.
    let token = locked.lock_token.expect("peek-lock");
    assert_eq!(q.settle_by_token(token, &Settlement::Complete), Ok(1));
    q.add_credit(A, 5);
    assert_eq!(
        q.dispatch(0).len(),
        2,
        "the others are still there for a receiver"
    );
}

#[test]
fn a_browser_sees_later_messages_and_a_copy_given_back_is_shown_again_not_stored() {
    let mut q = queue_with(1);
    q.subscribe(B, ReceiveMode::Browse, u64::MAX);
    q.add_credit(B, 5);
    let first = q.dispatch(0).remove(0);
    q.give_back(first);
    assert_eq!(q.len(), 1, "a copy given back is not stored again");
    q.add_credit(B, 5);
    assert_eq!(q.dispatch(0).remove(0).seq, 1, "shown again");
    q.enqueue(10, empties(1)).expect("room");
    q.reveal_up_to(q.next_seq());
    assert_eq!(
        q.dispatch(0).remove(0).seq,
        2,
        "a later message is shown as it comes"
    );
    assert!(q.dispatch(0).is_empty());
}

#[test]
fn messages_are_not_delivered_before_they_are_published() {
    let mut q = Queue::new(RULES);
    q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
    q.add_credit(A, 5);
    q.enqueue(0, empties(2)).expect("room");
    assert!(q.has_unrevealed());
    assert!(q.dispatch(0).is_empty(), "not durable yet");
    q.reveal_up_to(2);
    assert_eq!(
        q.dispatch(0).iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![1]
    );
    q.reveal_up_to(q.next_seq());
    assert!(!q.has_unrevealed());
    assert_eq!(
        q.dispatch(0).iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![2]
    );
}

#[test]
fn the_delivery_limit_dead_letters_with_the_service_bus_reason() {
    let mut q = Queue::new(Rules {
        max_delivery_count: 3,
        ..RULES
    });
    q.enqueue(0, vec![Arrival::bare(Bytes::from_static(b"m"))])
        .expect("room");
    q.reveal_up_to(q.next_seq());
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
    let mut dlq = QueueCore::new(Rules::dead_letter_queue(1_000), Recovered::default());
    dlq.accept_dead_letter(dead[0].seq, dead[0].record, Bytes::from_static(b"m"));
    // Its number is durable: the queue's send was flushed long ago.
    dlq.reveal_up_to(dead[0].seq + 1);
    dlq.subscribe(B, ReceiveMode::PeekLock, u64::MAX);
    dlq.add_credit(B, 1);
    let again = dlq.dispatch(0, &mut Reader::new(&mut Unread)).remove(0);
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
    let mut back = Queue::recover(
        RULES,
        Recovered {
            next_seq: 3,
            records,
            ..Recovered::default()
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
        let mut q = Queue::new(RULES);
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
                    q.reveal_up_to(q.next_seq());
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
                            Change::Put { seq, record, .. } | Change::Update { seq, record } => {
                                stored.insert(seq, record);
                            }
                            Change::Delete { seq } => {
                                stored.remove(&seq);
                            }
                            Change::NextSeq(n) => next_seq_on_disk = n,
                            Change::Rule { .. }
                            | Change::SessionState { .. }
                            | Change::Accepted { .. }
                            | Change::Forgotten(_) => {}
                        }
                    }
                    q = Queue::recover(
                        RULES,
                        Recovered {
                            next_seq: next_seq_on_disk,
                            records: stored.iter().map(|(s, r)| (*s, *r)).collect(),
                            ..Recovered::default()
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

fn timed(ttl_ms: Option<i64>, scheduled_ms: Option<i64>) -> Arrival {
    Arrival {
        bytes: Bytes::from_static(b"t"),
        ttl_ms,
        scheduled_ms,
        view: None,
        session_id: None,
        message_id: None,
        partition_key: None,
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
    let mut q = Queue::new(RULES);
    q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
    q.add_credit(A, 5);
    let scheduled = q.enqueue(100, vec![timed(Some(1_000), Some(5_000))]);
    assert_eq!(scheduled, Ok(1));
    q.reveal_up_to(q.next_seq());
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
    assert!(!q.moved, "a plain send moves nothing");
    q.activate(5_010, vec![(1, timed(Some(1_000), None))]);
    q.take_changes();
    assert!(q.moved, "an activation must be written atomically");
    q.take_changes();
    assert!(!q.moved);
    assert!(!q.has_scheduled());
    q.reveal_up_to(q.next_seq());
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
    let mut q = Queue::new(RULES);
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
    let mut q = Queue::new(Rules {
        default_ttl_ms: 2_000,
        ..RULES
    });
    q.enqueue(1_000, vec![timed(Some(3_600_000), None), timed(None, None)])
        .expect("room");
    q.enqueue(1_500, vec![timed(Some(60_000), None)])
        .expect("room");
    q.reveal_up_to(q.next_seq());
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
    let mut q = Queue::new(Rules {
        dead_letter_on_expiry: true,
        requires_session: false,
        counts_deliveries: true,
        ..RULES
    });
    q.enqueue(0, vec![timed(Some(100), None), timed(Some(100), None)])
        .expect("room");
    q.reveal_up_to(q.next_seq());
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
    let mut dlq = QueueCore::new(Rules::dead_letter_queue(1_000), Recovered::default());
    dlq.accept_dead_letter(dead[0].seq, dead[0].record, Bytes::from_static(b"t"));
    // Its number is durable: the queue's send was flushed long ago.
    dlq.reveal_up_to(dead[0].seq + 1);
    dlq.subscribe(B, ReceiveMode::ReceiveAndDelete, u64::MAX);
    dlq.add_credit(B, 1);
    assert_eq!(
        dlq.expire_due(i64::MAX - 1),
        0,
        "dead-letter queues observe no TTL"
    );
    assert_eq!(dlq.dispatch(10_000, &mut Reader::new(&mut Unread)).len(), 1);
}

#[test]
fn scheduled_and_expiring_messages_keep_their_state_across_recovery() {
    let mut q = Queue::new(RULES);
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
    let mut back = Queue::recover(
        RULES,
        Recovered {
            next_seq: 3,
            records,
            ..Recovered::default()
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
    ttl: Option<i64>,
    expires: i64,
    due: Option<i64>,
    locked: bool,
}

/// Drops from `model` what the queue no longer holds; only expired, unlocked, active
/// messages may have gone.
fn reconcile(q: &Queue, model: &mut BTreeMap<i64, Timed>, now: i64) {
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
            requires_session: false,
            counts_deliveries: true,
            default_ttl_ms: if run % 3 == 0 { 300 } else { NEVER },
            ..RULES
        };
        let mut q = Queue::new(rules);
        q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
        let mut now = 1_000i64;
        let mut model: BTreeMap<i64, Timed> = BTreeMap::new();
        let mut held: Vec<Delivery> = Vec::new();
        let mut stored: Vec<(i64, Record)> = Vec::new();
        let expiry = |ttl: Option<i64>, at: i64| {
            let ttl = ttl.map_or(rules.default_ttl_ms, |t| t.min(rules.default_ttl_ms));
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
                            let ttl = (next(2) == 0).then(|| 50 + next(400) as i64);
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
                    q.reveal_up_to(q.next_seq());
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
                    q.reveal_up_to(q.next_seq());
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
                            Change::Put { seq, record, .. } | Change::Update { seq, record } => {
                                stored.retain(|(s, _)| *s != seq);
                                stored.push((seq, record));
                            }
                            Change::Delete { seq } => stored.retain(|(s, _)| *s != seq),
                            Change::NextSeq(_)
                            | Change::Rule { .. }
                            | Change::SessionState { .. }
                            | Change::Accepted { .. }
                            | Change::Forgotten(_) => {}
                        }
                    }
                    let next_seq = q.next_seq();
                    q = Queue::recover(
                        rules,
                        Recovered {
                            next_seq,
                            records: stored.clone(),
                            ..Recovered::default()
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
    q.reveal_up_to(q.next_seq());
    assert!(q.dispatch(0).is_empty(), "drain consumed the demand");
}

#[test]
fn a_dead_lettered_message_is_resubmitted_as_a_new_arrival_and_dead_letters_are_purged() {
    let mut q = Queue::new(Rules {
        max_delivery_count: 1,
        ..RULES
    });
    let bodies = [Bytes::from_static(b"a"), Bytes::from_static(b"b")];
    q.enqueue(0, bodies.iter().cloned().map(Arrival::bare).collect())
        .expect("room");
    q.reveal_up_to(q.next_seq());
    q.subscribe(A, ReceiveMode::PeekLock, u64::MAX);
    q.add_credit(A, 2);
    for d in q.dispatch(0) {
        q.settle(A, lock_of(&d), &Settlement::Abandon(Vec::new()))
            .expect("abandon");
    }
    let dead = LaneId::MAIN.dead_letter_lane();
    for (to, letter) in q.core.take_dead_letters() {
        let body = bodies[usize::try_from(letter.seq - 1).expect("seq")].clone();
        q.core
            .accept_dead_letter(to, letter.seq, letter.record, body);
    }
    assert_eq!(q.core.lane(dead).expect("its DLQ").len(), 2);

    let again = || Arrival::bare(Bytes::from_static(b"a"));
    assert!(matches!(
        q.core.resubmit(50, LaneId::MAIN, 1, again()),
        Err(EntityError::NotAllowed(_))
    ));
    assert!(matches!(
        q.core.resubmit(50, dead, 99, again()),
        Err(EntityError::MessageNotFound(99, _))
    ));
    let moved = q.core.resubmit(50, dead, 1, again()).expect("resubmitted");
    assert_eq!(moved, 3, "the next sequence number");
    assert_eq!(
        q.core.lane(dead).expect("its DLQ").len(),
        1,
        "gone from the DLQ"
    );
    let record = *q.main().record(moved).expect("back in the queue");
    assert_eq!((record.delivery_count, record.enqueued_ms), (0, 50));
    q.reveal_up_to(q.next_seq());
    q.add_credit(A, 1);
    let delivered = q.dispatch(60);
    assert_eq!(delivered.len(), 1);
    assert_eq!(
        (delivered[0].seq, delivered[0].stamp.delivery_count),
        (3, 0)
    );
    assert_eq!(q.main().activity().received, 3, "counted as an arrival");

    assert!(matches!(
        q.core.purge(LaneId::MAIN),
        Err(EntityError::NotAllowed(_))
    ));
    assert_eq!(q.core.purge(dead).expect("purged"), 1);
    assert!(q.core.lane(dead).expect("its DLQ").is_empty());
}

#[test]
fn a_reserved_number_is_skipped_by_sends_and_scheduled_under_it_at_the_commit() {
    let mut q = Queue::new(RULES);
    assert_eq!(q.enqueue(10, empties(1)), Ok(1));
    assert_eq!(q.core.reserve(2), vec![2, 3]);
    assert_eq!(
        q.enqueue(20, empties(1)),
        Ok(4),
        "sends skip reserved numbers"
    );
    let (changes, _) = q.core.take_changes();
    assert!(
        changes.contains(&(LaneId::MAIN, Change::NextSeq(5))),
        "the counter is journaled past the reservation: {changes:?}"
    );
    q.core
        .schedule_reserved(30, vec![(3, timed(None, Some(9_000)))]);
    q.reveal_up_to(q.next_seq());
    let peeked = q.peek(0, 10);
    let numbers: Vec<i64> = peeked.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(numbers, vec![1, 3, 4], "2 stays unused (a rollback)");
    assert_eq!(state_of(&peeked[1].1), Some(&Value::Int(2)), "scheduled");
    assert_eq!(q.due_scheduled(9_000, 10), vec![3]);
}

/// `n` messages of one `data` section each.
fn datas(n: usize) -> Vec<Arrival> {
    let data = Bytes::from_static(&[0x00, 0x53, 0x75, 0xa0, 0x01, b'x']);
    vec![Arrival::bare(data); n]
}

#[test]
fn transfers_are_numbered_apart_and_movable_only_once_revealed() {
    let mut q = Queue::new(RULES);
    assert!(
        q.core.transfer(1, vec![("b".into(), empties(1))]).is_err(),
        "no transfer lanes yet"
    );
    q.core
        .add_transfer_lanes(Recovered::default(), Recovered::default());
    assert_eq!(q.enqueue(10, empties(1)), Ok(1));
    q.core
        .transfer(20, vec![("b".into(), datas(2)), ("c".into(), datas(1))])
        .expect("transferred");
    assert_eq!(q.core.next_transfer(), 4, "numbered apart from the queue");
    assert_eq!(
        q.enqueue(30, empties(1)),
        Ok(2),
        "the queue's numbers stay gap-free"
    );
    q.reveal_up_to(q.next_seq());
    let lane = q.core.lane(LaneId::TRANSFER).expect("transfer lane");
    assert!(
        lane.take_for_forwarding(10, u64::MAX, 40).is_empty(),
        "not durable yet"
    );
    q.core.reveal_transfers_up_to(q.core.next_transfer());
    let lane = q.core.lane(LaneId::TRANSFER).expect("transfer lane");
    let taken = lane.take_for_forwarding(10, u64::MAX, 40);
    assert_eq!(
        taken.iter().map(|d| d.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(q.core.highest_subscription(), 0, "not a subscription");
}
