//! Consumers and browsers with a JMS message selector (issue 55): each is handed, or shown,
//! only the messages its selector selects; the others stay available, in order, to everyone
//! else.
//!
//! The lane judges a message for a selector consumer by reading its bytes from the entity's
//! log ([`Reader`]), once: the verdict is kept per (consumer, message) until the message
//! leaves the lane or changes (new properties, a counted delivery: `JMSXDeliveryCount`).
//!
//! A selector consumer sits in the round-robin only while it has a *candidate*: an available
//! message it has not judged yet, or one it judged a match. Judging a message that does not
//! match drops it from the consumer's candidates, so a consumer that matches nothing leaves the
//! round-robin instead of spinning, and comes back when a message becomes available to it
//! (sent, unlocked, abandoned, its lock lapsed, its schedule due, given back, rewritten).
//! A candidate another consumer took meanwhile is dropped when the consumer comes to it.

use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;

use super::QueueCore;
use crate::entity::terms::{ConsumerId, LaneId, ReceiveMode};
use crate::filter::JmsSelector;
use crate::message;
use crate::store::{Bodies, StoreError};

/// A selector consumer's selector and what it knows of the lane's messages.
#[derive(Debug)]
pub(super) struct Selection {
    selector: Arc<JmsSelector>,
    /// Verdicts on the messages it judged, until they leave the lane or change.
    verdicts: HashMap<i64, bool>,
    /// Available messages it has not judged, or judged a match, in delivery order (a
    /// browser's stays empty: it goes by its place).
    candidates: BTreeSet<i64>,
}

impl Selection {
    /// Whether it may find a match among the messages deliverable now.
    pub(super) fn has_candidate(&self, visible_below: i64) -> bool {
        self.candidates
            .first()
            .is_some_and(|seq| *seq < visible_below)
    }
}

/// The entity's log as a lane's selector consumers read it: the bytes of the lane's
/// messages, and the first read that failed (the entity must stop acknowledging then).
pub struct Reader<'a> {
    bodies: &'a mut dyn Bodies,
    lane: LaneId,
    failure: Option<StoreError>,
}

impl<'a> Reader<'a> {
    /// Reads through `bodies`, from the main lane until [`Reader::at`] says otherwise.
    pub fn new(bodies: &'a mut dyn Bodies) -> Reader<'a> {
        Reader {
            bodies,
            lane: LaneId::MAIN,
            failure: None,
        }
    }

    /// Reads the messages of `lane` from now on.
    pub fn at(&mut self, lane: LaneId) -> &mut Reader<'a> {
        self.lane = lane;
        self
    }

    /// The first read that failed, if one did.
    pub fn failure(self) -> Option<StoreError> {
        self.failure
    }

    fn read(&mut self, seq: i64) -> Option<Bytes> {
        match self.bodies.body(self.lane, seq) {
            Ok(bytes) => Some(bytes),
            Err(error) => {
                self.failure.get_or_insert(error);
                None
            }
        }
    }
}

impl QueueCore {
    /// Gives a registered consumer (or browser) a JMS message selector: from now on it is
    /// handed, or shown, only the messages the selector selects.
    pub fn select(&mut self, consumer: ConsumerId, selector: Arc<JmsSelector>) {
        let Some(state) = self.consumers.get_mut(&consumer) else {
            return;
        };
        let candidates = match state.mode {
            ReceiveMode::Browse => BTreeSet::new(),
            _ => self.available.clone(),
        };
        state.selection = Some(Box::new(Selection {
            selector,
            verdicts: HashMap::new(),
            candidates,
        }));
        self.selecting.push(consumer);
        self.make_ready(consumer);
    }

    /// Message `seq` became available: each selector consumer that has not judged it a
    /// mismatch may take it.
    pub(super) fn offer(&mut self, seq: i64) {
        for index in 0..self.selecting.len() {
            let consumer = self.selecting[index];
            let Some(state) = self.consumers.get_mut(&consumer) else {
                continue;
            };
            // A browser goes by its place, not by what is available.
            let Some(selection) =
                (state.selection.as_deref_mut()).filter(|_| state.mode != ReceiveMode::Browse)
            else {
                continue;
            };
            if selection.verdicts.get(&seq) != Some(&false) {
                selection.candidates.insert(seq);
                self.make_ready(consumer);
            }
        }
    }

    /// Message `seq` left the lane, or changed: the verdicts on it go. One that changed and is
    /// available is offered again.
    pub(super) fn forget(&mut self, seq: i64) {
        // A lane without selectors (the hot path) looks nothing up.
        if self.selecting.is_empty() {
            return;
        }
        for index in 0..self.selecting.len() {
            if let Some(selection) = self.selection_mut(self.selecting[index]) {
                selection.verdicts.remove(&seq);
                selection.candidates.remove(&seq);
            }
        }
        if self.available.contains(&seq) {
            self.offer(seq);
        }
    }

    /// Messages became deliverable: selector consumers with candidates among them rejoin the
    /// round-robin.
    pub(super) fn wake_selecting(&mut self) {
        for index in 0..self.selecting.len() {
            self.make_ready(self.selecting[index]);
        }
    }

    /// Takes the first available message `consumer`'s selector selects out of the available
    /// ones, judging its candidates in order; `None` when none is left to it.
    pub(super) fn next_selected(
        &mut self,
        consumer: ConsumerId,
        reader: &mut Reader,
    ) -> Option<i64> {
        let visible_below = self.visible_below;
        loop {
            let selection = self.selection_mut(consumer)?;
            let seq = (selection.candidates.first().copied()).filter(|seq| *seq < visible_below)?;
            selection.candidates.remove(&seq);
            // One another consumer took meanwhile comes back as a candidate if it is made
            // available again.
            if self.available.contains(&seq) && self.selects(consumer, seq, reader) {
                self.available.remove(&seq);
                return Some(seq);
            }
        }
    }

    /// Whether `consumer` takes message `seq`: always without a selector; with one, whether
    /// it selects the message (judged now if it has no verdict on it yet).
    pub(super) fn selects(&mut self, consumer: ConsumerId, seq: i64, reader: &mut Reader) -> bool {
        let Some(selection) = self.selection_mut(consumer) else {
            return true;
        };
        match selection.verdicts.get(&seq) {
            Some(verdict) => *verdict,
            None => self.judge(consumer, seq, reader),
        }
    }

    /// Judges message `seq` for `consumer`'s selector, reading its bytes, and keeps the
    /// verdict. A message that does not decode is not selected; one that cannot be read is
    /// not selected now, and the reader keeps the failure.
    fn judge(&mut self, consumer: ConsumerId, seq: i64, reader: &mut Reader) -> bool {
        let Some(delivery_count) =
            (self.messages.get(&seq)).map(|entry| entry.record.delivery_count)
        else {
            return false;
        };
        let Some(bytes) = reader.read(seq) else {
            return false;
        };
        let Some(selection) = self.selection_mut(consumer) else {
            return false;
        };
        let verdict = message::view(&bytes).is_ok_and(|mut view| {
            view.delivery_count = delivery_count;
            selection.selector.matches(&view)
        });
        selection.verdicts.insert(seq, verdict);
        verdict
    }

    /// How many verdicts `consumer` keeps.
    #[cfg(test)]
    pub fn judged(&self, consumer: ConsumerId) -> usize {
        (self.consumers.get(&consumer))
            .and_then(|state| state.selection.as_ref())
            .map_or(0, |selection| selection.verdicts.len())
    }

    fn selection_mut(&mut self, consumer: ConsumerId) -> Option<&mut Selection> {
        self.consumers.get_mut(&consumer)?.selection.as_deref_mut()
    }
}

/// A log without bytes, for tests whose consumers have no selector (they never read one).
#[cfg(test)]
pub struct Unread;

#[cfg(test)]
impl Bodies for Unread {
    fn body(&mut self, _: LaneId, seq: i64) -> Result<Bytes, StoreError> {
        Err(StoreError::MissingBody {
            entity: "unread".into(),
            seq,
        })
    }
}
