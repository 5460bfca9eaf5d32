//! Transactions at their via entity (design.md D10): work staged in a transaction is checked
//! when it comes (and answered then), kept in [`Staging`](crate::entity::staging::Staging)
//! and applied at the commit in one turn, so that it goes into one batch of the log.

use uuid::Uuid;

use crate::entity::core::manage::not_schedulable;
use crate::entity::core::stored::storage;
use crate::entity::core::EntityCore;
use crate::entity::operation::Answer;
use crate::entity::staging::{Staged, StagedSettlement, Work};
use crate::entity::terms::{ConsumerId, EntityError, LaneId, LockRef, Settlement, TxnId};
use crate::message::Arrival;
use crate::store::Bodies;

/// The answer to staged work, as the work is answered outside a transaction.
#[derive(Debug)]
pub enum StagedAnswer {
    /// A send or a transfer: taken, or refused.
    Sent(Result<(), EntityError>),
    /// A management operation (`schedule-message`, `update-disposition`).
    Managed(Result<Answer, EntityError>),
    /// Settlements, item by item.
    Settled(Vec<Result<(), EntityError>>),
}

impl EntityCore {
    /// Stages work in transaction `txn`: checked now, applied at its commit. Refused work
    /// dooms the transaction: its commit rolls back (its work succeeds or fails together).
    pub fn stage(&mut self, txn: TxnId, work: Work) -> StagedAnswer {
        let answer = self.check_and_stage(txn, work);
        let refusal = match &answer {
            StagedAnswer::Sent(Err(error)) | StagedAnswer::Managed(Err(error)) => Some(error),
            StagedAnswer::Settled(items) => items.iter().find_map(|item| item.as_ref().err()),
            _ => None,
        };
        if let Some(error) = refusal {
            self.staging.refuse(txn, error);
        }
        answer
    }

    fn check_and_stage(&mut self, txn: TxnId, work: Work) -> StagedAnswer {
        match work {
            Work::Send(messages) => {
                let result = self.check_sendable(&messages);
                if result.is_ok() {
                    self.staging.send(txn, messages);
                }
                StagedAnswer::Sent(result)
            }
            Work::Transfer {
                destination,
                messages,
            } => {
                // The destination's own rules are met when the transfer reaches it.
                self.staging.transfer(txn, destination, messages);
                StagedAnswer::Sent(Ok(()))
            }
            Work::Schedule { lane, messages } => {
                StagedAnswer::Managed(self.stage_schedule(txn, lane, messages))
            }
            Work::Settle {
                consumer,
                items,
                client_settled,
            } => StagedAnswer::Settled(
                items
                    .into_iter()
                    .map(|(lock, settlement)| {
                        let lane = self.locked_by(consumer, lock)?;
                        let staged = (settlement, client_settled);
                        self.staging.settle(txn, (lane, consumer, lock), staged);
                        Ok(())
                    })
                    .collect(),
            ),
            Work::SettleByToken {
                lane,
                tokens,
                settlement,
            } => StagedAnswer::Managed(self.stage_by_token(txn, lane, tokens, &settlement)),
        }
    }

    /// Stages `schedule-message` in a transaction: the messages must be sendable now, and get
    /// their numbers now (the answer), to be stored scheduled at the commit.
    fn stage_schedule(
        &mut self,
        txn: TxnId,
        lane: LaneId,
        messages: Vec<Arrival>,
    ) -> Result<Answer, EntityError> {
        if lane != LaneId::MAIN {
            return Err(not_schedulable());
        }
        self.check_sendable(&messages)?;
        let numbers = self.reserve(messages.len());
        self.staging
            .schedule(txn, numbers.iter().copied().zip(messages));
        let partition = self.identity.partition;
        let visible = numbers.iter().map(|n| partition.visible(*n));
        Ok(Answer::Scheduled(visible.collect()))
    }

    /// Stages `update-disposition` in a transaction: every token must name a lock that lasts,
    /// else nothing is staged.
    fn stage_by_token(
        &mut self,
        txn: TxnId,
        lane: LaneId,
        tokens: Vec<Uuid>,
        settlement: &Settlement,
    ) -> Result<Answer, EntityError> {
        let queue = self.lane(lane)?;
        let locks = tokens
            .into_iter()
            .map(|token| queue.lock_of(token).ok_or(EntityError::LockLost))
            .collect::<Result<Vec<_>, _>>()?;
        for (consumer, lock) in locks {
            (self.staging).settle(txn, (lane, consumer, lock), (settlement.clone(), false));
        }
        Ok(Answer::Done)
    }

    /// Why `staged` cannot be committed, if it cannot: work in it was refused when staged, a
    /// lock it settles was lost, or its messages are refused or do not fit now.
    fn check_staged(&mut self, staged: &Staged) -> Result<(), EntityError> {
        if let Some(refusal) = &staged.refused {
            return Err(refusal.clone());
        }
        for settle in &staged.settles {
            if !self.lane(settle.lane)?.holds(settle.consumer, settle.lock) {
                return Err(EntityError::LockLost);
            }
        }
        if !staged.sends.is_empty() {
            self.check_sendable(&staged.sends)?;
        }
        // Checked together: past this point every message is stored.
        let transfers = staged.transfers.iter().flat_map(|(_, messages)| messages);
        let scheduled = staged.scheduled.iter().map(|(_, message)| message);
        let all = staged.sends.iter().chain(transfers).chain(scheduled);
        let bytes = all.clone().map(|m| m.bytes.len() as u64).sum();
        self.admit(bytes, all.count())
    }

    /// Abandons the messages of `settles` the client settled itself and still holds locked.
    fn abandon_client_settled(&mut self, settles: &[StagedSettlement]) {
        for settle in settles.iter().filter(|settle| settle.client_settled) {
            let abandon = Settlement::Abandon(Vec::new());
            let abandoned = self
                .lane(settle.lane)
                .and_then(|queue| queue.settle(settle.consumer, settle.lock, &abandon));
            if let Err(error) = abandoned {
                tracing::debug!(seq = settle.lock.seq, %error, "rolled-back settlement's lock gone");
            }
        }
    }

    /// The lane of a message `consumer` holds locked under `lock`.
    ///
    /// # Errors
    /// [`EntityError::LockLost`] when it does not hold it (any more).
    fn locked_by(&mut self, consumer: ConsumerId, lock: LockRef) -> Result<LaneId, EntityError> {
        let lane = self.lane_id_of(consumer).ok_or(EntityError::LockLost)?;
        match self.lane(lane)?.holds(consumer, lock) {
            true => Ok(lane),
            false => Err(EntityError::LockLost),
        }
    }

    /// Ends transaction `txn` here: a rollback drops its work; a commit applies it in this
    /// turn: every lock it settles is checked first, then its sends get their sequence
    /// numbers (all or none, as a batch send), then its settlements apply. When its
    /// settlements are not applied, those the client settled itself are abandoned: the client
    /// cannot settle them again, and JMS delivers a rolled-back receive again at once.
    ///
    /// # Errors
    /// Why nothing was applied: work in it was refused when staged (that refusal), a lock was
    /// lost, or the sends do not fit or are refused now;
    /// [`EntityError::Storage`] when a body could not be read (the entity must stop then).
    pub fn discharge(
        &mut self,
        now: i64,
        txn: TxnId,
        commit: bool,
        bodies: &mut dyn Bodies,
    ) -> Result<(), EntityError> {
        let staged = self.staging.take(txn);
        let checked = match commit {
            true => self.check_staged(&staged),
            false => Ok(()),
        };
        if !commit || checked.is_err() {
            self.abandon_client_settled(&staged.settles);
            return checked;
        }
        if !staged.transfers.is_empty() {
            self.transfer(now, staged.transfers)?;
        }
        self.schedule_reserved(now, staged.scheduled);
        if !staged.sends.is_empty() {
            self.enqueue(now, staged.sends)?;
        }
        for settle in staged.settles {
            let settled = self
                .lane(settle.lane)
                .and_then(|queue| queue.settle(settle.consumer, settle.lock, &settle.settlement));
            match (settled, &settle.settlement) {
                (Ok(()), Settlement::Abandon(properties) | Settlement::Defer(properties)) => {
                    self.set_properties(settle.lane, settle.lock.seq, properties, bodies)
                        .map_err(storage)?;
                }
                (Ok(()), _) => {}
                (Err(error), _) => {
                    tracing::error!(seq = settle.lock.seq, %error, "checked lock lost at commit")
                }
            }
        }
        self.move_dead_letters(bodies).map_err(storage)
    }
}
