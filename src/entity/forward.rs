//! Auto-forwarding out of an entity's lanes (`forward_to`, `forward_dead_lettered_messages_to`):
//! the actor's bookkeeping of what it sent to which target, and when to try again.
//!
//! A lane that forwards has an internal consumer ([`FORWARDER`](crate::entity::queue::FORWARDER))
//! whose locks never expire. Each turn the actor takes up to [`IN_FLIGHT`] of its available
//! messages, reads their bytes and sends them as one batch (a [`Command::Send`]) to the
//! target's handle, found by name through the [`Resolver`] at every attempt, so a target
//! created again is found. The target answers after its durability point; the answer comes
//! back on the actor's own channel, and only then does the lane delete the messages (a
//! journaled delete, like any completion). A refusal (target missing, deleted, full, failed)
//! releases them without counting a delivery and holds the lane back from 1 s, doubling to
//! 30 s. The move is at least once: after a crash between the target's write and the
//! source's delete, the messages are forwarded again, bytes and message-id unchanged.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::entity::handle::{
    Command, EntityError, EntityEvent, EntityHandle, EventSink, LaneId, LockRef, Ticket,
};
use crate::entity::transfer;
use crate::message::{self, Arrival};

/// Finds a queue or topic by name (case-insensitively), as it is now.
pub type Resolver = Arc<dyn Fn(&str) -> Option<EntityHandle> + Send + Sync>;

/// Most messages one lane has on their way to its target at once.
pub const IN_FLIGHT: usize = 256;
/// The wait after a first refusal, in ms.
const FIRST_RETRY_MS: i64 = 1_000;
/// The longest wait between attempts, in ms.
const LAST_RETRY_MS: i64 = 30_000;

/// One forwarding lane's target and how it fares.
#[derive(Debug)]
struct Target {
    /// The target's name; `None` for a transfer lane, whose messages each name their own.
    name: Option<String>,
    /// Messages sent, not yet answered.
    in_flight: usize,
    /// The lane waits until then before it sends again (after a refusal).
    retry_at_ms: Option<i64>,
    /// The wait after the next refusal; 0 while the target takes messages.
    backoff_ms: i64,
}

/// A batch on its way: the lane it came from, its target and the locks of its messages.
#[derive(Debug)]
struct Batch {
    lane: LaneId,
    target: String,
    locks: Vec<LockRef>,
}

/// A target's answer to a batch, as the lane it came from takes it.
#[derive(Debug)]
pub struct Answered {
    /// The lane the batch came from.
    pub lane: LaneId,
    /// Where it went.
    pub target: String,
    /// The locks of its messages.
    pub locks: Vec<LockRef>,
    /// Whether the target stored them, or why not.
    pub result: Result<(), EntityError>,
}

/// An entity's forwarding lanes and their batches in flight.
pub struct Forwarder {
    resolve: Resolver,
    targets: HashMap<LaneId, Target>,
    batches: HashMap<u64, Batch>,
    next_batch: u64,
    /// Where targets answer: the actor's own channel.
    answers: EventSink,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("targets", &self.targets)
            .field("batches", &self.batches.len())
            .finish_non_exhaustive()
    }
}

impl Forwarder {
    /// No lane forwards yet; targets answer on `answers`.
    pub fn new(resolve: Resolver, answers: EventSink) -> Self {
        Self {
            resolve,
            targets: HashMap::new(),
            batches: HashMap::new(),
            next_batch: 0,
            answers,
        }
    }

    /// Sets where `lane` forwards to (`None`: nowhere). A lane whose target is unchanged
    /// keeps its state; batches in flight are answered as usual.
    pub fn set(&mut self, lane: LaneId, target: Option<&str>) {
        match target {
            None => {
                self.targets.remove(&lane);
            }
            Some(name) if self.forwards_to(lane, name) => {}
            Some(name) => {
                let in_flight = self.targets.get(&lane).map_or(0, |t| t.in_flight);
                let target = Target {
                    name: Some(name.to_owned()),
                    in_flight,
                    retry_at_ms: None,
                    backoff_ms: 0,
                };
                self.targets.insert(lane, target);
            }
        }
    }

    /// Makes `lane` forward each of its messages to the target the message names (a via
    /// entity's transfer lane).
    pub fn set_per_message(&mut self, lane: LaneId) {
        let target = Target {
            name: None,
            in_flight: 0,
            retry_at_ms: None,
            backoff_ms: 0,
        };
        self.targets.insert(lane, target);
    }

    fn forwards_to(&self, lane: LaneId, name: &str) -> bool {
        self.targets.get(&lane).is_some_and(|target| {
            (target.name.as_deref()).is_some_and(|own| own.eq_ignore_ascii_case(name))
        })
    }

    /// Forgets both lanes of a deleted subscription.
    pub fn remove_subscription(&mut self, subscription: u32) {
        self.targets
            .retain(|lane, _| lane.subscription != subscription);
    }

    /// Whether `lane` forwards (then it refuses receivers).
    pub fn forwards(&self, lane: LaneId) -> bool {
        self.targets.contains_key(&lane)
    }

    /// Whether messages are on their way to a target (the entity is not idle then).
    pub fn is_busy(&self) -> bool {
        !self.batches.is_empty()
    }

    /// When a lane held back by a refusal may try again.
    pub fn next_retry_ms(&self) -> Option<i64> {
        self.targets.values().filter_map(|t| t.retry_at_ms).min()
    }

    /// The lanes that may send now, each with how many messages it may send.
    pub fn room(&mut self, now_ms: i64) -> Vec<(LaneId, usize)> {
        let mut room = Vec::new();
        for (lane, target) in &mut self.targets {
            match target.retry_at_ms {
                Some(at) if at > now_ms => continue,
                _ => target.retry_at_ms = None,
            }
            if target.in_flight < IN_FLIGHT {
                room.push((*lane, IN_FLIGHT - target.in_flight));
            }
        }
        room
    }

    /// Sends messages of `lane` (their stored bytes, and the locks the lane holds them
    /// under) as one batch to its target, or for a lane whose messages name their own, to
    /// `to`. The answer comes on the actor's channel, through [`Forwarder::answered`]; a
    /// target that cannot be found answers at once, refused.
    pub fn send(
        &mut self,
        lane: LaneId,
        to: Option<&str>,
        bodies: Vec<Bytes>,
        locks: Vec<LockRef>,
    ) {
        let Some(target) = self.targets.get_mut(&lane) else {
            return;
        };
        let Some(name) = target.name.as_deref().or(to).map(str::to_owned) else {
            return;
        };
        target.in_flight += locks.len();
        let ticket = Ticket {
            link: 0,
            request: self.next_batch,
        };
        let resolved = (self.resolve)(&name);
        let batch = Batch {
            lane,
            target: name,
            locks,
        };
        self.batches.insert(self.next_batch, batch);
        self.next_batch += 1;
        let Some(handle) = resolved else {
            let result = Err(EntityError::Deleted);
            let _ = self.answers.send(EntityEvent::sent(ticket, result));
            return;
        };
        let read = handle.rules_read_messages();
        let messages = bodies.into_iter().map(|b| arrival(b, read)).collect();
        let command = Command::send(messages, Some(ticket), self.answers.clone());
        // Posting waits for room in the target's mailbox: never in the actor's turn.
        tokio::spawn(async move {
            if let Err(command) = handle.post(command).await {
                command.refuse(&handle.refusal());
            }
        });
    }

    /// Takes a target's answer to a batch. A refusal holds the lane back, and is logged when
    /// it starts; a transfer refused for good does not.
    pub fn answered(&mut self, event: EntityEvent, now_ms: i64) -> Option<Answered> {
        let (ticket, result) = event.into_sent()?;
        let Batch {
            lane,
            target: name,
            locks,
        } = self.batches.remove(&ticket.request)?;
        if let Some(target) = self.targets.get_mut(&lane) {
            target.in_flight = target.in_flight.saturating_sub(locks.len());
            // A transfer refused for good leaves for the transfer dead-letter queue: nothing
            // waits for that destination, and the transfers to the others go on at once.
            let for_good = target.name.is_none()
                && result
                    .as_ref()
                    .is_err_and(|error| !transfer::is_transient(error));
            match &result {
                Err(_) if for_good => {}
                Ok(()) if target.backoff_ms > 0 => {
                    tracing::info!(?lane, target = %name, "forwarding resumed");
                    target.backoff_ms = 0;
                }
                Ok(()) => {}
                Err(error) => {
                    if target.backoff_ms == 0 {
                        tracing::warn!(?lane, target = %name, %error, "forwarding refused: the messages stay, retried every 1 s to 30 s");
                    }
                    target.backoff_ms =
                        (target.backoff_ms * 2).clamp(FIRST_RETRY_MS, LAST_RETRY_MS);
                    target.retry_at_ms = Some(now_ms + target.backoff_ms);
                }
            }
        }
        Some(Answered {
            lane,
            target: name,
            locks,
            result,
        })
    }
}

/// A stored message as its target takes it: sent now (an activated scheduled message is not
/// scheduled again), with the view, when a topic's rules read it.
fn arrival(bytes: Bytes, read: bool) -> Arrival {
    let mut arrival = message::stored_arrival(bytes);
    arrival.scheduled_ms = None;
    if read {
        arrival.view = message::view(&arrival.bytes).ok().map(Box::new);
    }
    arrival
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer a forwarder gets for a batch sent from `lane` to a target that no longer
    /// exists (it answers at once), taken; then when the lane may send again.
    fn refused_then_retry_at(forwarder: &mut Forwarder, lane: LaneId, to: &str) -> Option<i64> {
        let lock = LockRef {
            seq: 1,
            token: uuid::Uuid::nil(),
        };
        forwarder.send(lane, Some(to), vec![Bytes::new()], vec![lock]);
        forwarder.next_retry_ms()
    }

    #[test]
    fn a_gone_target_holds_a_forwarding_lane_back_but_not_the_transfer_lane() {
        let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel();
        let mut forwarder = Forwarder::new(Arc::new(|_| None), answers);
        forwarder.set_per_message(LaneId::TRANSFER);
        forwarder.set(LaneId::MAIN, Some("gone"));
        for (lane, held_back) in [(LaneId::TRANSFER, false), (LaneId::MAIN, true)] {
            assert_eq!(refused_then_retry_at(&mut forwarder, lane, "gone"), None);
            let answer = answered.try_recv().expect("answered at once");
            let taken = forwarder.answered(answer, 1_000).expect("a batch of ours");
            assert_eq!((taken.lane, taken.target.as_str()), (lane, "gone"));
            assert_eq!(taken.result, Err(EntityError::Deleted));
            let retry_at = held_back.then_some(1_000 + FIRST_RETRY_MS);
            assert_eq!(forwarder.next_retry_ms(), retry_at, "{lane:?}");
        }
    }
}
