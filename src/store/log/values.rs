//! The values the log stores besides chunks: a message under its own key, the ids accepted in
//! one millisecond, a session's state.

use bytes::Bytes;

use crate::store::keys::be_i64;
use crate::store::record::{Record, RECORD_LEN};
use crate::store::{AcceptedIds, StoredState};

/// Bytes of one accepted id as stored: its digest and its sequence number.
const ACCEPTED_ID_LEN: usize = 24;

/// The stored value of accepted ids.
pub(super) fn encode_accepted(ids: &[([u8; 16], i64)]) -> Vec<u8> {
    let mut value = Vec::with_capacity(ids.len() * ACCEPTED_ID_LEN);
    for (digest, seq) in ids {
        value.extend_from_slice(digest);
        value.extend_from_slice(&seq.to_be_bytes());
    }
    value
}

/// Accepted ids back from [`encode_accepted`] (a torn tail is left out).
pub(super) fn decode_accepted(value: &[u8]) -> AcceptedIds {
    value
        .chunks_exact(ACCEPTED_ID_LEN)
        .map(|id| {
            let (digest, seq) = id.split_at(16);
            (digest.try_into().unwrap_or_default(), be_i64(seq))
        })
        .collect()
}

/// A session state's stored value: when it was set (ms, big-endian), then the state.
pub(super) fn encode_state(stored: &StoredState) -> Vec<u8> {
    let mut value = stored.updated_ms.to_be_bytes().to_vec();
    value.extend_from_slice(&stored.state);
    value
}

/// A stored session state back (a value too short for its time reads as set at 0).
pub(super) fn decode_state(value: &[u8]) -> StoredState {
    match value.split_first_chunk::<8>() {
        Some((time, state)) => StoredState {
            state: Bytes::copy_from_slice(state),
            updated_ms: i64::from_be_bytes(*time),
        },
        None => StoredState {
            state: Bytes::copy_from_slice(value),
            updated_ms: 0,
        },
    }
}

/// The stored value of a message under its own key.
pub(super) fn own_value(record: &Record, body: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(RECORD_LEN + body.len());
    value.extend_from_slice(&record.encode());
    value.extend_from_slice(body);
    value
}
