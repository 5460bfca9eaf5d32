//! The transaction coordinator (AMQP 1.0 §4.2): the control link's `declare` and `discharge`,
//! answered from the connection's [`Transactions`] and, for a commit or rollback, by the via
//! entity's actor.

use bytes::Bytes;
use fe2o3_amqp::frames::amqp::FrameBody;
use fe2o3_amqp::types::definitions::AmqpError;
use fe2o3_amqp::types::messaging::{Accepted, AmqpValue, DeliveryState};
use fe2o3_amqp::types::transaction::{Declare, Declared, Discharge};

use crate::amqp::link::{self, Whole};
use crate::amqp::outbox::Outbox;
use crate::amqp::outcome;
use crate::amqp::transactions::{self, wire_id, Discharging, Transactions};
use crate::encoding;
use crate::entity::handle::{EntityError, EventSink, Ticket};
use crate::message;
use crate::metrics;

/// A control message on the coordinator link.
#[derive(Debug)]
enum Control {
    Declare,
    Discharge(Discharge),
}

/// Reads the `amqp-value` of a control message: a `declare` or a `discharge`.
fn decode(bytes: &Bytes) -> Result<Control, String> {
    let sections = message::scan_sections(bytes).map_err(|error| error.to_string())?;
    let value = sections
        .iter()
        .find(|section| section.code == 0x77)
        .ok_or("a control message holds an amqp-value")?;
    let raw = &bytes[value.range.clone()];
    encoding::check_value(raw, 0).map_err(|error| error.to_string())?;
    if let Ok(AmqpValue(Declare { global_id: None })) = serde_amqp::from_slice(raw) {
        return Ok(Control::Declare);
    }
    if let Ok(AmqpValue(discharge)) = serde_amqp::from_slice::<AmqpValue<Discharge>>(raw) {
        return Ok(Control::Discharge(discharge));
    }
    Err("the amqp-value is neither a declare (without global-id) nor a discharge".to_owned())
}

/// A whole message on the coordinator link `link_id`: a `declare` is answered `declared` at
/// once, a `discharge` once the via entity committed or rolled back (or at once when the
/// transaction staged nothing); anything else is rejected.
pub fn control(
    whole: Whole,
    link_id: u64,
    transactions: &mut Transactions,
    now_ms: i64,
    events: &EventSink,
    out: &mut Outbox,
) {
    let delivery_id = whole.delivery_id;
    let answer = match decode(&whole.bytes) {
        Err(why) => Err(link::amqp_error(AmqpError::DecodeError, why)),
        Ok(Control::Declare) => transactions.declare(link_id, now_ms).map(|id| {
            tracing::debug!(txn = id, "transaction declared");
            Some(DeliveryState::Declared(Declared {
                txn_id: wire_id(id),
            }))
        }),
        Ok(Control::Discharge(discharge)) => {
            let ticket = Ticket {
                link: link_id,
                request: u64::from(delivery_id),
            };
            let fail = discharge.fail.unwrap_or(false);
            let reply = (ticket, events.clone());
            match transactions.discharge(&discharge.txn_id, fail, reply, now_ms) {
                Ok(Discharging::Done(rollback)) => {
                    out.posts.extend(rollback);
                    Ok(Some(DeliveryState::Accepted(Accepted {})))
                }
                Ok(Discharging::Commit(via, command)) => {
                    out.posts.push((via, command));
                    Ok(None)
                }
                Ok(Discharging::TimedOut(rollback)) => {
                    out.posts.extend(rollback);
                    Err(transactions::timed_out())
                }
                Ok(Discharging::Doomed(refusal, rollback)) => {
                    out.posts.extend(rollback);
                    Err(refusal)
                }
                Err(error) => Err(error),
            }
        }
    };
    match answer {
        Ok(Some(state)) => out
            .frames
            .push(outcome::settled_disposition(delivery_id, state)),
        Ok(None) => {}
        Err(error) => {
            tracing::debug!(condition = ?error.condition, "control message refused");
            out.frames.push(outcome::rejection(delivery_id, error));
        }
    }
}

/// The via entity answered a commit: `accepted`, or rejected with `amqp:transaction:rollback`
/// and why the commit failed.
pub fn on_discharged(ticket: Ticket, result: Result<(), EntityError>) -> Option<FrameBody> {
    let delivery_id = u32::try_from(ticket.request).ok()?;
    let metrics = metrics::broker();
    Some(match result {
        Ok(()) => {
            metrics.transactions_committed.inc();
            outcome::settled_disposition(delivery_id, DeliveryState::Accepted(Accepted {}))
        }
        Err(error) => {
            metrics.transactions_rolled_back.inc();
            outcome::rejection(delivery_id, transactions::rolled_back(error))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::fixtures;
    use std::time::Duration;

    #[test]
    fn control_messages_are_declares_or_discharges_and_nothing_else() {
        let mut transactions = Transactions::new(Duration::from_secs(60), 1 << 20);
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        let whole = |bytes: Vec<u8>| Whole {
            delivery_id: 3,
            settled: false,
            message_format: 0,
            bytes: Bytes::from(bytes),
            txn: None,
        };
        let declare = serde_amqp::to_vec(&AmqpValue(Declare { global_id: None })).unwrap();
        let mut out = Outbox::default();
        control(whole(declare), 1, &mut transactions, 0, &events, &mut out);
        let [FrameBody::Disposition(declared)] = &out.frames[..] else {
            panic!("{:?}", out.frames);
        };
        let Some(DeliveryState::Declared(Declared { txn_id })) = &declared.state else {
            panic!("not declared: {declared:?}");
        };
        let discharge = Discharge {
            txn_id: txn_id.clone(),
            fail: Some(true),
        };
        let discharge = serde_amqp::to_vec(&AmqpValue(discharge)).unwrap();
        let mut out = Outbox::default();
        control(whole(discharge), 1, &mut transactions, 0, &events, &mut out);
        assert!(matches!(
            &out.frames[..],
            [FrameBody::Disposition(d)] if matches!(d.state, Some(DeliveryState::Accepted(_)))
        ));
        let mut out = Outbox::default();
        control(
            whole(fixtures::message(b"hello")),
            1,
            &mut transactions,
            0,
            &events,
            &mut out,
        );
        assert!(matches!(
            &out.frames[..],
            [FrameBody::Disposition(d)] if matches!(d.state, Some(DeliveryState::Rejected(_)))
        ));
    }
}
