//! Transactions at their via entity (design.md D10): the work each one staged, kept until its
//! discharge. Nothing staged is visible: sends have no sequence number yet, settled messages
//! stay locked. The actor applies a committed transaction's work in one batch of the log.

use foldhash::HashMap;

use uuid::Uuid;

use crate::entity::terms::{ConsumerId, EntityError, LaneId, LockRef, Settlement, TxnId};
use crate::message::Arrival;

/// What a transaction does at its via entity.
#[derive(Debug)]
pub enum Work {
    /// Send messages: they get their sequence numbers at the commit.
    Send(Vec<Arrival>),
    /// Send messages via this entity to another queue or topic (send-via): stored in its
    /// transfer lane at the commit, moved to `destination` after it.
    Transfer {
        /// The queue or topic they are for.
        destination: String,
        /// The messages.
        messages: Vec<Arrival>,
    },
    /// Schedule messages (`schedule-message`): numbered now, answered as the management
    /// operation is (`Managed`), stored scheduled at the commit.
    Schedule {
        /// The lane the request was made on (only a queue or topic itself schedules).
        lane: LaneId,
        /// The messages, each with its scheduled enqueue time.
        messages: Vec<Arrival>,
    },
    /// Settle messages the consumer holds locked: they stay locked until the commit.
    Settle {
        /// The consumer that holds the locks.
        consumer: ConsumerId,
        /// The messages and what to do with each.
        items: Vec<(LockRef, Settlement)>,
        /// Whether the client settled the deliveries itself (Qpid JMS does): it cannot settle
        /// them again, so a rollback abandons them instead of leaving them locked.
        client_settled: bool,
    },
    /// Settle locked messages by their lock tokens, whoever holds them (`update-disposition`):
    /// answered as the management operation is (`Managed`).
    SettleByToken {
        /// Their lane.
        lane: LaneId,
        /// The lock tokens.
        tokens: Vec<Uuid>,
        /// What to do with them.
        settlement: Settlement,
    },
}

/// What one transaction staged, in order.
#[derive(Debug, Default)]
pub struct Staged {
    /// Messages to send.
    pub sends: Vec<Arrival>,
    /// Messages to send via the entity, by destination (send-via).
    pub transfers: Vec<(String, Vec<Arrival>)>,
    /// Messages to schedule, each under the number it was given when staged.
    pub scheduled: Vec<(i64, Arrival)>,
    /// Locked messages to settle.
    pub settles: Vec<StagedSettlement>,
    /// The first refusal of work in it, if any: its commit rolls back with it instead.
    pub refused: Option<EntityError>,
}

/// A locked message to settle at the commit.
#[derive(Debug)]
pub struct StagedSettlement {
    /// Its lane.
    pub lane: LaneId,
    /// The consumer that holds its lock (its link may be gone by the commit).
    pub consumer: ConsumerId,
    /// The message and its lock.
    pub lock: LockRef,
    /// What to do with it.
    pub settlement: Settlement,
    /// Whether the client settled the delivery itself ([`Work::Settle`]).
    pub client_settled: bool,
}

/// The transactions with work staged at one entity.
#[derive(Debug, Default)]
pub struct Staging {
    staged: HashMap<TxnId, Staged>,
}

impl Staging {
    /// Stages messages to send in `txn`.
    pub fn send(&mut self, txn: TxnId, messages: Vec<Arrival>) {
        self.staged.entry(txn).or_default().sends.extend(messages);
    }

    /// Stages messages to send via the entity to `destination` in `txn`.
    pub fn transfer(&mut self, txn: TxnId, destination: String, messages: Vec<Arrival>) {
        let transfers = &mut self.staged.entry(txn).or_default().transfers;
        match transfers.last_mut() {
            Some((last, staged)) if *last == destination => staged.extend(messages),
            _ => transfers.push((destination, messages)),
        }
    }

    /// Stages messages to schedule in `txn`, each under its number.
    pub fn schedule(&mut self, txn: TxnId, scheduled: impl IntoIterator<Item = (i64, Arrival)>) {
        self.staged
            .entry(txn)
            .or_default()
            .scheduled
            .extend(scheduled);
    }

    /// Stages the settlement of a message of `lane` that `consumer` holds locked under
    /// `lock`, in `txn`.
    pub fn settle(
        &mut self,
        txn: TxnId,
        (lane, consumer, lock): (LaneId, ConsumerId, LockRef),
        (settlement, client_settled): (Settlement, bool),
    ) {
        let staged = StagedSettlement {
            lane,
            consumer,
            lock,
            settlement,
            client_settled,
        };
        self.staged.entry(txn).or_default().settles.push(staged);
    }

    /// Work in `txn` was refused with `error`: its commit rolls back.
    pub fn refuse(&mut self, txn: TxnId, error: &EntityError) {
        let refused = &mut self.staged.entry(txn).or_default().refused;
        refused.get_or_insert_with(|| error.clone());
    }

    /// Ends `txn` here: its staged work (none when it staged nothing).
    pub fn take(&mut self, txn: TxnId) -> Staged {
        self.staged.remove(&txn).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(staging: &mut Staging, txn: TxnId, seq: i64) {
        let lock = LockRef {
            seq,
            token: uuid::Uuid::from_u128(seq as u128),
        };
        staging.settle(
            txn,
            (LaneId::MAIN, ConsumerId(1), lock),
            (Settlement::Complete, false),
        );
    }

    #[test]
    fn each_transaction_keeps_its_own_work_until_it_ends() {
        let mut staging = Staging::default();
        complete(&mut staging, 1, 5);
        complete(&mut staging, 2, 6);
        complete(&mut staging, 1, 7);
        let first = staging.take(1);
        let seqs: Vec<i64> = first.settles.iter().map(|staged| staged.lock.seq).collect();
        assert_eq!(seqs, vec![5, 7]);
        assert!(staging.take(1).settles.is_empty(), "taken once");
        assert_eq!(staging.take(2).settles.len(), 1);
        assert!(
            staging.take(3).sends.is_empty(),
            "nothing staged: nothing to apply"
        );
    }
}
