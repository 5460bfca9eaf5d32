//! Duplicate detection in the core: what a queue stores, numbers and journals when sends
//! repeat a message id, within and beyond its window, and after a restart.

use bytes::Bytes;

use crate::entity::core::tests::RULES;
use crate::entity::core::EntityCore;
use crate::entity::duplicates::{digest, Duplicates};
use crate::entity::handle::LaneId;
use crate::message::Arrival;
use crate::store::{AcceptedIds, Change, Recovered};

const WINDOW_MS: i64 = 10_000;

/// A send with `id` as its message id (a str8), scheduled for `scheduled_ms` if given.
fn with_id(id: &str, scheduled_ms: Option<i64>) -> Arrival {
    let mut encoded = vec![0xa1, u8::try_from(id.len()).expect("short")];
    encoded.extend_from_slice(id.as_bytes());
    Arrival {
        bytes: Bytes::from(format!("body of {id}")),
        ttl_ms: None,
        scheduled_ms,
        view: None,
        session_id: None,
        message_id: Some(Bytes::from(encoded)),
        partition_key: None,
    }
}

fn detecting_queue() -> EntityCore {
    let mut core = EntityCore::queue(RULES, u64::MAX, Recovered::default(), Recovered::default());
    core.detect_duplicates(Some(WINDOW_MS), 0);
    core
}

/// The ids the changes store and forget, by millisecond.
fn stored_ids(changes: &[(LaneId, Change)]) -> Vec<(i64, AcceptedIds)> {
    let mut stored: Vec<(i64, AcceptedIds)> = Vec::new();
    for (_, change) in changes {
        match change {
            Change::Accepted { accepted_ms, ids } => {
                stored.retain(|(at, _)| at != accepted_ms);
                stored.push((*accepted_ms, ids.clone()));
            }
            Change::Forgotten(accepted_ms) => stored.retain(|(at, _)| at != accepted_ms),
            _ => {}
        }
    }
    stored
}

#[test]
fn a_repeated_id_is_dropped_and_answered_with_the_first_messages_number() {
    let mut core = detecting_queue();
    let numbers = core.enqueue(1_000, vec![with_id("a", None), with_id("b", None)]);
    assert_eq!(numbers, Ok(vec![1, 2]));
    let numbers = core.enqueue(2_000, vec![with_id("a", None), with_id("c", None)]);
    assert_eq!(numbers, Ok(vec![1, 3]), "a is a duplicate, c is not");
    assert_eq!(core.len(), 3);
    assert_eq!(core.next_seq(), 4, "a duplicate takes no number");
    assert_eq!(core.duplicates_dropped(), 1);
    assert_eq!(core.duplicate_ids(), 3);
}

#[test]
fn a_batch_with_an_internal_duplicate_stores_it_once() {
    let mut core = detecting_queue();
    let batch = vec![with_id("x", None), with_id("y", None), with_id("x", None)];
    assert_eq!(core.enqueue(0, batch), Ok(vec![1, 2, 1]));
    assert_eq!(core.len(), 2);
}

#[test]
fn a_scheduled_duplicate_is_answered_with_the_scheduled_messages_number() {
    let mut core = detecting_queue();
    assert_eq!(
        core.enqueue(0, vec![with_id("s", Some(60_000))]),
        Ok(vec![1])
    );
    assert_eq!(
        core.enqueue(5, vec![with_id("s", Some(60_000))]),
        Ok(vec![1])
    );
    assert!(core.cancel_scheduled(&[1]).is_ok(), "the number cancels it");
    assert_eq!(core.len(), 0);
}

#[test]
fn an_id_outside_the_window_is_accepted_again() {
    let mut core = detecting_queue();
    core.enqueue(1_000, vec![with_id("a", None)]).expect("room");
    assert_eq!(
        core.enqueue(1_000 + WINDOW_MS - 1, vec![with_id("a", None)]),
        Ok(vec![1])
    );
    // No sweep in between: the send itself sees that the window has passed.
    let again = core.enqueue(1_000 + WINDOW_MS, vec![with_id("a", None)]);
    assert_eq!(again, Ok(vec![2]), "the window has passed");
}

#[test]
fn without_detection_every_send_is_stored() {
    let mut core = EntityCore::queue(RULES, u64::MAX, Recovered::default(), Recovered::default());
    let numbers = core.enqueue(0, vec![with_id("a", None), with_id("a", None)]);
    assert_eq!(numbers, Ok(vec![1, 2]));
}

#[test]
fn the_journal_stores_each_milliseconds_ids_and_forgets_them_after_the_window() {
    let mut core = detecting_queue();
    core.enqueue(1_000, vec![with_id("a", None)]).expect("room");
    core.enqueue(1_000, vec![with_id("b", None)]).expect("room");
    let (first, _) = core.take_changes();
    core.enqueue(1_500, vec![with_id("c", None)]).expect("room");
    let (second, _) = core.take_changes();
    let all: Vec<_> = first.iter().chain(&second).cloned().collect();
    let stored = stored_ids(&all);
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(stored[0].0, 1_000);
    let mut at_1000: Vec<_> = stored[0].1.clone();
    at_1000.sort_by_key(|(_, seq)| *seq);
    assert_eq!(
        at_1000,
        vec![(digest(b"\xa1\x01a"), 1), (digest(b"\xa1\x01b"), 2)]
    );
    assert_eq!(stored[1], (1_500, vec![(digest(b"\xa1\x01c"), 3)]));

    core.expire_due(1_000 + WINDOW_MS);
    let (third, _) = core.take_changes();
    let all: Vec<_> = all.into_iter().chain(third).collect();
    assert_eq!(
        stored_ids(&all),
        vec![(1_500, vec![(digest(b"\xa1\x01c"), 3)])]
    );
}

#[test]
fn a_restarted_queue_still_knows_the_ids_its_log_kept() {
    let mut core = detecting_queue();
    core.enqueue(1_000, vec![with_id("a", None)]).expect("room");
    let (changes, _) = core.take_changes();
    let mut restarted =
        EntityCore::queue(RULES, u64::MAX, Recovered::default(), Recovered::default());
    restarted.restore_duplicates(Duplicates::new(WINDOW_MS, stored_ids(&changes), 2_000));
    assert_eq!(
        restarted.enqueue(2_000, vec![with_id("a", None)]),
        Ok(vec![1])
    );
    assert_eq!(restarted.len(), 0, "dropped");
}

#[test]
fn turning_detection_off_forgets_every_stored_id() {
    let mut core = detecting_queue();
    core.enqueue(1_000, vec![with_id("a", None)]).expect("room");
    core.enqueue(1_001, vec![with_id("b", None)]).expect("room");
    let (before, _) = core.take_changes();
    core.detect_duplicates(None, 1_002);
    let (after, _) = core.take_changes();
    let all: Vec<_> = before.into_iter().chain(after).collect();
    assert!(stored_ids(&all).is_empty());
    assert_eq!(core.enqueue(1_003, vec![with_id("a", None)]), Ok(vec![3]));
}
