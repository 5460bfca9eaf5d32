//! The versioned on-disk broker record kept in front of each message's bytes.
//!
//! Layout (big-endian):
//! - version 1: `version u8 | state u8 | delivery_count u32 | enqueued_ms i64 | size u32`
//! - version 2: version 1 followed by `expires_ms i64 | scheduled_ms i64`
//!
//! This build writes version 2 and reads both (a version-1 message never expires and is not
//! scheduled). A reader refuses versions it does not know rather than guess.

/// The record format this build writes.
pub const VERSION: u8 = 2;

/// Encoded length of a version-1 record.
const V1_LEN: usize = 1 + 1 + 4 + 8 + 4;

/// Encoded length of a version-2 record, the one this build writes.
pub const RECORD_LEN: usize = V1_LEN + 8 + 8;

/// `expires_ms` of a message that never expires.
pub const NEVER: i64 = i64::MAX;

/// Where a message stands in its entity (the `x-opt-message-state` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageState {
    /// Receivable.
    Active,
    /// Set aside by its receiver: retrievable only by sequence number.
    Deferred,
    /// Waiting for its scheduled enqueue time: visible to peek only.
    Scheduled,
}

impl MessageState {
    /// The state's number on the wire and on disk.
    pub fn code(self) -> u8 {
        match self {
            MessageState::Active => 0,
            MessageState::Deferred => 1,
            MessageState::Scheduled => 2,
        }
    }
}

/// The broker's part of a stored message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Where the message stands.
    pub state: MessageState,
    /// Deliveries counted so far.
    pub delivery_count: u32,
    /// When it was accepted (or, scheduled, when it was scheduled), in ms since the Unix epoch.
    pub enqueued_ms: i64,
    /// Its encoded size in bytes.
    pub size: u32,
    /// When it expires, in ms since the Unix epoch; [`NEVER`] when it does not.
    pub expires_ms: i64,
    /// When a scheduled message is due, or was due for one held until then and activated, in
    /// ms since the Unix epoch; 0 for a message never held.
    pub scheduled_ms: i64,
}

impl Record {
    /// The `x-opt-message-state` a delivery or a peek shows: its state, but scheduled for an
    /// active message that was held until its due time (Service Bus delivers those as
    /// scheduled).
    pub fn shown_state(&self) -> MessageState {
        match self.state {
            MessageState::Active if self.scheduled_ms != 0 => MessageState::Scheduled,
            state => state,
        }
    }
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
    /// The encoded record (the current version).
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut out = [0u8; RECORD_LEN];
        out[0] = VERSION;
        out[1] = self.state.code();
        out[2..6].copy_from_slice(&self.delivery_count.to_be_bytes());
        out[6..14].copy_from_slice(&self.enqueued_ms.to_be_bytes());
        out[14..18].copy_from_slice(&self.size.to_be_bytes());
        out[18..26].copy_from_slice(&self.expires_ms.to_be_bytes());
        out[26..34].copy_from_slice(&self.scheduled_ms.to_be_bytes());
        out
    }

    /// Reads a record; returns it and its encoded length (where the message bytes start).
    ///
    /// # Errors
    /// A [`RecordError`] for unknown versions, states or short input.
    pub fn decode(bytes: &[u8]) -> Result<(Record, usize), RecordError> {
        let version = *bytes.first().ok_or(RecordError::Truncated(0))?;
        let len = match version {
            1 => V1_LEN,
            2 => RECORD_LEN,
            other => return Err(RecordError::UnknownVersion(other)),
        };
        if bytes.len() < len {
            return Err(RecordError::Truncated(bytes.len()));
        }
        let state = match bytes[1] {
            0 => MessageState::Active,
            1 => MessageState::Deferred,
            2 if version >= 2 => MessageState::Scheduled,
            other => return Err(RecordError::UnknownState(other)),
        };
        let (expires_ms, scheduled_ms) = match version {
            1 => (NEVER, 0),
            _ => (i64_at(bytes, 18), i64_at(bytes, 26)),
        };
        let record = Record {
            state,
            delivery_count: u32::from_be_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]),
            enqueued_ms: i64_at(bytes, 6),
            size: u32::from_be_bytes([bytes[14], bytes[15], bytes[16], bytes[17]]),
            expires_ms,
            scheduled_ms,
        };
        Ok((record, len))
    }
}

/// The big-endian i64 at `at`; the caller has checked the length.
fn i64_at(bytes: &[u8], at: usize) -> i64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[at..at + 8]);
    i64::from_be_bytes(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_does_not_know() {
        let record = Record {
            state: MessageState::Scheduled,
            delivery_count: 3,
            enqueued_ms: 1_700_000_000_123,
            size: 1024,
            expires_ms: NEVER,
            scheduled_ms: 1_700_000_005_000,
        };
        assert_eq!(Record::decode(&record.encode()), Ok((record, RECORD_LEN)));
        let mut newer = record.encode();
        newer[0] = 3;
        assert_eq!(Record::decode(&newer), Err(RecordError::UnknownVersion(3)));
        assert_eq!(
            Record::decode(&record.encode()[..5]),
            Err(RecordError::Truncated(5))
        );
        assert_eq!(Record::decode(&[]), Err(RecordError::Truncated(0)));
    }

    #[test]
    fn an_activated_message_shows_as_scheduled_and_a_deferred_one_as_deferred() {
        let active = Record {
            state: MessageState::Active,
            delivery_count: 0,
            enqueued_ms: 5,
            size: 1,
            expires_ms: NEVER,
            scheduled_ms: 0,
        };
        let activated = Record {
            scheduled_ms: 4,
            ..active
        };
        let deferred = Record {
            state: MessageState::Deferred,
            ..activated
        };
        let shown = [active, activated, deferred].map(|record| record.shown_state());
        assert_eq!(
            shown,
            [
                MessageState::Active,
                MessageState::Scheduled,
                MessageState::Deferred
            ]
        );
    }

    #[test]
    fn reads_version_one_records_as_never_expiring() {
        let current = Record {
            state: MessageState::Deferred,
            delivery_count: 2,
            enqueued_ms: 77,
            size: 5,
            expires_ms: NEVER,
            scheduled_ms: 0,
        };
        let mut v1 = current.encode()[..V1_LEN].to_vec();
        v1[0] = 1;
        v1.extend_from_slice(b"bytes");
        assert_eq!(Record::decode(&v1), Ok((current, V1_LEN)));
        v1[1] = 2;
        assert_eq!(
            Record::decode(&v1),
            Err(RecordError::UnknownState(2)),
            "version 1 had no scheduled state"
        );
    }
}
