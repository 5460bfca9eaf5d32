//! Client senders: a delivery reassembled from its transfer frames within the connection's
//! budget, the link credit topped up, oversized and malformed messages refused, and a whole
//! message inspected and sent to its entity (design.md §3, Send).

use bytes::{Bytes, BytesMut};
use fe2o3_amqp::types::definitions::{self, AmqpError, LinkError};
use fe2o3_amqp::types::messaging::{DeliveryState, Rejected};
use fe2o3_amqp::types::performatives::{Flow, Transfer};
use fe2o3_amqp::types::primitives::Binary;

use crate::amqp::link::{self, Incoming, Partial, ReassemblyBudget, Whole, SENDER_CREDIT};
use crate::amqp::outbox::{Fault, Outbox};
use crate::amqp::outcome;
use crate::amqp::transactions::Transactions;
use crate::clock;
use crate::entity::handle::{Command, EntityHandle, EventSink, Ticket, Work};
use crate::message::{self, BATCH_MESSAGE_FORMAT};
use crate::node::Node;

/// Longest delivery tag, in bytes (AMQP 1.0 §2.8.7).
pub const MAX_DELIVERY_TAG: usize = 32;

/// What one transfer frame made of its delivery.
#[derive(Debug)]
pub enum Step {
    /// Nothing more to do now: more frames follow, the delivery was aborted, or it was
    /// rejected (too large).
    Waiting,
    /// The link must go, with this error (a bad delivery tag, or a pre-settled delivery that
    /// cannot be rejected).
    Detach(definitions::Error),
    /// The delivery is whole.
    Whole(Whole),
    /// A request to a request/response node was larger than the link takes: only its first
    /// [`REQUEST_HEAD`] bytes (at most the link's limit) are kept (enough for its properties, to answer it), with the
    /// error it is refused with.
    Oversized(Whole, definitions::Error),
}

/// How much of an oversized request to a request/response node is kept: its leading
/// sections (properties, application properties) name the request and its reply link, so it
/// can be answered with a refusal; a client waiting for a response ignores a rejected
/// delivery (the JavaScript SDK's management client does).
pub const REQUEST_HEAD: usize = 8 * 1024;

/// Takes one transfer frame of a client sender: reassembles the delivery within the
/// connection's `budget`, counts it against the link credit (topping the credit up with a
/// flow on top of `base` at half), and refuses an oversized one once its last frame came.
///
/// # Errors
/// [`Fault::Connection`] when a delivery starts without a delivery id, or the unfinished
/// deliveries of the connection outgrow the budget.
pub fn receive(
    incoming: &mut Incoming,
    transfer: Transfer,
    payload: Bytes,
    base: &Flow,
    local_handle: u32,
    budget: &ReassemblyBudget,
    out: &mut Outbox,
) -> Result<Step, Fault> {
    if transfer.aborted {
        incoming.partial = None;
        return Ok(Step::Waiting);
    }
    let mut partial = match incoming.partial.take() {
        Some(partial) => partial,
        None if transfer
            .delivery_tag
            .as_ref()
            .is_some_and(|tag| tag.len() > MAX_DELIVERY_TAG) =>
        {
            return Ok(Step::Detach(link::amqp_error(
                AmqpError::InvalidField,
                format!("a delivery tag holds at most {MAX_DELIVERY_TAG} bytes"),
            )));
        }
        None => Partial {
            delivery_id: transfer.delivery_id.ok_or_else(|| {
                Fault::Connection(link::amqp_error(
                    AmqpError::InvalidField,
                    "first transfer frame of a delivery without delivery-id",
                ))
            })?,
            settled: false,
            message_format: transfer.message_format.unwrap_or(0),
            received: 0,
            bytes: BytesMut::new(),
            charge: budget.charge(),
            txn: None,
        },
    };
    partial.settled |= transfer.settled.unwrap_or(false);
    if let Some(DeliveryState::TransactionalState(state)) = transfer.state {
        partial.txn = Some(state.txn_id);
    }
    partial.received += payload.len() as u64;
    let oversized = partial.received > incoming.max_message_size;
    let head = match incoming.node {
        // No more than a whole request may hold: the budget is counted in those.
        Node::Cbs | Node::Management(..) => {
            REQUEST_HEAD.min(usize::try_from(incoming.max_message_size).unwrap_or(usize::MAX))
        }
        Node::Entity(..) | Node::Coordinator => 0,
    };
    if oversized {
        // Keep reading the delivery's frames, but stop keeping its bytes beyond its head.
        keep_head(&mut partial, &payload, head);
    }
    if transfer.more {
        if !oversized {
            if !partial.charge.add(payload.len() as u64) {
                return Err(Fault::Connection(link::amqp_error(
                    AmqpError::ResourceLimitExceeded,
                    format!(
                        "unfinished deliveries on this connection hold more than {} bytes",
                        budget.limit()
                    ),
                )));
            }
            partial.bytes.extend_from_slice(&payload);
        }
        incoming.partial = Some(partial);
        return Ok(Step::Waiting);
    }
    let bytes = if oversized {
        std::mem::take(&mut partial.bytes).freeze()
    } else if partial.bytes.is_empty() {
        payload
    } else {
        partial.bytes.extend_from_slice(&payload);
        std::mem::take(&mut partial.bytes).freeze()
    };
    incoming.delivery_count = incoming.delivery_count.wrapping_add(1);
    incoming.credit = incoming.credit.saturating_sub(1);
    if incoming.credit < SENDER_CREDIT / 2 {
        incoming.credit = SENDER_CREDIT;
        let count = incoming.delivery_count;
        out.frames
            .push(link::flow(base, local_handle, count, SENDER_CREDIT, false));
    }
    if oversized {
        let error = link::amqp_error(
            LinkError::MessageSizeExceeded,
            format!(
                "the message of {} bytes exceeds the maximum message size of {} bytes",
                partial.received, incoming.max_message_size
            ),
        );
        if head > 0 {
            let whole = Whole {
                delivery_id: partial.delivery_id,
                settled: partial.settled,
                message_format: partial.message_format,
                bytes,
                txn: partial.txn,
            };
            return Ok(Step::Oversized(whole, error));
        }
        // A pre-settled one cannot be rejected: its link is detached, so the sender learns at
        // once.
        if partial.settled {
            return Ok(Step::Detach(error));
        }
        out.frames
            .push(outcome::rejection(partial.delivery_id, error));
        return Ok(Step::Waiting);
    }
    Ok(Step::Whole(Whole {
        delivery_id: partial.delivery_id,
        settled: partial.settled,
        message_format: partial.message_format,
        bytes,
        txn: partial.txn,
    }))
}

/// Keeps no more than the first `head` bytes of an oversized delivery, taking them from
/// `payload` while it has fewer, charged to the connection's budget (nothing is kept when the
/// budget has no room).
fn keep_head(partial: &mut Partial, payload: &[u8], head: usize) {
    let room = head.saturating_sub(partial.bytes.len());
    partial
        .bytes
        .extend_from_slice(&payload[..room.min(payload.len())]);
    partial.bytes.truncate(head);
    partial.charge.release();
    if !partial.charge.add(partial.bytes.len() as u64) {
        partial.bytes = BytesMut::new();
    }
}

/// Inspects a whole delivery (a Service Bus batch is unpacked; a topic's messages get their
/// properties decoded for its rules) and posts it to `entity`, with a reply unless the client
/// settled it: sent, or staged in the transaction it names (at `via`, when the link sends
/// through another entity, as a transfer to `entity`). One malformed message (or one its
/// transaction refuses) costs only itself: it is rejected and the link stays. Returns the
/// transaction whose outcome the answer is to carry, if any.
///
/// # Errors
/// The error to detach the link with when a refused message was pre-settled (it cannot be
/// rejected).
pub fn send(
    (entity, via): (EntityHandle, Option<EntityHandle>),
    whole: Whole,
    link_id: u64,
    context: (&EventSink, &mut Transactions),
    out: &mut Outbox,
) -> Result<Option<Binary>, definitions::Error> {
    let (events, transactions) = context;
    let bytes = whole.bytes.len() as u64;
    let mut inspected = if whole.message_format == BATCH_MESSAGE_FORMAT {
        message::unpack_batch(&whole.bytes)
    } else {
        message::inspect(whole.bytes).map(|arrival| vec![arrival])
    };
    if entity.rules_read_messages() {
        // A topic's rules read the message's properties: decoded here, not in its actor.
        inspected = inspected.and_then(|mut arrivals| {
            for arrival in &mut arrivals {
                arrival.view = Some(Box::new(message::view(&arrival.bytes)?));
            }
            Ok(arrivals)
        });
    }
    let staged = inspected
        .map_err(|error| {
            link::amqp_error(
                AmqpError::DecodeError,
                format!("delivery {}: {error}", whole.delivery_id),
            )
        })
        .and_then(|messages| {
            let txn = match &whole.txn {
                Some(txn) => {
                    let work = (messages.len(), bytes);
                    let at = via.as_ref().unwrap_or(&entity);
                    Some(transactions.enlist(txn, at, work, clock::now_ms())?)
                }
                None => None,
            };
            Ok((messages, txn))
        });
    let (messages, txn) = match staged {
        Ok(staged) => staged,
        Err(error) => {
            tracing::info!(description = ?error.description, "message refused");
            if let Some(txn) = &whole.txn {
                transactions.doom(txn, &error);
            }
            if whole.settled {
                return Err(error);
            }
            let rejected = DeliveryState::Rejected(Rejected { error: Some(error) });
            let state = match whole.txn {
                Some(txn) => outcome::transactional(txn, rejected),
                None => rejected,
            };
            out.frames
                .push(outcome::settled_disposition(whole.delivery_id, state));
            return Ok(None);
        }
    };
    let ticket = (!whole.settled).then_some(Ticket {
        link: link_id,
        request: u64::from(whole.delivery_id),
    });
    let Some(txn) = txn else {
        let command = Command::send(messages, ticket, events.clone());
        out.posts.push((entity, command));
        return Ok(None);
    };
    let reply = ticket.map(|ticket| (ticket, events.clone()));
    let (to, work) = match via {
        None => (entity, Work::Send(messages)),
        Some(via) => {
            let destination = entity.name().to_owned();
            let work = Work::Transfer {
                destination,
                messages,
            };
            (via, work)
        }
    };
    let command = Command::Stage { txn, work, reply };
    out.posts.push((to, command));
    Ok(whole.txn.filter(|_| !whole.settled))
}

/// Applies a client `flow` to a sender link (its delivery count). Returns the credit state to
/// echo, when asked.
pub fn on_flow(incoming: &mut Incoming, flow: &Flow) -> Option<(u32, u32)> {
    if let Some(count) = flow.delivery_count {
        incoming.delivery_count = count;
    }
    flow.echo
        .then_some((incoming.delivery_count, incoming.credit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp::frames::amqp::FrameBody;
    use fe2o3_amqp::types::definitions::{DeliveryTag, ErrorCondition, Handle};
    use fe2o3_amqp::types::messaging::DeliveryState;

    use std::time::Duration;

    use fe2o3_amqp::types::messaging::Outcome;
    use fe2o3_amqp::types::transaction::{TransactionError, TransactionalState};

    use crate::amqp::fixtures::{self, entity};
    use crate::amqp::outbound;
    use crate::amqp::transactions;
    use crate::entity::handle::Sending;
    use crate::node::Node;

    fn incoming(max_message_size: u64) -> Incoming {
        Incoming {
            node: Node::Cbs,
            via: None,
            delivery_count: 0,
            credit: SENDER_CREDIT,
            max_message_size,
            partial: None,
        }
    }

    /// A client's transfer frame: the first of a delivery names it, the others do not.
    fn frame(delivery_id: Option<u32>, more: bool) -> Transfer {
        let id = delivery_id.unwrap_or_default();
        let mut transfer = outbound::transfer(0, id, id.to_be_bytes().to_vec(), false);
        if delivery_id.is_none() {
            (transfer.delivery_id, transfer.delivery_tag) = (None, None);
            (transfer.message_format, transfer.settled) = (None, None);
        }
        transfer.more = more;
        transfer
    }

    fn take(
        link: &mut Incoming,
        transfer: Transfer,
        payload: &'static [u8],
        budget: &ReassemblyBudget,
        out: &mut Outbox,
    ) -> Result<Step, Fault> {
        let base = fixtures::flow(None, 8192, 0, 0);
        receive(
            link,
            transfer,
            Bytes::from_static(payload),
            &base,
            7,
            budget,
            out,
        )
    }

    /// Whether nothing of the budget is held: all of it can still be charged.
    fn budget_free(budget: &ReassemblyBudget) -> bool {
        budget.charge().add(budget.limit())
    }

    /// The condition a rejecting disposition carries (in a transaction's state or not).
    fn condition(frame: &FrameBody) -> ErrorCondition {
        match frame {
            FrameBody::Disposition(disposition) => match &disposition.state {
                Some(DeliveryState::Rejected(rejected))
                | Some(DeliveryState::TransactionalState(TransactionalState {
                    outcome: Some(Outcome::Rejected(rejected)),
                    ..
                })) => rejected.error.clone().expect("an error").condition,
                other => panic!("not rejected: {other:?}"),
            },
            other => panic!("not a disposition: {other:?}"),
        }
    }

    #[test]
    fn a_delivery_in_three_frames_is_whole_after_its_last_and_gives_its_budget_back() {
        let budget = ReassemblyBudget::new(1 << 20);
        let (mut link, mut out) = (incoming(1 << 20), Outbox::default());
        let first = take(&mut link, frame(Some(4), true), b"ab", &budget, &mut out).unwrap();
        assert!(matches!(first, Step::Waiting));
        assert!(!budget_free(&budget), "the unfinished delivery is charged");
        let second = take(&mut link, frame(None, true), b"cd", &budget, &mut out).unwrap();
        assert!(matches!(second, Step::Waiting));
        let Step::Whole(whole) =
            take(&mut link, frame(None, false), b"e", &budget, &mut out).unwrap()
        else {
            panic!("not whole");
        };
        assert_eq!((whole.delivery_id, &whole.bytes[..]), (4, &b"abcde"[..]));
        assert!(budget_free(&budget));
        assert_eq!((link.delivery_count, link.credit), (1, SENDER_CREDIT - 1));
        assert!(
            out.frames.is_empty(),
            "no flow before half the credit is used"
        );
    }

    #[test]
    fn an_aborted_delivery_is_dropped_and_the_next_one_starts_afresh() {
        let budget = ReassemblyBudget::new(1 << 20);
        let (mut link, mut out) = (incoming(1 << 20), Outbox::default());
        take(&mut link, frame(Some(1), true), b"ab", &budget, &mut out).unwrap();
        let mut abort = frame(None, false);
        abort.aborted = true;
        assert!(matches!(
            take(&mut link, abort, b"", &budget, &mut out).unwrap(),
            Step::Waiting
        ));
        assert!(link.partial.is_none() && budget_free(&budget));
        let next = take(&mut link, frame(Some(2), false), b"xy", &budget, &mut out).unwrap();
        assert!(matches!(next, Step::Whole(Whole { delivery_id: 2, .. })));
    }

    #[test]
    fn a_delivery_without_an_id_or_beyond_the_budget_ends_the_connection() {
        let budget = ReassemblyBudget::new(3);
        let (mut link, mut out) = (incoming(1 << 20), Outbox::default());
        let no_id = take(&mut link, frame(None, false), b"a", &budget, &mut out);
        assert!(matches!(no_id, Err(Fault::Connection(_))));
        take(&mut link, frame(Some(1), true), b"ab", &budget, &mut out).unwrap();
        let over = take(&mut link, frame(None, true), b"cd", &budget, &mut out);
        assert!(matches!(over, Err(Fault::Connection(_))));
    }

    #[test]
    fn a_delivery_tag_longer_than_32_bytes_detaches_the_link() {
        let budget = ReassemblyBudget::new(1 << 20);
        let (mut link, mut out) = (incoming(1 << 20), Outbox::default());
        let mut long = frame(Some(1), false);
        long.delivery_tag = Some(DeliveryTag::from(vec![0; MAX_DELIVERY_TAG + 1]));
        let step = take(&mut link, long, b"a", &budget, &mut out).unwrap();
        assert!(
            matches!(step, Step::Detach(error) if error.condition == AmqpError::InvalidField.into())
        );
    }

    #[test]
    fn an_oversized_delivery_is_read_to_its_end_then_rejected_or_its_link_detached() {
        let budget = ReassemblyBudget::new(1 << 20);
        let (mut link, mut out) = (incoming(5), Outbox::default());
        link.node = Node::Entity(entity(false), crate::entity::handle::LaneId::MAIN);
        take(&mut link, frame(Some(1), true), b"abcd", &budget, &mut out).unwrap();
        assert!(!budget_free(&budget));
        take(&mut link, frame(None, true), b"ef", &budget, &mut out).unwrap();
        assert!(
            budget_free(&budget),
            "past the limit, the bytes are not kept"
        );
        let last = take(&mut link, frame(None, false), b"g", &budget, &mut out).unwrap();
        assert!(matches!(last, Step::Waiting));
        assert_eq!(out.frames.len(), 1);
        assert_eq!(
            condition(&out.frames[0]),
            LinkError::MessageSizeExceeded.into()
        );
        let mut settled = frame(Some(2), false);
        settled.settled = Some(true);
        let step = take(&mut link, settled, b"abcdef", &budget, &mut out).unwrap();
        assert!(
            matches!(step, Step::Detach(error) if error.condition == LinkError::MessageSizeExceeded.into())
        );
    }

    #[test]
    fn an_oversized_request_keeps_its_head_to_be_answered_and_no_more() {
        let budget = ReassemblyBudget::new(1 << 20);
        let (mut link, mut out) = (incoming(5), Outbox::default());
        take(&mut link, frame(Some(1), true), b"abcd", &budget, &mut out).unwrap();
        take(&mut link, frame(None, true), b"ef", &budget, &mut out).unwrap();
        assert!(!budget_free(&budget), "the head kept is charged");
        let last = take(&mut link, frame(None, false), b"g", &budget, &mut out).unwrap();
        let Step::Oversized(whole, error) = last else {
            panic!("{last:?}")
        };
        assert_eq!(&whole.bytes[..], b"abcde", "no more than the link's limit");
        assert_eq!(error.condition, LinkError::MessageSizeExceeded.into());
        assert!(
            out.frames.is_empty(),
            "no rejection: the request is answered"
        );
        assert!(budget_free(&budget));

        static BIG: [u8; 2 * REQUEST_HEAD] = [7; 2 * REQUEST_HEAD];
        link.max_message_size = REQUEST_HEAD as u64 + 100;
        let step = take(&mut link, frame(Some(2), false), &BIG, &budget, &mut out).unwrap();
        let Step::Oversized(whole, _) = step else {
            panic!("{step:?}")
        };
        assert_eq!(whole.bytes.len(), REQUEST_HEAD, "no more than its head");
    }

    #[test]
    fn credit_is_topped_up_once_half_is_used() {
        let budget = ReassemblyBudget::new(1 << 20);
        let (mut link, mut out) = (incoming(1 << 20), Outbox::default());
        link.credit = SENDER_CREDIT / 2;
        take(&mut link, frame(Some(1), false), b"a", &budget, &mut out).unwrap();
        assert_eq!(link.credit, SENDER_CREDIT);
        let [FrameBody::Flow(flow)] = &out.frames[..] else {
            panic!("one flow expected: {:?}", out.frames);
        };
        assert_eq!(flow.handle, Some(Handle(7)));
        assert_eq!(flow.link_credit, Some(SENDER_CREDIT));
        assert_eq!(flow.delivery_count, Some(1));
    }

    #[test]
    fn a_whole_message_is_sent_to_its_entity_with_a_ticket_unless_settled() {
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        let mut out = Outbox::default();
        let whole = |settled| Whole {
            delivery_id: 9,
            settled,
            message_format: 0,
            bytes: Bytes::from(fixtures::message(b"abc")),
            txn: None,
        };
        let mut transactions = Transactions::new(Duration::from_secs(60), 1 << 20);
        for settled in [false, true] {
            let context = (&events, &mut transactions);
            let staged = send((entity(false), None), whole(settled), 3, context, &mut out).unwrap();
            assert_eq!(staged, None);
        }
        let replies: Vec<Option<Ticket>> = out
            .posts
            .iter()
            .map(|(_, command)| match command {
                Command::Send { transfers, .. } => {
                    let [Sending { messages, ticket }] = &transfers[..] else {
                        panic!("not one transfer: {transfers:?}");
                    };
                    assert_eq!(messages.len(), 1);
                    *ticket
                }
                other => panic!("not a send: {other:?}"),
            })
            .collect();
        let ticket = Ticket {
            link: 3,
            request: 9,
        };
        assert_eq!(replies, vec![Some(ticket), None]);
    }

    #[test]
    fn a_malformed_message_is_rejected_or_if_settled_detaches_its_link() {
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        let mut out = Outbox::default();
        let whole = |settled| Whole {
            delivery_id: 1,
            settled,
            message_format: 0,
            bytes: Bytes::from_static(&[0x00, 0x53]),
            txn: None,
        };
        let mut transactions = Transactions::new(Duration::from_secs(60), 1 << 20);
        let context = (&events, &mut transactions);
        send((entity(false), None), whole(false), 3, context, &mut out).unwrap();
        assert_eq!(condition(&out.frames[0]), AmqpError::DecodeError.into());
        let context = (&events, &mut transactions);
        let detach = send((entity(false), None), whole(true), 3, context, &mut out).unwrap_err();
        assert_eq!(detach.condition, AmqpError::DecodeError.into());
        assert!(out.posts.is_empty());
    }

    #[test]
    fn a_send_in_a_declared_transaction_is_staged_and_one_in_an_unknown_one_rejected() {
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        let mut out = Outbox::default();
        let mut transactions = Transactions::new(Duration::from_secs(60), 1 << 20);
        let txn = transactions.declare(1, clock::now_ms()).unwrap();
        let whole = |txn: u64| Whole {
            delivery_id: 4,
            settled: false,
            message_format: 0,
            bytes: Bytes::from(fixtures::message(b"abc")),
            txn: Some(transactions::wire_id(txn)),
        };
        let context = (&events, &mut transactions);
        let staged = send((entity(false), None), whole(txn), 3, context, &mut out).unwrap();
        assert_eq!(staged, Some(transactions::wire_id(txn)));
        assert!(matches!(
            &out.posts[..],
            [(_, Command::Stage { txn: staged, work: Work::Send(messages), reply: Some(_) })]
                if *staged == txn && messages.len() == 1
        ));
        let context = (&events, &mut transactions);
        let unknown = send(
            (entity(false), None),
            whole(txn + 1000),
            3,
            context,
            &mut out,
        )
        .unwrap();
        assert_eq!(unknown, None);
        assert_eq!(
            condition(&out.frames[0]),
            TransactionError::UnknownId.into()
        );
        assert_eq!(out.posts.len(), 1, "nothing posted for the refused one");
    }
}
