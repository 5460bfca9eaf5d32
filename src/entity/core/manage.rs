//! Management operations (amqp-dialect.md §7.3) on one lane of the entity: peek, renew
//! locks, receive deferred messages, schedule and cancel, rules, resubmit, purge and batch
//! delete, dispositions by lock token and session state, with positions translated for a
//! partition.

use foldhash::{HashSet, HashSetExt};

use crate::entity::core::stored::storage;
use crate::entity::core::EntityCore;
use crate::entity::operation::{Answer, Operation, MAX_PEEK_BYTES};
use crate::entity::partition::Partition;
use crate::entity::terms::{ConsumerId, EntityError, LaneId, Settlement};
use crate::message;
use crate::store::Bodies;
use crate::wire;

impl EntityCore {
    /// Performs a management operation (amqp-dialect.md §7.3) on `lane`, with the numbers
    /// and tokens of the request and the answer as clients see them. `callers` says whether
    /// a consumer is a receiver of the caller's connection (a session's operations are its
    /// holder's alone); `bodies` is the entity's log.
    ///
    /// # Errors
    /// The refusal; [`EntityError::Storage`] when a body could not be read (the entity must
    /// stop then).
    pub fn manage(
        &mut self,
        now: i64,
        lane: LaneId,
        operation: Operation,
        callers: &dyn Fn(ConsumerId) -> bool,
        bodies: &mut dyn Bodies,
    ) -> Result<Answer, EntityError> {
        let partition = self.identity.partition;
        let next = match lane.is_transfer() {
            true => self.next_transfer(),
            false => self.next_seq(),
        };
        let oldest = match (partition, &operation) {
            (Partition::ALONE, _) => 0,
            (_, Operation::Peek { .. }) => self.lane(lane)?.oldest().unwrap_or(i64::MAX),
            _ => 0,
        };
        let Some(operation) = partition.to_positions(operation, next, oldest)? else {
            return Ok(Answer::Peeked(Vec::new()));
        };
        let result = self.manage_positions((now, lane), operation, (callers, bodies));
        partition.to_visible(result)
    }

    /// [`EntityCore::manage`], with sequence numbers and lock tokens as the lanes know them.
    fn manage_positions(
        &mut self,
        (now, lane): (i64, LaneId),
        operation: Operation,
        (callers, bodies): (&dyn Fn(ConsumerId) -> bool, &mut dyn Bodies),
    ) -> Result<Answer, EntityError> {
        if let Some(session) = operation.session() {
            self.check_session_holder(lane, session, callers)?;
        }
        // (A schedule is refused as a send is, in `send`.)
        if let Operation::ReceiveBySequence { .. } = &operation {
            self.check_receivable(lane)?;
        }
        match operation {
            Operation::Peek {
                from,
                count,
                session,
            } => {
                let peeked = self.lane(lane)?.peek(from, count, session.as_deref());
                let (mut messages, mut bytes) = (Vec::with_capacity(peeked.len()), 0);
                for (seq, stamp) in peeked {
                    if bytes >= MAX_PEEK_BYTES {
                        break;
                    }
                    let encoded = self.encoded(lane, seq, &stamp, bodies)?;
                    bytes += encoded.len();
                    messages.push(encoded);
                }
                Ok(Answer::Peeked(messages))
            }
            Operation::RenewLock { tokens } => {
                let queue = self.lane(lane)?;
                let expirations = tokens
                    .into_iter()
                    .map(|token| queue.renew_lock(token, now))
                    .collect::<Result<_, _>>()?;
                Ok(Answer::Renewed(expirations))
            }
            Operation::ReceiveBySequence {
                seqs,
                mode,
                session,
            } => {
                // All or nothing: a number asked for twice is taken once, and none is taken
                // unless every one can be.
                let mut seqs = seqs;
                let mut seen = HashSet::with_capacity(seqs.len());
                seqs.retain(|seq| seen.insert(*seq));
                let queue = self.lane(lane)?;
                for &seq in &seqs {
                    queue.check_deferred(seq, now, session.as_deref())?;
                }
                let mut messages = Vec::with_capacity(seqs.len());
                for seq in seqs {
                    let queue = self.lane(lane)?;
                    let delivery = queue.receive_deferred(seq, mode, now, session.as_deref())?;
                    let bytes = self.encoded(lane, seq, &delivery.stamp, bodies)?;
                    messages.push((delivery.lock_token.unwrap_or_default(), bytes));
                }
                Ok(Answer::Received(messages))
            }
            Operation::Schedule { .. } | Operation::CancelScheduled { .. }
                if lane != LaneId::MAIN =>
            {
                Err(not_schedulable())
            }
            Operation::Schedule { messages } => Ok(Answer::Scheduled(self.send(now, messages)?)),
            Operation::CancelScheduled { seqs } => {
                self.cancel_scheduled(&seqs)?;
                Ok(Answer::Done)
            }
            Operation::AddRule { rule } => {
                self.add_rule(lane, rule).map_err(|error| match error {
                    EntityError::RuleExists { rule, .. } => EntityError::RuleExists {
                        subscription: self.rule_owner(lane),
                        rule,
                    },
                    other => other,
                })?;
                Ok(Answer::Done)
            }
            Operation::ReplaceRule { rule } => {
                let replaced = self.replace_rule(lane, rule)?;
                Ok(Answer::Rules(vec![replaced]))
            }
            Operation::Resubmit { seq } => {
                if !self.lane(lane)?.is_unlocked(seq) {
                    return Err(EntityError::MessageNotFound(seq, "unlocked dead-lettered"));
                }
                let body = bodies.body(lane, seq).map_err(storage)?;
                let reasons = [
                    wire::dead_letter::REASON.to_owned(),
                    wire::dead_letter::DESCRIPTION.to_owned(),
                ];
                let body =
                    message::edit_application_properties(&body, &[], &reasons).unwrap_or(body);
                let arrival = message::inspect(body)
                    .map_err(|_| EntityError::MessageNotFound(seq, "readable dead-lettered"))?;
                let moved = self.resubmit(now, lane, seq, arrival)?;
                Ok(Answer::Moved(moved))
            }
            Operation::Purge => Ok(Answer::Purged(self.purge(lane)?)),
            Operation::BatchDelete {
                count,
                before_ms,
                session,
            } => Ok(Answer::Deleted(self.lane(lane)?.delete_enqueued_before(
                count,
                before_ms,
                session.as_deref(),
            ))),
            Operation::RemoveRule { name } => {
                self.remove_rule(lane, &name)?;
                Ok(Answer::Done)
            }
            Operation::EnumerateRules { skip, top } => {
                Ok(Answer::Rules(self.rules(lane, skip, top)?))
            }
            Operation::UpdateDisposition { tokens, settlement } => {
                for token in tokens {
                    let seq = self.lane(lane)?.settle_by_token(token, &settlement)?;
                    if let Settlement::Abandon(properties) | Settlement::Defer(properties) =
                        &settlement
                    {
                        self.set_properties(lane, seq, properties, bodies)
                            .map_err(storage)?;
                    }
                }
                self.move_dead_letters(bodies).map_err(storage)?;
                Ok(Answer::Done)
            }
            Operation::RenewSessionLock { session } => {
                let until = self.lane(lane)?.renew_session_lock(&session, now)?;
                Ok(Answer::SessionLockedUntil(until))
            }
            Operation::GetSessionState { session } => {
                let state = self.lane(lane)?.session_state(&session)?;
                Ok(Answer::SessionState(state))
            }
            Operation::SetSessionState { session, state } => {
                self.lane(lane)?.set_session_state(&session, state, now)?;
                Ok(Answer::Done)
            }
            Operation::GetMessageSessions {
                skip,
                top,
                updated_after,
            } => {
                let ids = self.lane(lane)?.session_ids(skip, top, updated_after);
                Ok(Answer::Sessions { skip, ids })
            }
        }
    }

    /// Refuses an operation on a session unless a receiver of the caller's connection
    /// (`callers`) holds it: another client cannot read or set its state, renew its lock or
    /// take its deferred messages.
    fn check_session_holder(
        &mut self,
        lane: LaneId,
        session: &str,
        callers: &dyn Fn(ConsumerId) -> bool,
    ) -> Result<(), EntityError> {
        let queue = self.lane(lane)?;
        if !queue.requires_session() {
            return Ok(());
        }
        match queue.session_holder(session) {
            Some(holder) if callers(holder) => Ok(()),
            _ => Err(EntityError::SessionLockLost(session.into())),
        }
    }
}

/// The refusal of scheduling (or cancelling) on a lane other than a queue's or topic's own.
pub(super) fn not_schedulable() -> EntityError {
    EntityError::NotAllowed(
        "messages are scheduled and cancelled on a queue or topic, not on a dead-letter queue \
         or subscription",
    )
}
