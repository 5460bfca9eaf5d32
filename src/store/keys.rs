//! The key layout of an entity's tree, per lane: which letter holds what, and the keys made
//! from a lane and a sequence number.
//!
//! Keys in an entity's tree (sequence numbers big-endian), per lane (see [`LaneId`]):
//! - `h`: the next sequence number (the high-water mark), one for the whole entity;
//! - `s` + name: a topic subscription's lane number (see
//!   [`Log::subscription_numbers`](crate::store::Log::subscription_numbers));
//! - `r` + subscription number + name: a rule added to that subscription at run time;
//! - `u` + millisecond: the message ids the entity accepted then, while it detects duplicates;
//! - `x` + session id: the state of a session of the lane (`X` + subscription number + id
//!   for a subscription's lane);
//! - `c` + first: a chunk (see [`crate::store::chunk`]): the lane's messages that one write
//!   stored under fresh, consecutive sequence numbers;
//! - `g` + first: which messages have left that chunk, once any has;
//! - `m` + seq / `d` + seq: one message of the lane / of its dead-letter lane under its own
//!   key (record, then bytes): a message stored again (new bytes or record) leaves its chunk
//!   for its own key, and dead-lettered messages always have one.
//!
//! A queue's lanes (subscription 0) use these keys as they are; a topic subscription's lanes
//! use the same letters upper-cased, followed by the subscription's number (u32 big-endian).
//!
//! A topic also keeps `b` + first: shared bodies (see [`crate::store::chunk`]), the bytes of
//! messages that several subscriptions store alike in one write, kept once; their chunks hold
//! only the records (design.md D7). Shared bodies go when no message left in a chunk refers
//! to them.

use crate::store::LaneId;

pub(super) const NEXT_SEQ_KEY: &[u8] = b"h";
/// Prefix of a topic's shared bodies (`b` + first sequence number).
pub(super) const BODIES_PREFIX: u8 = b'b';
/// Prefix of the rules a subscription was given at run time (`r` + subscription number +
/// lower-cased name: the stored description).
pub(super) const RULE_PREFIX: u8 = b'r';
/// Prefix of a topic's subscription numbers (`s` + lower-cased name: u32 big-endian).
pub(super) const SUBSCRIPTION_PREFIX: u8 = b's';
/// Prefix of the message ids a queue or topic accepted in one millisecond (`u` + that
/// millisecond, big-endian: each id's 16-byte digest and its sequence number).
pub(super) const ACCEPTED_PREFIX: u8 = b'u';
/// Prefix of a lane's session states (`x` + id; upper-cased and followed by the
/// subscription number for a subscription's lane).
pub(super) const SESSION_STATE_PREFIX: u8 = b'x';

/// What a key of a lane holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A chunk of messages.
    Chunk,
    /// The departures of a chunk.
    Departures,
    /// One message under its own key.
    Own,
}

/// A key of the tree: a letter, the subscription number for a topic's lanes, a sequence
/// number.
#[derive(Debug, Clone, Copy)]
pub(super) struct Key {
    bytes: [u8; 13],
    len: usize,
}

impl std::ops::Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

/// The prefix of every key of `kind` in `lane`.
pub(super) fn prefix(kind: Kind, lane: LaneId) -> Key {
    let letter = match (kind, lane.dead_letter) {
        (Kind::Chunk, _) => b'c',
        (Kind::Departures, _) => b'g',
        (Kind::Own, false) => b'm',
        (Kind::Own, true) => b'd',
    };
    let mut key = Key {
        bytes: [0u8; 13],
        len: 1,
    };
    if lane.subscription == 0 {
        key.bytes[0] = letter;
    } else {
        key.bytes[0] = letter.to_ascii_uppercase();
        key.bytes[1..5].copy_from_slice(&lane.subscription.to_be_bytes());
        key.len = 5;
    }
    key
}

/// The key of `seq` under `kind` in `lane`.
pub(super) fn key(kind: Kind, lane: LaneId, seq: i64) -> Key {
    let mut key = prefix(kind, lane);
    key.bytes[key.len..key.len + 8].copy_from_slice(&seq.to_be_bytes());
    key.len += 8;
    key
}

/// The prefix of the session states of `lane` (a lane that takes sends).
pub(super) fn session_state_prefix(lane: LaneId) -> Vec<u8> {
    if lane.subscription == 0 {
        return vec![SESSION_STATE_PREFIX];
    }
    let mut key = vec![SESSION_STATE_PREFIX.to_ascii_uppercase()];
    key.extend_from_slice(&lane.subscription.to_be_bytes());
    key
}

/// The key of the ids accepted at `accepted_ms`.
pub(super) fn accepted_key(accepted_ms: i64) -> [u8; 9] {
    let mut key = [ACCEPTED_PREFIX; 9];
    key[1..].copy_from_slice(&accepted_ms.to_be_bytes());
    key
}

/// The key of a subscription's rule: `r`, the subscription's number, the lower-cased name.
pub(super) fn rule_key(lane: LaneId, name: &str) -> Vec<u8> {
    let mut key = vec![RULE_PREFIX];
    key.extend_from_slice(&lane.subscription.to_be_bytes());
    key.extend_from_slice(name.to_lowercase().as_bytes());
    key
}

/// The key of the shared bodies starting at `first`.
pub(super) fn bodies_key(first: i64) -> Key {
    let mut key = Key {
        bytes: [0u8; 13],
        len: 9,
    };
    key.bytes[0] = BODIES_PREFIX;
    key.bytes[1..9].copy_from_slice(&first.to_be_bytes());
    key
}

/// The sequence number in a key made by [`key`]: its last eight bytes.
pub(super) fn seq_of(key: &[u8]) -> i64 {
    be_i64(&key[key.len() - 8..])
}

/// The lane of a chunk or departures key made by [`key`].
pub(super) fn lane_of(key: &[u8]) -> LaneId {
    let subscription = match key.get(1..5) {
        Some(number) if key.len() == 13 => {
            u32::from_be_bytes([number[0], number[1], number[2], number[3]])
        }
        _ => 0,
    };
    LaneId {
        subscription,
        dead_letter: false,
    }
}

/// A big-endian i64 from exactly 8 bytes.
pub(super) fn be_i64(raw: &[u8]) -> i64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(raw);
    i64::from_be_bytes(bytes)
}
