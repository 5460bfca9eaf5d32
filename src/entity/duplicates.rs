//! Duplicate detection (Service Bus's `RequiresDuplicateDetection`): the message ids a queue or
//! topic accepted within its history window, so that a retried send is acknowledged and
//! dropped rather than stored twice.
//!
//! Ids are kept as 16-byte digests (the first half of a SHA-256 of the id's type and value):
//! 24 bytes per id in the index and 24 in the order of acceptance, about 80 MB for a million
//! ids at the index's fullest. Every id accepted in one millisecond is stored under one key of
//! the entity's log ([`Change::Accepted`]), written with the messages it came with (after them,
//! see `EntityLog`), and removed once that millisecond leaves the window
//! ([`Change::Forgotten`]).

use std::collections::{HashMap, VecDeque};

use sha2::{Digest as _, Sha256};

use crate::store::{AcceptedIds, Change};

/// A message id as the window keeps it.
pub type Digest = [u8; 16];

/// The digest of a message id, from its AMQP encoding (`properties.message-id`: a string,
/// uuid, ulong or binary). Encodings of one value that differ only in width (str8 and str32,
/// vbin8 and vbin32, the three ulong forms) give one digest.
pub fn digest(encoded: &[u8]) -> Digest {
    let (kind, value): (u8, std::borrow::Cow<[u8]>) = match encoded {
        [0xa1, _, text @ ..] | [0xb1, _, _, _, _, text @ ..] => (b's', text.into()),
        [0xa0, _, bytes @ ..] | [0xb0, _, _, _, _, bytes @ ..] => (b'b', bytes.into()),
        [0x44] => (b'l', 0u64.to_be_bytes().to_vec().into()),
        [0x53, small] => (b'l', u64::from(*small).to_be_bytes().to_vec().into()),
        [0x80, long @ ..] => (b'l', long.into()),
        [0x98, uuid @ ..] => (b'u', uuid.into()),
        other => (b'?', other.into()),
    };
    let hash = Sha256::new()
        .chain_update([kind])
        .chain_update(&value)
        .finalize();
    let mut digest = [0; 16];
    digest.copy_from_slice(&hash[..16]);
    digest
}

/// The ids a queue or topic accepted within its window, with the sequence number each got.
#[derive(Debug)]
pub struct Duplicates {
    window_ms: i64,
    /// Each id in the window, with the sequence number of the message that brought it.
    ids: HashMap<Digest, i64>,
    /// The same ids in the order they were accepted, with when.
    order: VecDeque<(i64, Digest)>,
    /// Changes to store (see [`Duplicates::take_changes`]).
    journal: Vec<Change>,
    /// The millisecond whose ids changed since the last [`Duplicates::take_changes`].
    changed_ms: Option<i64>,
}

impl Duplicates {
    /// A window of `window_ms` holding the ids recovered from the log (each millisecond's,
    /// oldest first); ids already out of the window at `now_ms` are forgotten, and their keys
    /// removed at the next write.
    pub fn new(window_ms: i64, recovered: Vec<(i64, AcceptedIds)>, now_ms: i64) -> Self {
        let mut window = Duplicates {
            window_ms,
            ids: HashMap::new(),
            order: VecDeque::new(),
            journal: Vec::new(),
            changed_ms: None,
        };
        for (accepted_ms, ids) in recovered {
            if ids.is_empty() {
                window.journal.push(Change::Forgotten(accepted_ms));
            }
            for (digest, seq) in ids {
                window.ids.insert(digest, seq);
                window.order.push_back((accepted_ms, digest));
            }
        }
        window.forget_before(now_ms);
        window
    }

    /// Changes the window's length; ids accepted longer ago than that go.
    pub fn set_window(&mut self, window_ms: i64, now_ms: i64) {
        self.window_ms = window_ms;
        self.forget_before(now_ms);
    }

    /// The sequence number of the message that brought `digest`, if it is in the window.
    pub fn seen(&self, digest: &Digest) -> Option<i64> {
        self.ids.get(digest).copied()
    }

    /// Records an id accepted at `accepted_ms` (never earlier than the last one) with its
    /// message's sequence number.
    pub fn accept(&mut self, digest: Digest, seq: i64, accepted_ms: i64) {
        if self.ids.contains_key(&digest) {
            return;
        }
        if let Some(previous) = self.changed_ms.filter(|at| *at != accepted_ms) {
            // The previous millisecond's ids will not change again: stored now, whole.
            let stored = self.accepted(previous);
            self.journal.extend(stored);
        }
        self.changed_ms = Some(accepted_ms);
        self.ids.insert(digest, seq);
        self.order.push_back((accepted_ms, digest));
    }

    /// Forgets the ids accepted more than the window before `now_ms`.
    pub fn forget_before(&mut self, now_ms: i64) {
        let horizon = now_ms.saturating_sub(self.window_ms);
        if self.changed_ms.is_some_and(|at| at <= horizon) {
            self.changed_ms = None;
        }
        let mut last = None;
        while let Some(&(accepted_ms, digest)) = self.order.front() {
            if accepted_ms > horizon {
                break;
            }
            self.order.pop_front();
            self.ids.remove(&digest);
            if last != Some(accepted_ms) {
                self.journal.push(Change::Forgotten(accepted_ms));
                last = Some(accepted_ms);
            }
        }
        if self.order.is_empty() && self.ids.capacity() > 1024 {
            self.ids = HashMap::new();
            self.order = VecDeque::new();
        }
    }

    /// How many ids the window holds.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the window holds no id.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The changes to store since the last call, in order: milliseconds that left the window,
    /// and the millisecond whose ids grew, stored whole (every id accepted in it so far).
    pub fn take_changes(&mut self) -> Vec<Change> {
        let mut changes = std::mem::take(&mut self.journal);
        if let Some(accepted_ms) = self.changed_ms.take() {
            changes.extend(self.accepted(accepted_ms));
        }
        changes
    }

    /// Every id accepted at `accepted_ms` (the latest millisecond with ids, or none), as
    /// stored.
    fn accepted(&self, accepted_ms: i64) -> Option<Change> {
        let ids: AcceptedIds = self
            .order
            .iter()
            .rev()
            .take_while(|(at, _)| *at == accepted_ms)
            .map(|(_, digest)| (*digest, self.ids[digest]))
            .collect();
        (!ids.is_empty()).then_some(Change::Accepted { accepted_ms, ids })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_in_either_width_is_one_id_and_kinds_stay_apart() {
        assert_eq!(digest(b"\xa1\x02ab"), digest(b"\xb1\x00\x00\x00\x02ab"));
        assert_eq!(digest(b"\x53\x07"), digest(b"\x80\0\0\0\0\0\0\0\x07"));
        assert_eq!(digest(b"\x44"), digest(b"\x53\x00"));
        assert_ne!(
            digest(b"\xa1\x02ab"),
            digest(b"\xa0\x02ab"),
            "string and binary"
        );
        assert_ne!(digest(b"\xa1\x02ab"), digest(b"\xa1\x02ac"));
    }

    #[test]
    fn ids_leave_the_window_in_the_order_they_came() {
        let mut window = Duplicates::new(100, Vec::new(), 0);
        window.accept([1; 16], 1, 10);
        window.accept([2; 16], 2, 20);
        window.forget_before(110);
        assert_eq!(window.seen(&[1; 16]), None);
        assert_eq!(window.seen(&[2; 16]), Some(2));
        window.set_window(50, 120);
        assert!(window.is_empty(), "a shorter window forgets at once");
    }

    #[test]
    fn recovered_ids_already_out_of_the_window_are_forgotten_and_their_keys_removed() {
        let recovered = vec![(10, vec![([1; 16], 1)]), (500, vec![([2; 16], 2)])];
        let mut window = Duplicates::new(100, recovered, 550);
        assert_eq!(window.len(), 1);
        assert_eq!(window.take_changes(), vec![Change::Forgotten(10)]);
    }
}
