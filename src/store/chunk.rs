//! Chunks: the messages one write stores under fresh, consecutive sequence numbers, kept
//! under a single key, and the bitmap of those that have left since.
//!
//! sled's cost is per operation, not per byte: one insert of a hundred messages costs about
//! what one insert of one message does, so a queue that keeps up writes one chunk per batch
//! and one small bitmap per batch of completions instead of an insert and a remove per
//! message.
//!
//! Value layout (big-endian): `version u8 | count u32 | count × (record | message bytes)`,
//! each record (see [`crate::store::record`]) giving the size of the bytes after it. The
//! bitmap is `count` bits, bit `i` set when message `first + i` has left the chunk (deleted,
//! or rewritten under its own key).

use std::ops::Range;

use crate::store::record::{Record, RecordError};

/// The chunk format this build writes and reads.
const VERSION: u8 = 1;

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

/// Encodes consecutive messages as one chunk value.
pub fn encode<'a>(entries: impl ExactSizeIterator<Item = (&'a Record, &'a [u8])>) -> Vec<u8> {
    let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
    let mut out = Vec::new();
    out.push(VERSION);
    out.extend_from_slice(&count.to_be_bytes());
    for (record, body) in entries {
        out.extend_from_slice(&record.encode());
        out.extend_from_slice(body);
    }
    out
}

/// Every entry of a chunk value: its record and where its bytes lie in the value.
///
/// # Errors
/// A [`ChunkError`] when the value does not decode.
pub fn decode(value: &[u8]) -> Result<Vec<(Record, Range<usize>)>, ChunkError> {
    let version = *value.first().ok_or(ChunkError::Truncated(0))?;
    if version != VERSION {
        return Err(ChunkError::UnknownVersion(version));
    }
    let count = value
        .get(1..HEADER_LEN)
        .map(|raw| u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]))
        .ok_or(ChunkError::Truncated(value.len()))?;
    let mut entries = Vec::with_capacity(count as usize);
    let mut at = HEADER_LEN;
    for index in 0..count as usize {
        let (record, record_len) = Record::decode(&value[at.min(value.len())..])
            .map_err(|error| ChunkError::Record { index, error })?;
        let start = at + record_len;
        let end = start + record.size as usize;
        if end > value.len() {
            return Err(ChunkError::Truncated(value.len()));
        }
        entries.push((record, start..end));
        at = end;
    }
    Ok(entries)
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
        let value = encode([(&a, &b"abc"[..]), (&b, &b""[..])].into_iter());
        let entries = decode(&value).expect("decodes");
        assert_eq!(entries.len(), 2);
        assert_eq!(
            (entries[0].0, &value[entries[0].1.clone()]),
            (a, &b"abc"[..])
        );
        assert_eq!((entries[1].0, entries[1].1.len()), (b, 0));
        assert!(decode(&value[..value.len() - 40]).is_err());
        let mut newer = value.clone();
        newer[0] = 9;
        assert_eq!(decode(&newer), Err(ChunkError::UnknownVersion(9)));
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
