//! The core's rules that read a stored message's bytes from its log ([`Bodies`]): moving
//! dead-lettered messages with their reason written in, rewriting a message's application
//! properties on an abandon or a deferral, activating scheduled messages, and a stored
//! message as management responses carry it.

use bytes::Bytes;

use crate::entity::core::EntityCore;
use crate::entity::terms::{ConsumerId, EntityError, LaneId, LockRef, Properties, Settlement};
use crate::message::{self, DeliveryStamp};
use crate::store::{Bodies, StoreError};

/// Scheduled messages activated per turn, so a burst of due messages does not stall the
/// mailbox; the rest follow on the next turns.
pub const ACTIVATIONS_PER_TURN: usize = 1024;

impl EntityCore {
    /// Moves the messages the lanes dead-lettered into their dead-letter lanes, stamped with
    /// their reason; staged in the same batch as their removal.
    ///
    /// # Errors
    /// A body the log cannot read (the entity must stop: its moves are half done).
    pub fn move_dead_letters(&mut self, bodies: &mut dyn Bodies) -> Result<(), StoreError> {
        for (to, dead) in self.take_dead_letters() {
            let from = LaneId {
                dead_letter: false,
                ..to
            };
            let body = bodies.body(from, dead.seq)?;
            let body = message::set_application_properties(&body, &dead.properties).unwrap_or_else(
                |error| {
                    tracing::warn!(seq = dead.seq, %error, "dead-letter reason not written");
                    body
                },
            );
            tracing::debug!(seq = dead.seq, "dead-lettered");
            self.accept_dead_letter(to, dead.seq, dead.record, body);
        }
        Ok(())
    }

    /// Settles a message `consumer` holds locked under `lock`; an abandon's or a deferral's
    /// properties to modify rewrite the stored message. Returns its lane.
    ///
    /// # Errors
    /// The refusal ([`EntityError::LockLost`] and the like); [`EntityError::Storage`] when
    /// the body to rewrite could not be read (the entity must stop then).
    pub fn settle_locked(
        &mut self,
        consumer: ConsumerId,
        lock: LockRef,
        settlement: &Settlement,
        bodies: &mut dyn Bodies,
    ) -> Result<LaneId, EntityError> {
        let lane = self.settle(consumer, lock, settlement)?;
        if let Settlement::Abandon(properties) | Settlement::Defer(properties) = settlement {
            (self.set_properties(lane, lock.seq, properties, bodies)).map_err(storage)?;
        }
        Ok(lane)
    }

    /// Rewrites a stored message with new application properties (an abandon's or a
    /// deferral's properties to modify); a message they cannot be written into keeps its own.
    ///
    /// # Errors
    /// A body the log cannot read.
    pub fn set_properties(
        &mut self,
        lane: LaneId,
        seq: i64,
        properties: &Properties,
        bodies: &mut dyn Bodies,
    ) -> Result<(), StoreError> {
        if properties.is_empty() {
            return Ok(());
        }
        let body = bodies.body(lane, seq)?;
        match message::set_application_properties(&body, properties) {
            Ok(changed) => {
                if let Ok(lane) = self.lane(lane) {
                    lane.replace_body(seq, changed);
                }
            }
            Err(error) => tracing::warn!(seq, %error, "properties to modify not applied"),
        }
        Ok(())
    }

    /// Activates the scheduled messages that are due, at most [`ACTIVATIONS_PER_TURN`];
    /// each keeps its bytes and its own time to live, counted from now.
    ///
    /// # Errors
    /// A body the log cannot read (nothing is activated then).
    pub fn activate_due(&mut self, now_ms: i64, bodies: &mut dyn Bodies) -> Result<(), StoreError> {
        let due = self.due_scheduled(now_ms, ACTIVATIONS_PER_TURN);
        if due.is_empty() {
            return Ok(());
        }
        let activated = due
            .into_iter()
            .map(|seq| {
                Ok((
                    seq,
                    message::stored_arrival(bodies.body(LaneId::MAIN, seq)?),
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        tracing::debug!(count = activated.len(), "scheduled messages activated");
        self.activate(now_ms, activated);
        Ok(())
    }

    /// A stored message as the SDKs expect it in management responses: the whole encoded
    /// message, with the broker's header and annotations (its number and lock token as
    /// clients see them).
    ///
    /// # Errors
    /// [`EntityError::Storage`] when its body cannot be read or spliced.
    pub(super) fn encoded(
        &self,
        lane: LaneId,
        seq: i64,
        stamp: &DeliveryStamp,
        bodies: &mut dyn Bodies,
    ) -> Result<Bytes, EntityError> {
        let body = bodies.body(lane, seq).map_err(storage)?;
        let mut stamp = stamp.clone();
        self.identity.partition.restamp(&mut stamp, seq);
        message::splice(&body, &stamp, &mut Vec::new()).map_err(storage)
    }
}

/// A storage failure as the entity's refusal.
pub(super) fn storage(error: impl std::fmt::Display) -> EntityError {
    EntityError::Storage(error.to_string())
}
