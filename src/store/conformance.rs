//! The conformance suite of an entity's log ([`Log`]): what any log keeps through restarts,
//! through a crash at any point of a commit, and against a model of random writes (after
//! TiKV's engine-trait tests and openraft's storage test suite). A log takes the suite by
//! implementing [`TestableLog`] (how it is opened again, how a crash cuts its commit short,
//! what its own bookkeeping must agree with) and invoking [`conformance_suite!`] with its
//! type, which makes each scenario below a test of it.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;

use crate::store::record::{MessageState, Record, NEVER};
use crate::store::{Change, LaneId, Log, StoreError};

/// What the suite needs of a log besides [`Log`].
pub(super) trait TestableLog: Log + Sized {
    /// The log stored under `dir`, as a broker (re)started on it opens it, keeping no message
    /// bytes in memory: every read comes from what is stored. Dropping a log closes it as a
    /// clean stop does.
    fn open(dir: &Path) -> Self;

    /// Commits only the first `kept` steps of what is staged, as a crash in the midst of the
    /// commit leaves them stored, and drops the log; returns how many steps the whole commit
    /// has. A crash keeps each step whole or not at all: an atomic commit is one step.
    ///
    /// # Errors
    /// As [`Log::commit`].
    fn commit_torn(self, kept: usize) -> Result<usize, StoreError>;

    /// The stored values that hold the bytes several lanes store alike (a topic keeps once
    /// what its subscriptions store alike), each by the first sequence number it holds.
    fn shared_bodies(&self) -> Vec<i64>;

    /// Panics, naming `moment`, where what is stored and the log's own bookkeeping disagree:
    /// something stored that nothing refers to, or counted that is not stored.
    fn audit(&self, moment: &str);

    /// Panics where compaction, run twice with nothing between, left something it rewrites.
    fn audit_compacted(&self);
}

/// The suite's scenarios as tests of the log type `$log`, a [`TestableLog`]: one `#[test]`
/// each, named as its scenario.
macro_rules! conformance_suite {
    ($log:ty) => {
        $crate::store::conformance::conformance_suite!(@each $log;
            accepted_ids_are_written_after_their_messages_and_read_back_until_forgotten,
            rules_added_at_run_time_are_kept_per_subscription_until_removed,
            lanes_of_one_tree_keep_their_copies_of_a_number_apart,
            an_undeclared_subscription_keeps_the_bytes_it_shares,
            every_prefix_of_an_unbatched_write_recovers_a_consistent_queue,
            every_prefix_of_an_unbatched_write_recovers_consistent_subscriptions,
            random_writes_to_a_queue_read_back_and_recover_as_a_model_says,
            random_writes_to_subscriptions_share_bodies_and_recover_as_a_model_says,
        );
    };
    (@each $log:ty; $($scenario:ident),* $(,)?) => {
        $(
            #[test]
            fn $scenario() {
                $crate::store::conformance::$scenario::<$log>();
            }
        )*
    };
}
pub(super) use conformance_suite;

/// An active message's record, delivered `count` times, of `size` bytes.
fn record(count: u32, size: usize) -> Record {
    Record {
        state: MessageState::Active,
        delivery_count: count,
        enqueued_ms: 5,
        size: size as u32,
        expires_ms: NEVER,
        scheduled_ms: 0,
    }
}

/// Subscription `subscription`'s own lane.
fn subscription(subscription: u32) -> LaneId {
    LaneId {
        subscription,
        dead_letter: false,
    }
}

/// A message's id is written after the message: a crash after any step of their commit that
/// keeps the id keeps the message, so a retry is never dropped for a message that was lost.
/// Ids read back until they are forgotten.
pub(super) fn accepted_ids_are_written_after_their_messages_and_read_back_until_forgotten<
    L: TestableLog,
>() {
    let accepted = |at: i64, seq: i64| Change::Accepted {
        accepted_ms: at,
        ids: vec![([at as u8; 16], seq)],
    };
    let with_id = || {
        let put = Change::Put {
            seq: 1,
            record: record(0, 1),
            body: Bytes::from_static(b"m"),
        };
        vec![(LaneId::MAIN, accepted(7, 1)), (LaneId::MAIN, put)]
    };
    let torn = |dir: &Path, kept: usize| {
        let mut log = L::open(dir);
        log.stage(with_id(), false);
        log.commit_torn(kept).expect("commit")
    };
    let steps = torn(tempfile::tempdir().expect("tempdir").path(), usize::MAX);
    assert!(steps > 1, "single operations, in a crash-safe order");
    for kept in 0..=steps {
        let dir = tempfile::tempdir().expect("tempdir");
        torn(dir.path(), kept);
        let mut log = L::open(dir.path());
        let ids = log.accepted_ids().expect("read");
        let messages = log.recover(LaneId::MAIN).expect("recover").records.len();
        assert!(
            ids.is_empty() || messages == 1,
            "prefix {kept}: an id without its message"
        );
        if kept == steps {
            assert_eq!((ids, messages), (vec![(7, vec![([7; 16], 1)])], 1));
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let mut log = L::open(dir.path());
        log.write(vec![(LaneId::MAIN, accepted(8, 2))])
            .expect("write");
        log.write(vec![(LaneId::MAIN, accepted(9, 3))])
            .expect("write");
        log.write(vec![(LaneId::MAIN, Change::Forgotten(8))])
            .expect("write");
    }
    let log = L::open(dir.path());
    assert_eq!(
        log.accepted_ids().expect("read"),
        vec![(9, vec![([9; 16], 3)])]
    );
}

/// Rules added to a subscription at run time come back after a restart, each subscription's
/// its own, until they are removed (names compare ignoring case).
pub(super) fn rules_added_at_run_time_are_kept_per_subscription_until_removed<L: TestableLog>() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rule = |name: &str, stored: Option<&'static [u8]>| Change::Rule {
        name: name.into(),
        stored: stored.map(Bytes::from_static),
    };
    {
        let mut log = L::open(dir.path());
        log.write(vec![
            (subscription(1), rule("Red", Some(b"red"))),
            (subscription(1), rule("blue", Some(b"blue"))),
            (subscription(2), rule("red", Some(b"other"))),
        ])
        .expect("write");
        log.write(vec![(subscription(1), rule("RED", None))])
            .expect("write");
    }
    let log = L::open(dir.path());
    assert_eq!(
        log.rules(subscription(1)).expect("read"),
        vec![Bytes::from_static(b"blue")]
    );
    assert_eq!(
        log.rules(subscription(2)).expect("read"),
        vec![Bytes::from_static(b"other")]
    );
    assert!(log.rules(subscription(3)).expect("read").is_empty());
}

/// The lanes of one log each keep their own copy of a number: a topic's subscriptions and
/// their dead-letter lanes, and the queue's own lane, through a restart.
pub(super) fn lanes_of_one_tree_keep_their_copies_of_a_number_apart<L: TestableLog>() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (eu, us) = (subscription(1), subscription(2));
    let put = |lane: LaneId, seq: i64, tag: u8| {
        let body = Bytes::from(vec![tag; 3]);
        let record = record(0, body.len());
        (lane, Change::Put { seq, record, body })
    };
    {
        let mut log = L::open(dir.path());
        let mut first = vec![(LaneId::MAIN, Change::NextSeq(4))];
        for seq in 1..4 {
            first.extend([put(eu, seq, 1), put(us, seq, 2), put(LaneId::MAIN, seq, 0)]);
        }
        log.stage(first, false);
        log.commit().expect("write");
        // The copy of 2 leaves one subscription and is dead-lettered from the other.
        log.stage(
            vec![
                (eu, Change::Delete { seq: 2 }),
                (us, Change::Delete { seq: 2 }),
                put(us.dead_letter_lane(), 2, 9),
            ],
            true,
        );
        log.commit().expect("write");
    }
    let mut log = L::open(dir.path());
    let seqs = |log: &mut L, lane| {
        let recovered = log.recover(lane).expect("recover");
        let mut seqs: Vec<i64> = recovered.records.iter().map(|(seq, _)| *seq).collect();
        seqs.sort_unstable();
        seqs
    };
    assert_eq!(seqs(&mut log, eu), vec![1, 3]);
    assert_eq!(seqs(&mut log, us), vec![1, 3]);
    assert_eq!(seqs(&mut log, us.dead_letter_lane()), vec![2]);
    assert_eq!(seqs(&mut log, eu.dead_letter_lane()), Vec::<i64>::new());
    assert_eq!(
        seqs(&mut log, LaneId::MAIN),
        vec![1, 2, 3],
        "the queue's own keys"
    );
    assert_eq!(log.body(eu, 3).expect("body")[0], 1);
    assert_eq!(log.body(us, 3).expect("body")[0], 2);
    assert_eq!(log.body(us.dead_letter_lane(), 2).expect("body")[0], 9);
    assert_eq!(log.body(LaneId::MAIN, 2).expect("body")[0], 0);
}

/// A subscription left out of the configuration keeps its messages on disk, bytes shared
/// with others included, while the others' copies come and go; declared again, it has
/// them all.
pub(super) fn an_undeclared_subscription_keeps_the_bytes_it_shares<L: TestableLog>() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (kept, other) = (subscription(1), subscription(2));
    let sent = |seq: i64| Bytes::from(vec![seq as u8; 100]);
    {
        let mut log = L::open(dir.path());
        let mut changes = vec![(LaneId::MAIN, Change::NextSeq(4))];
        for seq in 1..4 {
            for lane in [kept, other] {
                let body = sent(seq);
                let record = record(0, body.len());
                changes.push((lane, Change::Put { seq, record, body }));
            }
        }
        log.write(changes).expect("write");
        assert!(
            !log.shared_bodies().is_empty(),
            "the copies share their bytes"
        );
    }
    {
        // Only the other subscription is declared; its copies are all completed.
        let mut log = L::open(dir.path());
        assert_eq!(log.recover(other).expect("recover").records.len(), 3);
        log.end_recovery();
        let completions = (1..4).map(|seq| (other, Change::Delete { seq })).collect();
        log.write(completions).expect("write");
    }
    let mut log = L::open(dir.path());
    assert_eq!(log.recover(kept).expect("recover").records.len(), 3);
    for seq in 1..4 {
        assert_eq!(log.body(kept, seq).expect("body"), sent(seq));
    }
}

/// A commit of new messages and completions is not atomic: a crash after any step of it
/// recovers every message the earlier writes left, none twice, nothing the commit did not
/// know, and a counter above every number ever handed out.
pub(super) fn every_prefix_of_an_unbatched_write_recovers_a_consistent_queue<L: TestableLog>() {
    every_prefix_of_an_unbatched_write_recovers_consistent_lanes::<L>(&[LaneId::MAIN]);
}

/// The same for a topic's subscriptions, whose copies share their bytes: no prefix loses
/// bytes a message refers to, and shared bodies left unused by a torn write go at recovery.
pub(super) fn every_prefix_of_an_unbatched_write_recovers_consistent_subscriptions<
    L: TestableLog,
>() {
    every_prefix_of_an_unbatched_write_recovers_consistent_lanes::<L>(&[
        subscription(1),
        subscription(2),
    ]);
}

fn every_prefix_of_an_unbatched_write_recovers_consistent_lanes<L: TestableLog>(lanes: &[LaneId]) {
    let put = |seq: i64| {
        let body = Bytes::from(vec![seq as u8; 5_000]);
        lanes.iter().map(move |lane| {
            let change = Change::Put {
                seq,
                record: record(0, body.len()),
                body: body.clone(),
            };
            (*lane, change)
        })
    };
    let delete = |seq: i64| {
        lanes
            .iter()
            .map(move |lane| (*lane, Change::Delete { seq }))
    };
    let next = |seq: i64| (LaneId::MAIN, Change::NextSeq(seq));
    // Earlier writes: chunks of three or four messages, some of them gone already.
    let history: Vec<Vec<(LaneId, Change)>> = vec![
        (1..=8).flat_map(put).chain([next(9)]).collect(),
        [1, 2, 5].into_iter().flat_map(delete).collect(),
        (9..=12).flat_map(put).chain([next(13)]).collect(),
    ];
    let before: Vec<i64> = vec![3, 4, 6, 7, 8, 9, 10, 11, 12];
    // The write: two new chunks, the newest earlier message and a first chunk's last
    // messages completed (that chunk goes), one of another chunk's.
    let write: Vec<(LaneId, Change)> = (13..=20)
        .flat_map(put)
        .chain([next(21)])
        .chain([3, 4, 12, 7].into_iter().flat_map(delete))
        .collect();
    let torn = |dir: &Path, kept: usize| {
        let mut log = L::open(dir);
        for lane in lanes {
            log.recover(*lane).expect("recover");
        }
        for changes in history.clone() {
            log.write(changes).expect("write");
        }
        log.stage(write.clone(), false);
        log.commit_torn(kept).expect("commit")
    };
    let steps = torn(tempfile::tempdir().expect("tempdir").path(), usize::MAX);
    assert!(
        steps >= 5,
        "sends and completions need no batch: {steps} steps"
    );
    for kept in 0..=steps {
        let dir = tempfile::tempdir().expect("tempdir");
        torn(dir.path(), kept);
        let mut log = L::open(dir.path());
        for lane in lanes {
            let recovered = log.recover(*lane).expect("recover");
            let seqs: Vec<i64> = recovered.records.iter().map(|(seq, _)| *seq).collect();
            let mut unique = seqs.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), seqs.len(), "prefix {kept}: a message twice");
            for seq in &before {
                let deleted_now = [3, 4, 12, 7].contains(seq);
                assert!(
                    deleted_now || seqs.contains(seq),
                    "prefix {kept}: {seq} lost"
                );
            }
            assert!(
                seqs.iter().all(|seq| before.contains(seq) || *seq >= 13),
                "prefix {kept}: {seqs:?}"
            );
            assert!(
                recovered.next_seq >= 13 && seqs.iter().all(|seq| *seq < recovered.next_seq),
                "prefix {kept}: next {} with {seqs:?}",
                recovered.next_seq
            );
            for seq in &seqs {
                let body = log.body(*lane, *seq).expect("body");
                assert_eq!(body[0], *seq as u8, "prefix {kept}: body of {seq}");
            }
        }
        log.audit(&format!("prefix {kept}"));
        assert_eq!(
            !log.shared_bodies().is_empty(),
            lanes.len() > 1,
            "prefix {kept}: shared bodies"
        );
    }
}

/// Random writes (fresh messages, deletes, updates, new bytes, dead-lettering, deletes of
/// messages stored in the same write), staged over one to several turns, and compactions
/// against a map; every body reads back as the model says, staged or written, and so does
/// every record after a reopen.
pub(super) fn random_writes_to_a_queue_read_back_and_recover_as_a_model_says<L: TestableLog>() {
    random_writes_read_back_and_recover_as_a_model_says::<L>(&[LaneId::MAIN]);
}

/// The same for a topic's two subscriptions, which mostly store a send alike (so their
/// bytes are shared), now and then one of them edited or not at all; shared bodies go
/// when the last message referring to them does, and never before.
pub(super) fn random_writes_to_subscriptions_share_bodies_and_recover_as_a_model_says<
    L: TestableLog,
>() {
    random_writes_read_back_and_recover_as_a_model_says::<L>(&[subscription(1), subscription(2)]);
}

fn random_writes_read_back_and_recover_as_a_model_says<L: TestableLog>(senders: &[LaneId]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = L::open(dir.path());
    let mut model: BTreeMap<(LaneId, i64), (Record, Bytes)> = BTreeMap::new();
    let mut next_seq = 1i64;
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |bound: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % bound
    };
    let mut most_shared = 0;
    for step in 0..600 {
        let mut changes = Vec::new();
        for _ in 0..next(6) + 1 {
            let live: Vec<(LaneId, i64)> = model.keys().copied().collect();
            let pick = |r: u64| live[(r % live.len().max(1) as u64) as usize];
            match next(8) {
                0..=2 => {
                    for _ in 0..next(5) + 1 {
                        let sent = Bytes::from(format!("m{next_seq}-{step}"));
                        for (index, lane) in senders.iter().enumerate() {
                            let body = match next(8) {
                                0 if index > 0 => continue,
                                1 if index > 0 => Bytes::from(format!("edited {next_seq}")),
                                _ => sent.clone(),
                            };
                            let record = record(0, body.len());
                            model.insert((*lane, next_seq), (record, body.clone()));
                            let put = Change::Put {
                                seq: next_seq,
                                record,
                                body,
                            };
                            changes.push((*lane, put));
                        }
                        next_seq += 1;
                    }
                    changes.push((LaneId::MAIN, Change::NextSeq(next_seq)));
                }
                3 | 4 if !live.is_empty() => {
                    let (lane, seq) = pick(next(1 << 30));
                    model.remove(&(lane, seq));
                    changes.push((lane, Change::Delete { seq }));
                }
                5 if !live.is_empty() => {
                    let (lane, seq) = pick(next(1 << 30));
                    let entry = model.get_mut(&(lane, seq)).expect("live");
                    entry.0.delivery_count += 1;
                    let record = entry.0;
                    changes.push((lane, Change::Update { seq, record }));
                }
                6 if !live.is_empty() => {
                    let (lane, seq) = pick(next(1 << 30));
                    let body = Bytes::from(format!("new bytes of {seq} at {step}"));
                    let entry = model.get_mut(&(lane, seq)).expect("live");
                    entry.0.size = body.len() as u32;
                    entry.1 = body.clone();
                    let record = entry.0;
                    changes.push((lane, Change::Put { seq, record, body }));
                }
                7 if !live.is_empty() => {
                    let (lane, seq) = pick(next(1 << 30));
                    if !lane.dead_letter {
                        let (record, body) = model.remove(&(lane, seq)).expect("live");
                        let to = lane.dead_letter_lane();
                        model.insert((to, seq), (record, body.clone()));
                        changes.push((lane, Change::Delete { seq }));
                        changes.push((to, Change::Put { seq, record, body }));
                    }
                }
                _ => {}
            }
        }
        // Staged changes read back before they are written; several turns share a commit.
        log.stage(changes, next(2) == 0);
        if next(3) == 0 {
            log.commit().expect("commit");
            most_shared = most_shared.max(log.shared_bodies().len());
        }
        if step % 50 == 49 {
            log.compact().expect("compact");
        }
        for ((lane, seq), (_, body)) in &model {
            assert_eq!(
                &log.body(*lane, *seq).expect("body"),
                body,
                "step {step}: {seq} of {lane:?}"
            );
        }
        if step % 150 == 149 {
            log.commit().expect("commit");
            let shared = log.shared_bodies();
            drop(log);
            log = L::open(dir.path());
            for lane in senders {
                for lane in [*lane, lane.dead_letter_lane()] {
                    let recovered = log.recover(lane).expect("recover");
                    assert_eq!(recovered.next_seq, next_seq);
                    let mut got = recovered.records;
                    got.sort_by_key(|(seq, _)| *seq);
                    let want: Vec<(i64, Record)> = model
                        .iter()
                        .filter(|((of, _), _)| *of == lane)
                        .map(|((_, seq), (record, _))| (*seq, *record))
                        .collect();
                    assert_eq!(got, want, "step {step}: records of {lane:?}");
                }
            }
            log.audit(&format!("step {step}"));
            assert_eq!(
                log.shared_bodies(),
                shared,
                "step {step}: shared bodies kept as they were"
            );
        }
    }
    assert_eq!(
        most_shared > 0,
        senders.len() > 1,
        "subscriptions (only) share bodies"
    );
    // Two passes: the first finds what is quiet, the second compacts what is also sparse.
    log.compact().expect("compact");
    log.compact().expect("compact");
    log.audit_compacted();
    for ((lane, seq), (_, body)) in &model {
        assert_eq!(
            &log.body(*lane, *seq).expect("body"),
            body,
            "after compaction: {seq}"
        );
    }
    // Once every message is gone, so are the shared bodies.
    let everything: Vec<(LaneId, Change)> = model
        .keys()
        .map(|(lane, seq)| (*lane, Change::Delete { seq: *seq }))
        .collect();
    log.write(everything).expect("write");
    assert!(
        log.shared_bodies().is_empty(),
        "shared bodies outlive their messages"
    );
    log.audit("once every message is gone");
}
