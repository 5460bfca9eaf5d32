//! Outcomes both ways: the client's disposition of a delivery the broker sent, mapped to what
//! its entity should do (complete, abandon, defer, dead-letter, release; amqp-dialect.md §6.1),
//! the broker's answers to it, and the broker's dispositions of the deliveries it received,
//! coalesced into ranges. The [`Ledger`] keeps the deliveries either side still owes.

use foldhash::HashMap;
use std::collections::{BTreeMap, VecDeque};

use fe2o3_amqp::frames::amqp::FrameBody;
use fe2o3_amqp::types::definitions::{self, ErrorCondition, Role};
use fe2o3_amqp::types::messaging::{Accepted, DeliveryState, Outcome, Rejected, Released};
use fe2o3_amqp::types::performatives::Disposition;
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Value};
use fe2o3_amqp::types::transaction::TransactionalState;

use crate::amqp::link;
use crate::amqp::outbox::Outbox;
use crate::entity::handle::{EntityError, LockRef, Properties, Settlement};
use crate::wire;

/// An outgoing delivery the client has not settled.
#[derive(Debug, Clone, Copy)]
struct Unsettled {
    link_id: u64,
    lock: LockRef,
}

/// What one link's entity is asked to apply for one client disposition.
#[derive(Debug)]
pub struct Settling {
    /// The link the deliveries went out on.
    pub link_id: u64,
    /// The messages and what to do with each.
    pub items: Vec<(LockRef, Settlement)>,
    /// The number the entity's answer comes back with ([`Ledger::on_settled`]).
    pub request: u64,
    /// The transaction the disposition named, if any: the settlements are staged in it.
    pub txn: Option<Binary>,
    /// Whether the client waits for the broker's disposition (it left these unsettled).
    pub awaited: bool,
}

/// The deliveries of one session still owed an outcome, both ways.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Outgoing deliveries awaiting the client's settlement, by delivery id.
    unsettled: BTreeMap<u32, Unsettled>,
    /// Settlements awaiting the entity's answer: delivery ids and the outcomes to echo.
    settling: HashMap<u64, Vec<(u32, DeliveryState)>>,
    next_request: u64,
    /// Accepted sends whose disposition is not written yet (coalesced into ranges).
    accepted: Vec<u32>,
    /// Sends staged in a transaction, by delivery id: their answer carries its id.
    staged: HashMap<u32, Binary>,
    /// Room for the ids one disposition names, kept between dispositions.
    ids: Vec<u32>,
    /// Deliveries settled in a transaction, the newest [`MAX_RETIRED`]: the client may settle
    /// them again, plainly, once the transaction was rolled back or refused (the message is
    /// still locked by its receiver; after a commit the lock is gone and so answered), and
    /// gets an answer as for any unsettled delivery.
    retired: BTreeMap<u32, Unsettled>,
    /// The order `retired` filled in, oldest first.
    retired_order: VecDeque<u32>,
}

/// How many deliveries settled in transactions a session remembers for a second settlement.
const MAX_RETIRED: usize = 1024;

impl Ledger {
    /// A locked delivery went out as `delivery_id` on `link_id`.
    pub fn sent(&mut self, delivery_id: u32, link_id: u64, lock: LockRef) {
        self.unsettled
            .insert(delivery_id, Unsettled { link_id, lock });
    }

    /// A client `disposition` of deliveries the broker sent: per link, what its entity is to
    /// apply. Every settlement is answered, also those the client settled itself: the
    /// connection counts the answers, so that a later detach or close can wait for them; the
    /// outcomes of those it left unsettled are echoed then ([`Ledger::on_settled`]).
    pub fn on_disposition(&mut self, disposition: Disposition) -> Vec<Settling> {
        if disposition.role != Role::Receiver {
            // The broker settles every delivery it receives at once; nothing to do.
            return Vec::new();
        }
        let first = disposition.first;
        let last = disposition.last.unwrap_or(first);
        let state = disposition
            .state
            .unwrap_or(DeliveryState::Released(Released {}));
        let Some(settlement) = settlement_of(&state) else {
            return Vec::new();
        };
        let txn = match &state {
            DeliveryState::TransactionalState(state) => Some(state.txn_id.clone()),
            _ => None,
        };
        let awaited = !disposition.settled;
        self.revive(first, last);
        let mut ids = std::mem::take(&mut self.ids);
        self.ids_between(first, last, &mut ids);
        // Per link, in the order the links first appear; almost always one link.
        let mut settlings: Vec<Settling> = Vec::new();
        let mut echoes: Vec<Vec<(u32, DeliveryState)>> = Vec::new();
        for &id in &ids {
            let Some(unsettled) = self.unsettled.get(&id).copied() else {
                continue;
            };
            if disposition.settled {
                self.unsettled.remove(&id);
                if txn.is_some() {
                    self.retire(id, unsettled);
                }
            }
            let at = match settlings
                .iter()
                .position(|s| s.link_id == unsettled.link_id)
            {
                Some(at) => at,
                None => {
                    settlings.push(Settling {
                        link_id: unsettled.link_id,
                        items: Vec::new(),
                        request: self.next_request,
                        txn: txn.clone(),
                        awaited,
                    });
                    self.next_request += 1;
                    if awaited {
                        echoes.push(Vec::new());
                    }
                    settlings.len() - 1
                }
            };
            settlings[at]
                .items
                .push((unsettled.lock, settlement.clone()));
            if awaited {
                echoes[at].push((id, state.clone()));
            }
        }
        ids.clear();
        self.ids = ids;
        for (settling, echoes) in settlings.iter().zip(echoes) {
            self.settling.insert(settling.request, echoes);
        }
        settlings
    }

    /// Deliveries from `first` to `last` settled before in a transaction are owed again: the
    /// client settles them anew.
    fn revive(&mut self, first: u32, last: u32) {
        if self.retired.is_empty() {
            return;
        }
        let revived: Vec<u32> = match first <= last {
            true => self
                .retired
                .range(first..=last)
                .map(|(id, _)| *id)
                .collect(),
            false => (self.retired.range(first..))
                .chain(self.retired.range(..=last))
                .map(|(id, _)| *id)
                .collect(),
        };
        for id in revived {
            if let Some(unsettled) = self.retired.remove(&id) {
                self.unsettled.insert(id, unsettled);
            }
        }
    }

    /// Remembers delivery `id`, settled in a transaction, for a second settlement; the oldest
    /// goes past [`MAX_RETIRED`].
    fn retire(&mut self, id: u32, unsettled: Unsettled) {
        if self.retired.insert(id, unsettled).is_none() {
            self.retired_order.push_back(id);
        }
        while self.retired_order.len() > MAX_RETIRED {
            if let Some(oldest) = self.retired_order.pop_front() {
                self.retired.remove(&oldest);
            }
        }
    }

    /// Fills `ids` with the ids from `first` to `last` (wrapping past `u32::MAX`) the client
    /// still owes; most dispositions name one.
    fn ids_between(&self, first: u32, last: u32, ids: &mut Vec<u32>) {
        let owed = |(id, _): (&u32, _)| *id;
        if first == last {
            ids.push(first);
        } else if first < last {
            ids.extend(self.unsettled.range(first..=last).map(owed));
        } else {
            let wrapped = self
                .unsettled
                .range(first..)
                .chain(self.unsettled.range(..=last));
            ids.extend(wrapped.map(owed));
        }
    }

    /// The entity applied the settlement numbered `request`: the outcomes the client left
    /// unsettled are confirmed (or rejected with the entity's error), in ranges.
    pub fn on_settled(
        &mut self,
        request: u64,
        results: Vec<Result<(), EntityError>>,
        out: &mut Outbox,
    ) {
        let Some(echoes) = self.settling.remove(&request) else {
            return;
        };
        let mut states: Vec<(u32, DeliveryState)> = Vec::with_capacity(echoes.len());
        for ((id, echo), result) in echoes.into_iter().zip(results) {
            let gone = self.unsettled.remove(&id);
            if let (Some(unsettled), DeliveryState::TransactionalState(_)) = (gone, &echo) {
                self.retire(id, unsettled);
            }
            let state = match (result, echo) {
                (Ok(()), echo) => confirmation(echo),
                (Err(error), echo) => {
                    let rejected = DeliveryState::Rejected(Rejected {
                        error: Some(entity_error(&error)),
                    });
                    match echo {
                        DeliveryState::TransactionalState(state) => {
                            transactional(state.txn_id, rejected)
                        }
                        _ => rejected,
                    }
                }
            };
            states.push((id, state));
        }
        write_ranges(Role::Sender, states, out);
    }

    /// A send the client left unsettled was staged in the transaction `txn` names.
    pub fn staged(&mut self, delivery_id: u32, txn: Binary) {
        self.staged.insert(delivery_id, txn);
    }

    /// The entity answered a send: a stored one's `accepted` waits for
    /// [`Ledger::flush_accepted`], a staged one's carries its transaction, a refused one is
    /// rejected with the entity's error.
    pub fn on_sent(&mut self, delivery_id: u32, result: Result<(), EntityError>, out: &mut Outbox) {
        let state = match (self.staged.remove(&delivery_id), result) {
            (None, Ok(())) => return self.accepted.push(delivery_id),
            (None, Err(error)) => {
                return out
                    .frames
                    .push(rejection(delivery_id, entity_error(&error)));
            }
            (Some(txn_id), Ok(())) => transactional(txn_id, DeliveryState::Accepted(Accepted {})),
            (Some(txn_id), Err(error)) => transactional(
                txn_id,
                DeliveryState::Rejected(Rejected {
                    error: Some(entity_error(&error)),
                }),
            ),
        };
        out.frames.push(settled_disposition(delivery_id, state));
    }

    /// A disposition whose settlements their transaction `txn_id` refused: each delivery the
    /// client left unsettled is rejected with `error`.
    pub fn refuse(
        &mut self,
        request: u64,
        txn_id: &Binary,
        error: &definitions::Error,
        out: &mut Outbox,
    ) {
        let Some(echoes) = self.settling.remove(&request) else {
            return;
        };
        let rejected = DeliveryState::Rejected(Rejected {
            error: Some(error.clone()),
        });
        let rejected = transactional(txn_id.clone(), rejected);
        let states = echoes
            .into_iter()
            .map(|(id, _)| {
                if let Some(unsettled) = self.unsettled.remove(&id) {
                    self.retire(id, unsettled);
                }
                (id, rejected.clone())
            })
            .collect();
        write_ranges(Role::Sender, states, out);
    }

    /// Writes the coalesced dispositions of accepted sends.
    pub fn flush_accepted(&mut self, out: &mut Outbox) {
        if self.accepted.is_empty() {
            return;
        }
        let states = std::mem::take(&mut self.accepted)
            .into_iter()
            .map(|id| (id, DeliveryState::Accepted(Accepted {})))
            .collect();
        write_ranges(Role::Receiver, states, out);
    }

    /// Whether the client still owes an outcome for `delivery_id`.
    #[cfg(test)]
    pub fn owes(&self, delivery_id: u32) -> bool {
        self.unsettled.contains_key(&delivery_id)
    }

    /// A link went: its deliveries are no longer owed an outcome (their locks expire).
    pub fn forget_link(&mut self, link_id: u64) {
        self.unsettled
            .retain(|_, unsettled| unsettled.link_id != link_id);
        self.retired
            .retain(|_, unsettled| unsettled.link_id != link_id);
    }
}

/// What the entity should do for a client outcome; `None` for a non-terminal state
/// (amqp-dialect.md §6.1; `delivery-failed` decides nothing).
pub fn settlement_of(state: &DeliveryState) -> Option<Settlement> {
    match state {
        DeliveryState::Accepted(_) => Some(Settlement::Complete),
        DeliveryState::Released(_) => Some(Settlement::Release),
        DeliveryState::Modified(modified) => {
            let properties = simple_properties(modified.message_annotations.as_ref());
            Some(match modified.undeliverable_here {
                Some(true) => Settlement::Defer(properties),
                _ => Settlement::Abandon(properties),
            })
        }
        DeliveryState::Rejected(rejected) => Some(dead_letter_of(rejected.error.as_ref())),
        DeliveryState::TransactionalState(TransactionalState {
            outcome: Some(outcome),
            ..
        }) => settlement_of(&match outcome.clone() {
            Outcome::Accepted(accepted) => DeliveryState::Accepted(accepted),
            Outcome::Rejected(rejected) => DeliveryState::Rejected(rejected),
            Outcome::Released(released) => DeliveryState::Released(released),
            Outcome::Modified(modified) => DeliveryState::Modified(modified),
            Outcome::Declared(_) => return None,
        }),
        _ => None,
    }
}

/// A `rejected` outcome as a dead-lettering: reason and description from the error's info,
/// falling back to its condition (unless it is the dead-letter marker) and description; the
/// other info entries become application properties.
fn dead_letter_of(error: Option<&definitions::Error>) -> Settlement {
    let Some(error) = error else {
        return Settlement::DeadLetter {
            reason: None,
            description: None,
            properties: Vec::new(),
        };
    };
    let mut properties = simple_properties(error.info.as_deref());
    let mut take = |key: &str| {
        let at = properties.iter().position(|(k, _)| k == key)?;
        match properties.remove(at).1 {
            SimpleValue::String(value) => Some(value),
            _ => None,
        }
    };
    let reason = take(wire::dead_letter::REASON).or_else(|| {
        let condition = condition_name(&error.condition);
        (condition != wire::dead_letter::CONDITION).then_some(condition)
    });
    let description = take(wire::dead_letter::DESCRIPTION).or_else(|| error.description.clone());
    Settlement::DeadLetter {
        reason,
        description,
        properties,
    }
}

/// The symbol of an error condition (`amqp:not-allowed`).
pub fn condition_name(condition: &ErrorCondition) -> String {
    serde_amqp::to_vec(condition)
        .ok()
        .and_then(|bytes| serde_amqp::from_slice::<Symbol>(&bytes).ok())
        .map_or_else(String::new, |symbol| symbol.as_str().to_string())
}

/// Map entries that are simple values, keyed by string (nulls and composites are skipped).
fn simple_properties(fields: Option<&definitions::Fields>) -> Properties {
    fields
        .into_iter()
        .flat_map(|fields| fields.iter())
        .filter(|(_, value)| !matches!(value, Value::Null))
        .filter_map(|(key, value)| {
            SimpleValue::try_from(value.clone())
                .ok()
                .map(|simple| (key.as_str().to_string(), simple))
        })
        .collect()
}

/// The outcome a settle-second confirmation carries: the client's own, except that a
/// dead-letter is confirmed with a bare `rejected` (the JavaScript SDK fails on an error there,
/// amqp-dialect.md §17).
fn confirmation(requested: DeliveryState) -> DeliveryState {
    match requested {
        DeliveryState::Rejected(_) => DeliveryState::Rejected(Rejected { error: None }),
        other => other,
    }
}

/// An outcome as the answer to work in the transaction `txn_id`: carried in a
/// `transactional-state` (AMQP 1.0 §4.4.4).
pub fn transactional(txn_id: Binary, state: DeliveryState) -> DeliveryState {
    let outcome = match state {
        DeliveryState::Accepted(accepted) => Outcome::Accepted(accepted),
        DeliveryState::Rejected(rejected) => Outcome::Rejected(rejected),
        DeliveryState::Released(released) => Outcome::Released(released),
        DeliveryState::Modified(modified) => Outcome::Modified(modified),
        other => return other,
    };
    DeliveryState::TransactionalState(TransactionalState {
        txn_id,
        outcome: Some(outcome),
    })
}

/// The settled `rejected` disposition of one received delivery.
pub fn rejection(delivery_id: u32, error: definitions::Error) -> FrameBody {
    settled_disposition(
        delivery_id,
        DeliveryState::Rejected(Rejected { error: Some(error) }),
    )
}

/// The broker's settled disposition of one delivery it received.
pub fn settled_disposition(delivery_id: u32, state: DeliveryState) -> FrameBody {
    FrameBody::Disposition(Disposition {
        role: Role::Receiver,
        first: delivery_id,
        last: None,
        settled: true,
        state: Some(state),
        batchable: false,
    })
}

/// The AMQP error a client sees for an entity's refusal.
pub fn entity_error(error: &EntityError) -> definitions::Error {
    link::custom_error(error.status().condition, error.to_string())
}

/// Writes settled dispositions, one per run of consecutive ids with the same state.
fn write_ranges(role: Role, mut states: Vec<(u32, DeliveryState)>, out: &mut Outbox) {
    states.sort_by_key(|(id, _)| *id);
    let mut runs: Vec<(u32, u32, DeliveryState)> = Vec::new();
    for (id, state) in states {
        match runs.last_mut() {
            Some((_, last, run_state)) if last.wrapping_add(1) == id && *run_state == state => {
                *last = id
            }
            _ => runs.push((id, id, state)),
        }
    }
    for (first, last, state) in runs {
        out.frames.push(FrameBody::Disposition(Disposition {
            role: role.clone(),
            first,
            last: (last != first).then_some(last),
            settled: true,
            state: Some(state),
            batchable: false,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::types::definitions::Fields;
    use fe2o3_amqp::types::messaging::Modified;

    fn lock(seq: i64) -> LockRef {
        LockRef {
            seq,
            token: uuid::Uuid::from_u128(seq as u128),
        }
    }

    fn disposition(
        first: u32,
        last: Option<u32>,
        settled: bool,
        state: DeliveryState,
    ) -> Disposition {
        Disposition {
            role: Role::Receiver,
            first,
            last,
            settled,
            state: Some(state),
            batchable: false,
        }
    }

    fn rejected(condition: &str, info: &[(&str, &str)]) -> DeliveryState {
        let mut fields = Fields::new();
        for (key, value) in info {
            fields.insert(Symbol::from(*key), Value::String((*value).to_owned()));
        }
        DeliveryState::Rejected(Rejected {
            error: Some(definitions::Error::new(
                ErrorCondition::Custom(Symbol::from(condition)),
                Some("described".to_owned()),
                Some(fields),
            )),
        })
    }

    /// Each written disposition as (first, last, state kind).
    fn written(out: &Outbox) -> Vec<(u32, Option<u32>, String)> {
        out.frames
            .iter()
            .map(|frame| match frame {
                FrameBody::Disposition(d) => {
                    let kind = format!("{:?}", d.state.as_ref().unwrap());
                    let kind = kind.split('(').next().unwrap().to_owned();
                    (d.first, d.last, kind)
                }
                other => panic!("not a disposition: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn client_outcomes_map_to_settlements() {
        assert_eq!(
            settlement_of(&DeliveryState::Accepted(Accepted {})),
            Some(Settlement::Complete)
        );
        assert_eq!(
            settlement_of(&DeliveryState::Released(Released {})),
            Some(Settlement::Release)
        );
        let modified = |undeliverable_here| {
            DeliveryState::Modified(Modified {
                delivery_failed: Some(true),
                undeliverable_here,
                message_annotations: None,
            })
        };
        assert_eq!(
            settlement_of(&modified(Some(true))),
            Some(Settlement::Defer(Vec::new()))
        );
        assert_eq!(
            settlement_of(&modified(None)),
            Some(Settlement::Abandon(Vec::new()))
        );
        assert_eq!(
            settlement_of(&DeliveryState::Received(
                fe2o3_amqp::types::messaging::Received {
                    section_number: 0,
                    section_offset: 0
                }
            )),
            None
        );
    }

    #[test]
    fn a_rejection_dead_letters_with_the_reason_and_description_it_carries() {
        let state = rejected(
            wire::dead_letter::CONDITION,
            &[
                (wire::dead_letter::REASON, "bad"),
                (wire::dead_letter::DESCRIPTION, "very bad"),
                ("extra", "kept"),
            ],
        );
        let Some(Settlement::DeadLetter {
            reason,
            description,
            properties,
        }) = settlement_of(&state)
        else {
            panic!("not a dead-letter");
        };
        assert_eq!(reason.as_deref(), Some("bad"));
        assert_eq!(description.as_deref(), Some("very bad"));
        assert_eq!(
            properties,
            vec![("extra".to_owned(), SimpleValue::String("kept".into()))]
        );
        // Without the info entries: the condition is the reason (unless it is the marker), the
        // error's description the description.
        let Some(Settlement::DeadLetter {
            reason,
            description,
            ..
        }) = settlement_of(&rejected("app:broken", &[]))
        else {
            panic!("not a dead-letter");
        };
        assert_eq!(
            (reason.as_deref(), description.as_deref()),
            (Some("app:broken"), Some("described"))
        );
        let Some(Settlement::DeadLetter { reason, .. }) =
            settlement_of(&rejected(wire::dead_letter::CONDITION, &[]))
        else {
            panic!("not a dead-letter");
        };
        assert_eq!(reason, None);
    }

    #[test]
    fn a_range_settles_the_unsettled_deliveries_in_it_per_link() {
        let mut ledger = Ledger::default();
        for (id, link) in [(1, 10), (2, 10), (3, 20), (5, 10)] {
            ledger.sent(id, link, lock(i64::from(id)));
        }
        let accepted = DeliveryState::Accepted(Accepted {});
        let settling = ledger.on_disposition(disposition(1, Some(4), true, accepted.clone()));
        let per_link: Vec<(u64, Vec<i64>)> = settling
            .iter()
            .map(|s| {
                (
                    s.link_id,
                    s.items.iter().map(|(lock, _)| lock.seq).collect(),
                )
            })
            .collect();
        assert_eq!(per_link, vec![(10, vec![1, 2]), (20, vec![3])]);
        assert_ne!(settling[0].request, settling[1].request);
        // Settled by the client: gone from the ledger, nothing echoed later.
        assert!(ledger
            .on_disposition(disposition(1, Some(4), true, accepted))
            .is_empty());
        let mut out = Outbox::default();
        ledger.on_settled(settling[0].request, vec![Ok(()), Ok(())], &mut out);
        assert!(out.frames.is_empty());
    }

    #[test]
    fn a_range_may_wrap_past_the_largest_delivery_id() {
        let mut ledger = Ledger::default();
        for id in [u32::MAX - 1, u32::MAX, 0, 1, 7] {
            ledger.sent(id, 1, lock(i64::from(id)));
        }
        let settling = ledger.on_disposition(disposition(
            u32::MAX - 1,
            Some(1),
            true,
            DeliveryState::Accepted(Accepted {}),
        ));
        assert_eq!(settling.len(), 1);
        assert_eq!(settling[0].items.len(), 4);
    }

    #[test]
    fn unsettled_outcomes_are_confirmed_in_ranges_once_the_entity_applied_them() {
        let mut ledger = Ledger::default();
        for id in 1..=4 {
            ledger.sent(id, 1, lock(i64::from(id)));
        }
        let settling = ledger.on_disposition(disposition(1, Some(4), false, rejected("x", &[])));
        let results = vec![Ok(()), Ok(()), Err(EntityError::LockLost), Ok(())];
        let mut out = Outbox::default();
        ledger.on_settled(settling[0].request, results, &mut out);
        assert_eq!(
            written(&out),
            vec![
                (1, Some(2), "Rejected".to_owned()),
                (3, None, "Rejected".to_owned()),
                (4, None, "Rejected".to_owned()),
            ]
        );
        // A confirmed dead-letter is a bare `rejected`; a lost lock carries its error.
        let FrameBody::Disposition(first) = &out.frames[0] else {
            unreachable!()
        };
        assert_eq!(
            first.state,
            Some(DeliveryState::Rejected(Rejected { error: None }))
        );
        let FrameBody::Disposition(lost) = &out.frames[1] else {
            unreachable!()
        };
        let Some(DeliveryState::Rejected(Rejected { error: Some(error) })) = &lost.state else {
            panic!("no error on a lost lock");
        };
        assert_eq!(
            error.condition,
            ErrorCondition::Custom(Symbol::from(wire::condition::MESSAGE_LOCK_LOST))
        );
        // Answered once: a second answer for the same request writes nothing.
        let mut again = Outbox::default();
        ledger.on_settled(settling[0].request, Vec::new(), &mut again);
        assert!(again.frames.is_empty());
    }

    #[test]
    fn deliveries_settled_in_transactions_can_be_settled_again_the_newest_so_many() {
        let mut ledger = Ledger::default();
        let last = MAX_RETIRED as u32;
        for id in 0..=last {
            ledger.sent(id, 1, lock(i64::from(id)));
        }
        let in_txn = transactional(
            Binary::from(vec![1; 8]),
            DeliveryState::Accepted(Accepted {}),
        );
        let settling = ledger.on_disposition(disposition(0, Some(last), true, in_txn));
        assert_eq!(settling[0].items.len(), MAX_RETIRED + 1);
        assert!(!ledger.owes(1), "settled by the client");
        let accepted = || DeliveryState::Accepted(Accepted {});
        let oldest = ledger.on_disposition(disposition(0, None, false, accepted()));
        assert!(oldest.is_empty(), "the oldest is forgotten past the bound");
        let again = ledger.on_disposition(disposition(1, Some(2), false, accepted()));
        assert_eq!(again[0].items.len(), 2, "settled again");
        assert!(ledger.owes(1) && ledger.owes(2));
        ledger.forget_link(1);
        let gone = ledger.on_disposition(disposition(3, None, false, accepted()));
        assert!(gone.is_empty(), "a gone link's deliveries are forgotten");
    }

    #[test]
    fn accepted_sends_are_written_in_runs_and_a_gone_link_is_forgotten() {
        let mut ledger = Ledger::default();
        for id in [3, 1, 2, 5] {
            ledger.on_sent(id, Ok(()), &mut Outbox::default());
        }
        let mut out = Outbox::default();
        ledger.flush_accepted(&mut out);
        ledger.flush_accepted(&mut out);
        assert_eq!(
            written(&out),
            vec![
                (1, Some(3), "Accepted".to_owned()),
                (5, None, "Accepted".to_owned())
            ]
        );
        ledger.sent(1, 10, lock(1));
        ledger.forget_link(10);
        let state = DeliveryState::Accepted(Accepted {});
        assert!(ledger
            .on_disposition(disposition(1, None, true, state))
            .is_empty());
    }
}
