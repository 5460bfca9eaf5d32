//! The books of a connection's transactions (AMQP 1.0 §4, design.md D10): ids, the via entity
//! each is bound to (the first it touches), its operation count, its deadline, and the budget
//! its staged messages are charged to. The via entity's actor keeps the work itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fe2o3_amqp::types::definitions::{self, AmqpError};
use fe2o3_amqp::types::primitives::Binary;
use fe2o3_amqp::types::transaction::TransactionError;
use foldhash::HashMap;

use crate::amqp::link::{self, Charge, ReassemblyBudget};
use crate::amqp::outcome;
use crate::clock::millis;
use crate::entity::handle::{Command, EntityHandle, EventSink, Ticket, TxnId};
use crate::metrics;

/// Most messages and settlements one transaction may hold (Service Bus's limit).
pub const MAX_OPERATIONS: usize = 100;
/// Most transactions one connection may have open at once.
pub const MAX_TRANSACTIONS: usize = 256;

/// Transaction ids, unique in the broker while it runs.
static NEXT_TXN: AtomicU64 = AtomicU64::new(1);

/// Service Bus's refusal of work on a second entity in one transaction.
pub const CROSS_ENTITY: &str =
    "Local transactions cannot span multiple top-level entities such as queue or topic.";

/// One open transaction.
#[derive(Debug)]
struct Txn {
    /// The coordinator link that declared it: its detach rolls it back.
    coordinator: u64,
    /// Its via entity, once it touched one.
    via: Option<EntityHandle>,
    /// When it is rolled back unless discharged, in ms since the Unix epoch.
    deadline_ms: i64,
    /// Messages and settlements it holds.
    operations: usize,
    /// Rolled back at its deadline: later work and its discharge are refused as timed out.
    timed_out: bool,
    /// Why work in it was refused, if any was: its commit rolls back instead (its work
    /// succeeds or fails together).
    doomed: Option<String>,
    /// The bytes of its staged messages, charged to the connection's budget for them until it
    /// ends.
    charge: Charge,
}

/// What a discharge does.
#[derive(Debug)]
pub enum Discharging {
    /// Ended here, answered `accepted` at once: a rollback (posted to its via entity, if it
    /// staged anything) or a commit of nothing.
    Done(Option<(EntityHandle, Command)>),
    /// A commit at its via entity; answered once it is durable (or failed).
    Commit(EntityHandle, Command),
    /// Refused as timed out: rolled back at its deadline, or now (posted to its via entity),
    /// when its deadline passed before the timer came.
    TimedOut(Option<(EntityHandle, Command)>),
    /// A commit refused with `amqp:transaction:rollback` (this error) because work in it was
    /// refused: rolled back now (posted to its via entity, if it staged anything).
    Doomed(definitions::Error, Option<(EntityHandle, Command)>),
}

/// The transactions of one connection.
#[derive(Debug)]
pub struct Transactions {
    open: HashMap<TxnId, Txn>,
    timeout_ms: i64,
    /// What the messages staged by the open transactions may hold together.
    staged: ReassemblyBudget,
}

impl Transactions {
    /// No transaction yet; each declared one lasts at most `timeout` before it is rolled back,
    /// and the messages they stage hold at most `staged_bytes` together.
    pub fn new(timeout: Duration, staged_bytes: u64) -> Self {
        Self {
            open: HashMap::default(),
            timeout_ms: millis(timeout),
            staged: ReassemblyBudget::new(staged_bytes),
        }
    }

    /// Declares a transaction on the coordinator link `coordinator`.
    ///
    /// # Errors
    /// `amqp:resource-limit-exceeded` when the connection has as many open as it may.
    pub fn declare(&mut self, coordinator: u64, now_ms: i64) -> Result<TxnId, definitions::Error> {
        if self.open.len() >= MAX_TRANSACTIONS {
            // Timed-out transactions the client never discharged make room first.
            self.open.retain(|_, txn| !txn.timed_out);
        }
        if self.open.len() >= MAX_TRANSACTIONS {
            return Err(link::amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!("a connection holds at most {MAX_TRANSACTIONS} open transactions"),
            ));
        }
        let id = NEXT_TXN.fetch_add(1, Ordering::Relaxed);
        let txn = Txn {
            coordinator,
            via: None,
            deadline_ms: now_ms.saturating_add(self.timeout_ms),
            operations: 0,
            timed_out: false,
            doomed: None,
            charge: self.staged.charge(),
        };
        self.open.insert(id, txn);
        Ok(id)
    }

    /// Enlists `operations` messages or settlements of `bytes` on `entity` in the transaction
    /// `txn_id` names; the first entity it touches becomes its via entity.
    ///
    /// # Errors
    /// `amqp:transaction:unknown-id`, `amqp:transaction:timeout`, `amqp:not-allowed` for
    /// another entity than the via entity, `amqp:resource-limit-exceeded` past
    /// [`MAX_OPERATIONS`] or past the connection's budget for staged messages.
    pub fn enlist(
        &mut self,
        txn_id: &[u8],
        entity: &EntityHandle,
        (operations, bytes): (usize, u64),
        now_ms: i64,
    ) -> Result<TxnId, definitions::Error> {
        let limit = self.staged.limit();
        let (id, txn) = self.find(txn_id)?;
        // Past its deadline it is refused even before the timer rolls it back.
        if txn.timed_out || txn.deadline_ms <= now_ms {
            return Err(timed_out());
        }
        let refusal = if txn
            .via
            .as_ref()
            .is_some_and(|via| via.name() != entity.name())
        {
            Some(link::amqp_error(AmqpError::NotAllowed, CROSS_ENTITY))
        } else if txn.operations + operations > MAX_OPERATIONS {
            Some(link::amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!("a transaction holds at most {MAX_OPERATIONS} messages and settlements"),
            ))
        } else if !txn.charge.add(bytes) {
            Some(link::amqp_error(
                AmqpError::ResourceLimitExceeded,
                format!(
                    "the open transactions of this connection hold {limit} bytes of messages, \
                     as many as they may; discharge one first"
                ),
            ))
        } else {
            None
        };
        if let Some(refusal) = refusal {
            txn.doom(&refusal);
            return Err(refusal);
        }
        txn.operations += operations;
        txn.via.get_or_insert_with(|| entity.clone());
        Ok(id)
    }

    /// Work in the transaction `txn_id` names was refused (`why`) before it could be enlisted:
    /// its commit rolls back. Nothing happens for an unknown id.
    pub fn doom(&mut self, txn_id: &[u8], why: &definitions::Error) {
        if let Ok((_, txn)) = self.find(txn_id) {
            txn.doom(why);
        }
    }

    /// Discharges the transaction `txn_id` names: committed (unless `fail`) or rolled back;
    /// one past its deadline is refused as timed out, and the commit of one whose work was
    /// refused is refused as rolled back (both forgotten).
    ///
    /// # Errors
    /// `amqp:transaction:unknown-id`.
    pub fn discharge(
        &mut self,
        txn_id: &[u8],
        fail: bool,
        reply: (Ticket, EventSink),
        now_ms: i64,
    ) -> Result<Discharging, definitions::Error> {
        let (id, txn) = self.find(txn_id)?;
        let (timed_out_already, expired) = (txn.timed_out, txn.deadline_ms <= now_ms);
        let via = txn.via.clone();
        let doomed = txn.doomed.take();
        // Gone from the books now: later work on it is refused as unknown, as after any end.
        self.open.remove(&id);
        if timed_out_already {
            return Ok(Discharging::TimedOut(None));
        }
        if expired {
            metrics::broker().transactions_rolled_back.inc();
            return Ok(Discharging::TimedOut(via.map(|via| (via, rollback(id)))));
        }
        let metrics = metrics::broker();
        if let (Some(why), false) = (doomed, fail) {
            metrics.transactions_rolled_back.inc();
            return Ok(Discharging::Doomed(
                rolled_back(why),
                via.map(|via| (via, rollback(id))),
            ));
        }
        match (via, fail) {
            (Some(via), false) => {
                let command = Command::Discharge {
                    txn: id,
                    commit: true,
                    reply: Some(reply),
                };
                Ok(Discharging::Commit(via, command))
            }
            (via, true) => {
                metrics.transactions_rolled_back.inc();
                Ok(Discharging::Done(via.map(|via| (via, rollback(id)))))
            }
            (None, false) => {
                metrics.transactions_committed.inc();
                Ok(Discharging::Done(None))
            }
        }
    }

    /// Rolls back, at their via entities, the transactions whose deadline has passed by
    /// `now_ms`; they stay known as timed out.
    pub fn expire(&mut self, now_ms: i64) -> Vec<(EntityHandle, Command)> {
        let mut rollbacks = Vec::new();
        for (id, txn) in &mut self.open {
            if txn.timed_out || txn.deadline_ms > now_ms {
                continue;
            }
            tracing::info!(txn = id, "transaction timed out: rolled back");
            metrics::broker().transactions_rolled_back.inc();
            txn.timed_out = true;
            txn.charge.release();
            rollbacks.extend(txn.via.take().map(|via| (via, rollback(*id))));
        }
        rollbacks
    }

    /// The next deadline of an open transaction, in ms since the Unix epoch.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.open
            .values()
            .filter(|txn| !txn.timed_out)
            .map(|txn| txn.deadline_ms)
            .min()
    }

    /// The connection ends: every open transaction is rolled back.
    pub fn abandon_all(&mut self) -> Vec<(EntityHandle, Command)> {
        self.abandon(|_| true)
    }

    /// The coordinator links `links` went (detached, or their session ended): the open
    /// transactions they declared are rolled back, as AMQP 1.0 §4.3 has it for a controller
    /// link that closes, and their ids are unknown from then on.
    pub fn abandon_declared_on(&mut self, links: &[u64]) -> Vec<(EntityHandle, Command)> {
        self.abandon(|txn| links.contains(&txn.coordinator))
    }

    /// Rolls back, at their via entities, and forgets the open transactions `which` picks.
    fn abandon(&mut self, which: impl Fn(&Txn) -> bool) -> Vec<(EntityHandle, Command)> {
        let metrics = metrics::broker();
        let ids: Vec<TxnId> = (self.open.iter())
            .filter(|(_, txn)| which(txn))
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| {
                let txn = self.open.remove(&id)?;
                if !txn.timed_out {
                    metrics.transactions_rolled_back.inc();
                }
                txn.via.map(|via| (via, rollback(id)))
            })
            .collect()
    }

    fn find(&mut self, txn_id: &[u8]) -> Result<(TxnId, &mut Txn), definitions::Error> {
        let id = <[u8; 8]>::try_from(txn_id)
            .map(TxnId::from_be_bytes)
            .map_err(|_| unknown())?;
        let txn = self.open.get_mut(&id).ok_or_else(unknown)?;
        Ok((id, txn))
    }
}

impl Txn {
    /// Work in it was refused: the first refusal is why its commit rolls back.
    fn doom(&mut self, why: &definitions::Error) {
        let description = why.description.as_deref().unwrap_or("no description");
        let condition = outcome::condition_name(&why.condition);
        (self.doomed)
            .get_or_insert_with(|| format!("work in it was refused ({condition}: {description})"));
    }
}

/// The rollback of `txn` at its via entity, with no answer wanted.
fn rollback(txn: TxnId) -> Command {
    Command::Discharge {
        txn,
        commit: false,
        reply: None,
    }
}

/// The wire `txn-id` of a transaction.
pub fn wire_id(id: TxnId) -> Binary {
    Binary::from(id.to_be_bytes().to_vec())
}

fn unknown() -> definitions::Error {
    link::amqp_error(
        TransactionError::UnknownId,
        "Transaction hasn't been declared yet, or has already been discharged",
    )
}

/// `amqp:transaction:rollback`, for a commit that rolled back instead, and `why`.
pub fn rolled_back(why: impl std::fmt::Display) -> definitions::Error {
    link::amqp_error(
        TransactionError::Rollback,
        format!("the transaction was rolled back: {why}"),
    )
}

/// `amqp:transaction:timeout`, for a transaction past its deadline.
pub fn timed_out() -> definitions::Error {
    link::amqp_error(
        TransactionError::Timeout,
        "the transaction took longer than its timeout and was rolled back",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::fixtures;

    fn reply() -> (Ticket, EventSink) {
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        (
            Ticket {
                link: 1,
                request: 2,
            },
            events,
        )
    }

    fn condition(error: &definitions::Error) -> String {
        format!("{:?}", error.condition)
    }

    /// An entity other than `fixtures::entity`'s `q`.
    fn other() -> EntityHandle {
        let (mailbox, _) = tokio::sync::mpsc::channel(1);
        EntityHandle::new("other".into(), mailbox, Default::default(), None)
    }

    #[test]
    fn a_transaction_is_bound_to_the_first_entity_it_touches() {
        let mut transactions = Transactions::new(Duration::from_secs(60), 1 << 20);
        let id = transactions.declare(1, 0).unwrap();
        let wire = wire_id(id);
        let queue = fixtures::entity(false);
        assert_eq!(transactions.enlist(&wire, &queue, (1, 10), 0).unwrap(), id);
        let refused = transactions
            .enlist(&wire, &other(), (1, 10), 0)
            .unwrap_err();
        assert_eq!(refused.description.as_deref(), Some(CROSS_ENTITY));
        let rollback = transactions.discharge(&wire, true, reply(), 0).unwrap();
        assert!(
            matches!(rollback, Discharging::Done(Some((ref via, _))) if via.name() == "q"),
            "rolled back at its via entity: {rollback:?}"
        );
        let bound = wire_id(transactions.declare(1, 0).unwrap());
        transactions.enlist(&bound, &queue, (1, 10), 0).unwrap();
        match transactions.discharge(&bound, false, reply(), 0).unwrap() {
            Discharging::Commit(via, Command::Discharge { commit, .. }) => {
                assert_eq!((via.name(), commit), ("q", true));
            }
            other => panic!("not posted to its via entity: {other:?}"),
        }
        let gone = transactions
            .discharge(&bound, false, reply(), 0)
            .unwrap_err();
        assert!(condition(&gone).contains("UnknownId"), "{gone:?}");
    }

    #[test]
    fn refused_work_dooms_its_transaction_and_its_commit_rolls_back() {
        let mut transactions = Transactions::new(Duration::from_secs(60), 1_000);
        let queue = fixtures::entity(false);
        let cross = wire_id(transactions.declare(1, 0).unwrap());
        let over = wire_id(transactions.declare(1, 0).unwrap());
        let too_big = wire_id(transactions.declare(1, 0).unwrap());
        let malformed = wire_id(transactions.declare(1, 0).unwrap());
        for wire in [&cross, &over, &too_big] {
            transactions.enlist(wire, &queue, (1, 10), 0).unwrap();
        }
        transactions
            .enlist(&cross, &other(), (1, 10), 0)
            .unwrap_err();
        (transactions.enlist(&over, &queue, (MAX_OPERATIONS, 10), 0)).unwrap_err();
        (transactions.enlist(&too_big, &queue, (1, 990), 0)).unwrap_err();
        let bad = link::amqp_error(AmqpError::DecodeError, "delivery 3: not a message");
        transactions.doom(&malformed, &bad);
        for (wire, why) in [
            (&cross, "amqp:not-allowed: Local transactions"),
            (
                &over,
                "amqp:resource-limit-exceeded: a transaction holds at most 100",
            ),
            (
                &too_big,
                "amqp:resource-limit-exceeded: the open transactions",
            ),
            (&malformed, "amqp:decode-error: delivery 3"),
        ] {
            let discharged = transactions.discharge(wire, false, reply(), 0).unwrap();
            let Discharging::Doomed(error, rollback) = discharged else {
                panic!("{why}: committed: {discharged:?}");
            };
            assert!(condition(&error).contains("Rollback"), "{error:?}");
            let description = error.description.unwrap_or_default();
            assert!(
                description.starts_with("the transaction was rolled back: work in it was refused")
                    && description.contains(why),
                "{description}"
            );
            assert_eq!(
                rollback.is_some(),
                wire != &malformed,
                "rolled back where it staged work"
            );
        }
        // A doomed transaction rolled back by its controller is answered as any rollback.
        let rolled = wire_id(transactions.declare(1, 0).unwrap());
        transactions.enlist(&rolled, &queue, (1, 10), 0).unwrap();
        transactions
            .enlist(&rolled, &other(), (1, 10), 0)
            .unwrap_err();
        let rollback = transactions.discharge(&rolled, true, reply(), 0).unwrap();
        assert!(
            matches!(rollback, Discharging::Done(Some(_))),
            "{rollback:?}"
        );
    }

    #[test]
    fn an_empty_transaction_is_discharged_at_once_and_bad_ids_are_unknown() {
        let mut transactions = Transactions::new(Duration::from_secs(60), 1 << 20);
        let id = transactions.declare(1, 0).unwrap();
        let done = transactions
            .discharge(&wire_id(id), true, reply(), 0)
            .unwrap();
        assert!(
            matches!(done, Discharging::Done(None)),
            "nothing to roll back anywhere"
        );
        let queue = fixtures::entity(false);
        let staged = transactions.declare(1, 0).unwrap();
        transactions
            .enlist(&wire_id(staged), &queue, (1, 1), 0)
            .unwrap();
        let rolled = transactions
            .discharge(&wire_id(staged), true, reply(), 0)
            .unwrap();
        assert!(
            matches!(
                rolled,
                Discharging::Done(Some((
                    _,
                    Command::Discharge {
                        commit: false,
                        reply: None,
                        ..
                    }
                )))
            ),
            "a rollback is answered at once and posted to its via entity"
        );
        for bad in [&b"short"[..], &[0; 9][..], &u64::MAX.to_be_bytes()[..]] {
            let error = transactions
                .enlist(bad, &fixtures::entity(false), (1, 1), 0)
                .unwrap_err();
            assert!(
                condition(&error).contains("UnknownId"),
                "{bad:?}: {error:?}"
            );
        }
    }

    #[test]
    fn operations_and_staged_bytes_are_bounded() {
        let mut transactions = Transactions::new(Duration::from_secs(60), 1_000);
        let queue = fixtures::entity(false);
        let wire = wire_id(transactions.declare(1, 0).unwrap());
        transactions
            .enlist(&wire, &queue, (MAX_OPERATIONS - 1, 10), 0)
            .unwrap();
        let over = transactions.enlist(&wire, &queue, (2, 10), 0).unwrap_err();
        assert!(condition(&over).contains("ResourceLimitExceeded"));
        transactions.enlist(&wire, &queue, (1, 10), 0).unwrap();
        let other = wire_id(transactions.declare(1, 0).unwrap());
        let full = transactions
            .enlist(&other, &queue, (1, 990), 0)
            .unwrap_err();
        assert!(
            condition(&full).contains("ResourceLimitExceeded"),
            "20 + 990 > 1000"
        );
        // Discharging gives the bytes back.
        transactions.discharge(&wire, true, reply(), 0).unwrap();
        transactions.enlist(&other, &queue, (1, 990), 0).unwrap();
    }

    #[test]
    fn past_its_deadline_a_transaction_is_rolled_back_and_its_work_refused() {
        let mut transactions = Transactions::new(Duration::from_millis(100), 1 << 20);
        let wire = wire_id(transactions.declare(1, 1_000).unwrap());
        let idle = wire_id(transactions.declare(1, 1_000).unwrap());
        transactions
            .enlist(&wire, &fixtures::entity(false), (1, 1), 0)
            .unwrap();
        assert_eq!(transactions.next_deadline_ms(), Some(1_100));
        assert!(transactions.expire(1_099).is_empty());
        let rollbacks = transactions.expire(1_100);
        assert!(
            matches!(
                &rollbacks[..],
                [(
                    _,
                    Command::Discharge {
                        commit: false,
                        reply: None,
                        ..
                    }
                )]
            ),
            "only the one with work has something to roll back"
        );
        assert_eq!(transactions.next_deadline_ms(), None);
        let late = transactions
            .enlist(&wire, &fixtures::entity(false), (1, 1), 0)
            .unwrap_err();
        assert!(condition(&late).contains("Timeout"));
        let discharge = transactions.discharge(&idle, false, reply(), 0).unwrap();
        assert!(
            matches!(discharge, Discharging::TimedOut(None)),
            "already rolled back"
        );
        let forgotten = transactions
            .discharge(&idle, false, reply(), 0)
            .unwrap_err();
        assert!(
            condition(&forgotten).contains("UnknownId"),
            "refused once, then forgotten"
        );
    }

    #[test]
    fn past_its_deadline_a_transaction_is_refused_even_before_the_timer_comes() {
        let mut transactions = Transactions::new(Duration::from_millis(100), 1 << 20);
        let queue = fixtures::entity(false);
        let wire = wire_id(transactions.declare(1, 1_000).unwrap());
        transactions.enlist(&wire, &queue, (1, 1), 1_099).unwrap();
        let late = transactions
            .enlist(&wire, &queue, (1, 1), 1_100)
            .unwrap_err();
        assert!(condition(&late).contains("Timeout"));
        let discharged = transactions
            .discharge(&wire, false, reply(), 1_100)
            .unwrap();
        assert!(
            matches!(
                discharged,
                Discharging::TimedOut(Some((_, Command::Discharge { commit: false, .. })))
            ),
            "refused, and rolled back at its via entity now"
        );
        assert!(
            transactions.expire(2_000).is_empty(),
            "and not rolled back twice"
        );
    }

    #[test]
    fn a_connection_holds_a_bounded_number_and_its_end_rolls_them_back() {
        let mut transactions = Transactions::new(Duration::from_millis(100), 1 << 20);
        let queue = fixtures::entity(false);
        let ids: Vec<TxnId> = (0..MAX_TRANSACTIONS)
            .map(|_| transactions.declare(1, 0).unwrap())
            .collect();
        assert!(
            transactions.declare(1, 0).is_err(),
            "one more than the limit"
        );
        transactions
            .enlist(&wire_id(ids[0]), &queue, (1, 1), 0)
            .unwrap();
        transactions.expire(100);
        // The timed-out ones make room.
        transactions.declare(1, 200).unwrap();
        let live = transactions.declare(1, 200).unwrap();
        transactions
            .enlist(&wire_id(live), &queue, (1, 1), 0)
            .unwrap();
        let rollbacks = transactions.abandon_all();
        assert!(matches!(
            &rollbacks[..],
            [(_, Command::Discharge { txn, commit: false, .. })] if *txn == live
        ));
    }

    #[test]
    fn a_coordinator_link_that_goes_rolls_back_what_it_declared_and_only_that() {
        let mut transactions = Transactions::new(Duration::from_secs(60), 1 << 20);
        let queue = fixtures::entity(false);
        let on_first = transactions.declare(1, 0).unwrap();
        let idle_on_first = transactions.declare(1, 0).unwrap();
        let on_second = transactions.declare(2, 0).unwrap();
        for id in [on_first, on_second] {
            transactions
                .enlist(&wire_id(id), &queue, (1, 1), 0)
                .unwrap();
        }
        let rollbacks = transactions.abandon_declared_on(&[1]);
        assert!(matches!(
            &rollbacks[..],
            [(_, Command::Discharge { txn, commit: false, .. })] if *txn == on_first
        ));
        for gone in [on_first, idle_on_first] {
            let refused = transactions
                .discharge(&wire_id(gone), false, reply(), 0)
                .unwrap_err();
            assert!(condition(&refused).contains("UnknownId"), "{refused:?}");
        }
        assert!(transactions.abandon_declared_on(&[1]).is_empty());
        assert!(matches!(
            transactions.discharge(&wire_id(on_second), false, reply(), 0),
            Ok(Discharging::Commit(..))
        ));
    }
}
