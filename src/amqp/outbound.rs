//! Client receivers: link credit turned into demand at the entity, drain, and a delivery
//! spliced (header and annotations written into the stored bytes) and framed to the client's
//! frame size (design.md §3, Receive; wire-layer.md §6).

use bytes::Bytes;
use fe2o3_amqp::frames::amqp::FrameBody;
use fe2o3_amqp::types::definitions::{DeliveryTag, Handle};
use fe2o3_amqp::types::performatives::{Flow, Transfer};

use crate::amqp::hot;
use crate::amqp::link::Outgoing;
use crate::amqp::outbox::Outbox;
use crate::entity::handle::{Command, ConsumerId, Delivery, LockRef};
use crate::message;

/// A message the entity sent, ready to be framed.
#[derive(Debug)]
pub struct Ready {
    /// The message bytes as they go on the wire.
    pub payload: Bytes,
    /// Its lock, when it goes out unsettled (peek-lock); its token is the delivery tag.
    pub lock: Option<LockRef>,
    /// The consumer it is for.
    pub consumer: ConsumerId,
    /// Its stored size, reported forwarded once it left for the socket.
    pub size: u64,
}

/// Applies a client `flow` to a receiver link: the credit (AMQP 1.0 §2.6.7), the drain flag,
/// and the demand posted to the entity (unless a drain is under way, or the link's attach is
/// not answered yet: no delivery may precede the attach that names its handle, and a
/// partitioned entity's partitions register one by one; the attach's answer posts the demand).
/// Returns the credit state to echo, when asked (a drain answers with its own flow once the
/// entity drained).
pub fn on_flow(outgoing: &mut Outgoing, flow: &Flow, out: &mut Outbox) -> Option<(u32, u32)> {
    outgoing.apply_flow(
        flow.delivery_count,
        flow.link_credit.unwrap_or(0),
        flow.drain,
    );
    if outgoing.draining == 0 && outgoing.pending_attach.is_none() {
        request_credit(outgoing, out);
    }
    (flow.echo && !outgoing.drain).then_some((outgoing.delivery_count, outgoing.credit))
}

/// Posts the demand that makes what the entity owes match the credit (at each of the link's
/// consumers); with `drain` set, each consumer is also asked to drain (it answers `Drained`,
/// see [`on_drained`]).
pub fn request_credit(outgoing: &mut Outgoing, out: &mut Outbox) {
    for (consumer, limit) in outgoing.credit_limits() {
        out.posts
            .push((outgoing.entity.clone(), Command::Credit { consumer, limit }));
    }
    if outgoing.drain {
        outgoing.draining = outgoing.feeds.len();
        for feed in &outgoing.feeds {
            out.posts.push((
                outgoing.entity.clone(),
                Command::Drain {
                    consumer: feed.consumer,
                },
            ));
        }
    }
}

/// A consumer of the link finished a drain: it owes nothing more. Once every consumer has,
/// the credit left is used up: returns the delivery count for the drain's answering flow
/// (credit 0, drain set), or `None` while consumers are still draining, or when no drain is
/// asked any more (then the demand follows the credit again).
pub fn on_drained(outgoing: &mut Outgoing, consumer: ConsumerId, out: &mut Outbox) -> Option<u32> {
    if let Some(feed) = outgoing.feed_mut(consumer) {
        feed.owed = 0;
    }
    outgoing.draining = outgoing.draining.saturating_sub(1);
    if outgoing.draining > 0 {
        return None;
    }
    if !outgoing.drain {
        request_credit(outgoing, out);
        return None;
    }
    outgoing.delivery_count = outgoing.delivery_count.wrapping_add(outgoing.credit);
    outgoing.credit = 0;
    outgoing.drain = false;
    Some(outgoing.delivery_count)
}

/// Takes a message the entity sent to this link against its credit and splices it. `None`
/// when it went back to the entity untouched (the credit was taken back while it was on its
/// way), or cannot be sent (its stored bytes do not splice: logged, and reported forwarded so
/// that the consumer's window does not shrink).
pub fn take(outgoing: &mut Outgoing, delivery: Delivery, out: &mut Outbox) -> Option<Ready> {
    let owed = outgoing.feed_mut(delivery.consumer).map(|feed| {
        feed.taken += 1;
        feed.owed -= 1;
        feed.owed
    });
    if outgoing.credit == 0 || owed.is_none() {
        // The entity takes it back and stops delivering to that consumer until asked again.
        if let Some(feed) = outgoing.feed_mut(delivery.consumer) {
            feed.owed = 0;
        }
        out.posts.push((
            outgoing.entity.clone(),
            Command::GiveBack {
                delivery: Box::new(delivery),
            },
        ));
        return None;
    }
    outgoing.credit -= 1;
    outgoing.delivery_count = outgoing.delivery_count.wrapping_add(1);
    // A partition that used its share while credit is left gets a new share (the others
    // give back what they no longer need).
    let hungry = owed.is_some_and(|owed| owed <= 0) && outgoing.credit > 0;
    if hungry && outgoing.feeds.len() > 1 && outgoing.draining == 0 {
        request_credit(outgoing, out);
    }
    let size = u64::from(delivery.record.size);
    let payload = match message::splice(&delivery.bytes, &delivery.stamp, &mut outgoing.splice_room)
    {
        Ok(payload) => payload,
        Err(error) => {
            tracing::error!(seq = delivery.seq, %error, "stored message does not splice");
            out.forwarded
                .push((outgoing.entity.clone(), delivery.consumer, size));
            return None;
        }
    };
    let lock = delivery.lock_token.map(|token| LockRef {
        seq: delivery.seq,
        token,
    });
    Some(Ready {
        payload,
        lock,
        consumer: delivery.consumer,
        size,
    })
}

/// The first transfer of a delivery the broker sends: settled (pre-settled) or not, with its
/// delivery tag.
pub fn transfer(local_handle: u32, delivery_id: u32, tag: Vec<u8>, settled: bool) -> Transfer {
    Transfer {
        handle: Handle(local_handle),
        delivery_id: Some(delivery_id),
        delivery_tag: Some(DeliveryTag::from(tag)),
        message_format: Some(0),
        settled: Some(settled),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

/// The delivery tag of a message to a client receiver: a locked message's is its lock token;
/// a pre-settled one's is empty, as Service Bus sends it (the Python SDK's receive-and-delete
/// messages have none).
pub fn delivery_tag(lock: Option<&LockRef>) -> Vec<u8> {
    lock.map_or_else(Vec::new, |lock| lock.token.to_bytes_le().to_vec())
}

/// Splits one delivery into transfer frames that each fit `max_frame` (wire-layer.md §6),
/// handing each to `emit` in order, with whether it is the last.
pub fn split_transfer(
    first: Transfer,
    mut rest: Bytes,
    max_frame: usize,
    mut emit: impl FnMut(FrameBody, bool),
) {
    let mut performative = first;
    loop {
        performative.more = true;
        let overhead = 8 + hot::transfer_len(&performative);
        let room = max_frame.saturating_sub(overhead).max(1);
        let chunk = if rest.len() > room {
            rest.split_to(room)
        } else {
            std::mem::take(&mut rest)
        };
        performative.more = !rest.is_empty();
        let more = performative.more;
        let handle = performative.handle.clone();
        let frame = FrameBody::Transfer {
            performative,
            payload: chunk,
        };
        emit(frame, !more);
        if !more {
            return;
        }
        performative = Transfer {
            handle,
            delivery_id: None,
            delivery_tag: None,
            message_format: None,
            settled: None,
            more: true,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::fixtures::{self, link_flow as flow, outgoing};
    use crate::amqp::link::Feed;

    fn delivery(bytes: &'static [u8], locked: bool) -> Delivery {
        fixtures::delivery(42, bytes.to_vec(), locked)
    }

    /// What was posted, one word per command.
    fn posted(out: &Outbox) -> Vec<String> {
        out.posts
            .iter()
            .map(|(_, command)| match command {
                Command::Credit { limit, .. } => format!("limit {limit}"),
                Command::Drain { .. } => "drain".to_owned(),
                Command::GiveBack { .. } => "give back".to_owned(),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn credit_becomes_demand_at_the_entity_and_is_echoed_when_asked() {
        let (mut link, mut out) = (outgoing(), Outbox::default());
        assert_eq!(
            on_flow(&mut link, &flow(0, 10, false, false), &mut out),
            None
        );
        assert_eq!(
            on_flow(&mut link, &flow(0, 10, false, true), &mut out),
            Some((0, 10))
        );
        assert_eq!(
            on_flow(&mut link, &flow(0, 4, false, false), &mut out),
            None
        );
        assert_eq!(posted(&out), ["limit 10", "limit 4"]);
    }

    #[test]
    fn a_drain_asks_the_entity_and_ends_with_the_credit_used_up() {
        let (mut link, mut out) = (outgoing(), Outbox::default());
        assert_eq!(on_flow(&mut link, &flow(0, 5, true, true), &mut out), None);
        assert_eq!(link.draining, 1);
        assert_eq!(posted(&out), ["limit 5", "drain"]);
        // The client's next flow while the drain is under way posts nothing.
        on_flow(&mut link, &flow(0, 5, true, false), &mut out);
        assert_eq!(out.posts.len(), 2);
        assert_eq!(on_drained(&mut link, ConsumerId(1), &mut out), Some(5));
        assert_eq!((link.credit, link.delivery_count, link.draining), (0, 5, 0));
        // A drain that the client took back before it finished: the demand follows the credit.
        link.credit = 3;
        assert_eq!(on_drained(&mut link, ConsumerId(1), &mut out), None);
        assert_eq!(posted(&out).last().map(String::as_str), Some("limit 3"));
    }

    #[test]
    fn a_delivery_that_finds_no_credit_goes_back_untouched() {
        let (mut link, mut out) = (outgoing(), Outbox::default());
        link.feeds[0].owed = 1;
        assert!(take(
            &mut link,
            delivery(b"\x00\x53\x75\xa0\x01x", true),
            &mut out
        )
        .is_none());
        assert_eq!(posted(&out), ["give back"]);
        assert_eq!(link.feeds[0].owed, 0);
    }

    #[test]
    fn a_partition_that_used_its_share_gets_more_while_credit_is_left() {
        let (mut link, mut out) = (outgoing(), Outbox::default());
        link.feeds = (0..2)
            .map(|partition| Feed {
                consumer: ConsumerId::at(1, partition),
                owed: 0,
                taken: 0,
            })
            .collect();
        on_flow(&mut link, &flow(0, 4, false, false), &mut out);
        assert_eq!(posted(&out), ["limit 2", "limit 2"]);
        for _ in 0..2 {
            let mut from_first = delivery(b"\x00\x53\x75\xa0\x01x", true);
            from_first.consumer = ConsumerId::at(1, 0);
            assert!(take(&mut link, from_first, &mut out).is_some());
        }
        // Two credits left, the first partition owes none: it is owed one again (with the two
        // the second owes, one past the credit at most).
        assert_eq!(posted(&out), ["limit 2", "limit 2", "limit 3"]);
        let mut stray = delivery(b"\x00\x53\x75\xa0\x01x", true);
        stray.consumer = ConsumerId::at(1, 5);
        assert!(
            take(&mut link, stray, &mut out).is_none(),
            "not a consumer of the link"
        );
    }

    #[test]
    fn a_delivery_is_spliced_counted_and_tagged_with_its_lock_token() {
        let (mut link, mut out) = (outgoing(), Outbox::default());
        link.credit = 2;
        let ready = take(
            &mut link,
            delivery(b"\x00\x53\x75\xa0\x01x", true),
            &mut out,
        )
        .unwrap();
        assert_eq!((link.credit, link.delivery_count), (1, 1));
        let lock = ready.lock.expect("peek-lock");
        assert_eq!(lock.seq, 42);
        assert_eq!(delivery_tag(Some(&lock)), lock.token.to_bytes_le().to_vec());
        assert!(ready.payload.ends_with(b"\x00\x53\x75\xa0\x01x"));
        let presettled = take(
            &mut link,
            delivery(b"\x00\x53\x75\xa0\x01y", false),
            &mut out,
        );
        assert!(presettled.unwrap().lock.is_none());
        assert!(delivery_tag(None).is_empty());
    }

    #[test]
    fn a_stored_message_that_does_not_splice_is_reported_forwarded_not_sent() {
        let (mut link, mut out) = (outgoing(), Outbox::default());
        link.credit = 1;
        assert!(take(&mut link, delivery(b"\x00\x53", true), &mut out).is_none());
        assert_eq!(out.forwarded.len(), 1);
        assert_eq!(out.forwarded[0].2, 2);
    }

    #[test]
    fn a_delivery_is_split_into_frames_that_fit_and_only_the_first_names_it() {
        let split = |transfer, payload, max| {
            let mut frames = Vec::new();
            split_transfer(transfer, payload, max, |frame, last| {
                frames.push((frame, last))
            });
            frames
        };
        let frames = split(
            transfer(3, 11, vec![1; 16], false),
            Bytes::from(vec![7u8; 1000]),
            256,
        );
        assert!(frames.len() > 4);
        let mut total = 0;
        for (index, (frame, last)) in frames.iter().enumerate() {
            let FrameBody::Transfer {
                performative,
                payload,
            } = frame
            else {
                panic!("not a transfer");
            };
            assert!(8 + hot::transfer_len(performative) + payload.len() <= 256);
            assert_eq!(performative.more, index + 1 < frames.len());
            assert_eq!(*last, index + 1 == frames.len());
            assert_eq!(performative.delivery_id.is_some(), index == 0);
            total += payload.len();
        }
        assert_eq!(total, 1000);
        let one = split(transfer(3, 12, Vec::new(), true), Bytes::new(), 256);
        assert_eq!(one.len(), 1, "an empty delivery is one frame");
        assert!(one[0].1, "and its last");
    }
}
