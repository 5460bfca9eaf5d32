//! The versioned on-disk broker record kept next to each message's bytes.
//!
//! Layout, version 1 (big-endian): `version u8 | state u8 | delivery_count u32 |
//! enqueued_ms i64 | size u32`. Later versions append fields; a reader refuses versions it
//! does not know rather than guess.

/// The record format this build writes.
pub const VERSION: u8 = 1;

/// Encoded length of a version-1 record; the message bytes follow it in the stored value.
pub const RECORD_LEN: usize = 1 + 1 + 4 + 8 + 4;

/// Where a message stands in its entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageState {
    /// Receivable.
    Active,
    /// Set aside by its receiver: retrievable only by sequence number.
    Deferred,
}

/// The broker's part of a stored message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Where the message stands.
    pub state: MessageState,
    /// Deliveries counted so far.
    pub delivery_count: u32,
    /// When it was accepted, in ms since the Unix epoch.
    pub enqueued_ms: i64,
    /// Its encoded size in bytes.
    pub size: u32,
}

/// A record that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Written by a newer (or corrupt) build.
    #[error("unknown record version {0}")]
    UnknownVersion(u8),
    /// Shorter than its version requires.
    #[error("record of {0} bytes is truncated")]
    Truncated(usize),
    /// A state byte this version does not know.
    #[error("unknown message state {0}")]
    UnknownState(u8),
}

impl Record {
    /// The encoded record.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut out = [0u8; RECORD_LEN];
        out[0] = VERSION;
        out[1] = match self.state {
            MessageState::Active => 0,
            MessageState::Deferred => 1,
        };
        out[2..6].copy_from_slice(&self.delivery_count.to_be_bytes());
        out[6..14].copy_from_slice(&self.enqueued_ms.to_be_bytes());
        out[14..18].copy_from_slice(&self.size.to_be_bytes());
        out
    }

    /// Reads a record.
    ///
    /// # Errors
    /// A [`RecordError`] for unknown versions, states or short input.
    pub fn decode(bytes: &[u8]) -> Result<Record, RecordError> {
        let version = *bytes.first().ok_or(RecordError::Truncated(0))?;
        if version != VERSION {
            return Err(RecordError::UnknownVersion(version));
        }
        if bytes.len() < RECORD_LEN {
            return Err(RecordError::Truncated(bytes.len()));
        }
        let state = match bytes[1] {
            0 => MessageState::Active,
            1 => MessageState::Deferred,
            other => return Err(RecordError::UnknownState(other)),
        };
        let mut count = [0u8; 4];
        count.copy_from_slice(&bytes[2..6]);
        let mut enqueued = [0u8; 8];
        enqueued.copy_from_slice(&bytes[6..14]);
        let mut size = [0u8; 4];
        size.copy_from_slice(&bytes[14..18]);
        Ok(Record {
            state,
            delivery_count: u32::from_be_bytes(count),
            enqueued_ms: i64::from_be_bytes(enqueued),
            size: u32::from_be_bytes(size),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_does_not_know() {
        let record = Record {
            state: MessageState::Active,
            delivery_count: 3,
            enqueued_ms: 1_700_000_000_123,
            size: 1024,
        };
        assert_eq!(Record::decode(&record.encode()), Ok(record));
        let mut newer = record.encode();
        newer[0] = 2;
        assert_eq!(Record::decode(&newer), Err(RecordError::UnknownVersion(2)));
        assert_eq!(
            Record::decode(&record.encode()[..5]),
            Err(RecordError::Truncated(5))
        );
        assert_eq!(Record::decode(&[]), Err(RecordError::Truncated(0)));
    }
}
