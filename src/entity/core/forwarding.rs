//! What a forwarding lane sends to its target (auto-forwarding, and the transfer lane of
//! send-via): its messages marked as Service Bus marks a forwarded message, in batches by
//! destination, those over the hop limit dead-lettered instead; and what a target's answer
//! does to them. The [`Forwarder`](crate::entity::forward::Forwarder) carries the batches.

use bytes::Bytes;
use fe2o3_amqp::types::primitives::Value;

use crate::entity::core::EntityCore;
use crate::entity::queue::FORWARDER;
use crate::entity::terms::{EntityError, LaneId, LockRef, Settlement};
use crate::entity::transfer;
use crate::message;
use crate::store::{Bodies, StoreError};
use crate::wire::annotation;

/// Most bytes of messages one batch carries (past its first message).
const BATCH_BYTES: u64 = 4 * 1024 * 1024;
/// Most forwarding moves one message may take (Service Bus's `MaxTransferHopCount`): a
/// message that took this many is not forwarded again but dead-lettered, to the transfer
/// dead-letter queue of the entity that holds it.
pub const MAX_HOPS: i64 = 4;

/// Messages of one lane on their way to one destination, in the lane's order.
#[derive(Debug, PartialEq)]
pub struct ForwardBatch {
    /// The destination the messages name (the transfer lane's); `None` for the lane's own
    /// target.
    pub to: Option<String>,
    /// The messages as they leave.
    pub bodies: Vec<Bytes>,
    /// Their locks, held by the forwarder until the target answers.
    pub locks: Vec<LockRef>,
}

impl EntityCore {
    /// Takes up to `room` messages `lane` may forward now, locked by the forwarder, as
    /// batches by destination, with whether any went to the transfer dead-letter queue
    /// instead: one that took [`MAX_HOPS`] forwarding moves.
    ///
    /// # Errors
    /// A body the log cannot read (the entity must stop).
    pub fn take_for_forwarding(
        &mut self,
        now: i64,
        lane: LaneId,
        room: usize,
        bodies: &mut dyn Bodies,
    ) -> Result<(Vec<ForwardBatch>, bool), StoreError> {
        let Ok(queue) = self.lane(lane) else {
            return Ok((Vec::new(), false));
        };
        let taken = queue.take_for_forwarding(room, BATCH_BYTES, now);
        let source = (lane.dead_letter && !taken.is_empty()).then(|| self.lane_path(lane));
        let mut batches: Vec<ForwardBatch> = Vec::new();
        let mut over_hops = false;
        for delivery in taken {
            let bytes = bodies.body(lane, delivery.seq)?;
            let lock = LockRef {
                seq: delivery.seq,
                token: delivery.lock_token.unwrap_or_default(),
            };
            let hops = message::annotation_number(&bytes, annotation::TRANSFER_HOP_COUNT);
            let hops = hops.unwrap_or(0);
            if lane != LaneId::TRANSFER && hops >= MAX_HOPS {
                // Left where it is, held by the forwarder, if it cannot be stored there.
                if self.dead_letter_over_hops(now, &bytes) {
                    if let Ok(queue) = self.lane(lane) {
                        let _ = queue.settle(FORWARDER, lock, &Settlement::Complete);
                    }
                    over_hops = true;
                } else {
                    tracing::error!(
                        ?lane,
                        seq = lock.seq,
                        "over the hop limit, and no transfer dead-letter queue: kept"
                    );
                }
                continue;
            }
            let (to, body) = match lane == LaneId::TRANSFER {
                true => (transfer::destination(&bytes), transfer::delivered(bytes)),
                false => {
                    let seq = self.identity.partition.visible(delivery.seq);
                    (None, forwarded(bytes, seq, hops, source.as_deref()))
                }
            };
            match batches.last_mut() {
                Some(last) if last.to == to => {
                    last.bodies.push(body);
                    last.locks.push(lock);
                }
                _ => batches.push(ForwardBatch {
                    to,
                    bodies: vec![body],
                    locks: vec![lock],
                }),
            }
        }
        Ok((batches, over_hops))
    }

    /// A target answered a batch of `lane` (to `target`): its messages leave (it stored
    /// them; the deletes are journaled as any completion), or stay, available again without
    /// a counted delivery. A transfer its destination refused for good goes to the transfer
    /// dead-letter queue.
    pub fn forward_answered(
        &mut self,
        now: i64,
        lane: LaneId,
        target: &str,
        locks: Vec<LockRef>,
        result: &Result<(), EntityError>,
    ) {
        let settlement = match result {
            Ok(()) => Settlement::Complete,
            Err(error) if lane == LaneId::TRANSFER => transfer::after_refusal(target, error),
            Err(_) => Settlement::Release,
        };
        let Ok(queue) = self.lane(lane) else {
            return;
        };
        for lock in locks {
            let _ = queue.settle(FORWARDER, lock, &settlement);
        }
        if result.is_ok() {
            self.touch(lane, now);
        }
    }
}

/// A message as it leaves for its forwarding target, marked as Service Bus marks it: with
/// the sequence number it was first given (kept from an earlier hop), the forwarding moves
/// it has taken (`hops` before this one) and, leaving a dead-letter queue, the entity it was
/// dead-lettered in.
fn forwarded(bytes: Bytes, seq: i64, hops: i64, dead_letter_source: Option<&str>) -> Bytes {
    let first_seq = [(annotation::ENQUEUE_SEQUENCE_NUMBER, Value::Long(seq))];
    let hops = i32::try_from(hops + 1).unwrap_or(i32::MAX);
    let hop_count = (annotation::TRANSFER_HOP_COUNT, Value::Int(hops));
    let source = dead_letter_source
        .map(|source| (annotation::DEAD_LETTER_SOURCE, Value::String(source.into())));
    let set: Vec<_> = [hop_count].into_iter().chain(source).collect();
    message::annotate(&bytes, &set, &first_seq).unwrap_or(bytes)
}
