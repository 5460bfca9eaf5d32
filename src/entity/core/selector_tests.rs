//! Consumers and browsers with a JMS message selector (issue 55), reading bodies from a real
//! log: they get only what matches, the rest stays for others in order, a consumer that finds
//! nothing waits without spinning and without holding up a plain consumer, a drain with no
//! match ends, and each message is read once per selector consumer until it changes.

use std::sync::Arc;

use bytes::Bytes;
use fe2o3_amqp::types::primitives::SimpleValue;

use crate::entity::core::stored_tests::{lock, Entity};
use crate::entity::core::topic_model::encode;
use crate::entity::queue::Reader;
use crate::entity::terms::{ConsumerId, Delivery, LaneId, ReceiveMode, Settlement};
use crate::filter::{JmsSelector, Value};
use crate::message;
use crate::store::{Bodies, StoreError};

/// The selector consumer.
const S: ConsumerId = ConsumerId(7);
/// A plain consumer.
const P: ConsumerId = ConsumerId(8);
const RED: &str = "color = 'red'";

/// The log, counting what the core reads of it.
struct Counting<'a> {
    bodies: &'a mut dyn Bodies,
    reads: usize,
}

impl Bodies for Counting<'_> {
    fn body(&mut self, lane: LaneId, seq: i64) -> Result<Bytes, StoreError> {
        self.reads += 1;
        self.bodies.body(lane, seq)
    }
}

impl Entity {
    /// Sends one message per color (property `color`), written; their numbers.
    fn send_colors(&mut self, now: i64, colors: &[&str]) -> Vec<i64> {
        let messages = (colors.iter().zip(0..))
            .map(|(color, marker)| {
                let sent = [("color".to_owned(), Value::String((*color).to_owned()))];
                message::inspect(encode(&sent, None, None, marker)).expect("a message")
            })
            .collect();
        let numbers = self.core.send(now, messages).expect("sent");
        self.write();
        numbers
    }

    /// Adds a consumer of the queue, with `selector` when given.
    fn consumer(&mut self, consumer: ConsumerId, mode: ReceiveMode, selector: Option<&str>) {
        (self.core)
            .add_consumer(consumer, LaneId::MAIN, mode, u64::MAX)
            .expect("added");
        if let Some(selector) = selector {
            let selector = Arc::new(JmsSelector::parse(selector).expect("a selector"));
            self.main().select(consumer, selector);
        }
    }

    fn main(&mut self) -> &mut crate::entity::queue::QueueCore {
        self.core.lane(LaneId::MAIN).expect("the queue")
    }

    /// Dispatches; the deliveries as (consumer, seq), and how many bodies it read.
    fn dispatch_counting(&mut self, now: i64) -> (Vec<(ConsumerId, i64)>, usize) {
        let mut counting = Counting {
            bodies: &mut self.log,
            reads: 0,
        };
        let delivered = self.core.dispatch(now, &mut Reader::new(&mut counting));
        (taken(&delivered), counting.reads)
    }
}

fn taken(delivered: &[Delivery]) -> Vec<(ConsumerId, i64)> {
    (delivered.iter()).map(|d| (d.consumer, d.seq)).collect()
}

#[test]
fn a_selector_consumer_that_finds_no_match_waits_without_spinning_or_blocking_a_plain_one() {
    let mut entity = Entity::queue();
    let blue = entity.send_colors(0, &["blue", "green", "blue"]);
    entity.consumer(S, ReceiveMode::PeekLock, Some(RED));
    entity.consumer(P, ReceiveMode::PeekLock, None);
    entity.main().set_limit(S, 10);
    let (got, reads) = entity.dispatch_counting(0);
    assert_eq!((got, reads), (vec![], 3), "each message judged once");
    // Turns go by: the consumer left the round-robin, nothing is read again.
    for _ in 0..3 {
        assert_eq!(entity.dispatch_counting(0), (vec![], 0));
    }
    entity.main().set_limit(P, 10);
    let (got, reads) = entity.dispatch_counting(0);
    let expected: Vec<(ConsumerId, i64)> = blue.iter().map(|seq| (P, *seq)).collect();
    assert_eq!(got, expected, "the plain consumer gets them all, in order");
    assert_eq!(reads, 0, "a plain consumer reads nothing");
}

#[test]
fn a_selector_consumer_gets_a_later_match_and_the_others_stay_in_order() {
    let mut entity = Entity::queue();
    entity.consumer(S, ReceiveMode::PeekLock, Some(RED));
    entity.main().set_limit(S, 10);
    let first = entity.send_colors(0, &["blue", "green"]);
    assert_eq!(entity.dispatch_counting(0), (vec![], 2));
    let later = entity.send_colors(0, &["blue", "red", "green"]);
    let (got, reads) = entity.dispatch_counting(0);
    assert_eq!(got, vec![(S, later[1])], "the match, when it comes");
    assert_eq!(reads, 3, "the new messages, the old ones not again");
    entity.consumer(P, ReceiveMode::ReceiveAndDelete, None);
    entity.main().set_limit(P, 10);
    let (got, _) = entity.dispatch_counting(0);
    let rest = [first[0], first[1], later[0], later[2]];
    assert_eq!(got, rest.map(|seq| (P, seq)).to_vec(), "the rest, in order");
}

#[test]
fn a_drain_with_no_match_ends_and_one_with_matches_takes_them() {
    let mut entity = Entity::queue();
    entity.send_colors(0, &["blue", "green"]);
    entity.consumer(S, ReceiveMode::PeekLock, Some(RED));
    entity.main().set_limit(S, 5);
    let mut reader = Reader::new(&mut entity.log);
    let (got, finished) = entity.core.drain(S, 0, &mut reader);
    assert!(
        got.is_empty() && finished,
        "nothing matches: the drain ends"
    );
    let red = entity.send_colors(0, &["red", "blue", "red"]);
    entity.main().set_limit(S, 5);
    let mut reader = Reader::new(&mut entity.log);
    let (got, finished) = entity.core.drain(S, 0, &mut reader);
    assert_eq!(taken(&got), vec![(S, red[0]), (S, red[2])]);
    assert!(finished, "and ends when no match is left");
}

#[test]
fn a_message_whose_properties_change_is_judged_again_and_one_that_leaves_is_forgotten() {
    let mut entity = Entity::queue();
    let [blue] = entity.send_colors(0, &["blue"])[..] else {
        panic!("one")
    };
    entity.consumer(S, ReceiveMode::PeekLock, Some(RED));
    entity.consumer(P, ReceiveMode::PeekLock, None);
    entity.main().set_limit(S, 10);
    assert_eq!(entity.dispatch_counting(0), (vec![], 1));
    assert_eq!(entity.main().judged(S), 1);
    entity.main().set_limit(P, 1);
    let delivered = entity.core.dispatch(0, &mut Reader::new(&mut entity.log));
    assert_eq!(taken(&delivered), vec![(P, blue)]);
    // The plain consumer's abandon paints it red.
    let red = vec![("color".to_owned(), SimpleValue::String("red".into()))];
    let abandon = Settlement::Abandon(red);
    let settled = (entity.core).settle_locked(P, lock(&delivered[0]), &abandon, &mut entity.log);
    settled.expect("abandoned");
    entity.write();
    let mut counting = Counting {
        bodies: &mut entity.log,
        reads: 0,
    };
    let delivered = entity.core.dispatch(0, &mut Reader::new(&mut counting));
    assert_eq!(
        taken(&delivered),
        vec![(S, blue)],
        "judged again: now a match"
    );
    assert_eq!(counting.reads, 1);
    let complete = &Settlement::Complete;
    let settled = (entity.core).settle_locked(S, lock(&delivered[0]), complete, &mut entity.log);
    settled.expect("completed");
    assert_eq!(
        entity.main().judged(S),
        0,
        "a message gone leaves no verdict"
    );
}

#[test]
fn a_selector_sees_the_delivery_count_a_delivery_would_carry() {
    let mut entity = Entity::queue();
    let [seq] = entity.send_colors(0, &["blue"])[..] else {
        panic!("one")
    };
    entity.consumer(S, ReceiveMode::PeekLock, Some("JMSXDeliveryCount > 1"));
    entity.consumer(P, ReceiveMode::PeekLock, None);
    entity.main().set_limit(S, 10);
    entity.main().set_limit(P, 1);
    let delivered = entity.core.dispatch(0, &mut Reader::new(&mut entity.log));
    assert_eq!(
        taken(&delivered),
        vec![(P, seq)],
        "the first delivery: count 1"
    );
    let abandon = Settlement::Abandon(Default::default());
    let settled = (entity.core).settle_locked(P, lock(&delivered[0]), &abandon, &mut entity.log);
    settled.expect("abandoned");
    let (got, _) = entity.dispatch_counting(0);
    assert_eq!(got, vec![(S, seq)], "the next delivery is the second");
}

#[test]
fn a_browser_with_a_selector_is_shown_only_the_matches() {
    let mut entity = Entity::queue();
    let sent = entity.send_colors(0, &["red", "blue", "red"]);
    entity.consumer(S, ReceiveMode::Browse, Some(RED));
    entity.main().set_limit(S, 10);
    let (got, reads) = entity.dispatch_counting(0);
    assert_eq!(got, vec![(S, sent[0]), (S, sent[2])]);
    assert_eq!(reads, 3);
    let mut reader = Reader::new(&mut entity.log);
    let (got, finished) = entity.core.drain(S, 0, &mut reader);
    assert!(got.is_empty() && finished, "seen all: the drain ends");
}

#[test]
fn a_match_another_consumer_held_comes_back_to_the_selector_consumer_when_its_lock_lapses() {
    let mut entity = Entity::queue();
    let [red] = entity.send_colors(0, &["red"])[..] else {
        panic!("one")
    };
    entity.consumer(P, ReceiveMode::PeekLock, None);
    entity.main().set_limit(P, 1);
    assert_eq!(entity.dispatch_counting(0), (vec![(P, red)], 0));
    entity.consumer(S, ReceiveMode::PeekLock, Some(RED));
    entity.main().set_limit(S, 10);
    assert_eq!(
        entity.dispatch_counting(0),
        (vec![], 0),
        "locked: nothing to judge"
    );
    let later = 24 * 3_600_000;
    assert_eq!(entity.core.expire_locks(later), 1);
    let (got, reads) = entity.dispatch_counting(later);
    assert_eq!(
        (got, reads),
        (vec![(S, red)], 1),
        "back, with a new delivery count"
    );
}
