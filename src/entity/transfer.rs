//! Send-via at the via entity (design.md D10): the numbering of its transfer lane, how a
//! transfer is stored, and what becomes of one its destination refuses.
//!
//! A transaction's sends to other queues and topics are stored at its commit in the via
//! entity's transfer lane ([`crate::store::LaneId::TRANSFER`]), in the commit's one atomic write, each
//! marked with its destination; the forwarding path then moves them, at least once. The lane
//! numbers its messages itself, so the via entity's own sequence numbers stay gap-free.

use bytes::Bytes;
use fe2o3_amqp::types::primitives::Value;

use crate::entity::queue::dead_letter_properties;
use crate::entity::terms::{EntityError, Settlement};
use crate::message;
use crate::store::record::{MessageState, Record, NEVER};
use crate::store::Recovered;
use crate::wire::{self, annotation, dead_letter};

/// How long a receiver of a transfer dead-letter queue holds a message (Service Bus's
/// default lock duration).
pub const LOCK_DURATION_MS: i64 = 60_000;

/// The sequence numbers of a transfer lane and its dead-letter lane (which keeps them).
#[derive(Debug)]
pub struct Transfers {
    next: i64,
}

impl Transfers {
    /// The numbering that follows what recovery found in the two lanes (a number is reused
    /// only once no message of either holds it).
    pub fn recovered(lane: &Recovered, dead_letter: &Recovered) -> Self {
        let records = lane.records.iter().chain(&dead_letter.records);
        let next = records.map(|(seq, _)| seq + 1).max().unwrap_or(1);
        Self { next }
    }

    /// The number the next transfer gets.
    pub fn next(&self) -> i64 {
        self.next
    }

    /// Takes the next number.
    pub fn number(&mut self) -> i64 {
        let seq = self.next;
        self.next += 1;
        seq
    }
}

/// A transfer's record and bytes: active, never expiring, its destination written into its
/// message annotations (replacing any the sender set).
///
/// # Errors
/// When the message's annotations cannot be rewritten.
pub fn stored(
    destination: &str,
    bytes: &Bytes,
    enqueued_ms: i64,
) -> Result<(Record, Bytes), EntityError> {
    let marked = (
        annotation::TRANSFER_DESTINATION,
        Value::String(destination.into()),
    );
    let body = message::annotate(bytes, &[marked], &[])
        .map_err(|_| EntityError::NotAllowed("the message's annotations cannot be read"))?;
    Ok((record(&body, enqueued_ms), body))
}

/// A message its lane would forward more than
/// [`MAX_HOPS`](crate::entity::core::MAX_HOPS) times, as the transfer dead-letter queue
/// keeps it: Service Bus's reason and description written in.
pub fn over_hops(bytes: &Bytes, enqueued_ms: i64) -> (Record, Bytes) {
    let reason = dead_letter_properties(
        Some(dead_letter::MAX_TRANSFER_HOP_COUNT_EXCEEDED.to_owned()),
        Some(dead_letter::MAX_TRANSFER_HOP_COUNT_EXCEEDED_DESCRIPTION.to_owned()),
    );
    let body = message::set_application_properties(bytes, &reason).unwrap_or_else(|error| {
        tracing::warn!(%error, "dead-letter reason not written");
        bytes.clone()
    });
    (record(&body, enqueued_ms), body)
}

/// The record of a message stored in a transfer lane: active, never expiring.
fn record(body: &Bytes, enqueued_ms: i64) -> Record {
    Record {
        state: MessageState::Active,
        delivery_count: 0,
        enqueued_ms,
        size: u32::try_from(body.len()).unwrap_or(u32::MAX),
        expires_ms: NEVER,
        scheduled_ms: 0,
    }
}

/// The destination a stored transfer is on its way to.
pub fn destination(stored: &[u8]) -> Option<String> {
    message::annotation_text(stored, annotation::TRANSFER_DESTINATION)
}

/// A transfer as its destination takes it: without the broker's destination mark.
pub fn delivered(stored: Bytes) -> Bytes {
    message::without_annotation(&stored, annotation::TRANSFER_DESTINATION).unwrap_or(stored)
}

/// Whether a destination's refusal may pass: it is stopping, or its storage failed (a
/// transfer refused so is tried again, not dead-lettered).
pub fn is_transient(error: &EntityError) -> bool {
    matches!(error, EntityError::Unavailable | EntityError::Storage(_))
}

/// What becomes of transfers their destination refused with `error`: dead-lettered to the
/// transfer dead-letter queue when the refusal is for good (the destination is gone or full,
/// or the message breaks its rules, as Service Bus does), else released to be tried again
/// (the destination is stopping, or its storage failed).
pub fn after_refusal(destination: &str, error: &EntityError) -> Settlement {
    if is_transient(error) {
        return Settlement::Release;
    }
    let reason = match error {
        EntityError::Deleted => wire::via::DESTINATION_NOT_FOUND,
        _ => wire::via::DESTINATION_REFUSED,
    };
    Settlement::DeadLetter {
        reason: Some(reason.to_owned()),
        description: Some(format!("'{destination}' refused the transfer: {error}")),
        properties: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_follows_both_lanes_and_starts_at_one() {
        let empty = Recovered::default();
        assert_eq!(Transfers::recovered(&empty, &empty).next(), 1);
        let record = Record {
            state: MessageState::Active,
            delivery_count: 0,
            enqueued_ms: 5,
            size: 1,
            expires_ms: NEVER,
            scheduled_ms: 0,
        };
        let lane = Recovered {
            records: vec![(3, record)],
            ..Recovered::default()
        };
        let dead = Recovered {
            records: vec![(7, record)],
            ..Recovered::default()
        };
        let mut transfers = Transfers::recovered(&lane, &dead);
        assert_eq!((transfers.number(), transfers.next()), (8, 9));
    }

    #[test]
    fn a_refusal_for_good_dead_letters_and_a_passing_one_releases() {
        let reason = |error: &EntityError| match after_refusal("q", error) {
            Settlement::DeadLetter { reason, .. } => reason,
            Settlement::Release => None,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            reason(&EntityError::Deleted).as_deref(),
            Some(wire::via::DESTINATION_NOT_FOUND)
        );
        let full = EntityError::QuotaExceeded { size: 1, max: 1 };
        assert_eq!(
            reason(&full).as_deref(),
            Some(wire::via::DESTINATION_REFUSED)
        );
        assert_eq!(reason(&EntityError::Unavailable), None);
        assert_eq!(reason(&EntityError::Storage("disk".into())), None);
    }
}
