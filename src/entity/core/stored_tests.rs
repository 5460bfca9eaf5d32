//! The core's rules that read bodies from a real log (a `sync` store in a temporary
//! directory): dead-lettering with its reason, resubmitting, activation of scheduled
//! messages, management operations, transactions and forwarding, as the actor drives them.

use bytes::Bytes;
use fe2o3_amqp::types::primitives::{SimpleValue, Value};

use crate::entity::core::topic_model::encode;
use crate::entity::core::StagedAnswer;
use crate::entity::core::{EntityCore, Identity};
use crate::entity::operation::{Answer, Operation};
use crate::entity::queue::Reader;
use crate::entity::setup;
use crate::entity::staging::Work;
use crate::entity::terms::{
    ConsumerId, Delivery, EntityError, LaneId, LockRef, ReceiveMode, SessionRequest, Settlement,
};
use crate::filter::Value as Shown;
use crate::message::{self, Arrival};
use crate::store::{EntityLog, Log, Recovered};
use crate::wire::{annotation, dead_letter};

const A: ConsumerId = ConsumerId(1);
/// Any caller (a session's operations check their caller).
const ANYONE: &dyn Fn(ConsumerId) -> bool = &|_| true;

/// A queue's core and its log, as its actor holds them.
pub(super) struct Entity {
    pub(super) core: EntityCore,
    pub(super) log: EntityLog,
    _dir: tempfile::TempDir,
}

impl Entity {
    /// The embedded default's first queue, in a `sync` store of its own.
    pub(super) fn queue() -> Entity {
        Entity::queue_requiring_sessions(false)
    }

    /// [`Entity::queue`], requiring sessions or not.
    fn queue_requiring_sessions(requires_session: bool) -> Entity {
        let (parts, dir) = setup::sync_queue(|queue| queue.requires_session = requires_session);
        let mut core = parts.core;
        core.set_identity(Identity {
            name: parts.name,
            ..Identity::default()
        });
        Entity {
            core,
            log: parts.log,
            _dir: dir,
        }
    }

    /// Writes what the core changed and makes what was sent deliverable (a turn's end).
    pub(super) fn write(&mut self) {
        let (changes, moves) = self.core.take_changes();
        self.log.stage(changes, moves);
        self.log.commit().expect("written");
        self.core.reveal_up_to(self.core.next_seq());
        self.core.reveal_transfers_up_to(self.core.next_transfer());
    }

    /// Sends `count` messages (bodies 0, 1, ...) and writes them; their numbers.
    fn send(&mut self, now: i64, count: u32) -> Vec<i64> {
        let messages = (0..count).map(|marker| arrival(marker, None)).collect();
        let numbers = self.core.send(now, messages).expect("sent");
        self.write();
        numbers
    }

    /// Locks up to `count` messages of `lane` for consumer A.
    fn receive(&mut self, now: i64, lane: LaneId, count: u64) -> Vec<Delivery> {
        if self.core.lane_id_of(A).is_none() {
            let added = self
                .core
                .add_consumer(A, lane, ReceiveMode::PeekLock, u64::MAX);
            added.expect("consumer added");
        }
        self.core.lane(lane).expect("lane").set_limit(A, count);
        self.core.dispatch(now, &mut Reader::new(&mut self.log))
    }

    fn manage(
        &mut self,
        now: i64,
        lane: LaneId,
        operation: Operation,
    ) -> Result<Answer, EntityError> {
        self.core
            .manage(now, lane, operation, ANYONE, &mut self.log)
    }

    /// The application property `name` of the message `seq` of `lane`, as a peek shows it.
    fn property(&mut self, lane: LaneId, seq: i64, name: &str) -> Option<Shown> {
        let peek = Operation::Peek {
            from: seq,
            count: 1,
            session: None,
        };
        let Ok(Answer::Peeked(peeked)) = self.manage(0, lane, peek) else {
            panic!("peeked");
        };
        let view = message::view(&peeked[0]).expect("a message");
        (view.application_properties.into_iter()).find_map(|(n, v)| (n == name).then_some(v))
    }
}

/// A message whose body is `marker`, scheduled for `due` if given.
fn arrival(marker: u32, due: Option<i64>) -> Arrival {
    let mut arrival = message::inspect(encode(&[], None, None, marker)).expect("a message");
    arrival.scheduled_ms = due;
    arrival
}

pub(super) fn lock(delivery: &Delivery) -> LockRef {
    LockRef {
        seq: delivery.seq,
        token: delivery.lock_token.expect("peek-lock"),
    }
}

fn dead_letter(reason: &str) -> Settlement {
    Settlement::DeadLetter {
        reason: Some(reason.into()),
        description: None,
        properties: Default::default(),
    }
}

#[test]
fn a_dead_lettered_message_moves_with_its_reason_and_a_resubmit_takes_it_out() {
    let mut entity = Entity::queue();
    let [seq] = entity.send(0, 1)[..] else {
        panic!("one")
    };
    let delivered = entity.receive(0, LaneId::MAIN, 1);
    let settled = entity
        .core
        .settle(A, lock(&delivered[0]), &dead_letter("Poison"));
    assert_eq!(settled, Ok(LaneId::MAIN));
    entity
        .core
        .move_dead_letters(&mut entity.log)
        .expect("moved");
    entity.write();
    assert_eq!(
        entity.property(LaneId::DEAD_LETTER, seq, dead_letter::REASON),
        Some(Shown::String("Poison".into()))
    );
    let moved = entity.manage(0, LaneId::DEAD_LETTER, Operation::Resubmit { seq });
    let Ok(Answer::Moved(again)) = moved else {
        panic!("resubmitted: {moved:?}")
    };
    entity.write();
    assert_eq!(
        entity.property(LaneId::MAIN, again, dead_letter::REASON),
        None
    );
}

#[test]
fn an_abandon_with_properties_rewrites_the_stored_message() {
    let mut entity = Entity::queue();
    let [seq] = entity.send(0, 1)[..] else {
        panic!("one")
    };
    let delivered = entity.receive(0, LaneId::MAIN, 1);
    let abandon = Settlement::Abandon(vec![("retry".to_owned(), SimpleValue::Int(2))]);
    let settled = (entity.core).settle_locked(A, lock(&delivered[0]), &abandon, &mut entity.log);
    assert_eq!(settled, Ok(LaneId::MAIN));
    entity.write();
    assert_eq!(
        entity.property(LaneId::MAIN, seq, "retry"),
        Some(Shown::Int(2))
    );
}

#[test]
fn a_scheduled_message_is_read_back_and_activated_when_due() {
    let mut entity = Entity::queue();
    let numbers = entity
        .core
        .send(0, vec![arrival(7, Some(1_000))])
        .expect("scheduled");
    entity.write();
    entity
        .core
        .activate_due(999, &mut entity.log)
        .expect("read");
    assert!(
        entity.receive(999, LaneId::MAIN, 1).is_empty(),
        "not due yet"
    );
    entity
        .core
        .activate_due(1_000, &mut entity.log)
        .expect("read");
    entity.write();
    let delivered = entity.receive(1_000, LaneId::MAIN, 1);
    assert_eq!(delivered.len(), 1);
    assert!(
        delivered[0].seq > numbers[0],
        "enqueued again under a new number"
    );
}

#[test]
fn receive_by_sequence_takes_every_deferred_message_asked_for_or_none() {
    let mut entity = Entity::queue();
    let numbers = entity.send(0, 2);
    for delivery in entity.receive(0, LaneId::MAIN, 2) {
        let defer = Settlement::Defer(Default::default());
        let settled = entity.core.settle(A, lock(&delivery), &defer);
        assert!(settled.is_ok(), "{settled:?}");
    }
    let receive = |seqs: Vec<i64>| Operation::ReceiveBySequence {
        seqs,
        mode: ReceiveMode::PeekLock,
        session: None,
    };
    let missing = entity.manage(0, LaneId::MAIN, receive(vec![numbers[0], 99]));
    assert!(
        matches!(missing, Err(EntityError::MessageNotFound(99, _))),
        "{missing:?}"
    );
    let twice = vec![numbers[0], numbers[1], numbers[0]];
    let answered = entity.manage(0, LaneId::MAIN, receive(twice));
    let Ok(Answer::Received(received)) = answered else {
        panic!("received: {answered:?}");
    };
    assert_eq!(received.len(), 2, "a number asked for twice is taken once");
}

#[test]
fn a_sessions_operations_are_its_holders_alone() {
    let mut entity = Entity::queue_requiring_sessions(true);
    let named = SessionRequest::Named("s".into());
    let accepted =
        (entity.core).accept_session(A, LaneId::MAIN, ReceiveMode::PeekLock, 1, &named, 0);
    assert!(matches!(accepted, Ok(Some(_))), "{accepted:?}");
    let state = || Operation::GetSessionState {
        session: "s".into(),
    };
    let holder: &dyn Fn(ConsumerId) -> bool = &|consumer| consumer == A;
    let answered = (entity.core).manage(0, LaneId::MAIN, state(), holder, &mut entity.log);
    assert!(
        matches!(answered, Ok(Answer::SessionState(_))),
        "{answered:?}"
    );
    let another: &dyn Fn(ConsumerId) -> bool = &|consumer| consumer != A;
    let answered = (entity.core).manage(0, LaneId::MAIN, state(), another, &mut entity.log);
    assert!(
        matches!(answered, Err(EntityError::SessionLockLost(_))),
        "{answered:?}"
    );
}

#[test]
fn staged_work_applies_at_the_commit_and_a_rollback_leaves_nothing() {
    let mut entity = Entity::queue();
    let staged = entity.core.stage(1, Work::Send(vec![arrival(1, None)]));
    assert!(matches!(staged, StagedAnswer::Sent(Ok(()))));
    assert_eq!(entity.core.len(), 0, "nothing staged is visible");
    entity
        .core
        .discharge(0, 1, true, &mut entity.log)
        .expect("committed");
    assert_eq!(entity.core.len(), 1);
    entity.core.stage(2, Work::Send(vec![arrival(2, None)]));
    entity
        .core
        .discharge(0, 2, false, &mut entity.log)
        .expect("rolled back");
    assert_eq!(entity.core.len(), 1);
    entity
        .core
        .discharge(0, 2, true, &mut entity.log)
        .expect("nothing left to apply");
    assert_eq!(entity.core.len(), 1, "a transaction's work is applied once");
}

#[test]
fn a_commit_whose_lock_lapsed_applies_none_of_its_work() {
    let mut entity = Entity::queue();
    entity.send(0, 1);
    let delivered = entity.receive(0, LaneId::MAIN, 1);
    let settle = Work::Settle {
        consumer: A,
        items: vec![(lock(&delivered[0]), Settlement::Complete)],
        client_settled: false,
    };
    assert!(matches!(entity.core.stage(1, settle), StagedAnswer::Settled(r) if r == vec![Ok(())]));
    entity.core.stage(1, Work::Send(vec![arrival(2, None)]));
    // Past any lock duration a queue may have (five minutes at most).
    let lapsed = 3_600_000;
    entity.core.expire_locks(lapsed + 1);
    let committed = entity.core.discharge(lapsed + 1, 1, true, &mut entity.log);
    assert_eq!(committed, Err(EntityError::LockLost));
    assert_eq!(entity.core.len(), 1, "the staged send was not applied");
}

#[test]
fn a_rolled_back_settlement_the_client_settled_is_abandoned_one_it_awaits_stays_locked() {
    let mut entity = Entity::queue();
    entity.send(0, 2);
    let delivered = entity.receive(0, LaneId::MAIN, 2);
    for (txn, (delivery, client_settled)) in delivered.iter().zip([true, false]).enumerate() {
        let settle = Work::Settle {
            consumer: A,
            items: vec![(lock(delivery), Settlement::Complete)],
            client_settled,
        };
        let txn = txn as u64 + 1;
        entity.core.stage(txn, settle);
        entity
            .core
            .discharge(0, txn, false, &mut entity.log)
            .expect("rolled back");
    }
    assert_eq!(entity.core.len(), 2, "a rollback completes nothing");
    // The consumer's limit counts every delivery: two more may come.
    let again = entity.receive(0, LaneId::MAIN, 4);
    let seqs: Vec<i64> = again.iter().map(|delivery| delivery.seq).collect();
    assert_eq!(
        seqs,
        vec![delivered[0].seq],
        "only the client-settled one is free again"
    );
    assert_eq!(
        again[0].record.delivery_count, 1,
        "abandoned: its delivery counted"
    );
}

#[test]
fn refused_work_dooms_its_transaction_and_its_commit_applies_nothing() {
    let mut entity = Entity::queue_requiring_sessions(true);
    let in_session = |marker| {
        let mut message = arrival(marker, None);
        message.session_id = Some("a".into());
        message
    };
    let taken = entity.core.stage(1, Work::Send(vec![in_session(1)]));
    assert!(matches!(taken, StagedAnswer::Sent(Ok(()))));
    let refused = entity.core.stage(1, Work::Send(vec![arrival(2, None)]));
    assert!(
        matches!(refused, StagedAnswer::Sent(Err(_))),
        "no session id"
    );
    entity.core.stage(1, Work::Send(vec![in_session(3)]));
    let committed = entity.core.discharge(0, 1, true, &mut entity.log);
    let StagedAnswer::Sent(Err(why)) = refused else {
        unreachable!()
    };
    assert_eq!(committed, Err(why), "rolled back with the refusal");
    assert_eq!(entity.core.len(), 0, "none of its sends was applied");
    // A settlement refused dooms its transaction too; a rollback is a rollback.
    entity.core.stage(2, Work::Send(vec![in_session(4)]));
    let bogus = LockRef {
        seq: 99,
        token: uuid::Uuid::from_u128(99),
    };
    let settle = Work::Settle {
        consumer: A,
        items: vec![(bogus, Settlement::Complete)],
        client_settled: false,
    };
    let settled = entity.core.stage(2, settle);
    assert!(matches!(settled, StagedAnswer::Settled(r) if r == vec![Err(EntityError::LockLost)]));
    let committed = entity.core.discharge(0, 2, true, &mut entity.log);
    assert_eq!(committed, Err(EntityError::LockLost));
    assert_eq!(entity.core.len(), 0);
    entity.core.stage(3, Work::Send(vec![arrival(5, None)]));
    let rolled = entity.core.discharge(0, 3, false, &mut entity.log);
    assert_eq!(
        rolled,
        Ok(()),
        "a doomed transaction's rollback is answered as any"
    );
}

#[test]
fn a_forwarded_message_is_marked_and_stays_until_its_target_stores_it() {
    let mut entity = Entity::queue();
    let [seq] = entity.send(0, 1)[..] else {
        panic!("one")
    };
    let (batches, over_hops) = (entity.core)
        .take_for_forwarding(0, LaneId::MAIN, 10, &mut entity.log)
        .expect("read");
    assert!(!over_hops);
    let [batch] = &batches[..] else {
        panic!("one batch: {batches:?}")
    };
    assert_eq!(batch.to, None, "to the lane's own target");
    let sent: &Bytes = &batch.bodies[0];
    assert_eq!(
        message::annotation_number(sent, annotation::TRANSFER_HOP_COUNT),
        Some(1)
    );
    assert_eq!(
        message::annotation_number(sent, annotation::ENQUEUE_SEQUENCE_NUMBER),
        Some(seq)
    );
    let refused = Err(EntityError::Unavailable);
    (entity.core).forward_answered(0, LaneId::MAIN, "next", batch.locks.clone(), &refused);
    let (again, _) = (entity.core)
        .take_for_forwarding(0, LaneId::MAIN, 10, &mut entity.log)
        .expect("read");
    assert_eq!(again.len(), 1, "released: taken again");
    (entity.core).forward_answered(0, LaneId::MAIN, "next", again[0].locks.clone(), &Ok(()));
    entity.write();
    assert_eq!(entity.core.len(), 0, "stored by its target: gone here");
}

#[test]
fn a_message_over_the_hop_limit_goes_to_the_transfer_dead_letter_queue() {
    let mut entity = Entity::queue();
    entity
        .core
        .add_transfer_lanes(Recovered::default(), Recovered::default());
    let hops = [(annotation::TRANSFER_HOP_COUNT, Value::Int(4))];
    let bytes = message::annotate(&encode(&[], None, None, 1), &hops, &[]).expect("annotated");
    let arrival = message::inspect(bytes).expect("a message");
    entity.core.send(0, vec![arrival]).expect("sent");
    entity.write();
    let (batches, over_hops) = (entity.core)
        .take_for_forwarding(0, LaneId::MAIN, 10, &mut entity.log)
        .expect("read");
    assert!(batches.is_empty() && over_hops);
    entity.write();
    let dead = entity
        .core
        .lane(LaneId::TRANSFER_DEAD_LETTER)
        .expect("lane");
    assert_eq!(dead.len(), 1);
    assert_eq!(entity.core.lane(LaneId::MAIN).expect("lane").len(), 0);
}

#[test]
fn a_message_abandoned_in_its_dead_letter_queue_keeps_its_delivery_count() {
    let mut entity = Entity::queue();
    entity.send(0, 1);
    let delivered = entity.receive(0, LaneId::MAIN, 1);
    let abandon = Settlement::Abandon(Default::default());
    assert!(entity.core.settle(A, lock(&delivered[0]), &abandon).is_ok());
    let delivered = entity.receive(0, LaneId::MAIN, 2);
    assert_eq!(delivered[0].record.delivery_count, 1);
    let settled = entity
        .core
        .settle(A, lock(&delivered[0]), &dead_letter("Poison"));
    assert!(settled.is_ok());
    entity
        .core
        .move_dead_letters(&mut entity.log)
        .expect("moved");
    entity.write();
    const B: ConsumerId = ConsumerId(2);
    let dead = LaneId::DEAD_LETTER;
    let added = entity
        .core
        .add_consumer(B, dead, ReceiveMode::PeekLock, u64::MAX);
    added.expect("added");
    for handed in [1, 2] {
        entity.core.lane(dead).expect("lane").set_limit(B, handed);
        let delivered = entity.core.dispatch(0, &mut Reader::new(&mut entity.log));
        assert_eq!(delivered[0].record.delivery_count, 1, "handed {handed}");
        assert!(entity.core.settle(B, lock(&delivered[0]), &abandon).is_ok());
    }
}
