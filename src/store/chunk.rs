//! Chunks: the messages one write stores under fresh, consecutive sequence numbers, kept
//! under a single key, and the bitmap of those that have left since.
//!
//! sled's cost is per operation, not per byte: one insert of a hundred messages costs about
//! what one insert of one message does, so a queue that keeps up writes one chunk per batch
//! and one small bitmap per batch of completions instead of an insert and a remove per
//! message.
//!
//! Value layout (big-endian): `version u8 | count u32 | count × entry`:
//! - version 1 (every chunk whose messages all carry their bytes): an entry is `record |
//!   message bytes`, the record (see [`crate::store::record`]) giving the size of the bytes;
//! - version 2: an entry is `record | 0 | message bytes`, or `record | 1` for a message whose
//!   bytes are in the topic's shared bodies (see [`encode_bodies`]).
//!
//! The bitmap is `count` bits, bit `i` set when message `first + i` has left the chunk
//! (deleted, or rewritten under its own key).
//!
//! Shared bodies: the bytes that several subscriptions of a topic store for one message, kept
//! once for all of them (`version u8 | count u32 | count × (size u32 | bytes)`, entry `i` for
//! sequence number `first + i`, empty for a number with no shared bytes).

use std::ops::Range;

use crate::store::record::{Record, RecordError};

/// The chunk format of chunks whose messages all carry their bytes (this build reads it too).
const VERSION_INLINE: u8 = 1;
/// The chunk format of chunks with messages whose bytes are shared.
const VERSION_SHARED: u8 = 2;
/// The format of shared bodies.
const VERSION_BODIES: u8 = 1;
/// The flag of an entry carrying its bytes (version 2).
const INLINE: u8 = 0;
/// The flag of an entry whose bytes are shared (version 2).
const SHARED: u8 = 1;

/// Length of the chunk header.
const HEADER_LEN: usize = 1 + 4;

/// A chunk that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// Written by a newer (or corrupt) build.
    #[error("unknown chunk version {0}")]
    UnknownVersion(u8),
    /// Shorter than its entries say.
    #[error("chunk truncated at byte {0}")]
    Truncated(usize),
    /// An entry's record does not decode.
    #[error("entry {index}: {error}")]
    Record {
        /// The entry.
        index: usize,
        /// What is wrong.
        error: RecordError,
    },
}

/// A decoded chunk entry: the record, and where its bytes lie in the value (`None`: in the
/// shared bodies).
pub type Entry = (Record, Option<Range<usize>>);

/// Encodes consecutive messages as one chunk value: each a record and its bytes, or `None`
/// for bytes kept in shared bodies.
pub fn encode<'a>(entries: &[(&'a Record, Option<&'a [u8]>)]) -> Vec<u8> {
    let shares = entries.iter().any(|(_, body)| body.is_none());
    let mut out = header(
        if shares {
            VERSION_SHARED
        } else {
            VERSION_INLINE
        },
        entries.len(),
    );
    for (record, body) in entries {
        out.extend_from_slice(&record.encode());
        match body {
            Some(body) if shares => {
                out.push(INLINE);
                out.extend_from_slice(body);
            }
            Some(body) => out.extend_from_slice(body),
            None => out.push(SHARED),
        }
    }
    out
}

/// Every entry of a chunk value.
///
/// # Errors
/// A [`ChunkError`] when the value does not decode.
pub fn decode(value: &[u8]) -> Result<Vec<Entry>, ChunkError> {
    let (version, count) = read_header(value)?;
    if version != VERSION_INLINE && version != VERSION_SHARED {
        return Err(ChunkError::UnknownVersion(version));
    }
    let mut entries = Vec::with_capacity(count.min(value.len()));
    let mut at = HEADER_LEN;
    for index in 0..count {
        let (record, record_len) = Record::decode(&value[at.min(value.len())..])
            .map_err(|error| ChunkError::Record { index, error })?;
        at += record_len;
        if version == VERSION_SHARED {
            let flag = *value.get(at).ok_or(ChunkError::Truncated(value.len()))?;
            at += 1;
            if flag == SHARED {
                entries.push((record, None));
                continue;
            }
        }
        let end = at + record.size as usize;
        if end > value.len() {
            return Err(ChunkError::Truncated(value.len()));
        }
        entries.push((record, Some(at..end)));
        at = end;
    }
    Ok(entries)
}

/// Encodes shared bodies: entry `i` holds the bytes of sequence number `first + i` (empty
/// for a number without any).
pub fn encode_bodies(bodies: &[&[u8]]) -> Vec<u8> {
    let mut out = header(VERSION_BODIES, bodies.len());
    for body in bodies {
        let size = u32::try_from(body.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&size.to_be_bytes());
        out.extend_from_slice(body);
    }
    out
}

/// Where each entry's bytes lie in a value made by [`encode_bodies`].
///
/// # Errors
/// A [`ChunkError`] when the value does not decode.
pub fn decode_bodies(value: &[u8]) -> Result<Vec<Range<usize>>, ChunkError> {
    let (version, count) = read_header(value)?;
    if version != VERSION_BODIES {
        return Err(ChunkError::UnknownVersion(version));
    }
    let mut bodies = Vec::with_capacity(count.min(value.len()));
    let mut at = HEADER_LEN;
    for _ in 0..count {
        let size = value
            .get(at..at + 4)
            .map(|raw| u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize)
            .ok_or(ChunkError::Truncated(value.len()))?;
        at += 4;
        if at + size > value.len() {
            return Err(ChunkError::Truncated(value.len()));
        }
        bodies.push(at..at + size);
        at += size;
    }
    Ok(bodies)
}

/// The header of a value of `count` entries.
fn header(version: u8, count: usize) -> Vec<u8> {
    let mut out = vec![version];
    out.extend_from_slice(&u32::try_from(count).unwrap_or(u32::MAX).to_be_bytes());
    out
}

/// A value's version and entry count.
fn read_header(value: &[u8]) -> Result<(u8, usize), ChunkError> {
    let version = *value.first().ok_or(ChunkError::Truncated(0))?;
    let count = value
        .get(1..HEADER_LEN)
        .map(|raw| u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]))
        .ok_or(ChunkError::Truncated(value.len()))?;
    Ok((version, count as usize))
}

/// Which messages of a chunk have left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departures {
    bits: Vec<u64>,
    count: u32,
    gone: u32,
}

impl Departures {
    /// None of `count` messages has left.
    pub fn none(count: u32) -> Self {
        Departures {
            bits: vec![0; (count as usize).div_ceil(64)],
            count,
            gone: 0,
        }
    }

    /// Reads a stored bitmap of a chunk of `count` messages; bits beyond `count` are ignored.
    pub fn decode(bytes: &[u8], count: u32) -> Self {
        let mut departures = Departures::none(count);
        for index in 0..count {
            let byte = bytes.get((index / 8) as usize).copied().unwrap_or(0);
            if byte & (1 << (index % 8)) != 0 {
                departures.mark(index);
            }
        }
        departures
    }

    /// The bitmap as stored.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; (self.count as usize).div_ceil(8)];
        for index in 0..self.count {
            if self.has_left(index) {
                out[(index / 8) as usize] |= 1 << (index % 8);
            }
        }
        out
    }

    /// Marks message `index` as gone; returns whether it was still there.
    pub fn mark(&mut self, index: u32) -> bool {
        if index >= self.count || self.has_left(index) {
            return false;
        }
        self.bits[(index / 64) as usize] |= 1 << (index % 64);
        self.gone += 1;
        true
    }

    /// Whether message `index` has left (out of range counts as gone).
    pub fn has_left(&self, index: u32) -> bool {
        index >= self.count || self.bits[(index / 64) as usize] & (1 << (index % 64)) != 0
    }

    /// How many messages the chunk holds.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// How many messages are still in the chunk.
    pub fn live(&self) -> u32 {
        self.count - self.gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{MessageState, NEVER};

    fn record(size: u32) -> Record {
        Record {
            state: MessageState::Active,
            delivery_count: 0,
            enqueued_ms: 1,
            size,
            expires_ms: NEVER,
            scheduled_ms: 0,
        }
    }

    #[test]
    fn entries_round_trip_and_truncation_is_refused() {
        let (a, b) = (record(3), record(0));
        let value = encode(&[(&a, Some(&b"abc"[..])), (&b, Some(&b""[..]))]);
        assert_eq!(value[0], VERSION_INLINE, "a queue's chunks keep version 1");
        let entries = decode(&value).expect("decodes");
        assert_eq!(entries.len(), 2);
        let range = entries[0].1.clone().expect("inline");
        assert_eq!((entries[0].0, &value[range]), (a, &b"abc"[..]));
        assert_eq!(
            (entries[1].0, entries[1].1.clone().map(|r| r.len())),
            (b, Some(0))
        );
        assert!(decode(&value[..value.len() - 40]).is_err());
        let mut newer = value.clone();
        newer[0] = 9;
        assert_eq!(decode(&newer), Err(ChunkError::UnknownVersion(9)));
    }

    #[test]
    fn entries_with_shared_bytes_round_trip() {
        let (a, b) = (record(3), record(1024));
        let value = encode(&[(&b, None), (&a, Some(&b"abc"[..])), (&b, None)]);
        assert_eq!(value[0], VERSION_SHARED);
        let entries = decode(&value).expect("decodes");
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0], (b, None));
        let range = entries[1].1.clone().expect("inline");
        assert_eq!((entries[1].0, &value[range]), (a, &b"abc"[..]));
        assert_eq!(entries[2], (b, None));
        assert!(decode(&value[..value.len() - 1]).is_err());
    }

    #[test]
    fn shared_bodies_round_trip_and_truncation_is_refused() {
        let value = encode_bodies(&[&b"one"[..], &b""[..], &b"three"[..]]);
        let bodies = decode_bodies(&value).expect("decodes");
        let read: Vec<&[u8]> = bodies.iter().map(|range| &value[range.clone()]).collect();
        assert_eq!(read, vec![&b"one"[..], &b""[..], &b"three"[..]]);
        assert!(decode_bodies(&value[..value.len() - 1]).is_err());
        assert!(decode_bodies(&value[..3]).is_err());
        let mut newer = value.clone();
        newer[0] = 7;
        assert_eq!(decode_bodies(&newer), Err(ChunkError::UnknownVersion(7)));
    }

    #[test]
    fn departures_count_and_round_trip() {
        let mut gone = Departures::none(70);
        assert!(gone.mark(0));
        assert!(gone.mark(69));
        assert!(!gone.mark(69), "already gone");
        assert!(!gone.mark(70), "out of range");
        assert_eq!(gone.live(), 68);
        let back = Departures::decode(&gone.encode(), 70);
        assert_eq!(back, gone);
        assert!(back.has_left(69) && !back.has_left(68));
    }
}
